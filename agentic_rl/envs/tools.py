"""Tool execution: argument validation, concurrency, timeouts, failure codes.

`ToolExecutor` turns a parsed `Action` into a `ToolOutcome` and never raises:

* unknown tool name              -> UNKNOWN_TOOL
* arguments violate the schema   -> BAD_ARGUMENTS (checked before the call)
* the tool raises                -> TOOL_ERROR (message kept)
* the tool raises `ToolFailure`  -> the code it carries (`ForbiddenError`
                                    -> FORBIDDEN, sandbox timeouts -> TIMEOUT)
* the tool outlives its timeout  -> TIMEOUT

Stuck tools. Python threads cannot be killed, so each call runs in its own
*daemon* thread and the caller waits on it with a deadline. When the deadline
passes the caller gets TIMEOUT at once and the thread is abandoned: it keeps
running in the background until its tool returns (its result is dropped), and
because it is a daemon it never blocks interpreter exit. (A
`ThreadPoolExecutor` would not do: its workers are joined at exit, and a hung
worker would also starve the pool.) Abandoned threads still hold CPU or
memory, so the executor counts the live ones and, past `max_abandoned`,
refuses new calls with TOOL_ERROR instead of piling up threads. Tools that can
spin forever should run their work in a `Sandbox` subprocess, which is
killable; the thread deadline is the backstop.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from agentic_rl.envs.base import Tool
from agentic_rl.types import Action, ActionKind, FailureCode


class ToolFailure(Exception):
  """Raised by a tool to report a specific failure code with a message."""

  code: FailureCode = FailureCode.TOOL_ERROR

  def __init__(self, message: str, code: FailureCode | None = None):
    super().__init__(message)
    if code is not None:
      self.code = code


class ForbiddenError(ToolFailure):
  """The call tried something the environment forbids (-> FORBIDDEN)."""

  code = FailureCode.FORBIDDEN


@dataclasses.dataclass(frozen=True)
class ToolOutcome:
  """The result of one call. `failure` is None on success."""

  output: str
  failure: FailureCode | None = None
  error: str = ""
  seconds: float = 0.0

  @property
  def ok(self) -> bool:
    return self.failure is None


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
  schema = json.loads(schema_json)
  cls = jsonschema.validators.validator_for(schema)
  cls.check_schema(schema)
  return cls(schema)


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> str | None:
  """Checks `arguments` against the tool's JSON schema; returns the error."""
  if not isinstance(arguments, dict):
    return f"arguments must be an object, got {type(arguments).__name__}"
  try:
    schema_json = json.dumps(tool.parameters, sort_keys=True)
    validator = _validator(schema_json)
  except (TypeError, ValueError, jsonschema.SchemaError) as e:
    return f"tool {tool.name!r} has an invalid schema: {e}"
  try:
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
  except Exception as e:  # noqa: BLE001 - exotic values must not escape
    return f"arguments could not be validated: {type(e).__name__}: {e}"
  if error is None:
    return None
  where = "/".join(str(p) for p in error.absolute_path) or "arguments"
  return f"{where}: {error.message}"


def _truncate(text: str, limit: int) -> str:
  if len(text) <= limit:
    return text
  return text[:limit] + f"\n... [truncated {len(text) - limit} characters]"


class _Job:
  """One tool call running in a daemon thread."""

  def __init__(self, index: int, tool: Tool, arguments: dict[str, Any]):
    self.index = index
    self.tool = tool
    self.arguments = arguments
    self.result: Any = None
    self.exception: BaseException | None = None
    self.started = 0.0
    self.deadline = 0.0
    self.thread: threading.Thread | None = None

  def start(self, done: queue.Queue, timeout_s: float) -> None:
    self.started = time.monotonic()
    self.deadline = self.started + timeout_s
    self.thread = threading.Thread(
      target=self._run,
      args=(done,),
      name=f"tool-{self.tool.name}",
      daemon=True,
    )
    self.thread.start()

  def _run(self, done: queue.Queue) -> None:
    try:
      self.result = self.tool.fn(**self.arguments)
    except BaseException as e:  # noqa: BLE001 - SystemExit too, from a tool
      self.exception = e
    done.put(self.index)


class ToolExecutor:
  """Runs tool calls concurrently with a per-call wall-clock timeout."""

  def __init__(
    self,
    max_workers: int = 8,
    timeout_s: float = 10.0,
    max_output_chars: int = 16384,
    max_abandoned: int | None = None,
  ):
    if max_workers < 1:
      raise ValueError(f"max_workers must be >= 1, got {max_workers}")
    if not timeout_s > 0:
      raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    self.max_workers = max_workers
    self.timeout_s = float(timeout_s)
    self.max_output_chars = max_output_chars
    self.max_abandoned = (
      4 * max_workers if max_abandoned is None else max_abandoned
    )
    self._abandoned: list[threading.Thread] = []
    self._lock = threading.Lock()
    self._closed = False

  @property
  def abandoned_threads(self) -> int:
    """Timed-out tool threads that are still running."""
    with self._lock:
      self._abandoned = [t for t in self._abandoned if t.is_alive()]
      return len(self._abandoned)

  def call(self, tools: Mapping[str, Tool], action: Action) -> ToolOutcome:
    return self.run_many([(tools, action)])[0]

  def _precheck(
    self, tools: Mapping[str, Tool], action: Action
  ) -> ToolOutcome | Tool:
    """Everything that fails before a thread starts."""
    if self._closed:
      return ToolOutcome(
        "", FailureCode.TOOL_ERROR, "tool executor is shut down"
      )
    if not isinstance(action, Action) or action.kind != ActionKind.TOOL_CALL:
      kind = getattr(action, "kind", type(action).__name__)
      why = getattr(action, "error", "") or f"not a tool call ({kind})"
      return ToolOutcome("", FailureCode.MALFORMED_CALL, why)
    tool = tools.get(action.name)
    if tool is None:
      names = ", ".join(sorted(tools)) or "none"
      return ToolOutcome(
        "",
        FailureCode.UNKNOWN_TOOL,
        f"unknown tool {action.name!r}; available tools: {names}",
      )
    error = validate_arguments(tool, action.arguments)
    if error is not None:
      return ToolOutcome(
        "", FailureCode.BAD_ARGUMENTS, f"bad arguments for {tool.name}: {error}"
      )
    if self.abandoned_threads >= self.max_abandoned:
      return ToolOutcome(
        "",
        FailureCode.TOOL_ERROR,
        f"{self.max_abandoned} timed-out tool calls are still running; "
        "refusing new calls until they finish",
      )
    return tool

  def _finish(self, job: _Job) -> ToolOutcome:
    seconds = time.monotonic() - job.started
    e = job.exception
    if isinstance(e, ToolFailure):
      return ToolOutcome("", e.code, str(e), seconds)
    if e is not None:
      msg = f"{job.tool.name} raised {type(e).__name__}: {e}"
      return ToolOutcome("", FailureCode.TOOL_ERROR, msg, seconds)
    out = job.result
    if out is None:
      out = ""
    if not isinstance(out, str):
      msg = f"{job.tool.name} returned {type(out).__name__}, expected str"
      return ToolOutcome("", FailureCode.TOOL_ERROR, msg, seconds)
    return ToolOutcome(_truncate(out, self.max_output_chars), None, "", seconds)

  def _abandon(self, job: _Job) -> ToolOutcome:
    with self._lock:
      if job.thread is not None:
        self._abandoned.append(job.thread)
    return ToolOutcome(
      "",
      FailureCode.TIMEOUT,
      f"{job.tool.name} did not finish within {self.timeout_s:g} s",
      time.monotonic() - job.started,
    )

  def run_many(
    self, calls: Sequence[tuple[Mapping[str, Tool], Action]]
  ) -> list[ToolOutcome]:
    """Runs calls concurrently (at most `max_workers` at a time), in order."""
    outcomes: list[ToolOutcome | None] = [None] * len(calls)
    waiting: list[_Job] = []
    for i, (tools, action) in enumerate(calls):
      checked = self._precheck(tools, action)
      if isinstance(checked, ToolOutcome):
        outcomes[i] = checked
      else:
        waiting.append(_Job(i, checked, dict(action.arguments)))
    # A fresh queue per batch: threads abandoned here that finish later
    # report into a queue nobody reads any more.
    done: queue.Queue = queue.Queue()
    running: dict[int, _Job] = {}
    waiting.reverse()
    while waiting or running:
      while waiting and len(running) < self.max_workers:
        job = waiting.pop()
        running[job.index] = job
        job.start(done, self.timeout_s)
      now = time.monotonic()
      next_deadline = min(job.deadline for job in running.values())
      try:
        index = done.get(timeout=max(0.0, next_deadline - now))
      except queue.Empty:
        index = None
      if index is not None and index in running:
        outcomes[index] = self._finish(running.pop(index))
      now = time.monotonic()
      for index in [i for i, j in running.items() if now >= j.deadline]:
        outcomes[index] = self._abandon(running.pop(index))
    return [o for o in outcomes if o is not None]

  def shutdown(self) -> None:
    """Refuses further calls; abandoned daemon threads are left to finish."""
    self._closed = True

  @property
  def closed(self) -> bool:
    return self._closed

  def __enter__(self) -> ToolExecutor:
    return self

  def __exit__(self, *exc: object) -> None:
    self.shutdown()
