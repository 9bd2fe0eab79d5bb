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

from configs.xla_cpu import FAST_COMPILE

# Must be set before jax is imported anywhere in the test process; the
# compile flags are configs/xla_cpu.py's (which says what each one saves).
os.environ.setdefault(
  "XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}"
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
