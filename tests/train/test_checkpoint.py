"""Checkpoint round trip and bit-identical resume."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_rl.train import checkpoint as ck
from agentic_rl.train import state as st
from agentic_rl.train import step as sp
from tests.train.conftest import MODEL_CONFIG, OPT_CONFIG, fresh_state


def _assert_identical(a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(la, lb, strict=True):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_bit_identical(tmp_path, rl_setup):
  state, _ = rl_setup.step_fn(fresh_state(), rl_setup.inputs)  # moments != 0
  state = state.replace(rng=jax.random.split(state.rng)[0])
  host = {"sampler": {"epoch": 3, "order": [4, 1, 2]}, "curriculum": [0.5]}
  with ck.Checkpointer(str(tmp_path)) as mgr:
    assert mgr.latest_step() is None
    assert mgr.save(state, host)
    mgr.wait()
    assert mgr.latest_step() == 1
    abstract = st.abstract_train_state(MODEL_CONFIG, OPT_CONFIG, seed=9)
    restored, host_back = mgr.restore(abstract, rl_setup.layout)
  _assert_identical(restored, state)
  assert host_back == host
  for x, s in zip(
    jax.tree.leaves(restored),
    jax.tree.leaves(rl_setup.layout.state),
    strict=True,
  ):
    assert x.sharding.is_equivalent_to(s, x.ndim)


def test_host_state_is_copied_at_save(tmp_path, rl_setup, monkeypatch):
  """The save finishes in the background, so what it writes must not share
  nested values with the caller's dict (the loop appends evaluations right
  after saving; a shallow copy let them into the checkpoint)."""
  written = []
  json_save = ck.ocp.args.JsonSave
  monkeypatch.setattr(
    ck.ocp.args, "JsonSave", lambda x: written.append(x) or json_save(x)
  )
  host = {"evals": [{"rl_step": 0}], "rl_step": 1}
  with ck.Checkpointer(str(tmp_path)) as mgr:
    mgr.save(fresh_state(), host, step=1)
    host["evals"].append({"rl_step": 1})
    mgr.wait()
    _, back = mgr.restore(fresh_state(), rl_setup.layout)
  (saved_host, _meta) = written
  assert saved_host["evals"] is not host["evals"]
  assert back == {"evals": [{"rl_step": 0}], "rl_step": 1}


def test_delete_frees_a_step_for_a_new_save(tmp_path):
  with ck.Checkpointer(str(tmp_path), async_save=False) as mgr:
    mgr.save(fresh_state(), step=3)
    mgr.save(fresh_state(), step=4)
    mgr.delete(4)
    assert mgr.all_steps() == [3]
    assert mgr.save(fresh_state(), step=4, force=True)
    assert mgr.all_steps() == [3, 4]


def test_errors(tmp_path, rl_setup):
  with ck.Checkpointer(str(tmp_path), async_save=False) as mgr:
    with pytest.raises(ck.CheckpointNotFoundError):
      mgr.restore(fresh_state(), rl_setup.layout)
    with pytest.raises(TypeError):
      mgr.save(fresh_state(), {"bad": object()})
    assert mgr.all_steps() == []


def test_resume_is_bit_identical(tmp_path, rl_setup):
  """4 steps straight == 2 steps, save, restore into a new state, 2 steps."""
  inputs = rl_setup.inputs
  batches = [
    jax.tree.map(lambda x, i=i: jnp.roll(x, i, axis=0), inputs)
    for i in range(4)
  ]
  straight, hist_straight = sp.run_steps(
    rl_setup.step_fn, fresh_state(), batches
  )

  half, hist_a = sp.run_steps(rl_setup.step_fn, fresh_state(), batches[:2])
  with ck.Checkpointer(str(tmp_path), max_to_keep=2) as mgr:
    mgr.save(half, {"next_batch": 2})
    del half
    # A "new process": different seed, nothing shared but the layout.
    blank = fresh_state(seed=123)
    resumed, host = mgr.restore(blank, rl_setup.layout)
  assert int(resumed.step) == 2
  nxt = host["next_batch"]
  resumed, hist_b = sp.run_steps(rl_setup.step_fn, resumed, batches[nxt:])

  _assert_identical(resumed, straight)
  assert hist_a + hist_b == hist_straight
