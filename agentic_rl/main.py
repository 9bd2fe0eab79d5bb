"""Entry point: `python -m agentic_rl.main --config=F.py:arg --workdir=D`.

Runs `agentic_rl.train.loop.train` (cold-start SFT, then RL), resuming from
the newest checkpoint in --workdir, and prints the summary.
"""

import json
import os

from absl import app, flags, logging
from ml_collections import config_flags

from agentic_rl import sweeps
from agentic_rl.train import loop

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Experiment config file (configs/*.py:arg).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints and logs.")
flags.mark_flags_as_required(["config", "workdir"])


def _paired_line(paired: dict | None, label: str = "") -> str:
  if not paired:
    return ""
  return (
    f"task by task{label} (of {paired['n']}): RL lost {paired['only_a']}, "
    f"gained {paired['only_b']} (McNemar p={paired['p_value']:.3g})\n"
  )


def _paired_lines(summary: dict) -> str:
  """The run's RL-vs-SFT pairing, then one line per difficulty if several."""
  by_difficulty = summary.get("rl_vs_sft_by_difficulty") or {}
  return _paired_line(summary.get("rl_vs_sft")) + "".join(
    _paired_line(paired, f", {d}") for d, paired in by_difficulty.items()
  )


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every file at INFO
  if os.environ.get(sweeps.DISTRIBUTED_ENV) == "1":
    sweeps.initialize_distributed()
  summary = loop.train(_CONFIG.value, _WORKDIR.value)
  evals = "\n".join(
    f"  {e['phase']:>3} step {e['rl_step']:4d}: success "
    f"{e['success_rate']:.3f}, return {e['return_mean']:.2f}"
    for e in summary["evals"]
  )
  print(
    f"\nHeld-out evaluation ({summary['eval_tasks']} tasks, greedy):\n"
    f"{evals}\n"
    f"success after SFT: {summary['success_after_sft']:.3f}  ->  "
    f"after RL: {summary['success_after_rl']:.3f}\n"
    + _paired_lines(summary)
    + f"TensorBoard logs: {summary['tensorboard']}\n"
    f"summary: {json.dumps(summary['workdir'])}/summary.json"
  )


if __name__ == "__main__":
  app.run(main)
