"""Expands an ablation config's sweep into runs and runs them, or prints them.

  python scripts/sweep.py \
      --config=configs/ablations/credit_assignment.py:smoke \
      --root=runs/ca_smoke [--workers=2] [--print_commands] [--mesh=2,2,2] \
      [--distributed] [--only='sokoban/*,*/seed0'] [--stages_from=<root>]

Runs whose workdir holds summary.json are skipped; interrupted ones resume
from their checkpoints. `--print_commands` prints one launch line per
unfinished run (for a cluster scheduler or a TPU pod) instead of running.
`--distributed` sets AGENTIC_RL_DISTRIBUTED=1 on each run so that
`agentic_rl.main` calls `jax.distributed.initialize()` (multi-host, one
process per host; the README's "On a mesh, and on several hosts").
`--stages_from=<root>` copies the finished SFT stages this sweep needs
from another root of the same recipe (checked field by field, see
`sweeps.adopt_stages`) instead of training them again.
Every run still to do has its config checked first (`sweeps.check_runs`:
the checks `loop.setup` makes before it builds anything), so a bad
setting in any run stops the sweep before it launches one.
`--only` runs the subset whose names match any of the glob patterns (and
the shared SFT stages they start from); the manifest still lists every run,
so the report marks the rest unfinished. The manifest `<root>/sweep.json`
is what scripts/report.py reads. Local runs share a persistent XLA
compilation cache (`--compilation_cache`, default `<root>/jax_cache`; a
JAX_COMPILATION_CACHE_DIR already in the environment is kept). The sweep
measures this machine's numerics probe once, in a child process, and
hands it to its runs (`sweeps.probe_environ`: a run takes it if it
computes under the same key and JAX/XLA settings, as all but a run with
its own XLA_FLAGS do) instead of each run measuring it (15-30 s each on a
2-core CPU).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

from agentic_rl import sweeps  # noqa: E402

_CONFIG = flags.DEFINE_string(
  "config", None, "Ablation config with a `sweep` field (file.py:arg)."
)
_ROOT = flags.DEFINE_string("root", None, "Parent of the runs' workdirs.")
_WORKERS = flags.DEFINE_integer("workers", 1, "Runs at a time.")
_PRINT = flags.DEFINE_bool(
  "print_commands", False, "Print launch commands instead of running."
)
_MESH = flags.DEFINE_string(
  "mesh", None, "config.mesh.shape for every grid run, e.g. 2,2,2."
)
_DISTRIBUTED = flags.DEFINE_bool(
  "distributed", False, "Multi-host: jax.distributed.initialize() per run."
)
_PYTHON = flags.DEFINE_string(
  "python", sys.executable, "Interpreter for the runs (local runs only)."
)
_CACHE = flags.DEFINE_string(
  "compilation_cache",
  None,
  "Persistent XLA compilation cache the local runs share (default "
  "<root>/jax_cache; '' turns it off; JAX_COMPILATION_CACHE_DIR in the "
  "environment wins).",
)
_STAGES_FROM = flags.DEFINE_string(
  "stages_from",
  None,
  "Another sweep root whose finished SFT stages this sweep's stages may "
  "copy (checked on the fields init_from checks) instead of training.",
)
_ONLY = flags.DEFINE_list(
  "only", None, "Glob patterns over run names, e.g. 'sokoban/*,*/seed0'."
)
flags.mark_flags_as_required(["config", "root"])


def main(argv: list[str]) -> int:
  del argv
  config = sweeps.load_config(_CONFIG.value)
  mesh = sweeps.parse_mesh(_MESH.value) if _MESH.value else None
  runs = sweeps.expand(config.get("sweep"), mesh=mesh)
  chosen = sweeps.select(runs, _ONLY.value) if _ONLY.value else runs
  if _STAGES_FROM.value:
    for name, outcome in sweeps.adopt_stages(
      chosen, _ROOT.value, _STAGES_FROM.value
    ):
      print(f"{outcome:>28}  {name}", flush=True)
  todo = sweeps.unfinished(chosen, _ROOT.value)
  if todo:
    # Checking runs an estimator on a probe batch: on the CPU, so that this
    # process, which trains nothing, never claims the runs' accelerators
    # (a TPU host's chips are one process's). Its children keep their own
    # platforms: this sets no environment variable.
    import jax

    jax.config.update("jax_platforms", "cpu")
    sweeps.check_runs(todo)  # every config, before any run is launched
  if _PRINT.value:
    for run in todo:
      print(
        sweeps.shell_command(run, _ROOT.value, distributed=_DISTRIBUTED.value)
      )
    return 0
  sweeps.write_manifest(_ROOT.value, config.sweep, runs, _CONFIG.value)
  print(
    f"{len(chosen)} runs, {len(chosen) - len(todo)} already finished, "
    f"{len(todo)} to run with {_WORKERS.value} worker(s)",
    flush=True,
  )

  def report(r: sweeps.RunResult) -> None:
    extra = "" if r.status == "skipped" else f" in {r.seconds:.0f}s"
    if r.status == "failed":
      extra += f" (exit {r.returncode}; log {r.log})"
    print(f"{r.status:>7}  {r.name}{extra}", flush=True)

  results = sweeps.run_sweep(
    chosen,
    _ROOT.value,
    workers=_WORKERS.value,
    python=_PYTHON.value,
    distributed=_DISTRIBUTED.value,
    on_result=report,
    compilation_cache=_CACHE.value,
    extra_env=(
      sweeps.probe_environ(
        _ROOT.value, python=_PYTHON.value, compilation_cache=_CACHE.value
      )
      if todo
      else None
    ),
  )
  failed = [r.name for r in results if r.status == "failed"]
  if failed:
    print(f"{len(failed)} run(s) failed: {failed}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  app.run(lambda argv: sys.exit(main(argv)))
