"""The training run: cold-start SFT, then online RL. One readable function.

`train(config, workdir)` is everything `main.py` does:

  setup     tokenizer, model + optimizer state (sharded), task pool and
            sampler, reward stack, estimator, rollout driver, checkpoints,
            metric writer; resume from the latest checkpoint if any.
  SFT       expert demonstrations (`rollout.demos`) in the rollout's own
            token framing, cross-entropy on policy tokens only. With
            `distill.teacher` set (the workdir of a finished run), the
            cold start is distillation instead: the teacher plays the
            training tasks, its verified successes are kept (rejection
            sampling) and the student matches the teacher's next-token
            distributions on them (`train.distill`).
  offline   optional (`offline.dpo_steps` > 0): the cold-start policy plays
            training tasks K times, the best and worst sample of each task
            make a preference pair (`rollout.rejection.preference_pairs`),
            and DPO updates it against its own frozen copy (`train.dpo`).
  RL        sample tasks -> roll out G per task -> score (reward stack) ->
            pack -> estimate advantages (configured estimator; optionally
            one divisor per step, `rl.advantage_scale`) -> clipped
            policy-gradient epochs -> log -> evaluate every N -> checkpoint.
            An estimator that uses values (`gae`: PPO with a critic) gets
            them from a value model that starts as a copy of the post-SFT
            policy and regresses onto the estimator's targets after each
            policy update (`train.critic`, config section `critic`).
            With `rl.teacher` set, a finished run's policy scores every
            update too: its divergence from the policy on the policy's own
            samples is a loss term (`loss.teacher_coef`; on-policy
            distillation, pure with `loss.pg_coef=0`).
            Optional sections: `curriculum` (a success-rate curriculum
            over the task difficulties drives the task sampler,
            `data.curriculum`) and `replay` (past trajectories, with the
            advantages they were given, join each update as off-policy
            rows, `data.replay`); both are checkpointed with the run.
            And `dynamic_sampling` (DAPO's): groups whose episodes all
            score alike are set aside and more tasks are played, so the
            update's groups carry a group-relative signal
            (`roll_out_step`).

Every random choice is a function of (config, seed): task order comes from
the checkpointed task sampler, rollout keys are folded from the
checkpointed train-state key and the RL step, minibatch orders from the
seed and the step. A run resumed from a checkpoint therefore continues
exactly as if it had not stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import pathlib
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from agentic_rl import envs, estimators, losses, machine, report, rewards
from agentic_rl import sharding as shd
from agentic_rl.data import packing, trajectory_io
from agentic_rl.data.curriculum import SuccessRateCurriculum
from agentic_rl.data.pool import StratifyError, TaskPool
from agentic_rl.data.replay import ReplayBuffer
from agentic_rl.models.config import SHAPE_FIELDS, get_preset
from agentic_rl.models.tokenizer import build_env_tokenizer
from agentic_rl.rollout import (
  Rollout,
  RolloutConfig,
  env_factory_from_options,
  eval_metrics,
  expert_ceiling,
  group_metrics,
  make_samplers,
  play,
  solved_by_task,
)
from agentic_rl.rollout import evaluate as evaluate_policy
from agentic_rl.rollout.demos import expert_trajectories
from agentic_rl.rollout.metrics import all_alike, by_group, episode_return
from agentic_rl.rollout.rejection import (
  PAIR_MODES,
  RejectionConfig,
  preference_pairs,
  rejection_sample,
)
from agentic_rl.train import batching
from agentic_rl.train import critic as critic_lib
from agentic_rl.train import distill as distill_lib
from agentic_rl.train import dpo as dpo_lib
from agentic_rl.train import step as step_lib
from agentic_rl.train.checkpoint import Checkpointer, restore_readable
from agentic_rl.train.logging import MetricWriter, log_mark, set_aside_after
from agentic_rl.train.sft import make_sft_step
from agentic_rl.train.state import (
  Layout,
  OptimizerConfig,
  StateConfigError,
  TrainState,
  abstract_train_state,
  check_known_keys,
  copy_model,
  count_params,
  create_train_state,
  make_layout,
  make_optimizer,
)
from agentic_rl.types import Task, Trajectory, TrajectoryBatch, turns_to_tokens

CONSOLE_KEYS = (
  "sft/loss",
  "distill/loss",
  "dpo/loss",
  "success_rate",
  "return_mean",
  "loss",
  "adv_abs_mean",
  "turns_per_episode",
  "eval/success_rate",
)


@dataclasses.dataclass
class Run:
  """The objects the loop works with (built once by `setup`)."""

  config: Any
  workdir: pathlib.Path
  state: TrainState
  layout: Any
  tokenizer: Any
  train_pool: TaskPool
  eval_tasks: list
  task_sampler: Any
  stack: rewards.RewardStack
  estimate: Any
  rollout: Rollout
  checkpointer: Checkpointer
  writer: MetricWriter
  host: dict[str, Any]
  sft_step: Any  # jitted (state, batch) -> (state, metrics)
  rl_step: Any  # jitted (state, PolicyInputs) -> (state, metrics), or None
  # PPO's value model, when the estimator uses values (`start_critic`).
  critic_config: critic_lib.CriticConfig | None = None
  critic: TrainState | None = None
  critic_layout: Any = None
  critic_step: Any = None  # jitted (critic, CriticInputs) -> (critic, metrics)
  curriculum: SuccessRateCurriculum | None = None
  replay: ReplayBuffer | None = None


def _model_config(config, tokenizer):
  # Round the vocabulary up to a multiple of 64 so the logits stay aligned.
  vocab = config.model.get("vocab_size") or -(-tokenizer.vocab_size // 64) * 64
  shape = {k: config.model[k] for k in SHAPE_FIELDS if config.model.get(k)}
  return get_preset(
    config.model.preset,
    vocab_size=vocab,
    max_len=config.sampler.max_len,
    remat=config.model.get("remat", "none"),
    logits_chunk=config.model.get("logits_chunk", 0),
    **shape,
  )


def task_pool(config) -> TaskPool:
  """The run's tasks: split "train" (RL and SFT demos) and "test" (eval)."""
  spec = []
  for split, counts in (
    ("train", config.tasks.train_counts),
    ("test", config.tasks.eval_counts),
  ):
    spec.append(
      {
        "env": config.env.name,
        "difficulties": tuple(config.tasks.difficulties),
        "counts": tuple(counts),
        "split": split,
        "env_options": dict(config.env.options),
      }
    )
  return TaskPool.from_envs(spec)


class ConfigSizeError(ValueError):
  """A count or size in the config that no run can take: a negative number
  of steps, an empty batch, an evaluation every 0 steps."""


# (field, least value) of every count and size the loop reads; the offline
# stage's only when it runs (offline.dpo_steps > 0).
CONFIG_SIZES = (
  ("sft.steps", 0),
  ("sft.batch_size", 1),
  ("sft.num_demos", 1),
  ("rl.steps", 0),
  ("rl.tasks_per_step", 1),
  ("rl.epochs", 1),
  ("rl.minibatch_size", 1),
  ("rl.num_microbatches", 1),
  ("offline.dpo_steps", 0),
  ("offline.num_tasks", 1),
  ("offline.samples_per_task", 2),  # a pair needs two samples of a task
  ("offline.batch_size", 1),
  ("eval_every", 1),
  ("checkpoint_every", 1),
  ("checkpoint_keep", 1),
)


def check_sizes(config) -> None:
  """`ConfigSizeError` naming the first field of `CONFIG_SIZES` that is not
  an int at least its least value (fields the config lacks are skipped).
  `setup` calls it first: a bad count fails before any work, not steps
  later (eval_every=0) or never (rl.steps=-3 ran no RL and said nothing)."""
  dpo = _section(config, "offline").get("dpo_steps", 0)
  offline = isinstance(dpo, int) and dpo > 0
  for field, least in CONFIG_SIZES:
    section, _, name = field.rpartition(".")
    if section == "offline" and name != "dpo_steps" and not offline:
      continue
    where = _section(config, section) if section else config
    if name not in where:
      continue
    value = where[name]
    if not _is_count(value, least):
      raise ConfigSizeError(
        f"config.{field}={value!r}: must be an int >= {least}"
      )
  check_context_sizes(config)


def _is_count(value, least: int) -> bool:
  return (
    isinstance(value, int) and not isinstance(value, bool) and value >= least
  )


def check_context_sizes(config) -> None:
  """`ConfigSizeError` unless the length buckets hold the longest trajectory
  the rollout can make (min of `rollout.max_total_tokens` and the sampler's
  cache, `sampler.max_len`: packing fails on a longer one, hours in when
  only rare episodes grow that long) and the held-out split has a task
  (an evaluation of none divides by zero after the cold start)."""
  buckets = list(config.get("length_buckets") or ())
  if not buckets or not all(_is_count(b, 1) for b in buckets):
    raise ConfigSizeError(
      f"config.length_buckets={buckets!r}: must be a non-empty list of "
      "ints >= 1"
    )
  context = config.rollout.get(
    "max_total_tokens", RolloutConfig.max_total_tokens
  )
  longest = min(context, config.sampler.max_len)
  if max(buckets) < longest:
    raise ConfigSizeError(
      f"config.length_buckets={buckets!r}: the largest is shorter than a "
      f"trajectory may grow ({longest} tokens: the least of "
      f"rollout.max_total_tokens={context} and sampler.max_len="
      f"{config.sampler.max_len})"
    )
  held_out = [c for c in config.tasks.eval_counts if _is_count(c, 0)]
  if not sum(held_out):
    raise ConfigSizeError(
      f"config.tasks.eval_counts={list(config.tasks.eval_counts)!r}: the "
      "held-out split would hold no task to evaluate"
    )


def check_config(config) -> None:
  """Every check of `config` that needs no model, task pool or device:
  sizes, optimizers, loss, estimator (tried on a probe batch), advantage
  scale, critic, distillation, rollout, rewards, the environment's options
  (one is built), dynamic sampling, curriculum, replay and the offline
  stage. Each raises its component's named error. `setup` calls it before
  anything is built or written; a sweep calls it on every run before it
  launches one (`sweeps.check_runs`)."""
  check_sizes(config)
  sft_opt = sft_optimizer(config.sft)
  rl_opt = rl_optimizer(config)
  if (sft_opt.max_grad_norm is None) != (rl_opt.max_grad_norm is None):
    # Both phases share one checkpointed optimizer-state structure.
    raise ValueError(
      "sft.optimizer and rl.optimizer must both set or both unset max_grad_norm"
    )
  rl_loss_config(config)
  estimators.from_config(config.estimator)
  advantage_scale(config)
  advantage_scale_decay(config)
  if estimators.uses_values(config.estimator.name):
    critic_lib.CriticConfig.from_dict(_section(config, "critic"))
  if _section(config, "distill").get("teacher"):
    distill_lib.DistillConfig.from_dict(
      _section(config, "distill"), DISTILL_LOOP_KEYS
    )
  rollout = RolloutConfig.from_mapping(config.rollout)
  rewards.from_config(config.rewards)
  envs.make(config.env.name, **dict(config.env.options))
  dynamic_sampling_config(config)
  curriculum = _section(config, "curriculum")
  if curriculum:
    check_known_keys(CURRICULUM_KEYS, curriculum, "curriculum", ValueError)
    trained = [
      d
      for d, n in zip(
        config.tasks.difficulties, config.tasks.train_counts, strict=False
      )
      if n
    ]
    SuccessRateCurriculum(trained, **curriculum)
  make_replay(config, {"rl_step": 0})
  check_offline(config, rollout)


def check_offline(config, rollout: RolloutConfig) -> None:
  """The offline stage's settings, when it runs (`offline.dpo_steps` > 0):
  before, a bad one failed after the cold start and the stage's sampling."""
  cfg = _section(config, "offline")
  if not cfg.get("dpo_steps"):
    return
  if cfg["pair_by"] not in PAIR_MODES:
    raise OfflineError(
      f"offline.pair_by={cfg['pair_by']!r}: expected one of {PAIR_MODES}"
    )
  rollout.replace(temperature=cfg["rollout_temperature"])
  offline_optimizer(config, cfg)
  offline_dpo_config(cfg)


def offline_optimizer(config, cfg: dict[str, Any]) -> OptimizerConfig:
  """The DPO stage's optimizer: SFT's, at `offline.learning_rate`, with a
  constant schedule (an SFT cosine spans sft.steps)."""
  return OptimizerConfig.from_dict(
    {
      **dict(config.sft.optimizer),
      "learning_rate": cfg["learning_rate"],
      "schedule": "constant",
    }
  )


def offline_dpo_config(cfg: dict[str, Any]) -> dpo_lib.DpoConfig:
  return dpo_lib.DpoConfig(
    cfg["beta"], cfg["label_smoothing"], cfg.get("sft_coef", 0.0)
  )


def setup(config, workdir: str, record: bool = True) -> Run:
  """Builds every component and restores the latest checkpoint, if any.

  With `record` (a run's launch) the machine is appended to the run's
  record (`record_machine`, which measures `machine.numerics_probe`: 15-30
  s on a 2-core CPU); a scratch run, which trains nothing, skips it.
  """
  check_config(config)
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  primary = shd.is_primary()  # the one writer of the run's files
  if _has_checkpoint(workdir):  # before config.json is rewritten
    check_resume(config, workdir)
  if primary:
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=2))
  tokenizer = build_env_tokenizer()
  model_config = _model_config(config, tokenizer)
  mesh = shd.make_mesh(tuple(config.mesh.shape))
  sft_opt = sft_optimizer(config.sft)
  rl_opt = rl_optimizer(config)
  rl_loss = rl_loss_config(config)
  estimator = estimators.from_config(config.estimator)
  critic_config = None
  if estimators.uses_values(config.estimator.name):
    critic_config = critic_lib.CriticConfig.from_dict(
      _section(config, "critic")
    )
  teacher, t_shardings, t_info = rl_teacher(config, rl_loss, mesh)
  state, layout = create_train_state(
    model_config, sft_opt, seed=config.seed, mesh=mesh
  )
  for name, size in (
    ("sft.batch_size", config.sft.batch_size),
    ("rl.minibatch_size", config.rl.minibatch_size),
  ):
    if size % layout.data_parallel_size:
      raise ValueError(
        f"config.{name}={size} must be divisible by the mesh's data-parallel "
        f"size {layout.data_parallel_size} (mesh.shape={config.mesh.shape})"
      )
  pool = task_pool(config)
  train_pool = pool.split("train")
  takes_demos = config.sft.steps > 0 and not (
    config.get("init_from") or _section(config, "distill").get("teacher")
  )
  if takes_demos:  # a bad demo mix fails here, before any work
    sft_demo_tasks(train_pool, config.sft)
  task_sampler = train_pool.sampler(config.seed)
  stack = rewards.from_config(config.rewards)
  samplers = make_samplers(
    state.model.merge(),
    **config.sampler.to_dict(),
    **sampler_placement(config, mesh),
  )
  rollout = Rollout(
    samplers,
    tokenizer,
    env_factory_from_options({config.env.name: dict(config.env.options)}),
    stack,
    RolloutConfig.from_mapping(config.rollout),
  )
  checkpointer = Checkpointer(
    str(workdir / "checkpoints"), max_to_keep=config.checkpoint_keep
  )
  host = {
    "phase": "sft",
    "sft_step": 0,
    "rl_step": 0,
    "task_sampler": task_sampler.state_dict(),
    "evals": [],
  }
  warm = checkpointer.latest_step() is None and bool(config.get("init_from"))
  logged = {}  # where the logs are cut back to: all of them from scratch
  if checkpointer.latest_step() is not None:
    state, host = restore_readable(
      checkpointer, state, layout, jax.process_count() == 1
    )
    if checkpointer.latest_step() != host["rl_step"]:
      # Before 2026-12-03 run checkpoints were keyed by optimizer step: new
      # saves (by RL step) would sort below the old ones and be lost.
      key = checkpointer.latest_step()
      raise ValueError(
        f"{workdir}: its newest checkpoint is keyed {key} but holds RL "
        f"step {host['rl_step']} (a run written before "
        "checkpoints were keyed by RL step); resume it with the code it was "
        "begun with, or start RL from it in a new workdir (config.init_from)"
      )
    task_sampler.load_state_dict(host["task_sampler"])
    logged = host.get("log_mark")  # saved since 2026-12-03
  elif warm:
    state, host = warm_start(config, config.init_from, state, layout)
    task_sampler.load_state_dict(host["task_sampler"])
  if logged is not None and primary:
    set_aside_after(workdir / "logs", logged)  # rows past it are redone
  host.pop("rl_teacher", None)  # e.g. left by a warm start's source
  if record:
    record_machine(host)
  curriculum = make_curriculum(config, task_sampler, host)
  replay = make_replay(config, host)
  check_scale_state(config, host)
  if t_info:
    host["rl_teacher"] = t_info
  writer = MetricWriter(  # the other processes log nothing
    str(workdir / "logs"),
    tensorboard=primary,
    jsonl=primary,
    console=sys.stdout if primary else None,
    console_keys=CONSOLE_KEYS,
    console_every=config.log_every,
  )
  if warm:  # the source's post-SFT evaluation starts this run's curve too
    (sft_eval,) = [e for e in host["evals"] if e["phase"] == "sft"]
    writer.write_scalars(
      0,
      {
        f"eval/{k}": v
        for k, v in sft_eval.items()
        if k not in ("phase", "rl_step", "solved")
      },
    )
  sft_step = make_sft_step(
    step_lib.StepConfig(
      optimizer=sft_opt, loss=losses.PolicyLossConfig(agg="token-mean")
    ),
    layout,
  )
  rl_step = None  # an SFT-only stage builds no RL step (nor its teacher)
  if config.rl.steps:
    temperature = rl_temperature(rollout.config)
    if teacher is not None and temperature != 1.0:
      raise step_lib.DistillError(
        f"rl.teacher needs rollouts at temperature 1, not {temperature}"
      )
    rl_step = step_lib.make_train_step(
      step_lib.StepConfig(
        optimizer=rl_opt,
        loss=rl_loss,
        num_microbatches=config.rl.num_microbatches,
        sampling_temperature=temperature,
      ),
      layout,
      teacher,
      t_shardings,
    )
  return Run(
    config,
    workdir,
    state,
    layout,
    tokenizer,
    train_pool,
    list(pool.split("test")),
    task_sampler,
    stack,
    estimator,
    rollout,
    checkpointer,
    writer,
    host,
    sft_step,
    rl_step,
    critic_config,
    curriculum=curriculum,
    replay=replay,
  )


# ---------------------------------------------------------------------------
# Curriculum and replay: optional config sections, {} (or absent) for none.

CURRICULUM_KEYS = (
  "promote_threshold", "min_episodes", "window", "frontier_weight",
  "initially_unlocked", "hold",
)  # fmt: skip
# Every replay key but `capacity` (required) and its default.
REPLAY_DEFAULTS = {
  "mode": "prioritized", "alpha": 1.0, "half_life": None, "fraction": 0.25,
  "min_size": 1,
}  # fmt: skip


ROLLOUT_PLACEMENTS = ("per_process", "replicated")


def sampler_placement(config, mesh) -> dict[str, Any]:
  """Where the run's samplers live (`config.mesh.rollouts`).

  "per_process" (the default): in a multi-process run each process's
  samplers sit on its own block of the mesh (`sharding.local_mesh`) and it
  plays only its part of every rollout's tasks, its environments and tools
  included (`Rollout.per_process`); the trajectories are gathered before
  the update. "replicated": the samplers use the training mesh and every
  process plays every task in lockstep: the trajectories of a
  single-process run on the same mesh, at the cost of repeating all host
  work in every process. In a single-process run the two are the same.
  """
  how = config.mesh.get("rollouts", "per_process")
  if how not in ROLLOUT_PLACEMENTS:
    raise ValueError(
      f"config.mesh.rollouts={how!r}: expected one of {ROLLOUT_PLACEMENTS}"
    )
  if how == "replicated" or jax.process_count() == 1:
    return {}
  return {"mesh": shd.local_mesh(mesh), "rules": shd.DEFAULT_SAMPLE_RULES}


def _replay_config(config) -> dict[str, Any]:
  """The `replay` section with its defaults filled in ({} when off)."""
  cfg = _section(config, "replay")
  return {**REPLAY_DEFAULTS, **cfg} if cfg else {}


# Dynamic sampling: `max_rounds` rounds of tasks at most an RL step;
# `score` what "all alike" is judged by, as the estimators' `score`;
# `choose` "differing" (DAPO's) or "random": always play `max_rounds`
# rounds and train on groups drawn at random, the control that plays and
# trains as much without choosing by signal.
DYNAMIC_SAMPLING_DEFAULTS = {
  "max_rounds": 3,
  "score": "outcome",
  "choose": "differing",
}
DYNAMIC_SAMPLING_SCORES = ("outcome", "return")
DYNAMIC_SAMPLING_CHOICES = ("differing", "random")


def dynamic_sampling_config(config) -> dict[str, Any]:
  """The `dynamic_sampling` section with its defaults filled in ({} when
  off); a `ValueError` for unknown keys or values, or with an estimator
  whose advantages are not group-relative (a critic's)."""
  cfg = _section(config, "dynamic_sampling")
  what = "dynamic_sampling"
  check_known_keys(DYNAMIC_SAMPLING_DEFAULTS, cfg, what, ValueError)
  if not cfg:
    return {}
  cfg = {**DYNAMIC_SAMPLING_DEFAULTS, **cfg}
  rounds = cfg["max_rounds"]
  if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
    raise ValueError(f"{what}.max_rounds must be an int >= 1: {rounds!r}")
  for field, allowed in (
    ("score", DYNAMIC_SAMPLING_SCORES),
    ("choose", DYNAMIC_SAMPLING_CHOICES),
  ):
    if cfg[field] not in allowed:
      raise ValueError(
        f"{what}.{field} {cfg[field]!r}: expected one of {allowed}"
      )
  if estimators.uses_values(config.estimator.name):
    raise ValueError(
      f"{what} keeps the groups a group-relative estimator learns from; "
      f"{config.estimator.name!r} takes its baseline from a critic"
    )
  return cfg


def episode_score(trajectory: Trajectory, score: str) -> float:
  """What dynamic sampling compares within a group: the reward stack's
  outcome, or the summed turn rewards ("return")."""
  if score == "outcome":
    return float(trajectory.outcome)
  return episode_return(trajectory)


def group_differs(group: Sequence[Trajectory], score: str) -> bool:
  """Whether a group's episodes do not all score alike (to 1e-6); a group
  of one episode has no comparison, so it does not."""
  return not all_alike([episode_score(t, score) for t in group])


def choose_groups(
  groups: Sequence[Sequence[Trajectory]], n: int, score: str
) -> tuple[list[Sequence[Trajectory]], int]:
  """The first `n` groups (in the order given) that differ
  (`group_differs`), filled up in order with groups that do not when
  fewer differ; and how many differ in all."""
  differs = [group_differs(g, score) for g in groups]
  differ = [g for g, d in zip(groups, differs, strict=True) if d]
  alike = [g for g, d in zip(groups, differs, strict=True) if not d]
  return (differ + alike)[:n], len(differ)


_CHOOSE_SALT = 0xC4005E  # folded into a step's key to draw random groups


def random_groups(
  groups: Sequence[Sequence[Trajectory]], n: int, key: jax.Array
) -> list[Sequence[Trajectory]]:
  """`n` of the groups drawn without replacement by `key`, in the order
  played."""
  picked = jax.random.choice(key, len(groups), (n,), replace=False)
  return [groups[j] for j in sorted(int(j) for j in picked)]


def roll_out_step(
  run: Run, i: int
) -> tuple[list[Trajectory], list[Trajectory], float, dict[str, float]]:
  """RL step i's rollouts: (the update's trajectories, every trajectory
  played, seconds, `dynamic/...` metrics).

  Without a `dynamic_sampling` section both are the `rl.tasks_per_step`
  groups of one round. With it (DAPO's dynamic sampling, Yu et al. 2025),
  a group whose episodes all score alike (all solved or all failed: a
  group-relative estimator gives each of its turns a zero advantage) is
  set aside, and rounds of `tasks_per_step` fresh tasks are played until
  `tasks_per_step` groups that differ are found or `max_rounds` rounds are
  done. The update takes the first `tasks_per_step` that differ, filled up
  with set-aside groups in the order played when the rounds ran out, so it
  keeps its size (and the optimizer its steps per RL step). Round 0 uses
  the step's usual key, so a run whose first round suffices is the run
  without the section. With `choose="random"` every step plays all
  `max_rounds` rounds and the update takes `tasks_per_step` of the groups
  drawn at random (the same rollouts and update size, no choosing).
  """
  cfg = dynamic_sampling_config(run.config)
  n = run.config.rl.tasks_per_step
  key = jax.random.fold_in(run.state.rng, i)
  searching = cfg.get("choose") == "differing"  # else drawn at random
  played: list[Trajectory] = []
  seconds, rounds = 0.0, 0
  while True:
    tasks = run.task_sampler.sample(n)
    round_key = key if rounds == 0 else jax.random.fold_in(key, rounds)
    played += run.rollout.run(tasks, round_key, policy_version=i)
    seconds += run.rollout.last_metrics["seconds"]
    rounds += 1
    if not cfg:
      return played, played, seconds, {}
    groups = list(by_group(played).values())
    chosen, differ = choose_groups(groups, n, cfg["score"])
    if (searching and differ >= n) or rounds == cfg["max_rounds"]:
      break
  if not searching:
    chosen = random_groups(groups, n, jax.random.fold_in(key, _CHOOSE_SALT))
  chosen_differ = sum(group_differs(g, cfg["score"]) for g in chosen)
  metrics = {
    "dynamic/rounds": float(rounds),
    "dynamic/differing_groups": float(differ),
    "dynamic/batch_differing": chosen_differ / n,
  }
  return [t for g in chosen for t in g], played, seconds, metrics


def make_curriculum(config, task_sampler, host) -> SuccessRateCurriculum | None:
  """The run's curriculum over the training tasks' difficulties (section
  `curriculum`: `SuccessRateCurriculum`'s settings), restored from `host`
  when the run has one; it sets the task sampler's difficulty weights."""
  cfg = _section(config, "curriculum")
  if not cfg:
    return None
  check_known_keys(CURRICULUM_KEYS, cfg, "curriculum", ValueError)
  curriculum = SuccessRateCurriculum(task_sampler.difficulties, **cfg)
  _resume(curriculum, host, "curriculum")
  task_sampler.set_difficulty_weights(curriculum.weights())
  return curriculum


def make_replay(config, host) -> ReplayBuffer | None:
  """The run's replay buffer (section `replay`: `capacity`, `mode`,
  `alpha`, `half_life` of `ReplayBuffer`; `fraction`, replayed rows per
  fresh trajectory; `min_size`, the buffer size before any is replayed),
  restored from `host` when the run has one."""
  check_known_keys(
    ("capacity", *REPLAY_DEFAULTS), _section(config, "replay"), "replay",
    ValueError,
  )  # fmt: skip
  cfg = _replay_config(config)
  if not cfg:
    return None
  if estimators.uses_values(config.estimator.name):
    raise ValueError(
      "replay needs a critic-free estimator: replayed rows carry the "
      "advantages they were given, not values"
    )
  if not 0 < cfg["fraction"] <= 4:
    raise ValueError(f"replay.fraction must be in (0, 4]: {cfg['fraction']}")
  buffer = ReplayBuffer(
    cfg["capacity"],
    cfg["mode"],
    alpha=cfg["alpha"],
    half_life=cfg["half_life"],
    rng=np.random.default_rng([config.seed, 0x5E9]),
  )
  _resume(buffer, host, "replay")
  return buffer


def _resume(component, host: dict[str, Any], key: str) -> None:
  """Loads `host[key]`, the state `_save` keeps, into `component`. A run
  past RL step 0 without it was begun without the component and cannot
  gain it halfway (the resumed run would not be the run it continues)."""
  if key in host:
    component.load_state_dict(host[key])
  elif host["rl_step"] > 0:
    raise ValueError(
      f"the run was begun without {key}; it cannot start it at RL step "
      f"{host['rl_step']}"
    )


def update_curriculum(run: Run, trajectories) -> dict[str, float]:
  """Records the rollouts' verdicts; the next tasks follow the new weights.
  Returns `curriculum/...` metrics."""
  cur = run.curriculum
  promoted = sum(
    cur.update(t.task.difficulty, float(run.stack.succeeded(t)))
    for t in trajectories
  )
  run.task_sampler.set_difficulty_weights(cur.weights())
  out = {
    "frontier": float(cur.frontier),
    "promotions": float(promoted),
    # Consecutive episodes the frontier has held the threshold (`hold`).
    "streak": float(cur.streak),
  }
  for d in cur.difficulties[: cur.unlocked]:
    rate = cur.success_rate(d)
    if rate is not None:
      out[f"success_rate/d{d}"] = rate
  return {f"curriculum/{k}": v for k, v in out.items()}


def with_replay(run: Run, trajectories, adv_BxT: np.ndarray, step: int):
  """Adds the fresh rollouts to the buffer (priority: mean |advantage| of
  their turns; payload: their per-turn advantages) after drawing
  `replay.fraction` as many past ones. Returns (rows, the per-turn
  advantages of each row, metrics); the fresh rows come first."""
  cfg = _replay_config(run.config)
  n = round(cfg["fraction"] * len(trajectories))
  past = []
  if n and len(run.replay) >= cfg["min_size"]:
    past = run.replay.sample_items(n)
  turn_adv = [adv_BxT[b, : len(t.turns)] for b, t in enumerate(trajectories)]
  run.replay.add(
    trajectories,
    [float(np.abs(a).mean()) if len(a) else 0.0 for a in turn_adv],
    payloads=[a.tolist() for a in turn_adv],
  )
  rows = list(trajectories) + [t for t, _ in past]
  turn_adv += [np.asarray(a, np.float32) for _, a in past]
  metrics = {
    "replay/size": float(len(run.replay)),
    "replay/rows": float(len(past)),
  }
  if past:
    lag = [step - t.policy_version for t, _ in past]
    metrics["replay/policy_lag_mean"] = float(np.mean(lag))
  return rows, turn_adv, metrics


def rl_loss_config(config) -> losses.PolicyLossConfig:
  """The RL loss of `config.loss`. `seq-mean-token-sum-norm` without a
  `norm_length` divides by the run's longest length bucket: the aggregate's
  own default, the padded length of each batch, would rescale the loss
  (and the gradient) from one length bucket to the next."""
  loss = losses.PolicyLossConfig(**dict(config.loss))
  if loss.agg == "seq-mean-token-sum-norm" and loss.norm_length is None:
    loss = dataclasses.replace(loss, norm_length=max(config.length_buckets))
  return loss


class WarmStartError(ValueError):
  """`config.init_from` does not name a finished, compatible SFT stage."""


# Fields that shape the SFT stage and the state it hands over. A warm start
# must agree on them with its source; the estimator, loss, RL length and RL
# optimizer settings may differ (that is the point of sharing one SFT across
# an ablation). The handed-over RL optimizer state is fresh Adam moments,
# whatever the learning rate; its structure (gradient clipping or not)
# follows `sft.optimizer`, which must agree (see `setup`).
WARM_START_FIELDS = (
  "seed", "model", "env", "tasks", "sampler", "rollout", "length_buckets",
  "sft", "distill", "offline",
)  # fmt: skip


def warm_start_mismatch(
  theirs: dict[str, Any], ours: dict[str, Any]
) -> tuple[str, Any, Any] | None:
  """(field, their value, our value) of the first `WARM_START_FIELDS` field
  on which two configs (as JSON) differ, or None: may a run of `ours`
  start from a stage of `theirs`?"""
  for field in WARM_START_FIELDS:
    a, b = config_field(theirs, field), config_field(ours, field)
    if a != b:
      return field, a, b
  return None


class ResumeConfigError(ValueError):
  """A run with checkpoints is launched again with a config that differs
  from the one it began with (its config.json)."""


# What a resumed run may change: how long it runs; how often it evaluates,
# logs and saves; the mesh it runs on; and settings of speed and memory, not
# of what is computed. `init_from` is read only by a run without
# checkpoints, so a moved stage does not stop its runs from resuming.
RESUME_MAY_CHANGE = (
  "rl.steps", "eval_every", "log_every", "checkpoint_every",
  "checkpoint_keep", "mesh", "init_from", "model.remat", "model.logits_chunk",
  "sampler.kernels_out_first", "rollout.pipeline", "rollout.env_workers",
)  # fmt: skip


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
  """A config as JSON, flattened to {dotted field: value}."""
  if not isinstance(tree, dict) or not tree:
    return {prefix: tree}
  out = {}
  for k, v in tree.items():
    out.update(_leaves(v, f"{prefix}.{k}" if prefix else k))
  return out


def _at(tree: dict[str, Any], dotted: str) -> Any:
  for part in dotted.split("."):
    tree = tree[part]
  return tree


def resume_mismatch(
  theirs: dict[str, Any], ours: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
  """(field, their value, our value) for every field on which the config a
  run began with (`theirs`, as JSON) and this launch's differ, except those
  under `RESUME_MAY_CHANGE` and those only one of them has (a field added
  to the code after the run began reads as absent in its config.json)."""
  a, b = _leaves(theirs), _leaves(ours)
  diffs = {f: (a[f], b[f]) for f in a.keys() & b.keys() if a[f] != b[f]}
  for field in a.keys() ^ b.keys():
    # A section switched on or off (`{}` on one side, fields on the other)
    # is a difference at the section, not a field only one config has.
    parts = field.split(".")
    for i in range(1, len(parts)):
      section = ".".join(parts[:i])
      if section in a or section in b:
        diffs[section] = (_at(theirs, section), _at(ours, section))
        break
  return [
    (field, *diffs[field])
    for field in sorted(diffs)
    if not any(
      field == f or field.startswith(f + ".") for f in RESUME_MAY_CHANGE
    )
  ]


def _has_checkpoint(workdir: pathlib.Path) -> bool:
  """Whether the run in `workdir` has a checkpoint (creating nothing)."""
  if not (workdir / "checkpoints").is_dir():
    return False
  with Checkpointer(str(workdir / "checkpoints")) as existing:
    return existing.latest_step() is not None


def check_resume(config, workdir: pathlib.Path) -> None:
  """`ResumeConfigError` if `workdir` holds a run begun with another config:
  resuming would continue its checkpoint under settings it did not start
  with, and config.json would be rewritten to claim the new ones for all
  of it. A run whose config.json is missing (or unseen by this process) is
  resumed as before."""
  try:
    theirs = _config_json(workdir)
  except FileNotFoundError:
    return
  diffs = resume_mismatch(theirs, json.loads(config.to_json_best_effort()))
  try:  # a cosine left at total_steps 0 spans rl.steps, which may change
    a = rl_optimizer(ml_collections.ConfigDict(theirs))
  except (KeyError, AttributeError, ValueError):
    a = None  # a config.json this code cannot read that far
  b = rl_optimizer(config)
  if a is not None and a != b:
    diffs.append(
      ("rl.optimizer, as run", dataclasses.asdict(a), dataclasses.asdict(b))
    )
  if diffs:
    shown = "; ".join(f"config.{f}: {a!r} -> {b!r}" for f, a, b in diffs[:5])
    more = f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else ""
    raise ResumeConfigError(
      f"{workdir} holds a run begun with another config: {shown}{more}. "
      "Resume it with its own config (its config.json), or train the new "
      "config in a new workdir (from the same SFT stage: config.init_from)"
    )


def _restore_latest(src: pathlib.Path, abstract, layout, missing: Exception):
  """(state, host) of the newest checkpoint of the run in `src`; raises
  `missing` if it has none."""
  ckpt = Checkpointer(str(src / "checkpoints"), max_to_keep=None)
  try:
    if ckpt.latest_step() is None:
      raise missing
    return ckpt.restore(abstract, layout)
  finally:
    ckpt.close()


def _span_cosine(fields: dict[str, Any], updates: int) -> OptimizerConfig:
  """An optimizer whose cosine, left at `total_steps` 0, spans `updates`
  optimizer steps; with no updates the schedule reads as constant (the
  optimizer never moves, so there is nothing to decay)."""
  if fields.get("schedule") == "cosine" and not fields.get("total_steps"):
    if updates:
      fields = {**fields, "total_steps": updates}
    else:
      fields = {**fields, "schedule": "constant"}
  return OptimizerConfig.from_dict(fields)


def sft_optimizer(sft) -> OptimizerConfig:
  """The SFT stage's optimizer from its config section (`config.sft`, or
  its JSON): a cosine left at `total_steps` 0 spans the stage's `steps`,
  so overriding `sft.steps` resizes it."""
  return _span_cosine(dict(sft["optimizer"]), sft["steps"])


def rl_optimizer(config) -> OptimizerConfig:
  """`config.rl.optimizer`, where a cosine left at `total_steps` 0 spans the
  run's policy updates: `rl.epochs` passes a step over the full
  minibatches of its `tasks_per_step x group_size` trajectories, for
  `rl.steps` steps less a critic's warm-up (which trains only the critic).
  Replay changes how many rows a step trains on, so it needs `total_steps`
  set."""
  fields, rl = dict(config.rl.optimizer), config.rl
  if fields.get("schedule") != "cosine" or fields.get("total_steps"):
    return OptimizerConfig.from_dict(fields)
  if _replay_config(config):
    raise StateConfigError(
      "rl.optimizer: a cosine with replay needs total_steps (optimizer "
      "steps) set: replayed rows change the updates per RL step"
    )
  rows = rl.tasks_per_step * config.rollout.group_size
  steps = rl.steps
  if estimators.uses_values(config.estimator.name):
    steps -= _section(config, "critic").get("warmup_steps", 0)
  updates = max(steps, 0) * rl.epochs * (rows // rl.minibatch_size)
  return _span_cosine(fields, updates)


def config_field(config_dict: dict[str, Any], dotted: str) -> Any:
  """A dotted field of a config as JSON (None if absent), as a warm start
  compares it: a section that is switched off reads as absent."""
  for part in dotted.split("."):
    config_dict = config_dict.get(part) if config_dict else None
  if dotted == "distill" and not (config_dict or {}).get("teacher"):
    return None  # no teacher: the same as a config without the section
  if dotted == "offline" and not (config_dict or {}).get("dpo_steps"):
    return None  # stage off: likewise
  if dotted == "model" and config_dict:
    # Remat and logits chunks change how the loss is computed (what the
    # backward pass keeps), not the parameters; a shape field at 0 is the
    # preset's (as in configs written before those fields existed).
    return {
      k: v
      for k, v in config_dict.items()
      if k not in ("remat", "logits_chunk")
      and not (k in SHAPE_FIELDS and not v)
    }
  if dotted == "sampler" and config_dict:
    # The samplers' weight layout changes speed, not what they sample.
    return {k: v for k, v in config_dict.items() if k != "kernels_out_first"}
  if dotted == "rollout" and config_dict:
    # Episodes a task in an RL step: the SFT stage (demonstrations, greedy
    # evaluation, a teacher's or DPO's own samples_per_task) never reads it.
    return {k: v for k, v in config_dict.items() if k != "group_size"}
  if dotted == "sft" and config_dict and "optimizer" in config_dict:
    # Compared as run: a field a config does not set is at its default
    # (configs written before the schedule fields existed ran a constant
    # schedule), and a cosine sized by `steps` reads as its length.
    optimizer = dataclasses.asdict(sft_optimizer(config_dict))
    return {**config_dict, "optimizer": optimizer}
  return config_dict


def record_machine(host: dict[str, Any], desc: dict[str, Any] | None = None):
  """Appends this launch's machine (`machine.describe`) to `host["machines"]`
  unless the last one recorded is the same: the same `numerics_key` and
  `numerics_probe` (so a launch on a machine of the last key is recorded
  when its probe differs, or when the record, older than probes, has none).

  Each entry also says where the run stood when it began there (phase, SFT
  and RL step), so a run resumed on another CPU shows which part ran where.
  A warm start inherits its SFT stage's list, so a compared run's record
  covers the policy it started from as well. The list is empty for runs
  begun before 2026-12-04; the report then counts the run as unknown.
  """
  desc = machine.describe() if desc is None else desc
  machines = host.setdefault("machines", [])
  if machines and all(
    machines[-1].get(k) == desc.get(k) for k in ("key", "probe")
  ):
    return
  where = {k: host[k] for k in ("phase", "sft_step", "rl_step")}
  if not machines and (where["sft_step"] or where["phase"] != "sft"):
    where["unrecorded_before"] = True  # resumed from an older checkpoint
  machines.append({**desc, **where})


def warm_start(config, source: str, state: TrainState, layout):
  """State and host bookkeeping of a finished SFT stage in `source`.

  `source` is the workdir of a run of the same config with `rl.steps=0`:
  its one checkpoint holds the post-SFT policy, fresh RL optimizer moments,
  the task sampler and the post-SFT evaluation. Every estimator of a sweep
  can start from it, so they share the SFT policy exactly instead of
  re-running an identical SFT each.
  """
  src = pathlib.Path(source)
  try:
    theirs = _config_json(src)
  except FileNotFoundError as e:
    raise WarmStartError(
      f"init_from={source!r}: no run there (no config.json)"
    ) from e
  ours = json.loads(config.to_json_best_effort())
  if (bad := warm_start_mismatch(theirs, ours)) is not None:
    field, a, b = bad
    raise WarmStartError(
      f"init_from={source!r}: config.{field} differs from this run's "
      f"({a!r} vs {b!r})"
    )
  state, host = _restore_latest(
    src,
    state,
    layout,
    WarmStartError(f"init_from={source!r}: it has no checkpoint"),
  )
  if host["phase"] != "rl" or host["rl_step"] != 0:
    raise WarmStartError(
      f"init_from={source!r}: its checkpoint is at phase {host['phase']!r}, "
      f"RL step {host['rl_step']}; expected a finished SFT stage (rl.steps=0)"
    )
  return state, host


def rl_temperature(rollout_config: RolloutConfig) -> float:
  """The temperature of the policy RL trains: the rollouts' (1 for greedy
  rollouts, whose log-probs are the untempered ones).

  Raises `ValueError` for top-k or top-p rollouts: their behaviour
  log-probs are of the truncated distribution, so the PPO ratio against
  the policy would sit below 1 on-policy and clip the gradient of every
  negative-advantage token; RL samples from the whole distribution.
  """
  if rollout_config.top_k or rollout_config.top_p < 1:
    raise ValueError(
      f"RL rollouts sample the whole distribution: rollout.top_k="
      f"{rollout_config.top_k}, rollout.top_p={rollout_config.top_p} would "
      "make the behaviour log-probs those of a truncated one (set 0 and 1)"
    )
  t = rollout_config.temperature
  return t if t > 0 else 1.0


def _pack(trajectories, config) -> TrajectoryBatch:
  batch = packing.pack(
    trajectories,
    batch_size=len(trajectories),
    length_buckets=tuple(config.length_buckets),
  )
  shd.check_same_across_processes(batch, "a packed training batch")
  return batch


def _save(run: Run) -> None:
  """Checkpoints the run, keyed by its RL step (0: the end of SFT).

  The RL step, not the optimizer step: the optimizer does not move in a
  critic-only warm-up step, and a run's checkpoints need distinct keys.
  """
  run.writer.flush()  # metrics up to this checkpoint survive a kill
  run.host["log_mark"] = log_mark(run.writer.logdir)
  i = run.host["rl_step"]
  if run.critic is not None:
    # Written (and waited for) first, and one more kept than the run's: a
    # run checkpoint always has its critic, even if a kill cuts in between.
    # A critic saved at this step before such a kill (the run resumed from
    # the checkpoint before it) is replaced.
    keep = run.config.checkpoint_keep
    ckpt = Checkpointer(
      str(run.workdir / "critic"), max_to_keep=keep and keep + 1
    )
    try:
      if i in ckpt.all_steps():
        ckpt.delete(i)
      ckpt.save(run.critic, step=i, force=True)
    finally:
      ckpt.close()
  run.host["task_sampler"] = run.task_sampler.state_dict()
  if run.curriculum is not None:
    run.host["curriculum"] = run.curriculum.state_dict()
  if run.replay is not None:
    run.host["replay"] = run.replay.state_dict()
  run.checkpointer.save(run.state, run.host, step=i, force=True)


@contextlib.contextmanager
def scratch_run(config) -> Iterator[Run]:
  """`setup` in a temporary workdir, closed and deleted on exit: for
  scripts that score other runs' checkpoints without touching them. A
  run's `init_from` is dropped (the checkpoint restored next replaces the
  warm start's policy, and the stage it names may be gone), and so are its
  RL steps: scoring builds no RL update, nor loads the `rl.teacher` that
  update would need. Nor is the machine recorded (nor its numerics probe
  measured): nothing trains here."""
  if config.get("init_from") or config.rl.steps:
    config = config.copy_and_resolve_references()
    config.init_from = ""
    config.rl.steps = 0
  with tempfile.TemporaryDirectory() as scratch:
    run = setup(config, scratch, record=False)
    try:
      yield run
    finally:
      run.checkpointer.close()
      run.writer.close()


def _config_json(workdir: str | pathlib.Path) -> dict[str, Any]:
  """A run's config.json as JSON; `FileNotFoundError` when there is none."""
  path = pathlib.Path(workdir) / "config.json"
  if not path.is_file():
    raise FileNotFoundError(f"{workdir}: no run there (no config.json)")
  return json.loads(path.read_text())


def run_config(workdir: str | pathlib.Path) -> ml_collections.ConfigDict:
  """The config a run in `workdir` was started with (its config.json), so
  a script can rebuild that run without repeating its overrides."""
  return ml_collections.ConfigDict(_config_json(workdir))


def restore_step(run: Run, checkpoints: str | pathlib.Path, step: int) -> None:
  """Restores step `step` of a checkpoint directory into `run` and points
  the samplers at it."""
  source = Checkpointer(str(checkpoints))
  try:
    run.state, _ = source.restore(run.state, run.layout, step=step)
  finally:
    source.close()
  _sync_policy(run)


def _sync_policy(run: Run) -> None:
  """Points every sampler at the current weights (after each update)."""
  model = run.state.model.merge()
  if run.rollout.per_process:
    # Onto this process's devices once here (device to device, a
    # collective), not once per sampler; a sampler placed otherwise moves
    # them on among this process's devices.
    first = run.rollout.samplers[0]
    graphdef, params = nnx.split(model)
    model = nnx.merge(
      graphdef, shd.shard_state(params, first.mesh, first.rules)
    )
  for sampler in run.rollout.samplers:
    sampler.update_params(model)


def evaluate(run: Run) -> dict[str, float]:
  """Greedy episodes on the held-out tasks with the current policy."""
  return evaluate_by_task(run)[0]


def evaluate_by_task(run: Run) -> tuple[dict[str, float], dict[str, bool]]:
  """Greedy episodes on the held-out tasks with the current policy: their
  metrics and, per task id, whether it was solved (what the run's
  evaluations and the scoring scripts keep to compare task by task)."""
  _sync_policy(run)
  trajectories, seconds = play(run.rollout, run.eval_tasks, greedy=True)
  solved = solved_by_task(trajectories, run.rollout)
  shd.check_same_across_processes(sorted(solved.items()), "held-out verdicts")
  return eval_metrics(trajectories, run.rollout, seconds), solved


def _mean_metrics(history: list[dict[str, float]]) -> dict[str, float]:
  """Means over the updates of one RL step; the optimizer step is the last."""
  out = {k: float(np.mean([h[k] for h in history])) for k in history[0]}
  out["optimizer_step"] = history[-1]["step"]
  del out["step"]  # the log's step axis is the RL iteration
  return out


def sft_demo_tasks(train_pool: TaskPool, cfg) -> list[Task]:
  """The cold start's expert tasks: the first `sft.num_demos` training
  tasks or, with `sft.demo_difficulties`, that many spread evenly over
  those difficulties (`TaskPool.stratified`). A pool with fewer tasks is a
  StratifyError, not a smaller demo set."""
  difficulties = tuple(cfg.get("demo_difficulties") or ())
  if difficulties:
    return list(train_pool.stratified(cfg.num_demos, difficulties))
  tasks = list(train_pool)
  if len(tasks) < cfg.num_demos:
    raise StratifyError(
      f"sft.num_demos={cfg.num_demos}: the training pool holds "
      f"{len(tasks)} tasks (tasks.train_counts)"
    )
  return tasks[: cfg.num_demos]


def sft(run: Run) -> None:
  """Cold start: expert demos, cross-entropy on the policy's tokens; or,
  with `distill.teacher` set, distillation from the teacher's verified
  rollouts (`distill_data`, `train.distill`)."""
  cfg = run.config.sft
  teacher = _section(run.config, "distill").get("teacher")
  if teacher:
    demos, step_fn, prefix = distill_data(run, teacher)
  else:
    demo_tasks = sft_demo_tasks(run.train_pool, cfg)
    demos = expert_trajectories(
      demo_tasks,
      run.rollout.env_factory,
      run.tokenizer,
      run.rollout.config,
      per_process=jax.process_count() > 1,
    )
    step_fn, prefix = run.sft_step, "sft"
  batch = _pack(demos, run.config)
  # SFT is one unit: the first checkpoint is written when it is done.
  epochs = step_lib.epochs_for_steps(cfg.steps, len(demos), cfg.batch_size)
  minibatches = itertools.islice(
    batching.minibatches(
      batch,
      batching.row_lengths(batch),
      run.config.length_buckets,
      run.layout,
      minibatch_size=cfg.batch_size,
      num_epochs=epochs,
      seed=run.config.seed,
    ),
    cfg.steps,
  )

  def log(m):
    run.host["sft_step"] += 1
    if run.host["sft_step"] % run.config.log_every == 0:
      run.writer.write_scalars(
        run.host["sft_step"], {f"{prefix}/{k}": v for k, v in m.items()}
      )

  run.state, _ = step_lib.run_steps(step_fn, run.state, minibatches, log)


# ---------------------------------------------------------------------------
# Distillation back: a finished run's policy teaches this run's model.


class TeacherError(ValueError):
  """`distill.teacher` does not name a finished run this one can learn from."""


# Key stream of the teacher's rollouts (RL steps fold in 0, 1, 2, ...).
_TEACHER_STREAM = 2**31 - 1
# The `distill` keys the loop reads itself; the rest are `DistillConfig`'s.
DISTILL_LOOP_KEYS = (
  "teacher", "num_tasks", "samples_per_task", "rollout_temperature", "keep",
  "max_per_task",
)  # fmt: skip


def _section(config, name: str) -> dict[str, Any]:
  """An optional config section as a dict ({} when the config lacks it)."""
  return dict(config.get(name) or {})


def _offline_play(run: Run, samplers, cfg: dict[str, Any], stream: int):
  """A rollout on `samplers` with the run's environments, framing and
  rewards, `cfg["samples_per_task"]` episodes a task at
  `cfg["rollout_temperature"]`; the first `cfg["num_tasks"]` training tasks;
  and the key of `stream` (a function of the seed only)."""
  player = Rollout(
    samplers,
    run.tokenizer,
    run.rollout.env_factory,
    run.stack,
    run.rollout.config.replace(
      group_size=cfg["samples_per_task"],
      temperature=cfg["rollout_temperature"],
    ),
  )
  tasks = list(run.train_pool)[: cfg["num_tasks"]]
  key = jax.random.fold_in(jax.random.key(run.config.seed), stream)
  return player, tasks, key


def load_policy(source: str, mesh) -> tuple[TrainState, Layout, Any, dict]:
  """The latest checkpointed state of the run in `source`, on `mesh`.

  The model is rebuilt from that run's own config.json (preset, vocabulary,
  sequence length), so it may differ in size from this run's. Returns
  (state, layout, its config, its host bookkeeping).
  """
  src = pathlib.Path(source)
  try:
    config = run_config(src)
  except FileNotFoundError as e:
    raise TeacherError(
      f"teacher {source!r}: no run there (no config.json)"
    ) from e
  model_config = _model_config(config, build_env_tokenizer())
  opt = sft_optimizer(config.sft)
  abstract = abstract_train_state(model_config, opt)
  layout = make_layout(abstract, mesh)
  state, host = _restore_latest(
    src,
    abstract,
    layout,
    TeacherError(f"teacher {source!r}: it has no checkpoint"),
  )
  return state, layout, config, host


def distill_data(run: Run, source: str):
  """Rejection-sampled teacher rollouts and the jitted distillation step.

  The teacher plays `distill.num_tasks` training tasks
  `distill.samples_per_task` times (this run's environment, framing and
  sampling settings at `distill.rollout_temperature`);
  `rollout.rejection.accept` keeps its verified successes. Writes them to
  `<workdir>/distill/kept.jsonl`, logs the selection (`distill/...` at
  step 0) and the teacher's greedy held-out evaluation, and keeps both in
  the run's host state for the summary.
  """
  cfg = _section(run.config, "distill")
  teacher, t_layout, t_config, t_host = load_policy(source, run.layout.mesh)
  if t_config.env.name != run.config.env.name:
    raise TeacherError(
      f"teacher {source!r} was trained on {t_config.env.name!r}, this run "
      f"plays {run.config.env.name!r}"
    )
  samplers = make_samplers(
    teacher.model.merge(),
    **run.config.sampler.to_dict(),
    **sampler_placement(run.config, run.layout.mesh),
  )
  player, tasks, key = _offline_play(run, samplers, cfg, _TEACHER_STREAM)
  kept, _, stats = rejection_sample(
    player,
    tasks,
    key,
    RejectionConfig(
      keep=cfg["keep"], max_per_task=cfg["max_per_task"], dedupe=True
    ),
  )
  if not kept:
    raise TeacherError(
      f"teacher {source!r} solved none of {len(tasks)} tasks in "
      f"{cfg['samples_per_task']} tries each: nothing to distill"
    )
  if shd.is_primary():
    out = run.workdir / "distill"
    out.mkdir(exist_ok=True)
    trajectory_io.write_jsonl(out / "kept.jsonl", kept)
  teacher_eval = evaluate_policy(player, run.eval_tasks, greedy=True)
  stats["teacher_eval_success_rate"] = teacher_eval["success_rate"]
  stats["teacher_params"] = float(count_params(teacher.model))
  run.writer.write_scalars(0, {f"distill/{k}": v for k, v in stats.items()})
  run.host["distill"] = {
    "teacher": str(source),
    "teacher_rl_step": t_host["rl_step"],
    **stats,
  }
  step_fn = distill_lib.make_distill_step(
    step_lib.StepConfig(
      optimizer=sft_optimizer(run.config.sft),
      loss=losses.PolicyLossConfig(agg="token-mean"),
    ),
    distill_lib.DistillConfig.from_dict(cfg, DISTILL_LOOP_KEYS),
    run.layout,
    teacher.model,
    t_layout.state.model,
  )
  return kept, step_fn, "distill"


def rl_teacher(config, loss: losses.PolicyLossConfig, mesh):
  """The frozen teacher of the RL stage (on-policy distillation), or None.

  `rl.teacher` names the workdir of a finished run (any size, same
  environment and tokenizer). Its policy runs inside every RL update and
  `loss.teacher_coef` weighs its divergence from the policy on the policy's
  own samples; `loss.pg_coef=0` leaves that term alone (pure on-policy
  distillation). With `loss.teacher_coef` = 0 it only logs the agreement.
  A run without RL steps never loads it. Returns (teacher ModelState, its
  shardings, what the summary says of it), or three Nones.
  """
  source = config.rl.get("teacher") or ""
  if not source:
    if loss.teacher_coef > 0:
      raise TeacherError(
        f"loss.teacher_coef={loss.teacher_coef} needs rl.teacher (the "
        "workdir of a finished run)"
      )
    return None, None, None
  if not config.rl.steps:  # an SFT-only stage (e.g. a sweep's shared one)
    return None, None, None
  teacher, t_layout, t_config, t_host = load_policy(source, mesh)
  if t_config.env.name != config.env.name:
    raise TeacherError(
      f"teacher {source!r} was trained on {t_config.env.name!r}, this run "
      f"plays {config.env.name!r}"
    )
  evals = t_host["evals"]
  info = {
    "teacher": str(source),
    "teacher_rl_step": t_host["rl_step"],
    "teacher_eval_success_rate": evals[-1]["success_rate"] if evals else None,
    "teacher_params": float(count_params(teacher.model)),
  }
  return teacher.model, t_layout.state.model, info


# ---------------------------------------------------------------------------
# Offline shaping: DPO on the policy's own best-vs-worst samples.


class OfflineError(ValueError):
  """The offline stage cannot run as configured (too few pairs)."""


_OFFLINE_STREAM = 2**31 - 2  # key stream of the offline stage's rollouts


def offline_dpo(run: Run) -> None:
  """DPO after the cold start, when `offline.dpo_steps` > 0.

  The policy plays `offline.num_tasks` training tasks
  `offline.samples_per_task` times at `offline.rollout_temperature`;
  `preference_pairs(by=offline.pair_by)` picks one pair a task; the
  reference is the policy as it is now (frozen copy); fresh Adam moments
  with the SFT optimizer at `offline.learning_rate`. Logs `dpo/...` (the
  selection and the held-out success before DPO at step 0, the updates at
  steps 1..N) and keeps the selection in the host state for the summary.
  """
  cfg = _section(run.config, "offline")
  steps = cfg.get("dpo_steps", 0)
  if not steps:
    return
  before = evaluate(run)  # also points the samplers at the current policy
  player, tasks, key = _offline_play(
    run, run.rollout.samplers, cfg, _OFFLINE_STREAM
  )
  trajectories = player.run(tasks, key)
  chosen, rejected = preference_pairs(
    trajectories, run.stack.succeeded, by=cfg["pair_by"]
  )
  batch_size = cfg["batch_size"]
  if len(chosen) < batch_size:
    raise OfflineError(
      f"{len(chosen)} preference pairs (by {cfg['pair_by']!r}) from "
      f"{len(tasks)} tasks x {cfg['samples_per_task']} samples; "
      f"offline.batch_size is {batch_size}"
    )
  c_batch, r_batch = dpo_lib.pack_pairs(
    chosen, rejected, length_buckets=tuple(run.config.length_buckets)
  )
  reference = copy_model(run.state.model)
  pairs = dpo_lib.make_pairs(reference, c_batch, r_batch)
  opt = offline_optimizer(run.config, cfg)
  init = jax.jit(
    make_optimizer(opt).init, out_shardings=run.layout.state.opt_state
  )
  run.state = run.state.replace(opt_state=init(run.state.model.params))
  step_fn = dpo_lib.make_dpo_step(
    step_lib.StepConfig(optimizer=opt),
    offline_dpo_config(cfg),
    run.layout,
  )
  stats = {
    "samples": float(len(trajectories)),
    "sample_success_rate": float(
      np.mean([run.stack.succeeded(t) for t in trajectories])
    ),
    "pairs": float(len(chosen)),
    "pre_eval_success_rate": before["success_rate"],
  }
  run.writer.write_scalars(0, {f"dpo/{k}": v for k, v in stats.items()})
  run.host["dpo"] = stats
  epochs = step_lib.epochs_for_steps(steps, len(chosen), batch_size)
  order = itertools.islice(
    step_lib.minibatch_order(len(chosen), batch_size, epochs, run.config.seed),
    steps,
  )
  minibatches = (step_lib.select_rows(pairs, r, run.layout) for r in order)
  count = itertools.count(1)

  def log(m):
    i = next(count)
    if i % run.config.log_every == 0:
      run.writer.write_scalars(i, {f"dpo/{k}": v for k, v in m.items()})

  run.state, _ = step_lib.run_steps(step_fn, run.state, minibatches, log)


def _start_rl(run: Run) -> None:
  """Fresh RL optimizer moments; the SFT policy becomes the reference."""
  opt = make_optimizer(rl_optimizer(run.config))
  init = jax.jit(opt.init, out_shardings=run.layout.state.opt_state)
  run.state = run.state.replace(opt_state=init(run.state.model.params))
  run.host["phase"] = "rl"


def advantage_scale(config) -> str:
  """`config.rl.advantage_scale` ("none" when a config predates it),
  checked: how each RL step's advantages are scaled (`estimators.scale`)."""
  return estimators.check_scale(config.rl.get("advantage_scale", "none"))


def advantage_scale_decay(config) -> float:
  """`config.rl.advantage_scale_decay` (0, the per-step divisor, when a
  config predates it), checked: the running divisor's decay."""
  return estimators.check_decay(config.rl.get("advantage_scale_decay", 0.0))


def check_scale_state(config, host: dict[str, Any]) -> None:
  """A run past RL step 0 with a running divisor (decay > 0) must have
  checkpointed it: without it the resumed steps would be divided by
  something the straight run never used."""
  if (
    advantage_scale(config) != "none"
    and advantage_scale_decay(config) > 0
    and host["rl_step"] > 0
    and "adv_scale" not in host
  ):
    raise ValueError(
      "rl.advantage_scale_decay > 0 needs the running divisor, and this "
      f"run's checkpoint at RL step {host['rl_step']} has none (it was "
      "begun without it); resume it with its own settings"
    )


def step_divisor(run: Run, adv_BxT, turn_mask_BxT) -> float:
  """What this RL step's advantages are divided by (`estimators.scale`);
  updates the running divisor in `run.host`."""
  mode = advantage_scale(run.config)
  if mode == "none":
    return 1.0
  stat = float(estimators.batch_statistic(adv_BxT, turn_mask_BxT, mode))
  scale = estimators.RunningScale.from_state(run.host.get("adv_scale"))
  divisor, scale = scale.step(stat, advantage_scale_decay(run.config))
  run.host["adv_scale"] = scale.state_dict()
  return divisor


def rl_step(run: Run, reference) -> dict[str, float]:
  """One iteration: roll out, score, estimate, update. Returns metrics."""
  cfg, config = run.config.rl, run.config
  i = run.host["rl_step"]
  t0 = time.perf_counter()
  _sync_policy(run)
  jax.block_until_ready([s.params for s in run.rollout.samplers])
  sync_s = time.perf_counter() - t0
  trajs, played, rollout_s, dynamic_m = roll_out_step(run, i)
  batch = _pack(trajs, config)
  if run.critic is None:
    adv_BxT = run.estimate(batch)
    adv_BxL = turns_to_tokens(adv_BxT, batch.turn_id_BxL)
  else:
    # On the host: the critic's rows may span several processes' devices.
    value_BxL = shd.to_host(
      critic_lib.compute_values(run.critic.model, batch.tokens_BxL)
    )
    est = run.estimate(batch, value_BxL)
    adv_BxT, adv_BxL = est.adv_BxT, est.adv_BxL
  mask = np.asarray(batch.turn_mask_BxT) > 0
  # The estimator's advantages, before any rescaling (for the metrics).
  adv = np.asarray(adv_BxT)[mask]
  divisor = step_divisor(run, adv_BxT, batch.turn_mask_BxT)
  # Replay stores (and trains on) the rescaled ones.
  adv_BxT, adv_BxL = adv_BxT / divisor, adv_BxL / divisor
  extra_m = dict(dynamic_m)
  if run.curriculum is not None:
    extra_m.update(update_curriculum(run, played))
  train_batch = batch
  if run.replay is not None:
    rows, turn_adv, replay_m = with_replay(run, trajs, np.asarray(adv_BxT), i)
    extra_m.update(replay_m)
    if len(rows) > len(trajs):
      train_batch = _pack(rows, config)
      adv_np = np.zeros(train_batch.turn_mask_BxT.shape, np.float32)
      for b, row_adv in enumerate(turn_adv):
        adv_np[b, : len(row_adv)] = row_adv
      adv_BxL = turns_to_tokens(jnp.asarray(adv_np), train_batch.turn_id_BxL)
  # Critic warm-up: the first iterations train only the critic.
  warmup = run.critic is not None and i < run.critic_config.warmup_steps
  ref_logp_BxL = None
  if reference is not None and not warmup:
    ref_logp_BxL = step_lib.compute_logp(
      reference,
      train_batch.tokens_BxL,
      temperature=rl_temperature(run.rollout.config),
    )
  inputs = step_lib.PolicyInputs(train_batch, adv_BxL, ref_logp_BxL)
  t0 = time.perf_counter()
  minibatches = batching.minibatches(
    inputs,
    batching.row_lengths(train_batch),
    config.length_buckets,
    run.layout,
    minibatch_size=cfg.minibatch_size,
    num_epochs=0 if warmup else cfg.epochs,
    seed=config.seed * 1_000_003 + i,
  )
  run.state, history = step_lib.run_steps(run.rl_step, run.state, minibatches)
  critic_m = {}
  if run.critic is not None:
    critic_m = critic_update(
      run, batch, value_BxL, est, seed=config.seed * 1_000_003 + i
    )
  train_s = time.perf_counter() - t0
  run.host["rl_step"] = i + 1

  metrics = {
    # Over every episode played (with dynamic sampling, the update's are
    # chosen for differing, so their rates would not be the policy's).
    **eval_metrics(played, run.rollout, rollout_s),
    **group_metrics(played, run.rollout.reward_stack.succeeded),
    **(_mean_metrics(history) if history else {}),  # none in warm-up
    **critic_m,
    **extra_m,
  }
  metrics.update(
    {
      "adv_mean": float(adv.mean()),
      "adv_std": float(adv.std()),
      "adv_abs_mean": float(np.abs(adv).mean()),
      "adv_frac_positive": float((adv > 0).mean()),
      "adv_divisor": float(divisor),
      "train_seconds": train_s,
      # the new weights into the samplers (a device collective with
      # per-process rollouts)
      "sync_seconds": sync_s,
      "train_tokens_per_s": float(
        cfg.epochs
        * np.asarray(train_batch.turn_id_BxL >= 0).sum()
        / max(train_s, 1e-9)
      ),
    }
  )
  return metrics


def critic_update(
  run: Run, batch, value_BxL, est, seed: int
) -> dict[str, float]:
  """The critic's epochs on one rollout batch (the policy's minibatch
  sizes and length buckets); `critic/...` metrics, with the explained
  variance of the targets by the values the advantages used."""
  cfg = run.config.rl
  inputs = critic_lib.CriticInputs(
    batch.tokens_BxL, est.target_BxL, est.value_mask_BxL, value_BxL
  )
  minibatches = batching.minibatches(
    inputs,
    batching.row_lengths(batch),
    run.config.length_buckets,
    run.critic_layout,
    minibatch_size=cfg.minibatch_size,
    num_epochs=run.critic_config.epochs or cfg.epochs,
    seed=seed,
  )
  run.critic, history = step_lib.run_steps(
    run.critic_step, run.critic, minibatches
  )
  out = _mean_metrics(history)
  out["explained_variance"] = critic_lib.explained_variance(
    value_BxL, est.target_BxL, est.value_mask_BxL
  )
  mask = np.asarray(est.value_mask_BxL) > 0
  out["target_mean"] = (
    float(np.asarray(est.target_BxL)[mask].mean()) if mask.any() else 0.0
  )
  return {f"critic/{k}": v for k, v in out.items()}


class CriticError(ValueError):
  """A run's critic cannot be restored (e.g. it began without one)."""


def start_critic(run: Run) -> None:
  """The critic of this run: restored with the run's checkpoint, or, when
  RL starts, a copy of the post-SFT policy with a zero value head."""
  args = (run.state.model, run.critic_config, run.layout.mesh)
  i = run.host["rl_step"]
  ckpt = Checkpointer(str(run.workdir / "critic"), max_to_keep=None)
  try:
    if i in ckpt.all_steps():
      abstract, run.critic_layout = critic_lib.critic_layout(
        *args, run.layout.rules
      )
      run.critic, _ = ckpt.restore(abstract, run.critic_layout, step=i)
    elif i > 0:
      raise CriticError(
        f"{run.workdir}: the estimator uses a critic but none was saved at "
        f"RL step {i} (was the run begun with a critic-free estimator?)"
      )
    else:
      run.critic, run.critic_layout = critic_lib.init_critic(
        *args, run.layout.rules
      )
  finally:
    ckpt.close()
  run.critic_step = critic_lib.make_critic_step(
    run.critic_config, run.critic_layout
  )


def _reference(run: Run):
  """The frozen policy the KL term pulls toward: the post-SFT model.

  Saved once, when RL starts, in `<workdir>/reference`, so a resumed run
  regularizes toward the same policy.
  """
  ckpt = Checkpointer(str(run.workdir / "reference"), max_to_keep=1)
  try:
    if ckpt.latest_step() is None:
      if run.host["rl_step"] > 0:
        raise ValueError(
          f"{run.workdir}: loss.kl_coef > 0 but no reference policy was "
          "saved when RL started (was the run begun with kl_coef = 0?)"
        )
      ckpt.save(run.state, force=True)
      return copy_model(run.state.model)
    state, _ = ckpt.restore(run.state, run.layout)
    return state.model
  finally:
    ckpt.close()


def train(config, workdir: str) -> dict[str, Any]:
  """SFT then RL, resumable; returns the run summary (also summary.json)."""
  run = setup(config, workdir)
  try:
    if run.host["phase"] == "sft":
      if run.host["sft_step"] < config.sft.steps:
        sft(run)
      offline_dpo(run)
      ev, solved = evaluate_by_task(run)
      run.writer.write_scalars(0, {f"eval/{k}": v for k, v in ev.items()})
      run.host["evals"].append(
        {"phase": "sft", "rl_step": 0, **eval_headline(ev), "solved": solved}
      )
      _start_rl(run)
      _save(run)
    reference = _reference(run) if config.loss.kl_coef > 0 else None
    if run.critic_config is not None:
      start_critic(run)
    while run.host["rl_step"] < config.rl.steps:
      metrics = rl_step(run, reference)
      i = run.host["rl_step"]
      if i % config.eval_every == 0 or i == config.rl.steps:
        ev, solved = evaluate_by_task(run)
        metrics.update({f"eval/{k}": v for k, v in ev.items()})
        run.host["evals"].append(
          {"phase": "rl", "rl_step": i, **eval_headline(ev), "solved": solved}
        )
      run.writer.write_scalars(i, metrics)
      if i % config.checkpoint_every == 0 or i == config.rl.steps:
        _save(run)
  finally:
    run.checkpointer.wait()
    run.writer.flush()
  summary = _summary(run)
  if shd.is_primary():
    (run.workdir / "summary.json").write_text(json.dumps(summary, indent=2))
  run.writer.close()
  run.checkpointer.close()
  return summary


def eval_headline(ev: dict[str, float]) -> dict[str, float]:
  """What `host["evals"]` (and summary.json) keep of an evaluation."""
  keys = ("success_rate", "return_mean", "turns_per_episode")
  return {
    k: v for k, v in ev.items() if k in keys or k.startswith("success_rate/")
  }


def _rl_vs_sft(before, after) -> dict[str, float] | None:
  """The last RL evaluation against the post-SFT one, task by task
  (`report.paired_tasks`: tasks lost, gained, McNemar's p), or None without
  both (or with evaluations kept before per-task results were, 2026-12-05)."""
  if not _pairable(before, after):
    return None
  return report.paired_tasks(before["solved"], after["solved"]).to_dict()


def _pairable(before, after) -> bool:
  """Whether there are a post-SFT and an RL evaluation, both with per-task
  verdicts (kept since 2026-12-05)."""
  return bool(
    before
    and after
    and after["phase"] == "rl"
    and "solved" in before
    and "solved" in after
  )


def _rl_vs_sft_by_difficulty(
  before, after, eval_tasks: Sequence[Task]
) -> dict[str, dict[str, float]] | None:
  """`_rl_vs_sft` within each difficulty of the held-out tasks ("d0",
  "d1", ...), or None where they have one difficulty (or no pairing)."""
  if not _pairable(before, after):
    return None
  difficulty = {t.id: f"d{t.difficulty}" for t in eval_tasks}
  if len(set(difficulty.values())) < 2:
    return None
  by = report.paired_tasks_by(before["solved"], after["solved"], difficulty)
  return {d: paired.to_dict() for d, paired in by.items()}


def _expert_ceiling(run: Run) -> dict[str, Any]:
  """The held-out tasks' `rollout.expert_ceiling` under the run's limits
  (a trained run's summary is not lost to an expert that fails: its
  error is recorded instead)."""
  try:
    return expert_ceiling(run.rollout, run.eval_tasks)
  except Exception as e:  # noqa: BLE001 - a diagnostic, after training
    return {"error": f"{type(e).__name__}: {e}"}


def _summary(run: Run) -> dict[str, Any]:
  evals = run.host["evals"]
  before = next((e for e in evals if e["phase"] == "sft"), None)
  after = evals[-1] if evals else None
  return {
    "workdir": str(run.workdir),
    "tensorboard": str(run.workdir / "logs"),
    "metrics_jsonl": str(run.workdir / "logs" / "metrics.jsonl"),
    "eval_tasks": len(run.eval_tasks),
    "success_after_sft": before and before["success_rate"],
    "success_after_rl": after and after["success_rate"],
    "rl_vs_sft": _rl_vs_sft(before, after),
    "rl_vs_sft_by_difficulty": _rl_vs_sft_by_difficulty(
      before, after, run.eval_tasks
    ),
    "rl_steps": run.host["rl_step"],
    "distill": run.host.get("distill"),
    "dpo": run.host.get("dpo"),
    "rl_teacher": run.host.get("rl_teacher"),
    "critic_params": run.critic and count_params(run.critic.model),
    "evals": evals,
    "expert_ceiling": _expert_ceiling(run),
    "machines": run.host.get("machines", []),
    "params": count_params(run.state.model),
    "step": int(jnp.asarray(run.state.step)),
  }
