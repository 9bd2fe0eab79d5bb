"""Test session setup: 8 simulated CPU devices and one compilation cache.

Many tests build the same jitted functions anew (a sampler, a train step,
a smoke run's whole loop) for the same shapes. JAX's in-memory cache is per
function object, so each would compile again; the persistent cache is keyed
by the HLO, so every test after the first loads the executable from disk. A
cached executable is the one a fresh compile would build (same HLO,
compiler and flags), so no result changes. The directory is made once by
the pytest process that starts the session; xdist workers and the
subprocesses tests launch inherit it through the environment.
"""

import os
import shutil
import tempfile

# Must be set before jax is imported anywhere in the test process. LLVM's
# optimisation level 0: the tests check what the compiled HLO computes, and
# XLA's HLO passes (fusion, layout, sharding) run as at the default level;
# only the machine code is less optimised. A smoke run from a cold cache
# took a quarter less CPU time (59 -> 45 s), and the suite, mostly
# compiles, a sixth less (786 -> 651 s on 2 cores). XLA:CPU's older
# whole-program runtime instead of its thunk runtime (the same HLO, one
# LLVM module per program instead of one kernel per fusion): a smoke run
# took 36 s instead of 42 from a cold cache and 18 instead of 21 from a
# warm one. XLA:CPU's elemental fusion emitters instead of its MLIR ones
# (the same HLO and fusions, other code for each fusion): a process that
# builds and runs one tiny-preset RL step took 0.76x the CPU time (median
# of 8 interleaved pairs), a cold smoke run 0.83x (4 pairs), this suite
# 0.79x the wall time (606 against 779 s, 2 pairs), and a third less peak
# memory.
os.environ.setdefault(
  "XLA_FLAGS",
  "--xla_force_host_platform_device_count=8"
  " --xla_backend_optimization_level=0 --xla_cpu_use_thunk_runtime=false"
  " --xla_cpu_use_fusion_emitters=false",
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(
    prefix="agentic_rl_test_jax_cache_"
  )
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


def pytest_sessionfinish(session):
  # Only the process that made the directory removes it (not a worker).
  if _OWN_CACHE and not hasattr(session.config, "workerinput"):
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
