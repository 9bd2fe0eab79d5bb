"""A value model (critic): the decoder's trunk and a scalar head.

`ValueModel(trunk)` reads the decoder's residual stream after its final
norm and projects it to one number per position. Values are aligned like
the policy's log-probs: `value_BxL[b, i]` is V of the prefix before token
i (the head applied at position i - 1), and 0 at i = 0, so the value of
the state in which token i was chosen sits on token i.

The head starts at zero (`w = 0, b = 0`): a fresh critic predicts 0
everywhere, and its first advantages are the plain (discounted) returns.
`scale` multiplies the head's output: set it to the size of the returns
(Sokoban's solve bonus is 10) so the head works at O(1) and an optimizer
whose steps are bounded by its learning rate (Adam) reaches the returns in
a few updates rather than hundreds.
The trunk is usually a copy of the post-SFT policy (PPO practice: the
critic starts from the actor's features).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from agentic_rl import sharding as shd
from agentic_rl.models.transformer import Transformer


class ValueModel(nnx.Module):
  """V(prefix) for every position; see the module docstring."""

  def __init__(self, trunk: Transformer, scale: float = 1.0):
    self.trunk = trunk
    self.scale = float(scale)
    d = trunk.config.d_model
    dtype = trunk.config.weight_dtype
    self.head_w = nnx.Param(
      jnp.zeros((d,), dtype), out_sharding=(shd.EMBED,), eager_sharding=False
    )
    self.head_b = nnx.Param(jnp.zeros((), dtype))

  def __call__(
    self, tokens_BxL: jax.Array, positions_BxL: jax.Array | None = None
  ) -> jax.Array:
    """value_BxL (float32), shifted so position i holds V(tokens[:i])."""
    h_BxLxD = self.trunk.final_norm(
      self.trunk.hidden(tokens_BxL, positions_BxL)
    )
    w_D = self.head_w[...].astype(jnp.float32)
    v_BxL = jnp.einsum("bld,d->bl", h_BxLxD.astype(jnp.float32), w_D)
    v_BxL = self.scale * (v_BxL + self.head_b[...].astype(jnp.float32))
    return jnp.pad(v_BxL[:, :-1], ((0, 0), (1, 0)))
