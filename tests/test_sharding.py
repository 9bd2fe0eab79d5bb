"""Sharding on 8 simulated CPU devices: same numbers on every mesh shape."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from agentic_rl import models
from agentic_rl import sharding as shd
from agentic_rl.models import ModelConfig
from agentic_rl.sampling import Sampler

CONFIG = ModelConfig(
  vocab_size=64,
  d_model=32,
  n_layers=1,  # sharding, not depth, is under test: keeps compiles short
  n_heads=4,
  n_kv_heads=2,
  head_dim=8,
  mlp_dim=64,
  qk_norm=True,
  attn_bias=True,
  tie_embeddings=False,
  max_len=32,
)
MESHES = [(1, 1, 1), (8, 1, 1), (2, 4, 1), (2, 2, 2)]
BATCH = 8


def test_eight_simulated_devices():
  assert jax.device_count() == 8


def test_make_mesh_axes_and_errors():
  mesh = shd.make_mesh((2, 2, 2))
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
  with pytest.raises(ValueError, match="needs 16 devices"):
    shd.make_mesh((4, 4, 1))
  with pytest.raises(ValueError, match="3 positive ints"):
    shd.make_mesh((8, 1))


def test_single_process_mesh_is_its_own_block():
  mesh = shd.make_mesh((2, 1, 4))
  assert shd.local_mesh(mesh).devices.tolist() == mesh.devices.tolist()
  # one process: nothing to split, so no rollout is per-process
  assert not shd.is_process_local(mesh)
  assert shd.allgather_objects({"a": [1, 2]}) == [{"a": [1, 2]}]
  # one process's arrays are placed as given (tests/test_multiprocess.py
  # moves arrays spread over two processes)
  x = jax.device_put(
    np.arange(8.0), NamedSharding(mesh, PartitionSpec("tensor"))
  )
  (moved,) = jax.tree.leaves(shd.shard_state({"x": x}, mesh, ()))
  assert moved.sharding.is_equivalent_to(
    NamedSharding(mesh, PartitionSpec()), 1
  )


def test_process_parts_cut_like_array_split():
  # By hand: 10 items in 3 parts are 4, 3, 3; 2 in 3 are 1, 1, 0.
  assert [shd.process_part(10, p, 3) for p in range(3)] == [
    (0, 4),
    (4, 7),
    (7, 10),
  ]
  assert [shd.process_part(2, p, 3) for p in range(3)] == [
    (0, 1),
    (1, 2),
    (2, 2),
  ]
  for n in range(12):
    for count in range(1, 6):
      cut = np.array_split(np.arange(n), count)
      for p in range(count):
        lo, hi = shd.process_part(n, p, count)
        assert list(range(lo, hi)) == cut[p].tolist()
  with pytest.raises(ValueError, match="part 3 of 3"):
    shd.process_part(10, 3, 3)


def test_one_process_gathers_its_own_part_and_raises_as_is():
  assert shd.gather_parts(lambda: (1, 2), "a job") == [1, 2]

  def broken():
    raise KeyError("no such task")

  # Nothing to ship to other processes: the part's own exception.
  with pytest.raises(KeyError, match="no such task"):
    shd.gather_parts(broken, "a job")


def test_a_spec_without_the_axes_that_span_processes():
  spec = PartitionSpec(("data", "tensor"), None, "fsdp", ("fsdp", "data"))
  assert shd._without_axes(spec, {"data", "fsdp"}) == PartitionSpec(
    "tensor", None, None, None
  )
  assert shd._without_axes(spec, set()) == spec
  assert shd._without_axes(spec, {"tensor"}) == PartitionSpec(
    "data", None, "fsdp", ("fsdp", "data")
  )


def test_logical_to_spec_rules():
  mesh = shd.make_mesh((2, 2, 2))
  rules = shd.DEFAULT_TRAIN_RULES
  spec = shd.logical_to_spec(("embed", "heads", "head_dim"), rules, mesh)
  assert spec == PartitionSpec("fsdp", "tensor", None)
  # batch takes data and fsdp; embed then finds fsdp already used.
  spec = shd.logical_to_spec(("batch", "length", "embed"), rules, mesh)
  assert spec == PartitionSpec(("data", "fsdp"), None, None)
  # 3 kv heads cannot split over tensor=2: replicated, not an error.
  spec = shd.logical_to_spec(("embed", "kv_heads"), rules, mesh, (32, 3))
  assert spec == PartitionSpec("fsdp", None)
  # Size-1 mesh axes are dropped; unknown names replicate.
  mesh8 = shd.make_mesh((8, 1, 1))
  spec = shd.logical_to_spec(("batch", "mystery", "mlp"), rules, mesh8)
  assert spec == PartitionSpec("data", None, None)
  with pytest.raises(ValueError, match="mesh axis 'tensr'"):
    shd.logical_to_spec(("mlp",), (("mlp", "tensr"),), mesh8)


@pytest.fixture(scope="module")
def model():
  return models.build(CONFIG, 0)


def _logits(graphdef, state, tokens_BxL, mesh, rules):
  with shd.use_rules(mesh, rules):
    return nnx.merge(graphdef, state)(tokens_BxL)


logits_jit = jax.jit(_logits, static_argnums=(0, 3, 4))


@pytest.fixture(scope="module")
def tokens():
  return jax.random.randint(jax.random.key(0), (BATCH, 16), 0, 64)


@pytest.fixture(scope="module")
def reference_logits(model, tokens):
  graphdef, state = nnx.split(model)
  return np.asarray(logits_jit(graphdef, state, tokens, None, ()))


@pytest.mark.parametrize("shape", MESHES)
def test_forward_same_on_every_mesh(model, tokens, reference_logits, shape):
  mesh = shd.make_mesh(shape)
  rules = shd.DEFAULT_TRAIN_RULES
  graphdef, state = nnx.split(model)
  state = shd.shard_state(state, mesh, rules)
  batch = shd.logical_sharding(("batch", "length"), rules, mesh, tokens.shape)
  out = logits_jit(graphdef, state, jax.device_put(tokens, batch), mesh, rules)
  np.testing.assert_allclose(out, reference_logits, atol=1e-5, rtol=1e-5)
  if shape != (1, 1, 1):
    assert len(out.sharding.device_set) == 8


def test_parameters_are_really_split(model):
  mesh = shd.make_mesh((2, 2, 2))
  state = shd.shard_state(nnx.state(model), mesh, shd.DEFAULT_TRAIN_RULES)
  flat = dict(nnx.to_flat_state(state))
  q = flat[("layers", 0, "attn", "q_proj", "kernel")].get_value()
  assert q.sharding.spec == PartitionSpec("fsdp", "tensor", None)
  assert q.addressable_shards[0].data.shape == (16, 2, 8)
  head = flat[("lm_head", "kernel")].get_value()
  assert head.sharding.spec == PartitionSpec("fsdp", "tensor")
  assert head.addressable_shards[0].data.shape == (16, 32)
  norm = flat[("final_norm", "scale")].get_value()
  assert norm.sharding.spec == PartitionSpec("fsdp")
  # Sampling rules keep weights whole over data/fsdp, split over tensor.
  state = shd.shard_state(nnx.state(model), mesh, shd.DEFAULT_SAMPLE_RULES)
  q = dict(nnx.to_flat_state(state))[("layers", 0, "attn", "q_proj", "kernel")]
  assert q.get_value().sharding.spec == PartitionSpec(None, "tensor", None)


def _loss_grads(graphdef, state, tokens_BxL, mesh, rules):
  def loss(state):
    with shd.use_rules(mesh, rules):
      logp_BxL, ent_BxL = nnx.merge(graphdef, state).token_logp(
        tokens_BxL, with_entropy=True
      )
    return jnp.sum(jnp.sin(3.0 * logp_BxL)) + jnp.sum(ent_BxL)

  return jax.grad(loss)(state)


grads_jit = jax.jit(_loss_grads, static_argnums=(0, 3, 4))


def test_remat_and_logits_chunks_gradients_same_on_a_mesh(tokens):
  # The scanned, rematerialised blocks (`ModelConfig.remat`) and the
  # chunked vocabulary projection (`logits_chunk`) on a 2x2x2 mesh,
  # parameters split by the training rules, give the gradients of the
  # plain model on one device.
  config = CONFIG.replace(n_layers=2)
  graphdef, state = nnx.split(models.build(config, 0))
  want = grads_jit(graphdef, state, tokens, None, ())
  mesh, rules = shd.make_mesh((2, 2, 2)), shd.DEFAULT_TRAIN_RULES
  config = config.replace(remat="full", logits_chunk=tokens.shape[1] // 3)
  graphdef, state = nnx.split(models.build(config, 0))
  state = shd.shard_state(state, mesh, rules)
  batch = shd.logical_sharding(("batch", "length"), rules, mesh, tokens.shape)
  got = grads_jit(graphdef, state, jax.device_put(tokens, batch), mesh, rules)
  # Sums reordered over devices: tolerance relative to each leaf's scale
  # (the mesh alone, without remat or chunks, moves a few entries by
  # ~6e-6 of it here; a wrong chunk boundary would move them by O(1)).
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(
      a, b, rtol=1e-4, atol=2e-5 * np.abs(b).max()
    ),
    got,
    want,
  )


def test_remat_keeps_stacked_weights_and_gradients_split(tokens):
  # `scan_blocks` stacks the layers' parameters for its scan. On an FSDP
  # mesh that stack, and the gradients the backward scan accumulates into
  # it, must stay split like the parameters: no device may hold the
  # whole [n_layers, ...] stack of a split weight (each layer's weight is
  # gathered inside the loop, one at a time).
  config = CONFIG.replace(n_layers=3, remat="full")
  mesh, rules = shd.make_mesh((1, 8, 1)), shd.DEFAULT_TRAIN_RULES
  graphdef, state = nnx.split(models.build(config, 0))
  state = shd.shard_state(state, mesh, rules)
  batch = shd.logical_sharding(("batch", "length"), rules, mesh, tokens.shape)
  hlo = (
    grads_jit.lower(graphdef, state, jax.device_put(tokens, batch), mesh, rules)
    .compile()
    .as_text()
  )
  checked = 0
  for path, leaf in nnx.to_flat_state(state):
    if path[0] != "layers" or path[1] != 0:
      continue
    value = leaf.get_value()
    local = value.addressable_shards[0].data.shape
    if local == value.shape:
      continue  # not split: nothing to keep split
    whole = f"f32[{','.join(map(str, (3, *value.shape)))}]"
    split = f"f32[{','.join(map(str, (3, *local)))}]"
    assert whole not in hlo, (path, whole)
    assert split in hlo, (path, split)
    checked += 1
  assert checked >= 7  # q, k, v, o, gate, up, down kernels at least


def test_model_sharding_in_place(model):
  mesh = shd.make_mesh((1, 1, 8))
  sharded = models.build(CONFIG, 0)
  shd.shard_model(sharded, mesh, shd.DEFAULT_SAMPLE_RULES)
  up = sharded.layers[0].mlp.up_proj.kernel.get_value()
  assert up.sharding == NamedSharding(mesh, PartitionSpec(None, "tensor"))


def _episode(sampler):
  rng = np.random.default_rng(0)
  rows = list(range(BATCH))
  sampler.prefill(rows, [rng.integers(0, 64, 3 + r).tolist() for r in rows])
  # Greedy and sampled rows mixed: one compiled decode covers both.
  temperature = [0.0, 1.0] * (BATCH // 2)
  first = sampler.decode(jax.random.key(1), budget=4, temperature=temperature)
  sampler.extend(rows, [rng.integers(0, 64, 1 + r % 3).tolist() for r in rows])
  second = sampler.decode(
    jax.random.key(2),
    budget=[3, 4] * (BATCH // 2),
    stop_ids=[5],
    temperature=temperature[::-1],
  )
  return [
    (np.concatenate(a.tokens), np.concatenate(a.logprobs))
    for a in (first, second)
  ]


@pytest.fixture(scope="module")
def reference_episode(model):
  return _episode(Sampler(model, num_slots=BATCH, max_len=32))


@pytest.mark.parametrize("shape", MESHES)
def test_sampler_same_on_every_mesh(model, reference_episode, shape):
  mesh = shd.make_mesh(shape)
  sampler = Sampler(model, num_slots=BATCH, max_len=32, mesh=mesh)
  got = _episode(sampler)
  for (tokens, logp), (ref_tokens, ref_logp) in zip(
    got, reference_episode, strict=True
  ):
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(logp, ref_logp, atol=1e-5)
  k = sampler.state.cache.k[0][0]
  if shape[0] * shape[1] > 1:
    assert k.addressable_shards[0].data.shape[0] < BATCH
  if shape[2] > 1:
    assert k.addressable_shards[0].data.shape[1] == 1  # kv heads split


def test_constrain_is_identity_without_mesh():
  x = jnp.ones((4, 3))
  assert shd.constrain(x, ("batch", "embed")) is x


def test_sampler_with_kernels_out_first_on_a_mesh(model, reference_episode):
  # The transposed kernels keep their logical axes (permuted with them), so
  # the sampling rules still split heads and MLP over `tensor`.
  mesh = shd.make_mesh((2, 2, 2))
  sampler = Sampler(
    model, num_slots=BATCH, max_len=32, mesh=mesh, kernels_out_first=True
  )
  flat = dict(nnx.to_flat_state(sampler.params))
  q = flat[("layers", 0, "attn", "q_proj", "kernel")].get_value()
  assert q.shape == (4, 8, 32)  # heads, head_dim, embed
  assert q.sharding.spec == PartitionSpec("tensor", None, None)
  down = flat[("layers", 0, "mlp", "down_proj", "kernel")].get_value()
  assert down.shape == (32, 64)  # embed, mlp
  assert down.sharding.spec == PartitionSpec(None, "tensor")
  got = _episode(sampler)
  for (tokens, logp), (ref_tokens, ref_logp) in zip(
    got, reference_episode, strict=True
  ):
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(logp, ref_logp, atol=1e-5)
