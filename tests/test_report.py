"""Report statistics on hand-made metrics files, hand-computed goldens."""

import json
import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from agentic_rl import report

T_975_2 = 4.302652729911275  # Student t quantile, 0.975, 2 dof
T_975_1 = 12.706204736174707  # and 1 dof


def test_t_interval_by_hand():
  # [1, 2, 3]: mean 2, s = 1, half width = t * 1 / sqrt(3).
  ci = report.t_interval([1.0, 2.0, 3.0])
  half = T_975_2 / math.sqrt(3)
  assert ci.mean == pytest.approx(2.0)
  assert (ci.lo, ci.hi) == pytest.approx((2 - half, 2 + half))
  assert ci.n == 3 and not ci.excludes_zero()
  one = report.t_interval([0.5])
  assert one.mean == 0.5 and math.isnan(one.lo) and one.to_dict()["lo"] is None
  assert report.t_interval([]).n == 0


def test_sign_flip_p_by_hand():
  # [1, -1, 2, 3]: |sum| 5. Of the 16 sums +-1 +-1 +-2 +-3, those at
  # least 5 from 0 are 7 (all +), 5 (+2 +3, the 1s opposite: 2 ways) and
  # their negatives: 6.
  assert report.sign_flip_p([1.0, -1.0, 2.0, 3.0]) == pytest.approx(6 / 16)
  # One sign throughout: only the two one-signed patterns, 2 / 2^n.
  assert report.sign_flip_p([0.1, 0.2]) == pytest.approx(0.5)
  assert report.sign_flip_p([0.1, 0.3, 0.1]) == pytest.approx(0.25)
  assert report.sign_flip_p(np.arange(1.0, 7.0)) == pytest.approx(2 / 64)
  # The p of the mean's distance from 0: scale and overall sign are moot.
  for d in ([0.2, -0.05, 0.1], [3.0, 1.0, -2.0, 0.5, 1.5]):
    want = report.sign_flip_p(d)
    assert report.sign_flip_p([-7 * x for x in d]) == pytest.approx(want)
  assert report.sign_flip_p([0.3]) == 1.0  # one seed: both patterns tie
  assert report.sign_flip_p([0.0, 0.0]) == 1.0
  assert report.sign_flip_p([]) is None
  # paired_difference carries it; a plain interval has none.
  d = report.paired_difference(
    {0: 0.5, 1: 0.9, 2: 0.6}, {0: 0.4, 1: 0.6, 2: 0.5}
  )
  assert d.p == pytest.approx(0.25) and d.to_dict()["p"] == d.p
  assert "p" not in report.t_interval([1.0, 2.0]).to_dict()


def test_auc_and_threshold_by_hand():
  # Trapezoids: (0 + 1) / 2 * 1 + (1 + 1) / 2 * 2 = 2.5 over a range of 3.
  assert report.normalized_auc([0, 1, 3], [0, 1, 1]) == pytest.approx(2.5 / 3)
  assert report.normalized_auc([5], [0.25]) == 0.25
  with pytest.raises(report.ReportError, match="increase"):
    report.normalized_auc([0, 2, 1], [0, 0, 0])
  assert report.steps_to_threshold([0, 5, 10], [0.1, 0.5, 0.9], 0.5) == 5
  assert report.steps_to_threshold([0, 5], [0.1, 0.2], 0.5) is None


def test_train_gain_by_hand():
  assert report.train_gain([0, 0, 0, 1, 1, 1]) == pytest.approx(1.0)  # w=3
  assert report.train_gain([0, 1, 2, 3, 4], window=2) == pytest.approx(3.0)
  assert report.train_gain([0.1, 0.3]) == pytest.approx(0.2)
  assert report.train_gain([0.5]) is None
  ramp = np.arange(12.0)  # window 5: (7+...+11)/5 - (0+...+4)/5 = 7
  assert report.train_gain(ramp) == pytest.approx(7.0)


def test_late_mean_by_hand():
  # Steps 0, 10, 20, 30: the second half of RL is steps 20 and 30.
  assert report.late_mean([0, 10, 20, 30], [0.0, 0.1, 0.2, 0.4]) == (
    pytest.approx(0.3)
  )
  # Every 5 steps to 50: steps 25 ... 50, six evaluations.
  steps = np.arange(0, 55, 5)
  assert report.late_mean(steps, steps / 100) == pytest.approx(0.375)
  assert report.late_mean([0, 10], [0.5, 0.7]) == 0.7  # step 0 never counts
  assert report.late_mean([0], [0.25]) == 0.25  # an SFT-only curve


def test_paired_difference_by_hand():
  treated = {0: 0.5, 1: 0.7, 2: 0.6, 7: 1.0}  # seed 7 has no partner
  baseline = {0: 0.4, 1: 0.4, 2: 0.5}
  # Differences 0.1, 0.3, 0.1: mean 1/6, s = 0.2 / sqrt(3).
  ci = report.paired_difference(treated, baseline)
  half = T_975_2 * (0.2 / math.sqrt(3)) / math.sqrt(3)
  assert ci.n == 3
  assert ci.mean == pytest.approx(1 / 6)
  assert (ci.lo, ci.hi) == pytest.approx((1 / 6 - half, 1 / 6 + half))


def test_paired_tasks_by_hand():
  # 10 shared tasks: 2 both, 6 only A, 0 only B, 2 neither; "x" and "y"
  # are in one evaluation only and do not count.
  a = {f"t{i}": i < 8 for i in range(10)} | {"x": True}
  b = {f"t{i}": i < 2 for i in range(10)} | {"y": False}
  got = report.paired_tasks(a, b)
  assert (got.n, got.both, got.only_a, got.only_b, got.neither) == (
    10,
    2,
    6,
    0,
    2,
  )
  # All 6 discordant tasks went one way: 2 x (1/2)^6 = 1/32.
  assert got.p_value == pytest.approx(1 / 32)
  assert (got.rate_a, got.rate_b) == (0.8, 0.2)
  assert got.to_dict()["difference"] == pytest.approx(-0.6)
  # 3 against 1 of 4 discordant: P(X <= 1) + P(X >= 3) = 10/16.
  c = {"t0": True, "t1": True, "t2": True, "t3": False, "t4": True}
  d = {"t0": False, "t1": False, "t2": False, "t3": True, "t4": True}
  assert report.paired_tasks(c, d).p_value == pytest.approx(10 / 16)
  assert report.paired_tasks(c, c).p_value == 1.0  # nothing discordant
  with pytest.raises(report.ReportError, match="share no task"):
    report.paired_tasks({"x": True}, {"y": True})


def test_pooled_tasks_by_hand():
  # Two seeds, each 3 tasks lost and none gained of 5: alone p = 2/8 each,
  # pooled 6 against 0 of 6 discordant: p = 2/64.
  a = {f"t{i}": i < 4 for i in range(5)}
  b = {f"t{i}": i < 1 for i in range(5)}
  one = report.paired_tasks(a, b)
  assert one.p_value == pytest.approx(1 / 4)
  got = report.pooled_tasks([one, one])
  assert (got.n, got.both, got.only_a, got.only_b, got.neither) == (
    10,
    2,
    6,
    0,
    2,
  )
  assert got.p_value == pytest.approx(1 / 32)
  # Opposite splits cancel: 3-0 and 0-3 pool to 3-3, p = 1.
  back = report.paired_tasks(b, a)
  assert report.pooled_tasks([one, back]).p_value == 1.0
  with pytest.raises(report.ReportError, match="no task-by-task"):
    report.pooled_tasks([])


def test_paired_tasks_by_group_by_hand():
  # The 10 tasks of test_paired_tasks_by_hand, t0-t4 in "d0" and t5-t9 in
  # "d1": d0 holds both solved (t0, t1) and 3 lost (t2-t4), p = 2/8; d1
  # 3 lost (t5-t7) and 2 neither. "x" and "y" are not shared: no group
  # needed.
  a = {f"t{i}": i < 8 for i in range(10)} | {"x": True}
  b = {f"t{i}": i < 2 for i in range(10)} | {"y": False}
  group = {f"t{i}": "d0" if i < 5 else "d1" for i in range(10)}
  got = report.paired_tasks_by(a, b, group)
  assert list(got) == ["d0", "d1"]
  d0, d1 = got["d0"], got["d1"]
  assert (d0.n, d0.both, d0.only_a, d0.only_b, d0.neither) == (5, 2, 3, 0, 0)
  assert (d1.n, d1.both, d1.only_a, d1.only_b, d1.neither) == (5, 0, 3, 0, 2)
  assert d0.p_value == d1.p_value == pytest.approx(1 / 4)
  # The groups add up to the whole comparison.
  whole = report.paired_tasks(a, b)
  assert report.pooled_tasks([d0, d1]) == whole
  with pytest.raises(report.ReportError, match="'t9' has no group"):
    report.paired_tasks_by(a, b, {f"t{i}": "d0" for i in range(9)})
  with pytest.raises(report.ReportError, match="share no task"):
    report.paired_tasks_by({"x": True}, {"y": True}, {})


PROBE = "v1:" + "5" * 16  # a `machine.numerics_probe` digest


def _machine(key, cpu="EPYC", probe=None):
  """A machine record as `loop.record_machine` keeps it (fields trimmed)."""
  return {
    **({"probe": probe} if probe else {}),
    "key": key,
    "cpu_name": cpu,
    "host_cpus": 2,
    "isa": ["avx2"],
    "jax": "0.10.2",
    "backend": "cpu",
    "phase": "sft",
    "sft_step": 0,
    "rl_step": 0,
  }


def _write_run(
  root,
  name,
  curve,
  *,
  sft_row=True,
  resumed=False,
  nan=False,
  slope=0.1,
  machines=(),
  solved=None,
  episodes=None,
):
  """A run dir as the loop writes it; curve = [(rl_step, success, return)].

  `solved`: per-task verdicts after SFT and at the last RL step, (sft, rl),
  kept in summary.json as runs from 2026-12-05 on keep them. `episodes`:
  training episodes each RL step played (not logged if None).

  RL step i's sampled batch succeeds at rate `slope` * i.

  RL rows carry the optimizer step in `step` (4.5, 8.5, ...), as the loop
  logs them, not the RL iteration.
  """
  wd = pathlib.Path(root) / name
  (wd / "logs").mkdir(parents=True)
  rows = [{"step": i, "time": 0.0, "sft/loss": 1.0} for i in (1, 2, 3)]
  evals = dict((s, (sr, r)) for s, sr, r in curve)
  if sft_row:
    sr, r = evals[0]
    rows.append({"step": 0, "eval/success_rate": sr, "eval/return_mean": r})
  last = max(evals)
  for i in range(1, last + 1):
    row = {"step": 0.5 + 4 * i, "loss": "NaN" if nan else 0.1}
    row["success_rate"] = slope * i
    if episodes is not None:
      row["episodes"] = float(episodes)
    if i in evals:
      row["eval/success_rate"], row["eval/return_mean"] = evals[i]
    rows.append(row)
    if resumed and i == 1:  # a resumed run logs step 1 again (same values)
      rows.append(dict(row))
  (wd / "logs" / "metrics.jsonl").write_text(
    "".join(json.dumps(r) + "\n" for r in rows)
  )
  summary = {
    "evals": [
      {"phase": "sft", "rl_step": 0, "success_rate": evals[0][0]},
    ]
  }
  summary["evals"][0]["return_mean"] = evals[0][1]
  if solved is not None:
    summary["evals"][0]["solved"] = solved[0]
    summary["evals"].append(
      {
        "phase": "rl",
        "rl_step": last,
        "success_rate": evals[last][0],
        "solved": solved[1],
      }
    )
  if machines:
    summary["machines"] = list(machines)
  (wd / "summary.json").write_text(json.dumps(summary))
  name_ = "gigpo" if "gigpo" in name else "grpo"
  (wd / "config.json").write_text(json.dumps({"estimator": {"name": name_}}))
  (wd / "sweep_timing.json").write_text(json.dumps({"seconds": 10.0}))


# Held-out success per (estimator, seed) at RL steps 0, 1, 2.
CURVES = {
  ("grpo", 0): [(0, 0.0, -1.0), (1, 0.2, -0.5), (2, 0.4, 0.0)],
  ("grpo", 1): [(0, 0.0, -1.0), (1, 0.4, -0.2), (2, 0.6, 0.2)],
  ("grpo", 2): [(0, 0.2, -0.8), (1, 0.2, -0.6), (2, 0.5, 0.0)],
  ("gigpo", 0): [(0, 0.0, -1.0), (1, 0.4, 0.0), (2, 0.5, 0.2)],
  ("gigpo", 1): [(0, 0.0, -1.0), (1, 0.6, 0.2), (2, 0.9, 0.6)],
  ("gigpo", 2): [(0, 0.2, -0.8), (1, 0.2, -0.4), (2, 0.6, 0.4)],
}


def _first(k, n=10):
  """Per-task verdicts: the first k of n tasks solved."""
  return {f"t{i}": i < k for i in range(n)}


# Per-task verdicts (after SFT, final) of the runs that kept them; grpo
# seed 0 predates them. Rates match CURVES on 10 tasks.
SOLVED = {
  ("grpo", 1): (_first(0), _first(6)),
  ("grpo", 2): (_first(2), _first(5)),
  ("gigpo", 0): (_first(0), _first(5)),
  ("gigpo", 1): (_first(0), _first(9)),
  ("gigpo", 2): (
    _first(2),
    {f"t{i}": i in (0, 1, 2, 3, 8, 9) for i in range(10)},
  ),
}


@pytest.fixture
def sweep_root(tmp_path):
  root = tmp_path / "ca"
  runs = []
  for (est, seed), curve in CURVES.items():
    name = f"lake/{est}/seed{seed}"
    # seed 0 of grpo: an older run without the step-0 row, resumed once.
    old = (est, seed) == ("grpo", 0)
    # Training success rises 0.1 a step for grpo, 0.2-0.4 for gigpo.
    slope = 0.1 if est == "grpo" else 0.2 + 0.1 * seed
    # Machines: grpo seed 0 has no record (old); seed 1 ran on machine A
    # in both arms; seed 2's gigpo ran on B, whose numerics probe agrees
    # with A's.
    key = "b" * 16 if (est, seed) == ("gigpo", 2) else "a" * 16
    where = [] if old else [_machine(key, probe=PROBE)]
    _write_run(
      root,
      name,
      curve,
      sft_row=not old,
      resumed=old,
      slope=slope,
      machines=where,
      solved=SOLVED.get((est, seed)),
    )
    runs.append({"name": name, "env": "lake", "estimator": est, "seed": seed})
  _write_run(root, "checks/mesh", CURVES[("grpo", 0)], nan=True)
  runs.append(
    {
      "name": "checks/mesh",
      "env": "lake",
      "estimator": "grpo",
      "seed": 0,
      "kind": "check",
    }
  )
  runs.append(
    {"name": "lake/rloo/seed0", "env": "lake", "estimator": "rloo", "seed": 0}
  )  # never run: reported as unfinished
  manifest = {
    "name": "tiny",
    "config": "tiny.py:smoke",
    "envs": ["lake"],
    "estimators": ["grpo", "gigpo", "rloo"],
    "seeds": [0, 1, 2],
    "baseline": "grpo",
    "smoke": True,
    "runs": runs,
  }
  (root / "sweep.json").write_text(json.dumps(manifest))
  return root


def test_load_run_reads_curve_from_metrics(sweep_root):
  run = {"name": "lake/grpo/seed0", "env": "lake", "estimator": "grpo"}
  curve = report.load_run(sweep_root, {**run, "seed": 0})
  assert curve.steps.tolist() == [0, 1, 2]
  assert curve.success.tolist() == [0.0, 0.2, 0.4]
  assert curve.returns.tolist() == [-1.0, -0.5, 0.0]
  assert curve.rows == 2 and curve.finite and curve.seconds == 10.0


def test_summary_statistics_by_hand(sweep_root):
  manifest, grid, checks, missing = report.load_sweep(sweep_root)
  assert missing == ["lake/rloo/seed0"]
  s = report.summarize(manifest, grid, checks, missing, threshold=0.5)
  grpo, gigpo = s["envs"]["lake"]["grpo"], s["envs"]["lake"]["gigpo"]
  # Final success: grpo 0.4, 0.6, 0.5; gigpo 0.5, 0.9, 0.6.
  assert grpo["final_success"]["mean"] == pytest.approx(0.5)
  half = T_975_2 * 0.1 / math.sqrt(3)  # s of (0.4, 0.6, 0.5) = 0.1
  assert grpo["final_success"]["lo"] == pytest.approx(0.5 - half)
  assert gigpo["final_success"]["mean"] == pytest.approx(2 / 3)
  assert gigpo["final_return"]["mean"] == pytest.approx(0.4)
  # AUC over steps 0..2: (a + 2b + c) / 4 per run.
  auc_grpo = [(0 + 0.4 + 0.4) / 4, (0 + 0.8 + 0.6) / 4, (0.2 + 0.4 + 0.5) / 4]
  assert grpo["auc_success"]["mean"] == pytest.approx(sum(auc_grpo) / 3)
  # Paired: gigpo - grpo final success = 0.1, 0.3, 0.1.
  d = gigpo["vs_baseline"]["final_success"]
  assert d["mean"] == pytest.approx(1 / 6) and d["n"] == 3
  # Seed-level sign test: all 3 positive, as extreme as only the 2 of the
  # 2^3 sign patterns with one sign.
  assert d["p"] == pytest.approx(2 / 8)
  assert "vs_baseline" not in grpo
  # Training gain with 2 RL steps (window 1): step 2 - step 1 = the slope;
  # paired gigpo - grpo: 0.1, 0.2, 0.3.
  assert grpo["train_success_gain"]["mean"] == pytest.approx(0.1)
  d = gigpo["vs_baseline"]["train_success_gain"]
  assert d["mean"] == pytest.approx(0.2) and d["n"] == 3
  half = T_975_2 * 0.1 / math.sqrt(3)
  assert (d["lo"], d["hi"]) == pytest.approx((0.2 - half, 0.2 + half))
  # Threshold 0.5: grpo seeds reach it at step -, 2, 2; gigpo at 2, 1, 2.
  assert grpo["steps_to_threshold"] == {
    "mean_over_reached": 2.0,
    "reached": 2,
    "runs": 3,
  }
  assert gigpo["steps_to_threshold"]["mean_over_reached"] == pytest.approx(
    5 / 3
  )
  # Late success, the mean of the RL evaluations from step 1 = half of 2 on:
  # grpo 0.3, 0.5, 0.35; gigpo 0.45, 0.75, 0.4; paired 0.15, 0.25, 0.05.
  assert grpo["late_success"]["mean"] == pytest.approx((0.3 + 0.5 + 0.35) / 3)
  d = gigpo["vs_baseline"]["late_success"]
  half = T_975_2 * 0.1 / math.sqrt(3)  # s of (0.15, 0.25, 0.05) = 0.1
  assert d["mean"] == pytest.approx(0.15)
  assert (d["lo"], d["hi"]) == pytest.approx((0.15 - half, 0.15 + half))
  # Seed 0's baseline has no record, seed 1 shares machine A, seed 2 not.
  assert gigpo["machine_pairs"] == {
    "same": 1,
    "different": 1,
    "unknown": 1,
    "probes_agree": 1,
  }
  assert "machine_pairs" not in grpo
  assert s["runs_unrecorded"] == 2  # grpo seed 0 and the check run
  assert {k: (e["runs"], e["probe"]) for k, e in s["run_machines"].items()} == {
    "a" * 16: (4, PROBE),
    "b" * 16: (1, PROBE),
  }
  (check,) = s["checks"]
  assert check["name"] == "checks/mesh" and not check["finite"]
  assert s["seconds_per_run"]["mean"] == pytest.approx(10.0)
  # Task by task (SOLVED), pooled over the seeds that kept verdicts.
  # RL against SFT: grpo seeds 1, 2 gained 6 + 3, lost none: 2 / 2^9.
  t = grpo["rl_vs_sft_tasks"]
  assert (t["seeds"], t["n"], t["only_a"], t["only_b"]) == ([1, 2], 20, 0, 9)
  assert t["p_value"] == pytest.approx(2 / 2**9)
  # gigpo seeds 0-2 gained 5 + 9 + 4.
  t = gigpo["rl_vs_sft_tasks"]
  assert (t["seeds"], t["only_a"], t["only_b"]) == ([0, 1, 2], 0, 18)
  # Against grpo (seed 0's baseline kept none): seed 1 0 / 3, seed 2 1 / 2
  # (t4 only grpo; t8, t9 only gigpo); 1 of 6: (1 + 6 + 6 + 1) / 64.
  t = gigpo["tasks_vs_baseline"]
  assert (t["seeds"], t["n"], t["only_a"], t["only_b"]) == ([1, 2], 20, 1, 5)
  assert t["p_value"] == pytest.approx(14 / 64)
  assert "tasks_vs_baseline" not in grpo
  (finding,) = report.findings(s)
  assert "gigpo − grpo" in finding and "95% CI covers 0" in finding
  # Late 0.15 +- 0.25 covers 0 as final does.
  assert (
    "late success (second half of RL) 0.150 [-0.098, 0.398] (p 0.25) too"
    in finding
  )
  assert "final success = 0.167 [-0.120, 0.454] (p 0.25) over" in finding
  assert "1 of 3 pairs ran on different machines" in finding
  assert (
    "task by task over 2 seeds' final evaluations, 1 task only grpo solved"
    " and 5 only gigpo (McNemar p=0.22)" in finding
  )


def test_write_report_files(sweep_root, tmp_path):
  out = tmp_path / "out"
  for seed, seconds in enumerate((10.0, 13.0, 16.0)):  # gigpo's wall times
    timing = sweep_root / f"lake/gigpo/seed{seed}/sweep_timing.json"
    peak = {"peak_rss_mib": 2048.0 + 512 * seed} if seed else {}
    timing.write_text(json.dumps({"seconds": seconds, **peak}))
  summary = report.write_report(str(sweep_root), str(out), threshold=0.5)
  readme = (out / "README.md").read_text()
  # Each arm's cost: 13 +- t * 3 / sqrt(3) s; grpo's three runs 10 s each.
  cost = summary["envs"]["lake"]["gigpo"]["seconds_per_run"]
  half = T_975_2 * 3.0 / math.sqrt(3)
  assert (cost["mean"], cost["lo"]) == pytest.approx((13.0, 13.0 - half))
  # Its memory: the larger of the two runs that recorded a peak (3 GiB);
  # grpo's timings predate the reading.
  assert summary["envs"]["lake"]["gigpo"]["peak_rss_mib"] == {
    "max": 3072.0,
    "n": 2,
  }
  assert "| 1 / 1 / 1 | 13 [6, 20] | 3.0 GiB (n=2) |" in readme
  assert "| 10 [10, 10] | not measured |" in readme
  # grpo's late success 0.3, 0.5, 0.35: s = 0.104, half-width 0.259.
  assert (
    "| grpo | 0.383 [0.125, 0.642] | baseline | baseline | 10 [10, 10] |"
    in readme
  )
  assert "Smoke-size sweep, not the experiment" in readme
  assert "| gigpo | 3 | 0.667 [" in readme
  assert "| gigpo | 0.300 [" in readme  # training gain 0.2, 0.3, 0.4
  assert "| gigpo | 0.533 [" in readme  # late success 0.45, 0.75, 0.4
  assert "| 1 / 1 / 1 |" in readme  # machine pairs
  assert (
    "ran on different machines: gigpo (1, 1 of them with agreeing numerics"
    " probes)" in readme
  )
  assert (
    f"EPYC, 2 cores, avx2, jax 0.10.2 cpu (4 runs, numerics probe {PROBE})"
    in readme
  )
  assert "2 runs without a machine record" in readme
  assert "86.7 vs 72.8" in readme
  assert "lake/rloo/seed0" in readme
  assert "all metrics finite: NO" in readme
  assert "| grpo | 0 / 9 (p=0.0039; 2 seeds, 20 tasks) | baseline |" in readme
  assert "| 1 / 5 (p=0.22; 2 seeds, 20 tasks) |" in readme
  assert (out / "curves_lake.png").stat().st_size > 1000
  assert (out / "paired_lake.png").stat().st_size > 1000
  assert "](paired_lake.png)" in readme
  assert (out / "advantages.png").stat().st_size > 1000
  saved = json.loads((out / "results.json").read_text())
  assert saved["envs"]["lake"]["gigpo"]["final_success"]["n"] == 3
  assert [r["estimator"] for r in summary["credit_table"]] == ["grpo", "gigpo"]


def test_write_report_with_another_baseline(sweep_root, tmp_path):
  default = report.write_report(str(sweep_root), str(tmp_path / "a"))
  swapped = report.write_report(
    str(sweep_root), str(tmp_path / "b"), baseline="gigpo"
  )
  lake, lake_swapped = default["envs"]["lake"], swapped["envs"]["lake"]
  assert swapped["baseline"] == "gigpo"
  assert "vs_baseline" not in lake_swapped["gigpo"]
  forward = lake["gigpo"]["vs_baseline"]["final_success"]
  backward = lake_swapped["grpo"]["vs_baseline"]["final_success"]
  assert backward["mean"] == pytest.approx(-forward["mean"])
  assert backward["lo"] == pytest.approx(-forward["hi"])
  readme = (tmp_path / "b" / "README.md").read_text()
  assert f"--out={tmp_path / 'b'} --baseline=gigpo" in readme
  with pytest.raises(report.ReportError, match="'ppo' is not one of"):
    report.write_report(str(sweep_root), str(tmp_path / "c"), baseline="ppo")


def test_sweep_pairs_are_reported_arm_against_arm(sweep_root, tmp_path):
  manifest = json.loads((sweep_root / "sweep.json").read_text())
  # rloo has no finished run: its pair is left out, not an empty row.
  manifest["pairs"] = ["gigpo:grpo", "grpo:rloo"]
  (sweep_root / "sweep.json").write_text(json.dumps(manifest))
  s = report.write_report(str(sweep_root), str(tmp_path / "a"))
  (pair,) = s["pairs"]["lake"]
  forward = s["envs"]["lake"]["gigpo"]["vs_baseline"]
  assert (pair["a"], pair["b"], pair["seeds"]) == ("gigpo", "grpo", [0, 1, 2])
  # grpo − gigpo: the baseline comparison negated, metric by metric.
  for m in ("final_success", "late_success", "auc_success"):
    assert pair["vs"][m]["mean"] == pytest.approx(-forward[m]["mean"])
    assert pair["vs"][m]["lo"] == pytest.approx(-forward[m]["hi"])
  assert pair["vs"]["final_success"]["mean"] == pytest.approx(-1 / 6)
  assert pair["machine_pairs"] == {
    "same": 1,
    "different": 1,
    "unknown": 1,
    "probes_agree": 1,
  }
  # Task by task with the sides swapped: 5 only gigpo, 1 only grpo.
  t = pair["tasks"]
  assert (t["seeds"], t["only_a"], t["only_b"]) == ([1, 2], 5, 1)
  readme = (tmp_path / "a" / "README.md").read_text()
  assert (tmp_path / "a" / "pairs_lake.png").stat().st_size > 1000
  assert "](pairs_lake.png)" in readme
  assert "| gigpo → grpo | 3 | -0.167 [" in readme
  assert "| 1 / 1 / 1 | 5 / 1 (p=0.22; 2 seeds, 20 tasks) |" in readme
  baseline_line, pair_line = report.findings(s)
  assert baseline_line.startswith("lake: gigpo − grpo final success = 0.167")
  assert pair_line.startswith("lake: grpo − gigpo final success = -0.167")
  assert "not distinguishable from gigpo (95% CI covers 0)" in pair_line
  assert "5 tasks only gigpo solved and 1 only grpo" in pair_line
  # The same pair asked for on the command line instead of in the sweep.
  manifest["pairs"] = []
  (sweep_root / "sweep.json").write_text(json.dumps(manifest))
  asked = report.write_report(
    str(sweep_root), str(tmp_path / "b"), pairs=["gigpo:grpo"]
  )
  assert asked["pairs"]["lake"] == s["pairs"]["lake"]
  assert "--pairs=gigpo:grpo" in (tmp_path / "b" / "README.md").read_text()
  for bad, says in (
    ("gigpo", "expected 'A:B'"),
    ("gigpo:ppo", r"\['ppo'\] not swept"),
    ("grpo:grpo", "A = B"),
  ):
    with pytest.raises(report.ReportError, match=says):
      report.write_report(str(sweep_root), str(tmp_path / "c"), pairs=[bad])


def _write_arms(root, arms) -> list[dict]:
  """Runs of env "lake" for {arm: (episodes a step or None, {seed:
  held-out success at RL steps 0, 1, ...})}; their manifest entries."""
  runs = []
  for arm, (per_step, by_seed) in arms.items():
    for seed, success in by_seed.items():
      name = f"lake/{arm}/seed{seed}"
      curve = [(i, v, 0.0) for i, v in enumerate(success)]
      _write_run(root, name, curve, episodes=per_step)
      runs.append({"name": name, "env": "lake", "estimator": arm, "seed": seed})
  return runs


def test_arms_of_unequal_cost_are_compared_at_equal_episodes(tmp_path):
  """An arm that plays more episodes a step is also read at the episodes
  both arms of a pair played (its curve interpolated between
  evaluations), paired over seeds, by hand."""
  root = tmp_path / "w"
  arms = {  # arm: (episodes a step, held-out success at steps 0-2 by seed)
    "grpo": (4, {0: (0.0, 0.2, 0.4), 1: (0.1, 0.3, 0.5)}),
    "grpo_wide": (8, {0: (0.0, 0.5, 0.7), 1: (0.1, 0.7, 0.8)}),
    "grpo_more": (6, {0: (0.0, 0.3, 0.6), 1: (0.1, 0.6, 0.6)}),
    "grpo_same": (4, {0: (0.0, 0.1, 0.2), 1: (0.1, 0.1, 0.1)}),
  }
  runs = _write_arms(root, arms)
  manifest = {
    "name": "width",
    "config": "width.py",
    "envs": ["lake"],
    "estimators": list(arms),
    "seeds": [0, 1],
    "baseline": "grpo",
    "smoke": False,
    "runs": runs,
    "pairs": ["grpo_wide:grpo_more"],
  }
  (root / "sweep.json").write_text(json.dumps(manifest))
  curve = report.load_run(root, runs[2])  # grpo_wide seed 0
  assert curve.episodes.tolist() == [0.0, 8.0, 16.0]
  s = report.write_report(str(root), str(tmp_path / "out"))
  lake = s["envs"]["lake"]
  # wide at 8 episodes is its step 1, grpo's step 2: 0.5 - 0.4, 0.7 - 0.5.
  wide = lake["grpo_wide"]["equal_episodes_vs_baseline"]
  assert wide["episodes"]["mean"] == 8.0
  assert wide["success"]["mean"] == pytest.approx(0.15)
  half = T_975_1 * (0.1 / math.sqrt(2)) / math.sqrt(2)  # s of (0.1, 0.2)
  assert wide["success"]["hi"] == pytest.approx(0.15 + half)
  # more at 8 episodes: a third of the way from its step 1 (6) to step 2
  # (12): 0.3 + 0.1 = 0.4 and 0.6; grpo's step 2: 0.4 and 0.5.
  more = lake["grpo_more"]["equal_episodes_vs_baseline"]
  assert more["success"]["mean"] == pytest.approx(0.05)
  # As many episodes as the baseline: the final comparison, no entry.
  assert "equal_episodes_vs_baseline" not in lake["grpo_same"]
  # The pair reads both at 12: wide halfway from step 1 to 2 (0.6, 0.75),
  # more at step 2 (0.6, 0.6).
  (pair,) = s["pairs"]["lake"]
  assert pair["equal_episodes"]["episodes"]["mean"] == 12.0
  assert pair["equal_episodes"]["success"]["mean"] == pytest.approx(-0.075)
  # At equal steps the same pair differs by the final values' difference.
  assert pair["vs"]["final_success"]["mean"] == pytest.approx(-0.15)
  out = tmp_path / "out"
  readme = (out / "README.md").read_text()
  assert "| grpo_wide | 8 | 0.150 [" in readme
  assert "| grpo_same | as many as grpo | (the final Δ) |" in readme
  assert "| grpo_wide → grpo_more | 12 | -0.075 [" in readme
  assert "](curves_lake_episodes.png)" in readme
  assert (out / "curves_lake_episodes.png").stat().st_size > 1000
  (line,) = [f for f in report.findings(s) if "grpo_wide − grpo " in f]
  equal = (
    r"; at equal training episodes \(8 each\) 0\.150 \[-0\.\d+, 0\.\d+\],"
    r" covers 0\.$"
  )
  assert re.search(equal, line)
  x, mean, _, _ = report.mean_curve(
    [report.load_run(root, r) for r in runs[4:6]], x="episodes"
  )
  assert x.tolist() == [0.0, 6.0, 12.0]  # grpo_more's two seeds
  assert mean.tolist() == pytest.approx([0.05, 0.45, 0.6])
  # An arm whose runs predate the counts: compared as before, and the
  # plot against episodes, which would need every run's, is left out.
  for seed in (0, 1):
    name = f"lake/grpo_old/seed{seed}"
    _write_run(root, name, [(0, 0.0, 0.0), (1, 0.1, 0.0), (2, 0.2, 0.0)])
    runs.append(
      {"name": name, "env": "lake", "estimator": "grpo_old", "seed": seed}
    )
  manifest["estimators"].append("grpo_old")
  (root / "sweep.json").write_text(json.dumps(manifest))
  s = report.write_report(str(root), str(tmp_path / "old"))
  assert s["envs"]["lake"]["grpo_wide"]["equal_episodes_vs_baseline"] == wide
  assert "equal_episodes_vs_baseline" not in s["envs"]["lake"]["grpo_old"]
  assert not (tmp_path / "old" / "curves_lake_episodes.png").exists()
  assert "_episodes.png" not in (tmp_path / "old" / "README.md").read_text()


def test_at_episodes_reads_every_arm_at_each_budget(tmp_path):
  """scripts/at_episodes.py: each arm read at fixed episode budgets (its
  curve interpolated between evaluations, budgets past its end left out),
  paired with the first arm on the seeds both reached, by hand."""
  root = tmp_path / "w"
  arms = {  # arm: (episodes a step or None, success at steps 0-2 by seed)
    "grpo": (4, {0: (0.0, 0.2, 0.4), 1: (0.1, 0.3, 0.5)}),
    "grpo_wide": (8, {0: (0.0, 0.5, 0.7), 1: (0.1, 0.7, 0.8)}),
    "grpo_old": (None, {0: (0.0, 0.1, 0.2)}),  # no episode counts
  }
  runs = _write_arms(root, arms)
  manifest = {
    "name": "budget",
    "envs": ["lake"],
    "estimators": list(arms),
    "seeds": [0, 1],
    "baseline": "grpo",
    "runs": runs,
  }
  (root / "sweep.json").write_text(json.dumps(manifest))
  wide0 = report.load_run(root, runs[2])
  # episodes 0, 8, 16: 4 halfway to step 1, 12 halfway to step 2, 20 past
  assert report.success_at_episodes(wide0, [4, 12, 20]) == pytest.approx(
    {4.0: 0.25, 12.0: 0.6}
  )
  assert report.success_at_episodes(report.load_run(root, runs[4]), [4]) == {}
  out = tmp_path / "at.json"
  done = subprocess.run(
    [
      sys.executable,
      str(pathlib.Path(__file__).parents[1] / "scripts" / "at_episodes.py"),
      str(root),
      "--episodes=4,8,12",
      f"--json={out}",
    ],
    capture_output=True,
    text=True,
    check=True,
  )
  got = json.loads(out.read_text())
  assert set(got["grpo"]) == {"4", "8"}  # grpo ends at 8 episodes
  assert got["grpo"]["4"]["per_seed"] == {"0": 0.2, "1": 0.3}
  wide = got["grpo_wide"]
  assert wide["4"]["per_seed"] == pytest.approx({"0": 0.25, "1": 0.4})
  assert wide["4"]["vs_first"]["mean"] == pytest.approx(0.075)
  assert wide["8"]["vs_first"]["mean"] == pytest.approx(0.15)  # as the report
  assert wide["12"]["success"]["mean"] == pytest.approx(0.675)
  assert wide["12"]["vs_first"] is None  # grpo never reached 12
  assert got["grpo_old"] == {}
  assert "| grpo_wide | 32.5 [" in done.stdout  # 4 episodes, in points
  assert re.search(r"\| \+7\.5 \[[-+.\d]+, [-+.\d]+\] \(n=2\) \|", done.stdout)


def _write_logged_run(wd, rows, solved, machine=None, probe=None):
  """A run dir whose metrics file holds `rows` and whose summary keeps
  per-task verdicts {rl_step: {task: bool}} (and one machine record, with
  its numerics probe if given)."""
  (wd / "logs").mkdir(parents=True)
  (wd / "logs" / "metrics.jsonl").write_text(
    "".join(json.dumps(r) + "\n" for r in rows)
  )
  summary = {
    "evals": [
      {"phase": "rl" if step else "sft", "rl_step": step, "solved": tasks}
      for step, tasks in solved.items()
    ]
  }
  if machine:
    summary["machines"] = [
      {
        "key": machine,
        "cpu_name": machine,
        **({"probe": probe} if probe else {}),
      }
    ]
  (wd / "summary.json").write_text(json.dumps(summary))


def _logged_rows(steps, *, step_offset=0.0, changes=None):
  """Step 0's evaluation and RL steps 1..steps, with wall-clock readings
  that differ run to run; `changes`: {rl_step: {key: value}}."""
  rows = [{"step": 0, "time": 5.0, "eval/success_rate": 0.25}]
  for i in range(1, steps + 1):
    row = {
      "step": i + step_offset,  # an optimizer count in some runs' rows
      "time": 100.0 * i + step_offset,
      "seconds": 3.0 + step_offset,
      "episodes_per_s": 9.0 + step_offset,
      "grad_norm": 0.5 * i,
      "success_rate": 0.1 * i,
      "ratio_max": math.nan if i == 1 else 1.0,  # a NaN matches a NaN
    }
    if i % 2 == 0:
      row["eval/success_rate"] = 0.3 + 0.01 * i
    row.update((changes or {}).get(i, {}))
    rows.append(row)
  rows.insert(2, {"step": 0, "sft/loss": 1.0})  # cold-start rows: ignored
  return rows


def test_prefix_match_finds_where_a_longer_run_parts_from_a_shorter(tmp_path):
  """report.prefix_match and scripts/same_prefix.py: every value but
  wall-clock ones and every kept verdict over the shared RL steps, the
  earliest difference named, by hand."""
  verdicts = {0: {"t0": False, "t1": True}, 2: {"t0": True, "t1": True}}
  long_verdicts = {**verdicts, 4: {"t0": True, "t1": False}}
  root = tmp_path / "w"
  short, long_ = (
    root / "lake" / "grpo" / "seed0",
    root / "lake" / "grpo_long" / "seed0",
  )
  _write_logged_run(short, _logged_rows(2), verdicts, "zen4", PROBE)
  _write_logged_run(
    long_, _logged_rows(4, step_offset=0.5), long_verdicts, "zen5", PROBE
  )
  same = report.prefix_match(short, long_)
  # steps 0-2: 1 value at step 0, 3 at step 1, 4 at step 2 (time, seconds,
  # episodes_per_s and the step count are not compared); 2 evaluations of
  # 2 tasks each (step 4's is past the shared steps)
  assert same["steps"] == 2
  assert (same["values"], same["verdicts"]) == (8, 4)
  assert same["first_difference"] is None
  assert same["machines"]["pair"] == "different"
  assert same["machines"]["probes_agree"]  # both recorded PROBE
  assert [m.split(",")[0] for k in "ab" for m in same["machines"][k]] == [
    "zen4",
    "zen5",
  ]
  # a value that parts at step 2, a key only one run logs at step 1
  parted = root / "lake" / "grpo_parted" / "seed0"
  _write_logged_run(
    parted,
    _logged_rows(3, changes={1: {"kl": 0.0}, 2: {"grad_norm": 1.5}}),
    verdicts,
    machine="zen4",
  )
  got = report.prefix_match(short, parted)
  assert got["first_difference"] == {
    "step": 1,
    "key": "kl",
    "a": None,
    "b": 0.0,
  }
  assert got["values"] == 9 and got["machines"]["pair"] == "same"
  # a verdict that parts at step 0, before any value does
  flipped = root / "lake" / "grpo_flipped" / "seed0"
  _write_logged_run(
    flipped, _logged_rows(2), {0: {"t0": True, "t1": True}, 2: verdicts[2]}
  )
  got = report.prefix_match(flipped, short)
  assert got["first_difference"] == {
    "step": 0,
    "key": "solved:t0",
    "a": True,
    "b": False,
  }
  assert got["machines"]["pair"] == "unknown"  # flipped recorded none
  (root / "sweep.json").write_text(
    json.dumps(
      {
        "name": "prefix",
        "envs": ["lake"],
        "estimators": ["grpo", "grpo_long", "grpo_parted"],
        "seeds": [0],
        "baseline": "grpo",
        "runs": [],
      }
    )
  )
  script = pathlib.Path(__file__).parents[1] / "scripts" / "same_prefix.py"

  def same_prefix(*args):
    return subprocess.run(
      [sys.executable, str(script), str(root), *args],
      capture_output=True,
      text=True,
    )

  out = tmp_path / "same.json"
  done = same_prefix("--pairs=grpo:grpo_long", f"--json={out}")
  assert done.returncode == 0, done.stderr
  assert (
    "| grpo:grpo_long | 0 | 0-2 | 8 | 4 | yes | different, probes agree |"
    in done.stdout
  )
  assert json.loads(out.read_text())[0]["first_difference"] is None
  done = same_prefix("--pairs=grpo:grpo_long,grpo:grpo_parted")
  assert done.returncode == 1  # one pair parts
  assert "no: step 1 kl None / 0.0" in done.stdout
  assert "1 of 2 pairs identical" in done.stdout


def test_machine_pairs_and_probes_by_hand():
  """machine_pair goes by keys, but one key measured with two probes is
  "different"; probes_agree needs every key measured and one probe;
  count_machine_pairs counts agreeing probes among "different"."""
  other = "v1:" + "6" * 16
  probes = {"a": (PROBE,), "b": (PROBE,), "c": (other,), "e": (PROBE, other)}
  assert report.probes_agree(("a",), ("b",), probes)
  assert report.probes_agree(("a", "b"), ("a",), probes)  # a resumed run
  assert not report.probes_agree(("a",), ("c",), probes)
  assert not report.probes_agree(("a",), ("d",), probes)  # d unmeasured
  assert not report.probes_agree(None, ("a",), probes)
  assert not report.probes_agree(("e",), ("e",), probes)
  assert report.machine_pair(("a",), ("a",), probes) == "same"
  assert report.machine_pair(("e",), ("e",)) == "same"  # keys alone
  assert report.machine_pair(("e",), ("e",), probes) == "different"
  keys = [("a",), ("b",), ("c",), ("d",), ("e",)]
  pairs = [(keys[0], k) for k in keys] + [(None, keys[0]), (("e",), ("e",))]
  assert report.count_machine_pairs(pairs, probes) == {
    "same": 1,  # a, a
    "different": 5,  # a-b (probes agree), a-c, a-d, a-e, e-e
    "unknown": 1,
    "probes_agree": 1,
  }
  records = [_machine("a", "zen4", probe=PROBE), _machine("d", "zen5")]
  got_keys, labels, got_probes = report.run_machines(records)
  assert got_keys == ("a", "d") and got_probes == {"a": (PROBE,)}
  assert labels["d"].startswith("zen5, 2 cores")
  # A resumed launch on the same key measured another probe: both kept.
  records.append(_machine("a", "zen4", probe=other))
  assert report.run_machines(records)[2] == {"a": (PROBE, other)}
  assert report.merge_probes(
    {"a": (PROBE,)}, {"a": (PROBE, other), "b": ()}
  ) == {
    "a": (PROBE, other),
    "b": (),
  }


def test_runs_without_episode_counts_have_no_equal_episode_comparison(
  sweep_root, tmp_path
):
  s = report.write_report(str(sweep_root), str(tmp_path / "a"))
  assert "equal_episodes_vs_baseline" not in s["envs"]["lake"]["gigpo"]
  assert not (tmp_path / "a" / "curves_lake_episodes.png").exists()
  assert (
    "equal training episodes" not in (tmp_path / "a" / "README.md").read_text()
  )


def _curve(seed, steps, success):
  return report.RunCurve(
    name=f"e/x/seed{seed}",
    env="e",
    estimator="x",
    seed=seed,
    steps=np.asarray(steps, np.float64),
    success=np.asarray(success, np.float64),
    returns=np.zeros(len(steps)),
    finite=True,
    rows=len(steps),
    estimator_config={},
    seconds=None,
  )


def test_heatmaps_leave_out_learned_critics():
  specs = [
    ("grpo", "grpo", {}),
    ("ppo", "gae", {"level": "turn"}),
    ("gigpo", "gigpo", {"gamma": 0.95}),
  ]
  assert [s[0] for s in report.critic_free(specs)] == ["grpo", "gigpo"]


def test_mean_curve_interpolates_onto_union():
  a = _curve(0, [0, 2], [0.0, 1.0])  # evaluated at 0 and 2 only: 0.5 at 1
  b = _curve(1, [0, 1, 2], [0.0, 0.0, 0.0])
  steps, mean, lo, hi = report.mean_curve([a, b])
  assert steps.tolist() == [0, 1, 2]
  assert mean.tolist() == pytest.approx([0.0, 0.25, 0.5])
  # Two seeds: t_{0.975,1} = 12.706 times s / sqrt(2) = |a - b| / 2.
  assert hi[2] - mean[2] == pytest.approx(12.706204736 * 0.5)


def test_bad_inputs_are_named_errors(sweep_root, tmp_path):
  with pytest.raises(report.ReportError, match="sweep.json"):
    report.load_sweep(tmp_path / "nowhere")
  bad = sweep_root / "lake/grpo/seed1/logs/metrics.jsonl"
  bad.write_text('{"step": 1, "loss": 0.1}\n{"step": 2, "lo')
  with pytest.raises(report.ReportError, match="malformed metrics"):
    report.load_sweep(sweep_root)
  bad.write_text('{"loss": 0.1}\n')
  with pytest.raises(report.ReportError, match="no numeric 'step'"):
    report.load_sweep(sweep_root)
  bad.unlink()
  with pytest.raises(report.ReportError, match="missing metrics"):
    report.load_sweep(sweep_root)
  (sweep_root / "sweep.json").write_text('{"name": "x"}')
  with pytest.raises(report.ReportError, match="lacks"):
    report.load_sweep(sweep_root)


def test_unfinished_runs_are_listed_or_counted_per_env():
  assert report._missing_line([]) == "0"
  assert report._missing_line(["a/x/seed0"]) == "1 (a/x/seed0)"
  many = [f"lake/e{i}/seed0" for i in range(5)] + ["fl/e/seed0", "fl/e/seed1"]
  assert report._missing_line(many) == (
    "7 (lake: 5, fl: 2; names in results.json)"
  )


def _paired(lo, hi, n=3):
  return {"mean": (lo + hi) / 2, "lo": lo, "hi": hi, "n": n}


def test_findings_flag_an_interval_without_width():
  same = {"mean": 0.004, "lo": 0.004, "hi": 0.004, "n": 3}
  row = {
    "vs_baseline": {
      "final_success": _paired(-0.02, 0.03),
      "late_success": same,
    }
  }
  summary = {"baseline": "grpo", "envs": {"qa": {"grpo": {}, "rloo": row}}}
  (line,) = report.findings(summary)
  assert line.endswith(
    "though final is not (every seed's difference is the same, so the "
    "interval has no width)."
  )
  row["vs_baseline"]["late_success"] = _paired(-0.01, 0.01)
  (line,) = report.findings(summary)
  assert "no width" not in line


@pytest.mark.parametrize(
  "final, late, says",
  [
    (
      (0.01, 0.2),
      (0.02, 0.1),
      "above the baseline (95% CI excludes 0); late"
      " success (second half of RL) 0.060 [0.020, 0.100], also above the"
      " baseline.",
    ),
    (
      (-0.2, -0.01),
      (-0.1, 0.02),
      "below the baseline (95% CI excludes 0);"
      " late success (second half of RL) -0.040 [-0.100, 0.020]: it covers 0,"
      " so the final difference is not confirmed by the late evaluations.",
    ),
    (
      (-0.1, 0.2),
      (0.01, 0.05),
      "(95% CI covers 0); late success (second half"
      " of RL) 0.030 [0.010, 0.050]: above the baseline (95% CI excludes 0),"
      " though final is not.",
    ),
    (
      (0.01, 0.2),
      (-0.2, -0.01),
      "late success (second half of RL) -0.105"
      " [-0.200, -0.010]: below the baseline, the opposite of final.",
    ),
    (
      (None, None),
      (0.01, 0.2),
      "too few paired seeds for an interval; late success (second half of RL)",
    ),
  ],
)
def test_findings_say_whether_late_success_confirms_final(final, late, says):
  row = {
    "vs_baseline": {
      "final_success": _paired(*final)
      if final[0] is not None
      else {"mean": 0.1, "lo": None, "hi": None, "n": 1},
      "late_success": _paired(*late),
    }
  }
  summary = {"baseline": "grpo", "envs": {"box": {"grpo": {}, "ppo": row}}}
  (line,) = report.findings(summary)
  assert line.startswith("box: ppo − grpo final success = ")
  assert says in line, line
  n = row["vs_baseline"]["final_success"]["n"]
  assert f" over {n} paired seed{'' if n == 1 else 's'}: " in line, line


def test_literature_note_names_agreeing_and_unresolved_envs():
  def row(lo, hi):
    return {"vs_baseline": {"final_success": {"lo": lo, "hi": hi, "n": 3}}}

  summary = {
    "smoke": False,
    "baseline": "grpo",
    "envs": {
      "box": {"grpo": {}, "gigpo": row(0.01, 0.2), "rloo": row(0.1, 0.3)},
      "lake": {"grpo": {}, "gigpo": row(-0.1, 0.1)},
      "qa": {"grpo": {}, "gigpo_std": row(-0.01, 0.02)},
    },
  }
  note = report._literature_note(summary)
  assert note.endswith(
    "Here GiGPO's final success is above GRPO's on box (gigpo), in "
    "agreement; on lake, qa no GiGPO variant is distinguishably above GRPO."
  )
  # Above on final, but the late evaluations' interval covers 0.
  summary["envs"]["box"]["gigpo"]["vs_baseline"]["late_success"] = {
    "lo": -0.02,
    "hi": 0.1,
    "n": 3,
  }
  assert "on box (gigpo; late success does not confirm it), in agreement" in (
    report._literature_note(summary)
  )
  summary["envs"]["box"]["gigpo"] = row(-0.05, 0.2)
  assert "no GiGPO variant is distinguishably above GRPO on any" in (
    report._literature_note(summary)
  )
  # Against a GiGPO baseline (arms of one estimator) the rows say nothing
  # about GiGPO vs GRPO, whatever their names.
  summary["envs"]["box"]["gigpo"] = row(0.01, 0.2)
  assert report._literature_note({**summary, "baseline": "gigpo"}).endswith(
    "pairs its arms against gigpo, not a GRPO arm, so it does not test that "
    "claim."
  )
  summary["smoke"] = True
  assert report._literature_note(summary).endswith(
    "neither confirm nor contradict it."
  )


def test_compare_conditions_pairs_runs_by_seed(tmp_path):
  # Condition A and B for one estimator; the final evaluation is RL step 2.
  finals = {"a": {0: 0.25, 1: 0.5, 2: 0.5}, "b": {0: 0.5, 1: 0.5, 3: 0.9}}
  for cond, by_seed in finals.items():
    for seed, final in by_seed.items():
      # Seed 0 ran on machine A under both, seed 1 on A then B.
      key = "b" * 16 if (cond, seed) == ("b", 1) else "a" * 16
      # Per-task verdicts on 4 tasks (rates as `finals`) under both
      # conditions for seed 0, only under B for seed 1.
      kept = (cond, seed) in (("a", 0), ("b", 0), ("b", 1))
      _write_run(
        tmp_path / cond,
        f"qa/grpo/seed{seed}",
        [(0, 0.0, 0.0), (1, 0.1, 0.0), (2, final, 0.0)],
        machines=[_machine(key)],
        solved=(_first(0, 4), _first(int(4 * final), 4)) if kept else None,
      )
  (row,) = report.compare_conditions(
    tmp_path / "a", tmp_path / "b", "qa", ["grpo"], ["eval/success_rate"]
  )
  # Seeds 0 and 1 finished under both: differences 0.25 and 0.0.
  assert row["a"] == {0: 0.25, 1: 0.5} and row["b"] == {0: 0.5, 1: 0.5}
  half = 12.706204736174707 * (0.25 / math.sqrt(2)) / math.sqrt(2)
  d = row["b_minus_a"]
  assert d["n"] == 2 and d["mean"] == pytest.approx(0.125)
  assert (d["lo"], d["hi"]) == pytest.approx((0.125 - half, 0.125 + half))
  table = report.comparison_table([row], "on", "off")
  assert "| grpo | `eval/success_rate` | 25.0 / 50.0 | 50.0 / 50.0 |" in table
  assert row["machine_pairs"] == {
    "same": 1,
    "different": 1,
    "unknown": 0,
    "probes_agree": 0,  # no probes recorded
  }
  # Task by task, seed 0 only (seed 1's A run kept none): A solved t0,
  # B t0 and t1: 0 / 1, p = 1.
  t = row["tasks"]
  assert (t["seeds"], t["n"], t["only_a"], t["only_b"]) == ([0], 4, 0, 1)
  assert t["p_value"] == 1.0
  assert table.rstrip().endswith("| 1 / 1 / 0 | 0 / 1 (p=1; 1 seed, 4 tasks) |")
  with pytest.raises(report.ReportError, match="no RL row logs"):
    report.compare_conditions(
      tmp_path / "a", tmp_path / "b", "qa", ["grpo"], ["eval/nope"]
    )
  with pytest.raises(report.ReportError, match="no seed finished under both"):
    report.compare_conditions(
      tmp_path / "a", tmp_path / "b", "qa", ["gigpo"], ["eval/success_rate"]
    )


def test_compare_conditions_pairs_two_arms_of_one_sweep_late_or_final(
  tmp_path,
):
  # RL evaluations at steps 1, 2 and 4; late = the mean over steps >= 2.
  curves = {
    ("grpo", 0): (0.9, 0.2, 0.4),  # late 0.3
    ("grpo", 1): (0.9, 0.5, 0.5),  # late 0.5
    ("grpo_dyn", 0): (0.0, 0.4, 0.6),  # late 0.5
    ("grpo_dyn", 1): (0.0, 0.5, 0.7),  # late 0.6
  }
  for (arm, seed), (s1, s2, s4) in curves.items():
    _write_run(
      tmp_path,
      f"qa/{arm}/seed{seed}",
      [(0, 0.1, 0.0), (1, s1, 0.0), (2, s2, 0.0), (4, s4, 0.0)],
      # seed 0's runs keep verdicts on 10 tasks (final: 4 and 6 solved)
      solved=(_first(1, 10), _first(int(10 * s4), 10)) if seed == 0 else None,
    )
  final, late = report.compare_conditions(
    tmp_path,
    tmp_path,
    "qa",
    ["grpo:grpo_dyn"],
    ["eval/success_rate", "late:eval/success_rate"],
  )
  assert final["estimator"] == late["estimator"] == "grpo:grpo_dyn"
  assert final["a"] == {0: 0.4, 1: 0.5} and final["b"] == {0: 0.6, 1: 0.7}
  assert final["b_minus_a"]["mean"] == pytest.approx(0.2)
  assert late["a"] == pytest.approx({0: 0.3, 1: 0.5})
  assert late["b"] == pytest.approx({0: 0.5, 1: 0.6})
  assert late["b_minus_a"]["mean"] == pytest.approx(0.15)
  t = final["tasks"]  # final verdicts of seed 0: only the dynamic arm's 2
  assert (t["seeds"], t["n"], t["only_a"], t["only_b"]) == ([0], 10, 0, 2)
  assert late["tasks"] is None  # task by task is the final evaluation's
  for bad in ("grpo:", ":grpo", "grpo:a:b", "qa/grpo"):
    with pytest.raises(report.ReportError, match="expected EST or EST_A:EST_B"):
      report.compare_conditions(
        tmp_path, tmp_path, "qa", [bad], ["eval/success_rate"]
      )
  with pytest.raises(report.ReportError, match=r"\(nope\)"):
    report.compare_conditions(
      tmp_path, tmp_path, "qa", ["grpo:nope"], ["eval/success_rate"]
    )


def _distill_run(root, name, success, params=1000, distill=None):
  d = root / name
  d.mkdir()
  summary = {
    "params": params,
    "success_after_sft": success,
    "success_after_rl": success,
    "distill": distill,
  }
  (d / "summary.json").write_text(json.dumps(summary))


def test_distill_summary_by_hand(tmp_path):
  for seed, s in enumerate((0.10, 0.20)):
    _distill_run(tmp_path, f"expert_seed{seed}", s)
  stats = {"pass_at_k": 0.5, "kept": 40, "teacher_eval_success_rate": 0.25}
  for seed, s in enumerate((0.20, 0.40)):
    _distill_run(tmp_path, f"token_seed{seed}", s, distill=stats)
  _distill_run(tmp_path, "token_seed2", 0.60, distill={**stats, "kept": 70})
  # seed 2's log: 12 updates, agreement i / 12; the last 10 (i = 3..12)
  # average 7.5 / 12
  logs = tmp_path / "token_seed2" / "logs"
  logs.mkdir()
  lines = [{"step": 0, "distill/kept": 70.0}] + [
    {"step": i, "distill/top1_agreement": i / 12} for i in range(1, 13)
  ]
  (logs / "metrics.jsonl").write_text(
    "".join(json.dumps(r) + "\n" for r in lines)
  )
  rows = report.load_distill_runs(tmp_path)
  summary = report.distill_summary(rows)
  assert summary["expert"]["vs_baseline"] is None
  assert summary["expert"]["pass_at_k"] is None
  token = summary["token"]
  assert token["seeds"] == [0, 1, 2]
  assert token["success"]["mean"] == pytest.approx(0.4)
  # paired over seeds 0 and 1 only: differences 0.1 and 0.2
  assert token["vs_baseline"]["n"] == 2
  assert token["vs_baseline"]["mean"] == pytest.approx(0.15)
  half = T_975_1 * np.std([0.1, 0.2], ddof=1) / 2**0.5
  assert token["vs_baseline"]["hi"] == pytest.approx(0.15 + half)
  assert token["kept"] == pytest.approx(50.0)
  assert token["final_top1_agreement"] == pytest.approx(7.5 / 12)
  assert token["final_divergence_per_token"] is None
  table = report.distill_table(summary)
  assert "| token | 1,000 | 3 | 0.400 [" in table
  report.plot_distill(rows, summary, tmp_path / "success.png")
  assert (tmp_path / "success.png").read_bytes()[:4] == b"\x89PNG"


def test_online_stage_summary_by_hand(tmp_path):
  # Two arms x two seeds from the same cold start (0.10 / 0.20); 2 RL steps.
  teacher = {"teacher": "t", "teacher_eval_success_rate": 0.5}
  finals = {"rl": (0.15, 0.20), "opd": (0.30, 0.40)}
  for arm, after in finals.items():
    for seed, (start, end) in enumerate(zip((0.10, 0.20), after, strict=True)):
      name = f"{arm}_seed{seed}"
      _distill_run(tmp_path, name, start)
      d = tmp_path / name
      summary = json.loads((d / "summary.json").read_text())
      summary.update(success_after_rl=end, rl_teacher=teacher)
      (d / "summary.json").write_text(json.dumps(summary))
      (d / "config.json").write_text("{}")
      t1 = {"teacher_div": 0.4, "teacher_top1_agreement": 0.6}
      t2 = {"teacher_div": 0.2, "teacher_top1_agreement": 0.8}
      lines = [
        {"step": 0, "eval/success_rate": start},
        {"step": 1, "loss": 1.0, **t1},
        {"step": 2, "loss": 1.0, **t2, "eval/success_rate": end},
      ]
      (d / "logs").mkdir()
      (d / "logs" / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines)
      )
  rows = report.load_distill_runs(tmp_path)
  summary = report.distill_summary(rows, "rl", metric="success_after_rl")
  assert list(summary) == ["rl", "opd"]
  opd = summary["opd"]
  assert opd["start"]["mean"] == pytest.approx(0.15)
  assert opd["success"]["mean"] == pytest.approx(0.35)
  # paired: 0.30 - 0.15 and 0.40 - 0.20
  assert opd["vs_baseline"]["mean"] == pytest.approx(0.175)
  assert opd["final_teacher_div"] == pytest.approx(0.3)
  assert opd["final_teacher_top1_agreement"] == pytest.approx(0.7)
  assert opd["teacher_eval_success_rate"] == pytest.approx(0.5)
  table = report.online_table(summary, "rl")
  assert "| opd | 2 | 0.150 | 0.350 [" in table
  report.plot_online(tmp_path, rows, summary, tmp_path / "curves.png")
  assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_distill_runs_bad_root(tmp_path):
  with pytest.raises(report.ReportError, match="no <source>_seed"):
    report.load_distill_runs(tmp_path)


def test_cold_start_rows_are_not_rl_rows():
  rows = [
    {"step": 0, "distill/kept": 10.0},
    {"step": 1, "distill/loss": 1.0},
    {"step": 0, "eval/success_rate": 0.2},
    {"step": 1, "loss": 0.5, "eval/success_rate": 0.3},
  ]
  assert report.sft_eval_row(rows) == rows[2]
  assert [r["loss"] for r in report.rl_rows(rows)] == [0.5]


def test_plot_run_lists_each_step_once_after_a_resume(tmp_path):
  """A run resumed from an older log (before stale rows were set aside)
  holds steps twice; the plot keeps the rewrite, as the report does."""
  logs = tmp_path / "run" / "logs"
  logs.mkdir(parents=True)
  rl = {"seconds": 1.0, "train_seconds": 1.0, "loss": 0.1}
  rows = [
    {"step": 3, "time": 0.0, "sft/loss": 1.0},
    {"step": 0, "time": 1.0, "eval/success_rate": 0.25},
    {"step": 1, "time": 3.0, "success_rate": 0.5, **rl},
    {
      "step": 2,
      "time": 5.0,
      "success_rate": 0.0,
      "eval/success_rate": 0.0,
      **rl,
    },
    {
      "step": 2,
      "time": 9.0,
      "success_rate": 1.0,
      "eval/success_rate": 0.75,
      **rl,
    },
  ]
  (logs / "metrics.jsonl").write_text(
    "".join(json.dumps(r) + "\n" for r in rows)
  )
  root = pathlib.Path(__file__).parents[1]
  out = subprocess.run(
    [
      sys.executable,
      str(root / "scripts" / "plot_run.py"),
      f"--workdir={tmp_path / 'run'}",
      f"--out={tmp_path / 'curve.png'}",
    ],
    capture_output=True,
    text=True,
    check=True,
    env={**os.environ, "PYTHONPATH": str(root)},
  ).stdout
  assert "eval step    0: success 0.250" in out
  assert "eval step    2: success 0.750" in out
  assert "success 0.000" not in out
  assert "RL phase wall time: 0.1 min" in out  # from 1.0 s to 9.0 s
  assert (tmp_path / "curve.png").stat().st_size > 0


def _add_difficulties(run_dir, rates):
  """Adds eval/success_rate/d<k> = rates(row)[k] to every evaluation row."""
  path = pathlib.Path(run_dir) / "logs" / "metrics.jsonl"
  rows = [json.loads(line) for line in path.read_text().splitlines()]
  for r in rows:
    if "eval/success_rate" in r:
      r.update({f"eval/success_rate/d{k}": v for k, v in rates(r).items()})
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_final_success_per_difficulty(tmp_path):
  # load_run: each evaluation's eval/success_rate/d<k> entries.
  _write_run(tmp_path, "s/x/seed0", [(0, 0.1, 0.0), (2, 0.5, 0.0)])
  _add_difficulties(tmp_path / "s/x/seed0", lambda r: {0: r["step"], 2: 0.25})
  run = {"name": "s/x/seed0", "env": "s", "estimator": "x", "seed": 0}
  curve = report.load_run(tmp_path, run)
  assert curve.final_by_difficulty == {0: 8.5, 2: 0.25}  # RL step 2's row
  np.testing.assert_array_equal(curve.success_by_difficulty[0], [0.0, 8.5])
  np.testing.assert_array_equal(curve.difficulty_steps, [0, 2])
  # A step-0 row without them (warm-started by older code): the curve
  # starts at the first evaluation that has them.
  _write_run(tmp_path, "s/x/seed1", [(0, 0.1, 0.0), (1, 0.2, 0), (2, 0.5, 0)])
  _add_difficulties(
    tmp_path / "s/x/seed1", lambda r: {0: 0.5, 2: 0.25} if r["step"] else {}
  )
  old = report.load_run(tmp_path, {**run, "name": "s/x/seed1", "seed": 1})
  assert old.final_by_difficulty == {0: 0.5, 2: 0.25}
  np.testing.assert_array_equal(old.difficulty_steps, [1, 2])
  # Evaluations that disagree on the difficulties: no per-difficulty curve.
  _write_run(tmp_path, "s/x/seed2", [(0, 0.1, 0.0), (2, 0.5, 0.0)])
  _add_difficulties(
    tmp_path / "s/x/seed2", lambda r: {0: 0.5, 2: 0.25} if r["step"] else {0: 0}
  )
  odd = report.load_run(tmp_path, {**run, "name": "s/x/seed2", "seed": 2})
  assert odd.success_by_difficulty == {} and odd.difficulty_steps.size == 0

  # summarize_env: per-difficulty finals, paired against the baseline.
  def at(est, seed, d0, d1):
    c = _curve(seed, [0, 1], [0.0, (d0 + d1) / 2])
    c.estimator = est
    c.success_by_difficulty = {0: np.r_[0.0, d0], 1: np.r_[0.0, d1]}
    return c

  base = {0: (0.5, 0.4), 1: (0.7, 0.4), 2: (0.6, 0.5)}
  arm = {0: (0.5, 0.5), 1: (0.7, 0.7), 2: (0.6, 0.6)}  # d1 +0.1, +0.3, +0.1
  curves = [at("b", s, *v) for s, v in base.items()]
  curves += [at("a", s, *v) for s, v in arm.items()]
  stats = report.summarize_env(curves, "b", threshold=0.5)
  d1 = stats["a"]["vs_baseline"]["final_success_d1"]
  half = T_975_2 * (0.2 / math.sqrt(3)) / math.sqrt(3)
  assert d1["mean"] == pytest.approx(1 / 6)
  assert (d1["lo"], d1["hi"]) == pytest.approx((1 / 6 - half, 1 / 6 + half))
  assert stats["a"]["vs_baseline"]["final_success_d0"]["mean"] == 0.0
  assert stats["b"]["final_success_d1"]["mean"] == pytest.approx(1.3 / 3)
  table = report._env_table("s", stats, "b")
  assert "| estimator | d0 | Δ d0 | d1 | Δ d1 |" in table
  # Runs that evaluated different difficulties get no per-difficulty rows.
  curves[0].success_by_difficulty = {0: np.r_[0.0, 0.5]}
  stats = report.summarize_env(curves, "b", threshold=0.5)
  assert not any(k.startswith("final_success_d") for k in stats["a"])
  assert "Δ d0" not in report._env_table("s", stats, "b")


def test_expert_ceiling_is_read_averaged_and_stated(tmp_path):
  ceilings = {  # summary.json `expert_ceiling` of each seed's run
    0: {"success_rate": 0.75, "success_rate/d0": 1.0, "success_rate/d2": 0.5},
    1: {"success_rate": 0.5, "success_rate/d0": 1.0, "success_rate/d2": 0.0},
    2: {"error": "RuntimeError: boom"},  # a failed expert: not a ceiling
  }
  curves = []
  for seed, ceiling in ceilings.items():
    name = f"s/x/seed{seed}"
    _write_run(tmp_path, name, [(0, 0.1, 0.0), (2, 0.5, 0.0)])
    path = tmp_path / name / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "expert_ceiling": ceiling}))
    run = {"name": name, "env": "s", "estimator": "x", "seed": seed}
    curves.append(report.load_run(tmp_path, run))
  assert curves[0].expert_ceiling == ceilings[0]
  assert curves[2].expert_ceiling == {}
  assert report.expert_ceiling_of(curves) == {
    "success_rate": 0.625,
    "success_rate/d0": 1.0,
    "success_rate/d2": 0.25,
  }
  stats = report.summarize_env(curves, "x", threshold=0.5)
  assert stats["x"]["expert_ceiling"]["success_rate"] == 0.625
  table = report._env_table("s", stats, "x")
  assert "scripted expert solves 0.625 of the held-out tasks" in table
  assert "(d0 1.000, d2 0.250)" in table
  # runs whose ceilings name different difficulties, or none: no sentence
  curves[1].expert_ceiling = {"success_rate": 0.5}
  assert report.expert_ceiling_of(curves) == {}
  assert report.expert_ceiling_of(curves[2:]) == {}
  stats = report.summarize_env(curves, "x", threshold=0.5)
  assert "expert_ceiling" not in stats["x"]
  assert "scripted expert" not in report._env_table("s", stats, "x")


def test_report_plots_and_tables_each_difficulty(tmp_path):
  root, runs = tmp_path / "cur", []
  for (est, seed), curve in CURVES.items():
    name = f"lake/{est}/seed{seed}"
    _write_run(root, name, curve)
    # Difficulty 1 at half difficulty 0's rate.
    _add_difficulties(
      root / name,
      lambda r: {0: r["eval/success_rate"], 1: r["eval/success_rate"] / 2},
    )
    # A learned critic's estimator: no advantage heatmaps (seconds of JAX).
    config = {"estimator": {"name": "gae", "level": "turn"}}
    (root / name / "config.json").write_text(json.dumps(config))
    runs.append({"name": name, "env": "lake", "estimator": est, "seed": seed})
  manifest = {
    "name": "cur",
    "config": "cur.py",
    "envs": ["lake"],
    "estimators": ["grpo", "gigpo"],
    "seeds": [0, 1, 2],
    "baseline": "grpo",
    "runs": runs,
  }
  (root / "sweep.json").write_text(json.dumps(manifest))
  s = report.write_report(str(root), str(tmp_path / "out"))
  gigpo = s["envs"]["lake"]["gigpo"]
  # d1 = d0 / 2, so its paired difference is half of final success's.
  d0, d1 = (gigpo["vs_baseline"][f"final_success_d{d}"] for d in (0, 1))
  assert d0["mean"] == pytest.approx(1 / 6)
  assert d1["mean"] == pytest.approx(1 / 12)
  assert (tmp_path / "out" / "difficulty_lake.png").stat().st_size > 0
  readme = (tmp_path / "out" / "README.md").read_text()
  assert "](difficulty_lake.png)" in readme and "| Δ d1 |" in readme
  assert not (tmp_path / "out" / "advantages.png").exists()


def test_read_solved_and_pool_pairings(tmp_path):
  # Seed 0: an evaluate_checkpoints output, stage (step 0) and RL step 10;
  # seed 1: a run's summary.json, after SFT (0) and at its last RL step (2).
  evals = tmp_path / "eval_s0.json"
  evals.write_text(
    json.dumps(
      {
        "results": {
          "0": {"solved": _first(4, 6)},  # t0-t3
          "10": {"solved": _first(1, 6) | {"t5": True}},  # t0, t5
        }
      }
    )
  )
  _write_run(
    tmp_path,
    "run_s1",
    [(0, 0.5, 0.0), (1, 0.5, 0.0), (2, 0.25, 0.0)],
    solved=(_first(2, 4), _first(1, 4)),
  )
  summary = tmp_path / "run_s1" / "summary.json"
  assert report.read_solved(f"{summary}:2") == _first(1, 4)
  for bad, match in (
    (f"{evals}", "FILE:STEP"),
    (f"{evals}:x", "FILE:STEP"),
    (f"{evals}:5", "no per-task results for step 5"),
    (f"{summary}:1", "no per-task results for step 1"),
    (f"{tmp_path}/nope.json:0", "missing"),
  ):
    with pytest.raises(report.ReportError, match=match):
      report.read_solved(bad)
  # Seed 0 lost t1-t3, gained t5 (3 / 1); seed 1 lost t1 (1 / 0).
  # Pooled 4 / 1 of 5 discordant: P(X <= 1) + P(X >= 4) = 12 / 32.
  script = pathlib.Path(__file__).parents[1] / "scripts" / "pool_pairings.py"
  out = tmp_path / "pooled.json"
  done = subprocess.run(
    [
      sys.executable,
      str(script),
      f"--before={evals}:0,{summary}:0",
      f"--after={evals}:10,{summary}:2",
      f"--out={out}",
    ],
    capture_output=True,
    text=True,
    check=True,
  )
  got = json.loads(out.read_text())
  assert [(p["only_a"], p["only_b"], p["n"]) for p in got["pairs"]] == [
    (3, 1, 6),
    (1, 0, 4),
  ]
  pooled = got["pooled"]
  assert (pooled["n"], pooled["only_a"], pooled["only_b"]) == (10, 4, 1)
  assert pooled["p_value"] == pytest.approx(12 / 32)
  assert "| pooled |  | 10 | 0.600 | 0.300 | 4 | 1 | 0.375 |" in done.stdout
  bad = subprocess.run(
    [sys.executable, str(script), f"--before={evals}:0", "--after=a:1,b:2"],
    capture_output=True,
    text=True,
  )
  assert bad.returncode != 0 and "pair them one to one" in bad.stderr


def test_arm_stats_averages_steps_then_seeds(tmp_path):
  """scripts/arm_stats.py: a run's RL steps averaged (an evaluation row
  and the SFT rows left out, a resumed run's rewrite of a step winning),
  then its arm's seeds, and the median and extremes over the steps
  likewise; wall time
  and peak memory from the sweep timing, the memory only where every
  seed's timing has it."""

  def run(arm, seed, kls, seconds, peak=None, divisors=None, clipped=None):
    wd = tmp_path / "root" / "lake" / arm / f"seed{seed}"
    (wd / "logs").mkdir(parents=True)
    rows = [{"step": 1, "sft/loss": 2.0}, {"step": 0, "eval/success_rate": 0.1}]
    rows += [
      {"step": i + 1, "episodes": 64, "kl": kl, "grad_norm": 1.0}
      for i, kl in enumerate(kls)
    ]
    for r, d in zip(rows[2:], divisors or [None] * len(kls), strict=True):
      if d is not None:
        r["adv_divisor"] = d
    for r, c in zip(rows[2:], clipped or [None] * len(kls), strict=True):
      if c is not None:
        r["grad_clipped"] = c
    (wd / "logs" / "metrics.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in rows)
    )
    (wd / "summary.json").write_text("{}")
    timing = {"seconds": seconds, **({"peak_rss_mib": peak} if peak else {})}
    (wd / "sweep_timing.json").write_text(json.dumps(timing))

  run("gigpo", 0, [0.1, 9.0, 0.3], 100.0, peak=1000.0)  # mean 3.1, median 0.3
  run("gigpo", 1, [0.5, 0.7, 0.2], 200.0, peak=3000.0)  # 0.7 rewritten: 0.35
  # seed 1's step 2 written again by a resumed launch: 0.5, 0.2 -> 0.35
  rows = (tmp_path / "root/lake/gigpo/seed1/logs/metrics.jsonl").read_text()
  rows = rows.replace('"step": 3,', '"step": 2,')
  (tmp_path / "root/lake/gigpo/seed1/logs/metrics.jsonl").write_text(rows)
  run("grpo", 0, [0.4, 0.1], 50.0, divisors=[0.5, 0.07], clipped=[1.0, 0.5])
  (tmp_path / "root/lake/grpo/seed1").mkdir()  # unfinished: left out
  out = tmp_path / "stats.json"
  subprocess.run(
    [
      sys.executable,
      str(pathlib.Path(__file__).parents[1] / "scripts" / "arm_stats.py"),
      str(tmp_path / "root"),
      "--env=lake",
      f"--json={out}",
    ],
    check=True,
    capture_output=True,
  )
  stats = json.loads(out.read_text())
  assert stats["gigpo"]["seeds"] == [0, 1]
  assert stats["gigpo"]["kl"] == pytest.approx((9.4 / 3 + 0.35) / 2)
  assert stats["gigpo"]["kl_median"] == pytest.approx((0.3 + 0.35) / 2)
  assert stats["gigpo"]["grad_norm_median"] == pytest.approx(1.0)
  assert "adv_divisor" not in stats["gigpo"]  # not logged by these runs
  assert stats["gigpo"]["seconds"] == pytest.approx(150.0)
  assert stats["gigpo"]["peak_rss_mib"] == pytest.approx(2000.0)
  assert stats["grpo"]["seeds"] == [0] and "peak_rss_mib" not in stats["grpo"]
  assert stats["grpo"]["kl"] == pytest.approx(0.25)
  # Extremes: seed 0's 9.0 and seed 1's 0.5 (after the rewrite).
  assert stats["gigpo"]["kl_max"] == pytest.approx((9.0 + 0.5) / 2)
  assert "adv_divisor_min" not in stats["gigpo"]
  assert stats["grpo"]["adv_divisor"] == pytest.approx(0.285)
  assert stats["grpo"]["adv_divisor_min"] == pytest.approx(0.07)
  assert stats["grpo"]["grad_clipped"] == pytest.approx(0.75)
  assert "grad_clipped" not in stats["gigpo"]
