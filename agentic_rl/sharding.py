"""Device mesh, logical axis names and the rules that map them onto the mesh.

Modules name the axes of their parameters and activations with a small
vocabulary (`AXES`); a rules table, a tuple of `(logical, mesh_axes)` pairs,
decides where each logical axis lives on the `(data, fsdp, tensor)` mesh.
Training and sampling use different tables (`DEFAULT_TRAIN_RULES`,
`DEFAULT_SAMPLE_RULES`): training shards weights over `fsdp` as well as
`tensor`, sampling keeps weights whole across `data`/`fsdp` so a decode step
needs no all-gather.

Two safety rules make any table usable with any model on any mesh:
a mesh axis is used at most once per array (later dimensions that ask for an
axis already taken are replicated), and a dimension whose size is not
divisible by its mesh axes is replicated instead of failing.

Activation constraints (`constrain`) are no-ops unless a mesh and rules are
active (`use_rules`), so the same model code runs unsharded in tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import math
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# The logical axis vocabulary used by modules.
BATCH = "batch"
LENGTH = "length"
EMBED = "embed"
HEADS = "heads"
KV_HEADS = "kv_heads"
HEAD_DIM = "head_dim"
MLP = "mlp"
VOCAB = "vocab"
AXES = (BATCH, LENGTH, EMBED, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB)

# A rule maps a logical axis to None (replicated), one mesh axis, or a tuple
# of mesh axes (the dimension is split over their product).
Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

DEFAULT_TRAIN_RULES: Rules = (
  (BATCH, ("data", "fsdp")),
  (LENGTH, None),
  (EMBED, "fsdp"),
  (HEADS, "tensor"),
  (KV_HEADS, "tensor"),
  (HEAD_DIM, None),
  (MLP, "tensor"),
  (VOCAB, "tensor"),
)

DEFAULT_SAMPLE_RULES: Rules = (
  (BATCH, ("data", "fsdp")),
  (LENGTH, None),
  (EMBED, None),
  (HEADS, "tensor"),
  (KV_HEADS, "tensor"),
  (HEAD_DIM, None),
  (MLP, "tensor"),
  (VOCAB, "tensor"),
)


def make_mesh(
  shape: Sequence[int] = (1, 1, 1),
  devices: Sequence[jax.Device] | None = None,
) -> Mesh:
  """A `(data, fsdp, tensor)` mesh of the given shape over `devices`.

  By default the first devices of `jax.devices()`, which in a multi-process
  run must include every process's (else a ValueError says so).
  """
  shape = tuple(int(s) for s in shape)
  if len(shape) != len(MESH_AXES) or any(s <= 0 for s in shape):
    raise ValueError(
      f"mesh shape must be 3 positive ints for {MESH_AXES}: {shape}"
    )
  default = devices is None
  devices = list(jax.devices() if default else devices)
  need = math.prod(shape)
  if need > len(devices):
    raise ValueError(
      f"mesh shape {shape} needs {need} devices, only {len(devices)} available"
    )
  devices = devices[:need]
  missing = set(range(jax.process_count())) - {d.process_index for d in devices}
  if default and missing:
    # Every process runs every jitted function of the run (one controller
    # per host), so each one needs devices in the run's mesh. (A mesh over
    # given devices, e.g. one process's own, is for process-local work.)
    raise ValueError(
      f"mesh shape {shape} uses {need} of {jax.device_count()} devices and "
      f"none of process(es) {sorted(missing)}; in a multi-process run the "
      f"mesh must span every process's devices ({jax.local_device_count()} "
      "a process here)"
    )
  device_array = np.asarray(devices, dtype=object).reshape(shape)
  auto = (jax.sharding.AxisType.Auto,) * len(MESH_AXES)
  return Mesh(device_array, MESH_AXES, axis_types=auto)


class ProcessDivergenceError(RuntimeError):
  """Processes of a multi-process run computed different host-side data."""


def is_primary() -> bool:
  """Whether this process writes the run's files: logs, summaries, records
  (process 0 of a multi-process run; always, in a single-process one)."""
  return jax.process_index() == 0


def check_same_across_processes(tree: Any, what: str) -> None:
  """Raises `ProcessDivergenceError` unless every process holds equal `tree`.

  A multi-process run repeats host-side work in every process (task
  draws, packing; with replicated rollouts also the episodes, environments
  and rewards) and hands the results to arrays that span all of them,
  which is right only if every process computed the same (a tool that
  timed out on one host only would break that). JAX's
  `device_put` asserts it for the values it places (a bare AssertionError
  deep in the step); this check names what differed where the loop builds
  it, and covers what never reaches a device (evaluation verdicts). It
  compares a 16-byte digest of the leaves (dtypes, shapes, bytes) across
  processes: a collective, so every process must call it at the same point.
  A no-op in a single-process run.
  """
  if jax.process_count() == 1:
    return
  digest = hashlib.blake2b(digest_size=16)
  for leaf in jax.tree.leaves(tree):
    a = np.ascontiguousarray(np.asarray(leaf))
    digest.update(f"{a.dtype}{a.shape}".encode())
    digest.update(a.tobytes())
  mine = np.frombuffer(digest.digest(), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))
  differ = [p for p, d in enumerate(every) if not np.array_equal(d, every[0])]
  if differ:
    raise ProcessDivergenceError(
      f"{what} differs between processes: process(es) {differ} disagree with "
      "process 0. A multi-process run repeats host-side work in every "
      "process and needs it deterministic given the config and seed"
    )


def _each_process_holds_whole(x: jax.Array) -> bool:
  """Whether every process's own shards of `x` cover all of it (weights
  replicated over a data axis that spans the processes). Decided from the
  sharding alone, so all processes agree."""
  held: dict[int, set] = {}
  for device, index in x.sharding.devices_indices_map(x.shape).items():
    block = tuple(s.indices(n) for s, n in zip(index, x.shape, strict=True))
    held.setdefault(device.process_index, set()).add(block)
  every = set().union(*held.values())  # the sharding's grid of blocks
  return all(blocks == every for blocks in held.values())


def _from_own_shards(x: jax.Array) -> np.ndarray:
  out = np.empty(x.shape, x.dtype)
  for shard in x.addressable_shards:
    out[shard.index] = np.asarray(shard.data)
  return out


def to_host(tree: Any) -> Any:
  """`jax.device_get` that also works in a multi-process run.

  An array spread over several processes' devices is not readable from any
  one of them: it is assembled from this process's shards when those cover
  it (replicated across processes), else gathered (`process_allgather`, a
  collective: every process must call this at the same point). Arrays this
  process holds whole (single-process runs) are read directly.
  """

  def get(x):
    if not isinstance(x, jax.Array):
      return x
    if x.is_fully_addressable or x.is_fully_replicated:
      return np.asarray(x)
    if _each_process_holds_whole(x):
      return _from_own_shards(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))

  return jax.tree.map(get, tree)


def key_on_this_process(key: jax.Array) -> jax.Array:
  """A PRNG key (typed or raw) as an array of this process alone: a run's
  keys derive from its state's key, which spans every process's devices,
  and process-local work (a per-process rollout) cannot mix the two."""
  if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.numpy.asarray(to_host(key))
  data = to_host(jax.random.key_data(key))
  return jax.random.wrap_key_data(data, impl=jax.random.key_impl(key))


@functools.lru_cache(maxsize=32)  # per mesh: asked once per array moved
def local_mesh(mesh: Mesh) -> Mesh:
  """This process's block of `mesh`: the same axes over its own devices.

  In a (2, 1, 4) mesh whose data axis spans two processes of 4 devices,
  each process's block is (1, 1, 4). Process-local work (per-process
  rollouts, whose samplers run no collective) runs on it. A ValueError if
  this process's devices do not form a block of the mesh.
  """
  devices = np.asarray(mesh.devices)
  mine = np.vectorize(lambda d: d.process_index == jax.process_index())(devices)
  if not mine.any():
    raise ValueError(
      f"mesh {dict(mesh.shape)} holds none of this process's devices"
    )
  keep = [
    np.flatnonzero(mine.any(axis=tuple(j for j in range(mine.ndim) if j != i)))
    for i in range(mine.ndim)
  ]
  block = devices[np.ix_(*keep)]
  if not mine[np.ix_(*keep)].all() or block.size != mine.sum():
    raise ValueError(
      f"process {jax.process_index()}'s devices do not form a block of mesh "
      f"{dict(mesh.shape)}; order the devices process by process"
    )
  return Mesh(block, mesh.axis_names, axis_types=mesh.axis_types)


def is_process_local(mesh: Mesh | None) -> bool:
  """Whether `mesh` holds only this process's devices (work on it needs no
  other process) in a multi-process run."""
  if mesh is None or jax.process_count() == 1:
    return False
  return all(d.process_index == jax.process_index() for d in mesh.devices.flat)


@dataclasses.dataclass(frozen=True)
class _Unsent:
  """What a process sends in place of an object it could not pickle."""

  why: str


def allgather_objects(obj: Any) -> list[Any]:
  """Every process's `obj`, in process order (a collective: every process
  must call this at the same point). Objects travel pickled, so they must be
  picklable; they are meant for the processes of one run, not for
  untrusted peers. An object that does not pickle is a TypeError in every
  process (naming the process), not a hang. One process, one item: `[obj]`.
  """
  if jax.process_count() == 1:
    return [obj]
  try:
    blob = pickle.dumps(obj)
  except Exception as e:  # noqa: BLE001 - every process raises, below
    blob = pickle.dumps(_Unsent(f"{type(e).__name__}: {e}"))
  data = np.frombuffer(blob, np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.int64(data.size)))
  padded = np.zeros(int(sizes.max()), np.uint8)
  padded[: data.size] = data
  every = np.asarray(multihost_utils.process_allgather(padded))
  objs = [
    pickle.loads(row[: int(n)].tobytes())
    for row, n in zip(every, sizes.reshape(-1), strict=True)
  ]
  unsent = [
    f"{i}: {o.why}" for i, o in enumerate(objs) if isinstance(o, _Unsent)
  ]
  if unsent:
    raise TypeError(
      "allgather_objects: process(es) could not pickle their object: "
      + "; ".join(unsent)
    )
  return objs


class ProcessPartError(RuntimeError):
  """One process's part of work split over the processes failed; raised in
  every process, naming the process(es) and what failed there."""


def process_part(n: int, index: int, count: int) -> tuple[int, int]:
  """`[lo, hi)` of part `index` of `count` contiguous parts of `n` items,
  as `np.array_split` cuts them (the first `n % count` parts one longer)."""
  if not 0 <= index < count:
    raise ValueError(f"part {index} of {count}: expected 0 <= part < count")
  size, extra = divmod(n, count)
  lo = index * size + min(index, extra)
  return lo, lo + size + (index < extra)


def gather_parts(
  play_part: Callable[[], list[Any]],
  what: str,
  error: type[ProcessPartError] = ProcessPartError,
) -> list[Any]:
  """Every process's `play_part()` (a list: this process's part of a job),
  concatenated in process order, in every process. A collective: every
  process must call it at the same point. An exception in any process's
  part is raised in all of them as `error` naming the process(es), so none
  is left waiting at the gather for a process that failed. One process:
  its own list (its exceptions raised as they are).
  """
  if jax.process_count() == 1:
    return list(play_part())
  try:
    sent = (list(play_part()), None)
  except Exception as e:  # noqa: BLE001 - shipped to every process below
    sent = (None, f"{type(e).__name__}: {e}")
  parts = allgather_objects(sent)
  failed = [(i, why) for i, (_, why) in enumerate(parts) if why is not None]
  if failed:
    raise error(
      f"{what} failed in process(es) "
      + "; ".join(f"{i}: {why}" for i, why in failed)
    )
  return [x for part, _ in parts for x in part]


def _rules_dict(rules: Rules) -> dict[str, tuple[str, ...]]:
  table = {}
  for logical, mesh_axes in rules:
    if mesh_axes is None:
      table[logical] = ()
    elif isinstance(mesh_axes, str):
      table[logical] = (mesh_axes,)
    else:
      table[logical] = tuple(mesh_axes)
  return table


def logical_to_spec(
  logical_axes: Sequence[str | None],
  rules: Rules,
  mesh: Mesh,
  shape: Sequence[int] | None = None,
) -> PartitionSpec:
  """Maps logical axis names to a `PartitionSpec` on `mesh`.

  Unknown or None names are replicated; a mesh axis already used by an
  earlier dimension, or of size 1, is skipped; with `shape`, a dimension not
  divisible by the product of its mesh axes is replicated.
  """
  if shape is not None and len(shape) != len(logical_axes):
    raise ValueError(
      f"logical axes {tuple(logical_axes)} do not match shape {tuple(shape)}"
    )
  table = _rules_dict(rules)
  used: set[str] = set()
  spec = []
  for i, name in enumerate(logical_axes):
    wanted = table.get(name, ()) if name is not None else ()
    for a in wanted:
      if a not in mesh.shape:
        raise ValueError(
          f"rule for logical axis {name!r} names mesh axis {a!r}, not one "
          f"of {tuple(mesh.axis_names)}"
        )
    axes = [a for a in wanted if a not in used and mesh.shape[a] > 1]
    if shape is not None and axes:
      if shape[i] % math.prod(mesh.shape[a] for a in axes):
        axes = []
    used.update(axes)
    spec.append(
      None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
    )
  return PartitionSpec(*spec)


def logical_sharding(
  logical_axes: Sequence[str | None],
  rules: Rules,
  mesh: Mesh,
  shape: Sequence[int] | None = None,
) -> NamedSharding:
  return NamedSharding(mesh, logical_to_spec(logical_axes, rules, mesh, shape))


def _var_axes(variable: nnx.Variable) -> tuple[str | None, ...] | None:
  axes = variable.get_metadata().get("out_sharding")
  return None if axes is None else tuple(axes)


def state_shardings(state: Any, mesh: Mesh, rules: Rules) -> Any:
  """A `NamedSharding` per leaf of an `nnx.State` (or any Variable tree).

  Variables carry their logical axes as `out_sharding` metadata; anything
  without it is replicated.
  """

  def one(x):
    if isinstance(x, nnx.Variable):
      axes = _var_axes(x)
      value = x.get_value()
      if axes is None:
        return x.replace(NamedSharding(mesh, PartitionSpec()))
      return x.replace(logical_sharding(axes, rules, mesh, value.shape))
    return NamedSharding(mesh, PartitionSpec())

  return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_state(state: Any, mesh: Mesh, rules: Rules) -> Any:
  """Places every array of `state` on `mesh` according to `rules`.

  Arrays spread over several processes (a multi-process run's training
  weights) placed on a mesh of this process's devices (a per-process
  sampler's) move device to device, never through the host:
  `to_own_devices`, a collective (every process calls it at the same point).
  """
  shardings = state_shardings(state, mesh, rules)
  if not is_process_local(mesh):
    return jax.device_put(state, shardings)
  xs, treedef = jax.tree.flatten(state)
  targets = treedef.flatten_up_to(shardings)
  spread = [isinstance(x, jax.Array) and not x.is_fully_addressable for x in xs]

  def pick(items, spread_ones):
    return [a for a, s in zip(items, spread, strict=True) if s == spread_ones]

  moved = iter(to_own_devices(pick(xs, True), pick(targets, True)))
  placed = iter(jax.device_put(pick(xs, False), pick(targets, False)))
  return jax.tree.unflatten(
    treedef, [next(moved) if s else next(placed) for s in spread]
  )


def _without_axes(spec: PartitionSpec, axes: set[str]) -> PartitionSpec:
  def keep(entry):
    names = entry if isinstance(entry, tuple) else (entry,)
    names = tuple(a for a in names if a is not None and a not in axes)
    return None if not names else names[0] if len(names) == 1 else names

  return PartitionSpec(*(keep(e) for e in spec))


@functools.lru_cache(maxsize=16)
def _resharder(shardings: tuple[NamedSharding, ...]) -> Any:
  return jax.jit(lambda *xs: xs, out_shardings=shardings)


def to_own_devices(
  xs: Sequence[jax.Array], targets: Sequence[NamedSharding]
) -> list[jax.Array]:
  """Arrays spread over several processes' devices, placed on shardings of
  this process's devices, device to device.

  Each array is first laid out on its own mesh as its target asks, without
  the mesh axes that span processes (a device collective, one for all the
  arrays; none when it is laid out so already, as weights replicated over a
  data axis that spans the processes are): then this process's devices hold
  all of it, as the same blocks its block of the mesh (`local_mesh`) gives,
  and its shards become the array on that block without a copy. A target
  that differs from that layout is then reached by a move among this
  process's devices. A collective: every process calls it at the same
  point with the same shapes and shardings.
  """
  wholes, blocks = [], []
  for x, target in zip(xs, targets, strict=True):
    source = x.sharding
    if not isinstance(source, NamedSharding):
      raise ValueError(
        f"to_own_devices: {type(source).__name__} is not a NamedSharding"
      )
    block = local_mesh(source.mesh)
    if target.mesh.axis_names != source.mesh.axis_names:
      raise ValueError(
        f"to_own_devices: target mesh axes {target.mesh.axis_names} are not "
        f"the source's {source.mesh.axis_names}"
      )
    spans = {
      a for a in block.axis_names if block.shape[a] != source.mesh.shape[a]
    }
    wholes.append(NamedSharding(source.mesh, _without_axes(target.spec, spans)))
    blocks.append(block)
  todo = [
    i
    for i, (x, whole) in enumerate(zip(xs, wholes, strict=True))
    if not x.sharding.is_equivalent_to(whole, x.ndim)
  ]
  xs = list(xs)
  if todo:
    gathered = _resharder(tuple(wholes[i] for i in todo))(
      *(xs[i] for i in todo)
    )
    for i, x in zip(todo, gathered, strict=True):
      xs[i] = x
  out = []
  for x, whole, block, target in zip(xs, wholes, blocks, targets, strict=True):
    own = NamedSharding(block, whole.spec)
    shards = {s.device: s.data for s in x.addressable_shards}
    local = jax.make_array_from_single_device_arrays(
      x.shape, own, [shards[d] for d in block.devices.flat]
    )
    same = own.is_equivalent_to(target, x.ndim)
    out.append(local if same else jax.device_put(local, target))
  return out


def shard_model(model: nnx.Module, mesh: Mesh, rules: Rules) -> nnx.Module:
  """Moves a model's parameters onto `mesh` in place; returns the model."""
  state = nnx.state(model)
  nnx.update(model, shard_state(state, mesh, rules))
  return model


@dataclasses.dataclass
class _Active(threading.local):
  mesh: Mesh | None = None
  rules: Rules = ()


_ACTIVE = _Active()


@contextlib.contextmanager
def use_rules(mesh: Mesh | None, rules: Rules) -> Iterator[None]:
  """Activates `mesh` and `rules` for `constrain` while tracing."""
  previous = (_ACTIVE.mesh, _ACTIVE.rules)
  _ACTIVE.mesh, _ACTIVE.rules = mesh, tuple(rules)
  try:
    yield
  finally:
    _ACTIVE.mesh, _ACTIVE.rules = previous


def active_mesh() -> Mesh | None:
  return _ACTIVE.mesh


def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
  """`with_sharding_constraint` by logical names; identity with no mesh."""
  mesh = _ACTIVE.mesh
  if mesh is None:
    return x
  spec = logical_to_spec(logical_axes, _ACTIVE.rules, mesh, x.shape)
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def constrain_state(state: Any, leading: int = 0) -> Any:
  """`constrain` for every Variable of a state by its logical axes.

  `leading` unnamed (replicated) dimensions come before each Variable's
  own, as in parameters stacked over layers for a scan. Constraining the
  parameters inside a traced function also constrains their gradients
  (the transpose of a sharding constraint is the same constraint), which
  keeps a scan's per-layer gradients split the way the parameters are.
  """

  def one(x):
    axes = _var_axes(x) if isinstance(x, nnx.Variable) else None
    if axes is None:
      return x
    return x.replace(constrain(x.get_value(), (None,) * leading + axes))

  return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))
