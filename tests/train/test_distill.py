"""Distillation into a smaller student through the shared update step."""

import dataclasses

import jax
import numpy as np
import pytest

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.train import distill
from agentic_rl.train import state as st
from agentic_rl.train import step as sp
from tests.train.conftest import (
  MODEL_CONFIG,
  OPT_CONFIG,
  make_batch,
  policy_inputs,
)

KD_STEP = dataclasses.replace(
  sp.StepConfig(optimizer=OPT_CONFIG),
  loss=losses.PolicyLossConfig(agg="token-mean"),
)
# A quarter of the tiny preset's width, half its depth; same vocabulary.
STUDENT_CONFIG = MODEL_CONFIG.replace(
  d_model=64, n_layers=2, head_dim=16, mlp_dim=192
)


def teacher_state(mesh=None) -> tuple[st.TrainState, st.Layout]:
  return st.create_train_state(MODEL_CONFIG, OPT_CONFIG, seed=7, mesh=mesh)


def student_state(mesh=None) -> tuple[st.TrainState, st.Layout]:
  return st.create_train_state(STUDENT_CONFIG, OPT_CONFIG, seed=0, mesh=mesh)


def step_against(teacher, t_layout, layout, config=None):
  config = config or distill.DistillConfig()
  return distill.make_distill_step(
    KD_STEP, config, layout, teacher.model, t_layout.state.model
  )


def make_step(config=None, mesh=None):
  teacher, t_layout = teacher_state(mesh)
  student, layout = student_state(mesh)
  return step_against(teacher, t_layout, layout, config), student, teacher


def numpy_kl(p_model, q_model, tokens_BxL) -> np.ndarray:
  """KL(p || q) of two models' next-token distributions, in float64 numpy,
  aligned like `losses.token_logp` (entry t from the logits at t - 1)."""

  def probs(model):
    logits = jax.jit(lambda m, x: m.merge()(x))(model, tokens_BxL)
    return np.asarray(jax.nn.softmax(logits[:, :-1], -1), np.float64)

  p, q = probs(p_model), probs(q_model)
  return np.pad((p * (np.log(p) - np.log(q))).sum(-1), ((0, 0), (1, 0)))


def assert_unchanged(params_before, teacher) -> None:
  after = jax.device_get(teacher.model.params)
  for a, b in zip(
    jax.tree.leaves(params_before), jax.tree.leaves(after), strict=True
  ):
    np.testing.assert_array_equal(a, b)


def test_loss_is_the_masked_divergence_from_the_teacher():
  step, student, teacher = make_step()
  batch = make_batch(0, 8)
  # Reference: forward KL(teacher || student) in numpy.
  kl = numpy_kl(teacher.model, student.model, batch.tokens_BxL)
  mask = np.asarray(batch.loss_mask_BxL) > 0
  _, metrics = step(student, batch)
  np.testing.assert_allclose(metrics["divergence"], kl[mask].mean(), rtol=1e-4)
  np.testing.assert_allclose(metrics["loss"], kl[mask].mean(), rtol=1e-4)
  # The same student with its projection in chunks of positions
  # (`logits_chunk`, both models' logits never whole): the same numbers.
  teacher, t_layout = teacher_state()
  chunked, layout = st.create_train_state(
    STUDENT_CONFIG.replace(logits_chunk=8), OPT_CONFIG, seed=0
  )
  _, got = step_against(teacher, t_layout, layout)(chunked, batch)
  for k in ("loss", "divergence", "top1_agreement", "grad_norm"):
    np.testing.assert_allclose(got[k], metrics[k], rtol=1e-4, err_msg=k)


def test_student_moves_toward_the_teacher_and_the_teacher_stays():
  step, student, teacher = make_step(
    distill.DistillConfig(divergence="reverse_kl", sft_coef=0.1)
  )
  before = jax.device_get(teacher.model.params)
  batch = make_batch(1, 8)
  student, hist = sp.run_steps(step, student, [batch] * 12)
  assert int(student.step) == 12
  assert hist[-1]["divergence"] < 0.6 * hist[0]["divergence"]
  assert hist[-1]["top1_agreement"] > hist[0]["top1_agreement"]
  assert_unchanged(before, teacher)


def test_a_copy_of_the_teacher_has_nothing_to_learn():
  teacher, t_layout = teacher_state()
  student, layout = teacher_state()  # same seed: the same weights
  step = step_against(teacher, t_layout, layout)
  _, metrics = step(student, make_batch(2, 8))
  assert float(metrics["divergence"]) < 1e-6
  assert float(metrics["top1_agreement"]) == 1.0


def test_teacher_with_another_vocabulary_is_refused():
  teacher, t_layout = st.create_train_state(
    MODEL_CONFIG.replace(vocab_size=256), OPT_CONFIG, seed=7
  )
  student, layout = student_state()
  step = step_against(teacher, t_layout, layout)
  with pytest.raises(sp.DistillError, match="vocabulary"):
    step(student, make_batch(0, 8))


def test_config_checks():
  with pytest.raises(losses.LossConfigError, match="divergence"):
    distill.DistillConfig(divergence="kl")
  with pytest.raises(losses.LossConfigError, match="both 0"):
    distill.DistillConfig(kd_coef=0.0)
  c = distill.DistillConfig.from_dict(
    {"divergence": "jsd", "beta": 0.3, "teacher": "ignored"}, ("teacher",)
  )
  assert (c.divergence, c.beta) == ("jsd", 0.3)
  # A typo is an error naming it, not a silent default (kd_coef 1.0).
  with pytest.raises(losses.LossConfigError, match="'kd_coeff'"):
    distill.DistillConfig.from_dict({"kd_coeff": 0.0, "sft_coef": 1.0})
  with pytest.raises(losses.LossConfigError, match="'teacher'"):
    distill.DistillConfig.from_dict({"teacher": "x"})


# ---------------------------------------------------------------------------
# On-policy distillation: the teacher term of the RL step.


def guided_step(layout, teacher, t_layout, **loss):
  config = sp.StepConfig(
    optimizer=OPT_CONFIG, loss=losses.PolicyLossConfig(**loss)
  )
  return sp.make_train_step(config, layout, teacher.model, t_layout.state.model)


def test_rl_loss_adds_the_reverse_kl_from_the_teacher():
  teacher, t_layout = teacher_state()
  student, layout = student_state()
  twin, _ = student_state()  # same seed: the same weights
  inputs = policy_inputs(student.model, seed=4)
  batch = inputs.batch
  # Reference: KL(student || teacher) in numpy over the policy's tokens.
  kl = numpy_kl(student.model, teacher.model, batch.tokens_BxL)
  mask = np.asarray(batch.loss_mask_BxL) > 0
  step = guided_step(layout, teacher, t_layout, teacher_coef=0.5)
  _, m = step(student, inputs)
  plain = sp.make_train_step(sp.StepConfig(optimizer=OPT_CONFIG), layout)
  _, m0 = plain(twin, inputs)
  np.testing.assert_allclose(m["teacher_div"], kl[mask].mean(), rtol=1e-4)
  np.testing.assert_allclose(m["pg_loss"], m0["pg_loss"], rtol=1e-5)
  np.testing.assert_allclose(
    m["loss"], m0["loss"] + 0.5 * kl[mask].mean(), rtol=1e-4
  )
  assert "teacher_div" not in m0


def test_on_policy_distillation_moves_the_student_only():
  teacher, t_layout = teacher_state()
  student, layout = student_state()
  before = jax.device_get(teacher.model.params)
  inputs = policy_inputs(student.model, seed=5)
  step = guided_step(layout, teacher, t_layout, pg_coef=0.0, teacher_coef=1.0)
  student, hist = sp.run_steps(step, student, [inputs] * 12)
  assert hist[-1]["teacher_div"] < 0.6 * hist[0]["teacher_div"]
  assert hist[-1]["teacher_top1_agreement"] > hist[0]["teacher_top1_agreement"]
  assert_unchanged(before, teacher)


def test_teacher_term_without_a_teacher_is_refused():
  _, layout = student_state()
  config = sp.StepConfig(
    optimizer=OPT_CONFIG, loss=losses.PolicyLossConfig(teacher_coef=1.0)
  )
  with pytest.raises(sp.DistillError, match="needs a teacher"):
    sp.make_train_step(config, layout)


@pytest.mark.slow
def test_sharded_distill_step_matches_single_device():
  if len(jax.devices()) < 8:
    pytest.skip("needs 8 (simulated) devices")
  batch = make_batch(3, 8)
  out = []
  for shape in ((1, 1, 1), (2, 2, 2)):
    step, student, teacher = make_step(mesh=shd.make_mesh(shape))
    if shape == (2, 2, 2):  # the teacher really is split too
      up = teacher.model.params["layers"][0]["mlp"]["up_proj"]["kernel"].value
      assert up.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    student, metrics = step(student, batch)
    out.append(jax.device_get((student.model.params, metrics)))
  (p1, m1), (p8, m8) = out
  for k in ("loss", "divergence", "top1_agreement", "grad_norm"):
    np.testing.assert_allclose(m1[k], m8[k], rtol=1e-4, atol=1e-6, err_msg=k)
  for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-4)
