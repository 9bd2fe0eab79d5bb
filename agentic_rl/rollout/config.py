"""`RolloutConfig`: the knobs of the multi-turn rollout driver."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from agentic_rl.envs.parsing import PROTOCOLS

# End tags of both protocols: a turn is over once the policy closes its action.
DEFAULT_STOP_TAGS = ("</answer>", "</search>", "</tool_call>")


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  """How episodes are played.

  Attributes:
    group_size: G trajectories per task, sharing the task and the env seed.
    max_turns: turn budget per episode (termination `max_turns`).
    max_new_tokens: decode budget of one turn; a turn that uses it up without
      a stop tag still goes to the environment (which will call it malformed).
    max_total_tokens: context budget of one trajectory (prompt, actions and
      observations); the sampler's cache length caps it further. Running out
      is `FailureCode.CONTEXT_OVERFLOW` with termination `max_tokens`.
    temperature, top_k, top_p: sampling; temperature 0 is greedy, top_k 0 and
      top_p 1 switch the filters off.
    stop_tags: protocol tags that end a turn (single ids in the tokenizer).
    stop_on_eos: also stop on the tokenizer's eos id.
    protocol: action protocol for environments that do not declare their own
      `protocol` attribute (the grid environments speak "tags").
    prompt_template: chat framing of the first observation; `{observation}`
      is replaced by the text `Environment.reset` returned.
    pipeline: overlap host work (env steps, tokenizing, scoring) of one
      micro-batch with device decoding of another; False runs them in turn.
    num_microbatches: how many micro-batches one sampler's slots are split
      into when pipelining (several samplers are one micro-batch each).
    env_workers: threads stepping the rows of one micro-batch concurrently;
      1 steps them one after another.
    reprefill: re-prefill each row's whole history every turn instead of
      extending its cache with the new observation (for benchmarks only; the
      token stream is the same).
  """

  group_size: int = 4
  max_turns: int = 8
  max_new_tokens: int = 128
  max_total_tokens: int = 2048
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  stop_tags: tuple[str, ...] = DEFAULT_STOP_TAGS
  stop_on_eos: bool = True
  protocol: str = "tags"
  prompt_template: str = "{observation}\n"
  pipeline: bool = True
  num_microbatches: int = 2
  env_workers: int = 1
  reprefill: bool = False

  def __post_init__(self):
    for name in (
      "group_size",
      "max_turns",
      "max_new_tokens",
      "max_total_tokens",
      "num_microbatches",
      "env_workers",
    ):
      value = getattr(self, name)
      if not isinstance(value, int) or value <= 0:
        raise ValueError(
          f"RolloutConfig.{name} must be a positive int: {value}"
        )
    if not math.isfinite(self.temperature) or self.temperature < 0:
      raise ValueError(
        f"RolloutConfig.temperature must be a finite number >= 0: "
        f"{self.temperature}"
      )
    if not 0 < self.top_p <= 1:
      raise ValueError(f"RolloutConfig.top_p must be in (0, 1]: {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"RolloutConfig.top_k must be >= 0: {self.top_k}")
    if self.protocol not in PROTOCOLS:
      raise ValueError(
        f"RolloutConfig.protocol must be one of {PROTOCOLS}: {self.protocol!r}"
      )
    if "{observation}" not in self.prompt_template:
      raise ValueError("RolloutConfig.prompt_template needs '{observation}'")

  def replace(self, **changes: Any) -> RolloutConfig:
    return dataclasses.replace(self, **changes)

  @classmethod
  def from_mapping(cls, values: Mapping[str, Any]) -> RolloutConfig:
    """From a dict or `ml_collections.ConfigDict` (unknown keys are errors)."""
    to_dict = getattr(values, "to_dict", None)
    values = dict(to_dict() if callable(to_dict) else values)
    if "stop_tags" in values:
      values["stop_tags"] = tuple(values["stop_tags"])
    return cls(**values)
