"""Estimator comparison on logged batches: data, tables and heatmaps.

`logged_sokoban` plays Sokoban groups with an epsilon-noisy expert on the
host (no model): at each turn, with probability epsilon a uniformly random
move, otherwise the next move of an optimal plan from the current state.
Which turns were random is recorded, which gives a ground-truth-flavoured
credit diagnostic: a good estimator gives expert turns more advantage than
random ones (`credit_gap`). Tokens are the real env-tokenizer ids of the
texts; behaviour log-probs are the scripted policy's log-probability of the
chosen move, put on the move's first token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from agentic_rl import estimators, rewards
from agentic_rl.data import packing
from agentic_rl.envs import sokoban
from agentic_rl.envs.parsing import format_observation
from agentic_rl.models.tokenizer import build_env_tokenizer
from agentic_rl.types import (
  Action,
  ActionKind,
  Termination,
  Trajectory,
  TrajectoryBatch,
  Turn,
)

# Estimators compared by default: (label, registry name, hparams).
DEFAULT_SPECS: tuple[tuple[str, str, dict[str, Any]], ...] = (
  ("GRPO", "grpo", {}),
  ("Dr.GRPO", "dr_grpo", {}),
  ("RLOO", "rloo", {}),
  ("REINFORCE++", "reinforce_pp", {}),
  ("GiGPO mean", "gigpo", {"gamma": 0.95}),
  ("GiGPO std", "gigpo", {"gamma": 0.95, "mode": "mean_std_norm"}),
  ("turn-disc.", "turn_discounted", {"gamma": 0.95}),
  ("PRM add", "prm_weighted", {"beta": 0.5}),
  ("PRM mult", "prm_weighted", {"mode": "multiplicative"}),
)


def _noisy_expert_episode(
  env: sokoban.Sokoban,
  task,
  rng: np.random.Generator,
  epsilon: float,
  max_turns: int,
  tokenizer,
) -> tuple[Trajectory, list[bool]]:
  obs = env.reset(task)
  plan: list[int] = []
  turns, random_turn = [], []
  obs_text = obs
  result = None
  for _ in range(max_turns):
    if not plan:
      plan = sokoban.solve(env.level, env.state) or []
    explore = not plan or rng.random() < epsilon
    move = int(rng.integers(4)) if explore else plan[0]
    expert_move = plan[0] if plan else -1
    plan = plan[1:] if (not explore or move == expert_move) else []
    # Probability of `move` under the epsilon-expert mixture.
    p = epsilon / 4 + (1 - epsilon) * (move == expert_move)
    text = f"<answer>{sokoban.MOVES[move]}</answer>"
    result = env.step(text)
    action_ids = tokenizer.encode(text)
    logp = [math.log(max(p, 1e-12))] + [0.0] * (len(action_ids) - 1)
    turns.append(
      Turn(
        obs_tokens=tokenizer.encode(obs_text),
        action_tokens=action_ids,
        action_logp=logp,
        action=Action(ActionKind.ANSWER, text=sokoban.MOVES[move]),
        observation=result.observation,
        failure=result.failure,
        reward_components=dict(result.reward_components),
        state_key=result.state_key,
      )
    )
    random_turn.append(move != expert_move)
    obs_text = format_observation(result.observation, "tags")
    if result.done:
      break
  done = result is not None and result.done
  traj = Trajectory(
    task=task,
    group_id=0,
    turns=turns,
    termination=Termination.DONE if done else Termination.MAX_TURNS,
  )
  return traj, random_turn


def logged_sokoban(
  num_tasks: int = 8,
  group_size: int = 8,
  *,
  difficulty: int = 0,
  epsilon: float = 0.3,
  max_turns: int = 12,
  seed: int = 0,
) -> tuple[list[Trajectory], np.ndarray]:
  """Scored trajectories and `random_BxT` (1 where the move was random)."""
  env = sokoban.Sokoban()
  tokenizer = build_env_tokenizer()
  cfg = rewards.default_config()
  # Process evidence for PRM-weighted estimators: a move into a new state,
  # and the box-on-target change the environment reports.
  cfg.process.signals = ("novel_state", "env:box")
  stack = rewards.from_config(cfg)
  rng = np.random.default_rng(seed)
  trajs, flags = [], []
  for k in range(num_tasks):
    task = env.generate_task(seed * 100_003 + k, difficulty)
    for _ in range(group_size):
      traj, random_turn = _noisy_expert_episode(
        env, task, rng, epsilon, max_turns, tokenizer
      )
      traj.group_id = k
      trajs.append(stack.score_trajectory(traj))
      flags.append(random_turn)
  random_BxT = np.zeros((len(trajs), max_turns), np.float32)
  for i, f in enumerate(flags):
    random_BxT[i, : len(f)] = f
  return trajs, random_BxT


def advantages(
  batch: TrajectoryBatch,
  specs: Sequence[tuple[str, str, Mapping[str, Any]]] = DEFAULT_SPECS,
) -> dict[str, np.ndarray]:
  """Label -> adv_BxT for each (label, registry name, hparams)."""
  return {
    label: np.asarray(estimators.get(name)(batch, **dict(hp)))
    for label, name, hp in specs
  }


def credit_table(
  advs: Mapping[str, np.ndarray],
  batch: TrajectoryBatch,
  random_BxT: np.ndarray,
) -> list[dict[str, float]]:
  """Per estimator: scale, sign and how it credits expert vs random turns."""
  mask = np.asarray(batch.turn_mask_BxT) > 0
  t = mask.shape[1]
  rnd = np.zeros(mask.shape, bool)
  k = min(t, random_BxT.shape[1])
  rnd[:, :k] = random_BxT[:, :k] > 0
  expert, noisy = mask & ~rnd, mask & rnd
  rows = []
  for label, adv in advs.items():
    a = adv[:, :t]
    gap = a[expert].mean() - a[noisy].mean() if noisy.any() else math.nan
    rows.append(
      {
        "estimator": label,
        "mean_abs": float(np.abs(a[mask]).mean()),
        "std": float(a[mask].std()),
        "frac_positive": float((a[mask] > 0).mean()),
        "adv_expert_turns": float(a[expert].mean()),
        "adv_random_turns": float(a[noisy].mean()) if noisy.any() else math.nan,
        "credit_gap": float(gap),
      }
    )
  return rows


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
  """A fixed-width text table of dict rows (floats with 3 decimals)."""
  cols = list(rows[0])
  cells = [
    [f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
    for r in rows
  ]
  widths = [
    max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)
  ]
  line = lambda vals: "  ".join(
    v.rjust(w) for v, w in zip(vals, widths, strict=True)
  )
  return "\n".join([line(cols), *(line(row) for row in cells)])


def plot_heatmaps(
  advs: Mapping[str, np.ndarray],
  batch: TrajectoryBatch,
  path: str | None = None,
  rows: int = 16,
):
  """One heatmap per estimator (trajectories x turns); masked turns blank."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  mask = np.asarray(batch.turn_mask_BxT)[:rows] > 0
  n = len(advs)
  cols = min(3, n)
  fig, axes = plt.subplots(
    math.ceil(n / cols),
    cols,
    figsize=(4 * cols, 3 * math.ceil(n / cols)),
    squeeze=False,
  )
  for ax, (label, adv) in zip(axes.flat, advs.items(), strict=False):
    a = np.where(mask, adv[:rows, : mask.shape[1]], np.nan)
    lim = np.nanmax(np.abs(a)) if np.any(mask) else 1.0
    im = ax.imshow(a, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_title(label)
    ax.set_xlabel("turn")
    ax.set_ylabel("trajectory")
    fig.colorbar(im, ax=ax, fraction=0.046)
  for ax in list(axes.flat)[n:]:
    ax.axis("off")
  fig.tight_layout()
  if path is not None:
    fig.savefig(path, dpi=100)
    plt.close(fig)
  return fig


def compare_on_logged_batch(
  **kwargs,
) -> tuple[TrajectoryBatch, np.ndarray, dict[str, np.ndarray]]:
  """Builds a logged batch, packs it and runs every default estimator."""
  trajs, random_BxT = logged_sokoban(**kwargs)
  batch = packing.pack(trajs)
  batch = jax.device_get(batch)
  return batch, random_BxT, advantages(batch)
