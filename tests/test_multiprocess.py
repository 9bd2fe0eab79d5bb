"""Multi-process runs (one JAX controller per host), as two local processes.

Each process gets 4 simulated CPU devices and joins the other through
`jax.distributed` (gloo collectives on CPU), as the hosts of a pod would.
"""

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from agentic_rl import sweeps
from agentic_rl.data import trajectory_io
from agentic_rl.train import loop
from agentic_rl.train.logging import read_jsonl
from tests.sampling import bench_scripts

REPO = pathlib.Path(__file__).resolve().parents[1]
WORKER = pathlib.Path(__file__).with_name("multiprocess_worker.py")


def _launch(argv: list[str], n: int = 2, timeout: float = 600) -> list[str]:
  """Runs `argv` as processes 0..n-1 of one job; their stdouts."""
  outs = sweeps.launch_local_processes(
    argv, n, devices_each=8 // n, cwd=REPO, timeout=timeout
  )
  for code, _, err in outs:
    assert code == 0, err[-3000:]
  return [out for _, out, _ in outs]


def test_two_processes_gather_check_and_refuse_a_partial_mesh(tmp_path):
  seen = [
    json.loads(o.strip().splitlines()[-1])
    for o in _launch([sys.executable, str(WORKER), str(tmp_path)])
  ]
  assert [s["process"] for s in seen] == [0, 1]
  assert [s["primary"] for s in seen] == [True, False]
  assert all(s["devices"] == 8 for s in seen)
  for s in seen:
    # rows 0-2 from process 0, 10-12 from process 1, read whole by both
    assert not s["fully_addressable"]
    assert s["gathered"] == [0, 1, 2, 10, 11, 12]
    assert s["replicated_sum"] == 36
    # the default mesh of one device leaves process 1 out: a clear error
    assert "none of process(es) [1]" in s["small_mesh"]
    # equal data passes; rows that differ by process are named
    assert "the test's rows differs between processes" in s["divergence"]
    assert "process(es) [1]" in s["divergence"]
    # replicated weights read from own shards, split ones gathered
    assert s["own_shards"] and not s["split"] and s["read_whole"]
    assert s["block"] == [1, 1, 4] and s["block_mine"]
    # moved onto own devices, device to device, as the targets ask; the
    # replicated weights keep their buffers, the split ones were gathered
    assert s["moved_local"] == [True] * 3 and s["moved_values"] == [True] * 3
    assert s["moved_same_buffers"] == [True, False]
    assert "do not form a block" in s["interleaved"]
    assert s["objects"] == [{"me": 0, "rows": [0]}, {"me": 1, "rows": [0, 1]}]
    assert "process(es) could not pickle their object: 1: " in s["unpicklable"]
  # Both set the run up and logged a row; only process 0 wrote anything.
  assert (tmp_path / "config.json").is_file()
  logs = tmp_path / "logs"
  assert len(list(logs.glob("*tfevents*"))) == 1
  assert [r["probe_row"] for r in read_jsonl(str(logs / "metrics.jsonl"))] == [
    0
  ]
  # Per-process rollouts: 3 tasks x 2 episodes, parts of 2 tasks and 1.
  ids = seen[0]["task_ids"]
  assert seen[0]["envs_made"] == sorted([ids[0]] * 2 + [ids[1]] * 2)
  assert seen[1]["envs_made"] == [ids[2]] * 2
  for s in seen:
    assert s["sampler_mesh"] == [1, 1, 4] and s["sampler_devices_mine"]
    # the training weights reached the samplers on device, whole
    assert s["synced"] and all(s["synced"])
    assert [p[:2] for p in s["played"]] == [
      [ids[i], i] for i in range(3) for _ in range(2)
    ]
    assert s["played"] == seen[0]["played"]
    assert s["same_as_alone"]
    differ = "rollout's tasks differs between processes: process(es) [1]"
    assert differ in s["tasks_differ"]
    broke = "process(es) 1: RuntimeError: scoring broke in process 1"
    assert broke in s["failure"]
  # Per-process expert demos: 8 tasks in parts of 4, each process making
  # one environment to check for an expert, then one per task of its part.
  demo_ids = seen[0]["demo_task_ids"]
  assert len(demo_ids) == 8
  assert seen[0]["demos_replayed"] == [demo_ids[0], *demo_ids[:4]]
  assert seen[1]["demos_replayed"] == [demo_ids[0], *demo_ids[4:]]
  for s in seen:
    assert s["demo_task_ids"] == demo_ids and s["demos_same"]
    assert s["demo_failure"] == (
      "the expert demos failed in process(es) 1: "
      "RuntimeError: sandbox broke in process 1"
    )


def test_simulated_devices_env_sets_only_the_device_count():
  flag = sweeps.SIMULATED_DEVICES_FLAG
  base = {"XLA_FLAGS": f"--xla_cpu_a=1 {flag}=8 --xla_cpu_b=2", "X": "y"}
  env = sweeps.simulated_devices_env(4, base)
  assert env == {"XLA_FLAGS": f"{flag}=4 --xla_cpu_a=1 --xla_cpu_b=2", "X": "y"}
  assert sweeps.simulated_devices_env(2, {})["XLA_FLAGS"] == f"{flag}=2"


def test_bench_multiprocess_summarizes_a_runs_rows():
  bench = bench_scripts.load("multiprocess")
  rows = [
    {"step": 0, "time": 110.0, "eval/seconds": 9.0},
    {"step": 1, "time": 140.0, "episodes": 32, "seconds": 8.0,
     "train_seconds": 20.0, "sync_seconds": 0.5, "success_rate": 0.0},
    {"step": 2, "time": 150.0, "episodes": 32, "seconds": 3.0,
     "train_seconds": 6.0, "sync_seconds": 0.25, "success_rate": 0.25},
    {"step": 3, "time": 162.0, "episodes": 32, "seconds": 5.0,
     "train_seconds": 5.0, "sync_seconds": 0.75, "success_rate": 0.5,
     "eval/seconds": 2.0},
  ]  # fmt: skip
  got = bench.summarize(rows, launched=100.0, ended=170.0)
  assert got == {
    "rl_steps": 3,
    "episodes_per_step": 32,
    "first_rollout_s": 8.0,
    "first_train_s": 20.0,
    "rollout_s": 4.0,  # median of steps 2-3: step 1 compiles
    "train_s": 5.5,
    "sync_s": 0.5,
    "first_eval_s": 9.0,
    "before_first_row_s": 10.0,
    "after_last_row_s": 8.0,
    "between_steps_s": [10.0, 12.0],
    "success_rate": [0.0, 0.25, 0.5],
  }


@pytest.mark.parametrize(
  "environ, message",
  [
    ({sweeps.NUM_PROCESSES_ENV: "2"}, "or neither"),
    ({sweeps.PROCESS_ID_ENV: "0"}, "or neither"),
    (
      {sweeps.NUM_PROCESSES_ENV: "two", sweeps.PROCESS_ID_ENV: "0"},
      "not an integer",
    ),
  ],
)
def test_initialize_distributed_refuses_half_a_launch(environ, message):
  with pytest.raises(sweeps.SweepSpecError, match=message):
    sweeps.initialize_distributed(environ)


def _rows(path: pathlib.Path) -> dict[tuple[int, str], float]:
  out = {}
  for row in read_jsonl(str(path)):
    step, _ = row.pop("step"), row.pop("time")  # phases may share a step
    for k, v in row.items():
      assert (step, k) not in out, f"{k} logged twice at step {step}"
      out[step, k] = v
  return out


@pytest.mark.slow
def test_two_process_run_matches_one_process_on_the_same_mesh(tmp_path):
  """The smoke run (SFT, 2 GiGPO steps, evaluations) on a (2, 1, 4) mesh:
  as two processes of 4 devices with replicated rollouts it logs once and
  matches one process of 8 devices (same programs; the cross-process
  reductions may round apart). With per-process rollouts (the default) it
  plays other episodes (each process its own part, its own key) and logs
  the same metrics, each once, and stopped after one step and resumed it
  continues exactly; then it teaches a student as two processes (the
  teacher's samples split the same way)."""
  argv = [
    sys.executable,
    "-m",
    "agentic_rl.main",
    "--config=configs/sokoban.py:gigpo,smoke",
    "--config.mesh.shape=(2,1,4)",
  ]
  _launch(
    [
      *argv,
      "--config.mesh.rollouts=replicated",
      f"--workdir={tmp_path / 'two'}",
    ],
    timeout=1200,
  )
  _launch([*argv, f"--workdir={tmp_path / 'parts'}"], timeout=1200)
  one = subprocess.run(
    [*argv, f"--workdir={tmp_path / 'one'}"],
    cwd=REPO,
    env=sweeps.simulated_devices_env(8),
    capture_output=True,
    text=True,
    timeout=1200,
  )
  assert one.returncode == 0, one.stderr[-3000:]
  logs = tmp_path / "two" / "logs"
  assert len(list(logs.glob("*tfevents*"))) == 1
  two_rows, one_rows = (
    _rows(logs / "metrics.jsonl"),
    _rows(tmp_path / "one" / "logs" / "metrics.jsonl"),
  )
  assert two_rows.keys() == one_rows.keys()
  timing = re.compile(r"time|second|per_s")
  compared = [k for k in one_rows if not timing.search(k[1])]
  assert len(compared) > 100
  np.testing.assert_allclose(
    [two_rows[k] for k in compared],
    [one_rows[k] for k in compared],
    rtol=1e-4,
    atol=1e-6,
  )
  summaries = [
    json.loads((tmp_path / d / "summary.json").read_text())
    for d in ("two", "one")
  ]
  assert [e["success_rate"] for e in summaries[0]["evals"]] == [
    e["success_rate"] for e in summaries[1]["evals"]
  ]
  logs = tmp_path / "parts" / "logs"
  assert len(list(logs.glob("*tfevents*"))) == 1
  parts_rows = _rows(logs / "metrics.jsonl")
  seen = re.compile(r"^trace/failure/")  # only the failure codes that occurred
  assert {k for k in parts_rows if not seen.match(k[1])} == {
    k for k in one_rows if not seen.match(k[1])
  }
  episodes = [k for k in one_rows if k[1] in ("episodes", "eval/episodes")]
  assert len(episodes) == 5  # 2 RL steps, 3 evaluations: both parts' all
  assert all(parts_rows[k] == one_rows[k] for k in episodes)
  # other episodes, so another update: the RL metrics move apart
  assert any(parts_rows[k] != one_rows[k] for k in compared)

  # Stopped after its first RL step and resumed as two processes, the
  # per-process run continues exactly: step 2 as in the run straight
  # through (the same parts, keys and weights), and its final evaluation.
  resumed = tmp_path / "resumed"
  _launch([*argv, "--config.rl.steps=1", f"--workdir={resumed}"], timeout=1200)
  _launch([*argv, f"--workdir={resumed}"], timeout=1200)
  resumed_rows = _rows(resumed / "logs" / "metrics.jsonl")
  step2 = [k for k in compared if k[0] == 2 and not k[1].startswith("eval/")]
  assert len(step2) > 30
  assert [resumed_rows[k] for k in step2] == [parts_rows[k] for k in step2]
  last = [
    json.loads((d / "summary.json").read_text())["evals"][-1]
    for d in (resumed, tmp_path / "parts")
  ]
  assert last[0] == last[1]

  # That run teaches a smaller student, its samplers split the same way.
  _launch(
    [
      sys.executable,
      "-m",
      "agentic_rl.main",
      "--config=configs/distill.py:token,smoke",
      "--config.mesh.shape=(2,1,4)",
      f"--config.distill.teacher={tmp_path / 'parts'}",
      f"--workdir={tmp_path / 'student'}",
    ],
    timeout=1200,
  )
  student = json.loads((tmp_path / "student" / "summary.json").read_text())
  taught = student["distill"]
  # The teacher's greedy play repeats its own last evaluation.
  teacher = json.loads((tmp_path / "parts" / "summary.json").read_text())
  final = teacher["evals"][-1]["success_rate"]
  assert taught["teacher_eval_success_rate"] == final
  # keep="best": one trajectory per task, the first tasks, in order.
  kept = trajectory_io.read_jsonl(
    tmp_path / "student" / "distill" / "kept.jsonl"
  )
  config = sweeps.load_config("configs/distill.py:token,smoke")
  pool = loop.task_pool(config).split("train")
  want = [t.id for t in list(pool)[: config.distill.num_tasks]]
  assert [t.task.id for t in kept] == want
  assert taught["kept"] == len(kept) and taught["samples"] == 2 * len(kept)


def _bench_rows(tmp_path, name: str, *flags: str) -> list[dict]:
  """The rows `scripts/bench.py NAME FLAGS` writes."""
  out = tmp_path / f"{name}.json"
  subprocess.run(
    [sys.executable, "scripts/bench.py", name, *flags, f"--out={out}"],
    cwd=REPO,
    check=True,
    timeout=900,
  )
  return json.loads(out.read_text())["rows"]


@pytest.mark.slow
def test_bench_weight_sync_moves_the_same_arrays_both_ways(tmp_path):
  rows = _bench_rows(tmp_path, "weight_sync", "--presets=tiny", "--reps=1")
  assert [(r["mesh"], r["split_across_processes"]) for r in rows] == [
    ("2,1,4", False),
    ("1,2,4", True),
  ]
  for r in rows:
    assert r["same_arrays"] and r["leaves"] > 10
    assert r["host_ms"] > 0 and r["device_ms"] > 0


@pytest.mark.slow
def test_bench_demos_splits_the_replays_and_keeps_the_demos(tmp_path):
  rows = _bench_rows(
    tmp_path,
    "demos",
    "--configs",
    "configs/code_repair.py:gigpo,smoke",
    "--reps=1",
  )
  # One process, then two: the same 8 demos (digest), the expert solving
  # each, and the speed-up measured against the one-process row.
  assert [(r["processes"], r["process"]) for r in rows] == [(1, 0), (2, 0)]
  assert all(r["demos"] == r["solved"] == 8 for r in rows)
  assert all(r["same_demos"] for r in rows) and rows[0]["speedup"] == 1
  assert rows[1]["speedup"] == rows[0]["seconds"] / rows[1]["seconds"]


@pytest.mark.slow
def test_switches_run_and_resume_exactly_as_two_processes(tmp_path):
  """Dynamic sampling, replay and the curriculum with per-process rollouts:
  every process decides on the same gathered episodes, so a run stopped
  after one step and resumed repeats the run straight through (their
  state is in the checkpoint)."""
  argv = [
    sys.executable,
    "-m",
    "agentic_rl.main",
    "--config=configs/sokoban.py:gigpo,smoke,dynamic,replay,curriculum",
    "--config.mesh.shape=(2,1,4)",
  ]
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  _launch([*argv, f"--workdir={straight}"], timeout=1200)
  _launch([*argv, "--config.rl.steps=1", f"--workdir={resumed}"], timeout=1200)
  _launch([*argv, f"--workdir={resumed}"], timeout=1200)
  a, b = (_rows(d / "logs" / "metrics.jsonl") for d in (straight, resumed))
  switches = re.compile(r"^(dynamic|replay|curriculum)/")
  for step in (1, 2):
    logged = {k for (s, k) in a if s == step and switches.match(k)}
    assert {k.split("/")[0] for k in logged} == {
      "dynamic",
      "replay",
      "curriculum",
    }
  assert a[2, "replay/rows"] > 0  # the second update replayed rows
  timing = re.compile(r"time|second|per_s")
  step2 = [k for k in a if k[0] == 2 and not timing.search(k[1])]
  assert len(step2) > 30
  assert [b[k] for k in step2] == [a[k] for k in step2]
