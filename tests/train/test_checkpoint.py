"""Checkpoint round trip and bit-identical resume."""

import gc
import time

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


# A failed tensorstore read resolves a future after orbax's event loop has
# closed, which Python reports as an ignored "Event loop is closed".
UNREADABLE = pytest.mark.filterwarnings(
  "ignore::pytest.PytestUnraisableExceptionWarning"
)


def _settle():
  """Lets the failed reads' late callbacks fire inside the test that caused
  them (and under its filter), not in whichever test runs next."""
  time.sleep(1.0)
  gc.collect()


def _truncate_arrays(directory, step):
  """What a crash of the disk or host can leave: the array files empty."""
  files = list((directory / str(step) / "state" / "d").iterdir())
  assert files
  for f in files:
    f.write_bytes(b"")


@UNREADABLE
def test_an_unreadable_newest_checkpoint_is_set_aside(tmp_path, rl_setup):
  ckpts = tmp_path / "checkpoints"
  with ck.Checkpointer(str(ckpts), async_save=False) as mgr:
    state, _ = rl_setup.step_fn(fresh_state(), rl_setup.inputs)
    mgr.save(state, {"rl_step": 1}, step=1)
    older, _ = mgr.restore(fresh_state(), rl_setup.layout, 1)
    newer, _ = rl_setup.step_fn(state, rl_setup.inputs)  # donates `state`
    mgr.save(newer, {"rl_step": 2}, step=2)
    state, host = ck.restore_readable(mgr, fresh_state(), rl_setup.layout)
    _assert_identical(state, newer)  # readable: the newest, nothing moved
    assert host == {"rl_step": 2} and mgr.all_steps() == [1, 2]
    _truncate_arrays(ckpts, 2)
    with pytest.raises(ck.CheckpointUnreadableError, match="several"):
      ck.restore_readable(mgr, fresh_state(), rl_setup.layout, False)
    assert mgr.all_steps() == [1, 2]  # a multi-process run moves nothing
    state, host = ck.restore_readable(mgr, fresh_state(), rl_setup.layout)
    _assert_identical(state, older)
    assert host == {"rl_step": 1} and mgr.all_steps() == [1]
    aside = tmp_path / "checkpoints_unreadable" / "2"
    assert "ValueError" in (aside / "why.txt").read_text()
    assert (aside / "state" / "d").is_dir()  # kept whole, not deleted
    # The step is free again: the resumed run saves its own step 2.
    assert mgr.save(newer, {"rl_step": 2}, step=2)
    assert mgr.all_steps() == [1, 2]
  _settle()


@UNREADABLE
def test_no_checkpoint_is_moved_when_the_older_one_fails_too(
  tmp_path, rl_setup
):
  """Both unreadable (as when the code no longer reads a run's
  checkpoints): a named error, and the files stay where they are."""
  with ck.Checkpointer(str(tmp_path), async_save=False) as mgr:
    mgr.save(fresh_state(), {}, step=1)
    _truncate_arrays(tmp_path, 1)
    with pytest.raises(ck.CheckpointUnreadableError, match="none"):
      ck.restore_readable(mgr, fresh_state(), rl_setup.layout)
    mgr.save(fresh_state(), {}, step=2)
    _truncate_arrays(tmp_path, 2)
    with pytest.raises(ck.CheckpointUnreadableError, match="nothing was"):
      ck.restore_readable(mgr, fresh_state(), rl_setup.layout)
    assert mgr.all_steps() == [1, 2]
  _settle()


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
