"""Reward stack: verifier, process signals, failure penalties, judge, trace."""

from agentic_rl.rewards.judges import (
  FormatJudge,
  Judge,
  RubricJudge,
  make_judge,
  register_judge,
)
from agentic_rl.rewards.process import register_signal
from agentic_rl.rewards.refusal import (
  DEFAULT_REFUSAL_PHRASES,
  DEFAULT_REFUSAL_TAGS,
  is_refusal,
)
from agentic_rl.rewards.stack import (
  TRACE_KEY,
  NonFiniteRewardError,
  NotScoredError,
  RewardStack,
  TraceRecord,
  default_config,
  from_config,
)
from agentic_rl.rewards.trace import (
  CATEGORIES,
  COULD_NOT,
  DID_WRONG,
  REWARDED_WRONG,
  SUCCESS,
  diagnose,
  trace_summary,
)

__all__ = [
  "CATEGORIES",
  "COULD_NOT",
  "DEFAULT_REFUSAL_PHRASES",
  "DEFAULT_REFUSAL_TAGS",
  "DID_WRONG",
  "REWARDED_WRONG",
  "SUCCESS",
  "TRACE_KEY",
  "FormatJudge",
  "Judge",
  "NonFiniteRewardError",
  "NotScoredError",
  "RewardStack",
  "RubricJudge",
  "TraceRecord",
  "default_config",
  "diagnose",
  "from_config",
  "is_refusal",
  "make_judge",
  "register_judge",
  "register_signal",
  "trace_summary",
]
