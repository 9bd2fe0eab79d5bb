"""Flax NNX decoder models (Llama / Qwen2 / Qwen3 family) and presets.

`build(config, rngs)` makes a model with random weights; `build_abstract`
makes one whose parameters are `jax.ShapeDtypeStruct`s (no memory), for
sharding plans of real-size presets.
"""

from flax import nnx

from agentic_rl.models.config import (
  PRESETS,
  ModelConfig,
  RopeScaling,
  get_preset,
)
from agentic_rl.models.transformer import (
  KVCache,
  Transformer,
  init_cache,
  with_kernels_out_first,
)

# Hugging Face loading (`agentic_rl.models.hf.load_pretrained`) is exported
# here by its author once `hf.py` exists; this file must not import it before.


def build(config: ModelConfig | str, rngs: nnx.Rngs | int = 0) -> Transformer:
  """A decoder with random weights from a config or a preset name."""
  if isinstance(config, str):
    config = get_preset(config)
  if isinstance(rngs, int):
    rngs = nnx.Rngs(params=rngs)
  return Transformer(config, rngs=rngs)


def build_abstract(config: ModelConfig | str) -> Transformer:
  """A decoder whose parameters are shapes only (`nnx.eval_shape`)."""
  if isinstance(config, str):
    config = get_preset(config)
  return nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(params=0)))


__all__ = [
  "PRESETS",
  "KVCache",
  "ModelConfig",
  "RopeScaling",
  "Transformer",
  "build",
  "build_abstract",
  "get_preset",
  "init_cache",
  "with_kernels_out_first",
]

# Hugging Face loading and the environment tokenizer (imported last: hf.py
# imports this package's config and transformer modules).
from agentic_rl.models.hf import load_pretrained, load_tokenizer  # noqa: E402
from agentic_rl.models.tokenizer import build_env_tokenizer  # noqa: E402

__all__ += ["build_env_tokenizer", "load_pretrained", "load_tokenizer"]
