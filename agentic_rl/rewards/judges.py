"""Pluggable judges: `judge(task, turns_so_far, turn) -> float`.

A judge scores what no programmatic verifier covers (style, format, rubric
items). Any callable with that signature works; the two here are real, cheap
examples that need no model, and a registry lets configs select them by name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.types import ActionKind, Task, Turn

Judge = Callable[[Task, Sequence[Turn], Turn], float]


def action_text(turn: Turn) -> str:
  """The text a judge reads: the answer, or the raw text of the action."""
  if turn.action is None:
    return ""
  if turn.action.kind == ActionKind.TOOL_CALL:
    return f"{turn.action.name} {turn.action.arguments}"
  return turn.action.text


@dataclasses.dataclass(frozen=True)
class RubricJudge:
  """Scores a turn by which regex rubric items its action text matches.

  The score is the sum of the weights of matching items divided by the sum of
  the positive weights, so a turn meeting every positive item scores 1 and
  negative items (e.g. boilerplate to discourage) pull it down.
  """

  rubric: tuple[tuple[str, float], ...]
  only_answers: bool = True  # tool calls score 0 unless False

  def __post_init__(self):
    if not self.rubric:
      raise ValueError("RubricJudge needs at least one (pattern, weight) item")
    for pattern, weight in self.rubric:
      try:
        re.compile(pattern)
      except re.error as e:
        raise ValueError(f"bad rubric pattern {pattern!r}: {e}") from e
      if not isinstance(weight, int | float):
        raise ValueError(f"rubric weight for {pattern!r} is not a number")
    if not any(w > 0 for _, w in self.rubric):
      raise ValueError("RubricJudge needs at least one positive weight")

  def __call__(self, task: Task, turns_so_far: Sequence[Turn], turn: Turn):
    del task, turns_so_far  # the rubric reads only the current action
    if turn.action is None:
      return 0.0
    if self.only_answers and turn.action.kind != ActionKind.ANSWER:
      return 0.0
    text = action_text(turn)
    total = sum(w for _, w in self.rubric if w > 0)
    hit = sum(w for p, w in self.rubric if re.search(p, text))
    return float(hit / total)


@dataclasses.dataclass(frozen=True)
class FormatJudge:
  """1 for a well-formed action within a token budget, else 0.

  A cheap stand-in for a format reward model: it penalizes malformed actions
  and rambling turns, which is what format judges mostly end up measuring.
  """

  max_action_tokens: int = 512

  def __post_init__(self):
    if self.max_action_tokens <= 0:
      raise ValueError(
        f"max_action_tokens must be positive, got {self.max_action_tokens}"
      )

  def __call__(self, task: Task, turns_so_far: Sequence[Turn], turn: Turn):
    del task, turns_so_far
    if turn.action is None or turn.action.kind == ActionKind.MALFORMED:
      return 0.0
    return float(len(turn.action_tokens) <= self.max_action_tokens)


def _rubric_from_options(rubric: Any = (), **options: Any) -> RubricJudge:
  # Configs hold the rubric as a list of [pattern, weight] pairs.
  items = tuple((str(p), float(w)) for p, w in rubric)
  return RubricJudge(rubric=items, **options)


_JUDGES: dict[str, Callable[..., Judge]] = {
  "rubric": _rubric_from_options,
  "format": FormatJudge,
}


def register_judge(name: str, factory: Callable[..., Judge]) -> None:
  """Adds a judge factory so configs can select it by name."""
  if name in _JUDGES:
    raise ValueError(f"judge {name!r} is already registered")
  _JUDGES[name] = factory


def make_judge(name: str, **options: Any) -> Judge:
  """Builds a registered judge by name."""
  if name not in _JUDGES:
    raise KeyError(f"unknown judge {name!r}; registered: {sorted(_JUDGES)}")
  return _JUDGES[name](**options)
