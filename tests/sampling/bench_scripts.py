"""Loads a benchmark of scripts/benchmarks/ as a module (scripts is no
package), for the tests of the benchmark scripts."""

import importlib.util
import pathlib

BENCHMARKS = (
  pathlib.Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"
)


def load(name: str):
  """scripts/benchmarks/<name>.py, executed as a fresh module."""
  spec = importlib.util.spec_from_file_location(
    f"bench_{name}", BENCHMARKS / f"{name}.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
