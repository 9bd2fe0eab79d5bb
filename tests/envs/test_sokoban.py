"""Sokoban: hand-checked push rules, rewards, generator and solver."""

import collections
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl import envs, rewards
from agentic_rl.envs import sokoban as sk
from agentic_rl.envs.parsing import parse_tags
from agentic_rl.types import ActionKind, FailureCode, Task, Trajectory, Turn

UP, DOWN, LEFT, RIGHT = range(4)

# Player right of two boxes in a row; a target under each box column.
ROWS = [
  "#######",
  "#_____#",
  "#_$$@_#",
  "#_.._##",
  "#######",
]


def cell(r: int, c: int, width: int = 7) -> int:
  return r * width + c


def hand_task(rows: list[str]) -> Task:
  return Task(id="hand", family="sokoban", payload={"rows": rows})


def test_parse_and_render_round_trip():
  level, state = sk.parse_level(ROWS)
  assert (level.height, level.width) == (5, 7)
  assert state.player == cell(2, 4)
  assert state.boxes == {cell(2, 2), cell(2, 3)}
  assert level.targets == {cell(3, 2), cell(3, 3)}
  assert sk.render(level, state).split("\n") == ROWS
  assert sk.state_key(state) == f"{cell(2, 4)}:{cell(2, 2)},{cell(2, 3)}"


def test_cannot_push_two_boxes():
  level, state = sk.parse_level(ROWS)
  assert sk.transition(level, state, LEFT) == state
  assert LEFT not in sk.legal_moves(level, state)


def test_walls_block_walking_and_pushing():
  level, state = sk.parse_level(ROWS)
  # Right then Right again: the second move walks into the east wall.
  s1 = sk.transition(level, state, RIGHT)
  assert s1.player == cell(2, 5)
  assert sk.transition(level, s1, RIGHT) == s1
  # A box against the north wall cannot be pushed further north.
  level2, state2 = sk.parse_level(
    ["######", "#_$__#", "#_@__#", "#_.__#", "######"]
  )
  assert sk.transition(level2, state2, UP) == state2


def test_push_moves_box_and_player():
  level, state = sk.parse_level(ROWS)
  s = sk.transition(level, state, UP)  # to (1, 4)
  s = sk.transition(level, s, LEFT)  # to (1, 3)
  s = sk.transition(level, s, DOWN)  # pushes box (2,3) onto target (3,3)
  assert s.player == cell(2, 3)
  assert s.boxes == {cell(2, 2), cell(3, 3)}
  # Down would push the box into the south wall; Left pushes (2,2) west.
  assert sorted(sk.legal_moves(level, s)) == [UP, LEFT, RIGHT]


def test_rewards_step_penalty_box_and_solve():
  env = envs.make("sokoban")
  env.reset(hand_task(ROWS))
  plan = ["Up", "Left", "Down", "Up", "Left", "Down"]
  results = [env.step(f"<answer>{m}</answer>") for m in plan]
  assert [r.failure for r in results] == [None] * 6
  assert results[0].reward_components == {"step": -0.1, "box": 0.0}
  assert results[2].reward_components == {"step": -0.1, "box": 1.0}
  assert results[-1].reward_components == {
    "step": -0.1,
    "box": 1.0,
    "solved": 10.0,
  }
  assert results[-1].done and not any(r.done for r in results[:-1])
  # state_key is the state the action was taken in.
  _, start = sk.parse_level(ROWS)
  assert results[0].state_key == sk.state_key(start)


def test_pushing_off_a_target_costs_box_reward():
  env = envs.make("sokoban")
  env.reset(hand_task(["######", "#@*__#", "#_$.##", "######"]))
  r = env.step("<answer>Right</answer>")
  assert r.reward_components == {"step": -0.1, "box": -1.0}
  assert r.observation.split("\n")[1] == "#_+$_#"


def test_failures_and_budget():
  env = envs.make("sokoban", max_steps=4, max_actions_per_turn=2)
  env.reset(hand_task(ROWS))
  cases = {
    "Up": FailureCode.MALFORMED_CALL,
    "<answer>Jump</answer>": FailureCode.BAD_ARGUMENTS,
    "<answer>Up, Up, Up</answer>": FailureCode.BAD_ARGUMENTS,
    "<search>how to push</search>": FailureCode.UNKNOWN_TOOL,
  }
  _, start = sk.parse_level(ROWS)
  for i, (text, code) in enumerate(cases.items()):
    r = env.step(text)
    assert r.failure == code, text
    assert env.state == start  # a failed turn changes nothing
    assert r.reward_components == {"step": -0.1}
    assert r.done == (i >= 3)  # each failed turn spends one step of 4
  r = env.step("<answer>Up</answer>")
  assert r.done and r.failure == FailureCode.BUDGET_EXHAUSTED


def test_running_out_of_moves_unsolved_is_budget_exhausted():
  env = envs.make("sokoban", max_steps=2)
  task = hand_task(ROWS)
  env.reset(task)
  turns = []
  for move in ("Right", "Left"):  # walk to (2,5) and back: nothing pushed
    r = env.step(f"<answer>{move}</answer>")
    turns.append(
      Turn(
        [1],
        [2],
        [0.0],
        parse_tags(f"<answer>{move}</answer>"),
        failure=r.failure,
        reward_components=dict(r.reward_components),
        state_key=r.state_key,
      )
    )
  assert turns[0].failure is None
  assert r.done and r.failure == FailureCode.BUDGET_EXHAUSTED
  assert r.reward_components == {"step": -0.1, "box": 0.0}
  scored = rewards.RewardStack().score_trajectory(
    Trajectory(task=task, group_id=0, turns=turns)
  )
  # The default budget penalty is 0: the rewards are the moves' -0.1 each.
  assert [t.reward for t in scored.turns] == pytest.approx([-0.1, -0.1])
  assert rewards.diagnose(scored) == rewards.COULD_NOT


def test_solving_on_the_last_move_is_not_a_failure():
  env = envs.make("sokoban", max_steps=6, max_actions_per_turn=6)
  env.reset(hand_task(ROWS))
  r = env.step("<answer>Up Left Down Up Left Down</answer>")
  assert r.done and r.info["solved"] and r.failure is None


def test_several_moves_per_turn_stop_at_solve():
  env = envs.make("sokoban", max_actions_per_turn=8)
  env.reset(hand_task(ROWS))
  r = env.step(
    "<think>plan</think><answer>Up Left Down||Up, Left Down Up</answer>"
  )
  assert r.failure is None and r.done
  assert r.info["moves"] == 6  # the trailing Up after the solve is not run
  assert r.reward_components["solved"] == 10.0
  assert r.reward_components["step"] == pytest.approx(-0.6)


def test_unenclosed_level_is_rejected():
  with pytest.raises(ValueError, match="enclosed"):
    sk.parse_level(["#####", "#@$._", "#####"])


@pytest.mark.parametrize("difficulty", sorted(sk.DIFFICULTIES))
def test_generated_levels_respect_sizes_and_are_solved(difficulty):
  height, width, boxes, _, min_moves = sk.DIFFICULTIES[difficulty]
  env = envs.make("sokoban")
  for seed in range(3):
    task = env.generate_task(seed, difficulty)
    assert task.id == f"sokoban/d{difficulty}/s{seed}"
    assert json.loads(json.dumps(task.to_dict())) == task.to_dict()
    level, start = sk.task_level(task)
    assert (level.height, level.width) == (height, width)
    assert len(start.boxes) == len(level.targets) == boxes
    assert not start.boxes & level.targets
    border = [i for i in range(height * width) if _on_border(i, level)]
    assert all(i in level.walls for i in border)
    solution = sk.solve(level, start)
    assert len(solution) == task.payload["optimal_moves"] >= min_moves
    # The scripted expert plays it through the environment.
    env.reset(task)
    for text in env.expert_actions(task):
      r = env.step(text)
    assert r.done and r.reward_components["solved"] == 10.0


def _on_border(i: int, level: sk.Level) -> bool:
  r, c = divmod(i, level.width)
  return r in (0, level.height - 1) or c in (0, level.width - 1)


def test_generation_is_deterministic():
  a = envs.make("sokoban").generate_task(11, 2)
  b = envs.make("sokoban").generate_task(11, 2)
  assert a == b
  assert a.payload != envs.make("sokoban").generate_task(12, 2).payload


def test_state_graph_matches_transition():
  level, start = sk.parse_level(ROWS)
  states, next_Nx4 = sk.state_graph(level, start)
  assert states[0] == start and len(set(states)) == len(states)
  for i, s in enumerate(states):
    for m in range(4):
      want = s if sk.is_solved(level, s) else sk.transition(level, s, m)
      assert states[next_Nx4[i, m]] == want


def _bfs_length(level: sk.Level, start: sk.State) -> int:
  states, next_Nx4 = sk.state_graph(level, start)
  dist = {0: 0}
  queue = collections.deque([0])
  while queue:
    i = queue.popleft()
    if sk.is_solved(level, states[i]):
      return dist[i]
    for j in next_Nx4[i]:
      if int(j) not in dist:
        dist[int(j)] = dist[i] + 1
        queue.append(int(j))
  return -1


@pytest.mark.parametrize("difficulty", [0, 1, 2])
def test_astar_is_optimal_against_exhaustive_bfs(difficulty):
  env = envs.make("sokoban")
  for seed in range(3):
    level, start = sk.task_level(env.generate_task(seed, difficulty))
    assert len(sk.solve(level, start)) == _bfs_length(level, start)
  level, start = sk.parse_level(ROWS)
  assert len(sk.solve(level, start)) == _bfs_length(level, start) == 6


def test_unsolvable_level_returns_none():
  # Box in a corner, away from its target: a dead square.
  level, start = sk.parse_level(["######", "#$__.#", "#___@#", "######"])
  assert sk.solve(level, start) is None


def test_push_distances_lower_bound_and_dead_squares():
  level, _ = sk.parse_level(["######", "#$__.#", "#___@#", "######"])
  dist = sk.push_distances(level)
  assert dist[cell(1, 4, 6)] == 0
  assert cell(1, 1, 6) not in dist  # corner: dead
  assert dist[cell(1, 2, 6)] == 2


def test_reverse_walk_keeps_box_count_and_floor():
  rng = np.random.default_rng(0)
  level, start, solution = sk.generate_level(rng, 8, 8, 2, 60, min_moves=1)
  assert len(start.boxes) == 2
  assert not (start.boxes | {start.player}) & level.walls
  state = start
  for m in solution:
    state = sk.transition(level, state, m)
  assert sk.is_solved(level, state)


def _reference_moves(text: str, max_moves: int):
  """parse_moves without its fast path: parse_tags, then the move names."""
  action = parse_tags(text)
  if action.kind is ActionKind.MALFORMED:
    return [], FailureCode.MALFORMED_CALL
  if action.kind is ActionKind.TOOL_CALL:
    return [], FailureCode.UNKNOWN_TOOL
  words = re.split(r"[\s,;|]+", action.text.strip())
  if len(words) > max_moves or any(
    w.lower() not in sk.MOVE_INDEX for w in words
  ):
    return [], FailureCode.BAD_ARGUMENTS
  return [sk.MOVE_INDEX[w.lower()] for w in words], None


_PIECES = st.sampled_from(
  [
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<search>",
    " ",
    "\n",
    ",",
    "||",
    "Up",
    "down",
    "LEFT",
    "x",
    "",
    "\t",
  ]
)


@settings(max_examples=300, deadline=None)
@given(
  text=st.one_of(
    st.text(max_size=30), st.lists(_PIECES, max_size=10).map("".join)
  ),
  max_moves=st.integers(1, 3),
)
def test_parse_moves_fast_path_agrees_with_parse_tags(text, max_moves):
  moves, failure, _ = sk.parse_moves(text, sk.MOVE_INDEX, max_moves)
  assert (moves, failure) == _reference_moves(text, max_moves)
