"""Shared fixtures for the train tests: a small model and packed batches."""

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
import pytest

from agentic_rl import losses
from agentic_rl.data.packing import pack
from agentic_rl.models.config import get_preset
from agentic_rl.train import state as st
from agentic_rl.train import step as sp
from agentic_rl.types import (
  Task,
  Trajectory,
  TrajectoryBatch,
  Turn,
  turns_to_tokens,
)

VOCAB = 512  # the tiny preset's vocabulary


def make_trajectories(seed: int, n: int) -> list[Trajectory]:
  """n two-turn trajectories with random token ids (4..12 tokens a turn)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    turns = []
    for _ in range(2):
      obs = rng.integers(0, VOCAB, int(rng.integers(3, 7))).tolist()
      act = rng.integers(0, VOCAB, int(rng.integers(2, 6))).tolist()
      turns.append(
        Turn(obs_tokens=obs, action_tokens=act, action_logp=[0.0] * len(act))
      )
    out.append(
      Trajectory(
        task=Task(id=f"t{i}", family="toy"), group_id=i // 2, turns=turns
      )
    )
  return out


def make_batch(seed: int, n: int = 8, length: int = 32) -> TrajectoryBatch:
  return pack(make_trajectories(seed, n), length_buckets=(length,))


MODEL_CONFIG = get_preset("tiny")
OPT_CONFIG = st.OptimizerConfig(
  learning_rate=3e-3, warmup_steps=1, weight_decay=0.01, max_grad_norm=1.0
)
# Accumulation is exact in every mode (step.py); this one averages rows.
STEP_CONFIG = sp.StepConfig(
  optimizer=OPT_CONFIG,
  loss=losses.PolicyLossConfig(
    clip_high=0.28, kl_coef=0.01, agg="seq-mean-token-mean"
  ),
)


def fresh_state(seed: int = 0) -> st.TrainState:
  """A new state (the initializer is compiled once and cached)."""
  return st.create_train_state(MODEL_CONFIG, OPT_CONFIG, seed=seed)[0]


def policy_inputs(model_state, seed: int = 0, n: int = 8) -> sp.PolicyInputs:
  """A packed batch whose behaviour log-probs are `model_state`'s own."""
  batch = make_batch(seed, n)
  old_BxL = sp.compute_logp(model_state, batch.tokens_BxL)
  batch = batch.replace(behaviour_logp_BxL=old_BxL * batch.loss_mask_BxL)
  rng = np.random.default_rng(seed)
  adv_BxT = rng.normal(size=batch.turn_reward_BxT.shape).astype(np.float32)
  adv_BxL = turns_to_tokens(jnp.asarray(adv_BxT), batch.turn_id_BxL)
  return sp.PolicyInputs(batch=batch, adv_BxL=adv_BxL, ref_logp_BxL=old_BxL)


@dataclasses.dataclass
class RLSetup:
  layout: st.Layout
  step_fn: Callable
  inputs: sp.PolicyInputs


@pytest.fixture(scope="session")
def rl_setup() -> RLSetup:
  """One compiled RL step on the tiny preset, shared by the train tests.

  States are donated to the step, so every test builds its own with
  `fresh_state()`.
  """
  state, layout = st.create_train_state(MODEL_CONFIG, OPT_CONFIG, seed=0)
  return RLSetup(
    layout=layout,
    step_fn=sp.make_train_step(STEP_CONFIG, layout),
    inputs=policy_inputs(state.model),
  )
