"""Enumerated tabular MDPs of small environments, and their exact values.

Letters in this package: S environment states (all tasks' states stacked,
each task a disjoint block), A the four moves, K outcomes of one move (3 on
slippery FrozenLake, 1 on deterministic maps and Sokoban), T the turn index
of the finite horizon H. (S is the sampler-slot letter elsewhere; here the
sampler is not involved.)

A `TabularMDP` holds, for every (state, move, outcome), its probability, next
state, reward components and whether it ends the episode, exactly as the
environment's `step` would produce them. The reward of a transition is the
sum of its components: the per-turn reward the estimators see under the
default reward stack (every verifier weight 1, process weight 0, and the
study's policies never emit invalid text, so no failure penalty).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from agentic_rl.envs import frozenlake, sokoban
from agentic_rl.types import Task


@dataclasses.dataclass(frozen=True)
class TabularMDP:
  """Every reachable state of a list of tasks and the exact move model.

  Attributes:
    next_SxAxK: next state of each outcome (outcomes with probability 0
      point back at the state).
    prob_SxAxK: probability of each outcome; sums to 1 over K.
    components: reward component name -> value_SxAxK (the env's raw
      components, also the weighted ones since every weight is 1).
    done_SxAxK: whether the outcome ends the episode.
    terminal_S: states in which the episode has already ended (holes, the
      goal, solved levels); no action is ever taken there.
    start_N: the start state of each task.
    task_S: the task each state belongs to.
    keys: `state_key` of each state, as the environment reports it.
    observations: the text `reset` would return were the task to start in
      that state (instructions, if the env shows them, then the rendering).
    tasks: the N tasks.
    moves: move names in action-id order (the env's `MOVES`).
    outcome_key: the component the reward stack reads as the verdict.
    process_signals: process signals the study records per turn (the names
      of `rewards.process`, or `env:<component>`).
  """

  next_SxAxK: np.ndarray
  prob_SxAxK: np.ndarray
  components: dict[str, np.ndarray]
  done_SxAxK: np.ndarray
  terminal_S: np.ndarray
  start_N: np.ndarray
  task_S: np.ndarray
  keys: tuple[str, ...]
  observations: tuple[str, ...]
  tasks: tuple[Task, ...]
  moves: tuple[str, ...]
  outcome_key: str
  process_signals: tuple[str, ...]

  @property
  def num_states(self) -> int:
    return self.next_SxAxK.shape[0]

  @property
  def reward_SxAxK(self) -> np.ndarray:
    return sum(self.components.values())

  def expected_reward(self) -> np.ndarray:
    """r(s, a) = E[reward | s, a], shape SxA."""
    return (self.prob_SxAxK * self.reward_SxAxK).sum(axis=-1)


# ---------------------------------------------------------------------------
# Builders.


def _stack(blocks: list[dict], **shared) -> TabularMDP:
  """Concatenates per-task blocks (local state ids) into one MDP."""
  offsets = np.cumsum([0] + [len(b["keys"]) for b in blocks])
  names = sorted({n for b in blocks for n in b["components"]})
  comps = {
    n: np.concatenate(
      [b["components"].get(n, np.zeros_like(b["prob"])) for b in blocks]
    )
    for n in names
  }
  return TabularMDP(
    next_SxAxK=np.concatenate(
      [b["next"] + off for b, off in zip(blocks, offsets, strict=False)]
    ).astype(np.int64),
    prob_SxAxK=np.concatenate([b["prob"] for b in blocks]),
    components=comps,
    done_SxAxK=np.concatenate([b["done"] for b in blocks]),
    terminal_S=np.concatenate([b["terminal"] for b in blocks]),
    start_N=offsets[:-1].astype(np.int64),
    task_S=np.concatenate(
      [np.full(len(b["keys"]), i) for i, b in enumerate(blocks)]
    ),
    keys=tuple(k for b in blocks for k in b["keys"]),
    observations=tuple(o for b in blocks for o in b["observations"]),
    **shared,
  )


def _instructions(observation: str, frame: str) -> str:
  """What `reset` shows before the rendering (empty without instructions)."""
  if not observation.endswith(frame):
    raise ValueError("reset text does not end with the start rendering")
  return observation[: len(observation) - len(frame)]


def _frozenlake_block(env: frozenlake.FrozenLake, task: Task) -> dict:
  rows = list(task.payload["rows"])
  model = frozenlake.transition_model(rows, bool(task.payload["slippery"]))
  start = "".join(rows).index("S")
  # States reachable from S (the start is the only point-mass start state).
  order, seen = [start], {start}
  todo = collections.deque([start])
  while todo:
    s = todo.popleft()
    for outs in model[s].values():
      for p, t, _, _ in outs:
        if p > 0 and t not in seen:
          seen.add(t)
          order.append(t)
          todo.append(t)
  local = {s: i for i, s in enumerate(order)}
  n, k = len(order), 3
  nxt = np.repeat(np.arange(n)[:, None, None], 4, axis=1).repeat(k, axis=2)
  prob = np.zeros((n, 4, k))
  success = np.zeros((n, 4, k))
  done = np.zeros((n, 4, k), bool)
  for i, s in enumerate(order):
    for a in range(4):
      for j, (p, t, r, d) in enumerate(model[s][a]):
        nxt[i, a, j], prob[i, a, j] = local[t], p
        success[i, a, j], done[i, a, j] = r, d
  prefix = _instructions(env.reset(task), frozenlake.render(rows, start))
  return {
    "next": nxt,
    "prob": prob,
    "components": {"success": success},
    "done": done,
    "terminal": np.asarray(
      [rows[s // len(rows[0])][s % len(rows[0])] in "GH" for s in order]
    ),  # fmt: skip
    "keys": [env.state_key(s) for s in order],
    "observations": [prefix + frozenlake.render(rows, s) for s in order],
  }


def frozenlake_mdp(
  tasks: list[Task], env: frozenlake.FrozenLake | None = None
) -> TabularMDP:
  """FrozenLake tasks enumerated from `frozenlake.transition_model`.

  `env` supplies the observation framing (instructions on or off).
  """
  env = env or frozenlake.FrozenLake()
  return _stack(
    [_frozenlake_block(env, t) for t in tasks],
    tasks=tuple(tasks),
    moves=frozenlake.MOVES,
    outcome_key="success",
    process_signals=("novel_state",),
  )


def _sokoban_block(env: sokoban.Sokoban, task: Task) -> dict:
  level, start = sokoban.task_level(task)
  states, next_Nx4 = sokoban.state_graph(level, start)
  n = len(states)
  on_N = np.asarray([len(s.boxes & level.targets) for s in states])
  solved_N = np.asarray([sokoban.is_solved(level, s) for s in states])
  nxt = next_Nx4[:, :, None].astype(np.int64)
  # Every move costs a step, a blocked one included; box and solved rewards
  # follow the change in boxes on targets, as `Sokoban.step` computes them.
  step = np.full((n, 4, 1), env.step_penalty)
  box = env.box_reward * (on_N[nxt] - on_N[:, None, None])
  solved = env.solve_reward * solved_N[nxt].astype(float)
  prefix = _instructions(env.reset(task), sokoban.render(level, start))
  return {
    "next": nxt,
    "prob": np.ones((n, 4, 1)),
    "components": {"step": step, "box": box, "solved": solved},
    "done": solved_N[nxt],
    "terminal": solved_N,
    "keys": [sokoban.state_key(s) for s in states],
    "observations": [prefix + sokoban.render(level, s) for s in states],
  }


def sokoban_mdp(
  tasks: list[Task], env: sokoban.Sokoban | None = None
) -> TabularMDP:
  """Sokoban tasks enumerated with `sokoban.state_graph` (deterministic).

  The process signals are the ones `analysis.logged_sokoban` uses: a move
  into a state not visited before, and the box-on-target change.
  """
  env = env or sokoban.Sokoban()
  return _stack(
    [_sokoban_block(env, t) for t in tasks],
    tasks=tuple(tasks),
    moves=sokoban.MOVES,
    outcome_key="solved",
    process_signals=("novel_state", "env:box"),
  )


# ---------------------------------------------------------------------------
# Dynamic programming.


def backup(mdp: TabularMDP, v_S: np.ndarray, gamma: float) -> np.ndarray:
  """Q(s, a) = E[r + gamma * (1 - done) * V(s')], shape SxA."""
  cont_SxAxK = np.where(mdp.done_SxAxK, 0.0, v_S[mdp.next_SxAxK])
  return (mdp.prob_SxAxK * (mdp.reward_SxAxK + gamma * cont_SxAxK)).sum(-1)


def optimal_q(
  mdp: TabularMDP, gamma: float = 0.95, tol: float = 1e-10
) -> np.ndarray:
  """Infinite-horizon discounted optimal Q by value iteration, SxA."""
  if not 0 <= gamma < 1:
    raise ValueError(f"value iteration needs gamma in [0, 1), got {gamma}")
  v_S = np.zeros(mdp.num_states)
  while True:
    q_SxA = backup(mdp, v_S, gamma)
    new_S = np.where(mdp.terminal_S, 0.0, q_SxA.max(axis=1))
    if np.max(np.abs(new_S - v_S)) < tol:
      return q_SxA
    v_S = new_S


def evaluate(
  mdp: TabularMDP, pi_SxA: np.ndarray, horizon: int, gamma: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
  """Finite-horizon values of a Markov policy: (q_TxSxA, v_TxS).

  Turn t (0-based) of an episode truncated after `horizon` turns has
  Q_t(s, a) = E[r + gamma * (1 - done) * V_{t+1}(s')] and
  V_t(s) = sum_a pi(a|s) Q_t(s, a), with V_H = 0. `v_TxS` has H + 1 rows
  (the last is V_H = 0). Terminal states get value 0 at every t.
  """
  _check_policy(mdp, pi_SxA)
  return _backward(mdp, horizon, gamma, lambda q: (pi_SxA * q).sum(axis=1))


def _backward(mdp, horizon, gamma, value_of):
  """Backward induction; `value_of(q_SxA) -> v_S` picks how V follows Q."""
  if horizon < 1:
    raise ValueError(f"horizon must be >= 1, got {horizon}")
  s, a = mdp.num_states, len(mdp.moves)
  q_TxSxA = np.zeros((horizon, s, a))
  v_TxS = np.zeros((horizon + 1, s))
  live_S = ~mdp.terminal_S
  for t in range(horizon - 1, -1, -1):
    q_TxSxA[t] = backup(mdp, v_TxS[t + 1], gamma) * live_S[:, None]
    v_TxS[t] = value_of(q_TxSxA[t])
  return q_TxSxA, v_TxS


def optimal_finite(
  mdp: TabularMDP, horizon: int, gamma: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
  """Finite-horizon optimal values: (q_TxSxA, v_TxS), as `evaluate` lays out.

  V_t(s) = max_a Q_t(s, a): the best any policy can do with H - t turns
  left. With FrozenLake's reward (1 on reaching the goal) V_0 at a task's
  start is the highest success probability within the turn budget, the
  ceiling for a trained policy's success rate on that task.
  """
  return _backward(mdp, horizon, gamma, lambda q: q.max(axis=1))


def advantages(q_TxSxA: np.ndarray, v_TxS: np.ndarray) -> np.ndarray:
  """A_t(s, a) = Q_t(s, a) - V_t(s), shape TxSxA."""
  return q_TxSxA - v_TxS[: q_TxSxA.shape[0], :, None]


def _check_policy(mdp: TabularMDP, pi_SxA: np.ndarray) -> None:
  if pi_SxA.shape != (mdp.num_states, 4):
    raise ValueError(
      f"policy shape {pi_SxA.shape} != ({mdp.num_states}, 4) for this MDP"
    )
  if np.any(pi_SxA < 0) or not np.allclose(pi_SxA.sum(axis=1), 1.0):
    raise ValueError("policy rows must be distributions over the 4 moves")
