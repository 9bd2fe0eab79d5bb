"""FrozenLake with gymnasium FrozenLake-v1's exact transition model.

The agent walks from S to G on a grid of frozen (F) cells and holes (H).
Holes and the goal end the episode; reaching G pays 1 (reward component
`success`, 0 on every other step); a valid turn that uses up `max_steps`
on the ice ends it with `FailureCode.BUDGET_EXHAUSTED`. In the slippery
variant a move goes the intended way with probability 1/3 and to each of the
two perpendicular directions with (1 - 1/3) / 2, computed as gymnasium does
so that `transition_model()` equals `gymnasium.make("FrozenLake-v1",
desc=..., is_slippery=...).unwrapped.P` entry for entry.

Rendering: the map rows with the agent's cell shown as `@`. Actions:
`<answer>Left</answer>` (Left, Down, Right, Up: gymnasium's action ids 0-3),
several per turn when `max_actions_per_turn > 1`.

Slippery outcomes come from `numpy.random.default_rng(seed)` of `reset`,
drawn like gymnasium's `categorical_sample` (one draw at reset for the start
state, one per move), so the same seed and moves give the same trajectory as
gymnasium's environment reset with that seed.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import numpy as np

from agentic_rl.envs.base import (
  Environment,
  StepResult,
  check_budget,
  episode_over,
  register,
)
from agentic_rl.envs.sokoban import parse_moves
from agentic_rl.types import FailureCode, Task

MOVES = ("Left", "Down", "Right", "Up")
MOVE_INDEX = {m.lower(): i for i, m in enumerate(MOVES)}
_STEP = ((0, -1), (1, 0), (0, 1), (-1, 0))
SUCCESS_RATE = 1.0 / 3.0

# (size, probability a cell is frozen) per difficulty level.
DIFFICULTIES: dict[int, tuple[int, float]] = {
  0: (4, 0.85),
  1: (5, 0.8),
  2: (6, 0.8),
  3: (8, 0.8),
}

# P[s][a] = [(probability, next_state, reward, terminated), ...]
TransitionModel = dict[int, dict[int, list[tuple[float, int, int, bool]]]]


def has_path(rows: list[str]) -> bool:
  """Whether G is reachable from S through non-hole cells."""
  nrow, ncol = len(rows), len(rows[0])
  start = next(
    (r, c) for r in range(nrow) for c in range(ncol) if rows[r][c] == "S"
  )
  seen, todo = {start}, collections.deque([start])
  while todo:
    r, c = todo.popleft()
    if rows[r][c] == "G":
      return True
    for dr, dc in _STEP:
      nr, nc = r + dr, c + dc
      if 0 <= nr < nrow and 0 <= nc < ncol and (nr, nc) not in seen:
        if rows[nr][nc] != "H":
          seen.add((nr, nc))
          todo.append((nr, nc))
  return False


def random_map(
  rng: np.random.Generator, size: int, p_frozen: float
) -> list[str]:
  """A size x size map, S top-left and G bottom-right, with a path between.

  Resamples whole maps until one has a path, so the map distribution is the
  hole distribution conditioned on solvability.
  """
  while True:
    holes = rng.random((size, size)) >= p_frozen
    rows = [
      "".join("H" if holes[r, c] else "F" for c in range(size))
      for r in range(size)
    ]
    rows[0] = "S" + rows[0][1:]
    rows[-1] = rows[-1][:-1] + "G"
    if has_path(rows):
      return rows


def transition_model(rows: list[str], slippery: bool) -> TransitionModel:
  """The exact transition model, in gymnasium's `P` layout and order."""
  nrow, ncol = len(rows), len(rows[0])
  fail_rate = (1.0 - SUCCESS_RATE) / 2.0

  def outcome(r: int, c: int, a: int) -> tuple[int, int, bool]:
    dr, dc = _STEP[a]
    # Moving off the edge leaves the agent where it is.
    nr = min(max(r + dr, 0), nrow - 1)
    nc = min(max(c + dc, 0), ncol - 1)
    letter = rows[nr][nc]
    return nr * ncol + nc, int(letter == "G"), letter in "GH"

  model: TransitionModel = {}
  for r in range(nrow):
    for c in range(ncol):
      s = r * ncol + c
      model[s] = {}
      for a in range(4):
        if rows[r][c] in "GH":
          model[s][a] = [(1.0, s, 0, True)]
        elif slippery:
          # Perpendicular slips first and last, the intended move between.
          model[s][a] = [
            (SUCCESS_RATE if b == a else fail_rate, *outcome(r, c, b))
            for b in ((a - 1) % 4, a, (a + 1) % 4)
          ]
        else:
          model[s][a] = [(1.0, *outcome(r, c, a))]
  return model


def value_iteration(
  model: TransitionModel, gamma: float = 0.99, tol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
  """Optimal values and a greedy policy (lowest action id on ties)."""
  n = len(model)
  # Dense tensors make each sweep a couple of numpy ops.
  prob_SxAxS = np.zeros((n, 4, n))
  reward_SxA = np.zeros((n, 4))
  cont_SxAxS = np.zeros((n, 4, n))
  for s, by_action in model.items():
    for a, outcomes in by_action.items():
      for p, t, r, done in outcomes:
        prob_SxAxS[s, a, t] += p
        reward_SxA[s, a] += p * r
        if not done:
          cont_SxAxS[s, a, t] += p
  value_S = np.zeros(n)
  while True:
    q_SxA = reward_SxA + gamma * cont_SxAxS @ value_S
    new_S = q_SxA.max(axis=1)
    if np.max(np.abs(new_S - value_S)) < tol:
      return new_S, q_SxA.argmax(axis=1)
    value_S = new_S


def expert_policy(task: Task) -> list[int]:
  """The value-iteration action (gymnasium id) for every cell."""
  model = transition_model(task.payload["rows"], task.payload["slippery"])
  return [int(a) for a in value_iteration(model)[1]]


@functools.lru_cache(maxsize=1024)
def _compile(
  rows: tuple[str, ...], slippery: bool
) -> tuple[dict[tuple[int, int], tuple[list[float], list]], list[str]]:
  """Per (state, action): cumulative probabilities and outcomes, so a step
  is one uniform draw and a short scan; and every state's rendering."""
  model = transition_model(list(rows), slippery)
  table = {
    (s, a): (np.cumsum([o[0] for o in outs]).tolist(), outs)
    for s, by_action in model.items()
    for a, outs in by_action.items()
  }
  return table, [render(list(rows), s) for s in range(len(model))]


def render(rows: list[str], s: int) -> str:
  r, c = divmod(s, len(rows[0]))
  out = list(rows)
  out[r] = out[r][:c] + "@" + out[r][c + 1 :]
  return "\n".join(out)


@register("frozenlake")
class FrozenLake(Environment):
  """FrozenLake-v1 dynamics on seeded random maps; `slippery` picks the
  variant of generated tasks (a task's payload fixes its own variant)."""

  name = "frozenlake"

  def __init__(
    self,
    slippery: bool = False,
    max_steps: int = 100,
    max_actions_per_turn: int = 1,
    instructions: bool = True,
  ):
    self.slippery = slippery
    check_budget("max_steps", max_steps)
    check_budget("max_actions_per_turn", max_actions_per_turn)
    self.max_steps = max_steps
    self.max_actions_per_turn = max_actions_per_turn
    self.instructions = instructions
    self.done = True

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    if difficulty not in DIFFICULTIES:
      raise ValueError(f"difficulty must be in {sorted(DIFFICULTIES)}")
    size, p_frozen = DIFFICULTIES[difficulty]
    rng = np.random.default_rng([seed, difficulty, 0xF0])
    variant = "slippery" if self.slippery else "det"
    return Task(
      id=f"frozenlake/{variant}/d{difficulty}/s{seed}",
      family=self.name,
      difficulty=difficulty,
      seed=seed,
      payload={
        "rows": random_map(rng, size, p_frozen),
        "slippery": self.slippery,
      },
    )

  def reset(self, task: Task, seed: int = 0) -> str:
    self.rows = list(task.payload["rows"])
    # The task fixes its own variant; `self.slippery` only shapes new tasks.
    self.task_slippery = bool(task.payload["slippery"])
    self._table, self._frames = _compile(tuple(self.rows), self.task_slippery)
    self.rng = np.random.default_rng(seed)
    self.rng.random()  # gymnasium's draw of the (point-mass) start state
    self.s = "".join(self.rows).index("S")
    self.steps = 0
    self.done = False
    if not self.instructions:
      return self._frames[self.s]
    return (
      "Walk from S to the goal G without falling into a hole H; the ice may"
      " be slippery. @ is you. Moves: Left Down Right Up.\n"
      + self._frames[self.s]
    )

  def transition_model(self) -> TransitionModel:
    """P[s][a] = [(prob, next_s, reward, done), ...] as gymnasium builds it."""
    return transition_model(self.rows, self.task_slippery)

  def state_key(self, s: int | None = None) -> str:
    return f"s{self.s if s is None else s}"

  def expert_actions(self, task: Task, seed: int = 0) -> list[str]:
    """The value-iteration policy rolled out with reset seed `seed`."""
    policy = expert_policy(task)
    env = FrozenLake(max_steps=self.max_steps, instructions=False)
    env.reset(task, seed)
    actions = []
    while not env.done:
      text = f"<answer>{MOVES[policy[env.s]]}</answer>"
      actions.append(text)
      env.step(text)
    return actions

  def step(self, action_text: str) -> StepResult:
    key = f"s{self.s}"
    if self.done:
      return episode_over(self._frames[self.s], key)
    moves, failure, reason = parse_moves(
      action_text, MOVE_INDEX, self.max_actions_per_turn
    )
    if failure is not None:
      self.steps += 1
      self.done = self.steps >= self.max_steps
      return StepResult(
        f"Invalid action ({reason}).\n" + self._frames[self.s],
        {"success": 0.0},
        self.done,
        failure,
        key,
        {"reason": reason},
      )
    reward = 0
    terminated = False
    path = []
    for a in moves:
      cum, outs = self._table[self.s, a]
      u = self.rng.random()
      # First outcome whose cumulative probability exceeds u; like numpy's
      # argmax in gymnasium, fall back to 0 if rounding leaves none.
      i = next((j for j, c in enumerate(cum) if c > u), 0)
      _, self.s, reward, terminated = outs[i]
      path.append(self.s)
      self.steps += 1
      if terminated or self.steps >= self.max_steps:
        break
    self.done = terminated or self.steps >= self.max_steps
    # Out of moves on the ice: the policy never finished (diagnose:
    # could_not); a hole or G on the last move is a result, not a stall.
    failure = (
      None if terminated or not self.done else FailureCode.BUDGET_EXHAUSTED
    )
    info: dict[str, Any] = {"path": path}
    return StepResult(
      self._frames[self.s],
      {"success": float(reward)},
      self.done,
      failure,
      key,
      info,
    )
