"""Length-grouped minibatches: less padding, so less compute on a CPU.

A rollout batch is packed once, at the length of its longest trajectory.
Minibatches drawn from it are trimmed back to the length bucket of their own
longest row, and rows are grouped by length (sorted within spans of a few
minibatches, then the minibatch order is shuffled) so that short rows travel
together. Trimming is exact: batches are right-padded and every loss masks
padding. Only a few bucket lengths exist, so only a few step compilations.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from agentic_rl.data import packing
from agentic_rl.train import step as step_lib
from agentic_rl.train.state import Layout
from agentic_rl.types import TrajectoryBatch

_L_FIELDS = ("tokens_BxL", "loss_mask_BxL", "turn_id_BxL", "behaviour_logp_BxL")


def row_lengths(batch: TrajectoryBatch) -> np.ndarray:
  """Real (non-padding) tokens per row, on the host."""
  return np.asarray(batch.turn_id_BxL >= 0).sum(axis=1)


def trim(inputs: Any, length: int) -> Any:
  """Cuts every [B, L] array of a batch (or `PolicyInputs`, or inputs with
  their own `trim(length)`, e.g. `critic.CriticInputs`) to `length`."""
  if hasattr(inputs, "trim"):
    return inputs.trim(length)
  if isinstance(inputs, TrajectoryBatch):
    return inputs.replace(
      **{f: getattr(inputs, f)[:, :length] for f in _L_FIELDS}
    )
  cut = lambda x: None if x is None else x[:, :length]
  return inputs.replace(
    batch=trim(inputs.batch, length),
    adv_BxL=cut(inputs.adv_BxL),
    ref_logp_BxL=cut(inputs.ref_logp_BxL),
    old_logp_BxL=cut(inputs.old_logp_BxL),
  )


def length_grouped_order(
  lengths_B: np.ndarray,
  minibatch_size: int,
  num_epochs: int,
  seed: int,
  span: int = 8,
) -> Iterator[np.ndarray]:
  """Row indices per minibatch; rows of similar length share minibatches.

  Per epoch: a seeded permutation, cut into spans of `span` minibatches,
  each span sorted by length and split, then all minibatches shuffled.
  Rows that do not fill a minibatch are dropped for that epoch.
  """
  b = len(lengths_B)
  if not 1 <= minibatch_size <= b:
    raise ValueError(f"minibatch_size {minibatch_size} must be in [1, {b}]")
  rng = np.random.default_rng(seed)
  n = b // minibatch_size * minibatch_size
  width = minibatch_size * span
  for _ in range(num_epochs):
    perm = rng.permutation(b)[:n]
    chunks = []
    for s in range(0, n, width):
      part = perm[s : s + width]
      part = part[np.argsort(lengths_B[part], kind="stable")]
      chunks += [
        part[i : i + minibatch_size]
        for i in range(0, len(part), minibatch_size)
      ]
    for j in rng.permutation(len(chunks)):
      yield chunks[j]


def minibatches(
  inputs: Any,
  lengths_B: np.ndarray,
  buckets: Sequence[int],
  layout: Layout,
  *,
  minibatch_size: int,
  num_epochs: int,
  seed: int,
) -> Iterator[Any]:
  """Length-grouped minibatches of `inputs`, each trimmed to its bucket."""
  for rows in length_grouped_order(lengths_B, minibatch_size, num_epochs, seed):
    length = packing.bucket(int(lengths_B[rows].max()), buckets)
    yield trim(step_lib.select_rows(inputs, rows, layout), length)
