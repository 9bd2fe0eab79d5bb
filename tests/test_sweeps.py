"""Sweep expansion, launch commands, and skip/resume on a fake tiny sweep."""

import dataclasses
import itertools
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import ml_collections
import pytest

from agentic_rl import losses, machine, rewards, sweeps
from agentic_rl.train import loop

REPO = pathlib.Path(__file__).resolve().parents[1]
ABLATION = "configs/ablations/credit_assignment.py"

# A stand-in for agentic_rl.main with the same flags: it "trains" by writing
# a checkpoint marker, crashes once if asked to, and on a launch that finds
# the marker it resumes and writes summary.json (as the loop does).
FAKE_MAIN = textwrap.dedent(
  """
  import json, os, pathlib, sys, time
  args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
  args["cache_env"] = os.environ.get("JAX_COMPILATION_CACHE_DIR", "")
  args["probe_env"] = os.environ.get("AGENTIC_RL_NUMERICS_PROBE", "")
  wd = pathlib.Path(args["workdir"])
  wd.mkdir(parents=True, exist_ok=True)
  with open(wd / "launches.txt", "a") as f:
    f.write(json.dumps(args) + "\\n")
  resumed = (wd / "ckpt").exists()
  if (wd / "wait_for").exists():  # hold until another run has launched
    other = pathlib.Path((wd / "wait_for").read_text())
    deadline = time.time() + 30
    while not other.exists():
      if time.time() > deadline:
        sys.exit(4)
      time.sleep(0.05)
  (wd / "ckpt").write_text("1")
  if (wd / "crash_once").exists() and not resumed:
    held = b"x" * (256 << 20)  # the crashing launch peaks at 256 MiB
    time.sleep(1.0)  # while the sweep reads it
    sys.exit(3)
  (wd / "checkpoints" / "1").mkdir(parents=True, exist_ok=True)
  (wd / "summary.json").write_text(json.dumps({"resumed": resumed}))
  """
)


def _tiny_sweep(**changes) -> ml_collections.ConfigDict:
  sweep = ml_collections.ConfigDict(
    {
      "name": "tiny",
      "envs": {"sokoban": "configs/sokoban.py"},
      "estimators": ("grpo", "gigpo"),
      "seeds": (0, 1),
      "smoke": True,
      "baseline": "grpo",
      "overrides": {"rl": {"steps": 1}},
      "checks": (),
    }
  )
  sweep.update(changes)
  return sweep


_CHECK = {
  "name": "c",
  "env": "sokoban",
  "estimator": "gigpo",
  "seed": 0,
  "from_shared_sft": True,
}


def test_full_sweep_is_the_paired_grid():
  config = sweeps.load_config(ABLATION)
  everything = sweeps.expand(config.sweep)
  stages = [r for r in everything if r.kind == "sft"]
  runs = [r for r in everything if r.kind == "grid"]
  assert everything == stages + runs
  assert len(runs) == 3 * 7 * 3 and len(stages) == 3 * 3
  assert {r.env for r in runs} == {"sokoban", "frozenlake", "search_qa"}
  assert {r.estimator for r in runs} >= {
    "grpo",
    "dr_grpo",
    "rloo",
    "gigpo",
    "gigpo_std",
    "turn_discounted",
    "prm_weighted",
  }
  assert {r.seed for r in runs} == {0, 1, 2}
  assert "frozenlake/gigpo_std/seed2" in {r.name for r in runs}
  assert all("smoke" not in r.config_arg for r in everything)
  # Seed-major within an env: every prefix holds whole paired replicates.
  assert [r.seed for r in runs[:7]] == [0] * 7
  assert len({r.estimator for r in runs[:7]}) == 7
  # Each grid run starts from its (env, seed) SFT stage, which runs SFT only.
  for r in runs:
    assert r.init_from_run == sweeps.sft_name(r.env, r.seed)
  for r in stages:
    assert dict(r.overrides)["rl.steps"] == "0"
    assert dict(r.overrides)["tasks.eval_counts"] == "(128,)"
  # Deterministic: the same config expands to the same runs, in order.
  assert everything == sweeps.expand(sweeps.load_config(ABLATION).sweep)


def test_smoke_sweep_has_a_sharded_check():
  runs = sweeps.expand(sweeps.load_config(ABLATION + ":smoke").sweep)
  grid = [r for r in runs if r.kind == "grid"]
  (check,) = [r for r in runs if r.kind == "check"]
  assert len(grid) == 2 * 2 * 2
  assert all(r.config_arg.endswith(",smoke") for r in runs)
  assert dict(check.env_vars)["XLA_FLAGS"].endswith("device_count=8")
  assert dict(check.overrides)["mesh.shape"] == "(2,2,2)"
  line = sweeps.shell_command(check, "runs/x")
  assert line.startswith("XLA_FLAGS=--xla_force_host_platform_device_count=8 ")
  assert "'--config.mesh.shape=(2,2,2)'" in line
  # RL on the mesh starts from seed 0's one-device SFT stage.
  assert check.init_from_run == "sokoban/sft/seed0"
  assert "--config.init_from=runs/x/sokoban/sft/seed0" in line


@pytest.mark.parametrize("env", ["sokoban", "frozenlake", "search_qa"])
def test_runs_of_one_seed_differ_only_in_the_estimator(env):
  # The paired design: a seed's runs share every field but `estimator`
  # (so the same init, task order and environment seeds).
  runs = [
    r
    for r in sweeps.expand(sweeps.load_config(ABLATION).sweep)
    if r.env == env and r.seed == 1 and r.kind == "grid"
  ]
  configs = []
  for r in runs:
    c = sweeps.load_config(f"{r.config_file}:{r.config_arg}").to_dict()
    c["seed"] = int(dict(r.overrides)["seed"])
    configs.append(c)
  estimators = {json.dumps(c.pop("estimator"), sort_keys=True) for c in configs}
  assert len(estimators) == len(runs)
  assert all(c == configs[0] for c in configs)
  assert configs[0]["seed"] == 1
  assert len({r.overrides for r in runs}) == 1  # same sweep overrides
  assert len({r.init_from_run for r in runs}) == 1  # same SFT stage


def _assert_credit_assignment_runs_plus(runs, changes: dict) -> None:
  """Each run is the credit-assignment run of its name (same config, arg,
  SFT stage) with exactly `changes` (flattened overrides) added."""
  ca = {r.name: r for r in sweeps.expand(sweeps.load_config(ABLATION).sweep)}
  for r in runs:
    partner = ca[r.name]  # same env/estimator/seed (or SFT stage) name
    assert (r.config_file, r.config_arg) == (
      partner.config_file,
      partner.config_arg,
    )
    assert r.init_from_run == partner.init_from_run
    ours = dict(r.overrides)
    assert {k: ours.pop(k, None) for k in changes} == changes
    assert ours == dict(partner.overrides)  # nothing else differs


def test_shaping_sweep_pairs_with_the_credit_assignment_search_qa_arm():
  shaping = sweeps.expand(
    sweeps.load_config("configs/ablations/search_qa_shaping.py").sweep
  )
  assert len(shaping) == 3 + 2 * 3
  # The shaping weight is the only difference.
  _assert_credit_assignment_runs_plus(
    shaping, {"rewards.verifier.weights.progress": "0.0"}
  )
  # An SFT stage's identity leaves the reward config out, so the
  # credit-assignment stages can be linked in and warm-started from.
  assert not any(f.startswith("rewards") for f in loop.WARM_START_FIELDS)
  qa = sweeps.load_config("configs/search_qa.py:grpo")
  assert rewards.from_config(qa.rewards).verifier_weights["progress"] == 1.0
  qa.rewards.verifier.weights.progress = 0.0  # what the sweep's flag sets
  assert rewards.from_config(qa.rewards).verifier_weights["progress"] == 0.0


def test_reward_input_sweep_pairs_with_the_sokoban_arm():
  runs = sweeps.expand(
    sweeps.load_config("configs/ablations/sokoban_reward_input.py").sweep
  )
  ca = {r.name: r for r in sweeps.expand(sweeps.load_config(ABLATION).sweep)}
  assert len(runs) == 3 + 3 * 3
  for r in runs:
    if r.estimator == "grpo_return":
      partner = ca[r.name.replace("grpo_return", "grpo")]
      assert r.config_arg == "grpo_return" and partner.config_arg == "grpo"
    else:  # the same command as the credit-assignment run of that name
      partner = ca[r.name]
      assert r.config_arg == partner.config_arg
    assert r.overrides == partner.overrides
    assert r.init_from_run == partner.init_from_run
  est = sweeps.load_config("configs/sokoban.py:grpo_return").estimator
  assert est.to_dict() == {"name": "grpo", "score": "return"}
  # seeds=6 adds seeds 3-5 and leaves the runs of seeds 0-2 as they were.
  six = {
    r.name: r
    for r in sweeps.expand(
      sweeps.load_config(
        "configs/ablations/sokoban_reward_input.py:seeds=6"
      ).sweep
    )
  }
  assert len(six) == 6 + 6 * 3
  for r in runs:
    assert six[r.name] == r
  with pytest.raises(ValueError, match="seeds=N"):
    sweeps.load_config("configs/ablations/sokoban_reward_input.py:seeds=0")


def test_horizon_sweep_is_the_frozenlake_arm_with_30_moves():
  runs = sweeps.expand(
    sweeps.load_config("configs/ablations/frozenlake_horizon.py").sweep
  )
  assert len(runs) == 3 + 2 * 3
  horizon = {
    "env.options.max_steps": "30",
    "rollout.max_turns": "30",
    "rollout.max_total_tokens": "1024",
    "sampler.max_len": "1024",
    "length_buckets": "(128,192,256,320,384,512,640,768,896,1024)",
  }
  _assert_credit_assignment_runs_plus(runs, horizon)
  lake = sweeps.load_config("configs/frozenlake.py:grpo")
  assert lake.env.options.max_steps == lake.rollout.max_turns == 10
  five = sweeps.expand(
    sweeps.load_config("configs/ablations/frozenlake_horizon.py:seeds=5").sweep
  )
  assert len(five) == 5 + 2 * 5 and set(runs) <= set(five)  # extends in place
  with pytest.raises(ValueError, match="seeds=N"):
    sweeps.load_config("configs/ablations/frozenlake_horizon.py:seeds=x")


def test_critic_sweep_reruns_only_ppo_on_the_horizon_grid():
  def runs(config):
    return {r.name: r for r in sweeps.expand(sweeps.load_config(config).sweep)}

  horizon = runs("configs/ablations/frozenlake_horizon.py:seeds=5")
  critic = runs("configs/ablations/frozenlake_critic.py:seeds=5")
  assert len(critic) == 5 + 3 * 5
  for name, r in critic.items():
    if r.estimator == "ppo":  # the grpo run's command with the ppo variant
      grpo = horizon[name.replace("ppo", "grpo")]
      assert r.config_arg == "ppo"
      assert r.overrides == grpo.overrides
      assert r.init_from_run == grpo.init_from_run
    else:  # copied from frozenlake_horizon's root, so the same runs
      assert r == horizon[name]
  ppo = sweeps.load_config("configs/frozenlake.py:ppo")
  assert ppo.estimator.name == "gae" and ppo.critic.value_scale == 1.0


def test_env_configs():
  lake = sweeps.load_config("configs/frozenlake.py:gigpo,smoke")
  assert lake.env.name == "frozenlake" and lake.env.options.slippery
  flights = sweeps.load_config("configs/flights.py:rloo")
  assert flights.env.name == "flights"
  assert flights.rollout.protocol == "tool_call"
  assert flights.estimator.name == "rloo"
  qa = sweeps.load_config("configs/search_qa.py:prm_weighted")
  assert qa.env.name == "search_qa" and qa.rollout.protocol == "tags"
  assert qa.estimator.name == "prm_weighted"
  assert "env:progress" in qa.rewards.process.signals
  assert qa.sampler.max_len == qa.length_buckets[-1]


@pytest.mark.parametrize(
  ("arg", "expert"),
  [
    ("gigpo", "oracle"),
    ("gigpo,tests_first", "tests_first"),
    ("read_all",) * 2,
  ],
)
def test_code_repair_config_fits_its_expert_episodes(arg, expert):
  # The config's token budgets come from the environment: every expert
  # episode at difficulties 0-2, framed and tokenized as the rollout does,
  # fits the turn, per-turn and context budgets, and ends in success.
  from agentic_rl.envs import code_repair
  from agentic_rl.models.tokenizer import build_env_tokenizer
  from agentic_rl.rollout import RolloutConfig
  from agentic_rl.rollout.demos import expert_trajectory
  from agentic_rl.types import Termination

  config = sweeps.load_config(f"configs/code_repair.py:{arg}")
  assert config.env.name == "code_repair"
  assert config.env.options.expert == expert
  assert config.rollout.protocol == "tool_call"
  assert config.sampler.max_len == config.length_buckets[-1]
  assert config.rollout.max_total_tokens <= config.sampler.max_len
  rollout = RolloutConfig.from_mapping(config.rollout)
  tokenizer = build_env_tokenizer()
  contexts, actions = [], []
  for difficulty, edit_tool in itertools.product(
    (0, 1, 2), code_repair.EDIT_TOOLS
  ):
    for seed in range(4):
      task = code_repair.generate_task(seed, difficulty)
      options = {**config.env.options, "edit_tool": edit_tool}
      env = code_repair.CodeRepairEnv(**options)  # it closes env
      traj = expert_trajectory(task, env, tokenizer, rollout)
      assert traj.termination == Termination.DONE
      assert traj.turns[-1].reward_components == {"success": 1.0}
      contexts.append(
        sum(len(t.obs_tokens) + len(t.action_tokens) for t in traj.turns)
      )
      actions += [len(t.action_tokens) for t in traj.turns]
  assert max(actions) < rollout.max_new_tokens
  assert max(contexts) <= rollout.max_total_tokens
  # Not loose by more than a third: contexts cost quadratic compute.
  assert max(contexts) > 0.66 * rollout.max_total_tokens


def test_commands_and_overrides():
  (run, *_) = sweeps.expand(_tiny_sweep(), mesh=(8, 1, 1))
  argv = sweeps.command(run, "/r", python="py")
  assert argv[:5] == [
    "py",
    "-m",
    "agentic_rl.main",
    "--config=configs/sokoban.py:grpo,smoke",
    "--workdir=/r/sokoban/grpo/seed0",
  ]
  assert set(argv[5:]) == {
    "--config.mesh.shape=(8,1,1)",
    "--config.rl.steps=1",
    "--config.seed=0",
  }
  line = sweeps.shell_command(run, "/r", distributed=True)
  assert line.startswith(f"{sweeps.DISTRIBUTED_ENV}=1 python -m")
  assert sweeps.override_value(True) == "true"
  assert sweeps.override_value((4,)) == "(4,)"
  assert sweeps.parse_mesh("2, 2,2") == (2, 2, 2)


@pytest.mark.parametrize(
  "changes, match",
  [
    ({"seeds": (0, 0)}, "duplicates"),
    ({"seeds": ("0",)}, "ints"),
    ({"estimators": ()}, "non-empty"),
    ({"baseline": "rloo"}, "not swept"),
    ({"envs": {"sokoban": "configs/nope.py"}}, "no such file"),
    ({"checks": ({"name": "c", "env": "atari"},)}, "lacks|unknown env"),
    ({"checks": (_CHECK,)}, "runs none for seed 0"),  # shared_sft off
    ({"shared_sft": True, "checks": ({**_CHECK, "seed": 7},)}, "seed 7"),
    ({"arms": {"gigpo": {"overrides": {}}}}, "arms"),
    ({"arms": {"gigpo": {"variant": "gigpo", "loss": {}}}}, "arms"),
    ({"arms": {"a/b": {"variant": "gigpo"}}}, "arms"),
  ],
)
def test_bad_sweeps_are_named_errors(changes, match):
  with pytest.raises(sweeps.SweepSpecError, match=match):
    sweeps.expand(_tiny_sweep(**changes))


def test_an_arm_is_a_variant_with_its_own_overrides():
  sweep = _tiny_sweep(
    estimators=("grpo", "gigpo", "gigpo_turn"),
    arms={
      "gigpo_turn": {
        "variant": "gigpo",
        "overrides": {"loss": {"ratio_level": "turn"}, "rl": {"steps": 2}},
      }
    },
    shared_sft=True,
  )
  runs = {r.name: r for r in sweeps.expand(sweep)}
  arm, gigpo = runs["sokoban/gigpo_turn/seed1"], runs["sokoban/gigpo/seed1"]
  assert arm.estimator == "gigpo_turn" and arm.config_arg == "gigpo,smoke"
  assert arm.init_from_run == gigpo.init_from_run == "sokoban/sft/seed1"
  # The arm's overrides join the sweep's and win where both set a field.
  assert dict(arm.overrides) == {
    **dict(gigpo.overrides),
    "loss.ratio_level": "turn",
    "rl.steps": "2",
  }
  assert dict(gigpo.overrides)["rl.steps"] == "1"
  argv = sweeps.command(arm, "/r", python="py")
  assert "--config=configs/sokoban.py:gigpo,smoke" in argv
  assert "--config.loss.ratio_level=turn" in argv
  assert "--workdir=/r/sokoban/gigpo_turn/seed1" in argv
  # The command is one the config accepts.
  config = sweeps.load_config("configs/sokoban.py:gigpo,smoke")
  config.loss.ratio_level = "turn"
  assert losses.PolicyLossConfig(**config.loss).ratio_level == "turn"


def test_check_runs_names_every_run_whose_config_setup_would_refuse():
  """A bad setting in one arm stops the sweep before any run is launched
  (before, the runs ahead of it trained first, and it failed at setup)."""
  sweep = _tiny_sweep(
    estimators=("grpo", "gigpo", "gigpo_far"),
    arms={
      "gigpo_far": {
        "variant": "gigpo",
        "overrides": {"estimator": {"gamma": 1.5}},
      }
    },
  )
  runs = sweeps.expand(sweep)
  good = [r for r in runs if r.estimator != "gigpo_far"]
  sweeps.check_runs(good)
  with pytest.raises(sweeps.SweepSpecError, match="2 of 6 runs") as info:
    sweeps.check_runs(runs)
  message = str(info.value)
  for seed in (0, 1):
    assert f"sokoban/gigpo_far/seed{seed}: EstimatorConfigError" in message
  assert "gamma must be a finite number in [0.0, 1.0], got 1.5" in message
  assert "sokoban/gigpo/seed0" not in message


def _runs_by_name(config_path: str) -> dict:
  return {
    r.name: r for r in sweeps.expand(sweeps.load_config(config_path).sweep)
  }


def test_ratio_level_sweep_differs_from_gigpo_only_in_the_loss():
  runs = _runs_by_name("configs/ablations/sokoban_ratio_level.py")
  assert len(runs) == 3 + 3 * 4
  for seed in (0, 1, 2):
    base = dict(runs[f"sokoban/gigpo/seed{seed}"].overrides)
    assert base["rl.minibatch_size"] == "16" and base["rl.steps"] == "30"
    for arm, level in (
      ("gigpo_turn", "turn"),
      ("gigpo_sequence", "sequence"),
      ("gigpo_turn_tight", "turn"),
    ):
      run = runs[f"sokoban/{arm}/seed{seed}"]
      assert run.config_arg == "gigpo"
      extra = set(dict(run.overrides).items()) - set(base.items())
      assert ("loss.ratio_level", level) in extra
      assert {k for k, _ in extra} <= {
        "loss.ratio_level",
        "loss.clip_low",
        "loss.clip_high",
      }


def test_bad_inputs_are_named_errors():
  with pytest.raises(sweeps.SweepSpecError, match="no `sweep`"):
    sweeps.expand(None)
  with pytest.raises(sweeps.SweepSpecError, match="lacks"):
    sweeps.expand({"name": "x"})
  with pytest.raises(sweeps.SweepSpecError, match="not found"):
    sweeps.load_config("configs/missing.py:smoke")
  for bad in ("2,2", "a,b,c", "0,1,1"):
    with pytest.raises(sweeps.SweepSpecError, match="--mesh"):
      sweeps.parse_mesh(bad)
  with pytest.raises(ValueError, match="smoke"):
    sweeps.load_config(ABLATION + ":gigpo")


def test_fake_sweep_skips_finished_and_resumes_interrupted(
  tmp_path, monkeypatch
):
  (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
  monkeypatch.setenv("PYTHONPATH", str(tmp_path))
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
  root = tmp_path / "runs"
  sweep = _tiny_sweep()
  runs = sweeps.expand(sweep)
  assert [r.name for r in runs] == [
    "sokoban/grpo/seed0",
    "sokoban/gigpo/seed0",
    "sokoban/grpo/seed1",
    "sokoban/gigpo/seed1",
  ]
  sweeps.write_manifest(root, sweep, runs, "tiny.py")
  # One run crashes on its first launch; one finished before this sweep.
  crashing, done = runs[1], runs[2]
  sweeps.workdir(root, crashing).mkdir(parents=True)
  (sweeps.workdir(root, crashing) / "crash_once").write_text("")
  sweeps.workdir(root, done).mkdir(parents=True)
  (sweeps.workdir(root, done) / "summary.json").write_text("{}")

  first = sweeps.run_sweep(runs, root, workers=2, module="fake_main")
  status = {r.name: r.status for r in first}
  assert status == {
    runs[0].name: "ok",
    crashing.name: "failed",
    done.name: "skipped",
    runs[3].name: "ok",
  }
  assert first[1].returncode == 3

  second = sweeps.run_sweep(
    runs,
    root,
    workers=1,
    module="fake_main",
    compilation_cache="",
    extra_env={machine.PROBE_ENV: "handed"},
  )
  assert [r.status for r in second] == ["skipped", "ok", "skipped", "skipped"]
  resumed = json.loads(
    (sweeps.workdir(root, crashing) / "summary.json").read_text()
  )
  assert resumed == {"resumed": True}
  launches = (sweeps.workdir(root, crashing) / "launches.txt").read_text()
  assert len(launches.splitlines()) == 2
  first_args = json.loads(launches.splitlines()[0])
  # Local runs share <root>/jax_cache unless told otherwise ("" = off).
  assert first_args["cache_env"] == str(root / "jax_cache")
  assert json.loads(launches.splitlines()[1])["cache_env"] == ""
  # What the caller hands every run (scripts/sweep.py: its probe) arrives.
  assert first_args["probe_env"] == ""
  assert json.loads(launches.splitlines()[1])["probe_env"] == "handed"
  assert first_args["config.seed"] == "0"
  assert first_args["config.rl.steps"] == "1"
  timing = json.loads(
    (sweeps.workdir(root, crashing) / "sweep_timing.json").read_text()
  )
  assert timing["returncode"] == 0 and timing["seconds"] > 0
  # Peak resident memory, the largest of its launches (the crashed one).
  assert timing["peak_rss_mib"] >= 256
  other = json.loads(
    (sweeps.workdir(root, runs[0]) / "sweep_timing.json").read_text()
  )
  assert other["peak_rss_mib"] < 128
  manifest = json.loads((root / "sweep.json").read_text())
  assert [r["name"] for r in manifest["runs"]] == [r.name for r in runs]
  assert manifest["baseline"] == "grpo"


def test_a_probe_that_cannot_be_measured_leaves_each_run_its_own(
  tmp_path, capsys
):
  # The probe's child exits 1, is no program, or prints no probe: the
  # sweep says so and hands nothing (each run then measures its own).
  for python in ("false", str(tmp_path / "missing"), "echo"):
    assert sweeps.probe_environ(tmp_path, python=python) == {}, python
    err = capsys.readouterr().err
    assert "numerics probe not measured for the runs" in err, python


def test_shared_sft_stages_run_first_and_gate_their_runs(tmp_path, monkeypatch):
  (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
  monkeypatch.setenv("PYTHONPATH", str(tmp_path))
  root = tmp_path / "runs"
  runs = sweeps.expand(_tiny_sweep(shared_sft=True))
  names = [r.name for r in runs]
  assert names[:2] == ["sokoban/sft/seed0", "sokoban/sft/seed1"]
  seed0, seed1 = runs[:2]
  assert dict(seed0.overrides)["rl.steps"] == "0"
  assert sweeps.command(runs[2], "/r")[-1] == (
    "--config.init_from=/r/sokoban/sft/seed0"
  )
  # Seed 1's SFT stage crashes: its runs are not launched, seed 0's are.
  sweeps.workdir(root, seed1).mkdir(parents=True)
  (sweeps.workdir(root, seed1) / "crash_once").write_text("")
  results = sweeps.run_sweep(runs, root, workers=2, module="fake_main")
  status = {r.name: r.status for r in results}
  assert status == {
    "sokoban/sft/seed0": "ok",
    "sokoban/sft/seed1": "failed",
    "sokoban/grpo/seed0": "ok",
    "sokoban/gigpo/seed0": "ok",
    "sokoban/grpo/seed1": "failed",
    "sokoban/gigpo/seed1": "failed",
  }
  assert not sweeps.workdir(root, runs[4]).exists()  # never launched
  launched = json.loads(
    (sweeps.workdir(root, runs[2]) / "launches.txt").read_text()
  )
  assert launched["config.init_from"] == str(root / "sokoban/sft/seed0")
  # A finished stage that lost its checkpoint is not finished: the runs
  # after it need the checkpoint, so the stage runs again.
  checkpoint = sweeps.workdir(root, seed0) / "checkpoints" / "1"
  assert sweeps.is_finished(root, seed0)
  checkpoint.rmdir()
  assert not sweeps.is_finished(root, seed0)
  assert sweeps.is_finished(root, runs[2])  # grid runs need no checkpoint
  # But seed 0's runs have all finished, so nothing needs that rerun (a
  # committed root extended with more seeds): only seed 1 is left to run.
  left = ["sokoban/sft/seed1", "sokoban/grpo/seed1", "sokoban/gigpo/seed1"]
  assert [r.name for r in sweeps.unfinished(runs, root)] == left
  again = sweeps.run_sweep(runs, root, workers=2, module="fake_main")
  skipped, ok = "skipped", "ok"
  assert [r.status for r in again] == [skipped, ok, skipped, skipped, ok, ok]
  assert not checkpoint.exists()  # seed 0's stage was not rerun
  # A run of seed 0 left to run brings its stage back; a stage picked
  # alone (no run of the list starts from it) runs as asked.
  (sweeps.workdir(root, runs[3]) / "summary.json").unlink()
  assert [r.name for r in sweeps.unfinished(runs, root)] == [
    "sokoban/sft/seed0",
    "sokoban/gigpo/seed0",
  ]
  assert sweeps.unfinished([seed0], root) == [seed0]
  # That stage then trains again from scratch, so its timing starts over
  # (an interrupted run, resumed, adds its launches up instead).
  timing = sweeps.workdir(root, seed0) / "sweep_timing.json"
  timing.write_text(json.dumps({"seconds": 1000.0, "returncode": 0}))
  again = sweeps.run_sweep(runs, root, workers=2, module="fake_main")
  assert [r.status for r in again[:4]] == [ok, skipped, skipped, ok]
  assert json.loads(timing.read_text())["seconds"] < 1000
  # --only picks runs by glob and brings their SFT stage along.
  picked = sweeps.select(runs, ["*/gigpo/seed1"])
  assert [r.name for r in picked] == [
    "sokoban/sft/seed1",
    "sokoban/gigpo/seed1",
  ]
  with pytest.raises(sweeps.SweepSpecError, match="matches no run"):
    sweeps.select(runs, ["frozenlake/*"])


def test_a_run_starts_once_its_own_sft_stage_is_done(tmp_path, monkeypatch):
  (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
  monkeypatch.setenv("PYTHONPATH", str(tmp_path))
  root = tmp_path / "runs"
  runs = sweeps.expand(_tiny_sweep(shared_sft=True))
  sft0, sft1, grpo0 = runs[0], runs[1], runs[2]
  assert (grpo0.name, grpo0.init_from_run) == ("sokoban/grpo/seed0", sft0.name)
  # Seed 1's stage finishes only after seed 0's first run has launched,
  # which it can only do while that stage is still running (2 workers).
  sweeps.workdir(root, sft1).mkdir(parents=True)
  (sweeps.workdir(root, sft1) / "wait_for").write_text(
    str(sweeps.workdir(root, grpo0) / "launches.txt")
  )
  order = []
  results = sweeps.run_sweep(
    runs, root, workers=2, module="fake_main", on_result=order.append
  )
  # Had seed 0's runs waited for every stage, seed 1's would have given up
  # after 30 s (exit 4) and its runs would not have launched.
  assert [r.status for r in results] == ["ok"] * 6
  assert order[0].name == sft0.name
  # Runs that wait on each other would wait forever: a named error instead.
  a = dataclasses.replace(grpo0, init_from_run=sft0.name)
  b = dataclasses.replace(sft0, init_from_run=grpo0.name)
  with pytest.raises(sweeps.SweepSpecError, match="never run"):
    sweeps.run_sweep([a, b], tmp_path / "cycle", module="fake_main")


def test_script_prints_one_command_per_unfinished_run(tmp_path):
  root = tmp_path / "ca"
  (root / "sokoban/gigpo/seed0").mkdir(parents=True)
  (root / "sokoban/gigpo/seed0/summary.json").write_text("{}")
  out = subprocess.run(
    [
      sys.executable,
      "scripts/sweep.py",
      f"--config={ABLATION}:smoke",
      f"--root={root}",
      "--print_commands",
      "--distributed",
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    check=True,
    env={**os.environ, "JAX_PLATFORMS": "cpu"},
  )
  lines = out.stdout.strip().splitlines()
  # 8 grid runs (one finished) + 4 shared SFT stages + the sharded check.
  assert len(lines) == 2 * 2 * 2 - 1 + 2 * 2 + 1
  assert all("/sft/seed" in line for line in lines[:4])  # stages first
  assert all("--config.init_from=" in line for line in lines[4:])
  assert all(sweeps.DISTRIBUTED_ENV + "=1" in line for line in lines)
  assert not any("sokoban/gigpo/seed0 " in line for line in lines)
  assert not (root / "sweep.json").exists()  # printing launches nothing


# On the worker of tests/train/test_loop.py's smoke run, before it: one
# compiles the Sokoban smoke programs and the other loads them, instead of
# both compiling them at once on two workers.
@pytest.mark.xdist_group("sokoban_smoke")
def test_ci_sweep_and_report_end_to_end(tmp_path):
  # Real runs: an SFT stage and GRPO from it on smoke Sokoban, and the
  # sharded-path check (GiGPO from the same stage on 8 simulated devices
  # with mesh (2, 2, 2)); then the report.
  root, out = tmp_path / "ca_ci", tmp_path / "report"
  # The runs inherit the test session's XLA flags (8 simulated devices; a
  # 1x1x1 mesh uses one) and its compilation cache, which the sweep keeps
  # instead of its own `<root>/jax_cache`: these smoke runs compile what
  # tests/train/test_loop.py's smoke runs compile, so whichever comes second
  # loads it from disk.
  # This worker measures the probe once for its own runs anyway; handed to
  # the sweep, its probe child takes it instead of measuring it again
  # (~25 s on 2 cores), and hands it on to the runs as it would its own.
  env = {**os.environ, **machine.probe_environ()}
  assert env["JAX_COMPILATION_CACHE_DIR"]  # set by tests/conftest.py
  subprocess.run(
    [
      sys.executable,
      "scripts/sweep.py",
      f"--config={ABLATION}:ci",
      f"--root={root}",
      # One at a time: the second RL run loads what the first compiled
      # (both cold at once compiled it twice: 226 -> 194 CPU-s alone).
      "--workers=1",
    ],
    cwd=REPO,
    check=True,
    env=env,
  )
  subprocess.run(
    [sys.executable, "scripts/report.py", f"--root={root}", f"--out={out}"],
    cwd=REPO,
    check=True,
    env=env,
  )
  results = json.loads((out / "results.json").read_text())
  assert results["runs_missing"] == []
  assert results["runs_unrecorded"] == 0 and results["run_machines"]
  assert set(results["envs"]) == {"sokoban"}
  (check,) = results["checks"]
  # The check's own overrides: one RL step (the smoke runs 2).
  assert check["finite"] and check["rl_rows"] == 1
  # GRPO and the check started RL from the shared SFT stage: the stage's
  # policy, so its post-SFT evaluation, and no SFT in their own logs.
  runs = [root / "sokoban/grpo/seed0", root / "checks/sokoban_gigpo_mesh222"]
  stage = root / "sokoban/sft/seed0"
  stage_summary = json.loads((stage / "summary.json").read_text())
  (stage_eval,) = stage_summary["evals"]
  assert stage_eval["phase"] == "sft"
  (stage_machine,) = stage_summary["machines"]
  # The sweep's probe child took the probe this process handed it and
  # handed it on to the runs.
  assert stage_machine["probe_inherited"] is True
  assert stage_machine["probe"] == machine.numerics_probe()["probe"]
  for run in runs:
    summary = json.loads((run / "summary.json").read_text())
    assert summary["evals"][0] == stage_eval
    # Each run's machine record starts with its stage's launch.
    assert summary["machines"][0] == stage_machine
    assert "sft/loss" not in (run / "logs/metrics.jsonl").read_text()
  assert "sft/loss" in (stage / "logs/metrics.jsonl").read_text()
  # The caller's cache, not the sweep's default one.
  assert not (root / "jax_cache").exists()
  assert any(pathlib.Path(env["JAX_COMPILATION_CACHE_DIR"]).iterdir())
  # One seed: the report's task-by-task RL-vs-SFT is the run's own.
  grpo = results["envs"]["sokoban"]["grpo"]
  own = json.loads((runs[0] / "summary.json").read_text())["rl_vs_sft"]
  assert grpo["rl_vs_sft_tasks"] == {**own, "seeds": [0]}
  assert (
    "RL against its SFT start: tasks lost / gained"
    in (out / "README.md").read_text()
  )
  assert list(out.glob("curves_sokoban.png"))
  assert list(out.glob("paired_sokoban.png"))


@pytest.mark.slow
def test_smoke_sweep_and_report_end_to_end(tmp_path):
  # The real smoke sweep (8 smoke runs from 4 shared SFT stages, one per env
  # and seed, + the 8-device mesh check: minutes on 2 cores), run twice to
  # see the second pass skip, then the report.
  root, out = tmp_path / "ca_smoke", tmp_path / "report"
  argv = [
    sys.executable,
    "scripts/sweep.py",
    f"--config={ABLATION}:smoke",
    f"--root={root}",
    "--workers=2",
  ]
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  subprocess.run(argv, cwd=REPO, check=True, env=env)
  again = subprocess.run(
    argv, cwd=REPO, check=True, env=env, capture_output=True, text=True
  )
  assert "13 runs, 13 already finished, 0 to run" in again.stdout
  subprocess.run(
    [
      sys.executable,
      "scripts/report.py",
      f"--root={root}",
      f"--out={out}",
    ],
    cwd=REPO,
    check=True,
    env=env,
  )
  results = json.loads((out / "results.json").read_text())
  assert results["runs_missing"] == []
  assert results["runs_unrecorded"] == 0 and results["run_machines"]
  assert set(results["envs"]) == {"sokoban", "frozenlake"}
  (check,) = results["checks"]
  assert check["finite"] and check["rl_rows"] == 2


def test_replay_sweep_differs_from_gigpo_only_in_the_replay_switch():
  runs = _runs_by_name("configs/ablations/sokoban_replay.py")
  # Each knob arm changes one replay setting of gigpo_replay, nothing else.
  knobs = {
    "gigpo_replay_f05": ("replay.fraction", "0.5"),
    "gigpo_replay_fifo": ("replay.mode", "fifo"),
    "gigpo_replay_a2": ("replay.alpha", "2.0"),
    "gigpo_replay_nodecay": ("replay.half_life", "1000000000.0"),
  }
  assert len(runs) == 3 + 3 * (2 + len(knobs))
  for seed in (0, 1, 2):
    base, arm = (
      runs[f"sokoban/{e}/seed{seed}"] for e in ("gigpo", "gigpo_replay")
    )
    assert arm.config_arg == "gigpo,replay"
    assert base.config_arg == "gigpo"
    assert arm.overrides == base.overrides
    for name, change in knobs.items():
      run = runs[f"sokoban/{name}/seed{seed}"]
      assert run.config_arg == arm.config_arg
      assert set(run.overrides) - set(arm.overrides) == {change}
      assert set(arm.overrides) <= set(run.overrides)
      assert run.init_from_run == f"sokoban/sft/seed{seed}"
    assert arm.init_from_run == base.init_from_run == f"sokoban/sft/seed{seed}"
    assert dict(base.overrides)["rl.steps"] == "30"
  replay = sweeps.load_config("configs/sokoban.py:gigpo,replay")
  plain = sweeps.load_config("configs/sokoban.py:gigpo")
  assert replay.replay.fraction == 0.25 and not plain.replay
  # Nothing but the replay section differs between the arms' configs.
  replay.replay = {}
  assert replay.to_dict() == plain.to_dict()


def test_long_replay_sweep_runs_50_steps_evaluated_every_5():
  runs = _runs_by_name("configs/ablations/sokoban_replay.py:long")
  assert len(runs) == 3 + 3 * 2  # no dose arm
  thirty = _runs_by_name("configs/ablations/sokoban_replay.py")
  for seed in (0, 1, 2):
    for arm in ("gigpo", "gigpo_replay"):
      run = runs[f"sokoban/{arm}/seed{seed}"]
      short = dict(thirty[f"sokoban/{arm}/seed{seed}"].overrides)
      short.update({"rl.steps": "50", "eval_every": "5"})
      assert dict(run.overrides) == short
      assert run.config_arg == thirty[run.name].config_arg
  with pytest.raises(ValueError, match="seeds=N"):
    sweeps.load_config("configs/ablations/sokoban_replay.py:longer")


def test_curriculum_sweep_differs_from_gigpo_only_in_the_curriculum():
  runs = _runs_by_name("configs/ablations/sokoban_curriculum.py")
  assert len(runs) == 3 + 3 * 2
  for seed in (0, 1, 2):
    sft = runs[f"sokoban/sft/seed{seed}"]
    base, arm = (
      runs[f"sokoban/{e}/seed{seed}"] for e in ("gigpo", "gigpo_curriculum")
    )
    assert arm.config_arg == "gigpo,curriculum" and base.config_arg == "gigpo"
    # Same pools for SFT and both arms: three difficulties, 64 held out each.
    for run in (sft, base, arm):
      flat = dict(run.overrides)
      assert flat["tasks.difficulties"] == "(0,1,2)"
      assert flat["tasks.train_counts"] == "(1000,1000,1000)"
      assert flat["tasks.eval_counts"] == "(64,64,64)"
    extra = set(arm.overrides) - set(base.overrides)
    assert extra == {("curriculum.promote_threshold", "0.35")}
    assert set(base.overrides) <= set(arm.overrides)
    assert arm.init_from_run == base.init_from_run == sft.name
  curriculum = sweeps.load_config("configs/sokoban.py:gigpo,curriculum")
  plain = sweeps.load_config("configs/sokoban.py:gigpo")
  assert curriculum.curriculum.window == 128 and not plain.curriculum
  # Beyond the pools (which the sweep sets for both), only the curriculum.
  curriculum.curriculum, curriculum.tasks = {}, plain.tasks
  assert curriculum.to_dict() == plain.to_dict()
  smoke = _runs_by_name("configs/ablations/sokoban_curriculum.py:smoke")
  assert set(smoke) == {
    "sokoban/sft/seed0", "sokoban/gigpo/seed0", "sokoban/gigpo_curriculum/seed0"
  }  # fmt: skip
  assert (
    dict(smoke["sokoban/gigpo/seed0"].overrides)["tasks.difficulties"]
    == "(0,1)"
  )


def test_mixed_curriculum_sweep_spreads_every_runs_demos():
  runs = _runs_by_name("configs/ablations/sokoban_curriculum.py:mixed")
  sweep = sweeps.load_config("configs/ablations/sokoban_curriculum.py:mixed")
  assert sweep.sweep.name == "sokoban_curriculum_mixed"
  assert len(runs) == 3 + 3 * 4
  for seed in (0, 1, 2):
    sft = runs[f"sokoban/sft/seed{seed}"]
    base, arm, low, held = (
      runs[f"sokoban/{e}/seed{seed}"]
      for e in (
        "gigpo", "gigpo_curriculum", "gigpo_curriculum_t20",
        "gigpo_curriculum_t20_h256",
      )
    )  # fmt: skip
    # The SFT stage is the one the override matters for; the arms carry it
    # too, so each run's saved config says which demos its start saw.
    for run in (sft, base, arm, low, held):
      assert dict(run.overrides)["sft.demo_difficulties"] == "(0,1,2)"
    for run, changes in (
      (arm, {("curriculum.promote_threshold", "0.35")}),
      (low, {("curriculum.promote_threshold", "0.2")}),
      (held, {("curriculum.promote_threshold", "0.2"),
              ("curriculum.hold", "256")}),
    ):  # fmt: skip
      assert run.config_arg == "gigpo,curriculum"
      assert run.init_from_run == sft.name
      assert set(run.overrides) - set(base.overrides) == changes
  plain = _runs_by_name("configs/ablations/sokoban_curriculum.py")
  assert all("sft.demo_difficulties" not in dict(r.overrides)
             for r in plain.values())  # fmt: skip
  smoke = _runs_by_name("configs/ablations/sokoban_curriculum.py:mixed,smoke")
  assert set(smoke) == {
    "sokoban/sft/seed0", "sokoban/gigpo/seed0",
    "sokoban/gigpo_curriculum/seed0", "sokoban/gigpo_curriculum_t20/seed0",
    "sokoban/gigpo_curriculum_t20_h256/seed0",
  }  # fmt: skip
  flat = dict(smoke["sokoban/sft/seed0"].overrides)
  assert flat["sft.demo_difficulties"] == flat["tasks.difficulties"] == "(0,1)"


def test_run_config_is_what_the_command_builds():
  (stage, *_) = sweeps.expand(_tiny_sweep(shared_sft=True, seeds=(3,)))
  assert stage.kind == "sft"
  got = sweeps.run_config(stage)
  assert got["seed"] == 3 and got["rl"]["steps"] == 0
  # Everything the overrides do not touch is the config file's own.
  base = sweeps.load_config(f"{stage.config_file}:{stage.config_arg}")
  assert got["sft"] == json.loads(base.sft.to_json_best_effort())
  assert got["model"]["preset"] == base.model.preset


def _finished_stage(root, run, config):
  """A stage's workdir as the loop leaves it: config, checkpoint, summary."""
  wd = sweeps.workdir(root, run)
  (wd / "checkpoints" / "150").mkdir(parents=True)
  (wd / "checkpoints" / "150" / "state").write_text("weights")
  (wd / "config.json").write_text(json.dumps(config))
  (wd / sweeps.SUMMARY).write_text("{}")
  return wd


def test_adopt_stages_copies_finished_stages_of_the_same_recipe(tmp_path):
  runs = sweeps.expand(_tiny_sweep(shared_sft=True, seeds=(0, 1, 2)))
  s0, s1, s2 = [r for r in runs if r.kind == "sft"]
  source, root = tmp_path / "source", tmp_path / "root"
  # Seed 0's stage ran with another estimator, RL length and evaluation
  # grid: none of them shapes SFT, so it may stand in.
  made = sweeps.run_config(s0)
  made.update(eval_every=10, rl={**made["rl"], "steps": 50})
  made["estimator"] = {"name": "gigpo"}
  _finished_stage(source, s0, made)
  _finished_stage(source, s1, sweeps.run_config(s1))
  (sweeps.workdir(root, s1) / "checkpoints").mkdir(parents=True)  # begun
  # Seed 2 has no finished stage in the source: it trains here.
  outcomes = dict(sweeps.adopt_stages(runs, root, source))
  assert outcomes == {
    s0.name: "adopted",
    s1.name: "begun here",
    s2.name: "not finished in source",
  }
  # A stage committed without its checkpoint stays this root's record.
  (sweeps.workdir(root, s1) / sweeps.SUMMARY).write_text("{}")
  assert dict(sweeps.adopt_stages(runs, root, source))[s1.name] == (
    "finished here, no checkpoint"
  )
  assert not (sweeps.workdir(root, s1) / sweeps.ADOPTED).exists()
  copied = sweeps.workdir(root, s0)
  assert (copied / "checkpoints" / "150" / "state").read_text() == "weights"
  assert json.loads((copied / "config.json").read_text())["eval_every"] == 10
  record = json.loads((copied / sweeps.ADOPTED).read_text())
  assert record["source"] == str(sweeps.workdir(source, s0).resolve())
  assert not list(root.glob("sokoban/sft/.*"))  # no partial copy left
  left = {r.name for r in sweeps.unfinished(runs, root)}
  assert s0.name not in left and {s1.name, s2.name} <= left
  # A second call finds it finished and copies nothing.
  assert dict(sweeps.adopt_stages(runs, root, source))[s0.name] == (
    "finished here"
  )


@pytest.mark.parametrize(
  "field, change",
  [
    ("sft", lambda c: c["sft"].update(steps=c["sft"]["steps"] + 1)),
    ("seed", lambda c: c.update(seed=7)),
    ("model", lambda c: c["model"].update(preset="qwen3-0.6b")),
  ],
)
def test_adopt_stages_refuses_another_recipe(tmp_path, field, change):
  runs = sweeps.expand(_tiny_sweep(shared_sft=True, seeds=(0,)))
  (stage,) = [r for r in runs if r.kind == "sft"]
  made = sweeps.run_config(stage)
  change(made)
  _finished_stage(tmp_path / "source", stage, made)
  with pytest.raises(sweeps.SweepSpecError, match=rf"config\.{field} differs"):
    sweeps.adopt_stages(runs, tmp_path / "root", tmp_path / "source")
  assert not (tmp_path / "root").exists()


def test_dynamic_sampling_sweep_differs_only_in_the_dynamic_switch():
  runs = _runs_by_name("configs/ablations/sokoban_dynamic.py")
  assert len(runs) == 3 + 3 * 9
  # every arm is in some pair, the baseline's pairs are the report's own
  sweep = sweeps.load_config("configs/ablations/sokoban_dynamic.py").sweep
  pairs = sweeps.parse_pairs(sweep.pairs, sweep.estimators)
  assert {e for p in pairs for e in p} == set(sweep.estimators) - {"gigpo"}
  for seed in (0, 1, 2):
    for estimator in ("gigpo", "grpo"):
      plain, dynamic, wide = (
        runs[f"sokoban/{e}/seed{seed}"]
        for e in (estimator, f"{estimator}_dynamic", f"{estimator}_wide")
      )
      assert plain.config_arg == wide.config_arg == estimator
      assert dynamic.config_arg == f"{estimator},dynamic"
      assert dynamic.overrides == plain.overrides
      # the wide arm: 3x the tasks a step, in as many minibatches
      extra = dict(set(wide.overrides) - set(plain.overrides))
      assert extra == {"rl.tasks_per_step": "24", "rl.minibatch_size": "96"}
      assert set(plain.overrides) < set(wide.overrides)
      assert dynamic.init_from_run == plain.init_from_run == wide.init_from_run
      random = runs[f"sokoban/{estimator}_random/seed{seed}"]
      assert random.config_arg == dynamic.config_arg
      extra = dict(set(random.overrides) - set(dynamic.overrides))
      assert extra == {"dynamic_sampling.choose": "random"}
      assert plain.init_from_run == f"sokoban/sft/seed{seed}"
    dynamic, by_return = (
      runs[f"sokoban/{e}/seed{seed}"] for e in ("gigpo_dynamic", "gigpo_return")
    )
    assert by_return.config_arg == dynamic.config_arg
    extra = dict(set(by_return.overrides) - set(dynamic.overrides))
    assert extra == {"dynamic_sampling.score": "return"}
  dynamic = sweeps.load_config("configs/sokoban.py:grpo,dynamic")
  plain = sweeps.load_config("configs/sokoban.py:grpo")
  assert dynamic.dynamic_sampling.max_rounds == 3 and not plain.dynamic_sampling
  dynamic.dynamic_sampling = {}
  assert dynamic.to_dict() == plain.to_dict()
  smoke = _runs_by_name("configs/ablations/sokoban_dynamic.py:smoke")
  assert smoke["sokoban/grpo_dynamic/seed0"].config_arg == "grpo,dynamic,smoke"
  # scaled from the smoke config's rl section (2 tasks, minibatches of 2)
  wide = dict(smoke["sokoban/grpo_wide/seed0"].overrides)
  assert (wide["rl.tasks_per_step"], wide["rl.minibatch_size"]) == ("6", "6")


def test_width_sweep_separates_tasks_from_rows():
  """sokoban_width: 2x and 3x the tasks a step, or 3x the episodes of each
  task, each with minibatches as much larger; its gigpo and gigpo_wide
  runs (and SFT stages) are sokoban_dynamic's own."""
  runs = _runs_by_name("configs/ablations/sokoban_width.py")
  dynamic = _runs_by_name("configs/ablations/sokoban_dynamic.py")
  assert len(runs) == 3 + 3 * 6
  sweep = sweeps.load_config("configs/ablations/sokoban_width.py").sweep
  pairs = sweeps.parse_pairs(sweep.pairs, sweep.estimators)
  assert {e for p in pairs for e in p} == set(sweep.estimators) - {"gigpo"}
  for seed in (0, 1, 2):
    plain = runs[f"sokoban/gigpo/seed{seed}"]
    for name in ("sft", "gigpo", "gigpo_wide"):
      run = f"sokoban/{name}/seed{seed}"
      assert runs[run] == dynamic[run]
    for arm, extra in (
      ("2x", {"rl.tasks_per_step": "16", "rl.minibatch_size": "64"}),
      ("wide", {"rl.tasks_per_step": "24", "rl.minibatch_size": "96"}),
      ("deep", {"rollout.group_size": "24", "rl.minibatch_size": "96"}),
      ("one_update", {"rl.minibatch_size": "64"}),  # all 8 x 8 rows
      ("spread", {"rl.tasks_per_step": "16", "rollout.group_size": "4"}),
    ):
      run = runs[f"sokoban/gigpo_{arm}/seed{seed}"]
      assert run.config_arg == plain.config_arg == "gigpo"
      assert run.init_from_run == plain.init_from_run
      assert dict(set(run.overrides) - set(plain.overrides)) == extra
      assert set(plain.overrides) < set(run.overrides)
  smoke = _runs_by_name("configs/ablations/sokoban_width.py:smoke")
  deep = dict(smoke["sokoban/gigpo_deep/seed0"].overrides)
  # scaled from the smoke config (2 tasks x 2 episodes, minibatches of 2)
  assert (deep["rollout.group_size"], deep["rl.minibatch_size"]) == ("6", "6")
  one = dict(smoke["sokoban/gigpo_one_update/seed0"].overrides)
  assert one["rl.minibatch_size"] == "4"


def test_warmup_sweep_changes_one_override_an_arm():
  """sokoban_warmup: a learning-rate warm-up for GiGPO and GRPO, and remat
  for GiGPO, each its plain arm plus one override; the plain runs and the
  SFT stages are sokoban_dynamic's own."""
  runs = _runs_by_name("configs/ablations/sokoban_warmup.py")
  dynamic = _runs_by_name("configs/ablations/sokoban_dynamic.py")
  assert len(runs) == 3 + 3 * 5
  sweep = sweeps.load_config("configs/ablations/sokoban_warmup.py").sweep
  pairs = sweeps.parse_pairs(sweep.pairs, sweep.estimators)
  assert {e for p in pairs for e in p} | {"gigpo_remat"} == set(
    sweep.estimators
  ) - {"gigpo"}
  for seed in (0, 1, 2):
    for name in ("sft", "gigpo", "grpo"):
      run = f"sokoban/{name}/seed{seed}"
      assert runs[run] == dynamic[run]
    for arm, plain, extra in (
      ("gigpo_warmup", "gigpo", {"rl.optimizer.warmup_steps": "10"}),
      ("grpo_warmup", "grpo", {"rl.optimizer.warmup_steps": "10"}),
      ("gigpo_remat", "gigpo", {"model.remat": "full"}),
    ):
      run = runs[f"sokoban/{arm}/seed{seed}"]
      base = runs[f"sokoban/{plain}/seed{seed}"]
      assert run.config_arg == base.config_arg == plain
      assert run.init_from_run == base.init_from_run
      assert base.init_from_run == f"sokoban/sft/seed{seed}"
      assert dict(set(run.overrides) - set(base.overrides)) == extra
      assert set(base.overrides) < set(run.overrides)
  # the plain recipe has neither: each arm's override is a real change
  plain = sweeps.load_config("configs/sokoban.py:gigpo")
  assert plain.rl.optimizer.warmup_steps == 0 and plain.model.remat == "none"
  smoke = _runs_by_name("configs/ablations/sokoban_warmup.py:smoke")
  warm = dict(smoke["sokoban/grpo_warmup/seed0"].overrides)
  assert warm["rl.optimizer.warmup_steps"] == "10"


def test_budget_sweep_gives_plain_arms_the_wide_arms_episodes():
  """sokoban_budget: plain GiGPO and GRPO for 3x the steps (the wide
  arms' episodes at the plain width) beside sokoban_width's and
  sokoban_dynamic's own wider runs."""
  runs = _runs_by_name("configs/ablations/sokoban_budget.py")
  width = _runs_by_name("configs/ablations/sokoban_width.py")
  dynamic = _runs_by_name("configs/ablations/sokoban_dynamic.py")
  assert len(runs) == 3 + 3 * 13
  sweep = sweeps.load_config("configs/ablations/sokoban_budget.py").sweep
  pairs = sweeps.parse_pairs(sweep.pairs, sweep.estimators)
  assert {e for p in pairs for e in p} == set(sweep.estimators) - {"gigpo"}
  grpo = sweeps.load_config("configs/sokoban.py:grpo")
  grpo_lr = grpo.rl.optimizer.learning_rate
  for seed in (0, 1, 2):
    for name in ("sft", "gigpo", "gigpo_2x", "gigpo_wide"):
      run = f"sokoban/{name}/seed{seed}"
      assert runs[run] == width[run]
    for name in ("grpo", "grpo_wide"):
      run = f"sokoban/{name}/seed{seed}"
      assert runs[run] == dynamic[run]
    for estimator in ("gigpo", "grpo"):
      plain = dict(runs[f"sokoban/{estimator}/seed{seed}"].overrides)
      long = dict(runs[f"sokoban/{estimator}_long/seed{seed}"].overrides)
      wide = dict(runs[f"sokoban/{estimator}_wide/seed{seed}"].overrides)
      # the one change: 3x the steps, so the wide arm's episodes
      assert long == {**plain, "rl.steps": "90"}
      assert int(long["rl.steps"]) * 8 == int(plain["rl.steps"]) * int(
        wide["rl.tasks_per_step"]
      )
    assert runs[f"sokoban/grpo_long/seed{seed}"].config_arg == "grpo"
    grpo_long = dict(runs[f"sokoban/grpo_long/seed{seed}"].overrides)
    lr2x = runs[f"sokoban/grpo_long_lr2x/seed{seed}"]
    assert lr2x.config_arg == "grpo"
    assert dict(lr2x.overrides) == {
      **grpo_long,
      "rl.optimizer.learning_rate": str(2 * grpo_lr),
    }
    # GRPO's penalties scaled by its advantages' size against GiGPO's
    matched = runs[f"sokoban/grpo_long_kl_matched/seed{seed}"]
    assert matched.config_arg == "grpo"
    assert dict(matched.overrides) == {
      **grpo_long,
      "loss.kl_coef": str(0.135 * grpo.loss.kl_coef),
      "loss.entropy_coef": str(0.135 * grpo.loss.entropy_coef),
    }
    # Both estimators on one advantage scale, the anchor at gigpo_long's
    for estimator in ("gigpo", "grpo"):
      long = dict(runs[f"sokoban/{estimator}_long/seed{seed}"].overrides)
      norm = runs[f"sokoban/{estimator}_long_advnorm/seed{seed}"]
      assert norm.config_arg == estimator
      assert dict(norm.overrides) == {
        **long,
        "rl.advantage_scale": "mean_abs",
        "loss.kl_coef": str(grpo.loss.kl_coef / 3.369),
        "loss.entropy_coef": str(grpo.loss.entropy_coef / 3.369),
      }
    # ... and divided by a running mean of the steps' statistics
    for estimator in ("gigpo", "grpo"):
      norm = dict(
        runs[f"sokoban/{estimator}_long_advnorm/seed{seed}"].overrides
      )
      ema = runs[f"sokoban/{estimator}_long_advnorm_ema/seed{seed}"]
      assert ema.config_arg == estimator
      assert dict(ema.overrides) == {**norm, "rl.advantage_scale_decay": "0.9"}
  smoke = _runs_by_name("configs/ablations/sokoban_budget.py:smoke")
  smoke_steps = sweeps.load_config("configs/sokoban.py:gigpo,smoke").rl.steps
  for arm in ("gigpo_long", "grpo_long", "grpo_long_lr2x"):
    smoke_long = dict(smoke[f"sokoban/{arm}/seed0"].overrides)
    assert smoke_long["rl.steps"] == str(3 * smoke_steps)
  smoke_lr = sweeps.load_config("configs/sokoban.py:grpo,smoke")
  assert smoke_long["rl.optimizer.learning_rate"] == str(
    2 * smoke_lr.rl.optimizer.learning_rate
  )


def test_sweep_pairs_are_checked_and_kept_in_the_manifest(tmp_path):
  estimators = ("grpo", "grpo_wide", "gigpo")
  assert sweeps.parse_pairs(
    ["grpo:grpo_wide", "grpo_wide:grpo"], estimators
  ) == [
    ("grpo", "grpo_wide"),
    ("grpo_wide", "grpo"),
  ]
  for bad, says in (
    ("grpo", "expected 'A:B'"),
    ("grpo:", "expected 'A:B'"),
    ("a:b:c", "expected 'A:B'"),
    ("grpo:ppo", r"\['ppo'\] not swept"),
    ("gigpo:gigpo", "A = B"),
  ):
    with pytest.raises(sweeps.SweepSpecError, match=says):
      sweeps.parse_pairs([bad], estimators)
  with pytest.raises(sweeps.SweepSpecError, match="a list of 'A:B'"):
    sweeps.parse_pairs("grpo:gigpo", estimators)  # a string, not a list
  with pytest.raises(sweeps.SweepSpecError, match="a duplicate"):
    sweeps.parse_pairs(["grpo:gigpo", "grpo:gigpo"], estimators)
  sweep = ml_collections.ConfigDict(
    {
      "name": "tiny",
      "envs": {"sokoban": "configs/sokoban.py"},
      "estimators": estimators,
      "seeds": (0,),
      "pairs": ("grpo:grpo_wide",),
      "arms": {
        "grpo_wide": {"variant": "grpo", "overrides": {"rl": {"steps": 2}}}
      },
    }
  )
  runs = sweeps.expand(sweep)
  path = sweeps.write_manifest(tmp_path, sweep, runs)
  assert json.loads(path.read_text())["pairs"] == ["grpo:grpo_wide"]
  sweep.pairs = ("grpo:ppo",)
  with pytest.raises(sweeps.SweepSpecError, match="not swept"):
    sweeps.expand(sweep)
