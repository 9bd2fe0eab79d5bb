"""Decoder tests: parity with HF torch models, cache path, presets, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from agentic_rl import losses, models
from agentic_rl.models import ModelConfig, RopeScaling, init_cache
from agentic_rl.models.transformer import (
  apply_rope,
  attend,
  cache_block_lens,
  causal_attend,
  rope_inv_freq,
)


def _forward(graphdef, state, tokens_BxL, positions_BxL):
  return nnx.merge(graphdef, state)(tokens_BxL, positions_BxL)


_forward_jit = jax.jit(_forward, static_argnums=0)


def forward(model, tokens_BxL, positions_BxL=None):
  """Jitted `model(tokens)`: eager op-by-op dispatch is far slower on CPU."""
  graphdef, state = nnx.split(model)
  return _forward_jit(graphdef, state, tokens_BxL, positions_BxL)


def _cached(graphdef, state, tokens, pos, write, cache):
  model = nnx.merge(graphdef, state)
  hidden, cache = model.forward_cached(tokens, pos, write, cache)
  return model.unembed(hidden), cache


_cached_jit = jax.jit(_cached, static_argnums=0)


def forward_cached(model, tokens, pos, write, cache):
  graphdef, state = nnx.split(model)
  return _cached_jit(graphdef, state, tokens, pos, write, cache)


def small_config(**overrides) -> ModelConfig:
  base = dict(
    vocab_size=97,
    d_model=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    mlp_dim=48,
    rope_theta=10_000.0,
    norm_eps=1e-6,
    max_len=64,
  )
  return ModelConfig(**{**base, **overrides})


def hf_model(family: str, config: ModelConfig) -> torch.nn.Module:
  """A random HF model of the same shape (norm weights randomised too)."""
  rope = {"rope_type": "default", "rope_theta": config.rope_theta}
  if config.rope_scaling is not None:
    s = config.rope_scaling
    rope = {
      "rope_type": "llama3",
      "rope_theta": config.rope_theta,
      "factor": s.factor,
      "low_freq_factor": s.low_freq_factor,
      "high_freq_factor": s.high_freq_factor,
      "original_max_position_embeddings": s.original_max_len,
    }
  common = dict(
    vocab_size=config.vocab_size,
    hidden_size=config.d_model,
    intermediate_size=config.mlp_dim,
    num_hidden_layers=config.n_layers,
    num_attention_heads=config.n_heads,
    num_key_value_heads=config.n_kv_heads,
    rms_norm_eps=config.norm_eps,
    rope_parameters=rope,
    tie_word_embeddings=config.tie_embeddings,
    max_position_embeddings=config.max_len,
  )
  if family == "qwen3":
    hf_config = transformers.Qwen3Config(head_dim=config.head_dim, **common)
    cls = transformers.Qwen3ForCausalLM
  elif family == "qwen2":
    hf_config = transformers.Qwen2Config(**common)
    cls = transformers.Qwen2ForCausalLM
  else:
    hf_config = transformers.LlamaConfig(head_dim=config.head_dim, **common)
    cls = transformers.LlamaForCausalLM
  torch.manual_seed(0)
  model = cls(hf_config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight"):
        p.copy_(1.0 + 0.1 * torch.randn_like(p))
      elif name.endswith("bias"):
        p.copy_(0.1 * torch.randn_like(p))
      else:
        p.copy_(0.2 * torch.randn_like(p))
  return model


def convert(sd: dict[str, torch.Tensor], config: ModelConfig):
  """HF state dict -> our flat parameter paths (independent of models.hf)."""
  d, h, k = config.d_model, config.n_heads, config.n_kv_heads
  dh = config.head_dim
  t = lambda name: sd[name].detach().numpy()
  out = {("embed", "embedding"): t("model.embed_tokens.weight")}
  out[("final_norm", "scale")] = t("model.norm.weight")
  if not config.tie_embeddings:
    out[("lm_head", "kernel")] = t("lm_head.weight").T
  for i in range(config.n_layers):
    p, q = f"model.layers.{i}.", ("layers", i)
    out[(*q, "attn_norm", "scale")] = t(p + "input_layernorm.weight")
    out[(*q, "mlp_norm", "scale")] = t(p + "post_attention_layernorm.weight")
    for name, heads in (("q_proj", h), ("k_proj", k), ("v_proj", k)):
      w = t(p + f"self_attn.{name}.weight")
      out[(*q, "attn", name, "kernel")] = w.T.reshape(d, heads, dh)
      if config.attn_bias:
        b = t(p + f"self_attn.{name}.bias")
        out[(*q, "attn", name, "bias")] = b.reshape(heads, dh)
    w = t(p + "self_attn.o_proj.weight")
    out[(*q, "attn", "o_proj", "kernel")] = w.T.reshape(h, dh, d)
    if config.qk_norm:
      out[(*q, "attn", "q_norm", "scale")] = t(p + "self_attn.q_norm.weight")
      out[(*q, "attn", "k_norm", "scale")] = t(p + "self_attn.k_norm.weight")
    for name in ("gate_proj", "up_proj", "down_proj"):
      out[(*q, "mlp", name, "kernel")] = t(p + f"mlp.{name}.weight").T
  return out


def load_into(model: models.Transformer, flat: dict) -> None:
  state = nnx.state(model)
  paths = {path for path, _ in nnx.to_flat_state(state)}
  assert paths == set(flat), paths ^ set(flat)
  for path, var in nnx.to_flat_state(state):
    assert var.get_value().shape == flat[path].shape, path
    var.set_value(jnp.asarray(flat[path], var.get_value().dtype))
  nnx.update(model, state)


FAMILIES = {
  "qwen3": dict(qk_norm=True, tie_embeddings=True, rope_theta=1e6),
  "qwen2": dict(attn_bias=True, tie_embeddings=False),
  "llama": dict(
    tie_embeddings=False,
    rope_theta=500_000.0,
    norm_eps=1e-5,
    rope_scaling=RopeScaling(8.0, 1.0, 4.0, 16),
  ),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_hugging_face(family):
  config = small_config(**FAMILIES[family])
  reference = hf_model(family, config)
  model = models.build(config, 1)
  load_into(model, convert(reference.state_dict(), config))
  tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 40))
  with torch.no_grad():
    expected = reference(torch.tensor(tokens)).logits.numpy()
  got = np.asarray(forward(model, jnp.asarray(tokens)))
  np.testing.assert_allclose(got, expected, atol=2e-4, rtol=2e-4)


def test_cache_blocks_double_after_the_first_two():
  assert cache_block_lens(4096, 128) == (128, 128, 256, 512, 1024, 2048)
  assert cache_block_lens(320, 128) == (128, 128, 64)  # cut at max_len
  assert cache_block_lens(100, 128) == (100,)
  with pytest.raises(ValueError, match="block_len"):
    cache_block_lens(64, 0)


@pytest.mark.parametrize("block_len", [128, 8, 5])
def test_cached_chunks_match_full_forward(block_len):
  # 32 positions in one block, in blocks of 8, 8, 16, and of 5, 5, 10, 12.
  config = small_config(qk_norm=True)
  model = models.build(config, 0)
  tokens_BxL = jax.random.randint(jax.random.key(1), (3, 20), 0, 97)
  full_BxLxV = forward(model, tokens_BxL)
  cache = init_cache(config, 3, 32, block_len)
  expected = {128: (32,), 8: (8, 8, 16), 5: (5, 5, 10, 12)}[block_len]
  assert cache.block_lens == expected
  pieces = []
  for start, stop in ((0, 7), (7, 8), (8, 20)):
    chunk = tokens_BxL[:, start:stop]
    pos = jnp.broadcast_to(jnp.arange(start, stop), chunk.shape)
    logits, cache = forward_cached(
      model, chunk, pos, jnp.ones(chunk.shape, bool), cache
    )
    pieces.append(logits)
  np.testing.assert_allclose(
    jnp.concatenate(pieces, axis=1), full_BxLxV, atol=1e-5, rtol=1e-5
  )


@pytest.mark.parametrize("block_len", [128, 3])
def test_unwritten_tokens_leave_cache_untouched(block_len):
  config = small_config()
  model = models.build(config, 0)
  cache = init_cache(config, 2, 8, block_len)  # blocks of 8, or 3 + 3 + 2
  tokens = jnp.ones((2, 3), jnp.int32)
  pos = jnp.asarray([[0, 1, 2], [6, 7, 8]])  # row 1 would run off the end
  write = jnp.asarray([[True, True, False], [True, True, False]])
  _, cache = forward_cached(model, tokens, pos, write, cache)
  v = np.concatenate(cache.v[0], axis=2)  # SxKxLxDh, blocks joined
  assert np.all(v[0, :, :2] != 0) and np.all(v[0, :, 2:] == 0)
  assert np.all(v[1, :, :6] == 0) and np.all(v[1, :, 6:] != 0)
  k = np.concatenate(cache.k[0], axis=3)  # SxKxDhxL: same positions
  assert np.all(k[0, :, :, :2] != 0) and np.all(k[0, :, :, 2:] == 0)
  assert np.all(k[1, :, :, :6] == 0) and np.all(k[1, :, :, 6:] != 0)


def test_rope_is_relative():
  config = small_config()
  inv_freq = rope_inv_freq(config)
  x = jax.random.normal(jax.random.key(0), (1, 5, 2, 8))
  y = jax.random.normal(jax.random.key(1), (1, 5, 2, 8))
  pos = jnp.arange(5)[None]
  dots = lambda off: jnp.einsum(
    "blhd,bmhd->blmh",
    apply_rope(x, pos + off, inv_freq),
    apply_rope(y, pos + off, inv_freq),
  )
  np.testing.assert_allclose(dots(0), dots(37), atol=1e-4)


def test_position_offset_leaves_logits_unchanged():
  model = models.build(small_config(qk_norm=True), 0)
  tokens = jax.random.randint(jax.random.key(2), (2, 12), 0, 97)
  positions = jnp.broadcast_to(jnp.arange(12), (2, 12))
  np.testing.assert_allclose(
    forward(model, tokens),
    forward(model, tokens, positions + 100),
    atol=5e-4,
  )


def test_causal_future_tokens_do_not_matter():
  model = models.build(small_config(), 0)
  a = jnp.asarray([[1, 2, 3, 4, 5, 6]])
  b = a.at[0, 4:].set(jnp.asarray([50, 60]))
  np.testing.assert_allclose(
    forward(model, a)[:, :4], forward(model, b)[:, :4], atol=1e-6
  )


def test_bfloat16_close_to_float32():
  config = small_config(qk_norm=True)
  f32 = models.build(config, 3)
  bf16 = models.build(config.replace(dtype="bfloat16"), 3)
  tokens = jax.random.randint(jax.random.key(0), (2, 16), 0, 97)
  out = forward(bf16, tokens)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(out, forward(f32, tokens), atol=0.1)


@pytest.mark.parametrize(
  "name, billions",
  [("qwen2.5-0.5b", 0.494), ("qwen3-0.6b", 0.596), ("llama-3.2-1b", 1.236)],
)
def test_real_presets_abstract_param_counts(name, billions):
  model = models.build_abstract(name)
  state = nnx.state(model, nnx.Param)
  leaves = [v.get_value() for _, v in nnx.to_flat_state(state)]
  assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
  total = sum(int(np.prod(x.shape)) for x in leaves)
  assert total == model.config.num_params()
  assert abs(total / 1e9 - billions) < 0.001


def test_matmul_weights_are_the_kernels_a_token_multiplies_by():
  # qwen3-0.6b by hand: 28 layers x (1024 x 128 x (2 x 16 + 2 x 8) +
  # 3 x 1024 x 3072) and a 1024 x 151,936 unembedding (tied).
  config = models.get_preset("qwen3-0.6b")
  assert config.matmul_weights() == (440_401_920, 155_582_464)
  # The same as the module's Dense kernels and its (tied) embedding table.
  model = models.build_abstract(config)
  sizes = {
    path: int(np.prod(v.get_value().shape))
    for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
  }
  kernels = sum(n for path, n in sizes.items() if path[-1] == "kernel")
  assert config.matmul_weights() == (kernels, sizes[("embed", "embedding")])


def test_small_presets():
  tiny = models.build("tiny")
  n = sum(x.get_value().size for _, x in nnx.to_flat_state(nnx.state(tiny)))
  assert 0.5e6 < n < 1.5e6 and n == tiny.config.num_params()
  bench = models.get_preset("qwen3-bench")
  assert (bench.vocab_size, bench.d_model, bench.n_layers) == (1024, 256, 4)
  assert (bench.n_heads, bench.n_kv_heads, bench.head_dim) == (4, 2, 64)
  assert bench.mlp_dim == 1024 and bench.qk_norm


def test_parameter_axes_metadata():
  model = models.build(small_config(attn_bias=True, tie_embeddings=False))
  axes = {
    path: var.get_metadata()["out_sharding"]
    for path, var in nnx.to_flat_state(nnx.state(model))
  }
  assert axes[("embed", "embedding")] == ("vocab", "embed")
  assert axes[("layers", 0, "attn", "q_proj", "kernel")] == (
    "embed",
    "heads",
    "head_dim",
  )
  assert axes[("layers", 1, "attn", "k_proj", "bias")] == (
    "kv_heads",
    "head_dim",
  )
  assert axes[("layers", 0, "mlp", "down_proj", "kernel")] == ("mlp", "embed")
  assert axes[("lm_head", "kernel")] == ("embed", "vocab")


def test_kernels_out_first_same_logits_transposed_weights():
  model = models.build(
    small_config(qk_norm=True, attn_bias=True, tie_embeddings=False), 0
  )
  # Non-zero biases, so a bias added on the wrong axis would show.
  bias = model.layers[0].attn.q_proj.bias
  bias[...] = jax.random.normal(jax.random.key(3), bias.shape)
  transposed = models.with_kernels_out_first(model)
  tokens_BxL = jax.random.randint(jax.random.key(1), (2, 12), 0, 97)
  np.testing.assert_allclose(
    forward(transposed, tokens_BxL),
    forward(model, tokens_BxL),
    atol=1e-5,
    rtol=1e-5,
  )
  axes = lambda m: {  # noqa: E731
    path: (var.get_value().shape, var.get_metadata()["out_sharding"])
    for path, var in nnx.to_flat_state(nnx.state(m))
  }
  before, after = axes(model), axes(transposed)
  q = ("layers", 0, "attn", "q_proj", "kernel")
  assert before[q] == ((32, 4, 8), ("embed", "heads", "head_dim"))
  assert after[q] == ((4, 8, 32), ("heads", "head_dim", "embed"))
  o = ("layers", 1, "attn", "o_proj", "kernel")
  assert after[o] == ((32, 4, 8), ("embed", "heads", "head_dim"))
  np.testing.assert_array_equal(
    transposed.layers[1].attn.o_proj.kernel[...],
    np.transpose(model.layers[1].attn.o_proj.kernel[...], (2, 0, 1)),
  )
  assert after[("lm_head", "kernel")][1] == ("vocab", "embed")
  # Biases, norms and the embedding are not kernels: unchanged.
  for path in before:
    if path[-1] != "kernel":
      assert after[path] == before[path]
  # The model itself is untouched, and a second pass changes nothing.
  assert not model.layers[0].attn.q_proj.out_first
  again = models.with_kernels_out_first(transposed)
  assert axes(again) == after


def _loss_and_grads(graphdef, state, tokens_BxL, probe_BxLxV):
  def loss(state):
    return jnp.sum(probe_BxLxV * nnx.merge(graphdef, state)(tokens_BxL))

  return jax.value_and_grad(loss)(state)


def test_remat_keeps_parameters_and_numbers_and_frees_memory():
  # Every remat mode has the same parameter tree and values, and the same
  # loss and gradients up to float order; "full" keeps only each block's
  # input, so the compiled backward needs far less temporary memory.
  config = small_config(n_layers=4, qk_norm=True, attn_bias=True, max_len=128)
  k_tok, k_probe = jax.random.split(jax.random.key(0))
  tokens_BxL = jax.random.randint(k_tok, (2, 128), 0, config.vocab_size)
  probe_BxLxV = jax.random.normal(k_probe, (2, 128, config.vocab_size))
  temp, out = {}, {}
  for remat in ("none", "full", "dots"):
    graphdef, state = nnx.split(models.build(config.replace(remat=remat), 0))
    if remat == "none":
      reference = state
    jax.tree.map(np.testing.assert_array_equal, state, reference)
    step = jax.jit(_loss_and_grads, static_argnums=0)
    compiled = step.lower(graphdef, state, tokens_BxL, probe_BxLxV).compile()
    temp[remat] = compiled.memory_analysis().temp_size_in_bytes
    out[remat] = compiled(state, tokens_BxL, probe_BxLxV)
  (loss, grads) = out["none"]

  def close(a, b):
    # Float order differs between the programs, and a summed gradient's
    # rounding scales with its tensor's largest terms (here up to ~90), so
    # an entry near 0 is compared at that tensor's scale, not its own.
    atol = max(1e-5, 1e-6 * float(np.abs(b).max()))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)

  for remat in ("full", "dots"):
    np.testing.assert_allclose(out[remat][0], loss, rtol=1e-5)
    jax.tree.map(close, out[remat][1], grads)
  assert temp["full"] < 0.6 * temp["none"], temp
  assert temp["dots"] < temp["none"], temp


@pytest.mark.parametrize("tie", [True, False])
def test_logits_chunk_same_logp_and_gradients_less_memory(tie):
  # `Transformer.token_logp` with the vocabulary projection in chunks of
  # positions gives the whole-logits log-probs, entropies and parameter
  # gradients, while the compiled gradient never holds the [B, L, V]
  # logits: its temporary memory falls well below the unchunked one.
  config = small_config(
    vocab_size=4096, n_layers=1, max_len=128, tie_embeddings=tie
  )
  k_tok, k_w = jax.random.split(jax.random.key(1))
  tokens_BxL = jax.random.randint(k_tok, (2, 128), 0, config.vocab_size)
  weight_BxL = jax.random.normal(k_w, (2, 128))

  def objective(graphdef, state):
    logp, ent = nnx.merge(graphdef, state).token_logp(
      tokens_BxL, with_entropy=True
    )
    return jnp.sum(weight_BxL * logp) + jnp.sum(ent), (logp, ent)

  temp, out = {}, {}
  for chunk in (0, 32):
    graphdef, state = nnx.split(
      models.build(config.replace(logits_chunk=chunk), 0)
    )
    step = jax.jit(
      jax.value_and_grad(objective, argnums=1, has_aux=True), static_argnums=0
    )
    compiled = step.lower(graphdef, state).compile()
    temp[chunk] = compiled.memory_analysis().temp_size_in_bytes
    out[chunk] = compiled(state)
  ((_, (logp, ent)), grads) = out[0]
  logits_BxLxV = nnx.merge(graphdef, state)(tokens_BxL)  # same parameters
  np.testing.assert_allclose(
    logp, losses.token_logp(logits_BxLxV, tokens_BxL), rtol=1e-5, atol=1e-6
  )
  ((_, (logp_c, ent_c)), grads_c) = out[32]
  np.testing.assert_allclose(logp_c, logp, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ent_c, ent, rtol=1e-5, atol=1e-6)
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
    grads_c,
    grads,
  )
  logits_bytes = 2 * 128 * config.vocab_size * 4
  assert temp[0] > logits_bytes, temp  # the whole logits (and their grad)
  assert temp[32] < 0.5 * temp[0], temp


def test_config_errors():
  with pytest.raises(ValueError, match="n_kv_heads"):
    small_config(n_heads=4, n_kv_heads=3)
  with pytest.raises(ValueError, match="head_dim"):
    small_config(head_dim=7)
  with pytest.raises(ValueError, match="dtype"):
    small_config(dtype="float16")
  with pytest.raises(ValueError, match="d_model"):
    small_config(d_model=0)
  with pytest.raises(ValueError, match="remat"):
    small_config(remat="layers")
  with pytest.raises(ValueError, match="logits_chunk"):
    small_config(logits_chunk=-1)
  with pytest.raises(KeyError, match="unknown model preset"):
    models.get_preset("gpt-5")


@pytest.mark.parametrize(
  "length,block", [(7, 64), (64, 64), (150, 64), (33, 8)]
)
def test_causal_attend_equals_masked_full_attention(length, block):
  # Blocked causal attention skips the upper-triangle blocks; values and
  # gradients must equal the full LxL form with a lower-triangular mask.
  b, h, k, dh = 2, 4, 2, 16
  kq, kk, kv, kg = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(kq, (b, length, h, dh))
  keys = jax.random.normal(kk, (b, k, length, dh))
  values = jax.random.normal(kv, (b, k, length, dh))
  probe = jax.random.normal(kg, (b, length, h, dh))
  causal = jnp.tril(jnp.ones((length, length), bool))[None]

  def full(q, keys, values):
    return jnp.sum(probe * attend(q, keys, values, causal))

  def blocked(q, keys, values):
    return jnp.sum(probe * causal_attend(q, keys, values, block=block))

  np.testing.assert_allclose(
    jax.jit(causal_attend, static_argnames="block")(
      q, keys, values, block=block
    ),
    jax.jit(attend)(q, keys, values, causal),
    atol=1e-6,
  )
  grads_full = jax.jit(jax.grad(full, argnums=(0, 1, 2)))(q, keys, values)
  grads_blocked = jax.jit(jax.grad(blocked, argnums=(0, 1, 2)))(q, keys, values)
  for g_full, g_blocked in zip(grads_full, grads_blocked, strict=True):
    np.testing.assert_allclose(g_blocked, g_full, atol=1e-5)
  with pytest.raises(ValueError, match="block"):
    causal_attend(q, keys, values, block=0)
