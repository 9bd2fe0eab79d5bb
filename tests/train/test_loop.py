"""End to end: the smoke config trains, checkpoints and resumes exactly."""

import json
import math
import pathlib
import shutil
import subprocess
import sys
import types

import jax
import ml_collections
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from agentic_rl import estimators, losses, machine, models, rewards
from agentic_rl import sharding as shd
from agentic_rl.data import pool as pool_lib
from agentic_rl.data import trajectory_io
from agentic_rl.envs import sokoban as sokoban_env
from agentic_rl.models.config import SHAPE_FIELDS
from agentic_rl.models.tokenizer import build_env_tokenizer
from agentic_rl.train import critic as critic_lib
from agentic_rl.train import loop
from agentic_rl.train.logging import read_jsonl
from agentic_rl.types import Task, Trajectory, Turn
from configs import distill as distill_configs
from configs import sokoban


def _config(steps: int, estimator: str = "gigpo"):
  c = sokoban.get_config(f"{estimator},smoke")
  c.rl.steps = steps
  return c


def _rl_rows(workdir: pathlib.Path) -> dict[int, dict]:
  rows = read_jsonl(str(workdir / "logs" / "metrics.jsonl"))
  return {r["step"]: r for r in rows if "loss" in r}


def _rl_from_stage(sft_stage, workdir: pathlib.Path, config) -> dict[int, dict]:
  """RL rows of `config` trained from the shared SFT stage into `workdir`."""
  config.init_from = str(sft_stage[0])
  loop.train(config, str(workdir))
  return _rl_rows(workdir)


def _critic_rows(workdir: pathlib.Path) -> dict[int, dict]:
  # A critic warm-up step trains no policy: its row has no "loss".
  rows = read_jsonl(str(workdir / "logs" / "metrics.jsonl"))
  return {r["step"]: r for r in rows if "critic/value_loss" in r}


def _params(workdir: pathlib.Path, config):
  run = loop.setup(config, str(workdir))
  try:
    return jax.device_get(run.state.model.params), run.host
  finally:
    run.checkpointer.close()
    run.writer.close()


# The tests of one smoke run share it (a module fixture); under xdist they
# run on one worker (`make test` uses --dist loadgroup), which builds it
# once instead of once per worker, after tests/test_sweeps.py's CI sweep
# (same group, collected first) has compiled the same Sokoban smoke
# programs into the session's compilation cache.
ON_THE_STRAIGHT_RUN = pytest.mark.xdist_group("sokoban_smoke")
# Likewise the PPO runs (one critic and policy step program, one worker's
# jitted-step cache) and the runs that load the SFT stage as a teacher.
WITH_A_CRITIC = pytest.mark.xdist_group("ppo_smoke")
WITH_A_TEACHER = pytest.mark.xdist_group("teacher_smoke")


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("straight")
  summary = loop.train(_config(2), str(workdir))
  return workdir, summary


@ON_THE_STRAIGHT_RUN
def test_smoke_run_writes_everything(straight):
  workdir, summary = straight
  assert summary["rl_steps"] == 2
  assert (workdir / "summary.json").exists()
  assert (workdir / "config.json").exists()
  assert list((workdir / "logs").glob("events.out.tfevents.*"))
  assert (workdir / "checkpoints").is_dir()
  rows = _rl_rows(workdir)
  assert sorted(rows) == [1, 2]
  for row in rows.values():
    assert math.isfinite(row["loss"])
    assert math.isfinite(row["grad_norm"])
    assert 0.0 <= row["success_rate"] <= 1.0
    assert row["sync_seconds"] >= 0.0  # new weights into the samplers
    assert "eval/success_rate" in row
    # Groups of 2: each is mixed, all solved or all failed.
    kinds = ("mixed_success", "all_success", "all_failure")
    assert sum(row[f"groups/{k}"] for k in kinds) == pytest.approx(1.0)
  sft_rows = [
    r
    for r in read_jsonl(str(workdir / "logs" / "metrics.jsonl"))
    if "sft/loss" in r
  ]
  assert sft_rows and all(math.isfinite(r["sft/loss"]) for r in sft_rows)
  assert summary["success_after_sft"] is not None
  # Each evaluation keeps its verdict per task; the summary pairs the last
  # with the post-SFT one on the same tasks.
  for e in summary["evals"]:
    assert len(e["solved"]) == summary["eval_tasks"]
    assert np.mean(list(e["solved"].values())) == e["success_rate"]
  paired = summary["rl_vs_sft"]
  assert paired["n"] == summary["eval_tasks"]
  assert paired["rate_a"] == summary["success_after_sft"]
  assert paired["rate_b"] == summary["success_after_rl"]
  assert 0.0 <= paired["p_value"] <= 1.0
  assert summary["rl_vs_sft_by_difficulty"] is None  # one difficulty
  # The scripted expert within the run's limits: the smoke config's 3
  # turns of one move are fewer than any difficulty-0 level needs (4+).
  turns = loop.run_config(workdir).rollout.max_turns
  assert turns == 3 < sokoban_env.DIFFICULTIES[0][-1]
  assert summary["expert_ceiling"] == {
    "success_rate": 0.0,
    "success_rate/d0": 0.0,
  }
  # The machine it ran on, recorded at launch, from the start of SFT.
  (here,) = summary["machines"]
  assert here["key"] == machine.describe()["key"]
  assert (here["phase"], here["sft_step"], here["rl_step"]) == ("sft", 0, 0)
  assert "unrecorded_before" not in here


@ON_THE_STRAIGHT_RUN
def test_resume_continues_exactly(straight, tmp_path):
  workdir, _ = straight
  # An earlier attempt that died before its first checkpoint left a log.
  logs = tmp_path / "logs"
  logs.mkdir()
  stale = '{"step": 1, "time": 0.0, "loss": 99.0}\n'
  (logs / "metrics.jsonl").write_text(stale)
  loop.train(_config(1), str(tmp_path))  # stop after one RL step ...
  # Starting from scratch set that log aside instead of appending to it.
  assert (logs / "metrics.jsonl.stale1").read_text() == stale
  assert all(r.get("loss") != 99.0 for r in read_jsonl(logs / "metrics.jsonl"))
  loop.train(_config(2), str(tmp_path))  # ... and resume for the second
  assert not (logs / "metrics.jsonl.stale2").exists()  # resuming appends
  assert sorted(_rl_rows(tmp_path)) == [1, 2]
  want, want_host = _params(workdir, _config(2))
  got, got_host = _params(tmp_path, _config(2))
  jax.tree.map(np.testing.assert_array_equal, got, want)
  assert got_host["task_sampler"] == want_host["task_sampler"]
  a, b = _rl_rows(workdir)[2], _rl_rows(tmp_path)[2]
  for key in (
    "loss",
    "grad_norm",
    "success_rate",
    "return_mean",
    "adv_mean",
    "tokens_per_episode",
  ):
    assert a[key] == b[key], key
  # Launched again with another estimator, the run is refused by name;
  # before, setup rewrote config.json and went on from GiGPO's checkpoint.
  before = (tmp_path / "config.json").read_text()
  with pytest.raises(
    loop.ResumeConfigError, match=r"config\.estimator\.name: 'gigpo' -> 'grpo'"
  ):
    loop.setup(_config(2, "grpo"), str(tmp_path), record=False)
  assert (tmp_path / "config.json").read_text() == before


def test_a_longer_run_may_resume_unless_its_cosine_spans_rl_steps(tmp_path):
  config = _config(2)
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  longer = _config(4)
  loop.check_resume(longer, tmp_path)  # constant schedule: steps may grow
  config.rl.optimizer.schedule = longer.rl.optimizer.schedule = "cosine"
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  # The cosine spans every RL update: 4 steps would reshape its decay.
  with pytest.raises(loop.ResumeConfigError, match="rl.optimizer, as run"):
    loop.check_resume(longer, tmp_path)
  loop.check_resume(config, tmp_path)


def test_resume_mismatch_lets_length_and_speed_settings_change():
  ours = json.loads(_config(2).to_json_best_effort())
  theirs = json.loads(_config(2).to_json_best_effort())
  assert loop.resume_mismatch(theirs, ours) == []
  ours["rl"]["steps"] = 5  # a longer run
  ours["eval_every"] = 3
  ours["mesh"]["shape"] = [2, 1, 1]
  ours["model"]["remat"] = "full"
  ours["sampler"]["kernels_out_first"] = True
  ours["init_from"] = "/moved/stage"
  ours["a_field_added_later"] = 1  # absent from an older config.json
  del theirs["rollout"]["pipeline"]
  assert loop.resume_mismatch(theirs, ours) == []
  ours["rl"]["optimizer"]["learning_rate"] = 0.5
  ours["rollout"]["temperature"] = 0.7
  ours["dynamic_sampling"] = {"max_rounds": 3}  # switched on: {} before
  lr = theirs["rl"]["optimizer"]["learning_rate"]
  assert theirs["dynamic_sampling"] == {}
  assert loop.resume_mismatch(theirs, ours) == [
    ("dynamic_sampling", {}, {"max_rounds": 3}),
    ("rl.optimizer.learning_rate", lr, 0.5),
    ("rollout.temperature", theirs["rollout"]["temperature"], 0.7),
  ]


@pytest.fixture(scope="module")
def sft_stage(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("sft_stage")
  summary = loop.train(_config(0), str(workdir))
  return workdir, summary


def test_a_run_rebuilt_from_its_config_json_scores_the_same(sft_stage):
  """`run_config` + `scratch_run` + `restore_step` (what the scoring
  scripts do with only a run directory) rebuild the SFT stage: the same
  config, and the same held-out evaluation as the stage's own, even when
  the config's `init_from` and `rl.teacher` name runs that no longer
  exist (an RL run's may)."""
  source, stage = sft_stage
  config = loop.run_config(source)
  assert json.loads(config.to_json_best_effort()) == json.loads(
    (source / "config.json").read_text()
  )
  config.init_from = str(source.parent / "gone")
  config.rl.steps = 2
  config.rl.teacher = str(source.parent / "gone_teacher")
  with loop.scratch_run(config) as run:
    assert run.rl_step is None  # scoring builds no update
    assert "machines" not in run.host  # nor records (probes) the machine
    loop.restore_step(run, source / "checkpoints", 0)
    got, solved = loop.evaluate_by_task(run)
    assert list(solved) == [t.id for t in run.eval_tasks]
  assert config.init_from and config.rl.steps == 2  # the caller's, as it was
  assert np.mean(list(solved.values())) == got["success_rate"]
  assert got["success_rate"] == stage["success_after_sft"]
  (sft_eval,) = [e for e in stage["evals"] if e["phase"] == "sft"]
  assert got["return_mean"] == pytest.approx(sft_eval["return_mean"])
  with pytest.raises(FileNotFoundError, match="no config.json"):
    loop.run_config(source / "checkpoints")


def test_sft_stage_then_warm_start_skips_sft(sft_stage, tmp_path):
  source, stage = sft_stage
  assert stage["rl_steps"] == 0 and stage["success_after_sft"] is not None
  config = _config(1, estimator="grpo")
  config.init_from = str(source)
  before, _ = _params(tmp_path / "probe", config)  # restored, not trained
  want, _ = _params(source, _config(0))
  jax.tree.map(np.testing.assert_array_equal, before, want)

  summary = loop.train(config, str(tmp_path / "rl"))
  assert summary["rl_steps"] == 1
  assert summary["success_after_sft"] == stage["success_after_sft"]
  rows = read_jsonl(str(tmp_path / "rl" / "logs" / "metrics.jsonl"))
  assert not any("sft/loss" in r for r in rows)  # no SFT ran here
  (first,) = [r for r in rows if r["step"] == 0]
  assert first["eval/success_rate"] == stage["success_after_sft"]
  # The stage's per-difficulty rate comes along (one difficulty here).
  (sft_eval,) = [e for e in stage["evals"] if e["phase"] == "sft"]
  assert first["eval/success_rate/d0"] == sft_eval["success_rate/d0"]
  assert sft_eval["success_rate/d0"] == stage["success_after_sft"]
  # It carries the stage's machine record (the SFT it started from ran
  # there), not one begun at RL step 0.
  assert summary["machines"] == stage["machines"]
  assert summary["machines"][0]["phase"] == "sft"
  # It resumes from its own checkpoint, not the source, from then on.
  again = loop.train(_config(2, estimator="grpo"), str(tmp_path / "rl"))
  assert again["rl_steps"] == 2
  # A run begun without a critic cannot grow one halfway: its config
  # names another estimator, and even without its config.json to say so,
  # it has no critic saved at its step.
  ppo = _config(3, estimator="ppo")
  ppo.init_from = str(source)
  with pytest.raises(loop.ResumeConfigError, match="'grpo' -> 'gae'"):
    loop.train(ppo, str(tmp_path / "rl"))
  (tmp_path / "rl" / "config.json").unlink()
  with pytest.raises(loop.CriticError, match="RL step 2"):
    loop.train(ppo, str(tmp_path / "rl"))


@ON_THE_STRAIGHT_RUN
def test_warm_start_matches_a_full_run_of_the_same_seed(
  straight, sft_stage, tmp_path
):
  # SFT here == SFT in the source, so RL from the shared stage equals a run
  # that did its own SFT (same seed, same estimator): sharing changes cost,
  # not results.
  workdir, _ = straight
  a = _rl_rows(workdir)[2]
  b = _rl_from_stage(sft_stage, tmp_path, _config(2))[2]
  for key in ("loss", "success_rate", "tokens_per_episode"):
    assert a[key] == b[key], key


@ON_THE_STRAIGHT_RUN
def test_advantage_scale_divides_each_steps_advantages(
  straight, sft_stage, tmp_path
):
  # From the shared stage, step 1 plays what the straight run played, so
  # the estimator's advantages (the adv_* metrics) agree; the update then
  # sees them divided by their mean |advantage|, so it differs. With a
  # running divisor (decay 0.5) step 2 is divided by the bias-corrected
  # mean of both steps' statistics, also when the run stops after step 1
  # and resumes (the running divisor is checkpointed).
  workdir, _ = straight
  plain = _rl_rows(workdir)
  for steps in (1, 2):
    config = _config(steps)
    config.rl.advantage_scale = "mean_abs"
    config.rl.advantage_scale_decay = 0.5
    scaled = _rl_from_stage(sft_stage, tmp_path, config)
  assert plain[1]["adv_abs_mean"] > 0
  assert scaled[1]["adv_abs_mean"] == plain[1]["adv_abs_mean"]
  assert plain[1]["adv_divisor"] == plain[2]["adv_divisor"] == 1.0
  a1, a2 = scaled[1]["adv_abs_mean"], scaled[2]["adv_abs_mean"]
  np.testing.assert_allclose(scaled[1]["adv_divisor"], a1, rtol=1e-5)
  np.testing.assert_allclose(
    scaled[2]["adv_divisor"], (0.5 * a1 + a2) / 1.5, rtol=1e-5
  )
  assert scaled[1]["loss"] != plain[1]["loss"]
  # The checkpoint holds both steps' weight (1 - 0.5^2): a state lost at
  # the resume would hold one step's (0.5) even where a1 == a2.
  _, host = _params(tmp_path, config)
  np.testing.assert_allclose(host["adv_scale"]["weight"], 0.75)
  np.testing.assert_allclose(
    host["adv_scale"]["total"], 0.25 * a1 + 0.5 * a2, rtol=1e-5
  )


@ON_THE_STRAIGHT_RUN
def test_bad_warm_starts_are_named_errors(straight, sft_stage, tmp_path):
  source, _ = sft_stage
  finished_rl, _ = straight
  cases = (
    (str(tmp_path / "nowhere"), {}, "no config.json"),
    (str(source), {"seed": 1}, "config.seed differs"),
    (str(source), {"sft.steps": 4}, "config.sft differs"),
    (str(finished_rl), {}, "RL step 2"),
  )
  for i, (init, changes, match) in enumerate(cases):
    config = _config(1)
    config.init_from = init
    for key, value in changes.items():
      node = config
      *parents, leaf = key.split(".")
      for p in parents:
        node = node[p]
      node[leaf] = value
    with pytest.raises(loop.WarmStartError, match=match):
      loop.setup(config, str(tmp_path / f"run{i}"))


def _warm_start_with_other_knobs(source: pathlib.Path):
  config = _config(1)
  config.init_from = str(source)
  config.rl.optimizer.learning_rate = 3e-3
  config.rl.optimizer.warmup_steps = 0
  config.model.remat = "full"
  config.model.logits_chunk = 16
  config.sampler.kernels_out_first = True
  config.rollout.group_size += 2
  return config


def test_warm_start_may_change_the_rl_optimizer_and_remat(sft_stage, tmp_path):
  """Its handed-over state is fresh moments: an RL learning-rate ablation
  shares the SFT stage, and its first update uses its own rate. Remat and
  logits chunks (`config.model.remat`, `.logits_chunk`) leave the
  parameters as they are, and transposed sampler weights
  (`config.sampler.kernels_out_first`) what is sampled, and the SFT stage
  never reads the RL group size (`config.rollout.group_size`), so an RL
  run with them starts from a stage run without them. Here: the restore and what
  it refuses; the RL step (its own rate, finite numbers) is
  `test_a_warm_start_with_other_knobs_trains`, a slow test."""
  source, _ = sft_stage
  # Restored from the stage (no WarmStartError), as it is: the remat and
  # chunk settings build the same parameter tree.
  got, _ = _params(tmp_path / "probe", _warm_start_with_other_knobs(source))
  want, _ = _params(source, _config(0))
  jax.tree.map(np.testing.assert_array_equal, got, want)
  bad = _config(1)
  bad.init_from = str(source)
  bad.model.preset = "nano"  # other fields of config.model still count
  with pytest.raises(loop.WarmStartError, match="config.model differs"):
    loop.setup(bad, str(tmp_path / "bad"))
  bad = _config(1)
  bad.init_from = str(source)
  bad.sampler.max_len += 64  # other fields of config.sampler still count
  with pytest.raises(loop.WarmStartError, match="config.sampler differs"):
    loop.setup(bad, str(tmp_path / "bad_sampler"))
  bad = _config(1)
  bad.init_from = str(source)
  bad.rollout.max_turns += 1  # other fields of config.rollout still count
  with pytest.raises(loop.WarmStartError, match="config.rollout differs"):
    loop.setup(bad, str(tmp_path / "bad_rollout"))


def test_model_shape_fields_size_the_model_over_its_preset(sft_stage, tmp_path):
  """`config.model.n_layers`, `.d_model`, ... set those fields of the
  preset (0: the preset's); the run's config.json rebuilds that shape
  where another run loads it as a policy (`load_policy`: teachers), and
  a warm start must agree on it. A config written before the fields
  existed reads as one with every field 0."""
  config = _config(0)
  tiny = models.get_preset("tiny")
  base = loop._model_config(config, build_env_tokenizer())
  assert all(getattr(base, k) == getattr(tiny, k) for k in SHAPE_FIELDS)
  changed = {"n_layers": 2, "d_model": 64, "head_dim": 16, "mlp_dim": 96}
  config.model.update(changed)
  shaped = loop._model_config(config, build_env_tokenizer())
  assert {k: getattr(shaped, k) for k in SHAPE_FIELDS} == {
    "n_heads": tiny.n_heads, "n_kv_heads": tiny.n_kv_heads, **changed
  }  # fmt: skip
  loop.train(config, str(tmp_path / "small"))
  got, _, got_config, _ = loop.load_policy(
    str(tmp_path / "small"), shd.make_mesh((1, 1, 1))
  )
  assert got_config.model.n_layers == 2
  want, _ = _params(tmp_path / "small", config)
  jax.tree.map(
    lambda a, b: np.testing.assert_array_equal(np.asarray(a), b),
    got.model.params,
    want,
  )
  sizes = [x.size for x in jax.tree.leaves(want)]
  tiny_sizes = [
    x.size for x in jax.tree.leaves(_params(tmp_path / "t", _config(0))[0])
  ]
  assert sum(sizes) < sum(tiny_sizes) / 2
  # Warm starts: a changed shape is a changed model; absent reads as 0.
  source, _ = sft_stage
  bad = _config(1)
  bad.init_from = str(source)
  bad.model.n_layers = 2
  with pytest.raises(loop.WarmStartError, match="config.model differs"):
    loop.setup(bad, str(tmp_path / "bad"))
  ours = json.loads(_config(0).to_json_best_effort())
  old = json.loads(_config(0).to_json_best_effort())
  for k in SHAPE_FIELDS:
    del old["model"][k]
  assert loop.warm_start_mismatch(old, ours) is None


def test_sft_cosine_schedule_from_the_config(tmp_path):
  """`sft.optimizer.schedule="cosine"` decays SFT's learning rate over
  `total_steps`, or over `sft.steps` when that is left at 0. Such a stage
  cannot stand in for a constant-rate one; a config.json written before
  the schedule fields existed reads as the constant schedule it ran."""
  config = _config(0)
  config.sft.optimizer.schedule = "cosine"
  assert config.sft.optimizer.total_steps == 0  # spans sft.steps
  loop.train(config, str(tmp_path))
  rows = read_jsonl(str(tmp_path / "logs" / "metrics.jsonl"))
  got = [r["sft/learning_rate"] for r in rows if "sft/learning_rate" in r]
  lr, n = config.sft.optimizer.learning_rate, config.sft.steps
  assert n == 3 and config.sft.optimizer.warmup_steps == 0
  want = [lr * 0.5 * (1 + math.cos(math.pi * k / n)) for k in range(n)]
  np.testing.assert_allclose(got, want, rtol=1e-6)  # lr, 0.75 lr, 0.25 lr
  ours = json.loads(_config(0).to_json_best_effort())
  old = json.loads(_config(0).to_json_best_effort())
  for k in ("schedule", "total_steps", "end_lr_ratio"):
    del old["sft"]["optimizer"][k]
  assert loop.warm_start_mismatch(old, ours) is None
  cosine = json.loads(config.to_json_best_effort())
  assert loop.warm_start_mismatch(old, cosine)[0] == "sft"
  sized = json.loads(config.to_json_best_effort())
  sized["sft"]["optimizer"]["total_steps"] = n  # the same schedule, spelled
  assert loop.warm_start_mismatch(sized, cosine) is None
  sized["sft"]["optimizer"]["total_steps"] = 2 * n  # half of a longer one
  assert loop.warm_start_mismatch(sized, cosine)[0] == "sft"
  # A stage of no steps has no schedule to follow (and no error).
  config.sft.steps = 0
  assert loop.sft_optimizer(config.sft).schedule == "constant"


def test_rl_cosine_schedule_spans_the_runs_updates(sft_stage, tmp_path):
  """An RL cosine left at `total_steps` 0 decays over every policy update
  of the run (steps x epochs x minibatches); each RL step logs the mean
  rate of its updates. Replay needs it set; a critic's warm-up steps,
  which update no policy, do not count."""
  source, _ = sft_stage
  config = _config(2)
  config.init_from = str(source)
  config.rl.optimizer.schedule = "cosine"
  config.rl.optimizer.warmup_steps = 0
  rl = config.rl
  per_step = rl.epochs * (rl.tasks_per_step * config.rollout.group_size)
  per_step //= rl.minibatch_size
  assert per_step == 4  # 2 epochs x 2 minibatches in the smoke config
  n = 2 * per_step
  assert loop.rl_optimizer(config).total_steps == n
  loop.train(config, str(tmp_path))
  rows = _rl_rows(tmp_path)
  lr = config.rl.optimizer.learning_rate
  cosine = [lr * 0.5 * (1 + math.cos(math.pi * k / n)) for k in range(n)]
  for step in (1, 2):
    want = np.mean(cosine[(step - 1) * per_step : step * per_step])
    assert rows[step]["learning_rate"] == pytest.approx(want, rel=1e-5)
  assert rows[2]["optimizer_step"] - rows[1]["optimizer_step"] == per_step

  ppo = _config(3, estimator="ppo")
  ppo.rl.optimizer.schedule = "cosine"
  ppo.critic.warmup_steps = 1
  assert loop.rl_optimizer(ppo).total_steps == 2 * per_step
  ppo.rl.steps = 0  # no policy update: nothing to decay
  assert loop.rl_optimizer(ppo).schedule == "constant"
  config.replay = {"capacity": 16}
  with pytest.raises(loop.StateConfigError, match="replay needs total_steps"):
    loop.rl_optimizer(config)
  config.rl.optimizer.total_steps = 40
  assert loop.rl_optimizer(config).total_steps == 40


@pytest.mark.slow
def test_a_warm_start_with_other_knobs_trains(sft_stage, tmp_path):
  # The run of the test above, one RL step: its own learning rate, finite
  # numbers with remat, logits chunks and transposed sampler weights.
  source, _ = sft_stage
  summary = loop.train(_warm_start_with_other_knobs(source), str(tmp_path))
  assert summary["rl_steps"] == 1
  (row,) = _rl_rows(tmp_path).values()
  assert row["learning_rate"] == pytest.approx(3e-3)
  assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])


@WITH_A_CRITIC
def test_ppo_critic_trains_checkpoints_and_resumes_exactly(sft_stage, tmp_path):
  """PPO with a value model from the shared SFT stage: the critic starts
  at zero values, learns, is checkpointed with the run, and a resumed run
  continues exactly (policy and critic). One warm-up step: step 1 trains
  only the critic, step 2 both."""
  source, _ = sft_stage

  def config(steps):
    c = _config(steps, estimator="ppo")
    c.init_from = str(source)
    c.critic.warmup_steps = 1
    return c

  straight = loop.train(config(2), str(tmp_path / "straight"))
  assert straight["critic_params"] > straight["params"]  # + the value head
  rows = _critic_rows(tmp_path / "straight")
  # Zero values explain none of the first batch's returns.
  assert rows[1]["critic/explained_variance"] == pytest.approx(0.0, abs=1e-6)
  for row in rows.values():
    assert math.isfinite(row["critic/value_loss"])
    assert row["critic/optimizer_step"] > 0
  assert rows[2]["critic/optimizer_step"] > rows[1]["critic/optimizer_step"]
  # After the warm-up step the policy trains.
  assert "loss" not in rows[1] and math.isfinite(rows[2]["loss"])
  critic_dir = tmp_path / "straight" / "critic"
  assert sorted(int(p.name) for p in critic_dir.iterdir()) == [1, 2]

  loop.train(config(1), str(tmp_path / "resumed"))
  loop.train(config(2), str(tmp_path / "resumed"))
  a, b = rows[2], _critic_rows(tmp_path / "resumed")[2]
  for key in ("loss", "success_rate", "critic/value_loss", "adv_mean"):
    assert a[key] == b[key], key

  # (A run begun without a critic cannot grow one halfway: checked on the
  # GRPO run of test_sft_stage_then_warm_start_skips_sft.)
  bad = config(1)
  bad.critic.value_scale = -1.0
  with pytest.raises(critic_lib.CriticConfigError, match="value_scale"):
    loop.setup(bad, str(tmp_path / "bad"))


@WITH_A_CRITIC
def test_critic_warmup_holds_the_policy(sft_stage, tmp_path):
  """Two critic-only steps, each checkpointed (the optimizer step does not
  move in them: the run's checkpoints are keyed by RL step), then a resume
  after a kill between the critic's save and the run's. (The policy
  training after the warm-up: test_ppo_critic_trains_checkpoints_...)"""
  source, _ = sft_stage
  config = _config(2, estimator="ppo")
  config.init_from = str(source)
  config.critic.warmup_steps = 2
  config.eval_every = 10  # only at the last step: not what is tested
  loop.train(config, str(tmp_path))
  got, host = _params(tmp_path, config)
  assert host["rl_step"] == 2
  want, _ = _params(source, _config(0))
  jax.tree.map(np.testing.assert_array_equal, got, want)
  rows = _critic_rows(tmp_path)
  for step in (1, 2):
    assert "loss" not in rows[step] and rows[step]["critic/optimizer_step"] > 0
  checkpoints, critics = (tmp_path / "checkpoints"), (tmp_path / "critic")
  assert sorted(int(p.name) for p in checkpoints.iterdir()) == [1, 2]
  # Killed after the critic of step 2 was saved, before the run's: the
  # resumed run redoes step 2 and saves its critic there again.
  shutil.rmtree(checkpoints / "2")
  loop.train(config, str(tmp_path))
  assert sorted(int(p.name) for p in checkpoints.iterdir()) == [1, 2]
  assert sorted(int(p.name) for p in critics.iterdir()) == [1, 2]
  again = _critic_rows(tmp_path)[2]
  assert again["critic/value_loss"] == rows[2]["critic/value_loss"]
  with pytest.raises(critic_lib.CriticConfigError, match="warmup_steps"):
    critic_lib.CriticConfig(warmup_steps=-1)


# Slow (29 s of the default suite's 553 test-seconds on a Zen 5 VM, mostly
# compiles of shapes no other test uses): CI keeps the parts, the search
# env (tests/envs/test_search_qa.py), the tag protocol in a real rollout
# (tests/rollout/test_rollout.py) and the PRM-weighted estimator
# (tests/estimators), and the config's fields (tests/test_sweeps.py).
@pytest.mark.slow
def test_search_qa_smoke_run_trains_on_tag_protocol_episodes(tmp_path):
  # The credit-assignment sweep's tool environment, end to end at smoke
  # size: SFT on expert search/answer demos, then RL with PRM evidence.
  from configs import search_qa

  config = search_qa.get_config("prm_weighted,smoke")
  config.rl.steps = 1  # the smoke runs 2; a second adds no new path
  summary = loop.train(config, str(tmp_path))
  assert summary["rl_steps"] == config.rl.steps
  rows = _rl_rows(tmp_path)
  assert sorted(rows) == list(range(1, config.rl.steps + 1))
  for row in rows.values():
    assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
    # Every episode is a search-QA dialogue that used at least one turn.
    assert 1.0 <= row["turns_per_episode"] <= config.rollout.max_turns
    assert row["tokens_per_episode"] <= config.rollout.max_total_tokens
  sft = [
    r["sft/loss"]
    for r in read_jsonl(str(tmp_path / "logs" / "metrics.jsonl"))
    if "sft/loss" in r
  ]
  assert len(sft) == config.sft.steps and all(map(math.isfinite, sft))


# Slow (about 90 s on a 2-core VM, contexts of 2,560 tokens): CI keeps the
# environment (tests/envs/test_code_repair.py), the config's budgets
# against its expert episodes (tests/test_sweeps.py) and the tool-call
# protocol in a real rollout (tests/rollout/test_rollout.py).
@pytest.mark.slow
def test_code_repair_smoke_run_trains_on_sandboxed_tool_episodes(tmp_path):
  # SFT on expert search/read/edit/test/answer demos, then RL whose every
  # run_tests and answer runs in the sandbox, under full remat.
  from configs import code_repair

  config = code_repair.get_config("gigpo,smoke")
  config.rl.steps = 1
  summary = loop.train(config, str(tmp_path))
  assert summary["rl_steps"] == 1
  (row,) = _rl_rows(tmp_path).values()
  assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
  assert 1.0 <= row["turns_per_episode"] <= config.rollout.max_turns
  assert row["tokens_per_episode"] <= config.rollout.max_total_tokens


def _distill_config(teacher: pathlib.Path, source: str = "token"):
  c = distill_configs.get_config(f"{source},smoke")
  c.distill.teacher = str(teacher)
  return c


@WITH_A_TEACHER
def test_distill_a_finished_run_into_a_smaller_student(sft_stage, tmp_path):
  teacher, stage = sft_stage
  config = _distill_config(teacher)
  summary = loop.train(config, str(tmp_path))
  d = summary["distill"]
  assert d["teacher"] == str(teacher) and d["teacher_rl_step"] == 0
  # Greedy play of the restored teacher reproduces its own evaluation.
  assert d["teacher_eval_success_rate"] == stage["success_after_sft"]
  assert summary["params"] < d["teacher_params"] / 3  # nano vs tiny
  # keep="best": one trajectory per task, the first tasks of the train split
  kept = trajectory_io.read_jsonl(tmp_path / "distill" / "kept.jsonl")
  pool = loop.task_pool(config).split("train")
  want = [t.id for t in list(pool)[: config.distill.num_tasks]]
  assert [t.task.id for t in kept] == want
  assert d["kept"] == len(kept) and d["samples"] == 2 * len(kept)
  rows = read_jsonl(str(tmp_path / "logs" / "metrics.jsonl"))
  steps = [r for r in rows if "distill/loss" in r]
  assert len(steps) == config.sft.steps
  assert all(math.isfinite(r["distill/divergence"]) for r in steps)
  assert not any("sft/loss" in r for r in rows)
  assert summary["success_after_sft"] is not None


@WITH_A_TEACHER
def test_bad_teachers_are_named_errors(sft_stage, tmp_path):
  teacher, _ = sft_stage
  with pytest.raises(loop.TeacherError, match="no config.json"):
    loop.train(_distill_config(tmp_path / "nowhere"), str(tmp_path / "a"))
  empty = tmp_path / "empty"
  empty.mkdir()
  shutil.copy(teacher / "config.json", empty / "config.json")
  with pytest.raises(loop.TeacherError, match="no checkpoint"):
    loop.train(_distill_config(empty), str(tmp_path / "b"))
  config = _distill_config(teacher)
  config.distill.keep = "success"  # the smoke teacher solves no level
  with pytest.raises(loop.TeacherError, match="solved none of 4 tasks"):
    loop.train(config, str(tmp_path / "c"))
  config = _distill_config(teacher)
  config.env.name = "frozenlake"
  config.env.options = {}
  with pytest.raises(loop.TeacherError, match="trained on 'sokoban'"):
    loop.train(config, str(tmp_path / "d"))


@WITH_A_TEACHER
def test_on_policy_distillation_from_a_finished_run(sft_stage, tmp_path):
  teacher, stage = sft_stage
  config = distill_configs.get_config("expert,opd,smoke")
  config.rl.teacher = str(teacher)
  config.rl.steps = 1  # the smoke runs 2; a second adds no new path
  summary = loop.train(config, str(tmp_path))
  t = summary["rl_teacher"]
  assert t["teacher"] == str(teacher) and t["teacher_rl_step"] == 0
  assert t["teacher_eval_success_rate"] == stage["success_after_sft"]
  assert summary["params"] < t["teacher_params"] / 3  # nano vs tiny
  rows = _rl_rows(tmp_path)
  assert sorted(rows) == [1]
  for row in rows.values():
    assert math.isfinite(row["teacher_div"]) and row["teacher_div"] > 0
    assert 0.0 <= row["teacher_top1_agreement"] <= 1.0
    # pg_coef 0, no KL anchor, no entropy bonus: the teacher term alone
    assert row["loss"] == pytest.approx(row["teacher_div"], rel=1e-5)
    assert math.isfinite(row["pg_loss"])


@WITH_A_TEACHER
def test_bad_rl_teachers_are_named_errors(sft_stage, tmp_path):
  teacher, _ = sft_stage
  config = distill_configs.get_config("expert,opd,smoke")
  with pytest.raises(loop.TeacherError, match="needs rl.teacher"):
    loop.setup(config, str(tmp_path / "a"))
  config.rl.teacher = str(tmp_path / "nowhere")
  with pytest.raises(loop.TeacherError, match="no config.json"):
    loop.setup(config, str(tmp_path / "b"))
  # An SFT-only stage never loads the teacher: "nowhere" is not read.
  config.rl.steps = 0
  run = loop.setup(config, str(tmp_path / "sft_only"))
  run.checkpointer.close()
  run.writer.close()
  assert "rl_teacher" not in run.host
  config.rl.steps = 1
  config.rl.teacher = str(teacher)
  config.env.name = "frozenlake"
  config.env.options = {}
  with pytest.raises(loop.TeacherError, match="trained on 'sokoban'"):
    loop.setup(config, str(tmp_path / "c"))


# Slow (23 s: its own 30-step SFT, the DPO stage and an RL step): CI keeps
# the offline stage up to its pairing (test_offline_dpo_without_pairs_...)
# and the DPO update (tests/train/test_sft_dpo.py).
@pytest.mark.slow
def test_offline_dpo_between_sft_and_rl(sft_stage, tmp_path):
  config = _config(1)
  # Enough SFT that moves are valid and returns differ within a level.
  config.sft.steps = 30
  config.sft.optimizer.learning_rate = 3e-3
  config.offline.dpo_steps = 3
  summary = loop.train(config, str(tmp_path))
  d = summary["dpo"]
  assert d["samples"] == 32 and 2 <= d["pairs"] <= 8
  assert 0.0 <= d["pre_eval_success_rate"] <= 1.0
  rows = read_jsonl(str(tmp_path / "logs" / "metrics.jsonl"))
  steps = sorted((r for r in rows if "dpo/loss" in r), key=lambda r: r["step"])
  assert [r["step"] for r in steps] == [1, 2, 3]
  # The reference is the policy itself at the first update: margin 0.
  assert steps[0]["dpo/loss"] == pytest.approx(math.log(2.0), abs=1e-5)
  assert steps[0]["dpo/reward_margin"] == pytest.approx(0.0, abs=1e-5)
  assert steps[-1]["dpo/reward_margin"] > 0  # chosen pulled above rejected
  assert summary["rl_steps"] == 1
  # An SFT stage without the offline stage is not this run's cold start.
  config = _config(1)
  config.offline.dpo_steps = 3
  config.init_from = str(sft_stage[0])
  with pytest.raises(loop.WarmStartError, match="config.offline differs"):
    loop.setup(config, str(tmp_path / "warm"))


def test_offline_dpo_without_pairs_is_a_named_error(tmp_path):
  # After 3 smoke SFT steps every move is malformed: all returns tie.
  config = _config(0)
  config.offline.dpo_steps = 1
  with pytest.raises(loop.OfflineError, match="0 preference pairs"):
    loop.train(config, str(tmp_path))


def test_rl_trains_the_distribution_the_rollouts_sample(tmp_path):
  from agentic_rl.rollout import RolloutConfig

  assert loop.rl_temperature(RolloutConfig(temperature=0.7)) == 0.7
  assert loop.rl_temperature(RolloutConfig(temperature=0.0)) == 1.0  # greedy
  for bad in ({"top_k": 5}, {"top_p": 0.9}):
    with pytest.raises(ValueError, match="truncated"):
      loop.rl_temperature(RolloutConfig(**bad))
  config = _config(1)
  config.distill = {"teacher": "/nowhere", "kd_coeff": 0.0}
  with pytest.raises(losses.LossConfigError, match="kd_coeff"):
    loop.setup(config, str(tmp_path))


def test_sft_demos_spread_over_the_configured_difficulties(tmp_path):
  config = sokoban.get_config("gigpo,smoke,curriculum")  # difficulties 0, 1
  train = loop.task_pool(config).split("train")
  first = loop.sft_demo_tasks(train, config.sft)  # the default: a prefix
  assert [t.id for t in first] == [t.id for t in train][: config.sft.num_demos]
  assert {t.difficulty for t in first} == {0}
  config.sft.demo_difficulties = (0, 1)
  mixed = loop.sft_demo_tasks(train, config.sft)
  half = config.sft.num_demos // 2
  assert [t.difficulty for t in mixed] == [0] * half + [1] * half
  assert [t.id for t in mixed[:half]] == [t.id for t in first[:half]]
  # A difficulty the pool lacks stops the run before any work; so does
  # asking for more demos than the pool holds (not a shorter demo set).
  config.sft.demo_difficulties = (0, 3)
  with pytest.raises(pool_lib.StratifyError, match="difficulty 3"):
    loop.setup(config, str(tmp_path))
  config.sft.demo_difficulties = ()
  config.sft.num_demos = len(train) + 1
  with pytest.raises(pool_lib.StratifyError, match=f"holds {len(train)} tasks"):
    loop.setup(config, str(tmp_path))
  assert not (tmp_path / "checkpoints").exists()
  config.sft.num_demos = len(train)  # the whole pool is allowed
  assert len(loop.sft_demo_tasks(train, config.sft)) == len(train)
  # A run that takes no demos (no SFT steps) does not check their mix.
  config.sft.steps = 0
  run = loop.setup(config, str(tmp_path))
  assert run.host["phase"] == "sft" and run.host["sft_step"] == 0
  run.writer.close()
  run.checkpointer.close()


def test_curriculum_and_replay_drive_rl_and_resume_exactly(tmp_path):
  """A curriculum over difficulties 0 and 1 (1 locked: never sampled) and
  replay of past rollouts, both checkpointed: a run resumed before its
  last step repeats that step exactly, replayed rows included."""
  config = sokoban.get_config("gigpo,smoke,curriculum,replay")
  config.sft.steps = 0  # RL from the initial policy: no SFT to compile
  config.eval_every = 2  # evaluations at steps 0 and 2 only
  loop.train(config, str(tmp_path))
  rows = _rl_rows(tmp_path)
  episodes = config.rl.tasks_per_step * config.rollout.group_size  # 4
  assert rows[1]["replay/rows"] == 0 and rows[1]["replay/size"] == episodes
  assert rows[2]["replay/rows"] == episodes // 2  # fraction 0.5
  assert rows[2]["replay/size"] == 2 * episodes
  assert rows[2]["replay/policy_lag_mean"] == 1.0  # all from step 1
  for row in rows.values():
    assert row["curriculum/frontier"] == 0.0
    # hold=1: a frontier at the threshold would have promoted at once.
    assert config.curriculum.hold == 1 and row["curriculum/streak"] == 0.0
    assert "curriculum/success_rate/d0" in row
    assert "curriculum/success_rate/d1" not in row
    # The rollouts' own rates: difficulty 1 is locked, so never rolled out.
    assert row["success_rate/d0"] == row["success_rate"]
    assert "success_rate/d1" not in row
  # The held-out tasks hold both difficulties: a rate for each.
  log = read_jsonl(str(tmp_path / "logs" / "metrics.jsonl"))
  evals = [r for r in log if "eval/success_rate" in r]
  assert evals and all(
    "eval/success_rate/d0" in r and "eval/success_rate/d1" in r for r in evals
  )
  # The summary pairs RL with SFT within each difficulty too: the split
  # adds up to the whole, and each side's rate is that difficulty's.
  summary = json.loads((tmp_path / "summary.json").read_text())
  first, last = summary["evals"][0], summary["evals"][-1]
  by = summary["rl_vs_sft_by_difficulty"]
  assert sorted(by) == ["d0", "d1"]
  for d in by:
    assert by[d]["n"] == 2  # eval_counts (2, 2)
    assert by[d]["rate_a"] == first[f"success_rate/{d}"]
    assert by[d]["rate_b"] == last[f"success_rate/{d}"]
  for key in ("n", "both", "only_a", "only_b", "neither"):
    assert by["d0"][key] + by["d1"][key] == summary["rl_vs_sft"][key]
  _, host = _params(tmp_path, config)
  assert host["curriculum"]["episodes"] == 2 * episodes
  assert host["curriculum"]["history"]["1"] == []  # locked, never drawn
  assert host["task_sampler"]["difficulty_weights"] == {"0": 1.0, "1": 0.0}
  assert len(host["replay"]["trajectories"]) == 2 * episodes
  # Killed before step 2's checkpoint: the rerun of step 2 is the same.
  shutil.rmtree(tmp_path / "checkpoints" / "2")
  loop.train(config, str(tmp_path))
  logs = tmp_path / "logs"
  (before,) = [
    r for r in read_jsonl(logs / "metrics.jsonl.stale1") if "loss" in r
  ]
  assert before["step"] == 2  # set aside: logged after the last checkpoint
  assert sorted(_rl_rows(tmp_path)) == [1, 2]  # each step once
  events = event_accumulator.EventAccumulator(str(logs))  # TensorBoard too
  events.Reload()
  assert [e.step for e in events.Scalars("loss")] == [1, 2]
  again = _rl_rows(tmp_path)[2]
  for key in ("loss", "success_rate", "replay/rows", "curriculum/frontier"):
    assert before[key] == again[key], key
  fresh = {"rl_step": 0}
  with pytest.raises(ValueError, match="critic-free"):
    loop.make_replay(sokoban.get_config("ppo,smoke,replay"), fresh)
  bad = sokoban.get_config("gigpo,smoke,replay")
  bad.replay.capcity = 8
  with pytest.raises(ValueError, match="capcity"):
    loop.make_replay(bad, fresh)
  with pytest.raises(ValueError, match="without replay; it cannot start"):
    loop.make_replay(sokoban.get_config("gigpo,smoke,replay"), {"rl_step": 3})


def _group(gid, outcomes, rewards=None):
  task = Task(id=f"t{gid}", family="toy")
  rewards = rewards or outcomes
  return [
    Trajectory(task, gid, [Turn([1], [2], [0.0], reward=r)], outcome=o)
    for o, r in zip(outcomes, rewards, strict=True)
  ]


def test_choose_groups_by_hand():
  a = _group(0, [0.0, 0.0])  # all failed: alike
  b = _group(1, [1.0, 0.0])  # differ
  c = _group(2, [1.0, 1.0], rewards=[1.0, 0.5])  # alike by outcome only
  d = _group(3, [0.0, 1.0])  # differ
  e = _group(4, [1.0])  # one episode: nothing to compare
  groups = [a, b, c, d, e]
  chosen, differ = loop.choose_groups(groups, 3, "outcome")
  # The differing groups first, then the alike ones in the order played.
  assert differ == 2 and [g[0].group_id for g in chosen] == [1, 3, 0]
  chosen, differ = loop.choose_groups(groups, 3, "return")
  assert differ == 3 and [g[0].group_id for g in chosen] == [1, 2, 3]
  chosen, differ = loop.choose_groups(groups, 1, "outcome")
  assert differ == 2 and [g[0].group_id for g in chosen] == [1]
  assert loop.episode_score(c[1], "return") == 0.5


def test_random_groups_draws_distinct_groups_in_played_order():
  groups = [_group(g, [0.0, 1.0]) for g in range(10)]
  picks = []
  for seed in range(5):
    key = jax.random.PRNGKey(seed)
    chosen = loop.random_groups(groups, 3, key)
    ids = [g[0].group_id for g in chosen]
    assert len(set(ids)) == 3 and ids == sorted(ids)
    assert ids == [g[0].group_id for g in loop.random_groups(groups, 3, key)]
    picks.append(tuple(ids))
  assert len(set(picks)) > 1  # the key decides
  assert loop.random_groups(groups[:3], 3, key) == groups[:3]


@pytest.mark.parametrize(
  "section, match",
  [
    ({"max_round": 2}, "unknown dynamic_sampling keys"),
    ({"max_rounds": 0}, "max_rounds must be an int >= 1"),
    ({"max_rounds": -1}, "max_rounds must be an int >= 1"),
    ({"score": "success"}, "expected one of"),
    ({"choose": "best"}, r"choose 'best': expected one of"),
  ],
)
def test_dynamic_sampling_config_errors(section, match):
  config = sokoban.get_config("gigpo,smoke,dynamic")
  config.dynamic_sampling.update(section)
  with pytest.raises(ValueError, match=match):
    loop.dynamic_sampling_config(config)


def test_rollout_placement_is_checked():
  config = sokoban.get_config("gigpo,smoke")
  mesh = shd.make_mesh((2, 1, 4))
  # one process: the samplers stay as they were, whichever placement
  assert loop.sampler_placement(config, mesh) == {}
  config.mesh.rollouts = "replicated"
  assert loop.sampler_placement(config, mesh) == {}
  config.mesh.rollouts = "per_host"
  with pytest.raises(ValueError, match="expected one of"):
    loop.sampler_placement(config, mesh)


def test_dynamic_sampling_config_refuses_a_critic():
  config = sokoban.get_config("ppo,smoke,dynamic")
  with pytest.raises(ValueError, match="'gae' takes its baseline from a"):
    loop.dynamic_sampling_config(config)
  assert loop.dynamic_sampling_config(sokoban.get_config("ppo,smoke")) == {}


def test_dynamic_sampling_plays_rounds_until_groups_differ(tmp_path):
  """From the untrained policy every smoke group fails: each step plays
  all `max_rounds` rounds and trains on as many rows as without the
  section; with one round the run is the run without the section."""

  def run(name, section):
    config = sokoban.get_config("gigpo,smoke")
    config.sft.steps = 0
    config.rl.steps = config.eval_every = 1
    config.dynamic_sampling = section
    loop.train(config, str(tmp_path / name))
    return _rl_rows(tmp_path / name)[1]

  plain = run("plain", {})
  once = run("once", {"max_rounds": 1})
  thrice = run("thrice", {"max_rounds": 3})
  once_random = run("once_random", {"max_rounds": 1, "choose": "random"})
  thrice_random = run("thrice_random", {"max_rounds": 3, "choose": "random"})
  n = 2 * 2  # tasks_per_step x group_size
  assert plain["success_rate"] == 0.0 and plain["episodes"] == n
  assert once["loss"] == plain["loss"] and once["dynamic/rounds"] == 1.0
  assert "dynamic/rounds" not in plain
  assert thrice["dynamic/rounds"] == 3.0 and thrice["episodes"] == 3 * n
  assert thrice["dynamic/differing_groups"] == 0.0
  assert thrice["dynamic/batch_differing"] == 0.0
  # The update's rows: the first round's groups (alike all), as without it.
  assert thrice["loss"] == plain["loss"]
  # Random choice: one round's groups drawn whole are the plain update;
  # three rounds are always played, whatever the groups.
  assert once_random["loss"] == plain["loss"]
  assert thrice_random["dynamic/rounds"] == 3.0
  assert thrice_random["episodes"] == 3 * n
  assert np.isfinite(thrice_random["loss"])


@pytest.mark.parametrize(
  "field, value",
  [
    ("rl.steps", -3),  # before: no RL and no word of it
    ("sft.batch_size", 0),  # before: ZeroDivisionError after the demos
    ("eval_every", 0),  # before: ZeroDivisionError at the first RL step
    ("rl.epochs", 0),
    ("rl.num_microbatches", 0),
    ("checkpoint_keep", 0),
  ],
)
def test_bad_sizes_are_named_errors_before_any_work(field, value, tmp_path):
  config = _config(2)
  section, _, name = field.rpartition(".")
  (config[section] if section else config)[name] = value
  with pytest.raises(loop.ConfigSizeError, match=rf"config\.{field}={value}"):
    loop.setup(config, str(tmp_path / "run"), record=False)
  assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.parametrize(
  "field, value, error, match",
  [
    # Before: a pack error at the first trajectory longer than 128 tokens.
    ("length_buckets", [128], loop.ConfigSizeError, "largest is shorter"),
    # Before: a ZeroDivisionError in the first evaluation, after the SFT.
    ("tasks.eval_counts", [0], loop.ConfigSizeError, "no task to evaluate"),
  ],
)
def test_context_and_held_out_sizes_fail_before_any_work(
  field, value, error, match, tmp_path
):
  config = _config(2)
  section, _, name = field.rpartition(".")
  (config[section] if section else config)[name] = value
  with pytest.raises(error, match=match):
    loop.setup(config, str(tmp_path / "run"), record=False)
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
  "field, value, error, match",
  [
    # Each of these set up and ran before: the typo and the NaNs until the
    # first RL step (a TypeError, or NaN advantages, losses or samples),
    # the NaN threshold and the empty budget for the whole run (nothing
    # ever succeeds).
    ("estimator.gama", 0.9, estimators.EstimatorConfigError, "'gama'"),
    ("estimator.gamma", math.nan, estimators.EstimatorConfigError, "gamma"),
    ("rollout.temperature", math.nan, ValueError, "temperature"),
    ("loss.kl_coef", math.nan, losses.LossConfigError, "kl_coef"),
    (
      "rewards.verifier.success_threshold",
      math.nan,
      rewards.NonFiniteRewardError,
      "success_threshold",
    ),
    ("env.options.max_steps", 0, ValueError, "max_steps"),
    ("sampler.num_samplers", 0, ValueError, "num_samplers"),
  ],
)
def test_bad_settings_are_named_errors_in_setup(
  field, value, error, match, tmp_path
):
  config = _config(2)
  *sections, name = field.split(".")
  where = config
  for section in sections:
    where = where[section]
  where[name] = value
  with pytest.raises(error, match=match):
    loop.setup(config, str(tmp_path / "run"), record=False)


def test_check_config_reads_the_offline_stage_only_when_it_runs():
  """Before, a bad offline setting failed after the cold start (and, for
  the learning rate and DPO's beta, after the stage's sampling too)."""
  config = _config(2)
  config.offline.pair_by = "best"
  config.offline.rollout_temperature = math.nan
  loop.check_config(config)  # the stage is off: unread
  config.offline.dpo_steps = 2
  with pytest.raises(loop.OfflineError, match="pair_by='best'"):
    loop.check_config(config)
  config.offline.pair_by = "return"
  with pytest.raises(ValueError, match="temperature must be a finite"):
    loop.check_config(config)
  config.offline.rollout_temperature = 1.0
  config.offline.beta = math.nan
  with pytest.raises(losses.LossConfigError, match="DPO beta"):
    loop.check_config(config)
  config.offline.beta = 0.1
  config.sft.optimizer.schedule = "cosine"  # spans sft.steps, not DPO's
  loop.check_config(config)
  config.offline.learning_rate = -1.0
  with pytest.raises(ValueError, match="learning_rate"):
    loop.check_config(config)


def test_check_sizes_reads_ints_and_the_offline_stage_only_when_it_runs():
  loop.check_sizes(_config(2))  # every shipped field as it is
  raw = _config(2).to_dict()
  raw["rl"]["steps"] = 2.0  # a config read from JSON: a float is no count
  with pytest.raises(loop.ConfigSizeError, match="rl.steps=2.0"):
    loop.check_sizes(ml_collections.ConfigDict(raw))
  raw["rl"]["steps"] = True
  with pytest.raises(loop.ConfigSizeError, match="rl.steps=True"):
    loop.check_sizes(ml_collections.ConfigDict(raw))
  config = _config(2)
  config.offline.samples_per_task = 1  # unread while offline is off
  loop.check_sizes(config)
  config.offline.dpo_steps = 2
  with pytest.raises(loop.ConfigSizeError, match="samples_per_task=1"):
    loop.check_sizes(config)
  del config["offline"]  # a config without the section
  loop.check_sizes(config)


def test_evaluate_checkpoints_repeats_the_runs_evaluation_per_difficulty(
  tmp_path,
):
  """scripts/evaluate_checkpoints.py on a run whose held-out tasks hold two
  difficulties: it plays as many of each as asked, gets the run's own
  greedy verdicts back for the same checkpoint, and pairs them with the
  run's post-SFT evaluation as the run's summary did, within each
  difficulty too."""
  config = sokoban.get_config("gigpo,smoke,curriculum")
  config.sft.steps = 0
  config.rl.steps = config.eval_every = config.checkpoint_every = 1
  run_dir = tmp_path / "run"
  summary = loop.train(config, str(run_dir))
  out = tmp_path / "eval.json"
  script = pathlib.Path(__file__).parents[2] / "scripts"
  done = subprocess.run(
    [
      sys.executable,
      str(script / "evaluate_checkpoints.py"),
      f"--source={run_dir / 'checkpoints'}",
      "--steps=1",
      "--eval_tasks=2",  # per difficulty, as the run's eval_counts (2, 2)
      f"--against={run_dir / 'summary.json'}:0",
      f"--out={out}",
    ],
    capture_output=True,
    text=True,
    check=True,
  )
  (got,) = json.loads(out.read_text())["results"].values()
  last = summary["evals"][-1]
  assert last["rl_step"] == 1
  assert got["solved"] == last["solved"] and len(got["solved"]) == 4
  for key in ("success_rate", "success_rate/d0", "success_rate/d1"):
    assert got[key] == last[key], key
  (name,) = got["paired"]
  assert got["paired"][name] == summary["rl_vs_sft"]
  assert got["paired_by_difficulty"][name] == summary["rl_vs_sft_by_difficulty"]
  assert "| 1, d1 | 2 |" in done.stdout


def test_a_failing_expert_leaves_an_error_in_the_summary(monkeypatch):
  """The ceiling is computed after training: an expert that raises is
  recorded by name, and the summary is still written."""

  def broken(rollout, tasks):
    raise RuntimeError("solver crashed")

  monkeypatch.setattr(loop, "expert_ceiling", broken)
  run = types.SimpleNamespace(rollout=None, eval_tasks=[])
  assert loop._expert_ceiling(run) == {"error": "RuntimeError: solver crashed"}


def test_expert_ceiling_script_plays_the_expert_within_a_config(tmp_path):
  """scripts/expert_ceiling.py: the share of a config's training levels
  whose optimal solution (A*, kept in each level) fits its turn budget,
  per difficulty, for a config file with overrides and for a run's own
  recorded config."""
  config = sokoban.get_config("gigpo,smoke,curriculum")
  config.rollout.max_turns = 6  # some levels need more moves
  train = loop.task_pool(config).split("train")
  expect = {}
  for d in (0, 1):
    fits = [t.payload["optimal_moves"] <= 6 for t in train if t.difficulty == d]
    expect[f"success_rate/d{d}"] = sum(fits) / len(fits)
  assert 0 < min(expect.values()) and min(expect.values()) < 1
  script = pathlib.Path(__file__).parents[2] / "scripts" / "expert_ceiling.py"
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  (run_dir / "config.json").write_text(config.to_json_best_effort())
  for source in (
    ["--config=configs/sokoban.py:gigpo,smoke,curriculum"]
    + ["--config.rollout.max_turns=6"],
    [f"--run={run_dir}"],
  ):
    out = tmp_path / "ceiling.json"
    done = subprocess.run(
      [sys.executable, str(script), *source, "--split=train", f"--out={out}"],
      capture_output=True,
      text=True,
      check=True,
      cwd=pathlib.Path(__file__).parents[2],
    )
    got = json.loads(out.read_text())
    assert got["tasks"] == len(train) == 16
    for key, rate in expect.items():
      assert got[key] == rate, key
    assert got["success_rate"] == np.mean(
      [t.payload["optimal_moves"] <= 6 for t in train]
    )
    row = f"| train | 16 | d1 | {expect['success_rate/d1']:.4f} |"
    assert row in done.stdout


def test_a_run_checkpointed_by_optimizer_step_is_not_resumed(tmp_path):
  """Run checkpoints were keyed by optimizer step before they were keyed by
  RL step; resuming such a run would lose its new checkpoints."""
  config = _config(1)
  run = loop.setup(config, str(tmp_path))
  try:  # as an old run after 3 SFT updates
    run.checkpointer.save(run.state, run.host, step=3, force=True)
  finally:
    run.checkpointer.close()
    run.writer.close()
  with pytest.raises(ValueError, match="keyed 3 but holds RL step 0"):
    loop.setup(config, str(tmp_path))


def test_sum_norm_loss_divides_by_one_length_in_every_bucket():
  """Dr.GRPO's constant denominator: the same rows padded into a longer
  length bucket give the same loss with the run's default norm_length."""
  config = _config(1)
  assert loop.rl_loss_config(config).norm_length is None  # token-mean run
  config.loss.agg = "seq-mean-token-sum-norm"
  loss = loop.rl_loss_config(config)
  assert loss.norm_length == max(config.length_buckets) == 512
  values = np.random.default_rng(0).normal(size=(3, 128)).astype(np.float32)
  mask = np.zeros((3, 128), np.float32)
  mask[:, :100] = 1.0
  wide = [np.pad(a, ((0, 0), (0, 128))) for a in (values, mask)]
  short, long = (
    float(losses.aggregate(v, m, loss.agg, loss.norm_length))
    for v, m in ((values, mask), wide)
  )
  assert short == pytest.approx(long, rel=1e-6)
  # The aggregate's own default (the padded length, 256) doubles it.
  padded = float(losses.aggregate(*wide, loss.agg))
  assert padded == pytest.approx(long * 512 / 256, rel=1e-6)
  config.loss.norm_length = 100
  assert loop.rl_loss_config(config).norm_length == 100


@pytest.mark.parametrize(
  "env", ["sokoban", "frozenlake", "search_qa", "flights", "code_repair"]
)
def test_every_switch_combination_gives_a_consistent_task_spec(env):
  """The switches of configs/sokoban.py (inherited by the other envs) may
  be combined: `quick,curriculum` once kept quick's one eval count for the
  curriculum's three difficulties (a PoolSpecError at setup)."""
  import importlib
  import itertools

  module = importlib.import_module(f"configs.{env}")
  switches = ("smoke", "quick", "curriculum", "replay")
  for k in range(len(switches) + 1):
    for chosen in itertools.combinations(switches, k):
      config = module.get_config(",".join(("gigpo", *chosen)))
      tasks = config.tasks
      n = len(tasks.difficulties)
      assert len(tasks.train_counts) == n == len(tasks.eval_counts), chosen
      if "curriculum" in chosen:
        assert n >= 2 and config.curriculum, chosen
        # Every difficulty the curriculum may unlock builds (2 tasks each).
        tasks.train_counts = tasks.eval_counts = (2,) * n
        pool = loop.task_pool(config)
        assert len(pool.split("test")) == 2 * n, chosen
