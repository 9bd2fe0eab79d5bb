"""Any reasoning-gym task family as a single- or multi-attempt environment.

`make("reasoning_gym", family="chain_sum")` poses one question of that
reasoning-gym dataset; the policy answers in `<answer>..</answer>` and the
dataset's own `score_answer` is the verifier. With `max_attempts > 1` a wrong
answer gets "Incorrect, try again." and the policy answers again.

Tasks: one item of the dataset built with `seed` and `size=1`. Difficulty is
the family's curriculum level where the family has a curriculum (every
curriculum attribute set to `min(difficulty, its top level)`, each range
attribute spanning its levels 0..level, reasoning-gym's inclusive mode); for
families without a curriculum difficulty is recorded but ignored. `config`
overrides are passed on to the dataset config (after the curriculum).

A task's payload keeps (family, seed, level, overrides), from which reset
rebuilds the exact item (reasoning-gym items are a pure function of their
config), plus the question and answer text for inspection.

Reward components: `success`, the verifier's score of the answer that ends
the episode (a correct answer, or the last attempt; the reward stack's default
outcome key); earlier wrong attempts get 0 and their own score in
`info["score"]`. A malformed or tool-call turn uses
up an attempt.

Every family in `OFFLINE_FAMILIES` is tested to build, verify its own answer
and never touch the network. Only families in `SAFE_FAMILIES` are accepted:
their verifiers were read and only compare or parse the answer text. Others
are refused at construction (and at reset), because some verifiers evaluate
the answer: polynomial_multiplication, simple_integration, puzzle24,
countdown, ... pass it to `sympy.parse_expr`, which runs it as Python, so a
policy could run code on the host or hang it (`9**9**9**9`) in-process.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Any

from reasoning_gym import factory

from agentic_rl.envs.base import Environment, StepResult, episode_over, register
from agentic_rl.envs.parsing import parse_tags
from agentic_rl.types import ActionKind, FailureCode, Task

OFFLINE_FAMILIES = (
  "basic_arithmetic",
  "chain_sum",
  "leg_counting",
  "base_conversion",
  "count_bits",
  "fraction_simplification",
  "gcd",
  "lcm",
  "letter_counting",
  "number_sorting",
  "prime_factorization",
  "simple_equations",
  "spell_backward",
  "maze",
  "mini_sudoku",
)

# Families whose `score_answer` was read (reasoning-gym SAFE_FAMILIES_VERSION)
# and only compares or parses the answer text (str ops, json, int, Decimal, a
# linear regex): no eval, no sympy, nothing that can run code or hang on
# policy text. Extend only after reading the verifier.
SAFE_FAMILIES = (
  # The base class verifier: exact or substring match.
  "acre",
  "aiw",
  "arc_1d",
  "base_conversion",
  "basic_arithmetic",
  "bf",
  "binary_alternation",
  "caesar_cipher",
  "count_bits",
  "count_primes",
  "course_schedule",
  "gcd",
  "isomorphic_strings",
  "largest_island",
  "lcm",
  "leg_counting",
  "letter_counting",
  "list_functions",
  "mahjong_puzzle",
  "maze",
  "modulo_grid",
  "number_filtering",
  "number_sequence",
  "ransom_note",
  "rotate_matrix",
  "rotten_oranges",
  "simple_equations",
  "simple_geometry",
  "string_manipulation",
  "string_splitting",
  "string_synthesis",
  "syllogism",
  "word_sequence_reversal",
  # Own verifiers: str ops, json, int, Decimal, a linear regex.
  "chain_sum",
  "fraction_simplification",
  "gsm_symbolic",
  "mini_sudoku",
  "number_sorting",
  "prime_factorization",
  "spell_backward",
)
# The distribution's version: reasoning_gym.__version__ is stale (0.1.19).
SAFE_FAMILIES_VERSION = "0.1.25"
INSTALLED_VERSION = importlib.metadata.version("reasoning-gym")


def check_family(family: str) -> None:
  """Raises unless `family` exists and its verifier is safe to run here."""
  if family not in factory.DATASETS:
    raise ValueError(
      f"unknown reasoning-gym family {family!r}; "
      f"known: {sorted(factory.DATASETS)}"
    )
  if family not in SAFE_FAMILIES:
    raise ValueError(
      f"reasoning-gym family {family!r} is not in SAFE_FAMILIES: its "
      "score_answer has not been checked to only parse the answer (some, "
      "e.g. polynomial_multiplication, evaluate it with sympy), so scoring "
      "policy text with it could run code or hang"
    )
  if INSTALLED_VERSION != SAFE_FAMILIES_VERSION:
    raise ValueError(
      f"SAFE_FAMILIES was checked against reasoning-gym "
      f"{SAFE_FAMILIES_VERSION}, installed is {INSTALLED_VERSION}; re-read "
      "the verifiers and update it"
    )


def build_item(
  family: str, seed: int, level: int, overrides: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
  """The dataset and its single item for (family, seed, curriculum level)."""
  check_family(family)
  dataset_cls, config_cls = factory.DATASETS[family]
  base = {**overrides, "seed": seed, "size": 1}
  if factory.has_curriculum(family):
    curriculum = factory.create_curriculum(family)
    curriculum.set_global_level(level)
    config = curriculum.generate_configuration(base)
    # Overrides win over the curriculum's choice for the same field.
    config = dataclasses.replace(config, **base)
  else:
    config = config_cls(**base)
  if hasattr(config, "validate"):
    config.validate()
  dataset = dataset_cls(config=config)
  return dataset, dataset[0]


def _text(value: Any) -> str:
  return value if isinstance(value, str) else str(value)


@register("reasoning_gym")
class ReasoningGym(Environment):
  """One reasoning-gym question, answered in up to `max_attempts` turns."""

  name = "reasoning_gym"

  def __init__(
    self,
    family: str = "basic_arithmetic",
    max_attempts: int = 1,
    config: dict[str, Any] | None = None,
  ):
    check_family(family)
    if max_attempts < 1:
      raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    self.family = family
    self.max_attempts = max_attempts
    self.overrides = dict(config or {})
    self.done = True

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    _, item = build_item(self.family, seed, difficulty, self.overrides)
    return Task(
      id=f"reasoning_gym/{self.family}/d{difficulty}/s{seed}",
      family=self.name,
      difficulty=difficulty,
      seed=seed,
      tags=(self.family,),
      payload={
        "family": self.family,
        "seed": seed,
        "level": difficulty,
        "overrides": self.overrides,
        "question": _text(item["question"]),
        "answer": _text(item["answer"]),
      },
    )

  def reset(self, task: Task, seed: int = 0) -> str:
    del seed  # the item is fixed by the task; answers are verified exactly
    p = task.payload
    self.dataset, self.item = build_item(
      p["family"], p["seed"], p["level"], p["overrides"]
    )
    self.attempt = 0
    self.done = False
    return _text(self.item["question"])

  def expert_actions(self, task: Task) -> list[str]:
    """The dataset's own ground-truth answer, in one turn."""
    p = task.payload
    _, item = build_item(p["family"], p["seed"], p["level"], p["overrides"])
    return [f"<answer>{_text(item['answer'])}</answer>"]

  def score(self, answer: str) -> float:
    """The dataset's verifier; a verifier crash scores 0, never raises.

    In-process is safe only because `check_family` admits verifiers that
    parse text in near-linear time; see `SAFE_FAMILIES`.
    """
    try:
      return float(self.dataset.score_answer(answer, self.item))
    except Exception:  # noqa: BLE001 - the contract is "never raises"
      return 0.0

  def step(self, action_text: str) -> StepResult:
    key = f"attempt:{self.attempt}"
    if self.done:
      return episode_over("The episode is over.", key)
    self.attempt += 1
    last = self.attempt >= self.max_attempts
    action = parse_tags(action_text)
    if action.kind is not ActionKind.ANSWER:
      failure = (
        FailureCode.UNKNOWN_TOOL
        if action.kind is ActionKind.TOOL_CALL
        else FailureCode.MALFORMED_CALL
      )
      reason = action.error or "this environment has no tools"
      self.done = last
      retry = "" if last else " Try again."
      return StepResult(
        f"Invalid action ({reason}). Answer in <answer>...</answer>.{retry}",
        {"success": 0.0},
        self.done,
        failure,
        key,
        {"reason": reason, "score": 0.0},
      )
    score = self.score(action.text)
    correct = score >= 1.0
    self.done = correct or last
    if correct:
      observation = "Correct."
    elif last:
      observation = "Incorrect."
    else:
      observation = "Incorrect, try again."
    return StepResult(
      observation,
      {"success": score if self.done else 0.0},
      self.done,
      None,
      key,
      {"score": score, "correct": correct, "attempt": self.attempt},
    )
