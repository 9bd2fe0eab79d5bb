"""Environments: the contract, tools, parsers, sandbox and built-ins."""

from agentic_rl.envs.base import (
  Environment,
  StepResult,
  Tool,
  make,
  register,
  registered,
)

__all__ = [
  "Environment",
  "StepResult",
  "Tool",
  "make",
  "register",
  "registered",
]
