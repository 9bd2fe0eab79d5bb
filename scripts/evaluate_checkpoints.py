"""Held-out success of saved checkpoints on a larger evaluation set.

  python scripts/evaluate_checkpoints.py --config=configs/sokoban.py:gigpo \
      --source=runs/sokoban_gigpo_kl/checkpoints --steps=150,250 \
      --eval_tasks=256 --out=experiments/sokoban_sft_rl/eval_256.json

Builds the run's components in a scratch workdir (the source run is not
touched), restores each optimizer step's checkpoint from --source and plays
the first --eval_tasks levels of the test split greedily.
"""

import json
import pathlib
import tempfile

from absl import app, flags, logging
from ml_collections import config_flags

from agentic_rl.train import loop
from agentic_rl.train.checkpoint import Checkpointer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config.")
_SOURCE = flags.DEFINE_string("source", None, "Checkpoint directory.")
_STEPS = flags.DEFINE_list("steps", None, "Checkpoint steps to evaluate.")
_TASKS = flags.DEFINE_integer("eval_tasks", 256, "Held-out levels.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
flags.mark_flags_as_required(["config", "source", "steps", "out"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  config.tasks.eval_counts = (_TASKS.value,)
  results = {}
  with tempfile.TemporaryDirectory() as scratch:
    run = loop.setup(config, scratch)
    source = Checkpointer(_SOURCE.value)
    for step in (int(s) for s in _STEPS.value):
      run.state, _ = source.restore(run.state, run.layout, step=step)
      ev = loop.evaluate(run)
      results[step] = {
        k: ev[k] for k in ("success_rate", "return_mean", "turns_per_episode")
      }
      print(
        f"checkpoint {step}: success {ev['success_rate']:.4f} on "
        f"{len(run.eval_tasks)} levels, return {ev['return_mean']:.3f}"
      )
    source.close()
    run.checkpointer.close()
    run.writer.close()
  out = pathlib.Path(_OUT.value)
  payload = {"source": _SOURCE.value, "eval_tasks": _TASKS.value}
  out.write_text(json.dumps({**payload, "results": results}, indent=2))


if __name__ == "__main__":
  app.run(main)
