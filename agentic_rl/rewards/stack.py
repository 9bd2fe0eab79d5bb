"""The reward stack: layered per-turn feedback with a trace of every layer.

Layers, each with a weight from the config:

  verifier  the environment's own reward components (programmatic outcome),
            one weight per component name (`verifier/<name>`);
  refusal   for tasks that should be declined (out-of-scope, unsafe), 1 if
            the final answer refuses, else 0;
  process   the turn's process score (mean of selected process signals);
  failure   the failure-code penalty from the failure policy;
  judge     an optional callable `judge(task, turns_so_far, turn)`.

The reward of a turn is the sum of weighted components. Every raw value,
weight and weighted value is kept in a `TraceRecord`, so a run can later tell
"could not do it" from "did it wrong" from "was rewarded for the wrong thing"
(see `rewards.trace`).

Before scoring, `Turn.reward_components` holds the environment's raw
components (the rollout copies them from `StepResult`). `score_trajectory`
replaces them with the weighted contributions and keeps the raw values in
`Trajectory.info["reward_trace"]`, from which a replayed trajectory can be
re-scored under a different config.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np

from agentic_rl.envs.base import StepResult
from agentic_rl.envs.failures import FailurePolicy, failure_policies_from_config
from agentic_rl.rewards import process as process_lib
from agentic_rl.rewards import refusal as refusal_lib
from agentic_rl.rewards.judges import Judge, make_judge
from agentic_rl.types import (
  ActionKind,
  FailureCode,
  Task,
  Termination,
  Trajectory,
  Turn,
)

TRACE_KEY = "reward_trace"
VERIFIER_PREFIX = "verifier/"
# Built-in environments report their verdict as `success`, except these.
DEFAULT_OUTCOME_KEYS = {"sokoban": "solved"}


class NonFiniteRewardError(ValueError):
  """A reward component (from an environment or a judge) is NaN or inf."""


class NotScoredError(ValueError):
  """A trajectory has no reward trace; run `RewardStack.score_trajectory`."""


@dataclasses.dataclass(frozen=True)
class TraceRecord:
  """Every component of one turn's reward, before and after weighting."""

  turn_index: int
  raw: dict[str, float]
  weights: dict[str, float]
  weighted: dict[str, float]
  reward: float
  process_score: float
  failure: str | None
  judge: float | None  # None when no judge ran on this turn
  trained: bool
  done: bool
  verifier_outcome: float | None  # the outcome component, if emitted

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> TraceRecord:
    return cls(**d)

  def env_components(self) -> dict[str, float]:
    """The environment's raw components, as it returned them."""
    n = len(VERIFIER_PREFIX)
    return {
      k[n:]: v for k, v in self.raw.items() if k.startswith(VERIFIER_PREFIX)
    }


@dataclasses.dataclass(frozen=True)
class RewardStack:
  """Scores turns and trajectories; see the module docstring for layers."""

  outcome_key: str = "success"
  outcome_keys: Mapping[str, str] = dataclasses.field(
    default_factory=lambda: dict(DEFAULT_OUTCOME_KEYS)
  )
  verifier_weights: Mapping[str, float] = dataclasses.field(
    default_factory=dict
  )
  verifier_default_weight: float = 1.0
  success_threshold: float = 0.5
  process_signals: tuple[str, ...] = ("valid_action",)
  process_weight: float = 0.0
  failure_policies: Mapping[FailureCode, FailurePolicy] = dataclasses.field(
    default_factory=lambda: failure_policies_from_config(None)
  )
  failure_weight: float = 1.0
  refusal_tags: tuple[str, ...] = refusal_lib.DEFAULT_REFUSAL_TAGS
  refusal_weight: float = 1.0
  judge: Judge | None = None
  judge_weight: float = 1.0
  judge_final_only: bool = True

  def __post_init__(self):
    process_lib.check_signal_names(self.process_signals)
    # NaN would make `succeeded` false for every trajectory, silently.
    _check_finite("success_threshold", self.success_threshold)
    for name, value in self._weights().items():
      _check_finite(f"weight {name}", value)

  def _weights(self) -> dict[str, float]:
    return {
      "verifier_default": self.verifier_default_weight,
      "process": self.process_weight,
      "failure": self.failure_weight,
      "refusal": self.refusal_weight,
      "judge": self.judge_weight,
      **{f"{VERIFIER_PREFIX}{k}": v for k, v in self.verifier_weights.items()},
    }

  def outcome_key_for(self, task: Task) -> str:
    """The environment component that carries the verdict for `task`."""
    return self.outcome_keys.get(task.family, self.outcome_key)

  def expects_refusal(self, task: Task) -> bool:
    return refusal_lib.expects_refusal(task, self.refusal_tags)

  def trace_turn(
    self,
    task: Task,
    turns_so_far: Sequence[Turn],
    turn: Turn,
    env_components: Mapping[str, float],
    done: bool,
  ) -> TraceRecord:
    """Scores one turn given the history before it; the core of the stack."""
    raw: dict[str, float] = {}
    weights: dict[str, float] = {}
    for name, value in env_components.items():
      _check_finite(f"environment component {name!r}", value)
      key = f"{VERIFIER_PREFIX}{name}"
      raw[key] = float(value)
      weights[key] = float(
        self.verifier_weights.get(name, self.verifier_default_weight)
      )

    if done and self.expects_refusal(task):
      answer = turn.action.text if turn.action is not None else ""
      answered = turn.action is not None and (
        turn.action.kind == ActionKind.ANSWER
      )
      phrases = refusal_lib.refusal_phrases(task)
      raw["refusal"] = float(
        answered and refusal_lib.is_refusal(answer, phrases)
      )
      weights["refusal"] = float(self.refusal_weight)

    score = process_lib.process_score(
      self.process_signals, turns_so_far, turn, dict(env_components)
    )
    _check_finite("process score", score)
    score = float(score)
    raw["process"] = score
    weights["process"] = float(self.process_weight)

    trained = True
    if turn.failure is not None:
      policy = self.failure_policies.get(turn.failure)
      if policy is not None:
        raw["failure"] = float(policy.reward)
        weights["failure"] = float(self.failure_weight)
        trained = bool(policy.trained)

    judge_value = None
    if self.judge is not None and (done or not self.judge_final_only):
      judge_value = float(self.judge(task, turns_so_far, turn))
      _check_finite("judge output", judge_value)
      raw["judge"] = judge_value
      weights["judge"] = float(self.judge_weight)

    weighted = {k: weights[k] * v for k, v in raw.items()}
    outcome = env_components.get(self.outcome_key_for(task))
    return TraceRecord(
      turn_index=len(turns_so_far),
      raw=raw,
      weights=weights,
      weighted=weighted,
      reward=math.fsum(weighted.values()),
      process_score=score,
      failure=None if turn.failure is None else str(turn.failure),
      judge=judge_value,
      trained=trained,
      done=done,
      verifier_outcome=None if outcome is None else float(outcome),
    )

  def score_turn(
    self,
    task: Task,
    step_result: StepResult,
    turn_index: int,
    turns_so_far: Sequence[Turn] | None = None,
    turn: Turn | None = None,
  ) -> tuple[float, dict[str, float], float]:
    """Scores one environment step online, during the rollout.

    Args:
      task: the task being played.
      step_result: what `Environment.step` returned for this turn.
      turn_index: position of this turn in the episode.
      turns_so_far: the earlier turns, if known (history-based process
        signals such as `novel_state` need them); must have `turn_index`
        entries when given.
      turn: the turn itself, with its parsed action, if already built.
        Judges and the refusal verifier read the action, so pass it for
        them; without it a turn counts as having no action.

    Returns:
      (reward, weighted components, process score).
    """
    if turn_index < 0:
      raise ValueError(f"turn_index must be >= 0, got {turn_index}")
    if turns_so_far is not None and len(turns_so_far) != turn_index:
      raise ValueError(
        f"turns_so_far has {len(turns_so_far)} turns but turn_index is "
        f"{turn_index}"
      )
    if turn is None:
      turn = Turn(
        obs_tokens=[],
        action_tokens=[],
        action_logp=[],
        observation=step_result.observation,
        failure=step_result.failure,
        state_key=step_result.state_key,
      )
    history = list(turns_so_far or ())
    record = self.trace_turn(
      task, history, turn, step_result.reward_components, step_result.done
    )
    record = dataclasses.replace(record, turn_index=turn_index)
    return record.reward, dict(record.weighted), record.process_score

  def score_trajectory(self, trajectory: Trajectory) -> Trajectory:
    """Returns a scored copy: rewards, components, masks, outcome, trace.

    Re-scoring an already scored trajectory reads the raw environment
    components back from its trace, so it is idempotent and can apply a new
    config to replayed data.
    """
    old_trace = trajectory.info.get(TRACE_KEY)
    if old_trace is not None and len(old_trace) != len(trajectory.turns):
      raise ValueError(
        f"trajectory {trajectory.task.id!r}: trace has {len(old_trace)} "
        f"records for {len(trajectory.turns)} turns"
      )
    finished = trajectory.termination == Termination.DONE
    last = len(trajectory.turns) - 1
    history: list[Turn] = []
    records: list[TraceRecord] = []
    for i, turn in enumerate(trajectory.turns):
      if old_trace is not None:
        env = TraceRecord.from_dict(old_trace[i]).env_components()
      else:
        env = dict(turn.reward_components)
      record = self.trace_turn(
        trajectory.task, history, turn, env, finished and i == last
      )
      records.append(record)
      history.append(
        dataclasses.replace(
          turn,
          reward=record.reward,
          reward_components=dict(record.weighted),
          process_score=record.process_score,
          trained=record.trained,
        )
      )
    info = {**trajectory.info, TRACE_KEY: [r.to_dict() for r in records]}
    return dataclasses.replace(
      trajectory,
      turns=history,
      outcome=self.outcome(trajectory.task, records),
      info=info,
    )

  def outcome(self, task: Task, records: Sequence[TraceRecord]) -> float:
    """The verifier's verdict on the episode.

    For refusal tasks it is the refusal check of the final turn; otherwise
    the last value the environment emitted for the task's outcome component
    (0 if never), clipped to [0, 1]: environments report success either as
    a score in [0, 1] or as a positive bonus (Sokoban's `solved` is +10).
    """
    if self.expects_refusal(task):
      return records[-1].raw.get("refusal", 0.0) if records else 0.0
    for record in reversed(records):
      if record.verifier_outcome is not None:
        return min(1.0, max(0.0, record.verifier_outcome))
    return 0.0

  def succeeded(self, trajectory: Trajectory) -> bool:
    return trajectory.outcome >= self.success_threshold


def _check_finite(what: str, value: float) -> None:
  # numbers.Real admits Python and numpy ints and floats (np.float32 is not a
  # float); np.bool_ is admitted like bool, which is an int.
  real = isinstance(value, numbers.Real | np.bool_)
  if not real or not math.isfinite(value):
    raise NonFiniteRewardError(f"{what} must be a finite number, got {value!r}")


def default_config() -> ml_collections.ConfigDict:
  """The reward config with every knob, at its default."""
  cfg = ml_collections.ConfigDict()
  cfg.verifier = ml_collections.ConfigDict()
  cfg.verifier.outcome_key = "success"
  # Families whose environments name their verdict differently.
  cfg.verifier.outcome_keys = ml_collections.ConfigDict(DEFAULT_OUTCOME_KEYS)
  cfg.verifier.weights = ml_collections.ConfigDict()  # component -> weight
  cfg.verifier.default_weight = 1.0
  cfg.verifier.success_threshold = 0.5
  cfg.process = ml_collections.ConfigDict()
  # Names from rewards.process, or "env:<component>" to read an environment
  # component (the tool environments report "env:progress").
  cfg.process.signals = ("valid_action",)
  cfg.process.weight = 0.0  # computed and traced, but unweighted by default
  cfg.failure = ml_collections.ConfigDict()
  cfg.failure.weight = 1.0
  # Overrides of envs.failures.DEFAULT_FAILURE_POLICIES, by code name.
  cfg.failure.policies = ml_collections.ConfigDict()
  cfg.refusal = ml_collections.ConfigDict()
  cfg.refusal.tags = refusal_lib.DEFAULT_REFUSAL_TAGS
  cfg.refusal.weight = 1.0
  cfg.judge = ml_collections.ConfigDict()
  cfg.judge.name = ""  # off by default; e.g. "format" or "rubric"
  cfg.judge.options = ml_collections.ConfigDict()
  cfg.judge.weight = 1.0
  cfg.judge.final_only = True
  return cfg


def from_config(
  cfg: ml_collections.ConfigDict,
  failure_policies: Mapping[FailureCode, FailurePolicy] | None = None,
  judge: Judge | None = None,
) -> RewardStack:
  """Builds a `RewardStack` from a (possibly partial) reward config.

  Missing fields take their `default_config()` values. `judge` overrides
  `cfg.judge.name`; `failure_policies` overrides `cfg.failure.policies`.
  """
  full = default_config()
  full.update(cfg)
  if failure_policies is None:
    failure_policies = failure_policies_from_config(full.failure.policies)
  if judge is None and full.judge.name:
    judge = make_judge(full.judge.name, **full.judge.options.to_dict())
  return RewardStack(
    outcome_key=full.verifier.outcome_key,
    outcome_keys=dict(full.verifier.outcome_keys.to_dict()),
    verifier_weights=dict(full.verifier.weights.to_dict()),
    verifier_default_weight=full.verifier.default_weight,
    success_threshold=full.verifier.success_threshold,
    process_signals=tuple(full.process.signals),
    process_weight=full.process.weight,
    failure_policies=dict(failure_policies),
    failure_weight=full.failure.weight,
    refusal_tags=tuple(full.refusal.tags),
    refusal_weight=full.refusal.weight,
    judge=judge,
    judge_weight=full.judge.weight,
    judge_final_only=full.judge.final_only,
  )
