"""A tiny deterministic environment for the data tests (test-only name).

Every fourth seed is tagged `unsolvable`, so pools built from it have native
negatives. The policy must answer `<answer>N</answer>` with the target N.
"""

from agentic_rl import envs
from agentic_rl.envs.base import Environment, StepResult
from agentic_rl.types import Task

NAME = "test_counter_data"


class Counter(Environment):
  name = NAME

  def __init__(self, offset: int = 0):
    self.offset = offset
    self.target = 0

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    negative = seed % 4 == 0
    return Task(
      id=f"{NAME}/d{difficulty}/s{seed}",
      family=NAME,
      difficulty=difficulty,
      tags=("unsolvable",) if negative else ("arith", f"d{difficulty}"),
      seed=seed,
      payload={"target": seed % 7 + difficulty + self.offset, "note": "ü∑"},
    )

  def reset(self, task: Task, seed: int = 0) -> str:
    self.target = task.payload["target"]
    return f"say {self.target}"

  def step(self, action_text: str) -> StepResult:
    ok = action_text.strip() == f"<answer>{self.target}</answer>"
    return StepResult("", {"success": float(ok)}, True, None, "s0")


if NAME not in envs.registered():
  envs.register(NAME)(Counter)
