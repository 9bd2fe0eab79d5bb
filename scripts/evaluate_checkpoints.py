"""Held-out success of saved checkpoints on a larger evaluation set.

  python scripts/evaluate_checkpoints.py \
      --source=runs/sokoban_gigpo_kl/checkpoints --steps=150,250 \
      --eval_tasks=256 --out=experiments/sokoban_sft_rl/eval_256.json

Builds the run's components in a scratch workdir (the source run is not
touched) from the run's own config.json (the directory above --source) or
from --config, restores each RL step's checkpoint from --source and plays
the first --eval_tasks levels of the test split greedily, at each of the
config's difficulties (`tasks.difficulties`).

The JSON keeps, per step, which tasks were solved, so checkpoints can be
compared task by task (`report.paired_tasks`, McNemar's exact test): each
step against the first listed, and, with --against=EVAL.json:STEP, against
a step of another run's evaluation by this script (say the SFT stage an RL
run started from), on the tasks both played; with several difficulties,
also within each (`report.paired_tasks_by`).
"""

import json
import pathlib
import sys

# The repository root: the config files import `configs`.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentic_rl import report  # noqa: E402
from agentic_rl.train import loop  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Run config (default: the source run's config.json)."
)
_SOURCE = flags.DEFINE_string("source", None, "Checkpoint directory.")
_STEPS = flags.DEFINE_list("steps", None, "Checkpoint steps to evaluate.")
_TASKS = flags.DEFINE_integer(
  "eval_tasks", 256, "Held-out levels per difficulty."
)
_AGAINST = flags.DEFINE_string(
  "against", None, "EVAL.json:STEP of an earlier evaluation to pair with."
)
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
flags.mark_flags_as_required(["source", "steps", "out"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  source = pathlib.Path(_SOURCE.value)
  config = _CONFIG.value or loop.run_config(source.resolve().parent)
  config.tasks.eval_counts = (_TASKS.value,) * len(config.tasks.difficulties)
  against = report.read_solved(_AGAINST.value) if _AGAINST.value else None
  results = {}
  with loop.scratch_run(config) as run:
    difficulty = {t.id: f"d{t.difficulty}" for t in run.eval_tasks}
    for step in (int(s) for s in _STEPS.value):
      loop.restore_step(run, _SOURCE.value, step)
      ev, solved = loop.evaluate_by_task(run)
      results[step] = {**loop.eval_headline(ev), "solved": solved}
      rates = "".join(
        f", {k.removeprefix('success_rate/')} {v:.4f}"
        for k, v in ev.items()
        if k.startswith("success_rate/")
      )
      print(
        f"checkpoint {step}: success {ev['success_rate']:.4f} on "
        f"{len(run.eval_tasks)} levels{rates}, return {ev['return_mean']:.3f}"
      )
  by_difficulty = len(set(difficulty.values())) > 1
  references = {}
  if len(results) > 1:
    first = next(iter(results))
    references[f"step {first}"] = results[first]["solved"]
  if against is not None:
    references[_AGAINST.value] = against
  for name, reference in references.items():
    print(f"\nPaired with {name} (McNemar's exact test):")
    print("| step | tasks | rate then | rate now | lost | gained | p |")
    print("|---|---|---|---|---|---|---|")
    for step, r in results.items():
      paired = report.paired_tasks(reference, r["solved"])
      r.setdefault("paired", {})[name] = paired.to_dict()
      rows = {"": paired}
      if by_difficulty:
        split = report.paired_tasks_by(reference, r["solved"], difficulty)
        r.setdefault("paired_by_difficulty", {})[name] = {
          d: p.to_dict() for d, p in split.items()
        }
        rows.update({f", {d}": p for d, p in split.items()})
      for label, p in rows.items():
        print(
          f"| {step}{label} | {p.n} | {p.rate_a:.3f} | {p.rate_b:.3f} "
          f"| {p.only_a} | {p.only_b} | {p.p_value:.3g} |"
        )
  out = pathlib.Path(_OUT.value)
  payload = {"source": _SOURCE.value, "eval_tasks": _TASKS.value}
  out.write_text(json.dumps({**payload, "results": results}, indent=2))


if __name__ == "__main__":
  app.run(main)
