"""scripts/curriculum_sim.py: its noise model, its calibration from logged
runs and its output."""

import importlib.util
import json
import math
import pathlib

import numpy as np
import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts"
spec = importlib.util.spec_from_file_location(
  "curriculum_sim", SCRIPT / "curriculum_sim.py"
)
sim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sim)


def test_streams_are_task_major_and_calibration_inverts_them():
  rng = np.random.default_rng(0)
  # a tiny kappa makes nearly every task all-success or all-failure, so the
  # blocks of `rollouts` consecutive outcomes, one task's each, are constant
  # (blocks of 6 different tasks at p = 0.3 would be 12% of the time)
  s = sim.frontier_streams(rng, 0.3, 1e-3, 4, 5, 8, 6).reshape(4, -1, 6)
  assert (s == s[..., :1]).all(axis=-1).mean() > 0.95 and 0 < s.mean() < 1
  # batch rates drawn at kappa 2 give back kappa 2 through the variance
  # formula; with no task spread the spread is binomial (kappa inf)
  for kappa, want in ((2.0, 2.0), (math.inf, math.inf)):
    s = sim.frontier_streams(rng, 0.2, kappa, 1, 20000, 8, 8)
    rates = s.reshape(20000, 64).mean(axis=1)
    got = sim.kappa_from_rates(list(rates), 8, 8)
    if math.isinf(want):
      assert got > 50  # no excess variance worth a task spread
    else:
      assert got == pytest.approx(want, rel=0.1)


def _run(path, rates_by_step, frontier_by_step, difficulties=(0, 1)):
  path.mkdir(parents=True)
  (path / "logs").mkdir()
  config = {
    "tasks": {"difficulties": list(difficulties)},
    "curriculum": {"promote_threshold": 0.3},
    "rl": {"tasks_per_step": 4},
    "rollout": {"group_size": 2},
  }
  (path / "config.json").write_text(json.dumps(config))
  rows = [{"step": 0, "eval/success_rate": 0.1}]  # an evaluation row
  for i, (rate, frontier) in enumerate(
    zip(rates_by_step, frontier_by_step, strict=True)
  ):
    rows.append(
      {
        "step": i + 1,
        "success_rate/d0": rate,
        "curriculum/frontier": float(frontier),
      }
    )
  (path / "logs" / "metrics.jsonl").write_text(
    "\n".join(json.dumps(r) for r in rows)
  )


def test_calibrate_reads_the_steps_before_the_first_promotion(tmp_path):
  # steps 1-4 on difficulty 0 alone, then difficulty 1 unlocks
  _run(tmp_path / "a", [0.25, 0.5, 0.0, 0.25, 0.9], [0, 0, 0, 0, 1])
  _run(tmp_path / "b", [0.5, 0.5], [1, 1])  # unlocked after its first batch
  (row,) = sim.calibrate(str(tmp_path / "*"), min_steps=3)
  assert row["run"].endswith("a") and row["steps"] == 4 and "same_as" not in row
  assert row["mean"] == pytest.approx(0.25)
  assert row["std"] == pytest.approx(np.std([0.25, 0.5, 0, 0.25], ddof=1))
  # var 1/24; excess 8/24 - 3/16 = 7/48 over binomial; (2 - 1) 3/16 / (7/48)
  # = 9/7 = kappa + 1
  assert row["kappa"] == pytest.approx(2 / 7)
  # an arm that logged the same batches before its first promotion (and
  # differs after it) is the same measurement
  _run(tmp_path / "a2", [0.25, 0.5, 0.0, 0.25, 0.25, 0.5], [0, 0, 0, 0, 0, 1])
  _run(tmp_path / "a3", [0.25, 0.5, 0.0, 0.25, 0.5], [0, 0, 0, 0, 1])
  rows = sim.calibrate(str(tmp_path / "a*"), min_steps=3)
  assert [r["run"][-2:] for r in rows] == ["/a", "a2", "a3"]
  assert "same_as" not in rows[1] and rows[2]["same_as"] == rows[0]["run"]
  assert rows[2]["kappa"] == rows[0]["kappa"]
  with pytest.raises(ValueError, match="6\\+ steps"):
    sim.calibrate(str(tmp_path / "*"), min_steps=6)
  (tmp_path / "c").mkdir()
  with pytest.raises(FileNotFoundError, match="config.json"):
    sim.calibrate(str(tmp_path / "c"), min_steps=1)


def test_main_writes_one_row_per_setting(tmp_path):
  sim.main([
    "--thresholds", "0.3", "--rates", "0.05", "0.9", "--holds", "1", "64",
    "--sims", "50", "--steps", "5", "--out", str(tmp_path),
  ])  # fmt: skip
  report = json.loads((tmp_path / "results.json").read_text())
  rows = {(r["p"], r["hold"]): r for r in report["rows"]}
  assert len(rows) == 4
  # far below the threshold nothing unlocks; far above, the first check
  # after min_episodes does (step 1), and a hold of 64 takes one more batch
  assert rows[0.05, 1]["promoted"] == rows[0.05, 64]["promoted"] == 0.0
  assert rows[0.9, 1]["promoted"] == rows[0.9, 64]["promoted"] == 1.0
  assert rows[0.9, 1]["step_median"] == 1.0
  assert rows[0.9, 64]["step_median"] == 2.0
  assert (
    "| 0.9 | 100.0 (1) | 100.0 (2) |" in (tmp_path / "results.md").read_text()
  )


def test_thresholds_and_holds_score_the_same_streams(tmp_path):
  # Common random numbers. A window rate is k successes of n <= 128
  # episodes, and the nearest such fraction above 3/10 is >= 3/10 + 1/1280,
  # so none lies in [0.3001, 0.3007): the two thresholds promote on exactly
  # the same runs at the same steps. Streams drawn anew per threshold differ.
  sim.main([
    "--thresholds", "0.3001", "0.3007", "--rates", "0.2", "0.25",
    "--kappas", "2", "--holds", "1", "64", "--sims", "200", "--steps", "6",
    "--out", str(tmp_path),
  ])  # fmt: skip
  rows = json.loads((tmp_path / "results.json").read_text())["rows"]
  assert [r["threshold"] for r in rows] == [0.3001] * 4 + [0.3007] * 4
  for low, high in zip(rows[:4], rows[4:], strict=True):
    assert 0.0 < low["promoted"] < 1.0  # a cell the draw could move
    assert {**low, "threshold": 0} == {**high, "threshold": 0}
