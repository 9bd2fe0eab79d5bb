"""Parity of `load_pretrained` with transformers on tiny random checkpoints."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from agentic_rl import models
from agentic_rl.models import hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_SHAPE = dict(
  vocab_size=128,
  hidden_size=64,
  intermediate_size=96,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  max_position_embeddings=128,
)

# name -> (config class, model class, extra config fields, save kwargs)
_VARIANTS = {
  "llama": (
    "LlamaConfig",
    "LlamaForCausalLM",
    dict(tie_word_embeddings=False, rms_norm_eps=1e-5),
    {},
  ),
  "llama_tied_rope3": (
    "LlamaConfig",
    "LlamaForCausalLM",
    dict(
      tie_word_embeddings=True,
      rope_parameters=dict(
        rope_type="llama3",
        rope_theta=500_000.0,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=32,
      ),
    ),
    {},
  ),
  # Qwen2: q/k/v biases, tied embeddings, saved in several shards.
  "qwen2_sharded": (
    "Qwen2Config",
    "Qwen2ForCausalLM",
    dict(tie_word_embeddings=True),
    dict(max_shard_size="40KB"),
  ),
  # Qwen3: qk-norm and a head_dim that is not hidden_size / heads.
  "qwen3": (
    "Qwen3Config",
    "Qwen3ForCausalLM",
    dict(head_dim=24, rope_parameters=dict(rope_theta=1e6)),
    {},
  ),
}


def _make_hf(name, root, **overrides):
  config_cls, model_cls, extra, save_kw = _VARIANTS[name]
  torch.manual_seed(list(_VARIANTS).index(name))
  config = getattr(transformers, config_cls)(**{**_SHAPE, **extra, **overrides})
  model = getattr(transformers, model_cls)(config).eval()
  # Random init leaves norm weights at 1 and biases at 0; perturb them so
  # the parity test would notice a mis-mapped norm or bias.
  with torch.no_grad():
    for pname, p in model.named_parameters():
      if pname.endswith("bias") or "norm" in pname:
        p.add_(0.1 * torch.randn_like(p))
  path = os.path.join(root, name)
  model.save_pretrained(path, safe_serialization=True, **save_kw)
  return model, path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  root = tmp_path_factory.mktemp("hf")
  return {name: _make_hf(name, root) for name in _VARIANTS}


def _hf_logits(model, tokens_BxL):
  with torch.no_grad():
    out = model(torch.as_tensor(tokens_BxL, dtype=torch.long))
  return out.logits.numpy()


@pytest.mark.parametrize("name", list(_VARIANTS))
def test_logits_match_transformers(checkpoints, name):
  hf_model, path = checkpoints[name]
  model = hf.load_pretrained(path, dtype=jnp.float32)
  rng = np.random.default_rng(0)
  tokens_BxL = rng.integers(0, _SHAPE["vocab_size"], size=(3, 40))
  want_BxLxV = _hf_logits(hf_model, tokens_BxL)
  got_BxLxV = np.asarray(model(jnp.asarray(tokens_BxL, jnp.int32)))
  assert got_BxLxV.shape == want_BxLxV.shape
  np.testing.assert_allclose(got_BxLxV, want_BxLxV, atol=1e-4, rtol=1e-4)


def test_config_mapping(checkpoints):
  _, path = checkpoints["qwen3"]
  config = hf.config_from_hf(hf.read_hf_config(path))
  assert (config.head_dim, config.n_kv_heads, config.mlp_dim) == (24, 2, 96)
  assert config.qk_norm and not config.attn_bias
  assert config.rope_theta == 1e6 and config.rope_scaling is None
  _, path = checkpoints["qwen2_sharded"]
  assert os.path.isfile(os.path.join(path, hf.INDEX_FILE))
  config = hf.config_from_hf(hf.read_hf_config(path))
  assert config.attn_bias and config.tie_embeddings and not config.qk_norm
  _, path = checkpoints["llama_tied_rope3"]
  config = hf.config_from_hf(hf.read_hf_config(path))
  assert config.rope_scaling.factor == 8.0
  assert config.rope_scaling.original_max_len == 32


def test_head_dim_defaults_follow_transformers():
  base = {**_SHAPE, "num_attention_heads": 4}
  for arch, cls in [
    ("Qwen2ForCausalLM", "Qwen2Config"),
    ("Qwen3ForCausalLM", "Qwen3Config"),
    ("LlamaForCausalLM", "LlamaConfig"),
  ]:
    ref = getattr(transformers, cls)(**base)
    want = getattr(ref, "head_dim", None) or 64 // 4
    config = hf.config_from_hf({"architectures": [arch], **base})
    assert config.head_dim == want, arch


def test_unsupported_dtype(checkpoints):
  _, path = checkpoints["llama"]
  with pytest.raises(ValueError, match="float16"):
    hf.load_pretrained(path, dtype=jnp.float16)


def test_legacy_rope_fields():
  legacy = {
    "architectures": ["LlamaForCausalLM"],
    **_SHAPE,
    "rope_theta": 500000.0,
    "rope_scaling": {
      "type": "llama3",
      "factor": 32.0,
      "low_freq_factor": 1.0,
      "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192,
    },
  }
  config = hf.config_from_hf(legacy)
  assert config.rope_theta == 500000.0
  assert config.rope_scaling.original_max_len == 8192


def test_export_round_trip(checkpoints):
  for name in ("llama", "qwen2_sharded", "qwen3"):
    _, path = checkpoints[name]
    want = hf.read_safetensors(path)
    got = hf.to_hf_state_dict(hf.load_pretrained(path))
    assert sorted(got) == sorted(want)
    for key, value in want.items():
      np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_export_undoes_kernels_out_first(checkpoints):
  # q/k/v kernels are 3-d (d_model, heads, head_dim) in_shape + out_shape,
  # o_proj (heads, head_dim, d_model): a transpose left in place would give
  # the wrong shapes or, for the square ones, silently wrong tensors.
  # llama has an untied lm_head, qwen2 q/k/v biases, qwen3 qk-norm.
  for name in ("llama", "qwen2_sharded", "qwen3"):
    _, path = checkpoints[name]
    want = hf.read_safetensors(path)
    model = models.with_kernels_out_first(hf.load_pretrained(path))
    got = hf.to_hf_state_dict(model)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
      np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_bfloat16_checkpoint(tmp_path):
  hf_model, path = _make_hf("qwen3", tmp_path)
  hf_model.to(torch.bfloat16).save_pretrained(path)
  model = hf.load_pretrained(path, dtype=jnp.bfloat16)
  tokens_BxL = np.arange(12).reshape(2, 6)
  want_BxLxV = _hf_logits(hf_model.float(), tokens_BxL)
  got_BxLxV = np.asarray(model(jnp.asarray(tokens_BxL)).astype(jnp.float32))
  # bf16 compute: loose tolerance, but far tighter than a wrong mapping.
  np.testing.assert_allclose(got_BxLxV, want_BxLxV, atol=0.1)


def _rewrite(path, edit):
  """Applies `edit` to the tensors of a single-file checkpoint, in place."""
  tensors = hf.read_safetensors(path)
  edit(tensors)
  save_file(tensors, os.path.join(path, hf.SINGLE_FILE))


def _edit_config(path, **fields):
  file = os.path.join(path, hf.CONFIG_FILE)
  with open(file) as f:
    config = json.load(f)
  config.update(fields)
  with open(file, "w") as f:
    json.dump(config, f)


@pytest.fixture
def llama_copy(checkpoints, tmp_path):
  import shutil

  _, path = checkpoints["llama"]
  dst = tmp_path / "ckpt"
  shutil.copytree(path, dst)
  return str(dst)


def test_missing_tensor(llama_copy):
  key = "model.layers.1.mlp.up_proj.weight"
  _rewrite(llama_copy, lambda t: t.pop(key))
  with pytest.raises(hf.CheckpointError, match=r"missing.*up_proj"):
    hf.load_pretrained(llama_copy)


def test_wrong_shape(llama_copy):
  key = "model.layers.0.self_attn.k_proj.weight"
  _rewrite(llama_copy, lambda t: t.update({key: t[key][:16]}))
  with pytest.raises(hf.CheckpointError, match=r"k_proj.*\(16, 64\)"):
    hf.load_pretrained(llama_copy)


def test_extra_tensor(llama_copy):
  key = "model.layers.0.self_attn.o_proj.bias"
  _rewrite(llama_copy, lambda t: t.update({key: np.zeros(64, np.float32)}))
  with pytest.raises(hf.CheckpointError, match=r"unexpected.*o_proj.bias"):
    hf.load_pretrained(llama_copy)


def test_tied_head_copy_and_rotary_buffers_are_tolerated(checkpoints, tmp_path):
  import shutil

  _, path = checkpoints["llama_tied_rope3"]
  dst = str(tmp_path / "ckpt")
  shutil.copytree(path, dst)
  embed = hf.read_safetensors(path)["model.embed_tokens.weight"]
  buffer = "model.layers.0.self_attn.rotary_emb.inv_freq"
  _rewrite(dst, lambda t: t.update({"lm_head.weight": embed.copy()}))
  _rewrite(dst, lambda t: t.update({buffer: np.ones(8, np.float32)}))
  got = hf.to_hf_state_dict(hf.load_pretrained(dst))
  want = hf.read_safetensors(path)
  assert sorted(got) == sorted(want)
  for key, value in want.items():
    np.testing.assert_array_equal(got[key], value, err_msg=key)
  # A stored head that differs from the embedding contradicts tying.
  _rewrite(dst, lambda t: t.update({"lm_head.weight": embed + 1.0}))
  with pytest.raises(hf.CheckpointError, match="'lm_head.weight' differs"):
    hf.load_pretrained(dst)


def test_missing_shard(checkpoints, tmp_path):
  import shutil

  _, path = checkpoints["qwen2_sharded"]
  dst = tmp_path / "ckpt"
  shutil.copytree(path, dst)
  shard = sorted(f for f in os.listdir(dst) if f.startswith("model-"))[1]
  os.remove(dst / shard)
  with pytest.raises(FileNotFoundError, match=shard):
    hf.load_pretrained(str(dst))


@pytest.mark.parametrize(
  "fields, match",
  [
    ({"architectures": ["MistralForCausalLM"]}, "MistralForCausalLM"),
    ({"architectures": None}, "architectures"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    (
      {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
      "'yarn'",
    ),
    ({"rope_parameters": {"rope_type": "llama3"}}, "factor"),
    ({"vocab_size": None}, "vocab_size"),
  ],
)
def test_unsupported_config(llama_copy, fields, match):
  _edit_config(llama_copy, **fields)
  with pytest.raises(hf.CheckpointError, match=match):
    hf.load_pretrained(llama_copy)


def test_sliding_window_rejected(checkpoints, tmp_path):
  import shutil

  _, path = checkpoints["qwen3"]
  dst = tmp_path / "ckpt"
  shutil.copytree(path, dst)
  _edit_config(str(dst), use_sliding_window=True)
  with pytest.raises(hf.CheckpointError, match="use_sliding_window"):
    hf.load_pretrained(str(dst))


def test_missing_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    hf.load_pretrained(str(tmp_path))
  (tmp_path / "config.json").write_text(
    json.dumps({"architectures": ["LlamaForCausalLM"], **_SHAPE})
  )
  with pytest.raises(FileNotFoundError, match="model.safetensors"):
    hf.load_pretrained(str(tmp_path))


def test_load_tokenizer(tmp_path):
  from agentic_rl.models.tokenizer import build_env_tokenizer

  env_tok = build_env_tokenizer()
  env_tok.save(tmp_path)
  tok = hf.load_tokenizer(str(tmp_path))
  ids = tok.encode("<answer>1</answer>", add_special_tokens=False)
  assert ids == env_tok.encode("<answer>1</answer>")
  assert ids[0] == env_tok.tag_id("<answer>")
