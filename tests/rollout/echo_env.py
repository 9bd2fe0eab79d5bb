"""A small deterministic environment for the rollout tests (test-only).

Observations have a configurable length so tests can steer the context
budget; `fail` makes reset or step raise, or report a NaN reward, to check
that the driver turns those into failure codes. Each step's wall-clock
interval is appended to `log` (for the overlap test).
"""

from __future__ import annotations

import math
import threading
import time

from agentic_rl.envs.base import Environment, StepResult
from agentic_rl.types import Task

NAME = "test_rollout_echo"


class Echo(Environment):
  name = NAME

  def __init__(
    self,
    obs_len: int = 8,
    prompt_len: int = 20,
    episode_len: int = 3,
    fail: str = "",
    delay: float = 0.0,
    log: list | None = None,
  ):
    self.obs_len, self.prompt_len = obs_len, prompt_len
    self.episode_len, self.fail = episode_len, fail
    self.delay, self.log = delay, log
    self.t = 0

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    return Task(id=f"{NAME}/s{seed}", family=NAME, seed=seed)

  def reset(self, task: Task, seed: int = 0) -> str:
    if self.fail == "reset":
      raise RuntimeError("reset exploded")
    self.t = 0
    return "p" * self.prompt_len

  def step(self, action_text: str) -> StepResult:
    start = time.perf_counter()
    if self.fail == "step":
      raise RuntimeError("step exploded")
    if self.delay:
      time.sleep(self.delay)
    key = f"t{self.t}"
    self.t += 1
    done = self.t >= self.episode_len
    success = float(len(action_text) % 2 == 1)
    components = {"success": success} if done else {"step": -0.1}
    if self.fail == "nan":
      components["step"] = math.nan
    if self.log is not None:
      self.log.append((start, time.perf_counter(), threading.get_ident()))
    return StepResult("o" * self.obs_len, components, done, None, key)
