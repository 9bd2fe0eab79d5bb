"""One process of `test_multiprocess.py`'s two-process run (not a test).

Started with AGENTIC_RL_NUM_PROCESSES / AGENTIC_RL_PROCESS_ID and
JAX_COORDINATOR_ADDRESS, 4 simulated CPU devices each; prints one JSON line
of what it saw. Given a workdir, it also sets up the smoke run there on a
(2, 1, 4) mesh and logs one row.
"""

import json
import sys

import numpy as np

from agentic_rl import sweeps

sweeps.initialize_distributed()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from agentic_rl import sharding as shd  # noqa: E402

me = jax.process_index()
out = {
  "process": me,
  "primary": shd.is_primary(),
  "devices": jax.device_count(),
}
try:
  shd.make_mesh((1, 1, 1))
  out["small_mesh"] = "built"
except ValueError as e:
  out["small_mesh"] = str(e)
mesh = shd.make_mesh((2, 1, 4))  # data over the processes, tensor within
rows = np.arange(3, dtype=np.float32) + 10 * me
x_N = jax.make_array_from_process_local_data(
  NamedSharding(mesh, P("data")), rows
)
out["fully_addressable"] = x_N.is_fully_addressable
out["gathered"] = shd.to_host(x_N).tolist()
total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x_N)
out["replicated_sum"] = float(shd.to_host(total))
# Weights replicated over the processes' data axis are read from this
# process's own shards; split ones are gathered: both give the whole array.
w = jax.device_put(
  np.arange(32.0).reshape(4, 8), NamedSharding(mesh, P(None, "tensor"))
)
v = jax.device_put(np.arange(16.0), NamedSharding(mesh, P(("data", "tensor"))))
out["own_shards"] = shd._each_process_holds_whole(w)
out["split"] = shd._each_process_holds_whole(v)
out["read_whole"] = bool(
  np.array_equal(shd.to_host(w), np.arange(32.0).reshape(4, 8))
  and np.array_equal(shd.to_host(v), np.arange(16.0))
)
local = shd.local_mesh(mesh)
out["block"] = list(local.devices.shape)
out["block_mine"] = all(d.process_index == me for d in local.devices.flat)
# Onto this process's devices, device to device (never through the host):
# weights replicated over the processes keep their buffers, split ones are
# gathered on device first; a target on part of this process's devices is
# reached by a move among them.
half = jax.sharding.Mesh(
  np.asarray(local.devices.flat[:2]).reshape(1, 1, 2), local.axis_names
)
targets = [
  NamedSharding(local, P(None, "tensor")),
  NamedSharding(local, P("tensor")),
  NamedSharding(half, P(None, "tensor")),
]
read, gather = shd.to_host, multihost_utils.process_allgather


def _through_host(*args, **kwargs):
  raise AssertionError("read through the host")


shd.to_host = multihost_utils.process_allgather = _through_host
try:
  moved = shd.to_own_devices([w, v, w], targets)
finally:
  shd.to_host, multihost_utils.process_allgather = read, gather
out["moved_local"] = [
  x.is_fully_addressable and x.sharding == t
  for x, t in zip(moved, targets, strict=True)
]
out["moved_values"] = [
  np.array_equal(np.asarray(x), np.asarray(shd.to_host(y)))
  for x, y in zip(moved, [w, v, w], strict=True)
]


def _buffers(x):
  return sorted(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)


out["moved_same_buffers"] = [
  _buffers(moved[0]) == _buffers(w),
  _buffers(moved[1]) == _buffers(v),
]
d = jax.devices()  # a (2, 1, 4) mesh: rows [p0 p0 p1 p1] and [p1 p1 p0 p0]
try:
  shd.local_mesh(
    shd.make_mesh((2, 1, 4), [d[i] for i in (0, 1, 4, 5, 6, 7, 2, 3)])
  )
  out["interleaved"] = "built"
except ValueError as e:
  out["interleaved"] = str(e)
out["objects"] = shd.allgather_objects({"me": me, "rows": list(range(me + 1))})
try:  # process 1's object does not pickle: both raise, neither waits
  shd.allgather_objects((lambda: me) if me == 1 else me)
  out["unpicklable"] = None
except TypeError as e:
  out["unpicklable"] = str(e)
shd.check_same_across_processes({"a": np.arange(4), "b": "text"}, "equal data")
try:
  shd.check_same_across_processes({"a": np.arange(4) + me}, "the test's rows")
  out["divergence"] = None
except shd.ProcessDivergenceError as e:
  out["divergence"] = str(e)
if len(sys.argv) > 1:  # a run's setup in the workdir given: who writes what
  from agentic_rl.train import loop  # noqa: E402

  config = sweeps.load_config("configs/sokoban.py:gigpo,smoke")
  config.mesh.shape = (2, 1, 4)
  run = loop.setup(config, sys.argv[1], record=False)
  run.writer.write_scalars(0, {"probe_row": float(me)})
  run.writer.close()
  run.checkpointer.close()

  # Per-process rollouts (the default placement): each process plays its
  # part of the tasks on its own block of the mesh, and all get the whole.
  from agentic_rl.rollout import Rollout  # noqa: E402
  from agentic_rl.rollout.driver import RolloutProcessError  # noqa: E402

  samplers = run.rollout.samplers
  out["sampler_mesh"] = list(samplers[0].mesh.devices.shape)
  out["sampler_devices_mine"] = all(
    d.process_index == me for s in samplers for d in s.mesh.devices.flat
  )
  made = []

  def counting(task, factory=run.rollout.env_factory):
    made.append(task.id)
    return factory(task)

  def player(cls=Rollout, factory=counting):
    r = run.rollout
    config = r.config.replace(max_turns=2)  # fewer programs to compile
    return cls(r.samplers, r.tokenizer, factory, r.reward_stack, config)

  tasks = run.eval_tasks[:3]  # parts of 2 and 1 tasks
  key = jax.random.fold_in(run.state.rng, 7)  # on every process's devices
  # The training weights, moved into the local samplers on device.
  shd.to_host = _through_host
  try:
    loop._sync_policy(run)
  finally:
    shd.to_host = read
  trained = nnx.split(samplers[0]._layout(run.state.model.merge()))[1]
  out["synced"] = [
    x.is_fully_addressable and np.array_equal(np.asarray(x), y)
    for x, y in zip(
      jax.tree.leaves(samplers[0].params),
      jax.tree.leaves(shd.to_host(trained)),
      strict=True,
    )
  ]
  played = player().run(tasks, key)
  out["envs_made"] = sorted(made)  # before the runs below make more
  out["task_ids"] = [t.id for t in tasks]
  out["played"] = [
    [t.task.id, t.group_id, sum(len(u.action_tokens) for u in t.turns)]
    for t in played
  ]
  streams = [[x for u in t.turns for x in u.action_tokens] for t in played]
  # The same parts played one after the other in this process alone.
  local_key = shd.key_on_this_process(key)
  alone = [
    t
    for p in range(2)
    for t in player()._play(tasks, jax.random.fold_in(local_key, p), 0, (p, 2))
  ]
  out["same_as_alone"] = streams == [
    [x for u in t.turns for x in u.action_tokens] for t in alone
  ]
  try:
    player().run(tasks[: 2 + me], key)
    out["tasks_differ"] = None
  except shd.ProcessDivergenceError as e:
    out["tasks_differ"] = str(e)

  class Failing(Rollout):
    def _finish(self, ep, policy_version):
      raise RuntimeError(f"scoring broke in process {me}")

  try:
    player(Failing if me == 1 else Rollout).run(tasks, key)
    out["failure"] = None
  except RolloutProcessError as e:
    out["failure"] = str(e)

  # The cold start's expert demos: each process replays its part of the
  # demo tasks (smoke: 8, parts of 4) and both get what one process would.
  from agentic_rl.rollout import demos as demo_lib  # noqa: E402

  demo_tasks = loop.sft_demo_tasks(run.train_pool, config.sft)
  replayed = []

  def replaying(task, factory=run.rollout.env_factory):
    replayed.append(task.id)
    return factory(task)

  framing = (run.tokenizer, run.rollout.config, run.rollout.reward_stack)
  split = demo_lib.expert_trajectories(
    demo_tasks, replaying, *framing, per_process=True
  )
  whole = demo_lib.expert_trajectories(
    demo_tasks, run.rollout.env_factory, *framing
  )
  out["demo_task_ids"] = [t.id for t in demo_tasks]
  out["demos_replayed"] = replayed  # the expert check's env, then its part
  out["demos_same"] = [d.to_dict() for d in split] == [
    d.to_dict() for d in whole
  ]

  def breaking(task, factory=run.rollout.env_factory):
    if me == 1 and task.id == demo_tasks[-1].id:
      raise RuntimeError(f"sandbox broke in process {me}")
    return factory(task)

  try:
    demo_lib.expert_trajectories(
      demo_tasks, breaking, *framing, per_process=True
    )
    out["demo_failure"] = None
  except demo_lib.DemoProcessError as e:
    out["demo_failure"] = str(e)
print(json.dumps(out), flush=True)
