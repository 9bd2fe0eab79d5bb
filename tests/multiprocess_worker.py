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
print(json.dumps(out), flush=True)
