"""Process signals: per-turn evidence that a step moved the task forward.

A signal is `signal(turns_so_far, turn) -> float`, computed on the host from
what the turn did, never from the final outcome, so it can be used where the
outcome is still unknown (and so that rewarding it on a failed trajectory is
visible in the trace). `process_score` of a turn is the mean of the selected
signals; it also feeds PRM-weighted advantage estimators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentic_rl.types import ActionKind, Turn

ProcessSignal = Callable[[Sequence[Turn], Turn], float]

# Prefix of signals that read an environment reward component directly.
ENV_PREFIX = "env:"


def valid_action(turns_so_far: Sequence[Turn], turn: Turn) -> float:
  """1 if the action parsed and ran without a failure code."""
  del turns_so_far
  malformed = turn.action is not None and (
    turn.action.kind == ActionKind.MALFORMED
  )
  return float(turn.failure is None and not malformed)


def novel_state(turns_so_far: Sequence[Turn], turn: Turn) -> float:
  """1 if the action was taken in a state not visited earlier.

  Revisiting a state means the previous steps undid themselves (a loop), so
  the turn is not progress; turns without a state key carry no evidence.
  """
  if not turn.state_key:
    return 0.0
  return float(all(t.state_key != turn.state_key for t in turns_so_far))


_SIGNALS: dict[str, ProcessSignal] = {
  "valid_action": valid_action,
  "novel_state": novel_state,
}


def register_signal(name: str, signal: ProcessSignal) -> None:
  """Adds a process signal so configs can select it by name."""
  if name in _SIGNALS or name.startswith(ENV_PREFIX):
    raise ValueError(f"process signal name {name!r} is taken or reserved")
  _SIGNALS[name] = signal


def check_signal_names(names: Sequence[str]) -> None:
  """Raises KeyError naming the first unknown signal."""
  for name in names:
    if name.startswith(ENV_PREFIX):
      if not name[len(ENV_PREFIX) :]:
        raise KeyError(f"process signal {name!r} names no env component")
    elif name not in _SIGNALS:
      raise KeyError(
        f"unknown process signal {name!r}; registered: {sorted(_SIGNALS)} "
        f"or '{ENV_PREFIX}<component>'"
      )


def process_score(
  names: Sequence[str],
  turns_so_far: Sequence[Turn],
  turn: Turn,
  env_components: dict[str, float],
) -> float:
  """Mean of the named signals for one turn (0 when none are selected)."""
  if not names:
    return 0.0
  values = []
  for name in names:
    if name.startswith(ENV_PREFIX):
      values.append(float(env_components.get(name[len(ENV_PREFIX) :], 0.0)))
    else:
      values.append(float(_SIGNALS[name](turns_so_far, turn)))
  return sum(values) / len(values)
