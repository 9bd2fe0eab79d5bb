"""Host-side sampler: a fixed set of slots with their own KV caches.

Typical multi-turn use by a rollout driver::

  sampler = Sampler(model, num_slots=8, max_len=4096)
  sampler.prefill(rows=[0, 1], tokens=[prompt_a, prompt_b])
  out = sampler.decode(key, budget=256, stop_ids=[[eos, end_call]] * 8)
  # out.tokens[i], out.logprobs[i], out.stop_reason[i] for row out.rows[i]
  sampler.extend(rows=[0], tokens=[observation_ids])   # row 1 finished
  out = sampler.decode(key2, budget=256, stop_ids=..., rows=[0])

* A slot (row) holds one conversation. `prefill` replaces a row's context,
  `extend` appends observation ids after whatever the row already holds
  (including the tokens it just decoded, stop id included), and `decode`
  continues every chosen row until it emits one of its stop ids, its budget
  of new tokens, or the cache is full. Rows not named are left untouched.
* Tokens are never re-encoded: the cache holds exactly the id stream
  prefill + decode + extend + decode ..., and `decode` returns the log-prob
  of each emitted token under the distribution it was drawn from, so a
  teacher-forced `model(tokens)` over that stream reproduces them.
* Shapes are static: chunk lengths are padded up to `chunk_buckets`, budgets
  up to `budget_buckets`, stop sets to `max_stop_ids`; steady-state
  multi-turn decoding compiles nothing new. `num_compilations()` reports the
  count.
* Errors are raised on the host before anything is dispatched, naming the
  row: a prompt longer than the cache, an extend past the cache end, token
  ids outside the vocabulary, decoding a row with no context. Decode that
  reaches the cache end stops that row with `StopReason.CACHE_FULL`.
* With `mesh`, parameters and cache are sharded by `rules` (slots over the
  `batch` rule, kv heads over `tensor` by default); results are identical to
  the unsharded sampler up to float rounding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentic_rl import sharding as shd
from agentic_rl.models.transformer import (
  CACHE_BLOCK,
  Transformer,
  init_cache,
  map_cache,
  with_kernels_out_first,
)
from agentic_rl.sampling import engine
from agentic_rl.sampling.engine import SamplerState, StopReason


def default_buckets(max_len: int, smallest: int = 8) -> tuple[int, ...]:
  """Powers of two from `smallest` below `max_len`, then `max_len`."""
  buckets, b = [], smallest
  while b < max_len:
    buckets.append(b)
    b *= 2
  return (*buckets, max_len)


def _bucket(n: int, buckets: Sequence[int], what: str) -> int:
  for b in buckets:
    if b >= n:
      return b
  raise ValueError(f"{what} {n} exceeds the largest bucket {buckets[-1]}")


def _first_fractional(value, n: int) -> tuple[int, float] | None:
  """(index, value) of the first of `n` per-row values (one value or a
  sequence) that is not a whole number, NaN and inf included; else None.
  Casting to int32 would silently truncate 2.7 to 2 (NaN to garbage)."""
  raw_N = np.broadcast_to(np.asarray(value, np.float64), (n,))
  fractional_N = ~(np.isfinite(raw_N) & (raw_N == np.round(raw_N)))
  if not fractional_N.any():
    return None
  i = int(np.argmax(fractional_N))
  return i, float(raw_N[i])


@dataclasses.dataclass
class DecodeResult:
  """What `Sampler.decode` returns, one entry per decoded row.

  `tokens[i]` and `logprobs[i]` belong to slot `rows[i]`; a row that stopped
  on a stop id includes that id as its last token.
  """

  rows: list[int]
  tokens: list[np.ndarray]  # int32 ids, per row
  logprobs: list[np.ndarray]  # float32, per row
  stop_reason: list[StopReason]

  @property
  def num_tokens(self) -> int:
    return sum(len(t) for t in self.tokens)


class StaleWeightsError(RuntimeError):
  """The sampler's weights were freed before a device call: they shared
  buffers with a training state that a jitted update has since donated
  (placing weights on an equal sharding keeps their buffers). Load the new
  weights with `update_params` first, as the training loop does before
  every rollout and evaluation."""


class Sampler:
  """Slots with per-row KV caches; prefill / extend / decode from the host.

  Args:
    model: the policy; its current weights are copied in (see
      `update_params` to load new ones).
    num_slots: rows S, fixed for the sampler's life.
    max_len: cache positions per row (prompt + every turn must fit).
    chunk_buckets: padded lengths for prefill/extend chunks (default powers
      of two up to max_len); a chunk longer than the largest is an error.
    budget_buckets: padded widths of decode outputs; a decode with budget b
      runs a loop compiled for the smallest bucket >= b.
    span_buckets: how much of the cache attention reads. Each call reads
      the cache blocks that start below the smallest bucket covering every
      row it touches (default: powers of two from `cache_block`, then
      max_len), so short contexts in a long cache do not pay for the whole
      cache.
    cache_block: size of the first KV-cache blocks; later ones double
      (`models.transformer.cache_block_lens`). A span reads whole blocks,
      so spans are best block boundaries: cache_block * 2**i.
    max_stop_ids: width of the per-row stop-id table.
    kernels_out_first: hold the weights with every Dense kernel stored
      out-dims first (`models.with_kernels_out_first`, a transposed copy
      made here and on each `update_params`): the same outputs, a faster
      decode step on some CPUs and a slower one on others. Off by default.
    mesh, rules: optional sharding (see `agentic_rl.sharding`).
  """

  def __init__(
    self,
    model: Transformer,
    *,
    num_slots: int,
    max_len: int,
    chunk_buckets: Sequence[int] | None = None,
    budget_buckets: Sequence[int] | None = None,
    span_buckets: Sequence[int] | None = None,
    max_stop_ids: int = 8,
    cache_block: int = CACHE_BLOCK,
    kernels_out_first: bool = False,
    mesh: Mesh | None = None,
    rules: shd.Rules = shd.DEFAULT_SAMPLE_RULES,
  ):
    if min(num_slots, max_len, max_stop_ids, cache_block) <= 0:
      raise ValueError(
        f"num_slots ({num_slots}), max_len ({max_len}), max_stop_ids "
        f"({max_stop_ids}) and cache_block ({cache_block}) must be positive"
      )
    self.config = model.config
    self.num_slots = num_slots
    self.max_len = max_len
    self.chunk_buckets = tuple(
      sorted(chunk_buckets or default_buckets(max_len))
    )
    self.budget_buckets = tuple(
      sorted(budget_buckets or default_buckets(max_len, smallest=1))
    )
    self.span_buckets = tuple(
      sorted(
        span_buckets or default_buckets(max_len, min(cache_block, max_len))
      )
    )
    if self.span_buckets[-1] < max_len:
      self.span_buckets += (max_len,)
    self.max_stop_ids = max_stop_ids
    self.cache_block = cache_block
    self.mesh, self.rules = mesh, tuple(rules)
    self.kernels_out_first = kernels_out_first
    graphdef, params = nnx.split(self._layout(model))
    # The weights travel to the jitted calls as a flat list of arrays
    # (`engine.StaticGraph` says why); `params` rebuilds the nnx.State.
    self._params_leaves, treedef = jax.tree.flatten(self._place_params(params))
    self._static_graph = engine.StaticGraph(graphdef, treedef)
    self.state = self._initial_state()
    self._lengths = np.zeros((num_slots,), np.int64)
    self._static = dict(mesh=mesh, rules=self.rules)

  # -- setup ---------------------------------------------------------------

  def _layout(self, model: Transformer) -> Transformer:
    return with_kernels_out_first(model) if self.kernels_out_first else model

  def _place_params(self, params: nnx.State) -> nnx.State:
    if self.mesh is None:
      return params
    # Training weights spread over several processes, for a sampler on this
    # process's devices, move device to device (`shd.shard_state`; a
    # collective when they are split across processes).
    return shd.shard_state(params, self.mesh, self.rules)

  def _initial_state(self) -> SamplerState:
    state = SamplerState(
      cache=init_cache(
        self.config, self.num_slots, self.max_len, self.cache_block
      ),
      lengths_S=jnp.zeros((self.num_slots,), jnp.int32),
      last_logits_SxV=jnp.zeros(
        (self.num_slots, self.config.vocab_size), jnp.float32
      ),
    )
    if self.mesh is None:
      return state
    sharding = lambda x, axes: shd.logical_sharding(
      axes, self.rules, self.mesh, x.shape
    )
    return SamplerState(
      cache=map_cache(
        lambda x, axes: jax.device_put(x, sharding(x, axes)), state.cache
      ),
      lengths_S=jax.device_put(
        state.lengths_S, sharding(state.lengths_S, (shd.BATCH,))
      ),
      last_logits_SxV=jax.device_put(
        state.last_logits_SxV,
        sharding(state.last_logits_SxV, (shd.BATCH, shd.VOCAB)),
      ),
    )

  def update_params(self, model: Transformer) -> None:
    """Loads new policy weights (same config); caches are kept."""
    graphdef, params = nnx.split(self._layout(model))
    if graphdef != self._static_graph.graphdef:
      raise ValueError("update_params: model structure differs from sampler's")
    # an equal graphdef splits into a state of the same tree structure
    self._params_leaves = jax.tree.leaves(self._place_params(params))

  def _live_params(self) -> list[jax.Array]:
    """The weight leaves for a device call; `StaleWeightsError` if any was
    freed (a deleted array would fail deep in the call, naming no cause)."""
    if any(x.is_deleted() for x in self._params_leaves):
      raise StaleWeightsError(
        "the sampler's weights were freed (donated to a training update "
        "they shared buffers with); call update_params with the new model "
        "before prefill, extend or decode"
      )
    return self._params_leaves

  @property
  def params(self) -> nnx.State:
    """The sampling weights (placed on the sampler's mesh, if any)."""
    return jax.tree.unflatten(self._static_graph.treedef, self._params_leaves)

  # -- host-side checks ----------------------------------------------------

  @property
  def lengths(self) -> np.ndarray:
    """Tokens currently held by each slot (host copy)."""
    return self._lengths.copy()

  @property
  def cache_bytes_per_slot(self) -> int:
    return self.state.cache.nbytes // self.num_slots

  @staticmethod
  def num_compilations() -> int:
    """Compiled variants of prefill + extend + decode in this process.

    The jitted functions are shared by all samplers, so equal shapes compile
    once per process; compare the count before and after to spot recompiles.
    """
    return engine.num_compilations()

  def _check_rows(self, what: str, rows: Sequence[int]) -> list[int]:
    rows = [int(r) for r in rows]
    for r in rows:
      if not 0 <= r < self.num_slots:
        raise ValueError(
          f"{what}: row {r} is not a slot in [0, {self.num_slots})"
        )
    if len(set(rows)) != len(rows):
      raise ValueError(f"{what}: rows {rows} contain duplicates")
    return rows

  def _chunk(
    self,
    what: str,
    rows: Sequence[int],
    tokens: Sequence[Sequence[int]],
    start: np.ndarray,
  ) -> tuple[np.ndarray, np.ndarray]:
    """Validates a ragged chunk; returns padded tokens_SxC and n_new_S."""
    rows = self._check_rows(what, rows)
    if len(tokens) != len(rows):
      raise ValueError(
        f"{what}: {len(rows)} rows but {len(tokens)} token lists"
      )
    arrays = [np.asarray(t, dtype=np.int64).reshape(-1) for t in tokens]
    vocab = self.config.vocab_size
    for r, ids in zip(rows, arrays, strict=True):
      end = int(start[r]) + len(ids)
      if end > self.max_len:
        raise ValueError(
          f"{what}: row {r} would hold {end} tokens ({start[r]} in cache + "
          f"{len(ids)} new), beyond the cache length max_len={self.max_len}"
        )
      if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
        bad = ids[(ids < 0) | (ids >= vocab)][0]
        raise ValueError(
          f"{what}: row {r} has token id {bad} outside [0, {vocab})"
        )
    longest = max((len(a) for a in arrays), default=0)
    c = _bucket(max(longest, 1), self.chunk_buckets, f"{what}: chunk length")
    tokens_SxC = np.zeros((self.num_slots, c), np.int32)
    n_new_S = np.zeros((self.num_slots,), np.int32)
    for r, ids in zip(rows, arrays, strict=True):
      tokens_SxC[r, : len(ids)] = ids
      n_new_S[r] = len(ids)
    return tokens_SxC, n_new_S

  def _span(self, ends_S: np.ndarray, rows: Sequence[int]) -> int:
    """Smallest span bucket covering every position the call may write."""
    need = min(int(max(ends_S[list(rows)], default=1)), self.max_len)
    return _bucket(need, self.span_buckets, "span")

  # -- device calls ----------------------------------------------------------

  def prefill(self, rows: Sequence[int], tokens: Sequence[Sequence[int]]):
    """Replaces the context of each row in `rows` with its prompt."""
    rows = self._check_rows("prefill", rows)
    for r, t in zip(rows, tokens, strict=False):
      if len(t) == 0:
        raise ValueError(f"prefill: row {r} has an empty prompt")
    start = self._lengths.copy()
    start[rows] = 0
    tokens_SxC, n_new_S = self._chunk("prefill", rows, tokens, start)
    reset_S = np.zeros((self.num_slots,), bool)
    reset_S[rows] = True
    self.state = engine.prefill_jit(
      self._static_graph,
      self._live_params(),
      self.state,
      tokens_SxC,
      n_new_S,
      reset_S,
      span=self._span(start + n_new_S, rows),
      **self._static,
    )
    self._lengths = start + n_new_S

  def extend(self, rows: Sequence[int], tokens: Sequence[Sequence[int]]):
    """Appends tokens after each row's current end (at its own position)."""
    rows = self._check_rows("extend", rows)
    for r in rows:
      if self._lengths[r] == 0:
        raise ValueError(f"extend: row {r} is empty; prefill it first")
    tokens_SxC, n_new_S = self._chunk("extend", rows, tokens, self._lengths)
    self.state = engine.extend_jit(
      self._static_graph,
      self._live_params(),
      self.state,
      tokens_SxC,
      n_new_S,
      span=self._span(self._lengths + n_new_S, rows),
      **self._static,
    )
    self._lengths = self._lengths + n_new_S

  def decode(
    self,
    key: jax.Array,
    *,
    budget: int | Sequence[int],
    stop_ids: Sequence[int] | Sequence[Sequence[int]] = (),
    rows: Sequence[int] | None = None,
    temperature: float | Sequence[float] = 0.0,
    top_k: int | Sequence[int] = 0,
    top_p: float | Sequence[float] = 1.0,
  ) -> DecodeResult:
    """Decodes each row in `rows` (default: every non-empty slot).

    Per-row arguments are either one value for all rows or a sequence
    aligned with `rows`; `stop_ids` is one flat list of ids shared by all
    rows, or one list per row. temperature 0 is greedy; top_k 0 and
    top_p 1 disable those filters.
    """
    if rows is None:
      rows = [r for r in range(self.num_slots) if self._lengths[r] > 0]
    rows = self._check_rows("decode", rows)
    if not rows:
      raise ValueError("decode: no rows to decode (every slot is empty)")
    for r in rows:
      if self._lengths[r] == 0:
        raise ValueError(f"decode: row {r} is empty; prefill it first")

    def per_row(value, dtype):
      values = np.broadcast_to(np.asarray(value, dtype), (len(rows),))
      full = np.zeros((self.num_slots,), dtype)
      full[rows] = values
      return full, values

    if (bad := _first_fractional(budget, len(rows))) is not None:
      i, value = bad
      raise ValueError(
        f"decode: budget of row {rows[i]} must be an integer, got {value}"
      )
    budget_S, budgets = per_row(budget, np.int32)
    if budgets.min() < 0:
      raise ValueError(f"decode: budget must be >= 0, got {budget}")
    max_new = _bucket(
      max(int(budgets.max()), 1), self.budget_buckets, "decode: budget"
    )
    temperature_S, temps = per_row(temperature, np.float32)
    if _first_fractional(top_k, len(rows)) is not None:
      raise ValueError(f"decode: top_k must be an integer: {top_k}")
    top_k_S, ks = per_row(top_k, np.int32)
    top_p_S, ps = per_row(top_p, np.float32)
    top_p_S[[r for r in range(self.num_slots) if r not in rows]] = 1.0
    # Written so that NaN, which fails every comparison, is out of range.
    if not np.all(temps >= 0) or not np.all(np.isfinite(temps)):
      raise ValueError(
        f"decode: temperature must be finite and >= 0 (0 is greedy): "
        f"{temperature}"
      )
    if ks.min() < 0:
      raise ValueError(f"decode: top_k must be >= 0 (0 is off): {top_k}")
    if not np.all((ps > 0) & (ps <= 1)):
      raise ValueError(f"decode: top_p must be in (0, 1]: {top_p}")
    filtered = bool(np.any((ks > 0) | (ps < 1)))
    stop_ids_SxM = self._stop_table(rows, stop_ids)
    active_S = np.zeros((self.num_slots,), bool)
    active_S[rows] = True

    self.state, out = engine.decode_jit(
      self._static_graph,
      self._live_params(),
      self.state,
      key,
      active_S,
      budget_S,
      stop_ids_SxM,
      temperature_S,
      top_k_S,
      top_p_S,
      max_new=max_new,
      filtered=filtered,
      all_greedy=bool(np.all(temps <= 0)),
      span=self._span(self._lengths + max_new, rows),
      **self._static,
    )
    tokens_SxT, logp_SxT, num_S, reason_S = jax.device_get(
      (out.tokens_SxT, out.logp_SxT, out.num_tokens_S, out.reason_S)
    )
    self._lengths = self._lengths + num_S
    return DecodeResult(
      rows=rows,
      tokens=[tokens_SxT[r, : num_S[r]].copy() for r in rows],
      logprobs=[logp_SxT[r, : num_S[r]].copy() for r in rows],
      stop_reason=[StopReason(int(reason_S[r])) for r in rows],
    )

  def _stop_table(
    self,
    rows: list[int],
    stop_ids: Sequence[int] | Sequence[Sequence[int]],
  ) -> np.ndarray:
    """S x max_stop_ids table of stop ids, padded with -1."""
    stop_ids = list(stop_ids)
    if stop_ids and not isinstance(stop_ids[0], int | np.integer):
      per_row_ids = [list(s) for s in stop_ids]
      if len(per_row_ids) != len(rows):
        raise ValueError(
          f"decode: {len(rows)} rows but {len(per_row_ids)} stop-id lists"
        )
    else:
      per_row_ids = [stop_ids] * len(rows)
    table = np.full((self.num_slots, self.max_stop_ids), -1, np.int32)
    for r, ids in zip(rows, per_row_ids, strict=True):
      if len(ids) > self.max_stop_ids:
        raise ValueError(
          f"decode: row {r} has {len(ids)} stop ids, more than "
          f"max_stop_ids={self.max_stop_ids}"
        )
      for i in ids:
        if not 0 <= int(i) < self.config.vocab_size:
          raise ValueError(f"decode: row {r} stop id {i} is not a token id")
      table[r, : len(ids)] = ids
    return table
