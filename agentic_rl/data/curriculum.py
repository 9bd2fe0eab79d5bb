"""A success-rate-driven difficulty curriculum.

Difficulties unlock one at a time, easiest first. The newest unlocked one is
the frontier: once its success rate over the last `window` episodes reaches
`promote_threshold` (with at least `min_episodes` seen) and has stayed there
for `hold` consecutive recorded episodes, the next difficulty unlocks. With a
small window one lucky batch can cross the threshold; a `hold` of a batch or
more asks the rate to last. Sampling weights put `frontier_weight` on the
frontier and spread the rest evenly over the mastered difficulties, which
stay in rotation as review, so forgetting shows up in their success rates
instead of going unseen. Feed `weights()` to
`TaskSampler.set_difficulty_weights`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from agentic_rl.types import Trajectory


class SuccessRateCurriculum:
  """Promotes through `difficulties` as the frontier's success rate rises."""

  def __init__(
    self,
    difficulties: Sequence[int],
    promote_threshold: float = 0.7,
    min_episodes: int = 32,
    window: int = 128,
    frontier_weight: float = 0.7,
    initially_unlocked: int = 1,
    hold: int = 1,
  ):
    if not difficulties or len(set(difficulties)) != len(difficulties):
      raise ValueError(f"difficulties must be distinct, got {difficulties}")
    if not 0.0 < promote_threshold <= 1.0:
      raise ValueError(
        f"promote_threshold must be in (0, 1]: {promote_threshold}"
      )
    if not 1 <= min_episodes <= window:
      raise ValueError(
        f"need 1 <= min_episodes ({min_episodes}) <= window ({window})"
      )
    if not 0.0 < frontier_weight <= 1.0:
      raise ValueError(f"frontier_weight must be in (0, 1]: {frontier_weight}")
    if not 1 <= initially_unlocked <= len(difficulties):
      raise ValueError(
        f"initially_unlocked must be in [1, {len(difficulties)}], got "
        f"{initially_unlocked}"
      )
    if hold < 1:
      raise ValueError(f"hold must be >= 1 episode, got {hold}")
    self.difficulties = tuple(sorted(difficulties))
    self.promote_threshold = promote_threshold
    self.min_episodes = min_episodes
    self.window = window
    self.frontier_weight = frontier_weight
    self.hold = hold
    self.streak = 0  # consecutive updates with the frontier at threshold
    self.unlocked = initially_unlocked
    self.episodes = 0
    self.promotions: list[tuple[int, int]] = []  # (difficulty, episode)
    self._history = {
      d: collections.deque(maxlen=window) for d in self.difficulties
    }

  @property
  def frontier(self) -> int:
    return self.difficulties[self.unlocked - 1]

  def success_rate(self, difficulty: int) -> float | None:
    """Mean success over the window; None before any episode."""
    h = self._bucket(difficulty)
    return math.fsum(h) / len(h) if h else None

  def _bucket(self, difficulty: int) -> collections.deque:
    if difficulty not in self._history:
      raise KeyError(
        f"difficulty {difficulty} is not in the curriculum {self.difficulties}"
      )
    return self._history[difficulty]

  def update(self, difficulty: int, success: float) -> bool:
    """Records one episode (success in [0, 1]); True if it promoted."""
    if not 0.0 <= success <= 1.0:
      raise ValueError(f"success must be in [0, 1], got {success}")
    self._bucket(difficulty).append(float(success))
    self.episodes += 1
    h = self._history[self.frontier]
    ready = len(h) >= self.min_episodes and (
      math.fsum(h) / len(h) >= self.promote_threshold
    )
    self.streak = self.streak + 1 if ready else 0
    if self.streak >= self.hold and self.unlocked < len(self.difficulties):
      self.unlocked += 1
      self.streak = 0
      self.promotions.append((self.frontier, self.episodes))
      return True
    return False

  def update_from_trajectories(
    self, trajectories: Iterable[Trajectory], success_threshold: float = 0.5
  ) -> int:
    """Records scored trajectories; returns how many promotions happened."""
    return sum(
      self.update(t.task.difficulty, float(t.outcome >= success_threshold))
      for t in trajectories
    )

  def weights(self) -> dict[int, float]:
    """Sampling weight per difficulty (sums to 1; locked ones get 0)."""
    out = {d: 0.0 for d in self.difficulties}
    mastered = self.difficulties[: self.unlocked - 1]
    if not mastered:
      out[self.frontier] = 1.0
      return out
    out[self.frontier] = self.frontier_weight
    for d in mastered:
      out[d] = (1.0 - self.frontier_weight) / len(mastered)
    return out

  def state_dict(self) -> dict[str, Any]:
    return {
      "difficulties": list(self.difficulties),
      "unlocked": self.unlocked,
      "episodes": self.episodes,
      "streak": self.streak,
      "promotions": [list(p) for p in self.promotions],
      "history": {str(d): list(h) for d, h in self._history.items()},
    }

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    if tuple(state["difficulties"]) != self.difficulties:
      raise ValueError(
        f"curriculum state is for difficulties {state['difficulties']}, "
        f"this curriculum has {list(self.difficulties)}"
      )
    self.unlocked = int(state["unlocked"])
    self.episodes = int(state["episodes"])
    self.streak = int(state.get("streak", 0))  # absent before `hold` existed
    self.promotions = [(int(d), int(e)) for d, e in state["promotions"]]
    for d in self.difficulties:
      self._history[d] = collections.deque(
        (float(x) for x in state["history"][str(d)]), maxlen=self.window
      )


def first_promotion(
  success_BxN,
  promote_threshold: float,
  min_episodes: int,
  window: int,
  hold: int = 1,
) -> np.ndarray:
  """The episode (1-based) at which each row's frontier would unlock, 0 if
  it never does within N: `SuccessRateCurriculum.update`'s rule on B
  streams of 0/1 outcomes of the frontier, vectorized over the streams
  (for studying the rule's noise, `scripts/curriculum_sim.py`)."""
  s_BxN = np.asarray(success_BxN)
  if s_BxN.ndim != 2 or not np.isin(s_BxN, (0, 1)).all():
    raise ValueError(f"need a [B, N] array of 0/1 outcomes, got {s_BxN!r}")
  b, n = s_BxN.shape
  csum_BxN1 = np.concatenate(
    [np.zeros((b, 1)), np.cumsum(s_BxN, axis=1, dtype=np.float64)], axis=1
  )
  t_N = np.arange(1, n + 1)
  lo_N = np.maximum(t_N - window, 0)
  seen_N = t_N - lo_N  # episodes in the window after episode t
  rate_BxN = (csum_BxN1[:, t_N] - csum_BxN1[:, lo_N]) / seen_N
  ready_BxN = (seen_N >= min_episodes) & (rate_BxN >= promote_threshold)
  streak_B = np.zeros(b, np.int64)
  first_B = np.zeros(b, np.int64)
  for t in range(n):
    streak_B = np.where(ready_BxN[:, t], streak_B + 1, 0)
    first_B = np.where((first_B == 0) & (streak_B >= hold), t + 1, first_B)
  return first_B
