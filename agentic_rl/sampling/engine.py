"""Pure, jittable prefill / extend / decode over a slotted KV cache.

State (`SamplerState`) for S slots and a cache of L positions:

  cache          per-layer k, v in blocks of positions (`models.KVCache`)
  lengths_S      tokens held by each row; also the next write position
  last_logits_SxV  logits after each row's last token (what decode samples
                   from next); meaningless for rows with length 0

A row's tokens occupy cache positions 0..length-1 contiguously, so a token's
cache index is its position and a query may attend to every index <= its
own. Everything has static shape: chunks are S x C with per-row counts, and
rows not taking part get count 0 (their cache and length are untouched).

The functions take the model as (graphdef, params) so they can be jitted
with the graphdef static and the state donated; `agentic_rl.sampling.Sampler`
does that, with the params as a flat list of arrays (`StaticGraph`), and is
the host-side entry point.
"""

from __future__ import annotations

import enum

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from agentic_rl import sharding as shd
from agentic_rl.models.transformer import KVCache, map_cache
from agentic_rl.sampling.select import select_tokens

Mesh = jax.sharding.Mesh


class StopReason(enum.IntEnum):
  """Why a row stopped decoding (`DecodeOutput.reason_S`)."""

  NOT_DECODED = 0  # row was not in the active set
  STOP_TOKEN = 1  # emitted one of its stop ids (the id is included)
  BUDGET = 2  # emitted its per-turn budget of tokens
  CACHE_FULL = 3  # no cache position left for another token


class StaticGraph:
  """A model's structure as a jit static argument, hashed once.

  jit hashes its static arguments on every call, and hashing an
  `nnx.GraphDef` walks the whole module structure (about 1 ms for a 4-layer
  model, on each of the several sampler calls of every turn). A sampler
  passes the same wrapper every time, so the lookup is one precomputed hash
  and an identity check; equal graphdefs in different wrappers still share
  one compiled executable.

  With it goes `treedef`, the params' `jax.tree` structure: given a
  StaticGraph, the functions below take the params as the flat list of
  their leaves, which jit flattens in C++, and rebuild the `nnx.State`
  while tracing. Flattening an `nnx.State` runs Python for every
  Variable: on a 2-core VM a trivial jitted call took 0.20 ms with the
  tiny preset's 46-leaf state as an argument and 0.04 ms with the same
  leaves as a list.
  """

  __slots__ = ("graphdef", "treedef", "_hash")

  def __init__(self, graphdef: nnx.GraphDef, treedef: jax.tree_util.PyTreeDef):
    self.graphdef, self.treedef = graphdef, treedef
    self._hash = hash((graphdef, treedef))

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other: object) -> bool:
    if self is other:
      return True
    return (
      isinstance(other, StaticGraph)
      and self.graphdef == other.graphdef
      and self.treedef == other.treedef
    )


def _merge(graphdef: nnx.GraphDef | StaticGraph, params):
  """The module from (graphdef, nnx.State), or from (StaticGraph, the
  state's leaves)."""
  if isinstance(graphdef, StaticGraph):
    params = jax.tree.unflatten(graphdef.treedef, params)
    graphdef = graphdef.graphdef
  return nnx.merge(graphdef, params)


@flax.struct.dataclass
class SamplerState:
  cache: KVCache
  lengths_S: jax.Array  # int32
  last_logits_SxV: jax.Array  # float32


@flax.struct.dataclass
class DecodeOutput:
  tokens_SxT: jax.Array  # int32, -1 after a row stopped
  logp_SxT: jax.Array  # float32, 0 after a row stopped
  num_tokens_S: jax.Array  # int32
  reason_S: jax.Array  # int32 `StopReason`


def constrain_state(state: SamplerState) -> SamplerState:
  """Pins the state's layout so repeated calls keep one sharding."""
  return SamplerState(
    cache=map_cache(shd.constrain, state.cache),
    lengths_S=shd.constrain(state.lengths_S, (shd.BATCH,)),
    last_logits_SxV=shd.constrain(
      state.last_logits_SxV, (shd.BATCH, shd.VOCAB)
    ),
  )


def _append(
  model: nnx.Module,
  state: SamplerState,
  tokens_SxC: jax.Array,
  n_new_S: jax.Array,
  span: int | None,
) -> SamplerState:
  """Writes n_new_S[s] tokens of row s at its own position onward."""
  c = tokens_SxC.shape[1]
  offsets_1xC = jnp.arange(c, dtype=jnp.int32)[None, :]
  positions_SxC = state.lengths_S[:, None] + offsets_1xC
  write_SxC = offsets_1xC < n_new_S[:, None]
  hidden_SxCxD, cache = model.forward_cached(
    tokens_SxC, positions_SxC, write_SxC, state.cache, span
  )
  last_S = jnp.maximum(n_new_S - 1, 0)
  last_hidden_SxD = jnp.take_along_axis(
    hidden_SxCxD, last_S[:, None, None], axis=1
  )[:, 0]
  logits_SxV = model.unembed(last_hidden_SxD)
  touched_S = n_new_S > 0
  return constrain_state(
    SamplerState(
      cache=cache,
      lengths_S=state.lengths_S + n_new_S,
      last_logits_SxV=jnp.where(
        touched_S[:, None], logits_SxV, state.last_logits_SxV
      ),
    )
  )


def prefill(
  graphdef: nnx.GraphDef | StaticGraph,
  params: nnx.State,
  state: SamplerState,
  tokens_SxC: jax.Array,
  n_new_S: jax.Array,
  reset_S: jax.Array,
  *,
  span: int | None = None,
  mesh: Mesh | None = None,
  rules: shd.Rules = (),
) -> SamplerState:
  """Replaces the context of rows `reset_S` with their prompts.

  Rows with reset_S False must have n_new_S 0 and are left unchanged.
  Old cache entries of a reset row are not cleared: they lie beyond its new
  length and are masked until overwritten. `span` (static) bounds the cache
  positions attention reads (it must exceed every written position);
  `mesh`/`rules` (static) activate the activation sharding constraints.
  """
  with shd.use_rules(mesh, rules):
    model = _merge(graphdef, params)
    state = state.replace(
      lengths_S=jnp.where(reset_S, 0, state.lengths_S).astype(jnp.int32)
    )
    return _append(model, state, tokens_SxC, n_new_S, span)


def extend(
  graphdef: nnx.GraphDef | StaticGraph,
  params: nnx.State,
  state: SamplerState,
  tokens_SxC: jax.Array,
  n_new_S: jax.Array,
  *,
  span: int | None = None,
  mesh: Mesh | None = None,
  rules: shd.Rules = (),
) -> SamplerState:
  """Appends a ragged chunk (n_new_S tokens per row) after each row's end."""
  with shd.use_rules(mesh, rules):
    model = _merge(graphdef, params)
    return _append(model, state, tokens_SxC, n_new_S, span)


def decode(
  graphdef: nnx.GraphDef | StaticGraph,
  params: nnx.State,
  state: SamplerState,
  key: jax.Array,
  active_S: jax.Array,
  budget_S: jax.Array,
  stop_ids_SxM: jax.Array,
  temperature_S: jax.Array,
  top_k_S: jax.Array,
  top_p_S: jax.Array,
  *,
  max_new: int,
  filtered: bool,
  all_greedy: bool = False,
  span: int | None = None,
  mesh: Mesh | None = None,
  rules: shd.Rules = (),
) -> tuple[SamplerState, DecodeOutput]:
  """Decodes every active row until its stop id, budget or a full cache.

  One `lax.while_loop` step samples a token for every unfinished row from
  its last logits, writes it into the cache and computes the next logits;
  finished rows neither write nor advance. Stop ids are padded with -1.
  Step t uses `fold_in(key, t)`, so the same key gives the same tokens.
  `budget_S` must be <= `max_new` (static, the output width);
  `all_greedy` (static) is a fast path for when every temperature is <= 0.
  """
  with shd.use_rules(mesh, rules):
    return _decode_loop(
      _merge(graphdef, params),
      state,
      key,
      active_S,
      budget_S,
      stop_ids_SxM,
      temperature_S,
      top_k_S,
      top_p_S,
      max_new=max_new,
      filtered=filtered,
      all_greedy=all_greedy,
      span=span,
    )


def _decode_loop(
  model: nnx.Module,
  state: SamplerState,
  key: jax.Array,
  active_S: jax.Array,
  budget_S: jax.Array,
  stop_ids_SxM: jax.Array,
  temperature_S: jax.Array,
  top_k_S: jax.Array,
  top_p_S: jax.Array,
  *,
  max_new: int,
  filtered: bool,
  all_greedy: bool,
  span: int | None,
) -> tuple[SamplerState, DecodeOutput]:
  s, max_len = state.lengths_S.shape[0], state.cache.max_len
  no_budget_S = active_S & (budget_S <= 0)
  done_S = ~active_S | no_budget_S
  reason_S = jnp.where(no_budget_S, StopReason.BUDGET, StopReason.NOT_DECODED)
  out = DecodeOutput(
    tokens_SxT=jnp.full((s, max_new), -1, jnp.int32),
    logp_SxT=jnp.zeros((s, max_new), jnp.float32),
    num_tokens_S=jnp.zeros((s,), jnp.int32),
    reason_S=reason_S.astype(jnp.int32),
  )

  def cond(carry):
    step, _, done_S, _ = carry
    return (step < max_new) & ~jnp.all(done_S)

  def body(carry):
    step, state, done_S, out = carry
    full_S = ~done_S & (state.lengths_S >= max_len)
    reason_S = jnp.where(full_S, StopReason.CACHE_FULL, out.reason_S)
    emit_S = ~(done_S | full_S)
    tokens_S, logp_S = select_tokens(
      jax.random.fold_in(key, step),
      state.last_logits_SxV,
      temperature_S,
      top_k_S,
      top_p_S,
      filtered=filtered,
      all_greedy=all_greedy,
    )
    hidden_Sx1xD, cache = model.forward_cached(
      tokens_S[:, None],
      state.lengths_S[:, None],
      emit_S[:, None],
      state.cache,
      span,
    )
    logits_SxV = model.unembed(hidden_Sx1xD[:, 0])
    num_S = out.num_tokens_S + emit_S
    stop_S = emit_S & jnp.any(tokens_S[:, None] == stop_ids_SxM, axis=-1)
    budget_hit_S = emit_S & ~stop_S & (num_S >= budget_S)
    reason_S = jnp.where(stop_S, StopReason.STOP_TOKEN, reason_S)
    reason_S = jnp.where(budget_hit_S, StopReason.BUDGET, reason_S)
    state = constrain_state(
      SamplerState(
        cache=cache,
        lengths_S=state.lengths_S + emit_S,
        last_logits_SxV=jnp.where(
          emit_S[:, None], logits_SxV, state.last_logits_SxV
        ),
      )
    )
    out = DecodeOutput(
      tokens_SxT=out.tokens_SxT.at[:, step].set(
        jnp.where(emit_S, tokens_S, -1)
      ),
      logp_SxT=out.logp_SxT.at[:, step].set(jnp.where(emit_S, logp_S, 0.0)),
      num_tokens_S=num_S,
      reason_S=reason_S.astype(jnp.int32),
    )
    done_S = done_S | full_S | stop_S | budget_hit_S
    return step + 1, state, done_S, out

  _, state, _, out = jax.lax.while_loop(
    cond, body, (jnp.int32(0), state, done_S, out)
  )
  return state, out


# One compiled cache per process: samplers of the same shapes share
# executables. graphdef, mesh and rules are static (hashable) arguments.
_STATIC = ("span", "mesh", "rules")
prefill_jit = jax.jit(
  prefill, static_argnums=0, static_argnames=_STATIC, donate_argnames="state"
)
extend_jit = jax.jit(
  extend, static_argnums=0, static_argnames=_STATIC, donate_argnames="state"
)
decode_jit = jax.jit(
  decode,
  static_argnums=0,
  static_argnames=("max_new", "filtered", "all_greedy", *_STATIC),
  donate_argnames="state",
)


def num_compilations() -> int:
  """Compiled variants of prefill + extend + decode in this process."""
  return sum(f._cache_size() for f in (prefill_jit, extend_jit, decode_jit))
