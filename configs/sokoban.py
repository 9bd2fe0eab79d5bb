"""SFT then RL on small Sokoban with the tiny preset, on a CPU.

  python -m agentic_rl.main --config=configs/sokoban.py:gigpo \
      --workdir=runs/sokoban_gigpo

`arg` is a comma-separated list: one estimator variant (grpo, dr_grpo, rloo,
reinforce_pp, raft, gigpo, gigpo_std, turn_discounted, prm_weighted, ppo,
ppo_token; default gigpo), optionally `quick` (the README's `make run`, a
few minutes) or `smoke` (a seconds-long run for CI), and optionally
`curriculum` (difficulties 0-2, unlocked one at a time as the frontier's
success rate rises) and/or `replay` (a quarter of each update's rows are
past trajectories, prioritized by |advantage|) and/or `dynamic` (DAPO's
dynamic sampling: up to 3 rounds of tasks a step, to fill the update with
groups whose episodes did not all score alike). Any field can be
overridden on the command line, e.g. `--config.rl.steps=10`.

Expected (2-core CPU, default size): the SFT policy solves a small fraction
of held-out 6x6 one-box levels and RL raises it; the final summary prints
both. Measured runs: experiments/sokoban_sft_rl/README.md.
"""

import ml_collections

from agentic_rl import rewards
from agentic_rl.models.config import SHAPE_FIELDS

ESTIMATORS = {
  "grpo": {"name": "grpo"},
  # GRPO ranking episodes by their summed per-turn rewards (step cost, box
  # rewards, solve bonus, failure penalties) instead of solved-or-not: the
  # turn-level estimators' reward without their per-turn credit.
  "grpo_return": {"name": "grpo", "score": "return"},
  "dr_grpo": {"name": "dr_grpo"},
  "rloo": {"name": "rloo"},
  "reinforce_pp": {"name": "reinforce_pp"},
  # Online rejection-sampling fine-tuning: fit the verified successes only.
  "raft": {"name": "raft", "keep": "success"},
  "gigpo": {"name": "gigpo", "gamma": 0.95, "mode": "mean_norm"},
  "gigpo_std": {"name": "gigpo", "gamma": 0.95, "mode": "mean_std_norm"},
  "turn_discounted": {"name": "turn_discounted", "gamma": 0.95},
  "prm_weighted": {"name": "prm_weighted", "mode": "additive", "beta": 0.5},
  # PPO with a critic (the `critic` section): GAE over turns, one value per
  # decision, the turn-level estimators' discount; or over policy tokens
  # with verl's defaults (undiscounted, no bootstrapping).
  "ppo": {"name": "gae", "level": "turn", "gamma": 0.95, "lam": 0.95},
  "ppo_token": {"name": "gae", "level": "token", "gamma": 1.0, "lam": 1.0},
}


def _optimizer(lr, warmup=0):
  # schedule "cosine" decays to end_lr_ratio * lr at total_steps (optimizer
  # steps, warm-up included). Left at 0 it is SFT's sft.steps, or RL's
  # policy updates (rl.steps x epochs x minibatches; set it with replay).
  return {
    "learning_rate": lr,
    "warmup_steps": warmup,
    "schedule": "constant",
    "total_steps": 0,
    "end_lr_ratio": 0.0,
    "max_grad_norm": 1.0,
    "weight_decay": 0.0,
  }


def unit_success_config(
  arg: str | None,
) -> tuple[ml_collections.ConfigDict, bool]:
  """This recipe for an environment whose success pays 1, where the other
  environments' configs start: the critic's values live at that scale.
  Also whether `arg` asks for the smoke size."""
  c = get_config(arg)
  c.critic.value_scale = 1.0
  c.critic.value_clip = 0.2
  return c, "smoke" in (arg or "").split(",")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "gigpo").split(",") if p]
  switches = ("smoke", "quick", "curriculum", "replay", "dynamic")
  smoke, quick = "smoke" in parts, "quick" in parts
  names = [p for p in parts if p not in switches] or ["gigpo"]
  if len(names) != 1 or names[0] not in ESTIMATORS:
    raise ValueError(
      f"config arg {arg!r}: expected one of {sorted(ESTIMATORS)} and "
      f"optionally any of {switches}"
    )

  c = ml_collections.ConfigDict()
  c.seed = 0
  # Workdir of a finished SFT stage (a run of this config with rl.steps=0)
  # to start RL from instead of running SFT; "" runs SFT here.
  c.init_from = ""
  # vocab_size 0: from the tokenizer. remat: "none", "full" or "dots"
  # (`ModelConfig.remat`), activation memory for compute in training.
  # logits_chunk: positions per chunk of the training log-probs'
  # vocabulary projection (`ModelConfig.logits_chunk`; 0: no chunks).
  # d_model ... mlp_dim: the preset's shape where 0, else that value
  # (`models.config.SHAPE_FIELDS`), e.g. --config.model.n_layers=8.
  c.model = {
    "preset": "tiny",
    "vocab_size": 0,
    "remat": "none",
    "logits_chunk": 0,
    **{name: 0 for name in SHAPE_FIELDS},
  }
  # mesh.rollouts: in a multi-process run, "per_process" (each process
  # plays its part of the tasks on its own devices) or "replicated" (every
  # process plays every task on the whole mesh); `loop.sampler_placement`.
  c.mesh = {"shape": (1, 1, 1), "rollouts": "per_process"}
  c.env = {
    "name": "sokoban",
    "options": {"instructions": False, "max_steps": 10},
  }
  c.tasks = {
    "difficulties": (0,),
    "train_counts": (2000,),
    "eval_counts": (64,),
  }
  # kernels_out_first: the samplers hold Dense kernels transposed
  # (`Sampler(kernels_out_first=True)`): faster decoding on some CPUs
  # (Zen 3), slower on others (Intel).
  c.sampler = {
    "num_slots": 32,
    "max_len": 768,
    "num_samplers": 2,
    "kernels_out_first": False,
  }
  c.rollout = {
    "group_size": 8,
    "max_turns": 10,
    "max_new_tokens": 8,
    "max_total_tokens": 768,
    "temperature": 1.0,
    "prompt_template": "{observation}\n",
    "pipeline": True,
  }
  # Tight buckets: padding is compute on a CPU (a few compiles, no more).
  c.length_buckets = (128, 192, 256, 320, 384, 512, 640, 768)
  c.rewards = rewards.default_config()
  c.rewards.process.signals = ("valid_action", "novel_state")
  c.estimator = dict(ESTIMATORS[names[0]])
  c.loss = {
    "clip_low": 0.2,
    "clip_high": 0.28,
    "clip_c": 3.0,
    "kl_coef": 0.1,  # anchor to the SFT policy: steadiest in our runs
    "kl_estimator": "k3",
    "entropy_coef": 0.001,
    "agg": "seq-mean-token-mean",
    # importance ratio per token (PPO), per turn or per sequence (GSPO)
    "ratio_level": "token",
    "pg_coef": 1.0,  # 0 with a teacher: pure on-policy distillation
    # rl.teacher's divergence from the policy on the policy's own samples
    "teacher_coef": 0.0,
    "teacher_divergence": "reverse_kl",
    "teacher_temperature": 1.0,
  }
  c.sft = {
    "num_demos": 512,
    # () takes the first num_demos training tasks (all of the first
    # difficulty when the pool has several); (0, 1, 2) spreads them evenly
    "demo_difficulties": (),
    "steps": 150,
    "batch_size": 32,
    "optimizer": _optimizer(3e-3, warmup=10),
  }
  # Offline shaping between the cold start and RL (off at dpo_steps = 0):
  # the policy plays num_tasks training levels samples_per_task times; the
  # best and worst sample of a level (a verified success against a failure,
  # pair_by="success"; or by return) make a DPO pair.
  c.offline = {
    "dpo_steps": 0,
    "num_tasks": 256,
    "samples_per_task": 4,
    "rollout_temperature": 1.0,
    "pair_by": "success",
    "batch_size": 16,
    "beta": 0.1,
    "label_smoothing": 0.0,
    "sft_coef": 0.0,  # > 0: plus NLL of the chosen side (RPO)
    "learning_rate": 1e-4,
  }
  c.rl = {
    "steps": 50,
    "tasks_per_step": 8,
    "epochs": 1,
    "minibatch_size": 32,
    "num_microbatches": 1,
    "optimizer": _optimizer(3e-4),
    # workdir of a finished run whose policy scores every RL update
    # (loss.teacher_coef); "" for none
    "teacher": "",
    # "mean_abs" or "std": divide each step's advantages by that batch
    # statistic, so loss.kl_coef / entropy_coef weigh the same against
    # every estimator (agentic_rl/estimators/scale.py); "none": as given
    "advantage_scale": "none",
    # 0: divide by the step's own statistic; d in (0, 1): by a running
    # mean of the steps' statistics (weight d^k k steps back)
    "advantage_scale_decay": 0.0,
  }
  # The value model of estimators that use one (ppo, ppo_token): a copy of
  # the post-SFT policy with a zero value head, trained after each policy
  # update on the same minibatches, 4 passes a batch (0: as rl.epochs; at
  # 1 pass and lr 1e-3 its mean lagged the returns' for 6+ steps). Returns
  # here reach 10 (the solve bonus): the head's output is scaled to them,
  # and value clipping (in return units) is loose.
  c.critic = {
    "optimizer": _optimizer(3e-3),
    "value_scale": 10.0,
    "value_clip": 2.0,
    "epochs": 4,
    "warmup_steps": 0,  # RL iterations that train only the critic
  }
  # Success-rate curriculum over tasks.difficulties (`data.curriculum`;
  # {}: off, every training task equally likely).
  c.curriculum = {}
  if "curriculum" in parts:
    c.tasks.difficulties = (0, 1, 2)
    c.tasks.train_counts = (1000, 1000, 1000)
    c.tasks.eval_counts = (32, 32, 32)
    c.curriculum = {
      "promote_threshold": 0.5,
      "min_episodes": 64,
      "window": 128,
      "frontier_weight": 0.7,
      "hold": 1,  # consecutive episodes at the threshold before unlocking
    }
  # Replay of past trajectories with the advantages they were given
  # (`data.replay`; {}: off). fraction: replayed rows per fresh one.
  c.replay = {}
  if "replay" in parts:
    c.replay = {
      "capacity": 512,
      "mode": "prioritized",
      "alpha": 1.0,
      "half_life": 256.0,
      "fraction": 0.25,
      "min_size": 64,
    }
  # DAPO's dynamic sampling (`loop.roll_out_step`; {}: off): groups whose
  # episodes all score alike (all solved or all failed, by `score`) are
  # set aside and up to `max_rounds` rounds of tasks are played a step to
  # fill the update with groups that differ (`choose="random"`: every
  # round is played and the update's groups are drawn at random).
  c.dynamic_sampling = {}
  if "dynamic" in parts:
    c.dynamic_sampling = {
      "max_rounds": 3,
      "score": "outcome",
      "choose": "differing",
    }
  c.eval_every = 10
  c.checkpoint_every = 10
  c.checkpoint_keep = 2
  c.log_every = 1

  if quick:  # the README's `make run`: a few minutes on a laptop CPU
    c.tasks.eval_counts = (32,) * len(c.tasks.difficulties)
    c.sft.steps = 150  # the SFT of experiments/sokoban_sft_rl
    c.rl.steps = 10
    c.eval_every = 5
    c.checkpoint_every = 5

  if smoke:
    c.tasks = {"difficulties": (0,), "train_counts": (16,), "eval_counts": (4,)}
    if "curriculum" in parts:
      c.tasks = {
        "difficulties": (0, 1),
        "train_counts": (8, 8),
        "eval_counts": (2, 2),
      }
      c.curriculum.update({"min_episodes": 2, "window": 4})
      c.curriculum.promote_threshold = 0.01  # any success promotes
    if "replay" in parts:
      c.replay.update({"capacity": 8, "min_size": 1, "fraction": 0.5})
    c.sampler.num_slots = 8
    c.sampler.max_len = 512
    c.rollout.group_size = 2
    c.rollout.max_turns = 3
    c.rollout.max_total_tokens = 512
    c.length_buckets = (128, 256, 512)
    c.sft = {
      "num_demos": 8,
      "demo_difficulties": c.sft.demo_difficulties,
      "steps": 3,
      "batch_size": 4,
      "optimizer": _optimizer(1e-3),
    }
    c.rl = {
      "steps": 2,
      "tasks_per_step": 2,
      "epochs": 2,
      "minibatch_size": 2,
      "num_microbatches": 1,
      "optimizer": _optimizer(1e-4),
      "teacher": "",
      "advantage_scale": "none",
      "advantage_scale_decay": 0.0,
    }
    c.eval_every = 1
    c.checkpoint_every = 1
    c.offline.update(
      {
        "num_tasks": 8,
        "samples_per_task": 4,
        "pair_by": "return",
        "batch_size": 2,
      }
    )
  return c
