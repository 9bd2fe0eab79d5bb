"""Tool executor, argument validation, failure policies, ToolEnvironment."""

import threading
import time

import ml_collections
import pytest

from agentic_rl.envs.base import Tool
from agentic_rl.envs.failures import (
  DEFAULT_FAILURE_POLICIES,
  FailurePolicy,
  failure_policies_from_config,
)
from agentic_rl.envs.parsing import format_tool_call
from agentic_rl.envs.tool_env import AnswerResult, ToolEnvironment
from agentic_rl.envs.tools import (
  ForbiddenError,
  ToolExecutor,
  ToolFailure,
  validate_arguments,
)
from agentic_rl.types import Action, ActionKind, FailureCode, Task

_RELEASE = threading.Event()


def _hang() -> str:
  _RELEASE.wait(30)  # released at the end of the test module
  return "late"


def _forbid(path: str) -> str:
  raise ForbiddenError(f"no access to {path}")


TOOLS = {
  "add": Tool(
    "add",
    "Adds two integers.",
    {
      "type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "required": ["a", "b"],
      "additionalProperties": False,
    },
    lambda a, b: str(a + b),
  ),
  "boom": Tool("boom", "", {"type": "object"}, lambda: 1 / 0),
  "exit": Tool("exit", "", {"type": "object"}, lambda: exit(3)),
  "hang": Tool("hang", "", {"type": "object"}, _hang),
  "forbid": Tool(
    "forbid",
    "",
    {"type": "object", "properties": {"path": {"type": "string"}}},
    _forbid,
  ),
  "number": Tool("number", "", {"type": "object"}, lambda: 7),
  "big": Tool("big", "", {"type": "object"}, lambda: "x" * 1000),
  "custom": Tool(
    "custom",
    "",
    {"type": "object"},
    lambda: (_ for _ in ()).throw(ToolFailure("slow", FailureCode.TIMEOUT)),
  ),
}


def call(name, **arguments):
  return Action(ActionKind.TOOL_CALL, name=name, arguments=arguments)


@pytest.fixture(scope="module", autouse=True)
def _release_hung_threads():
  yield
  _RELEASE.set()


def test_validate_arguments():
  assert validate_arguments(TOOLS["add"], {"a": 1, "b": 2}) is None
  assert "'b' is a required" in validate_arguments(TOOLS["add"], {"a": 1})
  assert "a: 'x' is not of type" in validate_arguments(
    TOOLS["add"], {"a": "x", "b": 1}
  )
  assert "not allowed" in validate_arguments(
    TOOLS["add"], {"a": 1, "b": 2, "c": 3}
  )
  assert "must be an object" in validate_arguments(TOOLS["add"], [1])
  broken = Tool("broken", "", {"type": 12}, lambda: "")
  assert "invalid schema" in validate_arguments(broken, {})


def test_executor_failure_codes():
  ex = ToolExecutor(timeout_s=0.3, max_output_chars=100)
  cases = [
    (call("add", a=2, b=3), None),
    (call("add", a=2), FailureCode.BAD_ARGUMENTS),
    (call("nope"), FailureCode.UNKNOWN_TOOL),
    (call("boom"), FailureCode.TOOL_ERROR),
    (call("exit"), FailureCode.TOOL_ERROR),
    (call("forbid", path="/etc"), FailureCode.FORBIDDEN),
    (call("number"), FailureCode.TOOL_ERROR),
    (call("custom"), FailureCode.TIMEOUT),
    (Action(ActionKind.MALFORMED, error="bad"), FailureCode.MALFORMED_CALL),
    (Action(ActionKind.ANSWER, text="x"), FailureCode.MALFORMED_CALL),
  ]
  outcomes = ex.run_many([(TOOLS, a) for a, _ in cases])
  assert [o.failure for o in outcomes] == [code for _, code in cases]
  assert outcomes[0].output == "5" and outcomes[0].ok
  assert "ZeroDivisionError" in outcomes[3].error
  assert "no access to /etc" in outcomes[5].error
  assert "available tools" in outcomes[2].error
  big = ex.call(TOOLS, call("big"))
  assert big.output.startswith("x" * 100) and "truncated 900" in big.output


def test_timeout_does_not_block_and_runs_concurrently():
  ex = ToolExecutor(max_workers=4, timeout_s=0.3)
  start = time.monotonic()
  outcomes = ex.run_many(
    [(TOOLS, call("hang"))] * 4 + [(TOOLS, call("add", a=1, b=1))]
  )
  elapsed = time.monotonic() - start
  assert [o.failure for o in outcomes[:4]] == [FailureCode.TIMEOUT] * 4
  assert outcomes[4].output == "2"
  # Four hung calls in parallel, then one more: about two timeouts at most.
  assert elapsed < 1.5
  assert ex.abandoned_threads >= 4
  # Hung threads are daemons: they cannot block interpreter exit.
  assert all(t.daemon for t in threading.enumerate() if t.name == "tool-hang")


def test_too_many_abandoned_threads_fail_fast():
  ex = ToolExecutor(max_workers=2, timeout_s=0.1, max_abandoned=2)
  ex.run_many([(TOOLS, call("hang"))] * 2)
  refused = ex.call(TOOLS, call("add", a=1, b=2))
  assert refused.failure == FailureCode.TOOL_ERROR
  assert "still running" in refused.error
  ex.shutdown()
  assert ex.call(TOOLS, call("add", a=1, b=2)).failure == FailureCode.TOOL_ERROR


def test_failure_policies():
  table = failure_policies_from_config(None)
  assert set(table) == set(FailureCode)
  assert table == DEFAULT_FAILURE_POLICIES
  cfg = ml_collections.ConfigDict(
    {"timeout": {"penalty": 0.2, "trained": True}, "FORBIDDEN": 1.0}
  )
  table = failure_policies_from_config(cfg)
  assert table[FailureCode.TIMEOUT] == FailurePolicy(0.2, True)
  assert table[FailureCode.FORBIDDEN].penalty == 1.0
  assert table[FailureCode.FORBIDDEN].reward == -1.0
  assert (
    table[FailureCode.MALFORMED_CALL]
    == (DEFAULT_FAILURE_POLICIES[FailureCode.MALFORMED_CALL])
  )
  with pytest.raises(ValueError, match="unknown failure code 'oops'"):
    failure_policies_from_config({"oops": 1.0})
  with pytest.raises(ValueError, match="unknown fields"):
    failure_policies_from_config({"timeout": {"weight": 1.0}})
  with pytest.raises(ValueError, match=">= 0"):
    failure_policies_from_config({"timeout": -1.0})
  with pytest.raises(ValueError, match="'trained' must be a bool"):
    failure_policies_from_config({"timeout": {"trained": "no"}})


class CounterEnv(ToolEnvironment):
  """A tiny tool environment: increment a counter, answer its value."""

  max_turns = 3

  def generate_task(self, seed, difficulty=0):
    return Task(id=f"counter-{seed}", family="counter", seed=seed)

  def reset(self, task, seed=0):
    self.n = 0
    self.begin_episode()
    return "count"

  def tools(self):
    return {
      "inc": Tool(
        "inc",
        "Adds one.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        self._inc,
      ),
      "hang": TOOLS["hang"],
    }

  def _inc(self):
    self.n += 1
    return str(self.n)

  def on_tool_result(self, action, outcome):
    return {"progress": 0.1} if outcome.ok else {}

  def on_answer(self, text):
    if text == "crash":
      raise RuntimeError("verifier bug")
    return AnswerResult({"success": float(text == str(self.n))})

  def state_key(self):
    return f"n={self.n}"


def test_tool_environment_turns():
  env = CounterEnv(tool_timeout_s=0.2)
  before = env.step("<answer>0</answer>")
  assert before.failure == FailureCode.TOOL_ERROR and before.done
  env.reset(env.generate_task(0))
  assert [s["function"]["name"] for s in env.tool_schemas()] == ["hang", "inc"]
  r = env.step(format_tool_call("inc", {}))
  assert (r.failure, r.state_key, r.done) == (None, "n=0", False)
  assert "1" in r.observation and r.reward_components == {"progress": 0.1}
  r = env.step("no tags at all")
  assert r.failure == FailureCode.MALFORMED_CALL and not r.done
  assert "malformed" in r.observation
  r = env.step(format_tool_call("inc", {"by": 2}))
  assert r.failure == FailureCode.BAD_ARGUMENTS and r.done
  assert r.info["budget_exhausted"]
  after = env.step("<answer>1</answer>")
  assert after.failure == FailureCode.BUDGET_EXHAUSTED and after.done


def test_tool_environment_answer_timeout_and_budget():
  env = CounterEnv(tool_timeout_s=0.2, max_turns=2)
  env.reset(env.generate_task(0))
  r = env.step(format_tool_call("hang", {}))
  assert r.failure == FailureCode.TIMEOUT and "timeout" in r.observation
  r = env.step(format_tool_call("inc", {}))
  assert r.failure == FailureCode.BUDGET_EXHAUSTED and r.done
  env.reset(env.generate_task(0))
  r = env.step(format_tool_call("nope", {}))
  assert r.failure == FailureCode.UNKNOWN_TOOL
  r = env.step("<answer>0</answer>")
  assert (r.failure, r.done, r.reward_components) == (
    None,
    True,
    {"success": 1},
  )
  env.reset(env.generate_task(0))
  crash = env.step("<answer>crash</answer>")
  assert crash.failure == FailureCode.TOOL_ERROR and crash.done
  assert "verifier bug" in crash.info["error"]
  env.close()
  # Reset after close: tools work again (the demos close each env they
  # replay; a reused one once answered every call "shut down").
  env.reset(env.generate_task(0))
  r = env.step(format_tool_call("inc", {}))
  assert r.failure is None and "1" in r.observation, r
  env.close()
  # An executor the env was given is its owner's: closing the env leaves it.
  with ToolExecutor(timeout_s=0.2) as shared:
    env = CounterEnv(executor=shared)
    env.reset(env.generate_task(0))
    env.close()
    assert not shared.closed and env.executor is shared
  assert shared.closed


def test_tool_environment_tags_protocol():
  env = CounterEnv(protocol="tags")
  env.reset(env.generate_task(0))
  r = env.step("<search>x</search>")
  assert r.failure == FailureCode.UNKNOWN_TOOL
  assert r.observation.strip().startswith("<information>")
  with pytest.raises(ValueError):
    CounterEnv(protocol="yaml")
