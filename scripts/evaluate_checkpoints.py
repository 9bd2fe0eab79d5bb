"""Held-out success of saved checkpoints on a larger evaluation set.

  python scripts/evaluate_checkpoints.py \
      --source=runs/sokoban_gigpo_kl/checkpoints --steps=150,250 \
      --eval_tasks=256 --out=experiments/sokoban_sft_rl/eval_256.json

Builds the run's components in a scratch workdir (the source run is not
touched) from the run's own config.json (the directory above --source) or
from --config, restores each RL step's checkpoint from --source and plays
the first --eval_tasks levels of the test split greedily.
"""

import json
import pathlib
import sys

# The repository root: the config files import `configs`.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentic_rl.train import loop  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Run config (default: the source run's config.json)."
)
_SOURCE = flags.DEFINE_string("source", None, "Checkpoint directory.")
_STEPS = flags.DEFINE_list("steps", None, "Checkpoint steps to evaluate.")
_TASKS = flags.DEFINE_integer("eval_tasks", 256, "Held-out levels.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
flags.mark_flags_as_required(["source", "steps", "out"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  source = pathlib.Path(_SOURCE.value)
  config = _CONFIG.value or loop.run_config(source.resolve().parent)
  config.tasks.eval_counts = (_TASKS.value,)
  results = {}
  with loop.scratch_run(config) as run:
    for step in (int(s) for s in _STEPS.value):
      loop.restore_step(run, _SOURCE.value, step)
      ev = loop.evaluate(run)
      results[step] = {
        k: ev[k] for k in ("success_rate", "return_mean", "turns_per_episode")
      }
      print(
        f"checkpoint {step}: success {ev['success_rate']:.4f} on "
        f"{len(run.eval_tasks)} levels, return {ev['return_mean']:.3f}"
      )
  out = pathlib.Path(_OUT.value)
  payload = {"source": _SOURCE.value, "eval_tasks": _TASKS.value}
  out.write_text(json.dumps({**payload, "results": results}, indent=2))


if __name__ == "__main__":
  app.run(main)
