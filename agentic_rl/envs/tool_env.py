"""`ToolEnvironment`: the shared step logic of tool-using environments.

A subclass describes its episode; this class runs the turn:

```
class MyEnv(ToolEnvironment):
  protocol = "tool_call"          # or "tags" (Search-R1)
  max_turns = 8                   # turn budget per episode

  def generate_task(self, seed, difficulty=0) -> Task: ...
  def reset(self, task, seed=0) -> str:
    ...                            # build episode state
    self.begin_episode()           # resets the turn counter
    return first_observation
  def tools(self) -> dict[str, Tool]: ...       # for the current state
  def on_answer(self, text) -> AnswerResult: ... # verifier on <answer>
  def state_key(self) -> str: ...                # canonical state id
  # optional: on_tool_result(action, outcome) -> dict of process rewards
```

`step(action_text)`:

1. takes `state_key()` *before* acting (the GiGPO anchor, see `StepResult`);
2. parses the text with the protocol's parser; malformed -> MALFORMED_CALL;
3. an answer goes to `on_answer`; a tool call is validated and executed by a
   `ToolExecutor` (UNKNOWN_TOOL, BAD_ARGUMENTS, TOOL_ERROR, TIMEOUT,
   FORBIDDEN come from there);
4. failures come back as an observation that names the code and the reason,
   so the policy can recover on its next turn;
5. counts the turn: when the budget is used up without an answer the episode
   ends with BUDGET_EXHAUSTED (unless the turn already failed otherwise; then
   `info["budget_exhausted"]` is set). Steps after the end return
   BUDGET_EXHAUSTED with `done=True`.

It never raises: an exception from a subclass hook becomes TOOL_ERROR. Failure
penalties are *not* added here; the reward stack applies
`agentic_rl.envs.failures` to `StepResult.failure`, so each cost is counted
once.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

from agentic_rl.envs.base import Environment, StepResult, Tool
from agentic_rl.envs.parsing import PROTOCOLS, format_observation, parse_action
from agentic_rl.envs.tools import ToolExecutor, ToolOutcome
from agentic_rl.types import Action, ActionKind, FailureCode


@dataclasses.dataclass
class AnswerResult:
  """What `on_answer` returns: verifier rewards and whether the episode ends.

  `observation` is shown to the policy when the episode continues (e.g.
  "tests still fail"); `failure` lets a verifier flag e.g. FORBIDDEN.
  """

  reward_components: dict[str, float]
  done: bool = True
  observation: str = ""
  failure: FailureCode | None = None
  info: dict[str, Any] = dataclasses.field(default_factory=dict)


_AFTER_END = "The episode is over; no further actions are accepted."


class ToolEnvironment(Environment):
  """Base class for environments whose actions are tool calls or answers."""

  protocol: str = "tool_call"
  max_turns: int = 8

  def __init__(
    self,
    max_turns: int | None = None,
    executor: ToolExecutor | None = None,
    tool_timeout_s: float = 10.0,
    protocol: str | None = None,
  ):
    if max_turns is not None:
      self.max_turns = max_turns
    if protocol is not None:
      self.protocol = protocol
    if self.protocol not in PROTOCOLS:
      raise ValueError(
        f"unknown protocol {self.protocol!r}; expected one of {PROTOCOLS}"
      )
    if self.max_turns < 1:
      raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
    self._owns_executor = executor is None
    self.executor = executor or ToolExecutor(timeout_s=tool_timeout_s)
    self.turns_used = 0
    self.done = False
    self.started = False

  # -- subclass hooks ------------------------------------------------------

  @abc.abstractmethod
  def tools(self) -> dict[str, Tool]:
    """The tools available in the current episode state, by name."""

  @abc.abstractmethod
  def on_answer(self, text: str) -> AnswerResult:
    """Scores a final answer (the verifier)."""

  @abc.abstractmethod
  def state_key(self) -> str:
    """A canonical id of the current state (equal states, equal keys)."""

  def on_tool_result(
    self, action: Action, outcome: ToolOutcome
  ) -> dict[str, float]:
    """Process reward components for a tool call (none by default)."""
    del action, outcome
    return {}

  def describe_failure(self, code: FailureCode, error: str) -> str:
    """The observation text for a failed turn; says how to recover."""
    return f"Error ({code.value}): {error}"

  # -- driver ---------------------------------------------------------------

  def begin_episode(self) -> None:
    """Call at the end of `reset`: restarts the turn budget.

    An environment reset after `close` gets a fresh executor of its own
    (as its subclasses remake what `close` released, e.g. a sandbox), so
    its tool calls do not all fail as "shut down".
    """
    if self._owns_executor and self.executor.closed:
      self.executor = ToolExecutor(timeout_s=self.executor.timeout_s)
    self.turns_used = 0
    self.done = False
    self.started = True

  @property
  def turns_left(self) -> int:
    return max(0, self.max_turns - self.turns_used)

  def tool_schemas(self) -> list[dict[str, Any]]:
    try:
      tools = self.tools()
    except Exception:  # noqa: BLE001 - schemas before reset may not exist
      return []
    return [tools[name].schema() for name in sorted(tools)]

  def _observe(self, text: str) -> str:
    return format_observation(text, self.protocol)

  def _safe_key(self) -> str:
    try:
      return str(self.state_key())
    except Exception as e:  # noqa: BLE001 - never raise from step
      return f"<state_key failed: {type(e).__name__}>"

  def step(self, action_text: str) -> StepResult:
    key = self._safe_key()
    if not self.started or self.done:
      if self.started:
        why, code = _AFTER_END, FailureCode.BUDGET_EXHAUSTED
      else:
        why, code = "step called before reset", FailureCode.TOOL_ERROR
      return StepResult(
        observation=self._observe(why),
        reward_components={},
        done=True,
        failure=code,
        state_key=key,
        info={"error": why},
      )
    self.turns_used += 1
    try:
      result = self._act(action_text, key)
    except Exception as e:  # noqa: BLE001 - a crashing hook is a tool error
      error = f"environment error: {type(e).__name__}: {e}"
      result = StepResult(
        observation=self._observe(
          self.describe_failure(FailureCode.TOOL_ERROR, error)
        ),
        reward_components={},
        done=True,
        failure=FailureCode.TOOL_ERROR,
        state_key=key,
        info={"error": error},
      )
    result.info["turn"] = self.turns_used
    if not result.done and self.turns_used >= self.max_turns:
      result.done = True
      result.info["budget_exhausted"] = True
      if result.failure is None:
        result.failure = FailureCode.BUDGET_EXHAUSTED
      result.observation += self._observe(
        f"Turn budget of {self.max_turns} used up without a final answer."
      )
    self.done = result.done
    return result

  def _act(self, action_text: str, key: str) -> StepResult:
    action = parse_action(action_text, self.protocol)
    info: dict[str, Any] = {"action": action.to_dict()}
    if action.kind == ActionKind.MALFORMED:
      error = f"malformed action: {action.error}"
      return StepResult(
        observation=self._observe(
          self.describe_failure(FailureCode.MALFORMED_CALL, error)
        ),
        reward_components={},
        done=False,
        failure=FailureCode.MALFORMED_CALL,
        state_key=key,
        info={**info, "error": error},
      )
    if action.kind == ActionKind.ANSWER:
      answer = self.on_answer(action.text)
      return StepResult(
        observation=self._observe(answer.observation)
        if answer.observation
        else "",
        reward_components=dict(answer.reward_components),
        done=answer.done,
        failure=answer.failure,
        state_key=key,
        info={**info, **answer.info},
      )
    outcome = self.executor.call(self.tools(), action)
    info.update(tool=action.name, seconds=outcome.seconds)
    components = self.on_tool_result(action, outcome)
    if outcome.failure is not None:
      info["error"] = outcome.error
      text = self.describe_failure(outcome.failure, outcome.error)
    else:
      text = outcome.output
    return StepResult(
      observation=self._observe(text),
      reward_components=dict(components),
      done=False,
      failure=outcome.failure,
      state_key=key,
      info=info,
    )

  def close(self) -> None:
    if self._owns_executor:
      self.executor.shutdown()
