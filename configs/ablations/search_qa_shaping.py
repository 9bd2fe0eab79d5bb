"""Search QA with and without retrieval shaping: does `progress` help?

  python scripts/sweep.py --config=configs/ablations/search_qa_shaping.py \
      --root=experiments/search_qa_shaping/runs --workers=2

Question: in the credit-assignment sweep, ~80% of search-QA episodes that
failed still earned a positive return, because the environment pays
`progress` (0.1 per gold passage retrieved) and the SFT policy already
retrieves well; it fails at copying the answer out. Does RL on success
alone (plus the failure-code penalties) move success differently? This
sweep is the credit-assignment sweep's search-QA arm for GRPO and GiGPO
`mean_std_norm` (the estimator that cut malformed calls most) with the
verifier's `progress` weight set to 0. Everything else, SFT stages
included, is the same, so each run pairs with the run of the same
estimator and seed in experiments/credit_assignment/runs/search_qa. The
reward config is not part of an SFT stage's identity (`loop.warm_start`
checks seed, model, env, tasks, sampler, rollout, length buckets, SFT and
optimizer), so the stages of that sweep can be linked in instead of run
again: ln -s ../../../credit_assignment/runs/search_qa/sft
<root>/search_qa/sft (with their checkpoints present).

`arg`: empty, or `smoke` (smoke-size runs, for a quick end-to-end check).
Expected: see experiments/search_qa_shaping/README.md.
"""

import ml_collections

from configs import search_qa
from configs.ablations import credit_assignment

ESTIMATORS = ("grpo", "gigpo_std")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  if any(p != "smoke" for p in parts):
    raise ValueError(f"config arg {arg!r}: expected '' or 'smoke'")
  smoke = "smoke" in parts
  c = search_qa.get_config("grpo,smoke" if smoke else "grpo")
  no_progress = {"rewards": {"verifier": {"weights": {"progress": 0.0}}}}
  # The credit-assignment sweep's size, and no retrieval shaping.
  c.sweep = credit_assignment.one_env_sweep(
    "search_qa_shaping",
    "search_qa",
    ESTIMATORS,
    credit_assignment.SEEDS,
    smoke,
    changes=no_progress,
    smoke_changes=no_progress,
  )
  return c
