"""Packs host trajectories into a padded, bucketed `TrajectoryBatch`.

Group ids and anchor ids are made dense here, once, on the host, so the
estimators need no sort in the graph: `group_id_B` < B and `anchor_id_BxT`
< B*T, with two turns sharing an anchor id iff they are in the same group and
were taken in the same environment state (`Turn.state_key`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from agentic_rl.types import Trajectory, TrajectoryBatch

DEFAULT_LENGTH_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DEFAULT_TURN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def bucket(n: int, buckets: Sequence[int], what: str = "length") -> int:
  """Smallest bucket >= n; a clear error if none fits."""
  for b in sorted(buckets):
    if b >= n:
      return b
  raise ValueError(f"{what} {n} exceeds the largest bucket {max(buckets)}")


def dense_ids(keys: Sequence) -> np.ndarray:
  """Maps hashable keys to 0..n-1 in order of first appearance."""
  table: dict = {}
  return np.asarray([table.setdefault(k, len(table)) for k in keys], np.int32)


def pack(
  trajectories: Sequence[Trajectory],
  *,
  length_buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS,
  turn_buckets: Sequence[int] = DEFAULT_TURN_BUCKETS,
  batch_size: int | None = None,
) -> TrajectoryBatch:
  """Right-pads trajectories into a `TrajectoryBatch` of bucketed shape.

  Each trajectory is laid out as [obs_0, act_0, obs_1, act_1, ...]; only
  action tokens of trained turns get loss_mask 1. `batch_size` pads B with
  empty rows (their own groups, every mask 0) so B is static across steps.
  """
  n = len(trajectories)
  if n == 0:
    raise ValueError("pack needs at least one trajectory")
  b = n if batch_size is None else batch_size
  if b < n:
    raise ValueError(f"batch_size {b} is smaller than {n} trajectories")
  l = bucket(max(t.num_tokens for t in trajectories), length_buckets)
  t_max = bucket(
    max(max(len(t.turns) for t in trajectories), 1), turn_buckets, "turn count"
  )

  tokens = np.zeros((b, l), np.int32)
  loss_mask = np.zeros((b, l), np.float32)
  turn_id = np.full((b, l), -1, np.int32)
  logp = np.zeros((b, l), np.float32)
  turn_reward = np.zeros((b, t_max), np.float32)
  turn_mask = np.zeros((b, t_max), np.float32)
  process = np.zeros((b, t_max), np.float32)
  outcome = np.zeros((b,), np.float32)

  group_keys = [t.group_id for t in trajectories]
  group_keys += [("pad", i) for i in range(b - n)]
  group_id = dense_ids(group_keys)

  anchor_keys = []
  for i in range(b):
    turns = trajectories[i].turns if i < n else []
    for j in range(t_max):
      if j < len(turns):
        anchor_keys.append((int(group_id[i]), turns[j].state_key))
      else:  # padding turns get their own ids; they are masked anyway
        anchor_keys.append(("pad", i, j))
  anchor_id = dense_ids(anchor_keys).reshape(b, t_max)

  for i, traj in enumerate(trajectories):
    pos = 0
    for j, turn in enumerate(traj.turns):
      o, a = len(turn.obs_tokens), len(turn.action_tokens)
      tokens[i, pos : pos + o] = turn.obs_tokens
      turn_id[i, pos : pos + o + a] = j
      pos += o
      tokens[i, pos : pos + a] = turn.action_tokens
      logp[i, pos : pos + a] = turn.action_logp
      loss_mask[i, pos : pos + a] = float(turn.trained)
      pos += a
      turn_reward[i, j] = turn.reward
      turn_mask[i, j] = 1.0
      process[i, j] = turn.process_score
    outcome[i] = traj.outcome

  return TrajectoryBatch(
    tokens_BxL=jnp.asarray(tokens),
    loss_mask_BxL=jnp.asarray(loss_mask),
    turn_id_BxL=jnp.asarray(turn_id),
    behaviour_logp_BxL=jnp.asarray(logp),
    turn_reward_BxT=jnp.asarray(turn_reward),
    turn_mask_BxT=jnp.asarray(turn_mask),
    anchor_id_BxT=jnp.asarray(anchor_id),
    process_score_BxT=jnp.asarray(process),
    group_id_B=jnp.asarray(group_id),
    outcome_B=jnp.asarray(outcome),
  )
