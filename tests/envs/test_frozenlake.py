"""FrozenLake: parity with gymnasium FrozenLake-v1, maps, sampling, expert."""

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import MAPS, FrozenLakeEnv

from agentic_rl import envs
from agentic_rl.envs import frozenlake as fl
from agentic_rl.types import FailureCode, Task


def answer(a: int) -> str:
  return f"<answer>{fl.MOVES[a]}</answer>"


def maps() -> list[list[str]]:
  generated = [
    envs.make("frozenlake").generate_task(seed, d).payload["rows"]
    for d in sorted(fl.DIFFICULTIES)
    for seed in range(2)
  ]
  return [MAPS["4x4"], MAPS["8x8"], *generated]


def task_of(rows: list[str], slippery: bool) -> Task:
  return Task(
    id="m", family="frozenlake", payload={"rows": rows, "slippery": slippery}
  )


@pytest.mark.parametrize("slippery", [False, True])
def test_transition_model_equals_gymnasium(slippery):
  env = envs.make("frozenlake")
  for rows in maps():
    env.reset(task_of(rows, slippery))
    reference = gym.make(
      "FrozenLake-v1", desc=rows, is_slippery=slippery
    ).unwrapped.P
    mine = env.transition_model()
    assert mine == reference
    # Same types too, so float probabilities are bit-identical.
    for s in reference:
      for a in reference[s]:
        for got, want in zip(mine[s][a], reference[s][a], strict=True):
          assert got[0].hex() == float(want[0]).hex()


def test_slippery_trajectories_match_gymnasium_for_same_seed():
  rows = maps()[3]
  env = envs.make("frozenlake", slippery=True)
  reference = FrozenLakeEnv(desc=rows, is_slippery=True)
  actions = np.random.default_rng(0).integers(4, size=(20, 40))
  for episode, moves in enumerate(actions):
    s0, _ = reference.reset(seed=episode)
    env.reset(task_of(rows, True), seed=episode)
    assert env.s == s0
    for a in moves:
      s, r, terminated, _, _ = reference.step(int(a))
      result = env.step(answer(int(a)))
      assert (env.s, result.reward_components["success"]) == (s, float(r))
      assert result.done == terminated
      if terminated:
        break


def test_empirical_frequencies_match_model():
  rows = maps()[1]  # gymnasium's 8x8 map
  env = envs.make("frozenlake", max_steps=10**9)
  task = task_of(rows, True)
  env.reset(task, seed=123)
  model = env.transition_model()
  rng = np.random.default_rng(1)
  counts: dict = {}
  episodes = 0
  for _ in range(30_000):
    if env.done:
      episodes += 1
      env.reset(task, seed=123 + episodes)
    s, a = env.s, int(rng.integers(4))
    env.step(answer(a))
    counts.setdefault((s, a), []).append(env.s)
  checked = 0
  for (s, a), nexts in counts.items():
    n = len(nexts)
    if n < 300:
      continue
    expected: dict = {}
    for p, t, _, _ in model[s][a]:
      expected[t] = expected.get(t, 0.0) + p
    assert set(nexts) <= set(expected)
    for t, p in expected.items():
      freq = nexts.count(t) / n
      # Five standard errors: a false alarm has probability ~1e-6 per cell.
      assert abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12
    checked += 1
  assert checked >= 20


def test_deterministic_variant_is_deterministic():
  rows = maps()[0]
  env = envs.make("frozenlake")
  env.reset(task_of(rows, False), seed=5)
  path = [env.step(answer(a)).state_key for a in (1, 1, 2, 1)]
  env.reset(task_of(rows, False), seed=99)
  assert [env.step(answer(a)).state_key for a in (1, 1, 2, 1)] == path
  assert path == ["s0", "s4", "s8", "s9"]


@pytest.mark.parametrize("difficulty", sorted(fl.DIFFICULTIES))
def test_generated_maps(difficulty):
  size, _ = fl.DIFFICULTIES[difficulty]
  env = envs.make("frozenlake", slippery=True)
  for seed in range(5):
    task = env.generate_task(seed, difficulty)
    assert task == env.generate_task(seed, difficulty)
    assert json.loads(json.dumps(task.to_dict())) == task.to_dict()
    rows = task.payload["rows"]
    assert len(rows) == size and {len(r) for r in rows} == {size}
    assert rows[0][0] == "S" and rows[-1][-1] == "G"
    assert set("".join(rows)) <= set("SFHG")
    assert fl.has_path(rows)
    assert task.payload["slippery"] is True


def test_has_path():
  assert fl.has_path(["SF", "FG"])
  assert not fl.has_path(["SH", "HG"])
  assert not fl.has_path(["SFH", "HHF", "FFG"])


@pytest.mark.parametrize("difficulty", sorted(fl.DIFFICULTIES))
def test_expert_solves_deterministic_maps(difficulty):
  env = envs.make("frozenlake")
  for seed in range(3):
    task = env.generate_task(seed, difficulty)
    actions = env.expert_actions(task)
    env.reset(task)
    for text in actions:
      result = env.step(text)
    assert result.done and result.reward_components == {"success": 1.0}
    # Value iteration with gamma < 1 takes a shortest path.
    assert len(actions) == _shortest(task.payload["rows"])


def _shortest(rows: list[str]) -> int:
  model = fl.transition_model(rows, slippery=False)
  frontier, seen, depth = {0}, {0}, 0
  while True:
    depth += 1
    nxt = set()
    for s in frontier:
      for a in range(4):
        _, t, r, done = model[s][a][0]
        if r == 1:
          return depth
        if not done and t not in seen:
          seen.add(t)
          nxt.add(t)
    frontier = nxt


def test_slippery_expert_value_matches_gymnasium_rollouts():
  # Undiscounted optimal success probability on gymnasium's 4x4 map, then the
  # greedy policy evaluated by rolling out gymnasium's own environment.
  rows = MAPS["4x4"]
  values, policy = fl.value_iteration(
    fl.transition_model(rows, True), gamma=1.0, tol=1e-12
  )
  assert values[0] == pytest.approx(0.8235, abs=1e-3)
  reference = FrozenLakeEnv(desc=rows, is_slippery=True)
  wins, episodes = 0, 1500
  for episode in range(episodes):
    s, _ = reference.reset(seed=episode)
    for _ in range(1000):
      s, r, terminated, _, _ = reference.step(int(policy[s]))
      if terminated:
        wins += r
        break
  assert wins / episodes == pytest.approx(values[0], abs=0.035)


def test_failures_and_multi_move_turns():
  rows = MAPS["4x4"]
  env = envs.make("frozenlake", max_actions_per_turn=3, max_steps=10)
  env.reset(task_of(rows, False))
  assert env.step("Down").failure == FailureCode.MALFORMED_CALL
  assert env.step("<answer>Jump</answer>").failure == FailureCode.BAD_ARGUMENTS
  r = env.step("<answer>Down Down Down Down</answer>")
  assert r.failure == FailureCode.BAD_ARGUMENTS
  assert env.s == 0
  r = env.step("<answer>down, down, right</answer>")
  assert r.failure is None and r.info["path"] == [4, 8, 9]
  assert r.state_key == "s0" and env.state_key() == "s9"
  assert r.observation.split("\n")[2] == "F@FH"
  r = env.step("<answer>Down Right Right</answer>")  # 13, 14, 15 = goal
  assert r.done and r.reward_components == {"success": 1.0}
  assert env.step(answer(0)).failure == FailureCode.BUDGET_EXHAUSTED


def test_running_out_of_moves_on_the_ice_is_budget_exhausted():
  env = envs.make("frozenlake", max_steps=2)
  env.reset(task_of(MAPS["4x4"], False))
  r = env.step(answer(0))  # Left into the edge: stays on S
  assert not r.done and r.failure is None
  r = env.step(answer(0))
  assert r.done and r.failure == FailureCode.BUDGET_EXHAUSTED
  assert r.reward_components == {"success": 0.0}
  # A hole on the last move is a result, not a stall.
  env.reset(task_of(MAPS["4x4"], False))
  env.step(answer(2))  # to 1
  r = env.step(answer(1))  # to 5, a hole
  assert r.done and r.failure is None


def test_falling_in_a_hole_ends_without_reward():
  env = envs.make("frozenlake")
  env.reset(task_of(MAPS["4x4"], False))
  r = env.step(answer(2))  # to 1
  r = env.step(answer(1))  # to 5, a hole
  assert r.done and r.reward_components == {"success": 0.0}
