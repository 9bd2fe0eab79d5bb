"""How closely a checkpoint imitates the scripted expert, turn by turn.

  python scripts/demo_fit.py --config=configs/code_repair.py:gigpo \
      --source=runs/code_repair/sft --tasks=64 --out=fit.json

Replays the environment's expert on the first --tasks held-out tasks and on
as many of the SFT stage's own demonstration tasks, framed and tokenized as
a rollout frames them (`rollout.demos`), and teacher-forces the checkpoint
on each episode. Per action turn it reports the mean negative log-likelihood
per token and the fraction of turns whose every token is the model's argmax:
the turns greedy decoding reproduces, given the expert's history so far.
The demonstration tasks against the held-out ones separate memorizing the
demonstrations from learning the behaviour; a turn whose held-out fit is
poor is where greedy episodes leave the expert's path.

The run is rebuilt from --config in a scratch workdir, as in
`evaluate_checkpoints.py`; --step picks the checkpoint (0: the end of SFT).
"""

import json
import pathlib
import sys

# The repository root: the config files import `configs`.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentic_rl.rollout.demos import expert_trajectories, turn_fit  # noqa: E402
from agentic_rl.train import loop  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config.")
_SOURCE = flags.DEFINE_string("source", None, "Run directory.")
_STEP = flags.DEFINE_integer("step", 0, "Checkpoint (RL step) to load.")
_TASKS = flags.DEFINE_integer("tasks", 64, "Episodes per split.")
_BATCH = flags.DEFINE_integer("batch", 8, "Episodes per forward pass.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
flags.mark_flags_as_required(["config", "source", "out"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  n = _TASKS.value
  with loop.scratch_run(config) as run:
    loop.restore_step(
      run, pathlib.Path(_SOURCE.value) / "checkpoints", _STEP.value
    )
    model = run.state.model.merge()
    splits = {
      "demos": loop.sft_demo_tasks(run.train_pool, config.sft)[:n],
      "held_out": list(run.eval_tasks)[:n],
    }
    results = {}
    for split, tasks in splits.items():
      demos = expert_trajectories(
        tasks, run.rollout.env_factory, run.tokenizer, run.rollout.config
      )
      results[split] = turn_fit(
        model, demos, run.tokenizer.eos_id, _BATCH.value
      )
  print(f"{_SOURCE.value} (step {_STEP.value})")
  print("turn | demos: NLL/token, exact | held-out: NLL/token, exact")
  for d, h in zip(results["demos"], results["held_out"], strict=True):
    print(
      f"{d['turn']:4d} | {d['nll_per_token']:.4f}, {d['exact']:.3f} | "
      f"{h['nll_per_token']:.4f}, {h['exact']:.3f}"
    )
  payload = {"source": _SOURCE.value, "step": _STEP.value, "tasks": n}
  out = pathlib.Path(_OUT.value)
  out.write_text(json.dumps({**payload, **results}, indent=2) + "\n")


if __name__ == "__main__":
  app.run(main)
