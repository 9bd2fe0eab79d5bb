"""A replay buffer of whole trajectories.

Two modes:

  fifo         sample uniformly; when full, evict the oldest.
  prioritized  sample in proportion to a priority
               `(|advantage| + eps) ** alpha * 0.5 ** (age / half_life)`,
               so informative (large-|advantage|) and recent episodes come
               back more often; when full, evict the lowest priority (the
               oldest among ties). Age counts trajectories added since.

Trajectories with advantage ~0 (every member of their group scored the same)
carry no gradient under group estimators, which is why |advantage| is the
priority. Each trajectory may carry a JSON-safe payload (the RL loop keeps
its per-turn advantages there, `sample_items` returns them). The whole
buffer serializes (`state_dict`) as JSON-safe data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentic_rl.types import Trajectory

MODES = ("fifo", "prioritized")


class ReplayBuffer:
  """Holds up to `capacity` trajectories; see the module docstring."""

  def __init__(
    self,
    capacity: int,
    mode: str = "fifo",
    alpha: float = 1.0,
    half_life: float | None = None,
    eps: float = 1e-3,
    rng: np.random.Generator | int = 0,
  ):
    if capacity <= 0:
      raise ValueError(f"capacity must be positive, got {capacity}")
    if mode not in MODES:
      raise ValueError(f"unknown replay mode {mode!r}; expected one of {MODES}")
    if (
      not (math.isfinite(alpha) and math.isfinite(eps)) or alpha < 0 or eps <= 0
    ):
      raise ValueError(f"need alpha >= 0 and eps > 0, got {alpha}, {eps}")
    if half_life is not None and half_life <= 0:
      raise ValueError(f"half_life must be positive, got {half_life}")
    self.capacity = capacity
    self.mode = mode
    self.alpha = alpha
    self.half_life = half_life
    self.eps = eps
    self.rng = (
      rng
      if isinstance(rng, np.random.Generator)
      else (np.random.default_rng(rng))
    )
    self._items: list[Trajectory] = []
    self._payloads: list[Any] = []
    self._advantages: list[float] = []
    self._added_at: list[int] = []
    self.num_added = 0

  def __len__(self) -> int:
    return len(self._items)

  @property
  def trajectories(self) -> list[Trajectory]:
    return list(self._items)

  def priorities(self) -> np.ndarray:
    """Unnormalized sampling weight of each stored trajectory."""
    adv = np.abs(np.asarray(self._advantages, dtype=np.float64))
    if self.mode == "fifo":
      return np.ones_like(adv)
    p = (adv + self.eps) ** self.alpha
    if self.half_life is not None:
      age = self.num_added - np.asarray(self._added_at, dtype=np.float64)
      p = p * 0.5 ** (age / self.half_life)
    return p

  def add(
    self,
    trajectories: Sequence[Trajectory],
    advantages: Sequence[float] | None = None,
    payloads: Sequence[Any] | None = None,
  ) -> None:
    """Adds trajectories, each with the |advantage| that prioritizes it
    and, optionally, a JSON-safe payload kept with it."""
    if payloads is None:
      payloads = [None] * len(trajectories)
    if len(payloads) != len(trajectories):
      raise ValueError(
        f"{len(payloads)} payloads for {len(trajectories)} trajectories"
      )
    if advantages is None:
      if self.mode == "prioritized":
        raise ValueError("prioritized replay needs an advantage per trajectory")
      advantages = [0.0] * len(trajectories)
    if len(advantages) != len(trajectories):
      raise ValueError(
        f"{len(advantages)} advantages for {len(trajectories)} trajectories"
      )
    for traj, adv, payload in zip(
      trajectories, advantages, payloads, strict=True
    ):
      if not math.isfinite(adv):
        raise ValueError(
          f"advantage of trajectory {traj.task.id!r} is not finite: {adv}"
        )
      if len(self._items) >= self.capacity:
        self._evict()
      self._items.append(traj)
      self._payloads.append(payload)
      self._advantages.append(float(adv))
      self._added_at.append(self.num_added)
      self.num_added += 1

  def _evict(self) -> None:
    if self.mode == "fifo":
      victim = 0
    else:
      # argmin returns the first minimum, and items are kept oldest first.
      victim = int(np.argmin(self.priorities()))
    for seq in (self._items, self._payloads, self._advantages, self._added_at):
      del seq[victim]

  def sample(self, n: int) -> list[Trajectory]:
    """`n` trajectories drawn with replacement."""
    return [traj for traj, _ in self.sample_items(n)]

  def sample_items(self, n: int) -> list[tuple[Trajectory, Any]]:
    """`n` (trajectory, payload) pairs drawn with replacement."""
    if not self._items:
      raise ValueError("cannot sample from an empty replay buffer")
    if n < 0:
      raise ValueError(f"cannot sample {n} trajectories")
    p = self.priorities()
    idx = self.rng.choice(len(self._items), size=n, p=p / p.sum())
    return [(self._items[i], self._payloads[i]) for i in idx]

  def state_dict(self) -> dict[str, Any]:
    return {
      "config": {
        "capacity": self.capacity,
        "mode": self.mode,
        "alpha": self.alpha,
        "half_life": self.half_life,
        "eps": self.eps,
      },
      "trajectories": [t.to_dict() for t in self._items],
      "payloads": list(self._payloads),
      "advantages": list(self._advantages),
      "added_at": list(self._added_at),
      "num_added": self.num_added,
      "rng": self.rng.bit_generator.state,
    }

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    mine = self.state_dict()["config"]
    if dict(state["config"]) != mine:
      raise ValueError(
        f"replay state has config {state['config']}, this buffer {mine}"
      )
    if len(state["trajectories"]) > self.capacity:
      raise ValueError("replay state holds more trajectories than capacity")
    self._items = [Trajectory.from_dict(d) for d in state["trajectories"]]
    self._payloads = list(state.get("payloads", [None] * len(self._items)))
    self._advantages = [float(a) for a in state["advantages"]]
    self._added_at = [int(a) for a in state["added_at"]]
    self.num_added = int(state["num_added"])
    self.rng.bit_generator.state = state["rng"]
