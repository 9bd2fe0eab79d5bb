"""Benchmarks: `python scripts/bench.py NAME [flags]`.

Each benchmark lives in `scripts/benchmarks/NAME.py` with `main(argv)`; it
prints a table and writes JSON (default `experiments/benchmarks/NAME.json`).
"""

import importlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
  names = sorted(p.stem for p in (HERE / "benchmarks").glob("[!_]*.py"))
  if len(sys.argv) < 2 or sys.argv[1] not in names:
    sys.exit(f"usage: python scripts/bench.py {{{','.join(names)}}} [flags]")
  sys.path.insert(0, str(HERE))
  module = importlib.import_module(f"benchmarks.{sys.argv[1]}")
  module.main(sys.argv[2:])


if __name__ == "__main__":
  main()
