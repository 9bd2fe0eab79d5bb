"""The scripted expert's success on a config's tasks within the config's
limits: what a policy trained with it could reach at most.

  python scripts/expert_ceiling.py \
      --config=configs/sokoban.py:gigpo,curriculum --split=eval
  python scripts/expert_ceiling.py \
      --run=experiments/sokoban_curriculum/runs/sokoban/gigpo/seed0

Builds the components of the config (or of a run's recorded config) in a
scratch workdir and plays the environment's expert (`rollout.
expert_ceiling`) on the held-out tasks (`--split=eval`, `tasks.
eval_counts` per difficulty) or the training tasks (`--split=train`),
under the rollout's turn budget and context length and the environment's
step budget. Prints the rate overall and per difficulty, and, with --out,
writes them as JSON. Every RL run also keeps its held-out ceiling in
summary.json (`expert_ceiling`).
"""

import json
import pathlib
import sys

# The repository root: the config files import `configs`.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentic_rl import rollout  # noqa: E402
from agentic_rl.train import loop  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config.")
_RUN = flags.DEFINE_string("run", None, "Or a run's workdir (its config).")
_SPLIT = flags.DEFINE_enum("split", "eval", ["eval", "train"], "Which tasks.")
_OUT = flags.DEFINE_string("out", None, "JSON output path (optional).")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  if (_CONFIG.value is None) == (_RUN.value is None):
    raise app.UsageError("give one of --config and --run")
  config = _CONFIG.value or loop.run_config(_RUN.value)
  with loop.scratch_run(config) as run:
    tasks = run.eval_tasks if _SPLIT.value == "eval" else list(run.train_pool)
    ceiling = rollout.expert_ceiling(run.rollout, tasks)
  if not ceiling:
    raise SystemExit(f"{config.env.name}: the environment has no expert")
  print("| split | tasks | difficulty | expert success |\n|---|---|---|---|")
  for key, rate in ceiling.items():
    level = key.removeprefix("success_rate").lstrip("/") or "all"
    print(f"| {_SPLIT.value} | {len(tasks)} | {level} | {rate:.4f} |")
  if _OUT.value:
    out = {"split": _SPLIT.value, "tasks": len(tasks), **ceiling}
    pathlib.Path(_OUT.value).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
  app.run(main)
