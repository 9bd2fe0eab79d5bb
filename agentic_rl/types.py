"""Data contracts shared by every stage of the flywheel.

Dimension letters, used as name suffixes (`tokens_BxL`, `adv_BxT`):

  B  trajectories in a batch       G  trajectories per group
  T  turns                         L  tokens
  D  model width                   H  attention (query) heads
  K  key/value heads               V  vocabulary
  F  MLP width                     S  sampler slots (rows of the KV cache)

Host types (`Task`, `Action`, `Turn`, `Trajectory`) are plain Python and
serialize losslessly to JSON (see `Trajectory.to_json`). The device type
`TrajectoryBatch` is a pytree of fixed-shape padded arrays; it is built by
`agentic_rl.data.packing.pack`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

# Version of the on-disk trajectory schema written by `Trajectory.to_json`.
TRAJECTORY_SCHEMA_VERSION = 1


class FailureCode(enum.StrEnum):
  """The closed set of ways a turn can fail. Never raised into the driver."""

  MALFORMED_CALL = "malformed_call"
  UNKNOWN_TOOL = "unknown_tool"
  BAD_ARGUMENTS = "bad_arguments"
  TOOL_ERROR = "tool_error"
  TIMEOUT = "timeout"
  FORBIDDEN = "forbidden"
  BUDGET_EXHAUSTED = "budget_exhausted"
  CONTEXT_OVERFLOW = "context_overflow"


class Termination(enum.StrEnum):
  """Why a trajectory ended."""

  DONE = "done"
  MAX_TURNS = "max_turns"
  MAX_TOKENS = "max_tokens"
  ERROR = "error"


class ActionKind(enum.StrEnum):
  TOOL_CALL = "tool_call"  # includes Search-R1 `<search>` (tool "search")
  ANSWER = "answer"
  MALFORMED = "malformed"


@dataclasses.dataclass(frozen=True)
class Task:
  """One task from a pool. Negative tasks carry tags and are kept."""

  id: str
  family: str
  split: str = "train"
  difficulty: int = 0
  tags: tuple[str, ...] = ()
  seed: int = 0
  payload: dict[str, Any] = dataclasses.field(default_factory=dict)

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["tags"] = list(self.tags)
    return d

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Task:
    return cls(**{**d, "tags": tuple(d.get("tags", ()))})


@dataclasses.dataclass(frozen=True)
class Action:
  """A parsed policy action: a tool call, an answer, or malformed text."""

  kind: ActionKind
  name: str = ""  # tool name for TOOL_CALL
  arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
  text: str = ""  # answer text, or the raw text when malformed
  error: str = ""  # why parsing failed, for MALFORMED

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Action:
    return cls(**{**d, "kind": ActionKind(d["kind"])})


@dataclasses.dataclass
class Turn:
  """One turn: the observation tokens before the action, then the action.

  `obs_tokens` are the ids appended to the context before the policy acted
  (the prompt for turn 0, the tool observation afterwards); `action_tokens`
  and `action_logp` are what the policy emitted and the behaviour log-prob of
  each token. `state_key` is the canonical id of the environment state the
  action was taken in (GiGPO's anchor).
  """

  obs_tokens: list[int]
  action_tokens: list[int]
  action_logp: list[float]
  action: Action | None = None
  observation: str = ""  # text the environment returned after the action
  failure: FailureCode | None = None
  reward_components: dict[str, float] = dataclasses.field(default_factory=dict)
  reward: float = 0.0
  process_score: float = 0.0
  state_key: str = ""
  trained: bool = True  # False masks the turn out of the loss

  def __post_init__(self):
    if len(self.action_tokens) != len(self.action_logp):
      raise ValueError(
        f"action_tokens ({len(self.action_tokens)}) and action_logp "
        f"({len(self.action_logp)}) must have the same length"
      )

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["action"] = None if self.action is None else self.action.to_dict()
    d["failure"] = None if self.failure is None else str(self.failure)
    return d

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Turn:
    d = dict(d)
    d["action"] = None if d["action"] is None else Action.from_dict(d["action"])
    d["failure"] = None if d["failure"] is None else FailureCode(d["failure"])
    return cls(**d)


@dataclasses.dataclass
class Trajectory:
  """A whole episode: the replayable unit. Serializes losslessly."""

  task: Task
  group_id: int
  turns: list[Turn]
  outcome: float = 0.0
  termination: Termination = Termination.DONE
  policy_version: int = 0
  info: dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def num_tokens(self) -> int:
    return sum(len(t.obs_tokens) + len(t.action_tokens) for t in self.turns)

  def to_dict(self) -> dict[str, Any]:
    return {
      "schema_version": TRAJECTORY_SCHEMA_VERSION,
      "task": self.task.to_dict(),
      "group_id": self.group_id,
      "turns": [t.to_dict() for t in self.turns],
      "outcome": self.outcome,
      "termination": str(self.termination),
      "policy_version": self.policy_version,
      "info": self.info,
    }

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Trajectory:
    version = d.get("schema_version")
    if version != TRAJECTORY_SCHEMA_VERSION:
      raise ValueError(
        f"trajectory schema_version {version!r} is not supported "
        f"(expected {TRAJECTORY_SCHEMA_VERSION})"
      )
    return cls(
      task=Task.from_dict(d["task"]),
      group_id=d["group_id"],
      turns=[Turn.from_dict(t) for t in d["turns"]],
      outcome=d["outcome"],
      termination=Termination(d["termination"]),
      policy_version=d["policy_version"],
      info=d.get("info", {}),
    )

  def to_json(self) -> str:
    """One JSON line. Python floats round-trip exactly through repr."""
    return json.dumps(self.to_dict(), allow_nan=True, separators=(",", ":"))

  @classmethod
  def from_json(cls, line: str) -> Trajectory:
    return cls.from_dict(json.loads(line))


@flax.struct.dataclass
class TrajectoryBatch:
  """Padded, fixed-shape device batch. Built by `data.packing.pack`.

  Tokens are right-padded. `turn_id_BxL` is the turn index of each token
  (observation tokens belong to the turn they precede) and -1 on padding.
  `group_id_B` are dense ids below B; `anchor_id_BxT` are dense ids below
  B*T, unique across groups (two turns share an id iff same group and same
  `state_key`).
  """

  tokens_BxL: jax.Array  # int32
  loss_mask_BxL: jax.Array  # float32, 1 only on trained policy tokens
  turn_id_BxL: jax.Array  # int32
  behaviour_logp_BxL: jax.Array  # float32
  turn_reward_BxT: jax.Array  # float32
  turn_mask_BxT: jax.Array  # float32, 1 on real turns
  anchor_id_BxT: jax.Array  # int32
  process_score_BxT: jax.Array  # float32
  group_id_B: jax.Array  # int32
  outcome_B: jax.Array  # float32

  @property
  def shape(self) -> tuple[int, int, int]:
    """(B, L, T)."""
    b, l = self.tokens_BxL.shape
    return b, l, self.turn_reward_BxT.shape[1]


def turns_to_tokens(values_BxT: jax.Array, turn_id_BxL: jax.Array) -> jax.Array:
  """Broadcasts per-turn values to tokens; padding (turn_id -1) gets 0."""
  safe_BxL = jnp.maximum(turn_id_BxL, 0)
  gathered_BxL = jnp.take_along_axis(values_BxT, safe_BxL, axis=1)
  return jnp.where(turn_id_BxL >= 0, gathered_BxL, 0).astype(values_BxT.dtype)
