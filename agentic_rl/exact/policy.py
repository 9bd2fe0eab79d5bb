"""Markov policies pi(a|s) over a `TabularMDP`'s states.

The language-model policy conditions on its whole multi-turn history, so it
is not Markov in the environment state. The study therefore defines its
policy explicitly as a Markov one: at state s the model sees the turn-0
prompt built from s alone (`prompt_template` with the observation `reset`
would return in s, exactly the framing of `Rollout` for turn 0), and

  pi(a|s) = p(`<answer>Move_a</answer>` | prompt_s)
            / sum_b p(`<answer>Move_b</answer>` | prompt_s),

with p the product of the teacher-forced token probabilities of the action
text. The renormalization over the four move texts excludes every other
continuation (malformed text, other spellings, EOS): the study's policy only
ever takes one of the four valid moves.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_rl.exact.mdp import TabularMDP
from agentic_rl.train.state import ModelState


def uniform_policy(mdp: TabularMDP) -> np.ndarray:
  return np.full((mdp.num_states, 4), 0.25)


def softmax_policy(q_SxA: np.ndarray, temperature: float) -> np.ndarray:
  """pi(a|s) proportional to exp(Q(s, a) / temperature)."""
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  z_SxA = q_SxA / temperature
  z_SxA = z_SxA - z_SxA.max(axis=1, keepdims=True)
  e_SxA = np.exp(z_SxA)
  return e_SxA / e_SxA.sum(axis=1, keepdims=True)


def action_texts(mdp: TabularMDP) -> list[str]:
  return [f"<answer>{m}</answer>" for m in mdp.moves]


@jax.jit
def _action_logp(
  model_state: ModelState,
  tokens_RxL: jax.Array,
  pos_RxM: jax.Array,
  target_RxM: jax.Array,
  mask_RxM: jax.Array,
) -> jax.Array:
  """Sum of log-probs of each row's action tokens (teacher forcing).

  Only the M positions that predict action tokens go through the vocabulary
  projection, so the [R, L, V] logits never exist.
  """
  model = model_state.merge()
  h_RxLxD = model.hidden(tokens_RxL)
  h_RxMxD = jnp.take_along_axis(h_RxLxD, pos_RxM[..., None], axis=1)
  logp_RxMxV = jax.nn.log_softmax(model.unembed(h_RxMxD), axis=-1)
  picked_RxM = jnp.take_along_axis(logp_RxMxV, target_RxM[..., None], -1)
  return (picked_RxM[..., 0] * mask_RxM).sum(axis=1)


def move_logprobs(
  model: nnx.Module,
  tokenizer,
  prompts: Sequence[str],
  actions: Sequence[str],
  chunk_rows: int = 512,
) -> np.ndarray:
  """log p(action | prompt) for every (prompt, action): logp_NxA.

  Rows (prompt + action tokens, right-padded to one length) run in chunks
  of `chunk_rows` through one jitted function, so a single shape compiles
  however many states there are.
  """
  prompt_ids = tokenizer.encode_batch(list(prompts))
  action_ids = [tokenizer.encode(a) for a in actions]
  n, a = len(prompt_ids), len(action_ids)
  m = max(len(x) for x in action_ids)
  length = max(len(p) for p in prompt_ids) + m
  length = -(-length // 64) * 64  # a few lengths compile, not one per run
  rows = n * a
  padded = -(-rows // chunk_rows) * chunk_rows
  tokens = np.zeros((padded, length), np.int32)
  pos = np.zeros((padded, m), np.int32)
  target = np.zeros((padded, m), np.int32)
  mask = np.zeros((padded, m), np.float32)
  for i, p in enumerate(prompt_ids):
    if not p:
      raise ValueError(f"prompt {i} tokenizes to nothing")
    for j, act in enumerate(action_ids):
      r = i * a + j
      seq = p + act
      tokens[r, : len(seq)] = seq
      k = len(act)
      # The logit at position q predicts token q + 1.
      pos[r, :k] = np.arange(len(p) - 1, len(p) - 1 + k)
      target[r, :k] = act
      mask[r, :k] = 1.0
  state = ModelState.from_module(model)
  out = []
  for c in range(0, padded, chunk_rows):
    sl = slice(c, c + chunk_rows)
    out.append(
      np.asarray(_action_logp(state, tokens[sl], pos[sl], target[sl], mask[sl]))
    )
  return np.concatenate(out)[:rows].reshape(n, a).astype(np.float64)


def model_policy(
  model: nnx.Module,
  tokenizer,
  mdp: TabularMDP,
  prompt_template: str = "{observation}\n",
  chunk_rows: int = 512,
  temperature: float = 1.0,
) -> np.ndarray:
  """The model's Markov policy at every non-terminal state, pi_SxA.

  `prompt_template` is `RolloutConfig.prompt_template`. `temperature` > 1
  softens the sequence-level distribution, pi proportional to
  p(text)^(1 / temperature): each extra token of a longer move text costs
  its log-prob, so an untrained model strongly prefers the shortest text
  (`Up`) and is nearly deterministic at temperature 1. Terminal states are
  never acted in; they get the uniform policy so every row is a
  distribution.
  """
  live = np.flatnonzero(~mdp.terminal_S)
  prompts = [
    prompt_template.replace("{observation}", mdp.observations[s]) for s in live
  ]
  logp_NxA = move_logprobs(
    model, tokenizer, prompts, action_texts(mdp), chunk_rows
  )
  pi_SxA = np.full((mdp.num_states, 4), 0.25)
  pi_SxA[live] = softmax_policy(logp_NxA, temperature)
  return pi_SxA
