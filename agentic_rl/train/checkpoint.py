"""Orbax checkpoints of the whole run: model, optimizer, step, PRNG, host state.

One checkpoint per saved step holds three items written together:

  * `state`: the `TrainState` arrays (params, other model variables,
    optimizer state, step, and the PRNG key as raw key data);
  * `host`: an arbitrary JSON-able dict (task sampler position, curriculum
    statistics, replay bookkeeping) that the training loop owns;
  * `meta`: the PRNG implementation name, to rewrap the key data.

Restoring targets an abstract, sharded state (`state.abstract_train_state`
+ `Layout`), so arrays are read straight into their final layout on any
mesh; a resumed run continues bit-identically on the same machine.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from typing import Any

import jax
import orbax.checkpoint as ocp

from agentic_rl.train.state import Layout, TrainState, with_shardings


class CheckpointNotFoundError(FileNotFoundError):
  """No checkpoint for the requested step in the directory."""


class CheckpointUnreadableError(RuntimeError):
  """A run's newest checkpoint cannot be read back, and no older one can
  stand in for it (see `restore_readable`)."""


def _to_saveable(state: TrainState) -> TrainState:
  # Typed PRNG keys are not plain arrays; save their uint32 key data.
  return state.replace(rng=jax.random.key_data(state.rng))


class Checkpointer:
  """A thin wrapper over `ocp.CheckpointManager` for `TrainState` + host dict.

  Saves are asynchronous when `async_save` (the default): `save` returns
  once the arrays are copied off the device; call `wait()` before reading
  the files or exiting. `max_to_keep` old checkpoints are retained.
  """

  def __init__(
    self,
    directory: str,
    *,
    max_to_keep: int | None = 3,
    save_interval_steps: int = 1,
    async_save: bool = True,
  ):
    self.directory = os.path.abspath(directory)
    options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep,
      save_interval_steps=save_interval_steps,
      create=True,
      enable_async_checkpointing=async_save,
    )
    self._manager = ocp.CheckpointManager(
      self.directory,
      options=options,
      item_names=("state", "host", "meta"),
    )

  def save(
    self,
    state: TrainState,
    host_state: dict[str, Any] | None = None,
    *,
    step: int | None = None,
    force: bool = False,
  ) -> bool:
    """Saves at `step` (default: `state.step`); False if skipped by interval.

    `host_state` must be JSON-serializable; a `TypeError` names the bad
    value before anything is written.
    """
    # A deep copy through JSON: it fails early and clearly on non-JSON
    # values, and the save, which finishes in the background, cannot see
    # the caller change nested values after this returns.
    host_state = json.loads(
      json.dumps({} if host_state is None else host_state)
    )
    step = int(jax.device_get(state.step)) if step is None else int(step)
    meta = {"rng_impl": str(jax.random.key_impl(state.rng))}
    return self._manager.save(
      step,
      args=ocp.args.Composite(
        state=ocp.args.StandardSave(_to_saveable(state)),
        host=ocp.args.JsonSave(host_state),
        meta=ocp.args.JsonSave(meta),
      ),
      force=force,
    )

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def delete(self, step: int) -> None:
    """Removes the checkpoint of `step` (after pending saves finish)."""
    self.wait()
    self._manager.delete(step)

  def restore(
    self,
    abstract_state: TrainState,
    layout: Layout,
    step: int | None = None,
  ) -> tuple[TrainState, dict[str, Any]]:
    """Reads `step` (default: latest) into `layout`; returns (state, host).

    `abstract_state` gives the structure, shapes and dtypes (e.g.
    `abstract_train_state(...)`, or a concrete state); its values are not
    used.
    """
    self.wait()
    step = self.latest_step() if step is None else step
    if step is None or step not in self.all_steps():
      raise CheckpointNotFoundError(
        f"no checkpoint for step {step} in {self.directory} "
        f"(have {self.all_steps()})"
      )
    shapes = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), abstract_state
    )
    target = with_shardings(_to_saveable_abstract(shapes), layout.state)
    restored = self._manager.restore(
      step,
      args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target),
        host=ocp.args.JsonRestore(),
        meta=ocp.args.JsonRestore(),
      ),
    )
    saved: TrainState = restored.state
    impl = restored.meta["rng_impl"]
    rng = jax.random.wrap_key_data(saved.rng, impl=impl)
    state = saved.replace(rng=jax.device_put(rng, layout.state.rng))
    return state, dict(restored.host)

  def set_aside(self, step: int, why: str) -> pathlib.Path:
    """Moves checkpoint `step` out of the run's checkpoints, whole, to
    `<directory>_unreadable/<step>` with `why` in `why.txt`, and forgets
    it: kept for inspection, never restored or overwritten."""
    self.wait()
    aside = pathlib.Path(self.directory + "_unreadable")
    aside.mkdir(exist_ok=True)
    dst, n = aside / str(step), 1
    while dst.exists():  # set aside before, at the same step
      dst, n = aside / f"{step}.{n}", n + 1
    shutil.move(os.path.join(self.directory, str(step)), dst)
    (dst / "why.txt").write_text(why)
    self._manager.reload()
    return dst

  def wait(self) -> None:
    """Blocks until pending asynchronous saves are on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def restore_readable(
  checkpointer: Checkpointer,
  abstract_state: TrainState,
  layout: Layout,
  single_process: bool = True,
) -> tuple[TrainState, dict[str, Any]]:
  """(state, host) of the newest checkpoint, or of the one before it when
  the newest cannot be read back (a file truncated by a crash) and that
  one can: the newest is then set aside (`Checkpointer.set_aside`) and the
  run redoes the steps after the older one, as after any kill. When the
  older one fails too (the code no longer reads this run's checkpoints,
  say), or there is none, or the run has several processes (each would
  move the same files), nothing is moved and `CheckpointUnreadableError`
  names the newest step and the error."""
  steps = sorted(checkpointer.all_steps())
  newest = steps[-1]
  try:
    return checkpointer.restore(abstract_state, layout, newest)
  except Exception as e:  # any failure to read it back
    error = e
  where = f"checkpoint {newest} in {checkpointer.directory}"
  why = f"{type(error).__name__}: {error}"
  if len(steps) < 2 or not single_process:
    raise CheckpointUnreadableError(
      f"{where} cannot be read back ({why[:500]}); no older checkpoint is "
      "tried (there is none, or the run has several processes): move it "
      "aside by hand to resume from the one before it"
    ) from error
  try:
    restored = checkpointer.restore(abstract_state, layout, steps[-2])
  except Exception as older:
    raise CheckpointUnreadableError(
      f"{where} cannot be read back ({why[:500]}), nor can checkpoint "
      f"{steps[-2]} ({type(older).__name__}); nothing was moved"
    ) from error
  aside = checkpointer.set_aside(newest, why)
  print(
    f"{where} cannot be read back ({type(error).__name__}); set aside in "
    f"{aside}; resuming from checkpoint {steps[-2]}",
    flush=True,
  )
  return restored


def _to_saveable_abstract(shapes: TrainState) -> TrainState:
  """The abstract state with the key replaced by its key-data shape."""
  key_data = jax.eval_shape(jax.random.key_data, shapes.rng)
  return shapes.replace(rng=key_data)
