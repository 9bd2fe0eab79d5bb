"""What each failure code costs: a reward penalty and a mask policy.

Environments only *report* a `FailureCode` on the `StepResult`; the reward
stack looks the code up here and adds ``-penalty`` to that turn's reward, and
the packer drops the turn from the loss when ``trained`` is False.

Defaults, and why:

* Policy mistakes the policy can learn to avoid (malformed call, unknown tool,
  bad arguments) cost a little and are trained on.
* Forbidden actions (network, writing outside the sandbox, fork bombs) cost
  more: they are the behaviour we most want to unlearn.
* Tool errors and an exhausted budget are not penalized per turn (the outcome
  reward already says the episode failed) but stay trained.
* Wall-clock timeouts and context overflows are masked: a timeout depends on
  machine load as much as on the policy, and an overflowed turn's tokens were
  cut off, so neither is a clean learning signal.

Configs override entries by code name, e.g.
``{"timeout": {"penalty": 0.1, "trained": True}, "forbidden": 1.0}``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from agentic_rl.types import FailureCode


@dataclasses.dataclass(frozen=True)
class FailurePolicy:
  """`penalty` >= 0 is subtracted from the turn reward; `trained` masks."""

  penalty: float = 0.0
  trained: bool = True

  def __post_init__(self):
    if not math.isfinite(self.penalty) or self.penalty < 0:
      raise ValueError(
        f"failure penalty must be a finite number >= 0, got {self.penalty!r}"
      )

  @property
  def reward(self) -> float:
    """The reward component this failure contributes (``-penalty``)."""
    return -self.penalty


DEFAULT_FAILURE_POLICIES: dict[FailureCode, FailurePolicy] = {
  FailureCode.MALFORMED_CALL: FailurePolicy(penalty=0.1, trained=True),
  FailureCode.UNKNOWN_TOOL: FailurePolicy(penalty=0.1, trained=True),
  FailureCode.BAD_ARGUMENTS: FailurePolicy(penalty=0.1, trained=True),
  FailureCode.TOOL_ERROR: FailurePolicy(penalty=0.0, trained=True),
  FailureCode.TIMEOUT: FailurePolicy(penalty=0.0, trained=False),
  FailureCode.FORBIDDEN: FailurePolicy(penalty=0.5, trained=True),
  FailureCode.BUDGET_EXHAUSTED: FailurePolicy(penalty=0.0, trained=True),
  FailureCode.CONTEXT_OVERFLOW: FailurePolicy(penalty=0.0, trained=False),
}


def failure_code(name: str | FailureCode) -> FailureCode:
  """Looks a code up by value (``"timeout"``) or name (``"TIMEOUT"``)."""
  if isinstance(name, FailureCode):
    return name
  key = str(name).strip().lower()
  for code in FailureCode:
    if key == code.value:
      return code
  valid = ", ".join(code.value for code in FailureCode)
  raise ValueError(f"unknown failure code {name!r}; valid codes: {valid}")


def _to_plain(value: Any) -> Any:
  # ml_collections.ConfigDict has to_dict(); avoid importing it here.
  to_dict = getattr(value, "to_dict", None)
  return to_dict() if callable(to_dict) else value


def _override(
  base: FailurePolicy, code: FailureCode, value: Any
) -> FailurePolicy:
  value = _to_plain(value)
  if isinstance(value, FailurePolicy):
    return value
  if isinstance(value, bool):
    raise ValueError(
      f"failure policy for {code.value!r}: expected a penalty number or a "
      f"mapping with 'penalty'/'trained', got {value!r}"
    )
  if isinstance(value, int | float):
    return dataclasses.replace(base, penalty=float(value))
  if isinstance(value, Mapping):
    unknown = set(value) - {"penalty", "trained"}
    if unknown:
      raise ValueError(
        f"failure policy for {code.value!r} has unknown fields "
        f"{sorted(unknown)}; allowed: 'penalty', 'trained'"
      )
    trained = value.get("trained", base.trained)
    if not isinstance(trained, bool):
      raise ValueError(
        f"failure policy for {code.value!r}: 'trained' must be a bool, "
        f"got {trained!r}"
      )
    penalty = value.get("penalty", base.penalty)
    if isinstance(penalty, bool) or not isinstance(penalty, int | float):
      raise ValueError(
        f"failure policy for {code.value!r}: 'penalty' must be a number, "
        f"got {penalty!r}"
      )
    return FailurePolicy(penalty=float(penalty), trained=trained)
  raise ValueError(
    f"failure policy for {code.value!r}: expected a number or a mapping, "
    f"got {type(value).__name__}"
  )


def failure_policies_from_config(
  cfg: Mapping[str, Any] | Any | None,
) -> dict[FailureCode, FailurePolicy]:
  """The default table with `cfg`'s overrides applied (a full table).

  `cfg` is None, a dict or an `ml_collections.ConfigDict` keyed by failure
  code value or name; each entry is a penalty number, a mapping with
  ``penalty`` and/or ``trained``, or a `FailurePolicy`. Unknown codes or
  fields raise ValueError (a config error, caught at start-up).
  """
  table = dict(DEFAULT_FAILURE_POLICIES)
  if cfg is None:
    return table
  cfg = _to_plain(cfg)
  if not isinstance(cfg, Mapping):
    raise ValueError(
      f"failure policies config must be a mapping, got {type(cfg).__name__}"
    )
  for name, value in cfg.items():
    code = failure_code(name)
    table[code] = _override(table[code], code, value)
  return table
