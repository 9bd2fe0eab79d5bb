"""Distill a trained Sokoban policy back into a 4x smaller student.

  # the teacher: any finished run of configs/sokoban.py, e.g.
  python -m agentic_rl.main --config=configs/sokoban.py:gigpo \
      --workdir=runs/teacher
  # the student, from the teacher's verified rollouts:
  python -m agentic_rl.main --config=configs/distill.py:token \
      --workdir=runs/student_token --config.distill.teacher=runs/teacher

The student (preset `nano`, ~0.2M parameters against tiny's ~0.8M) gets
the same cold-start budget as the teacher's SFT (150 steps of 32), from
one of three sources (`arg`):

* `expert`: scripted-expert demonstrations (A* solutions), as the teacher
  itself started. The baseline: what the small model learns without the
  teacher.
* `sequence`: the teacher plays 1,024 training levels 4 times each
  (temperature 1); its verified solutions are kept, one per level
  (`rollout.rejection`), and the student fits their tokens (SFT on
  rejection-sampled data; Kim & Rush 2016's sequence-level distillation).
* `token` (default): the same kept rollouts, but the student matches the
  teacher's whole next-token distribution on every action token (forward
  KL, `losses.token_divergence`).
* `reverse`: as `token` with the reverse KL (mode-seeking).

Add `smoke` for a seconds-long run. No RL by default (`rl.steps=0`): the
distilled policy and its held-out success are the result; set
`--config.rl.steps=N` to continue with RL from it. Any
`--config.model.preset=tiny` distills into the teacher's own size
(rejection-sampling fine-tuning). Measured: experiments/distill/README.md.

A second part adds an online stage of 30 steps after the cold start, on the
student's own samples (set `--config.rl.teacher=<workdir>` for the two
with a teacher):

* `rl`: GiGPO alone (the student without a teacher).
* `opd`: on-policy distillation: the teacher's reverse KL from the student
  on every token the student samples, no reward term (`loss.pg_coef=0`,
  no KL anchor to the cold-start policy).
* `opd_rl`: GiGPO plus the teacher term (`loss.teacher_coef=1`).

  python -m agentic_rl.main --config=configs/distill.py:expert,opd \
      --workdir=runs/student_opd --config.rl.teacher=runs/teacher

Measured: experiments/onpolicy_distill/README.md.
"""

import ml_collections

from configs import sokoban

SOURCES = ("expert", "sequence", "token", "reverse")
STAGES = ("rl", "opd", "opd_rl")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "token").split(",") if p]
  smoke = "smoke" in parts
  stages = [p for p in parts if p in STAGES]
  names = [p for p in parts if p != "smoke" and p not in STAGES] or ["token"]
  if len(names) != 1 or names[0] not in SOURCES or len(stages) > 1:
    raise ValueError(
      f"config arg {arg!r}: expected one of {SOURCES}, optionally one of "
      f"{STAGES}, and optionally 'smoke'"
    )
  source = names[0]
  c = sokoban.get_config("grpo,smoke" if smoke else "grpo")
  c.model.preset = "nano"
  c.rl.steps = 0
  c.distill = {
    # workdir of a finished run whose policy teaches this one ("" for none)
    "teacher": "",
    "num_tasks": 4 if smoke else 1024,
    "samples_per_task": 2 if smoke else 4,
    "rollout_temperature": 1.0,  # the teacher's sampling
    # "best": the top return of every level, solved or not (smoke runs:
    # their teachers solve nothing)
    "keep": "best" if smoke else "success",
    "max_per_task": 1,
    "divergence": "reverse_kl" if source == "reverse" else "forward_kl",
    "temperature": 1.0,  # softens both distributions in the divergence
    "kd_coef": 0.0 if source == "sequence" else 1.0,
    "sft_coef": 1.0 if source == "sequence" else 0.0,
  }
  if source == "expert":
    c.distill = {}
  if stages:
    stage = stages[0]
    c.estimator = dict(sokoban.ESTIMATORS["gigpo"])
    c.rl.steps = 2 if smoke else 30
    if stage in ("opd", "opd_rl"):
      c.loss.teacher_coef = 1.0
    if stage == "opd":
      c.loss.pg_coef = 0.0
      c.loss.kl_coef = 0.0  # the teacher is the anchor
      c.loss.entropy_coef = 0.0
  return c
