"""Sweep reports: per-run curves, statistics over seeds, tables and plots.

Input: a sweep root written by `scripts/sweep.py` (`sweep.json` plus one
workdir per run with `summary.json`, `config.json` and `logs/metrics.jsonl`).
For every environment and estimator this computes, over seeds,

  final held-out success and return (the last evaluation), mean and 95%
  t-interval;
  area under the learning curve: held-out success against RL step,
  trapezoid rule, divided by the step range (so it is the time-averaged
  success, in [0, 1]); the curve starts at the SFT policy's evaluation;
  steps to reach a success threshold (first evaluation at or above it);
  paired differences against the baseline estimator (same seed), mean and
  95% t-interval of the difference;
  training-rollout success gain: mean success of the sampled RL batches
  over the last `TRAIN_WINDOW` RL steps minus the first (64 episodes a step
  in the credit-assignment sweep, so 320 per window, against 128 held-out
  tasks per evaluation), when the runs log `success_rate`;
  late held-out success: the mean of the RL evaluations in the second half
  of training (RL step >= half the last one), less at the mercy of one
  evaluation than the final one (a run's last evaluation moves by several
  points with float noise alone);
  wall seconds per run of each estimator and the largest peak resident
  memory of its runs (the sweep runner's readings), its cost beside its
  effect;
  each paired difference's seed-level sign test (`sign_flip_p`, printed
  as "(p ...)" after its interval): each seed one unit, so 2 seeds never
  give p < 0.5 and 6 are needed for p < 0.05;
  per paired seed, whether the two runs ran on the same machine
  (`agentic_rl.machine`): on different CPUs the same seed is not the same
  run, so those pairs carry cross-machine noise besides the arm's effect;
  of those on different machines, how many had agreeing numerics probes;
  task by task, for runs whose summaries keep per-task verdicts: the final
  evaluation against the post-SFT one and against the baseline's, the
  discordant (seed, task) pairs pooled over seeds with McNemar's exact
  test (`pooled_tasks`).

Evaluation points come from the metrics file's `eval/*` entries: the row
at step 0 (no `sft/` keys) is the SFT policy's evaluation (older runs lack
it; then `summary.json`'s SFT evaluation is used), and the RL rows (step >
0, no `sft/` keys) carry the evaluations every `eval_every` steps. The RL
step of an RL row is its rank among the RL rows' distinct `step` values:
this is robust to rows repeated by a resumed run (same step value, the
later row wins) and to a row's `step` holding a count other than the RL
iteration (the loop has logged the optimizer step there).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import platform
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.stats

from agentic_rl import machine as machine_lib
from agentic_rl.train.logging import read_jsonl

SFT_PREFIX = "sft/"
# Rows logged before RL: the cold start (SFT on demonstrations, or
# distillation) and offline shaping (DPO).
COLD_START_PREFIXES = (SFT_PREFIX, "distill/", "dpo/")


TRAIN_WINDOW = 5  # RL steps averaged at each end for the training gain
LATE_FROM = 0.5  # late_success averages evaluations from this fraction on


class ReportError(ValueError):
  """A sweep root, run directory or metrics file cannot be reported on."""


@dataclasses.dataclass
class RunCurve:
  """One finished run: its held-out learning curve and headline numbers."""

  name: str
  env: str
  estimator: str
  seed: int
  steps: np.ndarray  # RL steps of the evaluations, 0 = after SFT
  success: np.ndarray
  returns: np.ndarray
  finite: bool  # every logged metric of every row is finite
  rows: int  # RL rows in the metrics file
  estimator_config: dict[str, Any]
  seconds: float | None  # wall time measured by the sweep runner
  # success rate of each RL step's sampled batch (empty if not logged)
  train_success: np.ndarray = dataclasses.field(
    default_factory=lambda: np.zeros(0)
  )
  # held-out success per task difficulty at the RL steps
  # `difficulty_steps`: the evaluations that log `eval/success_rate/d<k>`
  # (empty unless they all log the same difficulties). A run warm-started
  # by older code lacks them at step 0.
  success_by_difficulty: dict[int, np.ndarray] = dataclasses.field(
    default_factory=dict
  )
  difficulty_steps: np.ndarray = dataclasses.field(
    default_factory=lambda: np.zeros(0)
  )
  # `numerics_key` of each machine the run (and the SFT stage it started
  # from) ran on, in order; None when not recorded (runs begun before
  # 2026-12-04). `machine_labels` maps each key to a readable name,
  # `machine_probes` each key to the distinct `numerics_probe`s its
  # records hold, in order (launches from 2026-12-06 on record one).
  machines: tuple[str, ...] | None = None
  machine_labels: dict[str, str] = dataclasses.field(default_factory=dict)
  machine_probes: dict[str, tuple[str, ...]] = dataclasses.field(
    default_factory=dict
  )
  # Per-task verdicts (task id -> solved) of the evaluations that kept them
  # (summary.json, runs begun from 2026-12-05 on), by RL step, 0 = after SFT.
  solved: dict[int, dict[str, bool]] = dataclasses.field(default_factory=dict)
  # Peak resident memory of the run's process in MiB (the sweep runner's
  # reading, runs launched from 2026-12-06 on), else None.
  peak_rss_mib: float | None = None
  # Training episodes RL had played by each evaluation in `steps` (0 after
  # SFT; a dynamic-sampling step counts every episode it played); empty
  # when the metrics lack the per-step counts.
  episodes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  # The scripted expert's held-out success within the run's limits
  # (summary.json `expert_ceiling`: `success_rate`, `success_rate/d<k>`;
  # runs from 2026-12-06 on), {} when not recorded or the env has none.
  expert_ceiling: dict[str, float] = dataclasses.field(default_factory=dict)

  @property
  def final_solved(self) -> dict[str, bool] | None:
    """The last RL evaluation's per-task verdicts, if kept."""
    last = int(self.steps[-1])
    return self.solved.get(last) if last > 0 else None

  @property
  def sft_solved(self) -> dict[str, bool] | None:
    return self.solved.get(0)

  @property
  def final_success(self) -> float:
    return float(self.success[-1])

  @property
  def late_success(self) -> float:
    return late_mean(self.steps, self.success)

  @property
  def final_return(self) -> float:
    return float(self.returns[-1])

  @property
  def final_by_difficulty(self) -> dict[int, float]:
    return {d: float(v[-1]) for d, v in self.success_by_difficulty.items()}


# ---------------------------------------------------------------------------
# Statistics.


@dataclasses.dataclass(frozen=True)
class Interval:
  """Mean and two-sided t-interval; lo/hi are NaN with fewer than 2 values.

  `p` (paired differences only, `paired_difference`): the seed-level sign
  test of the mean, `sign_flip_p`.
  """

  mean: float
  lo: float
  hi: float
  n: int
  p: float | None = None

  def to_dict(self) -> dict[str, float | int | None]:
    clean = lambda x: None if math.isnan(x) else x
    out = {
      "mean": clean(self.mean),
      "lo": clean(self.lo),
      "hi": clean(self.hi),
      "n": self.n,
    }
    if self.p is not None:
      out["p"] = self.p
    return out

  def excludes_zero(self) -> bool:
    return self.n > 1 and (self.lo > 0 or self.hi < 0)


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
  """Mean +- t_{(1+c)/2, n-1} * s / sqrt(n) (s with ddof=1)."""
  x = np.asarray(values, np.float64)
  if x.size == 0:
    return Interval(math.nan, math.nan, math.nan, 0)
  mean = float(x.mean())
  if x.size < 2:
    return Interval(mean, math.nan, math.nan, 1)
  half = scipy.stats.t.ppf((1 + confidence) / 2, x.size - 1) * (
    x.std(ddof=1) / math.sqrt(x.size)
  )
  return Interval(mean, float(mean - half), float(mean + half), int(x.size))


def normalized_auc(steps: Sequence[float], values: Sequence[float]) -> float:
  """Trapezoid area under values(steps) divided by the step range."""
  s = np.asarray(steps, np.float64)
  v = np.asarray(values, np.float64)
  if s.size == 0 or s.size != v.size:
    raise ReportError(f"curve needs matching steps/values, got {s}, {v}")
  if s.size == 1:
    return float(v[0])
  if np.any(np.diff(s) <= 0):
    raise ReportError(f"curve steps must increase: {s}")
  area = float(np.sum((v[1:] + v[:-1]) / 2 * np.diff(s)))
  return area / float(s[-1] - s[0])


def steps_to_threshold(
  steps: Sequence[float], values: Sequence[float], threshold: float
) -> float | None:
  """The first step whose value is >= threshold (None if none is)."""
  for s, v in zip(steps, values, strict=True):
    if v >= threshold:
      return float(s)
  return None


def train_gain(
  values: Sequence[float], window: int = TRAIN_WINDOW
) -> float | None:
  """mean(last `window`) - mean(first `window`); None under 2 values.

  The window shrinks to half the values when there are fewer than 2 x
  `window`, so the two ends never overlap.
  """
  v = np.asarray(values, np.float64)
  w = min(window, v.size // 2)
  if w < 1:
    return None
  return float(v[-w:].mean() - v[:w].mean())


def late_mean(
  steps: Sequence[float], values: Sequence[float], start: float = LATE_FROM
) -> float:
  """Mean of the values at RL steps >= `start` x the last step (and > 0:
  not the SFT policy's); the last value for an SFT-only curve."""
  s = np.asarray(steps, np.float64)
  v = np.asarray(values, np.float64)
  late = v[(s > 0) & (s >= start * s[-1])]
  return float(late.mean()) if late.size else float(v[-1])


Probes = Mapping[str, Sequence[str]]  # machine key -> its distinct probes


def merge_probes(*maps: Probes) -> dict[str, tuple[str, ...]]:
  """Runs' `machine_probes` as one map: each key's distinct probes over
  all of them, in the order met."""
  merged: dict[str, dict[str, None]] = {}
  for m in maps:
    for key, probes in m.items():
      merged.setdefault(key, {}).update(dict.fromkeys(probes))
  return {key: tuple(probes) for key, probes in merged.items()}


def machine_pair(
  a: Sequence[str] | None,
  b: Sequence[str] | None,
  probes: Probes | None = None,
) -> str:
  """Two runs' machine keys (`RunCurve.machines`, stages included): "same"
  if all are one machine, "different" if not, "unknown" if either is None
  (not recorded). One key whose records hold different numerics probes
  (`probes`: key -> probes) is "different" too: the key missed a
  difference the probe measured."""
  if a is None or b is None:
    return "unknown"
  keys = {*a, *b}
  if len(keys) > 1:
    return "different"
  (key,) = keys
  return "different" if len(set((probes or {}).get(key, ()))) > 1 else "same"


def probes_agree(
  a: Sequence[str] | None,
  b: Sequence[str] | None,
  probes: Probes,
) -> bool:
  """Whether every machine of two runs has a recorded `numerics_probe`
  (`probes`: key -> its probes) and all of them are one: evidence, not
  proof, that machines of different keys compute alike
  (`machine.numerics_probe`)."""
  if a is None or b is None:
    return False
  keys = {*a, *b}
  if not all(probes.get(k) for k in keys):
    return False
  return len({p for k in keys for p in probes[k]}) == 1


def count_machine_pairs(
  pairs: Iterable[tuple[Sequence[str] | None, Sequence[str] | None]],
  probes: Probes,
) -> dict[str, int]:
  """`machine_pair` counts of (A's keys, B's keys) pairs, plus
  "probes_agree": how many of the "different" ones `probes_agree`."""
  counts = {"same": 0, "different": 0, "unknown": 0, "probes_agree": 0}
  for a, b in pairs:
    kind = machine_pair(a, b, probes)
    counts[kind] += 1
    counts["probes_agree"] += kind == "different" and probes_agree(a, b, probes)
  return counts


def run_machines(
  record: Sequence[Mapping[str, Any]],
) -> tuple[tuple[str, ...] | None, dict[str, str], dict[str, tuple[str, ...]]]:
  """(keys, labels, probes) of a summary's "machines" list: keys None if
  the list is empty or starts after the run began (`unrecorded_before`);
  labels by key, and each key's distinct recorded probes (keys with none
  left out)."""
  labels = {r["key"]: machine_lib.short_name(r) for r in record}
  probes = merge_probes(
    *({r["key"]: (r["probe"],)} for r in record if r.get("probe"))
  )
  if not record or record[0].get("unrecorded_before"):
    return None, labels, probes
  return tuple(r["key"] for r in record), labels, probes


def success_at_episodes(
  curve: RunCurve, budgets: Sequence[float]
) -> dict[float, float]:
  """Held-out success of `curve` read at each budget of training episodes
  it reached (linearly between its evaluations around it; exactly where a
  budget falls on one); budgets past its last evaluation, or all of them
  when the run lacks episode counts, are left out."""
  if not curve.episodes.size:
    return {}
  return {
    float(e): float(np.interp(e, curve.episodes, curve.success))
    for e in budgets
    if 0 <= e <= curve.episodes[-1]
  }


def success_at_equal_episodes(
  a: RunCurve, b: RunCurve
) -> tuple[float, float, float] | None:
  """(E, A's held-out success at E, B's): E is the most training episodes
  both runs played, each curve read there (`success_at_episodes`: linearly
  between its two evaluations around E; exactly where E falls on one, as
  when one arm plays k times the other's episodes a step). None if either
  run lacks episode counts. Two arms of unequal cost per step compared at
  equal data, not at equal steps."""
  if not a.episodes.size or not b.episodes.size:
    return None
  budget = float(min(a.episodes[-1], b.episodes[-1]))
  (at_a,) = success_at_episodes(a, [budget]).values()
  (at_b,) = success_at_episodes(b, [budget]).values()
  return budget, at_a, at_b


def sign_flip_p(differences: Sequence[float]) -> float | None:
  """Exact two-sided p that paired differences' mean is 0, with each seed
  the unit: under "no difference" each seed's difference is as likely
  negated, so p is the share of the 2^n sign patterns whose mean is at
  least as far from 0 (`scipy.stats.permutation_test`, every pattern).

  No normality assumed, unlike the t-interval, and the smallest p n seeds
  can give is 2 / 2^n: 1 with one seed, 0.5 with 2, 0.0625 with 5, under
  0.05 from 6 on. None without differences. Past 16 seeds, 100,000 random
  patterns (seeded) instead of all.
  """
  d = np.asarray(differences, np.float64)
  if d.size == 0:
    return None
  if d.size == 1 or not d.any():
    return 1.0
  res = scipy.stats.permutation_test(
    (d,),
    np.mean,
    permutation_type="samples",
    n_resamples=np.inf if d.size <= 16 else 100_000,
    alternative="two-sided",
    rng=np.random.default_rng(0),
  )
  return float(res.pvalue)


def paired_difference(
  treated: Mapping[int, float], baseline: Mapping[int, float]
) -> Interval:
  """t-interval of treated[seed] - baseline[seed] over the shared seeds,
  with their `sign_flip_p` as `p`."""
  seeds = sorted(set(treated) & set(baseline))
  diffs = [treated[s] - baseline[s] for s in seeds]
  return dataclasses.replace(t_interval(diffs), p=sign_flip_p(diffs))


@dataclasses.dataclass(frozen=True)
class PairedTasks:
  """Two evaluations on the same tasks, compared task by task.

  `only_a` / `only_b`: tasks one solved and the other did not. Their
  split decides the comparison (McNemar's test): under "no difference"
  each discordant task is a fair coin, so `p_value` is the exact two-sided
  binomial probability of a split at least this uneven. Pairing removes
  the tasks both solve or both fail, which two independent success rates
  would count as noise.
  """

  n: int
  both: int
  only_a: int
  only_b: int
  neither: int
  p_value: float

  @property
  def rate_a(self) -> float:
    return (self.both + self.only_a) / self.n

  @property
  def rate_b(self) -> float:
    return (self.both + self.only_b) / self.n

  def to_dict(self) -> dict[str, float]:
    return {
      **dataclasses.asdict(self),
      "rate_a": self.rate_a,
      "rate_b": self.rate_b,
      "difference": self.rate_b - self.rate_a,
    }


def paired_tasks(
  solved_a: Mapping[str, bool], solved_b: Mapping[str, bool]
) -> PairedTasks:
  """Task-by-task comparison of two evaluations over their shared tasks
  (task id -> solved); a `ReportError` if they share none."""
  shared = sorted(set(solved_a) & set(solved_b))
  if not shared:
    raise ReportError("the two evaluations share no task")
  pairs = [(bool(solved_a[t]), bool(solved_b[t])) for t in shared]
  only_a = sum(a and not b for a, b in pairs)
  only_b = sum(b and not a for a, b in pairs)
  return PairedTasks(
    n=len(shared),
    both=sum(a and b for a, b in pairs),
    only_a=only_a,
    only_b=only_b,
    neither=sum(not (a or b) for a, b in pairs),
    p_value=_mcnemar_p(only_a, only_b),
  )


def paired_tasks_by(
  solved_a: Mapping[str, bool],
  solved_b: Mapping[str, bool],
  group_of: Mapping[str, str],
) -> dict[str, PairedTasks]:
  """`paired_tasks` within each group of tasks (say "d0", "d1": difficulty),
  group label -> comparison, labels sorted. Every shared task must have a
  group (a `ReportError` names the first that has none): a task silently
  left out would bias the split."""
  shared = sorted(set(solved_a) & set(solved_b))
  if not shared:
    raise ReportError("the two evaluations share no task")
  members: dict[str, list[str]] = {}
  for t in shared:
    if t not in group_of:
      raise ReportError(f"task {t!r} has no group")
    members.setdefault(group_of[t], []).append(t)
  return {
    g: paired_tasks(
      {t: solved_a[t] for t in ids}, {t: solved_b[t] for t in ids}
    )
    for g, ids in sorted(members.items())
  }


def _mcnemar_p(only_a: int, only_b: int) -> float:
  """Exact two-sided McNemar p: each discordant task a fair coin."""
  discordant = only_a + only_b
  if not discordant:
    return 1.0
  return float(scipy.stats.binomtest(only_a, discordant, 0.5).pvalue)


def pooled_tasks(pairs: Sequence[PairedTasks]) -> PairedTasks:
  """Several task-by-task comparisons (one per seed) as one.

  Counts add up and McNemar's exact p is taken on the summed discordant
  (seed, task) pairs: under "no difference" each is a fair coin,
  independent of the others, so the pooled test is exact. It asks whether
  these trained policies differ on these tasks; whether the *method*
  differs across training seeds is the seed interval's question (few
  seeds make that one wide, pooling tasks makes this one sharp).
  """
  if not pairs:
    raise ReportError("no task-by-task comparison to pool")
  only_a = sum(p.only_a for p in pairs)
  only_b = sum(p.only_b for p in pairs)
  return PairedTasks(
    n=sum(p.n for p in pairs),
    both=sum(p.both for p in pairs),
    only_a=only_a,
    only_b=only_b,
    neither=sum(p.neither for p in pairs),
    p_value=_mcnemar_p(only_a, only_b),
  )


def read_solved(ref: str) -> dict[str, bool]:
  """Per-task verdicts named by `FILE:STEP`.

  FILE is an output of `scripts/evaluate_checkpoints.py` (STEP one of its
  checkpoint steps) or a run's summary.json (STEP an RL step of one of its
  evaluations, 0 = after SFT).
  """
  path, sep, step = ref.rpartition(":")
  if not sep or not path or not step.isdigit():
    raise ReportError(f"expected FILE:STEP, got {ref!r}")
  record = _read_json(pathlib.Path(path))
  if "results" in record:
    solved = record["results"].get(step, {}).get("solved")
  else:
    solved = solved_by_step(record).get(int(step))
  if solved is None:
    raise ReportError(f"{path} has no per-task results for step {step}")
  return dict(solved)


# ---------------------------------------------------------------------------
# Reading runs.


def _read_json(path: pathlib.Path) -> Any:
  try:
    return json.loads(path.read_text())
  except FileNotFoundError as e:
    raise ReportError(f"missing {path}") from e
  except json.JSONDecodeError as e:
    raise ReportError(f"{path} is not valid JSON: {e}") from e


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
  """The metrics file's rows; a named error if it is missing or malformed."""
  try:
    rows = read_jsonl(str(path))
  except FileNotFoundError as e:
    raise ReportError(f"missing metrics file {path}") from e
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ReportError(f"malformed metrics file {path}: {e}") from e
  for i, row in enumerate(rows):
    if not isinstance(row, dict) or not isinstance(
      row.get("step"), (int, float)
    ):
      raise ReportError(f"{path} row {i + 1} has no numeric 'step': {row!r}")
  return rows


def _is_sft(row: Mapping[str, Any]) -> bool:
  return any(k.startswith(COLD_START_PREFIXES) for k in row)


def sft_eval_row(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
  """The post-SFT evaluation row (step 0), the last one if repeated."""
  found = [r for r in rows if not _is_sft(r) and r["step"] == 0]
  return dict(found[-1]) if found else None


def rl_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """RL rows in step order, one per step, with "rl_step" = 1, 2, ...."""
  by_step: dict[float, dict[str, Any]] = {}
  for row in rows:
    if not _is_sft(row) and row["step"] > 0:
      by_step[float(row["step"])] = dict(row)  # a resumed run's rewrite wins
  ordered = [by_step[s] for s in sorted(by_step)]
  for i, row in enumerate(ordered):
    row["rl_step"] = i + 1
  return ordered


def episodes_at(
  rows: Sequence[Mapping[str, Any]], steps: Sequence[float]
) -> np.ndarray:
  """Training episodes played through each RL step of `steps` (0 = after
  SFT), summed from `rl_rows`' per-step "episodes"; empty if a row lacks
  the count."""
  per_step = [r.get("episodes") for r in rows]
  if any(e is None for e in per_step):
    return np.zeros(0)
  played = np.concatenate([[0.0], np.cumsum(per_step, dtype=np.float64)])
  return played[np.asarray(steps, np.int64)]


def _all_finite(rows: Sequence[Mapping[str, Any]]) -> bool:
  return all(
    math.isfinite(v)
    for row in rows
    for v in row.values()
    if isinstance(v, (int, float))
  )


DIFFICULTY_PREFIX = "eval/success_rate/d"


def by_difficulty(row: Mapping[str, Any]) -> dict[int, float]:
  """An evaluation row's `eval/success_rate/d<k>` entries as {k: rate}."""
  n = len(DIFFICULTY_PREFIX)
  return {
    int(k[n:]): float(v)
    for k, v in row.items()
    if k.startswith(DIFFICULTY_PREFIX) and k[n:].isdigit()
  }


def read_timing(workdir: str | os.PathLike) -> dict[str, Any]:
  """The sweep runner's `sweep_timing.json` of a run ("seconds", and
  "peak_rss_mib" where recorded), {} for a run it did not launch."""
  timing = pathlib.Path(workdir) / "sweep_timing.json"
  return _read_json(timing) if timing.is_file() else {}


def load_run(root: str | os.PathLike, run: Mapping[str, Any]) -> RunCurve:
  """A finished run's curve from its workdir (named errors otherwise)."""
  wd = pathlib.Path(root) / run["name"]
  summary = _read_json(wd / "summary.json")
  all_rows = read_metrics(wd / "logs" / "metrics.jsonl")
  rows = rl_rows(all_rows)
  evals = [r for r in rows if "eval/success_rate" in r]
  first = sft_eval_row(all_rows)
  sft = [e for e in summary.get("evals", []) if e.get("phase") == "sft"]
  if first is not None and "eval/success_rate" in first:
    points = [
      (0, first["eval/success_rate"], first.get("eval/return_mean", math.nan))
    ]
    levels = [by_difficulty(first)]
  elif sft:
    points = [(0, sft[0]["success_rate"], sft[0]["return_mean"])]
    levels = [{}]
  else:
    points, levels = [], []
  points += [
    (r["rl_step"], r["eval/success_rate"], r.get("eval/return_mean", math.nan))
    for r in evals
  ]
  levels += [by_difficulty(r) for r in evals]
  if not points:
    raise ReportError(f"{wd}: no held-out evaluation in summary or metrics")
  logged = [(p[0], lv) for p, lv in zip(points, levels, strict=True) if lv]
  same = {tuple(sorted(lv)) for _, lv in logged}
  per_level = {
    d: np.asarray([lv[d] for _, lv in logged], np.float64)
    for d in (same.pop() if len(same) == 1 else ())
  }
  level_steps = [step for step, _ in logged] if per_level else []
  config = _read_json(wd / "config.json")
  timed = read_timing(wd)
  seconds, peak_rss_mib = timed.get("seconds"), timed.get("peak_rss_mib")
  machines, machine_labels, machine_probes = run_machines(
    summary.get("machines") or []
  )
  steps, success, returns = (
    np.asarray(c, np.float64) for c in zip(*points, strict=True)
  )
  return RunCurve(
    name=run["name"],
    env=run["env"],
    estimator=run["estimator"],
    seed=int(run["seed"]),
    steps=steps,
    success=success,
    returns=returns,
    finite=_all_finite(rows),
    rows=len(rows),
    estimator_config=dict(config.get("estimator", {})),
    seconds=seconds,
    peak_rss_mib=peak_rss_mib,
    train_success=np.asarray(
      [r["success_rate"] for r in rows if "success_rate" in r], np.float64
    ),
    success_by_difficulty=per_level,
    difficulty_steps=np.asarray(level_steps, np.float64),
    machines=machines,
    machine_labels=machine_labels,
    machine_probes=machine_probes,
    solved=solved_by_step(summary),
    episodes=episodes_at(rows, steps),
    expert_ceiling={
      k: float(v)
      for k, v in (summary.get("expert_ceiling") or {}).items()
      if k.startswith("success_rate")
    },
  )


def solved_by_step(summary: Mapping[str, Any]) -> dict[int, dict[str, bool]]:
  """RL step -> per-task verdicts of a summary's evaluations that kept
  them (0 = the evaluation after SFT)."""
  return {
    int(e["rl_step"]): dict(e["solved"])
    for e in summary.get("evals", [])
    if "solved" in e
  }


def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
  path = pathlib.Path(root) / "sweep.json"
  if not path.is_file():
    raise ReportError(f"{path} not found: run scripts/sweep.py --root={root}")
  manifest = _read_json(path)
  for key in ("name", "envs", "estimators", "seeds", "baseline", "runs"):
    if key not in manifest:
      raise ReportError(f"{path} lacks {key!r}")
  return {**manifest, "pairs": _pairs(manifest, manifest.get("pairs", ()))}


def _pairs(
  manifest: Mapping[str, Any], entries: Sequence[str]
) -> list[tuple[str, str]]:
  """ "A:B" entries as (A, B) pairs of the manifest's estimators."""
  from agentic_rl import sweeps

  return sweeps.parse_pairs(entries, manifest["estimators"], ReportError)


def load_sweep(
  root: str | os.PathLike,
) -> tuple[dict[str, Any], list[RunCurve], list[RunCurve], list[str]]:
  """(manifest, finished grid runs, finished check runs, unfinished names)."""
  manifest = read_manifest(root)
  grid, checks, missing, sft_seconds = [], [], [], []
  for run in manifest["runs"]:
    if run.get("kind") == "sft":  # a shared SFT stage, not a compared run
      timed = read_timing(pathlib.Path(root) / run["name"])
      if timed:
        sft_seconds.append(timed["seconds"])
      continue
    if not (pathlib.Path(root) / run["name"] / "summary.json").is_file():
      missing.append(run["name"])
      continue
    curve = load_run(root, run)
    (checks if run.get("kind") == "check" else grid).append(curve)
  # Wall time of shared SFT stages (sweep.shared_sft), for the cost line.
  manifest = {**manifest, "sft_seconds": sft_seconds}
  return manifest, grid, checks, missing


# ---------------------------------------------------------------------------
# Summaries.


def _stat(values: Sequence[float]) -> dict[str, Any]:
  return t_interval(values).to_dict()


def _by_estimator(curves: Sequence[RunCurve]) -> dict[str, dict[int, RunCurve]]:
  by_est: dict[str, dict[int, RunCurve]] = {}
  for c in curves:
    by_est.setdefault(c.estimator, {})[c.seed] = c
  return by_est


def _per_seed(
  curves: Sequence[RunCurve],
) -> dict[str, dict[str, dict[int, float]]]:
  """Estimator -> metric -> seed -> value, for every metric the report
  compares (per-difficulty finals when all runs evaluated the same ones)."""
  metrics = {
    "final_success": lambda c: c.final_success,
    "final_return": lambda c: c.final_return,
    "auc_success": lambda c: normalized_auc(c.steps, c.success),
    "late_success": lambda c: c.late_success,
  }
  if all(train_gain(c.train_success) is not None for c in curves):
    metrics["train_success_gain"] = lambda c: train_gain(c.train_success)
  # Final success per difficulty, when every run evaluated the same ones
  # (and more than one: with one it is final_success again).
  for d in shared_difficulties(curves):
    metrics[f"final_success_d{d}"] = lambda c, d=d: c.final_by_difficulty[d]
  return {
    est: {m: {s: f(c) for s, c in runs.items()} for m, f in metrics.items()}
    for est, runs in _by_estimator(curves).items()
  }


def _compare(
  runs_a: Mapping[int, RunCurve],
  runs_b: Mapping[int, RunCurve],
  metrics_a: Mapping[str, Mapping[int, float]],
  metrics_b: Mapping[str, Mapping[int, float]],
  what: str,
) -> dict[str, Any]:
  """B against A on the seeds both finished: the paired difference of
  every metric ("vs"), whether each pair shared a machine
  ("machine_pairs"), the final evaluations task by task ("tasks", None
  when no pair kept per-task verdicts) and held-out success at equal
  training episodes ("equal_episodes", `_equal_episodes`)."""
  shared = sorted(set(runs_a) & set(runs_b))
  curves = [c for s in shared for c in (runs_a[s], runs_b[s])]
  pairs = count_machine_pairs(
    ((runs_b[s].machines, runs_a[s].machines) for s in shared),
    merge_probes(*(c.machine_probes for c in curves)),
  )
  return {
    "equal_episodes": _equal_episodes([(runs_a[s], runs_b[s]) for s in shared]),
    "vs": {
      m: paired_difference(v, metrics_a[m]).to_dict()
      for m, v in metrics_b.items()
    },
    "machine_pairs": pairs,
    "tasks": _pooled_or_none(
      {s: (runs_a[s].final_solved, runs_b[s].final_solved) for s in shared},
      what,
    ),
  }


def _equal_episodes(
  pairs: Sequence[tuple[RunCurve, RunCurve]],
) -> dict[str, Any] | None:
  """B − A held-out success at equal training episodes, paired over the
  (A, B) runs (`success_at_equal_episodes`), and the episodes E each
  side had played there; None when the two arms played as many episodes
  in every pair (the comparison is the final one then) or a run lacks
  the counts."""
  read = [success_at_equal_episodes(a, b) for a, b in pairs]
  if not read or any(r is None for r in read):
    return None
  if all(a.episodes[-1] == b.episodes[-1] for a, b in pairs):
    return None
  return {
    "episodes": _stat([e for e, _, _ in read]),
    "success": _stat([sb - sa for _, sa, sb in read]),
  }


def expert_ceiling_of(curves: Iterable[RunCurve]) -> dict[str, float]:
  """The runs' mean `expert_ceiling` per key (the held-out tasks' and each
  difficulty's), over the runs that recorded one with the same keys; {}
  when none did."""
  found = [c.expert_ceiling for c in curves if c.expert_ceiling]
  if not found or len({tuple(sorted(f)) for f in found}) > 1:
    return {}
  return {k: float(np.mean([f[k] for f in found])) for k in sorted(found[0])}


def summarize_env(
  curves: Sequence[RunCurve], baseline: str, threshold: float
) -> dict[str, Any]:
  """Per estimator statistics (and paired differences) for one env."""
  by_est = _by_estimator(curves)
  per_seed = _per_seed(curves)
  out = {}
  for est, runs in by_est.items():
    reached = [
      steps_to_threshold(c.steps, c.success, threshold) for c in runs.values()
    ]
    hit = [r for r in reached if r is not None]
    row: dict[str, Any] = {
      "seeds": sorted(runs),
      **{m: _stat(list(v.values())) for m, v in per_seed[est].items()},
      "steps_to_threshold": {
        "mean_over_reached": float(np.mean(hit)) if hit else None,
        "reached": len(hit),
        "runs": len(reached),
      },
      "per_seed": per_seed[est],
    }
    seconds = [c.seconds for c in runs.values() if c.seconds is not None]
    if seconds:  # the sweep runner's wall time: an arm's cost
      row["seconds_per_run"] = _stat(seconds)
    peaks = [c.peak_rss_mib for c in runs.values() if c.peak_rss_mib]
    if peaks:  # and its memory: the largest run's peak decides what fits
      row["peak_rss_mib"] = {"max": max(peaks), "n": len(peaks)}
    ceiling = expert_ceiling_of(runs.values())
    if ceiling:
      row["expert_ceiling"] = ceiling
    if est != baseline and baseline in per_seed:
      vs = _compare(
        by_est[baseline],
        runs,
        per_seed[baseline],
        per_seed[est],
        f"{est} against {baseline}",
      )
      row["vs_baseline"] = vs["vs"]
      row["machine_pairs"] = vs["machine_pairs"]
      if vs["equal_episodes"]:
        row["equal_episodes_vs_baseline"] = vs["equal_episodes"]
      if vs["tasks"]:
        row["tasks_vs_baseline"] = vs["tasks"]
    tasks = _pooled_or_none(
      {s: (c.sft_solved, c.final_solved) for s, c in runs.items()},
      f"{est} after RL against after SFT",
    )
    if tasks:
      row["rl_vs_sft_tasks"] = tasks
    out[est] = row
  return out


def summarize_pairs(
  curves: Sequence[RunCurve],
  stats: Mapping[str, Any],
  pairs: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
  """Each (A, B) of `pairs` (a sweep's `pairs`) whose arms share finished
  seeds in this env: B against A as `_compare` has it, with the seeds.
  `stats` is `summarize_env`'s for the same curves (its per-seed values
  are compared, not computed again)."""
  by_est = _by_estimator(curves)
  per_seed = {est: row["per_seed"] for est, row in stats.items()}
  out = []
  for a, b in pairs:
    seeds = sorted(set(by_est.get(a, ())) & set(by_est.get(b, ())))
    if not seeds:
      continue
    vs = _compare(
      by_est[a], by_est[b], per_seed[a], per_seed[b], f"{b} against {a}"
    )
    out.append({"a": a, "b": b, "seeds": seeds, **vs})
  return out


def _pooled_or_none(
  by_seed: Mapping[int, tuple[Mapping[str, bool] | None, ...]], what: str
) -> dict[str, Any] | None:
  """`pooled_tasks` over the seeds whose two evaluations both kept per-task
  verdicts (as a dict with the seeds it pooled), or None if none did."""
  pairs = {}
  for seed, (a, b) in by_seed.items():
    if a is None or b is None:
      continue
    try:
      pairs[seed] = paired_tasks(a, b)
    except ReportError as e:
      raise ReportError(f"{what}, seed {seed}: {e}") from None
  if not pairs:
    return None
  return {
    **pooled_tasks(list(pairs.values())).to_dict(),
    "seeds": sorted(pairs),
  }


def summarize(
  manifest: Mapping[str, Any],
  grid: Sequence[RunCurve],
  checks: Sequence[RunCurve],
  missing: Sequence[str],
  threshold: float,
) -> dict[str, Any]:
  """Everything the README and the JSON report hold."""
  envs, pairs = {}, {}
  for env in manifest["envs"]:
    curves = [c for c in grid if c.env == env]
    if curves:
      envs[env] = summarize_env(curves, manifest["baseline"], threshold)
      compared = summarize_pairs(curves, envs[env], manifest["pairs"])
      if compared:
        pairs[env] = compared
  seconds = [c.seconds for c in (*grid, *checks) if c.seconds is not None]
  used: dict[str, dict[str, Any]] = {}
  for c in (*grid, *checks):
    for key in dict.fromkeys(c.machines or ()):
      entry = used.setdefault(key, {"label": c.machine_labels[key], "runs": 0})
      entry["runs"] += 1
  probes = merge_probes(*(c.machine_probes for c in (*grid, *checks)))
  for key, entry in used.items():
    if probes.get(key):  # " / "-joined if its records measured several
      entry["probe"] = " / ".join(probes[key])
  return {
    "sweep": manifest["name"],
    "config": manifest.get("config", ""),
    "smoke": bool(manifest.get("smoke", False)),
    "baseline": manifest["baseline"],
    "threshold": threshold,
    "machine": machine(),
    "run_machines": used,
    "runs_unrecorded": sum(c.machines is None for c in (*grid, *checks)),
    "runs_finished": len(grid) + len(checks),
    "runs_missing": list(missing),
    "seconds_per_run": _stat(seconds) if seconds else None,
    "seconds_per_sft_stage": (
      _stat(manifest["sft_seconds"]) if manifest.get("sft_seconds") else None
    ),
    "envs": envs,
    "pairs": pairs,
    "checks": [
      {
        "name": c.name,
        "finite": c.finite,
        "rl_rows": c.rows,
        "final_success": c.final_success,
        "final_return": c.final_return,
      }
      for c in checks
    ],
  }


def machine() -> dict[str, Any]:
  import jax

  return {
    "jax_backend": jax.default_backend(),
    "platform": platform.platform(),
    "processor": platform.processor() or platform.machine(),
    "cpus": os.cpu_count(),
    "python": platform.python_version(),
  }


# ---------------------------------------------------------------------------
# Plots.


def mean_curve(
  curves: Sequence[RunCurve], field: str = "success", x: str = "steps"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(x, mean, lo, hi) over seeds on the union of evaluation steps.

  Seeds evaluated at other steps are linearly interpolated onto the union
  (with the default configs every seed is evaluated at the same steps).
  `x="episodes"` places each point at the seeds' mean training episodes
  by then (`RunCurve.episodes`) instead of its RL step.
  """
  grid = np.unique(np.concatenate([c.steps for c in curves]))
  ys = np.stack([np.interp(grid, c.steps, getattr(c, field)) for c in curves])
  stats = [t_interval(ys[:, j]) for j in range(grid.size)]
  mean = np.array([s.mean for s in stats])
  lo = np.array([s.lo for s in stats])
  hi = np.array([s.hi for s in stats])
  if x == "episodes":
    grid = np.mean([np.interp(grid, c.steps, c.episodes) for c in curves], 0)
  return grid, mean, lo, hi


def plot_learning_curves(
  env: str,
  curves: Sequence[RunCurve],
  path: str | os.PathLike,
  baseline: str | None = None,
  x: str = "steps",
) -> None:
  """Held-out success vs RL step (or, `x="episodes"`, vs training
  episodes played): one panel per estimator.

  Each panel shows the estimator's mean over seeds with a shaded 95% CI and,
  dashed, the baseline's mean, so seven curves stay readable. The y axis
  fits the data (success rates of small models are often far below 1).
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  xlabel = {
    "steps": "RL step (0 = after SFT)",
    "episodes": "training episodes played (mean over seeds)",
  }[x]
  names = sorted({c.estimator for c in curves})
  if baseline in names:
    names = [baseline] + [n for n in names if n != baseline]
  stats = {}
  for est in names:
    mine = [c for c in curves if c.estimator == est]
    stats[est] = (len(mine), *mean_curve(mine, x=x))
  top = max(float(np.nanmax(np.r_[s[2], s[4]])) for s in stats.values())
  top = min(1.05, max(0.05, 1.15 * top + 0.01))
  cols = min(4, len(names))
  rows = -(-len(names) // cols)
  fig, axes = plt.subplots(
    rows,
    cols,
    figsize=(3.1 * cols, 2.5 * rows + 0.5),
    sharex=True,
    sharey=True,
    squeeze=False,
  )
  for ax, est in zip(axes.flat, names, strict=False):
    n, x, mean, lo, hi = stats[est]
    ax.plot(x, mean, marker="o", color="C0")
    if n > 1:
      ax.fill_between(x, lo, hi, color="C0", alpha=0.2)
    if baseline in stats and est != baseline:
      _, bx, bmean, _, _ = stats[baseline]
      ax.plot(bx, bmean, "--", color="0.5", label=baseline)
      ax.legend(fontsize=7, loc="upper left")
    ax.set_title(f"{est} (n={n})", fontsize=9)
    ax.set_ylim(-0.01, top)
    ax.grid(alpha=0.3)
  for ax in axes.flat[len(names) :]:
    ax.axis("off")
  for ax in axes[-1]:
    ax.set_xlabel(xlabel, fontsize=8)
  for ax in axes[:, 0]:
    ax.set_ylabel("held-out success", fontsize=8)
  fig.suptitle(f"{env}: mean and 95% CI over seeds", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def shared_difficulties(curves: Sequence[RunCurve]) -> tuple[int, ...]:
  """The difficulties every curve has per-difficulty success for (sorted);
  () unless all curves have the same ones and there is more than one."""
  levels = {tuple(sorted(c.success_by_difficulty)) for c in curves}
  ds = levels.pop() if len(levels) == 1 else ()
  return ds if len(ds) > 1 else ()


def plot_difficulty_curves(
  env: str,
  curves: Sequence[RunCurve],
  path: str | os.PathLike,
  baseline: str | None = None,
) -> None:
  """Held-out success vs RL step on each task difficulty: one panel per
  difficulty, one line per estimator (mean over seeds, shaded 95% CI)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  levels = shared_difficulties(curves)
  if not levels:
    raise ReportError(f"{env}: the runs share no per-difficulty evaluations")
  names = sorted({c.estimator for c in curves})
  if baseline in names:
    names = [baseline] + [n for n in names if n != baseline]
  fig, axes = plt.subplots(
    1, len(levels), figsize=(3.1 * len(levels), 3.0), squeeze=False
  )
  for ax, d in zip(axes[0], levels, strict=True):
    for i, est in enumerate(names):
      mine = [
        dataclasses.replace(
          c, steps=c.difficulty_steps, success=c.success_by_difficulty[d]
        )
        for c in curves
        if c.estimator == est
      ]
      x, mean, lo, hi = mean_curve(mine)
      ax.plot(
        x, mean, marker="o", color=f"C{i}", label=f"{est} (n={len(mine)})"
      )
      if len(mine) > 1:
        ax.fill_between(x, lo, hi, color=f"C{i}", alpha=0.15)
    ax.set_title(f"difficulty {d}", fontsize=9)
    ax.set_xlabel("RL step (0 = after SFT)", fontsize=8)
    ax.grid(alpha=0.3)
  axes[0, 0].set_ylabel("held-out success", fontsize=8)
  axes[0, 0].legend(fontsize=7, loc="upper left")
  fig.suptitle(
    f"{env}: per difficulty, mean and 95% CI over seeds", fontsize=10
  )
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def plot_paired_differences(
  env: str,
  curves: Sequence[RunCurve],
  baseline: str,
  path: str | os.PathLike,
  pairs: Sequence[tuple[str, str]] | None = None,
) -> None:
  """Held-out success minus the baseline's on the same seed, vs RL step
  (with `pairs`: B's minus A's for each (A, B) instead).

  One line per estimator (or pair): the mean over the seeds both ran
  (thin lines: each seed, dashed where the pair ran on different
  machines). With seeds far apart (different SFT policies) this is the
  readable view; the absolute curves mostly show the seeds.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  by_est = _by_estimator(curves)
  vs_baseline = pairs is None
  if vs_baseline:
    pairs = [(baseline, e) for e in sorted(set(by_est) - {baseline})]
    title = f"{env}: success minus {baseline} on the same seed"
    ylabel = f"Δ held-out success vs {baseline}"
  else:
    title = f"{env}: success of B minus A on the same seed"
    ylabel = "Δ held-out success, B − A"
  fig, ax = plt.subplots(figsize=(7, 4))
  ax.axhline(0.0, color="0.5", lw=1, ls="--")
  for i, (a, b) in enumerate(pairs):
    runs_a, runs_b = by_est.get(a, {}), by_est.get(b, {})
    seeds = sorted(set(runs_a) & set(runs_b))
    if not seeds:
      continue
    both = [(runs_b[s], runs_a[s]) for s in seeds]
    # One grid for every seed of this pair, so the mean lines up.
    x = np.unique(np.concatenate([np.r_[c.steps, r.steps] for c, r in both]))
    diffs = [
      np.interp(x, c.steps, c.success) - np.interp(x, r.steps, r.success)
      for c, r in both
    ]
    for d, (c, r) in zip(diffs, both, strict=True):
      probes = merge_probes(c.machine_probes, r.machine_probes)
      mixed = machine_pair(c.machines, r.machines, probes) == "different"
      ax.plot(
        x, d, color=f"C{i}", lw=0.6, alpha=0.35, ls="--" if mixed else "-"
      )
    label = b if vs_baseline else f"{a} → {b}"
    ax.plot(
      x,
      np.mean(diffs, axis=0),
      color=f"C{i}",
      marker="o",
      label=f"{label} (n={len(diffs)})",
    )
  ax.set_title(title)
  ax.set_xlabel("RL step (0 = after SFT)")
  ax.set_ylabel(ylabel)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def estimator_specs(
  grid: Sequence[RunCurve],
) -> list[tuple[str, str, dict[str, Any]]]:
  """(label, registry name, hparams) of each swept estimator variant."""
  specs = {}
  for c in grid:
    if c.estimator not in specs and c.estimator_config:
      cfg = dict(c.estimator_config)
      specs[c.estimator] = (c.estimator, cfg.pop("name"), cfg)
  return list(specs.values())


def critic_free(
  specs: Sequence[tuple[str, str, Mapping[str, Any]]],
) -> list[tuple[str, str, Mapping[str, Any]]]:
  """The specs a logged batch alone can evaluate: not those of a learned
  critic (`estimators.uses_values`), whose advantages depend on the
  critic their run trained."""
  from agentic_rl import estimators

  return [s for s in specs if not estimators.uses_values(s[1])]


def heatmaps(
  specs: Sequence[tuple[str, str, Mapping[str, Any]]],
  path: str | os.PathLike,
  seed: int = 0,
) -> list[dict[str, float]]:
  """Each estimator on one logged Sokoban batch: heatmap PNG + credit rows."""
  import jax

  from agentic_rl import analysis
  from agentic_rl.data import packing

  trajs, random_BxT = analysis.logged_sokoban(
    num_tasks=4, group_size=4, seed=seed
  )
  batch = jax.device_get(packing.pack(trajs))
  advs = analysis.advantages(batch, specs)
  analysis.plot_heatmaps(advs, batch, str(path))
  return analysis.credit_table(advs, batch, random_BxT)


# ---------------------------------------------------------------------------
# README.

LITERATURE = (
  "The GiGPO paper (Feng et al., 2025, *Group-in-Group Policy Optimization "
  "for LLM Agent Training*) reports GiGPO above GRPO, e.g. 86.7 vs 72.8 "
  "success on ALFWorld with Qwen2.5-1.5B-Instruct."
)


def _fmt(x: float | None, digits: int = 3) -> str:
  return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(stat: Mapping[str, Any]) -> str:
  """Mean [95% CI]; a paired difference's seed-level p after it."""
  p = f" (p {stat['p']:.2g})" if stat.get("p") is not None else ""
  if stat["lo"] is None:
    return f"{_fmt(stat['mean'])} (n={stat['n']}, no CI){p}"
  return f"{_fmt(stat['mean'])} [{_fmt(stat['lo'])}, {_fmt(stat['hi'])}]{p}"


def _difficulty_metrics(stats: Mapping[str, Any]) -> list[str]:
  """The `final_success_d<k>` metrics of an env's summary (summarize_env
  gives every estimator the same ones)."""
  row = next(iter(stats.values()))
  return [m for m in row if m.startswith("final_success_d")]


def _env_table(env: str, stats: Mapping[str, Any], baseline: str) -> str:
  head = (
    "| estimator | seeds | final success | final return | AUC success |"
    f" steps to threshold (reached) | Δ success vs {baseline} |"
    f" Δ AUC vs {baseline} |\n|---|---|---|---|---|---|---|---|"
  )
  lines = [f"### {env}\n", head]
  for est, row in stats.items():
    reach = row["steps_to_threshold"]
    vs = row.get("vs_baseline")
    lines.append(
      f"| {est} | {len(row['seeds'])} | {_ci(row['final_success'])} |"
      f" {_ci(row['final_return'])} | {_ci(row['auc_success'])} |"
      f" {_fmt(reach['mean_over_reached'], 1)}"
      f" ({reach['reached']}/{reach['runs']}) |"
      f" {_ci(vs['final_success']) if vs else 'baseline'} |"
      f" {_ci(vs['auc_success']) if vs else 'baseline'} |"
    )
  lines += [
    "",
    "Held-out success averaged over the evaluations of each run's second"
    " half of RL (one evaluation's noise weighs less than in final), and"
    " whether each pair's two runs shared a machine:",
    "",
    f"| estimator | late success | Δ late vs {baseline} |"
    " pairs on one machine / different / unrecorded | wall s per run |"
    " peak memory, largest run |",
    "|---|---|---|---|---|---|",
  ]
  for est, row in stats.items():
    vs = row.get("vs_baseline")
    pairs = row.get("machine_pairs")
    seconds = row.get("seconds_per_run")
    lines.append(
      f"| {est} | {_ci(row['late_success'])} |"
      f" {_ci(vs['late_success']) if vs else 'baseline'} |"
      + (
        f" {pairs['same']} / {pairs['different']} / {pairs['unknown']} |"
        if pairs
        else " baseline |"
      )
      + (f" {_seconds(seconds)} |" if seconds else " not measured |")
      + (
        f" {_gib(row['peak_rss_mib'])} |"
        if "peak_rss_mib" in row
        else " not measured |"
      )
    )
  equal = [
    (est, row.get("equal_episodes_vs_baseline"))
    for est, row in stats.items()
    if est != baseline
  ]
  if any(d for _, d in equal):
    lines += ["", _equal_episodes_table(equal, "estimator", baseline)]
  if any(
    "rl_vs_sft_tasks" in row or "tasks_vs_baseline" in row
    for row in stats.values()
  ):
    lines += [
      "",
      "Final evaluations task by task, pooled over the seeds whose runs kept"
      " per-task results: McNemar's exact test on the (seed, task) pairs"
      " that differ. It asks whether these trained policies differ on these"
      " tasks; the seed intervals above, and their sign-test p, ask whether"
      " the estimator does.",
      "",
      "| estimator | RL against its SFT start: tasks lost / gained (p) |"
      f" against {baseline}: tasks only {baseline} / only this one solved"
      " (p) |",
      "|---|---|---|",
    ]
    for est, row in stats.items():
      lines.append(
        f"| {est} | {_tasks_cell(row.get('rl_vs_sft_tasks'))} |"
        f" {_tasks_cell(row.get('tasks_vs_baseline'), est == baseline)} |"
      )
  mixed = {
    est: row["machine_pairs"]
    for est, row in stats.items()
    if row.get("machine_pairs", {}).get("different")
  }
  if mixed:
    which = ", ".join(
      f"{est} ({p['different']}"
      + (
        f", {p['probes_agree']} of them with agreeing numerics probes)"
        if p.get("probes_agree")
        else ")"
      )
      for est, p in mixed.items()
    )
    lines += [
      "",
      f"**Caution:** some pairs ran on different machines: {which}. The"
      " same seed on another CPU is not the same run (XLA picks kernels by"
      " instruction set, and RL grows the last-bit differences), so their"
      " Δ mixes machine noise with the arm's effect. Machines whose"
      " numerics probes agree (`agentic_rl.machine.numerics_probe`) may"
      " still compute alike.",
    ]
  levels = _difficulty_metrics(stats)
  if levels:
    names = [m.removeprefix("final_success_") for m in levels]
    lines += [
      "",
      "Final held-out success per task difficulty, and paired differences"
      f" against {baseline}:",
      "",
      "| estimator | "
      + " | ".join(f"{n} | Δ {n}" for n in names)
      + " |\n|---|"
      + "---|---|" * len(names),
    ]
    for est, row in stats.items():
      vs = row.get("vs_baseline")
      cells = [
        f"{_ci(row[m])} | {_ci(vs[m]) if vs else 'baseline'}" for m in levels
      ]
      lines.append(f"| {est} | " + " | ".join(cells) + " |")
  ceiling = next(
    (r["expert_ceiling"] for r in stats.values() if "expert_ceiling" in r), {}
  )
  if ceiling:
    lines += ["", _ceiling_sentence(ceiling)]
  if all("train_success_gain" in row for row in stats.values()):
    lines += [
      "",
      f"Training-rollout success, mean of the last {TRAIN_WINDOW} RL steps'"
      f" sampled batches minus the first {TRAIN_WINDOW}'s (same tasks for"
      " every estimator of a seed):",
      "",
      f"| estimator | train success gain | Δ gain vs {baseline} |",
      "|---|---|---|",
    ]
    for est, row in stats.items():
      vs = row.get("vs_baseline")
      lines.append(
        f"| {est} | {_ci(row['train_success_gain'])} |"
        f" {_ci(vs['train_success_gain']) if vs else 'baseline'} |"
      )
  return "\n".join(lines)


def _ceiling_sentence(ceiling: Mapping[str, float]) -> str:
  levels = ", ".join(
    f"{k.removeprefix('success_rate/')} {_fmt(v)}"
    for k, v in ceiling.items()
    if k.startswith("success_rate/")
  )
  return (
    "Within the runs' limits (turn budget, context length, the"
    " environment's step budget) the environment's scripted expert solves"
    f" {_fmt(ceiling['success_rate'])} of the held-out tasks"
    + (f" ({levels})" if levels else "")
    + ": with an optimal expert on a deterministic environment, the most"
    " any policy can solve (summary.json `expert_ceiling`, mean over runs)."
  )


def _pairs_table(env: str, pairs: Sequence[Mapping[str, Any]]) -> str:
  """The sweep's own pairs in one env: B against A on their shared seeds."""
  lines = [
    f"Arm against arm in {env} (the sweep's `pairs`, and `--pairs`):"
    " B − A on the same seeds (mean [95% CI] (p of the seed-level sign"
    " test)), and the final evaluations task by task:",
    "",
    "| A → B | seeds | Δ final success | Δ late success | Δ AUC success |"
    " pairs on one machine / different / unrecorded |"
    " tasks only A / only B solved (p) |",
    "|---|---|---|---|---|---|---|",
  ]
  for p in pairs:
    vs, m = p["vs"], p["machine_pairs"]
    lines.append(
      f"| {p['a']} → {p['b']} | {len(p['seeds'])} |"
      f" {_ci(vs['final_success'])} | {_ci(vs['late_success'])} |"
      f" {_ci(vs['auc_success'])} |"
      f" {m['same']} / {m['different']} / {m['unknown']} |"
      f" {_tasks_cell(p['tasks'])} |"
    )
  equal = [(f"{p['a']} → {p['b']}", p["equal_episodes"]) for p in pairs]
  if any(d for _, d in equal):
    lines += ["", _equal_episodes_table(equal, "A → B", "A")]
  return "\n".join(lines)


def _compares_at_equal_episodes(summary: Mapping[str, Any], env: str) -> bool:
  """Whether some comparison in `env` (against the baseline, or a pair)
  is of arms that played different numbers of training episodes: then
  the report plots the curves against episodes too."""
  rows = summary["envs"][env].values()
  pairs = summary.get("pairs", {}).get(env, ())
  return any("equal_episodes_vs_baseline" in r for r in rows) or any(
    p["equal_episodes"] for p in pairs
  )


def _equal_episodes_table(
  rows: Sequence[tuple[str, Mapping[str, Any] | None]], what: str, ref: str
) -> str:
  """Held-out success at equal training episodes (`_equal_episodes`), one
  row per arm or pair; a row whose two arms played as many episodes says
  so (its comparison is the final one)."""
  lines = [
    "At equal training episodes: each run read at the most episodes both"
    " of a pair played (between evaluations, linearly), so an arm that"
    " plays more a step is compared on the same data, not the same steps:",
    "",
    f"| {what} | episodes each (mean over seeds) | Δ success vs {ref} |",
    "|---|---|---|",
  ]
  for name, d in rows:
    lines.append(
      f"| {name} | {d['episodes']['mean']:.0f} | {_ci(d['success'])} |"
      if d
      else f"| {name} | as many as {ref} | (the final Δ) |"
    )
  return "\n".join(lines)


def _seconds(stat: Mapping[str, Any]) -> str:
  """Wall seconds as "mean [lo, hi]" to the second."""
  if stat["lo"] is None:
    return f"{stat['mean']:.0f} (n={stat['n']})"
  return f"{stat['mean']:.0f} [{stat['lo']:.0f}, {stat['hi']:.0f}]"


def _gib(peak: Mapping[str, Any]) -> str:
  """The largest of n runs' peak resident memory as "x.x GiB (n=...)"."""
  return f"{peak['max'] / 1024:.1f} GiB (n={peak['n']})"


def _tasks_cell(d: Mapping[str, Any] | None, is_baseline: bool = False) -> str:
  """A pooled task-by-task comparison as "A-only / B-only (p=..., ...)"."""
  if is_baseline:
    return "baseline"
  if d is None:
    return "not kept"
  seeds = len(d["seeds"])
  return (
    f"{d['only_a']} / {d['only_b']} (p={d['p_value']:.2g};"
    f" {seeds} seed{'s' * (seeds != 1)}, {d['n']} tasks)"
  )


def _side(d: Mapping[str, Any] | None) -> str | None:
  """Where a paired 95% interval lies: 'above' or 'below' 0, 'covers' 0,
  or None when there is no interval (too few seeds, or not measured)."""
  if not d or d.get("lo") is None:
    return None
  if d["lo"] > 0:
    return "above"
  if d["hi"] < 0:
    return "below"
  return "covers"


def _late_clause(final: str | None, late: str | None, ref: str) -> str:
  """How late success reads beside final success: a final difference that
  the late evaluations do not confirm rests on one evaluation's noise.
  `ref` names what B is compared with ("the baseline", or arm A)."""
  if late is None or final is None:
    return ""
  if late == final:
    return " too" if late == "covers" else f", also {late} {ref}"
  if late == "covers":
    return (
      ": it covers 0, so the final difference is not confirmed by the"
      " late evaluations"
    )
  if final == "covers":
    return f": {late} {ref} (95% CI excludes 0), though final is not"
  return f": {late} {ref}, the opposite of final"


def _no_width(d: Mapping[str, Any]) -> str:
  """A t-interval over identical paired differences has no width: with few
  seeds and a coarse metric (k of 128 tasks) that happens, and says less
  than its 'excludes 0' suggests."""
  if d["lo"] is None or d["lo"] != d["hi"] or d["mean"] == 0:
    return ""
  return " (every seed's difference is the same, so the interval has no width)"


def _finding(
  env: str,
  a: str,
  b: str,
  vs: Mapping[str, Any],
  machine_pairs: Mapping[str, int] | None,
  tasks: Mapping[str, Any] | None,
  ref: str,
  equal: Mapping[str, Any] | None = None,
) -> str:
  """One statement of B against A (paired over seeds): final success and
  where its interval lies, whether late success agrees, success at equal
  training episodes (`equal`, when the arms' episodes differ), the tasks
  only one of them solved, and how many pairs crossed machines. `ref` is
  how the sentence names A ("the baseline", or the arm)."""
  verdicts = {
    None: "too few paired seeds for an interval",
    "above": f"above {ref} (95% CI excludes 0)",
    "below": f"below {ref} (95% CI excludes 0)",
    "covers": f"not distinguishable from {ref} (95% CI covers 0)",
  }
  d = vs["final_success"]
  final = _side(d)
  late = vs.get("late_success")
  pairs = machine_pairs or {}
  caveat = (
    f" ({pairs['different']} of {d['n']} pairs ran on different machines)"
    if pairs.get("different")
    else ""
  )
  late_text = (
    f"; late success (second half of RL) {_ci(late)}"
    f"{_late_clause(final, _side(late), ref)}{_no_width(late)}"
    if late
    else ""
  )
  equal_text = ""
  if equal:  # arms of unequal cost, read at the same episodes
    side = _side(equal["success"])
    equal_text = (
      f"; at equal training episodes ({equal['episodes']['mean']:.0f} each)"
      f" {_ci(equal['success'])}" + (f", {side} 0" if side else "")
    )
  tasks_text = (
    f"; task by task over {_possessive(len(tasks['seeds']), 'seed')} final"
    f" evaluations, {_count(tasks['only_a'], 'task')} only {a} solved"
    f" and {tasks['only_b']} only {b}"
    f" (McNemar p={tasks['p_value']:.2g})"
    if tasks
    else ""
  )
  return (
    f"{env}: {b} − {a} final success = {_ci(d)} over "
    f"{_count(d['n'], 'paired seed')}: {verdicts[final]}{_no_width(d)}"
    f"{late_text}{equal_text}{tasks_text}{caveat}."
  )


def findings(summary: Mapping[str, Any]) -> list[str]:
  """Plain statements the numbers support: every arm paired against the
  baseline, then the sweep's own pairs (`summary["pairs"]`).

  Final success is one evaluation per run; each statement says whether the
  late evaluations (second half of RL) agree with it."""
  out = []
  base = summary["baseline"]
  for env, stats in summary["envs"].items():
    for est, row in stats.items():
      if row.get("vs_baseline"):
        out.append(
          _finding(
            env,
            base,
            est,
            row["vs_baseline"],
            row.get("machine_pairs"),
            row.get("tasks_vs_baseline"),
            "the baseline",
            row.get("equal_episodes_vs_baseline"),
          )
        )
  for env, pairs in summary.get("pairs", {}).items():
    for p in pairs:
      out.append(
        _finding(
          env,
          p["a"],
          p["b"],
          p["vs"],
          p["machine_pairs"],
          p["tasks"],
          p["a"],
          p["equal_episodes"],
        )
      )
  return out


def _count(n: int, noun: str) -> str:
  """The count and the noun: 1 task, 3 tasks."""
  return f"{n} {noun}" + ("" if n == 1 else "s")


def _possessive(n: int, noun: str) -> str:
  """The count and the noun's possessive: 1 seed's, 3 seeds'."""
  return f"{n} {noun}'s" if n == 1 else f"{n} {noun}s'"


def _literature_note(summary: Mapping[str, Any]) -> str:
  if summary["smoke"]:
    return LITERATURE + " A smoke sweep can neither confirm nor contradict it."
  if not summary["baseline"].startswith("grpo"):
    return (
      LITERATURE + f" This report pairs its arms against {summary['baseline']},"
      " not a GRPO arm, so it does not test that claim."
    )
  gigpo = [
    (env, est, row["vs_baseline"])
    for env, stats in summary["envs"].items()
    for est, row in stats.items()
    if est.startswith("gigpo") and row.get("vs_baseline")
  ]
  above = [g for g in gigpo if _side(g[2]["final_success"]) == "above"]
  if not gigpo:
    return LITERATURE + " This sweep has no GiGPO run to compare."
  if above:
    where = ", ".join(
      f"{env} ({est}"
      + (
        "; late success does not confirm it)"
        if _side(vs.get("late_success")) == "covers"
        else ")"
      )
      for env, est, vs in above
    )
    agree = (
      f" Here GiGPO's final success is above GRPO's on {where}, in agreement"
    )
    unresolved = sorted({g[0] for g in gigpo} - {g[0] for g in above})
    if unresolved:
      agree += (
        f"; on {', '.join(unresolved)} no GiGPO variant is distinguishably "
        "above GRPO"
      )
    return LITERATURE + agree + "."
  return (
    LITERATURE + " Here no GiGPO variant is distinguishably above GRPO on "
    "any environment, which disagrees with the paper or, more likely at "
    "this scale, cannot resolve a difference: a ~0.8M-parameter policy, "
    "few RL steps and few seeds, against a 1.5B model trained for hundreds "
    "of steps on ALFWorld."
  )


def _missing_line(missing: Sequence[str]) -> str:
  """ "0", a short list of names, or counts per environment when long."""
  if len(missing) <= 6:
    return f"{len(missing)}" + (f" ({', '.join(missing)})" if missing else "")
  per_env: dict[str, int] = {}
  for name in missing:
    per_env[name.split("/")[0]] = per_env.get(name.split("/")[0], 0) + 1
  counts = ", ".join(f"{env}: {n}" for env, n in per_env.items())
  return f"{len(missing)} ({counts}; names in results.json)"


def _run_machines_line(summary: Mapping[str, Any]) -> str:
  """Where the runs ran, from their machine records."""
  used = summary.get("run_machines") or {}
  unrecorded = summary.get("runs_unrecorded", 0)
  parts = [
    f"{e['label']} ({e['runs']} runs"
    + (f", numerics probe {e['probe']})" if e.get("probe") else ")")
    for e in used.values()
  ]
  if unrecorded:
    parts.append(
      f"{unrecorded} runs without a machine record (begun before 2026-12-04)"
    )
  return "Runs (with their SFT stages) ran on: " + "; ".join(parts) + "."


def render_readme(
  summary: Mapping[str, Any],
  plots: Mapping[str, str],
  heatmap: str | None,
  credit_rows: Sequence[Mapping[str, Any]],
  root: str,
  out: str,
  notes: str = "",
) -> str:
  """The study's README.md from the summary (and optional extra notes)."""
  from agentic_rl import analysis

  m = summary["machine"]
  cost = summary["seconds_per_run"]
  parts = []
  if summary["smoke"]:
    parts.append(
      "> **Smoke-size sweep, not the experiment.** Runs are seconds-long CI "
      "runs (a few SFT and RL steps, a handful of held-out tasks); the "
      "numbers below test the pipeline and say nothing about the "
      "estimators.\n"
    )
  parts.append(f"# Credit-assignment sweep: `{summary['sweep']}`\n")
  parts.append(
    "**Question.** With the model, SFT warm start, task order, sampling "
    "keys and optimizer fixed, how much does the advantage estimator change "
    "held-out success after RL, and how fast does it get there? Each "
    "non-baseline estimator is compared with "
    f"`{summary['baseline']}` on the same seeds (paired design: the seed "
    "fixes model init, SFT, task order and environment seeds; the estimator "
    "is the only difference until the first update).\n"
  )
  parts.append(
    "**Commands.**\n\n```bash\n"
    f".venv/bin/python scripts/sweep.py --config={summary['config']} "
    f"--root={root} --workers=2\n"
    f".venv/bin/python scripts/report.py --root={root} --out={out}"
    f"{summary.get('report_flags', '')}\n```\n"
  )
  cost_line = (
    f"{_ci(cost)} s of wall time per run (mean [95% CI] over "
    f"{cost['n']} runs, measured by the sweep runner)"
    if cost
    else "not measured"
  )
  sft_cost = summary.get("seconds_per_sft_stage")
  if sft_cost:
    cost_line += (
      f", plus {_ci(sft_cost)} s per shared SFT stage ({sft_cost['n']} "
      "stages, one per environment and seed, that every estimator's RL "
      "starts from)"
    )
  parts.append(
    f"**Machine.** Report rendered on {m['platform']}, {m['cpus']} CPU "
    f"cores ({m['processor']}), Python {m['python']}, JAX backend "
    f"`{m['jax_backend']}`. {_run_machines_line(summary)} "
    f"Cost: {cost_line}. Finished runs: {summary['runs_finished']}; "
    f"unfinished: {_missing_line(summary['runs_missing'])}.\n"
  )
  parts.append(
    "**Metrics.** Final = the last greedy evaluation on the held-out "
    "tasks; late = the mean of the evaluations at RL steps from half the "
    "last one on (e.g. 20 and 30 of 30). "
    "AUC = trapezoid area under held-out success vs RL step (step "
    "0 = the SFT policy), divided by the step range. Steps to threshold = "
    f"first evaluation with success ≥ {summary['threshold']} (mean over the "
    "runs that reached it; reached/total in brackets). Intervals are 95% "
    "t-intervals over seeds; Δ columns are paired (same seed) differences "
    "against the baseline.\n"
  )
  parts.append("## Results\n")
  for env, stats in summary["envs"].items():
    parts.append(_env_table(env, stats, summary["baseline"]) + "\n")
    if summary.get("pairs", {}).get(env):
      parts.append(_pairs_table(env, summary["pairs"][env]) + "\n")
      if env in plots:
        parts.append(f"![{env} arm against arm](pairs_{env}.png)\n")
    if env in plots:
      parts.append(f"![{env} learning curves]({plots[env]})\n")
      parts.append(
        f"![{env} paired differences to the baseline](paired_{env}.png)\n"
      )
      if f"{env}:episodes" in plots:
        parts.append(
          f"![{env} learning curves against training episodes]"
          f"({plots[env + ':episodes']})\n"
        )
      if _difficulty_metrics(stats):
        parts.append(f"![{env} per difficulty](difficulty_{env}.png)\n")
  parts.append("## What the numbers show\n")
  parts.extend(f"- {f}" for f in findings(summary))
  parts.append("")
  parts.append(_literature_note(summary) + "\n")
  if summary["checks"]:
    parts.append("## Checks (not compared)\n")
    for c in summary["checks"]:
      parts.append(
        f"- `{c['name']}`: finished, {c['rl_rows']} RL metric rows, all "
        f"metrics finite: {'yes' if c['finite'] else 'NO'}; final success "
        f"{_fmt(c['final_success'])}, return {_fmt(c['final_return'])}."
      )
    parts.append("")
  if heatmap:
    parts.append(
      "## Per-turn advantages of each estimator on one batch\n\n"
      "A logged Sokoban batch (`agentic_rl.analysis.logged_sokoban`: an "
      "epsilon-noisy expert, 4 tasks x 4 rollouts, seed 0), every swept "
      "estimator with the hyper-parameters its runs used (except those "
      "with a learned critic, whose advantages depend on the critic their "
      "run trained). `credit_gap` = "
      "mean advantage on expert turns minus on random turns.\n\n"
      f"![advantage heatmaps]({heatmap})\n\n```\n"
      + analysis.format_table(credit_rows)
      + "\n```\n"
    )
  if notes:
    parts.append(notes.strip() + "\n")
  return "\n".join(parts)


def write_report(
  root: str,
  out: str,
  threshold: float = 0.5,
  notes: str = "",
  baseline: str | None = None,
  pairs: Sequence[str] = (),
) -> dict[str, Any]:
  """Reads the sweep under `root`; writes README.md, results.json, PNGs.

  `baseline` overrides the sweep's own (`sweep.baseline`): the estimator
  every other one is paired against, e.g. to compare two treatments.
  `pairs` ("A:B" entries) are compared besides the sweep's own `pairs`.
  """
  manifest, grid, checks, missing = load_sweep(root)
  if not grid:
    raise ReportError(f"no finished grid runs under {root}")
  flags = [] if threshold == 0.5 else [f"--threshold={threshold:g}"]
  if baseline is not None and baseline != manifest["baseline"]:
    if baseline not in manifest["estimators"]:
      raise ReportError(
        f"baseline {baseline!r} is not one of the sweep's estimators "
        f"{list(manifest['estimators'])}"
      )
    manifest = {**manifest, "baseline": baseline}
    flags.append(f"--baseline={baseline}")
  if pairs:
    extra = [p for p in _pairs(manifest, pairs) if p not in manifest["pairs"]]
    manifest = {**manifest, "pairs": [*manifest["pairs"], *extra]}
    flags.append(f"--pairs={','.join(pairs)}")
  summary = summarize(manifest, grid, checks, missing, threshold)
  summary["report_flags"] = "".join(" " + f for f in flags)
  outdir = pathlib.Path(out)
  outdir.mkdir(parents=True, exist_ok=True)
  plots = {}
  base = manifest["baseline"]
  for env in summary["envs"]:
    curves = [c for c in grid if c.env == env]
    plots[env] = f"curves_{env}.png"
    plot_learning_curves(env, curves, outdir / plots[env], baseline=base)
    if _compares_at_equal_episodes(summary, env) and all(
      c.episodes.size for c in curves
    ):
      plots[f"{env}:episodes"] = f"curves_{env}_episodes.png"
      plot_learning_curves(
        env,
        curves,
        outdir / plots[f"{env}:episodes"],
        baseline=base,
        x="episodes",
      )
    plot_paired_differences(env, curves, base, outdir / f"paired_{env}.png")
    if summary["pairs"].get(env):
      plot_paired_differences(
        env,
        curves,
        base,
        outdir / f"pairs_{env}.png",
        pairs=[(p["a"], p["b"]) for p in summary["pairs"][env]],
      )
    if shared_difficulties(curves):
      plot_difficulty_curves(
        env, curves, outdir / f"difficulty_{env}.png", baseline=base
      )
  specs = critic_free(estimator_specs(grid))
  credit_rows = heatmaps(specs, outdir / "advantages.png") if specs else []
  summary["credit_table"] = credit_rows
  (outdir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
  readme = render_readme(
    summary,
    plots,
    "advantages.png" if specs else None,
    credit_rows,
    root,
    out,
    notes,
  )
  (outdir / "README.md").write_text(readme)
  return summary


# ---------------------------------------------------------------------------
# Two conditions, run for run: the same sweep grid under a changed setting.


def final_eval(run_dir: str | os.PathLike, metric: str) -> float:
  """`metric` (e.g. "eval/success_rate") at a run's last RL evaluation;
  `late:<metric>` (e.g. "late:eval/success_rate"): its mean over the
  evaluations of the second half of RL (`late_mean`)."""
  wd = pathlib.Path(run_dir)
  _read_json(wd / "summary.json")  # finished runs only
  rows = rl_rows(read_metrics(wd / "logs" / "metrics.jsonl"))
  name = metric.removeprefix("late:")
  found = [(r["rl_step"], r[name]) for r in rows if name in r]
  if not found:
    raise ReportError(f"{wd}: no RL row logs {name!r}")
  if metric.startswith("late:"):
    return late_mean(*zip(*found, strict=True))
  return float(found[-1][1])


def final_solved(summary: Mapping[str, Any]) -> dict[str, bool] | None:
  """Per-task verdicts of a run summary's last RL evaluation, if kept."""
  evals = summary.get("evals", [])
  if evals and evals[-1].get("phase") == "rl" and "solved" in evals[-1]:
    return dict(evals[-1]["solved"])
  return None


def _is_timing(key: str) -> bool:
  """Wall-clock readings (timestamps, durations, rates per second): the
  values two runs of one computation are not expected to share."""
  return key == "time" or key.endswith(("seconds", "_per_s"))


def _same_value(a: Any, b: Any) -> bool:
  """Equal, or both NaN (as a float or as the string a log may hold)."""
  both_nan = all(
    (isinstance(x, float) and math.isnan(x)) or x == "NaN" for x in (a, b)
  )
  return a == b or both_nan


def prefix_match(
  a_dir: str | os.PathLike, b_dir: str | os.PathLike
) -> dict[str, Any]:
  """Whether run B repeated run A over the RL steps both logged: say a
  longer run of the same seed and config against the shorter one, on
  another machine. Every logged value of those steps (the post-SFT
  evaluation at step 0 included; wall-clock readings, `_is_timing`,
  excluded) is compared exactly, as is every per-task verdict of the
  evaluations both kept.

  Steps are RL steps as the report counts them (`rl_rows`), whatever
  count a row's "step" holds; a NaN matches a NaN. Returns {"steps": the
  last step compared, "values", "verdicts": how many were compared,
  "first_difference": None or {"step", "key", "a", "b"} (the earliest; a
  key logged by one run only counts, with None on the other side; "key"
  "solved:<task>" for a verdict), "machines": {"pair": `machine_pair`'s
  same / different / unknown, "probes_agree": `probes_agree`, "a", "b":
  each run's machine labels}}.
  """
  runs = [pathlib.Path(a_dir), pathlib.Path(b_dir)]
  summaries = [_read_json(wd / "summary.json") for wd in runs]
  logs = []  # per run: RL step (0 = after SFT) -> its row
  for wd in runs:
    rows = read_metrics(wd / "logs" / "metrics.jsonl")
    log = {r["rl_step"]: r for r in rl_rows(rows)}
    if (row := sft_eval_row(rows)) is not None:
      log[0] = row
    logs.append(log)
  last = min(max(log, default=-1) for log in logs)
  if last < 0:
    raise ReportError(f"{runs[0]} and {runs[1]}: no step logged by both")
  diffs: list[tuple[int, str, Any, Any]] = []

  def compare(step: int, a: Mapping, b: Mapping, prefix: str = "") -> int:
    """Appends each key of `a` or `b` whose values differ; the count."""
    keys = sorted({*a, *b})
    diffs.extend(
      (step, prefix + k, a.get(k), b.get(k))
      for k in keys
      if not _same_value(a.get(k), b.get(k))
    )
    return len(keys)

  def logged(row: Mapping) -> dict:
    skip = {"step", "rl_step"}
    return {k: v for k, v in row.items() if k not in skip and not _is_timing(k)}

  values = sum(
    compare(step, *(logged(log.get(step, {})) for log in logs))
    for step in range(last + 1)
  )
  solved_a, solved_b = (solved_by_step(s) for s in summaries)
  verdicts = sum(
    compare(step, solved_a.get(step, {}), solved_b.get(step, {}), "solved:")
    for step in sorted(s for s in {*solved_a, *solved_b} if s <= last)
  )
  first = min(diffs, key=lambda d: d[0]) if diffs else None
  (keys_a, labels_a, probes_a), (keys_b, labels_b, probes_b) = (
    run_machines(s.get("machines") or []) for s in summaries
  )
  probes = merge_probes(probes_a, probes_b)
  return {
    "steps": last,
    "values": values,
    "verdicts": verdicts,
    "first_difference": first
    and {"step": first[0], "key": first[1], "a": first[2], "b": first[3]},
    "machines": {
      "pair": machine_pair(keys_a, keys_b, probes),
      "probes_agree": probes_agree(keys_a, keys_b, probes),
      "a": sorted(labels_a.values()),
      "b": sorted(labels_b.values()),
    },
  }


def arm_pair(entry: str) -> tuple[str, str]:
  """`EST` -> (EST, EST); `EST_A:EST_B` -> (EST_A, EST_B)."""
  a, sep, b = entry.partition(":")
  if not a or (sep and not b) or ":" in b or "/" in entry:
    raise ReportError(
      f"estimator entry {entry!r}: expected EST or EST_A:EST_B (arm names)"
    )
  return a, b if sep else a


def compare_conditions(
  root_a: str | os.PathLike,
  root_b: str | os.PathLike,
  env: str,
  estimators: Sequence[str],
  metrics: Sequence[str],
) -> list[dict[str, Any]]:
  """Per estimator and metric: final values by seed under A and B, the
  paired difference B - A over the seeds finished under both, and how
  many of those pairs ran on one machine (`machine_pairs`, as in
  `summarize_env`).

  Runs are `<root>/<env>/<estimator>/seed<seed>` as a sweep lays them out,
  so two sweeps that differ in one setting (same seeds, same SFT stages)
  pair run for run. An entry `EST_A:EST_B` pairs A's EST_A with B's
  EST_B: two arms of one sweep (root_a = root_b), say a plain arm and
  the same estimator with one switch on. The success row also carries
  `tasks`: the final evaluations compared task by task, pooled over the
  seeds whose runs kept per-task verdicts (`pooled_tasks`; a = A, b = B),
  or None.
  """

  def finished_seeds(root, est) -> dict[int, pathlib.Path]:
    base = pathlib.Path(root) / env / est
    return {
      int(d.name[4:]): d
      for d in base.glob("seed*")
      if d.name[4:].isdigit() and (d / "summary.json").is_file()
    }

  out = []
  for est in estimators:
    est_a, est_b = arm_pair(est)
    a, b = finished_seeds(root_a, est_a), finished_seeds(root_b, est_b)
    shared = sorted(set(a) & set(b))
    if not shared:
      where = (
        f"{root_a} and {root_b}"
        if est_a == est_b
        else f"{root_a} ({est_a}) and {root_b} ({est_b})"
      )
      raise ReportError(f"{env}/{est}: no seed finished under both {where}")
    # Each run's summary, read once: (A's, B's) by seed.
    summaries = {
      s: tuple(_read_json(d[s] / "summary.json") for d in (a, b))
      for s in shared
    }
    records = [
      [run_machines(x.get("machines", [])) for x in (sa, sb)]
      for sa, sb in summaries.values()
    ]
    pairs = count_machine_pairs(
      ((ra[0], rb[0]) for ra, rb in records),
      merge_probes(*(r[2] for rs in records for r in rs)),
    )
    tasks = _pooled_or_none(
      {
        s: (final_solved(sa), final_solved(sb))
        for s, (sa, sb) in summaries.items()
      },
      f"{env}/{est} under {root_b} against {root_a}",
    )
    for metric in metrics:
      va = {s: final_eval(a[s], metric) for s in shared}
      vb = {s: final_eval(b[s], metric) for s in shared}
      out.append(
        {
          "estimator": est,
          "metric": metric,
          "a": va,
          "b": vb,
          "b_minus_a": paired_difference(vb, va).to_dict(),
          "machine_pairs": pairs,
          # Final success task by task, pooled over seeds (B against A).
          "tasks": tasks if metric == "eval/success_rate" else None,
        }
      )
  return out


def comparison_table(
  rows: Sequence[Mapping[str, Any]], label_a: str, label_b: str
) -> str:
  """Markdown table of `compare_conditions` rows (values in percent)."""
  lines = [
    f"| estimator | metric | {label_a} (by seed, %) | {label_b} (%) "
    f"| paired {label_b} − {label_a} | pairs on one machine / different /"
    f" unrecorded | tasks only {label_a} / only {label_b} solved (p) |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    cells = [
      " / ".join(f"{100 * v[s]:.1f}" for s in sorted(v))
      for v in (r["a"], r["b"])
    ]
    p = r["machine_pairs"]
    lines.append(
      f"| {r['estimator']} | `{r['metric']}` | {cells[0]} | {cells[1]} "
      f"| {_ci(r['b_minus_a'])} | {p['same']} / {p['different']} /"
      f" {p['unknown']} |"
      + (
        f" {_tasks_cell(r.get('tasks'))} |"
        if r["metric"] == "eval/success_rate"
        else " – |"
      )
    )
  return "\n".join(lines)


# ---------------------------------------------------------------------------
# Distillation studies: cold-start sources compared over seeds.

DISTILL_KEYS = ("pass_at_k", "kept", "teacher_eval_success_rate")
# Training metrics of a distillation run, averaged over its last updates:
# the cold start's (`distill/...`) and an RL stage's teacher term.
DISTILL_FINAL = ("divergence_per_token", "top1_agreement", "nll_per_token")
ONLINE_FINAL = ("teacher_div", "teacher_top1_agreement")
FINAL_WINDOW = 10


def _distill_final(run_dir: pathlib.Path) -> dict[str, float | None]:
  path = run_dir / "logs" / "metrics.jsonl"
  rows = read_metrics(path) if path.exists() else []
  online = rl_rows(rows)
  out: dict[str, float | None] = {}
  for k, source, key in [
    *((k, rows, f"distill/{k}") for k in DISTILL_FINAL),
    *((k, online, k) for k in ONLINE_FINAL),
  ]:
    values = [r[key] for r in source if key in r]
    tail = values[-FINAL_WINDOW:]
    out[f"final_{k}"] = float(np.mean(tail)) if tail else None
  return out


def load_distill_runs(root: str | os.PathLike) -> list[dict[str, Any]]:
  """One row per finished run `<root>/<source>_seed<seed>/summary.json`.

  Row: source, seed, params, the student's held-out success after its cold
  start (and after RL, if any), and from distillation runs the teacher's
  pass@K, the kept count, the teacher's held-out success and, from the
  metrics file, the last `FINAL_WINDOW` updates' mean divergence, top-1
  agreement with the teacher and NLL of the kept tokens (`final_*`). Runs
  with an RL-stage teacher (`rl.teacher`) report the last RL steps'
  `teacher_div` and `teacher_top1_agreement`, and that teacher's held-out
  success if the cold start had no teacher.
  """
  rows = []
  for path in sorted(pathlib.Path(root).glob("*_seed*/summary.json")):
    source, _, seed = path.parent.name.rpartition("_seed")
    if not seed.isdigit():
      raise ReportError(f"{path.parent}: expected <source>_seed<N>")
    summary = _read_json(path)
    distill = {
      **(summary.get("rl_teacher") or {}),
      **(summary.get("distill") or {}),
    }
    rows.append(
      {
        "source": source,
        "seed": int(seed),
        "params": summary["params"],
        "success": summary["success_after_sft"],
        "success_after_rl": summary["success_after_rl"],
        **{k: distill.get(k) for k in DISTILL_KEYS},
        **_distill_final(path.parent),
      }
    )
  if not rows:
    raise ReportError(f"no <source>_seed<N>/summary.json under {root}")
  return rows


def distill_summary(
  rows: Sequence[Mapping[str, Any]],
  baseline: str = "expert",
  metric: str = "success",
) -> dict[str, Any]:
  """Per source (the baseline first, then by name): held-out success over
  seeds (mean, 95% t-interval), the seed-paired difference to `baseline`,
  and the means of the distillation statistics.

  `metric` is "success" (after the cold start) or "success_after_rl" (an
  online stage's result; "start" is then the success it started from).
  """
  by_source: dict[str, dict[int, Mapping[str, Any]]] = {}
  for r in rows:
    by_source.setdefault(r["source"], {})[r["seed"]] = r
  base = {s: r[metric] for s, r in by_source.get(baseline, {}).items()}
  out = {}
  order = sorted(by_source, key=lambda name: (name != baseline, name))
  for source, runs in ((name, by_source[name]) for name in order):
    success = {s: r[metric] for s, r in runs.items()}
    stats = {
      "seeds": sorted(runs),
      "params": next(iter(runs.values()))["params"],
      "start": t_interval([r["success"] for r in runs.values()]).to_dict(),
      "success": t_interval(list(success.values())).to_dict(),
      "vs_baseline": (
        paired_difference(success, base).to_dict()
        if source != baseline and base
        else None
      ),
    }
    finals = tuple(f"final_{k}" for k in DISTILL_FINAL + ONLINE_FINAL)
    for k in DISTILL_KEYS + finals:
      values = [r[k] for r in runs.values() if r.get(k) is not None]
      stats[k] = float(np.mean(values)) if values else None
    out[source] = stats
  return out


def distill_table(summary: Mapping[str, Any], baseline: str = "expert") -> str:
  """The summary as a Markdown table."""
  lines = [
    "| cold start | params | seeds | held-out success | vs "
    f"{baseline} (paired) | teacher pass@K | kept | teacher held-out | "
    "top-1 agreement | divergence / token |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for source, s in summary.items():
    diff = "" if s["vs_baseline"] is None else _ci(s["vs_baseline"])
    lines.append(
      f"| {source} | {s['params']:,} | {len(s['seeds'])} | "
      f"{_ci(s['success'])} | {diff} | {_fmt(s['pass_at_k'])} | "
      f"{_fmt(s['kept'], 0)} | {_fmt(s['teacher_eval_success_rate'])} | "
      f"{_fmt(s['final_top1_agreement'])} | "
      f"{_fmt(s['final_divergence_per_token'])} |"
    )
  return "\n".join(lines)


def online_table(summary: Mapping[str, Any], baseline: str = "rl") -> str:
  """A `distill_summary(metric="success_after_rl")` as a Markdown table."""
  lines = [
    "| online stage | seeds | held-out at start | after | vs "
    f"{baseline} (paired) | teacher held-out | teacher top-1 agreement | "
    "teacher divergence |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for source, s in summary.items():
    diff = "" if s["vs_baseline"] is None else _ci(s["vs_baseline"])
    lines.append(
      f"| {source} | {len(s['seeds'])} | {_fmt(s['start']['mean'])} | "
      f"{_ci(s['success'])} | {diff} | "
      f"{_fmt(s['teacher_eval_success_rate'])} | "
      f"{_fmt(s['final_teacher_top1_agreement'])} | "
      f"{_fmt(s['final_teacher_div'])} |"
    )
  return "\n".join(lines)


def plot_online(
  root: str | os.PathLike,
  rows: Sequence[Mapping[str, Any]],
  summary: Mapping[str, Any],
  path: str | os.PathLike,
) -> None:
  """Held-out success vs RL step of an online stage: the mean over seeds of
  each arm (source), one line each, and the teacher's as a dashed line."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 4))
  for i, name in enumerate(summary):
    curves = [
      load_run(
        root,
        {
          "name": f"{name}_seed{r['seed']}",
          "env": "",
          "estimator": name,
          "seed": r["seed"],
        },
      )
      for r in rows
      if r["source"] == name
    ]
    x, mean, lo, hi = mean_curve(curves)
    ax.plot(
      x, mean, marker="o", color=f"C{i}", label=f"{name} (n={len(curves)})"
    )
    if len(curves) > 1:
      ax.fill_between(x, lo, hi, color=f"C{i}", alpha=0.12)
  teacher = [
    s["teacher_eval_success_rate"]
    for s in summary.values()
    if s["teacher_eval_success_rate"] is not None
  ]
  if teacher:
    ax.axhline(
      float(np.mean(teacher)), color="0.3", ls="--", lw=1, label="teacher"
    )
  ax.set_xlabel("online step (0 = after the cold start)")
  ax.set_ylabel("held-out success")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def plot_distill(
  rows: Sequence[Mapping[str, Any]],
  summary: Mapping[str, Any],
  path: str | os.PathLike,
) -> None:
  """Held-out success by cold-start source: a bar per source (the mean),
  a dot per seed, and the teacher's own held-out success as a line."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  names = list(summary)
  fig, ax = plt.subplots(figsize=(7, 4))
  for i, name in enumerate(names):
    ax.bar(i, summary[name]["success"]["mean"], color=f"C{i}", alpha=0.5)
    seeds = [r["success"] for r in rows if r["source"] == name]
    ax.scatter([i] * len(seeds), seeds, color=f"C{i}", zorder=3, s=18)
  teacher = [
    s["teacher_eval_success_rate"]
    for s in summary.values()
    if s["teacher_eval_success_rate"] is not None
  ]
  if teacher:
    ax.axhline(
      float(np.mean(teacher)), color="0.3", ls="--", lw=1, label="teacher"
    )
    ax.legend(fontsize=8)
  ax.set_xticks(range(len(names)))
  ax.set_xticklabels(
    [f"{n}\n{summary[n]['params'] / 1e6:.2f}M" for n in names], fontsize=8
  )
  ax.set_ylabel("held-out success after the cold start")
  ax.grid(alpha=0.3, axis="y")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
