"""The environment contract and the environment registry.

Environments are host-side Python. They see the policy's action text and
return observation text; the rollout tokenizes observations once. They never
raise into the driver: every bad action or crashing tool becomes a
`FailureCode` on the returned `StepResult`.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from agentic_rl.types import FailureCode, Task


@dataclasses.dataclass
class StepResult:
  """What `Environment.step` returns.

  `state_key` is the canonical id of the state in which the action was taken
  (not the state after it), so two trajectories that acted in the same state
  share a key and GiGPO can group them.
  """

  observation: str
  reward_components: dict[str, float]
  done: bool
  failure: FailureCode | None
  state_key: str
  info: dict[str, Any] = dataclasses.field(default_factory=dict)


def episode_over(observation: str, state_key: str) -> StepResult:
  """What `step` returns after the episode ended: no reward, a failure."""
  return StepResult(
    observation,
    {},
    True,
    FailureCode.BUDGET_EXHAUSTED,
    state_key,
    {"reason": "episode is over"},
  )


@dataclasses.dataclass(frozen=True)
class Tool:
  """A callable tool with an OpenAI-style function schema.

  `parameters` is a JSON schema of the arguments object; arguments are
  validated against it before `fn(**arguments)` runs.
  """

  name: str
  description: str
  parameters: dict[str, Any]
  fn: Callable[..., str]

  def schema(self) -> dict[str, Any]:
    return {
      "type": "function",
      "function": {
        "name": self.name,
        "description": self.description,
        "parameters": self.parameters,
      },
    }


class Environment(abc.ABC):
  """Contract: deterministic given (task, seed); never raises from `step`."""

  name: str = ""

  @abc.abstractmethod
  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    """A procedurally generated task, fully determined by (seed, difficulty)."""

  def tool_schemas(self) -> list[dict[str, Any]]:
    """OpenAI-style schemas of this environment's tools (empty if none)."""
    return []

  @abc.abstractmethod
  def reset(self, task: Task, seed: int = 0) -> str:
    """Starts an episode; returns the first observation text."""

  @abc.abstractmethod
  def step(self, action_text: str) -> StepResult:
    """Applies the policy's action text; never raises."""

  def close(self) -> None:
    """Releases resources (sandbox directories, threads)."""


_REGISTRY: dict[str, Callable[..., Environment]] = {}


def register(name: str) -> Callable:
  """Class or factory decorator: `@envs.register("sokoban")`."""

  def wrap(factory: Callable[..., Environment]) -> Callable[..., Environment]:
    if name in _REGISTRY:
      raise ValueError(f"environment {name!r} is already registered")
    _REGISTRY[name] = factory
    return factory

  return wrap


BUILTIN = (
  "sokoban",
  "frozenlake",
  "search_qa",
  "flights",
  "code_repair",
  "reasoning_gym",
)


def check_budget(name: str, value: Any) -> None:
  """Raises a ValueError naming the option unless `value` is an int >= 1
  (a step or action budget: 0 would end every episode at its first move)."""
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def make(name: str, **options: Any) -> Environment:
  """Builds a registered environment by name.

  Built-in environments live in `agentic_rl.envs.<name>` and register
  themselves on import, so only the environments used are imported.
  """
  if name not in _REGISTRY and name in BUILTIN:
    importlib.import_module(f"agentic_rl.envs.{name}")
  if name not in _REGISTRY:
    raise KeyError(
      f"unknown environment {name!r}; registered: {sorted(_REGISTRY)}"
    )
  return _REGISTRY[name](**options)


def registered() -> list[str]:
  return sorted(_REGISTRY)
