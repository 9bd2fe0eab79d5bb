"""The critic: value alignment, a copied trunk, its update, its config."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from agentic_rl import sharding as shd
from agentic_rl.models.value import ValueModel
from agentic_rl.train import critic as cr
from agentic_rl.train import state as st
from tests.train.conftest import MODEL_CONFIG, make_batch


@pytest.fixture(scope="module")
def policy():
  state, layout = st.create_train_state(MODEL_CONFIG, st.OptimizerConfig())
  return state, layout


def test_fresh_critic_copies_the_policy_and_predicts_zero(policy):
  state, layout = policy
  config = cr.CriticConfig(value_scale=10.0)
  critic, c_layout = cr.init_critic(state.model, config, layout.mesh)
  jax.tree.map(
    np.testing.assert_array_equal,
    jax.device_get(critic.model.params["trunk"]),
    jax.device_get(state.model.params),
  )
  tokens = make_batch(0).tokens_BxL
  assert not np.asarray(cr.compute_values(critic.model, tokens)).any()
  # Its own buffers: the policy's donation cannot invalidate them.
  leaf = jax.tree.leaves(critic.model.params["trunk"])[0]
  assert leaf.unsafe_buffer_pointer() != (
    jax.tree.leaves(state.model.params)[0].unsafe_buffer_pointer()
  )
  assert c_layout.mesh == layout.mesh


def test_values_are_aligned_like_log_probs(policy):
  state, _ = policy
  trunk = state.model.merge()
  model = ValueModel(trunk, scale=3.0)
  rng = np.random.default_rng(0)
  d = MODEL_CONFIG.d_model
  model.head_w[...] = jnp.asarray(rng.normal(size=d), jnp.float32)
  model.head_b[...] = jnp.asarray(0.25, jnp.float32)
  tokens = make_batch(0).tokens_BxL[:2, :12]
  value = np.asarray(model(tokens))
  h = np.asarray(trunk.final_norm(trunk.hidden(tokens)), np.float64)
  want = 3.0 * (h @ np.asarray(model.head_w[...]) + 0.25)
  assert (value[:, 0] == 0).all()
  np.testing.assert_allclose(value[:, 1:], want[:, :-1], rtol=1e-4, atol=1e-4)
  # value[i] is V(tokens[:i]): changing token 5 moves positions 6.. only.
  changed = np.asarray(model(tokens.at[:, 5].set((tokens[:, 5] + 1) % 64)))
  np.testing.assert_array_equal(changed[:, :6], value[:, :6])
  assert (np.abs(changed[:, 6:] - value[:, 6:]) > 1e-6).any()


def test_critic_update_fits_the_targets(policy):
  state, layout = policy
  config = cr.CriticConfig(
    optimizer=st.OptimizerConfig(learning_rate=3e-3), value_clip=0.0
  )
  critic, c_layout = cr.init_critic(state.model, config, layout.mesh)
  batch = make_batch(1)
  mask = batch.loss_mask_BxL
  target = jnp.where(mask > 0, jnp.arange(mask.shape[0])[:, None] % 3, 0.0)
  target = target.astype(jnp.float32)
  old = cr.compute_values(critic.model, batch.tokens_BxL)
  inputs = cr.CriticInputs(batch.tokens_BxL, target, mask, old)
  step = cr.make_critic_step(config, c_layout)
  first = None
  for _ in range(40):
    critic, metrics = step(critic, inputs)
    first = first or float(metrics["value_loss"])
  assert first == pytest.approx(0.5 * float(jnp.sum(target**2) / mask.sum()))
  values = cr.compute_values(critic.model, batch.tokens_BxL)
  assert float(metrics["value_loss"]) < 0.2 * first
  assert cr.explained_variance(values, target, mask) > 0.5
  # Trimming to a shorter length cuts every [B, L] leaf.
  short = inputs.trim(16)
  assert {x.shape for x in jax.tree.leaves(short)} == {(8, 16)}


def test_explained_variance_by_hand():
  target = jnp.asarray([[1.0, 2.0, 3.0, 9.0]])
  mask = jnp.asarray([[1.0, 1.0, 1.0, 0.0]])
  # Var(target) = 2/3; residuals (0, 1, 0) have variance 2/9: 1 - 1/3.
  value = jnp.asarray([[1.0, 1.0, 3.0, 0.0]])
  assert cr.explained_variance(value, target, mask) == pytest.approx(2 / 3)
  assert cr.explained_variance(target, target, mask) == pytest.approx(1.0)
  assert cr.explained_variance(value, jnp.ones((1, 4)), mask) == 0.0


def test_bad_critic_configs_are_named_errors():
  with pytest.raises(cr.CriticConfigError, match="unknown critic keys"):
    cr.CriticConfig.from_dict({"lr": 1e-3})
  with pytest.raises(cr.CriticConfigError, match="value_scale"):
    cr.CriticConfig.from_dict({"value_scale": 0.0})
  with pytest.raises(cr.CriticConfigError, match="value_clip"):
    cr.CriticConfig(value_clip=-0.1)
  # NaN passes every `<` bound, so each is refused by name.
  with pytest.raises(cr.CriticConfigError, match="value_clip"):
    cr.CriticConfig(value_clip=float("nan"))
  with pytest.raises(cr.CriticConfigError, match="value_scale"):
    cr.CriticConfig(value_scale=float("inf"))
  with pytest.raises(cr.CriticConfigError, match="epochs"):
    cr.CriticConfig(epochs=1.5)
  with pytest.raises(cr.CriticConfigError, match="warmup_steps"):
    cr.CriticConfig(warmup_steps=-1)
  cfg = cr.CriticConfig.from_dict(
    {"optimizer": {"learning_rate": 0.01}, "epochs": 2}
  )
  assert cfg.optimizer.learning_rate == 0.01 and cfg.epochs == 2


def test_critic_on_a_2x2x2_mesh_matches_one_device(policy):
  """The critic follows the policy's rules: trunk and head are split over
  fsdp/tensor, values and one update agree with the 1x1x1 run."""
  state, _ = policy
  config = cr.CriticConfig(optimizer=st.OptimizerConfig(learning_rate=1e-3))
  batch = make_batch(2)
  target = batch.loss_mask_BxL * 2.0
  out = {}
  for shape in ((1, 1, 1), (2, 2, 2)):
    mesh = shd.make_mesh(shape)
    policy_s, _ = st.create_train_state(
      MODEL_CONFIG, st.OptimizerConfig(), mesh=mesh
    )
    critic, layout = cr.init_critic(policy_s.model, config, mesh)
    old = cr.compute_values(critic.model, batch.tokens_BxL)
    inputs = cr.CriticInputs(batch.tokens_BxL, target, batch.loss_mask_BxL, old)
    critic, _ = cr.make_critic_step(config, layout)(critic, inputs)
    values = cr.compute_values(critic.model, batch.tokens_BxL)
    out[shape] = (np.asarray(values), critic)
  np.testing.assert_allclose(out[1, 1, 1][0], out[2, 2, 2][0], atol=2e-5)
  params = out[2, 2, 2][1].model.params
  assert params["head_w"].get_value().sharding.spec == PartitionSpec("fsdp")
  q = params["trunk"]["layers"][0]["attn"]["q_proj"]["kernel"].get_value()
  assert q.sharding.spec == PartitionSpec("fsdp", "tensor", None)
