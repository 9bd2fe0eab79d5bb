"""Slotted KV-cache sampling: jitted prefill / extend / decode-until-stop.

`Sampler` is the host-side entry point (see `sampler.py` for a walkthrough);
`engine` holds the pure jittable functions and `select` the token choice
(greedy, temperature, top-k, top-p).
"""

from agentic_rl.sampling.engine import (
  DecodeOutput,
  SamplerState,
  StopReason,
  decode,
  extend,
  prefill,
)
from agentic_rl.sampling.sampler import (
  DecodeResult,
  Sampler,
  StaleWeightsError,
  default_buckets,
)
from agentic_rl.sampling.select import (
  filter_logits,
  sampling_logprobs,
  select_tokens,
)

__all__ = [
  "DecodeOutput",
  "DecodeResult",
  "Sampler",
  "SamplerState",
  "StaleWeightsError",
  "StopReason",
  "decode",
  "default_buckets",
  "extend",
  "filter_logits",
  "prefill",
  "sampling_logprobs",
  "select_tokens",
]
