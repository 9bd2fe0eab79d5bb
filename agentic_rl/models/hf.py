"""Loading Hugging Face Llama / Qwen2 / Qwen3 checkpoints from local disk.

A checkpoint directory holds `config.json` and either `model.safetensors` or
shards listed in `model.safetensors.index.json`. Nothing is downloaded.

Loading is strict: the config must describe a decoder this package
implements exactly (otherwise the logits would silently differ), and the
tensors must be exactly the expected set with the expected shapes. Every
failure names the config field, architecture or tensor at fault.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

# Importing ml_dtypes teaches numpy the name "bfloat16", which safetensors'
# numpy reader needs for bf16 checkpoints (most released Qwen / Llama ones).
import ml_dtypes  # noqa: F401
import numpy as np
from flax import nnx
from safetensors import safe_open

from agentic_rl.models.config import ModelConfig, RopeScaling
from agentic_rl.models.transformer import Dense, Transformer

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# config.json "architectures" entry -> family.
ARCHITECTURES: dict[str, str] = {
  "LlamaForCausalLM": "llama",
  "Qwen2ForCausalLM": "qwen2",
  "Qwen3ForCausalLM": "qwen3",
}

# Buffers some older checkpoints saved alongside the weights; they are
# recomputed from the config, so they are skipped rather than reported.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

_DTYPES = ("float32", "bfloat16")


class CheckpointError(ValueError):
  """A checkpoint that does not match what the loader can load exactly."""


def read_hf_config(path: str | os.PathLike) -> dict[str, Any]:
  """The parsed config.json of a local checkpoint directory."""
  file = os.path.join(path, CONFIG_FILE)
  if not os.path.isfile(file):
    raise FileNotFoundError(f"no {CONFIG_FILE} in checkpoint directory {path}")
  with open(file) as f:
    return json.load(f)


def hf_family(hf: Mapping[str, Any]) -> str:
  """'llama', 'qwen2' or 'qwen3' from config.json's `architectures`."""
  archs = hf.get("architectures")
  if not archs or not isinstance(archs, list):
    raise CheckpointError(
      f"config.json field 'architectures' is missing or empty: {archs!r}; "
      f"supported: {sorted(ARCHITECTURES)}"
    )
  if len(archs) != 1 or archs[0] not in ARCHITECTURES:
    raise CheckpointError(
      f"unsupported architecture {archs!r} in config.json; "
      f"supported: {sorted(ARCHITECTURES)}"
    )
  return ARCHITECTURES[archs[0]]


def _field(hf: Mapping[str, Any], name: str, prefix: str = "") -> Any:
  if hf.get(name) is None:
    raise CheckpointError(f"config.json lacks required field '{prefix}{name}'")
  return hf[name]


def _rope(hf: Mapping[str, Any]) -> tuple[float, RopeScaling | None]:
  """(theta, scaling) from either config.json rope format.

  transformers >= 5 writes `rope_parameters` (theta inside); older
  checkpoints write a top-level `rope_theta` and an optional `rope_scaling`
  whose type key is `rope_type` or the older `type`.
  """
  params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
  if params and all(isinstance(v, Mapping) for v in params.values()):
    raise CheckpointError(
      "config.json 'rope_parameters' is nested per layer type; only one "
      "global RoPE is supported"
    )
  theta = params.get("rope_theta", hf.get("rope_theta", 10_000.0))
  kind = params.get("rope_type", params.get("type", "default"))
  partial = params.get(
    "partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)
  )
  if partial != 1.0:
    raise CheckpointError(
      f"config.json partial_rotary_factor={partial} is not supported "
      "(rotary embeddings span the whole head)"
    )
  if kind == "default":
    return float(theta), None
  if kind == "llama3":
    params.setdefault(
      "original_max_position_embeddings", hf.get("max_position_embeddings")
    )
    scaling = RopeScaling(
      factor=float(_field(params, "factor", "rope_parameters.")),
      low_freq_factor=float(
        _field(params, "low_freq_factor", "rope_parameters.")
      ),
      high_freq_factor=float(
        _field(params, "high_freq_factor", "rope_parameters.")
      ),
      original_max_len=int(
        _field(params, "original_max_position_embeddings", "rope_parameters.")
      ),
    )
    return float(theta), scaling
  raise CheckpointError(
    f"config.json rope type {kind!r} is not supported; supported: "
    "'default', 'llama3'"
  )


def _check_unsupported(hf: Mapping[str, Any], family: str) -> None:
  """Rejects config switches that would change the math we implement."""
  act = hf.get("hidden_act", "silu")
  if act != "silu":
    raise CheckpointError(
      f"config.json hidden_act={act!r} is not supported (only 'silu')"
    )
  # Llama / Qwen3 `attention_bias` also adds a bias to o_proj, which the
  # decoder does not have; Qwen2's q/k/v biases are unconditional instead.
  if family in ("llama", "qwen3") and hf.get("attention_bias", False):
    raise CheckpointError(
      f"config.json attention_bias=true is not supported for {family} "
      "(it adds an o_proj bias)"
    )
  if hf.get("mlp_bias", False):
    raise CheckpointError("config.json mlp_bias=true is not supported")
  if hf.get("use_sliding_window", False):
    raise CheckpointError(
      "config.json use_sliding_window=true is not supported (full causal "
      "attention only)"
    )
  types = hf.get("layer_types")
  if types and any(t != "full_attention" for t in types):
    raise CheckpointError(
      f"config.json layer_types {sorted(set(types))} are not supported "
      "(only 'full_attention')"
    )


def config_from_hf(
  hf: Mapping[str, Any], dtype: str = "float32"
) -> ModelConfig:
  """Maps a Llama / Qwen2 / Qwen3 config.json onto `ModelConfig`."""
  family = hf_family(hf)
  _check_unsupported(hf, family)
  if dtype not in _DTYPES:
    raise ValueError(f"dtype must be one of {list(_DTYPES)}: {dtype!r}")
  d_model = int(_field(hf, "hidden_size"))
  n_heads = int(_field(hf, "num_attention_heads"))
  n_kv = hf.get("num_key_value_heads") or n_heads
  # transformers' Qwen3Config defaults head_dim to 128 rather than deriving
  # it, so an omitted field means different things per family.
  default_head_dim = 128 if family == "qwen3" else d_model // n_heads
  head_dim = hf.get("head_dim") or default_head_dim
  theta, scaling = _rope(hf)
  return ModelConfig(
    vocab_size=int(_field(hf, "vocab_size")),
    d_model=d_model,
    n_layers=int(_field(hf, "num_hidden_layers")),
    n_heads=n_heads,
    n_kv_heads=int(n_kv),
    head_dim=int(head_dim),
    mlp_dim=int(_field(hf, "intermediate_size")),
    rope_theta=theta,
    norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
    qk_norm=family == "qwen3",
    attn_bias=family == "qwen2",
    tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
    dtype=dtype,
    param_dtype=dtype,
    max_len=int(hf.get("max_position_embeddings", 2048)),
    rope_scaling=scaling,
  )


def hf_tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Every tensor a checkpoint of `config` must hold, with its shape."""
  d, hd, f = config.d_model, config.head_dim, config.mlp_dim
  q, kv = config.n_heads * hd, config.n_kv_heads * hd
  shapes = {
    "model.embed_tokens.weight": (config.vocab_size, d),
    "model.norm.weight": (d,),
  }
  if not config.tie_embeddings:
    shapes["lm_head.weight"] = (config.vocab_size, d)
  for i in range(config.n_layers):
    p = f"model.layers.{i}."
    shapes[p + "input_layernorm.weight"] = (d,)
    shapes[p + "post_attention_layernorm.weight"] = (d,)
    shapes[p + "self_attn.q_proj.weight"] = (q, d)
    shapes[p + "self_attn.k_proj.weight"] = (kv, d)
    shapes[p + "self_attn.v_proj.weight"] = (kv, d)
    shapes[p + "self_attn.o_proj.weight"] = (d, q)
    if config.attn_bias:
      shapes[p + "self_attn.q_proj.bias"] = (q,)
      shapes[p + "self_attn.k_proj.bias"] = (kv,)
      shapes[p + "self_attn.v_proj.bias"] = (kv,)
    if config.qk_norm:
      shapes[p + "self_attn.q_norm.weight"] = (hd,)
      shapes[p + "self_attn.k_norm.weight"] = (hd,)
    shapes[p + "mlp.gate_proj.weight"] = (f, d)
    shapes[p + "mlp.up_proj.weight"] = (f, d)
    shapes[p + "mlp.down_proj.weight"] = (d, f)
  return shapes


def _safetensors_files(path: str | os.PathLike) -> list[str]:
  """The safetensors files of a checkpoint, single-file or sharded."""
  index = os.path.join(path, INDEX_FILE)
  if os.path.isfile(index):
    with open(index) as f:
      weight_map = json.load(f).get("weight_map")
    if not weight_map:
      raise CheckpointError(f"{index} has no 'weight_map'")
    files = sorted(set(weight_map.values()))
  elif os.path.isfile(os.path.join(path, SINGLE_FILE)):
    files = [SINGLE_FILE]
  else:
    raise FileNotFoundError(
      f"no {SINGLE_FILE} or {INDEX_FILE} in checkpoint directory {path}"
    )
  full = [os.path.join(path, name) for name in files]
  for file in full:
    if not os.path.isfile(file):
      raise FileNotFoundError(f"checkpoint shard {file} is missing")
  return full


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """All tensors of a local checkpoint as numpy arrays (dtype as stored)."""
  tensors: dict[str, np.ndarray] = {}
  for file in _safetensors_files(path):
    with safe_open(file, framework="np") as f:
      for name in f.keys():
        if name in tensors:
          raise CheckpointError(f"tensor {name!r} appears in two shards")
        if name.endswith(_IGNORED_SUFFIXES):
          continue
        tensors[name] = f.get_tensor(name)
  return tensors


def check_tensors(
  tensors: Mapping[str, np.ndarray], config: ModelConfig
) -> None:
  """Raises `CheckpointError` naming missing, extra or misshapen tensors."""
  expected = hf_tensor_shapes(config)
  extra = sorted(set(tensors) - set(expected))
  if config.tie_embeddings and "lm_head.weight" in extra:
    # Some tied checkpoints still store the head; it must then be a copy.
    head = tensors["lm_head.weight"]
    embed = tensors.get("model.embed_tokens.weight")
    if embed is not None and not np.array_equal(head, embed):
      raise CheckpointError(
        "config.json has tie_word_embeddings=true but tensor "
        "'lm_head.weight' differs from 'model.embed_tokens.weight'"
      )
    extra.remove("lm_head.weight")
  missing = sorted(set(expected) - set(tensors))
  if missing:
    raise CheckpointError(
      f"checkpoint is missing {len(missing)} tensor(s): {missing[:8]}"
    )
  if extra:
    raise CheckpointError(
      f"checkpoint has {len(extra)} unexpected tensor(s): {extra[:8]}"
    )
  for name, shape in expected.items():
    got = tuple(tensors[name].shape)
    if got != shape:
      raise CheckpointError(
        f"tensor {name!r} has shape {got}, expected {shape}"
      )


# One row per tensor: (HF name, NNX path, HF->NNX transform, NNX->HF
# transform). torch's Linear stores weight as (out, in); NNX kernels are
# (in..., out...) with heads split out, so most rows are a transpose plus a
# reshape.
_Fn = Callable[[np.ndarray], np.ndarray]
_Row = tuple[str, tuple[str | int, ...], _Fn, _Fn]


def _param_table(config: ModelConfig) -> list[_Row]:
  d, h, k, dh = (
    config.d_model,
    config.n_heads,
    config.n_kv_heads,
    config.head_dim,
  )
  same = (lambda w: w, lambda w: w)
  linear = (lambda w: w.T, lambda w: w.T)

  def heads_in(n: int):
    return (lambda w: w.T.reshape(d, n, dh), lambda w: w.reshape(d, -1).T)

  def heads_bias(n: int):
    return (lambda b: b.reshape(n, dh), lambda b: b.reshape(-1))

  heads_out = (lambda w: w.T.reshape(h, dh, d), lambda w: w.reshape(-1, d).T)

  rows: list[_Row] = [
    ("model.embed_tokens.weight", ("embed", "embedding"), *same),
    ("model.norm.weight", ("final_norm", "scale"), *same),
  ]
  if not config.tie_embeddings:
    rows.append(("lm_head.weight", ("lm_head", "kernel"), *linear))
  for i in range(config.n_layers):
    p, n = f"model.layers.{i}.", ("layers", i)
    rows += [
      (p + "input_layernorm.weight", (*n, "attn_norm", "scale"), *same),
      (p + "post_attention_layernorm.weight", (*n, "mlp_norm", "scale"), *same),
      (p + "self_attn.q_proj.weight", (*n, "attn", "q_proj", "kernel"),
       *heads_in(h)),
      (p + "self_attn.k_proj.weight", (*n, "attn", "k_proj", "kernel"),
       *heads_in(k)),
      (p + "self_attn.v_proj.weight", (*n, "attn", "v_proj", "kernel"),
       *heads_in(k)),
      (p + "self_attn.o_proj.weight", (*n, "attn", "o_proj", "kernel"),
       *heads_out),
      (p + "mlp.gate_proj.weight", (*n, "mlp", "gate_proj", "kernel"), *linear),
      (p + "mlp.up_proj.weight", (*n, "mlp", "up_proj", "kernel"), *linear),
      (p + "mlp.down_proj.weight", (*n, "mlp", "down_proj", "kernel"), *linear),
    ]  # fmt: skip
    if config.attn_bias:
      rows += [
        (p + f"self_attn.{x}_proj.bias", (*n, "attn", f"{x}_proj", "bias"),
         *heads_bias(heads))
        for x, heads in (("q", h), ("k", k), ("v", k))
      ]  # fmt: skip
    if config.qk_norm:
      rows += [
        (p + f"self_attn.{x}_norm.weight", (*n, "attn", f"{x}_norm", "scale"),
         *same)
        for x in ("q", "k")
      ]  # fmt: skip
  return rows


def _abstract_model(config: ModelConfig) -> Transformer:
  # eval_shape: no random init of weights that are overwritten right away.
  return nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(params=0)))


def from_hf_tensors(
  tensors: Mapping[str, np.ndarray], config: ModelConfig
) -> Transformer:
  """A `Transformer` holding checked, converted HF tensors."""
  check_tensors(tensors, config)
  graphdef, state = nnx.split(_abstract_model(config))
  slots = dict(nnx.to_flat_state(state))
  rows = _param_table(config)
  mapped = {path for _, path, _, _ in rows}
  if mapped != set(slots):
    # Guards against the decoder's parameter tree drifting from this table.
    raise RuntimeError(
      "HF mapping and Transformer parameters disagree: "
      f"unmapped {sorted(map(str, set(slots) - mapped))}, "
      f"unknown {sorted(map(str, mapped - set(slots)))}"
    )
  dtype = config.weight_dtype
  filled = []
  for name, path, to_nnx, _ in rows:
    value = np.ascontiguousarray(to_nnx(tensors[name])).astype(dtype)
    if value.shape != slots[path].shape:
      raise RuntimeError(
        f"tensor {name!r} converts to shape {value.shape}, but parameter "
        f"{path} has shape {slots[path].shape}"
      )
    filled.append((path, slots[path].replace(jnp.asarray(value))))
  return nnx.merge(graphdef, nnx.from_flat_state(filled))


def load_pretrained(
  path: str | os.PathLike, dtype: Any = jnp.float32
) -> Transformer:
  """Loads a local Llama / Qwen2 / Qwen3 checkpoint as a `Transformer`.

  `dtype` (float32 or bfloat16) is both the stored weight dtype and the
  compute dtype of the returned model.
  """
  name = jnp.dtype(dtype).name
  config = config_from_hf(read_hf_config(path), dtype=name)
  return from_hf_tensors(read_safetensors(path), config)


def to_hf_state_dict(model: Transformer) -> dict[str, np.ndarray]:
  """The model's weights under HF names and layouts (numpy, weight dtype).

  Kernels stored out-dims first (`with_kernels_out_first`) are put back in
  the in_shape + out_shape layout the conversion table expects.
  """
  state = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
  # kernel path -> the transpose that undoes the module's out-first layout
  undo = {}
  for path, module in nnx.iter_graph(model):
    if isinstance(module, Dense) and module.out_first:
      ndim = module.kernel[...].ndim
      n_out = ndim - module.n_in
      undo[(*path, "kernel")] = (*range(n_out, ndim), *range(n_out))
  out = {}
  for name, path, _, to_hf in _param_table(model.config):
    value = np.asarray(jax.device_get(state[path][...]))
    if path in undo:
      value = np.transpose(value, undo[path])
    out[name] = np.ascontiguousarray(to_hf(value))
  return out


def load_tokenizer(path: str | os.PathLike) -> Any:
  """The checkpoint's tokenizer via `transformers.AutoTokenizer` (offline)."""
  # Imported here: transformers is slow to import and only this needs it.
  from transformers import AutoTokenizer

  return AutoTokenizer.from_pretrained(path, local_files_only=True)
