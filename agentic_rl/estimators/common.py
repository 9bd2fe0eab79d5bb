"""Segment statistics and argument checks shared by the estimators.

Group statistics are weighted segment sums with a static segment count, so
they run in-graph on any mesh without sorting or host round-trips.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

SINGLETON_MODES = ("raw", "zero")


class SegmentStats:
  """Weighted count, mean and unbiased std per segment, gathered back.

  Slots of weight <= 0 enter no statistic, whatever their value (NaN and
  inf included).
  """

  def __init__(
    self,
    values_N: jax.Array,
    segment_N: jax.Array,
    weight_N: jax.Array,
    num_segments: int,
  ):
    def ssum(x_N):
      return jax.ops.segment_sum(x_N, segment_N, num_segments=num_segments)

    # `where`, not a product: 0 * inf is NaN, so a non-finite value in an
    # excluded slot would otherwise poison its whole segment.
    in_N = weight_N > 0

    def wsum(x_N):
      return ssum(jnp.where(in_N, weight_N * x_N, 0.0))

    count_S = ssum(jnp.where(in_N, weight_N, 0.0))
    mean_S = wsum(values_N) / jnp.maximum(count_S, 1.0)
    # Two-pass variance: stable when values are large and nearly equal.
    dev_N = values_N - mean_S[segment_N]
    sq_S = wsum(dev_N * dev_N)
    var_S = sq_S / jnp.maximum(count_S - 1.0, 1.0)
    self.count_N = count_S[segment_N]
    self.mean_N = mean_S[segment_N]
    # A segment of one has no sample std; 1 keeps the division finite.
    self.std_N = jnp.where(self.count_N > 1.0, jnp.sqrt(var_S)[segment_N], 1.0)


def apply_mask(x: jax.Array, mask: jax.Array) -> jax.Array:
  """x * mask, but exactly 0 where mask <= 0 even if x is NaN or inf."""
  return jnp.where(mask > 0, x * mask, 0.0)


def normalize(
  values_N: jax.Array,
  stats: SegmentStats,
  *,
  normalize_std: bool,
  eps: float,
  singleton: str,
) -> jax.Array:
  """(x - mean) [/ (std + eps)] with the named singleton convention.

  `singleton="raw"` treats a segment of one as having mean 0 and std 1, so
  its advantage is its own value (verl's GRPO/GiGPO convention);
  `singleton="zero"` gives it advantage 0 (no baseline, no signal).
  """
  lone_N = stats.count_N <= 1.0
  if singleton == "raw":
    mean_N = jnp.where(lone_N, 0.0, stats.mean_N)
  elif singleton == "zero":
    mean_N = jnp.where(lone_N, values_N, stats.mean_N)
  else:
    raise ValueError(
      f"singleton must be one of {SINGLETON_MODES}, got {singleton!r}"
    )
  centered_N = values_N - mean_N
  if normalize_std:
    return centered_N / (stats.std_N + eps)
  return centered_N


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def check_array(
  name: str,
  x,
  shape: Sequence[int | None],
  kind: str,
) -> None:
  """Raises a ValueError naming `name` on a rank, shape or dtype mismatch.

  `shape` entries of None match any size; `kind` is "int" or "float".
  """
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
  if len(x.shape) != len(shape):
    raise ValueError(
      f"{name}: expected rank {len(shape)} (shape {tuple(shape)}), got "
      f"shape {tuple(x.shape)}"
    )
  for got, want in zip(x.shape, shape, strict=True):
    if want is not None and got != want:
      raise ValueError(
        f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}"
      )
  dtype = np.dtype(x.dtype)
  if kind == "int" and not np.issubdtype(dtype, np.integer):
    raise TypeError(f"{name}: expected an integer dtype, got {dtype}")
  if kind == "float" and not (
    np.issubdtype(dtype, np.floating)
    or np.issubdtype(dtype, np.integer)
    or dtype == np.bool_
  ):
    raise TypeError(f"{name}: expected a real dtype, got {dtype}")


def check_ids(name: str, ids, upper: int) -> None:
  """Range check of dense ids, only when the values are concrete."""
  if not _is_concrete(ids) or ids.size == 0:
    return
  ids = np.asarray(ids)
  lo, hi = int(ids.min()), int(ids.max())
  if lo < 0 or hi >= upper:
    raise ValueError(
      f"{name}: ids must be dense integers in [0, {upper}), got values in "
      f"[{lo}, {hi}]"
    )


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
  if value not in choices:
    raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_number(
  name: str, value, low: float = -math.inf, high: float = math.inf
) -> None:
  """Raises a ValueError naming `name` unless `value` is a finite real number
  in [low, high] (a bool is not a number here; NaN is never in range).

  Estimator hyperparameters are static arguments of jitted functions, so a
  bad one is caught here, in Python, instead of turning every advantage of
  every step into NaN.
  """
  real = isinstance(value, numbers.Real) and not isinstance(value, bool)
  if not real or not math.isfinite(value) or not low <= value <= high:
    bounds = (
      "" if (low, high) == (-math.inf, math.inf) else f" in [{low}, {high}]"
    )
    raise ValueError(f"{name} must be a finite number{bounds}, got {value!r}")
