"""Reading the reward trace: why did a trajectory get the reward it got?

`diagnose` puts a scored trajectory in one of four bins:

  success         the verifier passed;
  could_not       the verifier failed and the policy never committed to a
                  wrong result: it ran out of turns, tokens, budget or
                  time, or crashed (unsolvable tasks usually land here);
  did_wrong       the verifier failed on a result the policy committed to
                  (the environment ended the episode: a wrong answer);
  rewarded_wrong  the verifier failed but the total reward was positive:
                  shaping (process, judge, partial components) paid for the
                  wrong thing. This is checked before the other two failure
                  bins because it is the one that corrupts training.

`trace_summary` turns a batch of them into rates for logging.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

from agentic_rl.rewards.stack import TRACE_KEY, NotScoredError, TraceRecord
from agentic_rl.types import FailureCode, Termination, Trajectory

SUCCESS = "success"
COULD_NOT = "could_not"
DID_WRONG = "did_wrong"
REWARDED_WRONG = "rewarded_wrong"
CATEGORIES = (SUCCESS, COULD_NOT, DID_WRONG, REWARDED_WRONG)


def trace_records(trajectory: Trajectory) -> list[TraceRecord]:
  """The per-turn trace `RewardStack.score_trajectory` stored."""
  raw = trajectory.info.get(TRACE_KEY)
  if raw is None:
    raise NotScoredError(
      f"trajectory {trajectory.task.id!r} has no {TRACE_KEY!r}; score it "
      "with RewardStack.score_trajectory first"
    )
  return [TraceRecord.from_dict(r) for r in raw]


# Failures that end an episode without the policy committing to a result.
_STALLS = (
  FailureCode.BUDGET_EXHAUSTED,
  FailureCode.TIMEOUT,
  FailureCode.CONTEXT_OVERFLOW,
)


def committed(trajectory: Trajectory) -> bool:
  """Whether the episode ended on a result the verifier could judge.

  The environment ending the episode itself (`done`) means the policy's last
  action was final (an answer, a finished puzzle state); turn or token
  limits, errors and budget or context exhaustion mean it never got there.
  """
  if not trajectory.turns or trajectory.termination != Termination.DONE:
    return False
  return trajectory.turns[-1].failure not in _STALLS


def diagnose(trajectory: Trajectory, success_threshold: float = 0.5) -> str:
  """One of `CATEGORIES` for a scored trajectory (see module docstring)."""
  records = trace_records(trajectory)
  if trajectory.outcome >= success_threshold:
    return SUCCESS
  if math.fsum(r.reward for r in records) > 0:
    return REWARDED_WRONG
  return DID_WRONG if committed(trajectory) else COULD_NOT


def _shaping_reward(record: TraceRecord) -> float:
  # What non-verifier layers paid on this turn, penalties excluded.
  return sum(
    max(v, 0.0) for k, v in record.weighted.items() if k in ("process", "judge")
  )


def trace_summary(
  trajectories: Sequence[Trajectory], success_threshold: float = 0.5
) -> dict[str, float]:
  """Rates and means over scored trajectories, flat keys for a logger.

  Keys: `rate/<category>` (fractions summing to 1), `reward/total_mean`,
  `outcome_mean`, `component/<name>_mean` (weighted, per turn),
  `failure/<code>_rate` (per turn), `untrained_turn_rate`, `judge_mean`
  (over judged turns), and `shaping_on_failure_rate`: the fraction of failed
  trajectories where process or judge paid anything at all, an early
  warning before `rate/rewarded_wrong` grows.
  """
  if not trajectories:
    raise ValueError("trace_summary needs at least one trajectory")
  counts = collections.Counter(
    diagnose(t, success_threshold) for t in trajectories
  )
  n = len(trajectories)
  out = {f"rate/{c}": counts[c] / n for c in CATEGORIES}
  component_sums: collections.Counter = collections.Counter()
  failures: collections.Counter = collections.Counter()
  turns = untrained = 0
  judged: list[float] = []
  totals: list[float] = []
  failed = shaped_failed = 0
  for traj in trajectories:
    records = trace_records(traj)
    totals.append(math.fsum(r.reward for r in records))
    for r in records:
      turns += 1
      untrained += not r.trained
      component_sums.update(r.weighted)
      if r.failure is not None:
        failures[r.failure] += 1
      if r.judge is not None:
        judged.append(r.judge)
    if traj.outcome < success_threshold:
      failed += 1
      shaped_failed += any(_shaping_reward(r) > 0 for r in records)
  out["reward/total_mean"] = math.fsum(totals) / n
  out["outcome_mean"] = math.fsum(t.outcome for t in trajectories) / n
  for name, total in sorted(component_sums.items()):
    out[f"component/{name}_mean"] = total / max(turns, 1)
  for code, count in sorted(failures.items()):
    out[f"failure/{code}_rate"] = count / max(turns, 1)
  out["untrained_turn_rate"] = untrained / max(turns, 1)
  out["judge_mean"] = math.fsum(judged) / len(judged) if judged else 0.0
  out["shaping_on_failure_rate"] = shaped_failed / failed if failed else 0.0
  return out
