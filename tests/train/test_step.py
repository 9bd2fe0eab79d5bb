"""Train state, optimizer schedule, the jitted update and the host loop."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.models import transformer
from agentic_rl.train import state as st
from agentic_rl.train import step as sp
from tests.train.conftest import (
  MODEL_CONFIG,
  OPT_CONFIG,
  STEP_CONFIG,
  fresh_state,
  make_batch,
)


def _eq(a, b) -> bool:
  return all(
    jax.tree.leaves(
      jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a, b)
    )
  )


def _close(a, b, rtol=1e-5, atol=1e-6):
  jax.tree.map(
    lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b
  )


# ---------------------------------------------------------------------------
# Optimizer config and schedule.


def test_schedule_goldens():
  const = st.make_schedule(
    st.OptimizerConfig(learning_rate=1.0, warmup_steps=4)
  )
  np.testing.assert_allclose(
    [const(s) for s in (0, 2, 4, 100)], [0.0, 0.5, 1.0, 1.0], atol=1e-7
  )
  cos = st.make_schedule(
    st.OptimizerConfig(
      learning_rate=1.0,
      schedule="cosine",
      warmup_steps=2,
      total_steps=12,
      end_lr_ratio=0.1,
    )
  )
  # Halfway through the decay: 0.1 + 0.9 * (1 + cos(pi / 2)) / 2 = 0.55.
  np.testing.assert_allclose(
    [cos(0), cos(1), cos(2), cos(7), cos(12), cos(50)],
    [0.0, 0.5, 1.0, 0.55, 0.1, 0.1],
    atol=1e-6,
  )
  assert float(st.make_schedule(st.OptimizerConfig(learning_rate=0.3))(0)) == (
    pytest.approx(0.3)
  )


@pytest.mark.parametrize(
  "kwargs,match",
  [
    ({"schedule": "linear"}, "schedule"),
    ({"schedule": "cosine", "total_steps": 0}, "total_steps"),
    ({"max_grad_norm": 0.0}, "max_grad_norm"),
    ({"warmup_steps": -1}, "warmup"),
    # NaN passes every `x < 0` test: each is refused by name.
    ({"learning_rate": float("nan")}, "learning_rate"),
    ({"learning_rate": float("inf")}, "learning_rate"),
    ({"learning_rate": -1e-4}, "learning_rate"),
    ({"max_grad_norm": float("nan")}, "max_grad_norm"),
    ({"weight_decay": float("nan")}, "weight_decay"),
    ({"b2": 1.0}, "b1 and b2"),
    ({"b1": float("nan")}, "b1 and b2"),
    ({"eps": 0.0}, "eps"),
  ],
)
def test_optimizer_config_errors(kwargs, match):
  with pytest.raises(st.StateConfigError, match=match):
    st.OptimizerConfig(**kwargs)


def test_optimizer_config_from_dict():
  cfg = st.OptimizerConfig.from_dict({"learning_rate": 2e-5, "b2": 0.99})
  assert cfg.learning_rate == 2e-5 and cfg.b2 == 0.99
  with pytest.raises(st.StateConfigError, match="lr"):
    st.OptimizerConfig.from_dict({"lr": 1.0})


def test_weight_decay_skips_vectors():
  params = {"w": jnp.ones((2, 2)), "scale": jnp.ones((2,))}
  tx = st.make_optimizer(
    st.OptimizerConfig(learning_rate=0.1, weight_decay=0.5, max_grad_norm=None)
  )
  zeros = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zeros, tx.init(params), params)
  # Zero gradient: only decay moves weights, by -lr * wd * w = -0.05.
  np.testing.assert_allclose(updates["w"], -0.05 * np.ones((2, 2)), rtol=1e-6)
  np.testing.assert_array_equal(updates["scale"], np.zeros(2))


# ---------------------------------------------------------------------------
# State creation.


def test_create_train_state(rl_setup):
  abstract = st.abstract_train_state(MODEL_CONFIG, OPT_CONFIG, seed=3)
  state = fresh_state(seed=3)
  assert jax.tree.structure(abstract) == jax.tree.structure(state)
  shapes = jax.tree.map(lambda x: (x.shape, x.dtype), state)
  assert shapes == jax.tree.map(lambda x: (x.shape, x.dtype), abstract)
  assert int(state.step) == 0
  assert st.count_params(state.model) == MODEL_CONFIG.num_params()
  # Every leaf is born in its layout sharding.
  for x, s in zip(
    jax.tree.leaves(state), jax.tree.leaves(rl_setup.layout.state), strict=True
  ):
    assert x.sharding.is_equivalent_to(s, x.ndim)
  assert _eq(state.model.params, fresh_state(seed=3).model.params)
  assert not _eq(state.model.params, fresh_state(seed=4).model.params)


# ---------------------------------------------------------------------------
# The RL step and the host loop.


def test_compute_logp_parity():
  state = fresh_state()
  tokens = make_batch(0, 4).tokens_BxL
  want = jax.jit(lambda m, t: losses.token_logp(m.merge()(t), t))(
    state.model, tokens
  )
  np.testing.assert_allclose(sp.compute_logp(state.model, tokens), want, 1e-6)
  chunked = sp.compute_logp(state.model, tokens, num_chunks=2)
  np.testing.assert_allclose(chunked, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(sp.BatchShapeError):
    sp.compute_logp(state.model, tokens, num_chunks=3)


def test_run_epochs_updates_and_metrics(rl_setup):
  inputs = rl_setup.inputs
  seen = []
  state, hist = sp.run_epochs(
    rl_setup.step_fn,
    fresh_state(),
    inputs,
    rl_setup.layout,
    minibatch_size=4,
    num_epochs=3,
    seed=0,
    on_metrics=seen.append,
  )
  assert len(hist) == 6 and seen == hist
  assert [h["step"] for h in hist] == list(range(6))
  assert int(state.step) == 6
  # Update 0: the policy is still the behaviour (and reference) policy.
  first = hist[0]
  assert first["ratio_min"] == pytest.approx(1.0, abs=1e-5)
  assert first["ratio_max"] == pytest.approx(1.0, abs=1e-5)
  assert first["clip_frac_low"] == 0.0 and first["clip_frac_high"] == 0.0
  assert first["kl"] == pytest.approx(0.0, abs=1e-6)
  assert first["learning_rate"] == 0.0  # warmup starts at 0
  assert hist[-1]["learning_rate"] == pytest.approx(OPT_CONFIG.learning_rate)
  assert hist[-1]["approx_kl"] > 0.0 and hist[-1]["kl"] > 0.0
  # The updates raised the surrogate objective on the rollout batch.
  cfg = losses.PolicyLossConfig(agg="seq-mean-token-mean")
  plain = sp.PolicyInputs(batch=inputs.batch, adv_BxL=inputs.adv_BxL)
  surrogate = jax.jit(lambda m: sp.policy_loss_fn(m.merge(), plain, cfg)[0])
  before, after = surrogate(fresh_state().model), surrogate(state.model)
  assert float(after) < float(before) - 0.05


def test_logged_learning_rate_follows_the_optimizer_count(rl_setup):
  """A fresh optimizer inside a run (RL after SFT) restarts its warmup while
  the train step keeps counting: the logged rate is the one applied."""
  state = fresh_state().replace(step=jnp.asarray(100, jnp.int32))
  state, first = rl_setup.step_fn(state, rl_setup.inputs)
  state, second = rl_setup.step_fn(state, rl_setup.inputs)
  assert int(first["step"]) == 100 and int(second["step"]) == 101
  assert float(first["learning_rate"]) == 0.0  # warmup restarted
  assert float(second["learning_rate"]) == pytest.approx(
    OPT_CONFIG.learning_rate
  )
  cosine = st.OptimizerConfig(
    learning_rate=1.0, schedule="cosine", warmup_steps=2, total_steps=10
  )
  opt_state = st.make_optimizer(cosine).init({"w": jnp.zeros((2, 2))})
  assert int(sp.schedule_count(opt_state, jnp.asarray(7))) == 0
  assert int(sp.schedule_count((), jnp.asarray(7))) == 7


def test_a_step_is_jitted_once_per_config_and_layout(rl_setup):
  """Rebuilding the same step (a second run in one process) reuses the
  compiled function; another config, another layout or a closure do not."""
  layout = rl_setup.layout
  first = sp.make_train_step(STEP_CONFIG, layout)
  again = sp.make_train_step(STEP_CONFIG, layout)
  assert again.jitted is first.jitted
  _, other_layout = st.create_train_state(MODEL_CONFIG, OPT_CONFIG, seed=3)
  assert sp.make_train_step(STEP_CONFIG, other_layout).jitted is again.jitted
  cfg = dataclasses.replace(STEP_CONFIG, num_microbatches=2)
  assert sp.make_train_step(cfg, layout).jitted is not again.jitted
  # The causal attention's query block, read when the step is traced, is
  # part of what the step is (`bench.py train` times two of them).
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(transformer, "CAUSAL_BLOCK", 2 * transformer.CAUSAL_BLOCK)
    assert sp.make_train_step(STEP_CONFIG, layout).jitted is not again.jitted
  assert sp.make_train_step(STEP_CONFIG, layout).jitted is again.jitted
  if len(jax.devices()) >= 2:
    _, wide = st.create_train_state(
      MODEL_CONFIG, OPT_CONFIG, mesh=shd.make_mesh((2, 1, 1))
    )
    assert sp.make_train_step(STEP_CONFIG, wide).jitted is not again.jitted

  def closure(state, inputs):
    return rl_setup.step_fn(state, inputs)

  assert (
    sp.jit_step(closure, layout).jitted
    is not sp.jit_step(closure, layout).jitted
  )
  # Bounded, least recently used out first.
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(sp, "_JITTED_MAX", 2)
    configs = [
      dataclasses.replace(STEP_CONFIG, num_microbatches=n) for n in (3, 4, 5)
    ]
    a, b = (sp.make_train_step(c, layout).jitted for c in configs[:2])
    assert sp.make_train_step(configs[0], layout).jitted is a  # a used last
    sp.make_train_step(configs[2], layout)  # evicts b
    assert sp.make_train_step(configs[0], layout).jitted is a
    assert sp.make_train_step(configs[1], layout).jitted is not b
  # The shared function still computes this config's update.
  _, got = again(fresh_state(), rl_setup.inputs)
  _, want = rl_setup.step_fn(fresh_state(), rl_setup.inputs)
  _close(jax.device_get(got), jax.device_get(want), rtol=0, atol=0)


TURN_CONFIG = dataclasses.replace(
  STEP_CONFIG, loss=dataclasses.replace(STEP_CONFIG.loss, ratio_level="turn")
)


def _off_policy(inputs):
  """(delta_BxL, inputs whose behaviour log-probs are ref - delta)."""
  delta = np.random.default_rng(0).normal(0.0, 0.2, inputs.adv_BxL.shape)
  old = np.asarray(inputs.ref_logp_BxL) - delta
  return delta, dataclasses.replace(inputs, old_logp_BxL=jnp.asarray(old))


def test_turn_level_ratio_reads_the_batch_turns(rl_setup):
  turn_step = sp.make_train_step(TURN_CONFIG, rl_setup.layout)
  inputs = rl_setup.inputs
  # On-policy every ratio is 1: the same loss and gradient as per token.
  _, token = rl_setup.step_fn(fresh_state(), inputs)
  _, turn = turn_step(fresh_state(), inputs)
  for k in ("loss", "grad_norm", "kl", "entropy"):
    np.testing.assert_allclose(turn[k], token[k], rtol=1e-5, atol=1e-7)
  # Off-policy by a known log-ratio per token: the ratio of every trained
  # token is exp(mean log-ratio over its turn's trained tokens).
  batch = inputs.batch
  mask = np.asarray(batch.loss_mask_BxL) > 0
  turn_id = np.asarray(batch.turn_id_BxL)
  delta, off = _off_policy(inputs)
  _, m = turn_step(fresh_state(), off)
  ratios = []
  for b in range(mask.shape[0]):
    for t in np.unique(turn_id[b][mask[b]]):
      on = mask[b] & (turn_id[b] == t)
      ratios += [np.exp(delta[b][on].mean())] * int(on.sum())
  np.testing.assert_allclose(m["ratio_max"], max(ratios), rtol=1e-4)
  np.testing.assert_allclose(m["ratio_mean"], np.mean(ratios), rtol=1e-4)


@pytest.mark.slow
def test_turn_level_ratio_same_on_a_mesh(rl_setup):
  # The per-turn means (a scatter over rows) on a 2x2x2 mesh: the numbers
  # of one device. (Slow: an 8-device train step compiles for 15 s.)
  _, off = _off_policy(rl_setup.inputs)
  _, m = sp.make_train_step(TURN_CONFIG, rl_setup.layout)(fresh_state(), off)
  state, layout = st.create_train_state(
    MODEL_CONFIG, OPT_CONFIG, mesh=shd.make_mesh((2, 2, 2))
  )
  step8 = sp.make_train_step(TURN_CONFIG, layout)
  _, m8 = step8(state, jax.device_put(off, layout.data))
  _close(jax.device_get(m8), jax.device_get(m), rtol=1e-4, atol=1e-6)


def test_grad_clipped_says_whether_max_grad_norm_cut_the_gradient(rl_setup):
  """At the behaviour policy (ratio 1, so no ratio clipping; the KL term's
  gradient 0) the gradient is linear in the advantages: scaled to norm 2
  and 0.5, the shared step's max_grad_norm 1.0 cuts the first only. With
  max_grad_norm unset nothing is cut."""
  _, m = rl_setup.step_fn(fresh_state(), rl_setup.inputs)
  norm = float(m["grad_norm"])
  assert norm > 0 and OPT_CONFIG.max_grad_norm == 1.0
  assert float(m["grad_clipped"]) == float(norm > 1.0)
  for target, want in ((2.0, 1.0), (0.5, 0.0)):
    scaled = rl_setup.inputs.replace(
      adv_BxL=rl_setup.inputs.adv_BxL * (target / norm)
    )
    _, m = rl_setup.step_fn(fresh_state(), scaled)
    assert float(m["grad_norm"]) == pytest.approx(target, rel=1e-4)
    assert float(m["grad_clipped"]) == want
  opt = dataclasses.replace(OPT_CONFIG, max_grad_norm=None)
  cfg = dataclasses.replace(STEP_CONFIG, optimizer=opt)
  state, layout = st.create_train_state(MODEL_CONFIG, opt, seed=0)
  _, m = sp.make_train_step(cfg, layout)(state, rl_setup.inputs)
  assert float(m["grad_norm"]) == pytest.approx(norm, rel=1e-6)
  assert float(m["grad_clipped"]) == 0.0


def test_gradient_accumulation_matches_full_batch(rl_setup):
  """seq-mean-token-mean, with a row without trained tokens in one of the
  two microbatches: they weigh by their rows with tokens (3 and 4)."""
  # With equal gradients at both steps, Adam's step is lr * g / (|g| + eps):
  # with the default eps about lr * sign(g), which float noise flips where
  # g is near zero. A large eps makes the step a smooth function of the
  # gradient (slope <= lr / eps), so the params compare the gradients.
  opt = dataclasses.replace(OPT_CONFIG, eps=1e-2)
  cfg1 = dataclasses.replace(STEP_CONFIG, optimizer=opt)
  cfg2 = dataclasses.replace(cfg1, num_microbatches=2)
  inputs = _uneven_mask(rl_setup.inputs)
  p0 = st.create_train_state(MODEL_CONFIG, opt, seed=0)[0].model.params
  outs = []
  for cfg in (cfg1, cfg2):
    state = st.create_train_state(MODEL_CONFIG, opt, seed=0)[0]
    step_fn = sp.make_train_step(cfg, rl_setup.layout)
    state, _ = step_fn(state, inputs)  # warmup: lr 0, moments only
    state, metrics = step_fn(state, inputs)
    outs.append(jax.device_get((state.model.params, metrics)))
  (p1, m1), (p2, m2) = outs
  d1, d2 = (jax.tree.map(lambda a, b: a - b, p, p0) for p in (p1, p2))
  _close(d1, d2, rtol=1e-3, atol=1e-7)  # atol: float32 ulps of the params
  for k in ("loss", "grad_norm", "update_norm", "entropy", "kl"):
    np.testing.assert_allclose(m1[k], m2[k], rtol=1e-4, atol=1e-7)
  assert not _eq(p1, fresh_state().model.params)
  bad = sp.make_train_step(
    dataclasses.replace(STEP_CONFIG, num_microbatches=3), rl_setup.layout
  )
  with pytest.raises(sp.BatchShapeError, match="divisible"):
    bad(fresh_state(), rl_setup.inputs)


def test_non_finite_loss_raises_with_step(rl_setup):
  good = rl_setup.inputs
  on = good.batch.loss_mask_BxL > 0
  bad = good.replace(adv_BxL=jnp.where(on, jnp.nan, good.adv_BxL))
  with pytest.raises(sp.NonFiniteLossError, match="step 2") as info:
    sp.run_steps(rl_setup.step_fn, fresh_state(), [good, good, bad, good])
  err = info.value
  assert err.step == 2
  assert np.isnan(err.metrics["loss"]) and err.metrics["finite"] == 0.0
  # The bad update was skipped; the one dispatched after it was applied.
  assert int(err.state.step) == 3
  leaves = jax.tree.leaves(err.state.model.params)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)


def test_minibatch_order():
  order = list(sp.minibatch_order(10, 4, 2, seed=1))
  assert len(order) == 4 and all(len(o) == 4 for o in order)
  assert len(set(order[0]) | set(order[1])) == 8
  again = list(sp.minibatch_order(10, 4, 2, seed=1))
  assert all(np.array_equal(a, b) for a, b in zip(order, again, strict=True))
  with pytest.raises(sp.BatchShapeError):
    list(sp.minibatch_order(10, 11, 1, seed=0))


def test_split_microbatches_strided():
  x = jnp.arange(8)
  np.testing.assert_array_equal(
    sp.split_microbatches(x, 2), [[0, 2, 4, 6], [1, 3, 5, 7]]
  )


def test_state_born_sharded_on_8_devices():
  if len(jax.devices()) < 8:
    pytest.skip("needs 8 (simulated) devices")
  mesh = shd.make_mesh((2, 2, 2))
  state, layout = st.create_train_state(MODEL_CONFIG, OPT_CONFIG, mesh=mesh)
  up = state.model.params["layers"][0]["mlp"]["up_proj"]["kernel"].value
  # (embed, mlp) -> (fsdp, tensor): each device holds a quarter.
  assert up.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
  assert up.addressable_shards[0].data.shape == (64, 192)
  mu = state.opt_state[1][0].mu["layers"][0]["mlp"]["up_proj"]["kernel"]
  assert mu.value.sharding == up.sharding  # Adam moments follow the params
  assert layout.data_parallel_size == 4
  # Same seed, same numbers, whatever the mesh.
  assert _eq(
    jax.device_get(state.model.params),
    jax.device_get(fresh_state().model.params),
  )


@pytest.mark.slow
def test_sharded_step_matches_single_device(rl_setup):
  """Same numbers on a 2x2x2 mesh of simulated devices as on one device."""
  if len(jax.devices()) < 8:
    pytest.skip("needs 8 (simulated) devices")
  # Adam with eps 1: each update is about lr * g / (|g| + 1), linear in the
  # gradient. With the usual eps 1e-8 a near-zero gradient entry moves by up
  # to lr whatever its size, so the devices' reordered sums could flip it.
  opt = dataclasses.replace(OPT_CONFIG, eps=1.0)
  step_config = dataclasses.replace(STEP_CONFIG, optimizer=opt)
  results = []
  for shape in ((1, 1, 1), (2, 2, 2)):
    mesh = shd.make_mesh(shape)
    state, layout = st.create_train_state(MODEL_CONFIG, opt, mesh=mesh)
    step_fn = sp.make_train_step(step_config, layout)
    inputs = jax.device_put(rl_setup.inputs, layout.data)
    for _ in range(2):
      state, metrics = step_fn(state, inputs)
    results.append(jax.device_get((state.model.params, metrics)))
  (p1, m1), (p8, m8) = results
  _close(m1, m8, rtol=1e-4, atol=1e-6)
  # lr 3e-3 times the gradients' reduction-order noise is ~1e-9, below
  # float32's spacing (1.2e-7 at the norm scales' 1.0; 1.5e-8 seen here);
  # a wrong sharded gradient would move entries by ~lr * |g|, 1e-5 and more.
  _close(p1, p8, rtol=0, atol=5e-7)
  p0 = jax.device_get(st.create_train_state(MODEL_CONFIG, opt)[0].model.params)
  moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), p1, p0)
  assert max(jax.tree.leaves(moved)) > 1e-5


def _uneven_mask(inputs):
  """Row 1 (microbatch 1 of 2, strided) without trained tokens and row 0
  with half of them: the microbatches' token and row counts differ."""
  mask_BxL = inputs.batch.loss_mask_BxL
  mask_BxL = mask_BxL.at[1].set(0)
  mask_BxL = mask_BxL.at[0, mask_BxL.shape[1] // 2 :].set(0)
  counts = np.asarray(mask_BxL).sum(-1)
  assert counts[0::2].sum() != counts[1::2].sum()
  return inputs.replace(batch=inputs.batch.replace(loss_mask_BxL=mask_BxL))


def test_token_mean_accumulation_weighs_microbatches_by_tokens(rl_setup):
  """Two microbatches with unequal token counts give the update of one pass
  (equal weights, as before, gave grad norms 1.5 against 1.11 on such a
  batch). The row-mean modes: `test_gradient_accumulation_...`."""
  inputs = _uneven_mask(rl_setup.inputs)
  loss = dataclasses.replace(STEP_CONFIG.loss, agg="token-mean")
  got = []
  for m in (1, 2):
    cfg = dataclasses.replace(STEP_CONFIG, loss=loss, num_microbatches=m)
    _, metrics = sp.make_train_step(cfg, rl_setup.layout)(fresh_state(), inputs)
    got.append(jax.device_get(metrics))
  assert sp.LOSS_WEIGHT not in got[0] and sp.LOSS_WEIGHT not in got[1]
  for k in ("loss", "grad_norm", "pg_loss", "entropy", "kl"):
    np.testing.assert_allclose(got[0][k], got[1][k], rtol=1e-4, atol=1e-7)


def test_agg_weight_counts_what_the_mean_divides_by():
  mask_BxL = jnp.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
  assert float(sp.agg_weight(mask_BxL, "token-mean")) == 3.0
  for mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
    assert float(sp.agg_weight(mask_BxL, mode)) == 2.0


def test_sampling_temperature_tempers_the_trained_log_probs():
  """The RL loss sees softmax(logits / T), the distribution a sampler at T
  draws from, on the whole and the chunked vocabulary projection."""
  state = fresh_state()
  tokens = make_batch(0, 4).tokens_BxL
  logits = jax.jit(lambda m, t: m.merge()(t))(state.model, tokens)
  want = losses.token_logp(logits / 0.7, tokens)
  got = sp.compute_logp(state.model, tokens, temperature=0.7)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  model = state.model.merge()
  model.config = dataclasses.replace(model.config, logits_chunk=8)
  chunked, entropy = jax.jit(
    lambda t: model.token_logp(t, with_entropy=True, temperature=0.7)
  )(tokens)
  np.testing.assert_allclose(chunked, want, rtol=1e-5, atol=1e-6)
  _, want_entropy = losses.token_logp_and_entropy(logits / 0.7, tokens)
  np.testing.assert_allclose(entropy, want_entropy, rtol=1e-5, atol=1e-5)
  assert not np.allclose(want, losses.token_logp(logits, tokens), atol=1e-3)
  with pytest.raises(losses.LossConfigError, match="sampling_temperature"):
    sp.StepConfig(sampling_temperature=0.0)


def test_epochs_for_steps_covers_every_step():
  # 10 rows in minibatches of 4: two a epoch, so 5 steps need 3 epochs
  # (ceil(5 * 4 / 10) = 2 epochs gave 4).
  assert sp.epochs_for_steps(5, 10, 4) == 3
  assert sp.epochs_for_steps(150, 63, 32) == 150
  assert sp.epochs_for_steps(8, 8, 4) == 4
  for steps, rows, size in ((5, 10, 4), (150, 63, 32)):
    epochs = sp.epochs_for_steps(steps, rows, size)
    got = len(list(sp.minibatch_order(rows, size, epochs, seed=0)))
    assert got >= steps
  with pytest.raises(sp.BatchShapeError, match="exceeds"):
    sp.epochs_for_steps(3, 3, 4)
