"""Action parsers: policy text in, `Action` out, never an exception.

Two protocols:

* ``"tags"`` (Search-R1): an optional ``<think>..</think>`` followed by
  exactly one ``<search>query</search>`` (a call of the tool ``search``) or
  ``<answer>..</answer>``. Observations come back in
  ``<information>..</information>``.
* ``"tool_call"`` (Hermes/Qwen style): an optional ``<think>..</think>``
  followed by exactly one ``<tool_call>{"name": .., "arguments": {..}}
  </tool_call>`` (JSON) or ``<answer>..</answer>``. Observations come back in
  ``<tool_response>..</tool_response>``.

Rules shared by both protocols, chosen so that a format reward has a crisp
target:

* Only the protocol's own tags are structural; any other markup is content.
* At most one think block, and it must come before the action.
* Exactly one action block; nesting, unclosed or stray tags, two actions and
  empty bodies are malformed.
* The policy may not emit the observation tag (that would forge tool output).
* Free text before the action is tolerated (models narrate); non-whitespace
  text after the action's closing tag is malformed, because the sampler stops
  at that tag and anything after it means the policy did not stop. With
  ``strict=True`` any text outside the blocks is malformed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Literal

from agentic_rl.types import Action, ActionKind

Protocol = Literal["tags", "tool_call"]
PROTOCOLS: tuple[str, ...] = ("tags", "tool_call")

SEARCH_TOOL = "search"


@dataclasses.dataclass(frozen=True)
class _Spec:
  """The structural tags of one protocol."""

  actions: tuple[str, ...]  # tags that carry an action
  observation: str  # tag the environment wraps observations in


_SPECS: dict[str, _Spec] = {
  "tags": _Spec(actions=("search", "answer"), observation="information"),
  "tool_call": _Spec(
    actions=("tool_call", "answer"), observation="tool_response"
  ),
}


@dataclasses.dataclass(frozen=True)
class _Tag:
  name: str
  closing: bool
  start: int
  end: int


def _scan(text: str, spec: _Spec) -> list[_Tag]:
  names = ("think", *spec.actions, spec.observation)
  pattern = re.compile(r"<(/?)(" + "|".join(names) + r")>")
  return [
    _Tag(m.group(2), m.group(1) == "/", m.start(), m.end())
    for m in pattern.finditer(text)
  ]


def _malformed(text: str, why: str) -> Action:
  return Action(kind=ActionKind.MALFORMED, text=text, error=why)


def _split_blocks(
  text: str, spec: _Spec, strict: bool
) -> tuple[str, str] | str:
  """Returns (action tag name, action body), or an error message."""
  tags = _scan(text, spec)
  if not tags:
    wanted = " or ".join(f"<{a}>" for a in spec.actions)
    return f"no {wanted} block found"
  for tag in tags:
    if tag.name == spec.observation:
      return f"the policy may not emit <{spec.observation}> tags"
  i = 0
  cursor = 0  # end of the last consumed block
  outside: list[str] = []
  if not tags[0].closing and tags[0].name == "think":
    if len(tags) < 2 or not (tags[1].name == "think" and tags[1].closing):
      return "unclosed or nested <think> block"
    outside.append(text[: tags[0].start])
    cursor = tags[1].end
    i = 2
  if i >= len(tags):
    wanted = " or ".join(f"<{a}>" for a in spec.actions)
    return f"no {wanted} block after </think>"
  open_tag = tags[i]
  if open_tag.closing:
    return f"stray </{open_tag.name}> without an opening tag"
  if open_tag.name == "think":
    return "a second <think> block (only one is allowed, before the action)"
  if i + 1 >= len(tags):
    return f"unclosed <{open_tag.name}> block"
  close_tag = tags[i + 1]
  if not (close_tag.closing and close_tag.name == open_tag.name):
    return (
      f"<{open_tag.name}> must be closed by </{open_tag.name}> before "
      f"<{'/' if close_tag.closing else ''}{close_tag.name}>"
    )
  if i + 2 < len(tags):
    extra = tags[i + 2]
    if not extra.closing and extra.name in spec.actions:
      return "more than one action block (emit exactly one per turn)"
    slash = "/" if extra.closing else ""
    return f"unexpected <{slash}{extra.name}> after the action"
  outside.append(text[cursor : open_tag.start])
  trailing = text[close_tag.end :]
  if trailing.strip():
    return f"text after </{open_tag.name}> (stop right after the action)"
  if strict and any(part.strip() for part in outside):
    return "text outside the <think> and action blocks"
  body = text[open_tag.end : close_tag.start].strip()
  if not body:
    return f"empty <{open_tag.name}> block"
  return open_tag.name, body


def parse_tags(text: str, strict: bool = False) -> Action:
  """Parses the Search-R1 protocol (see the module docstring)."""
  if not isinstance(text, str):
    return _malformed(str(text), f"action is {type(text).__name__}, not str")
  split = _split_blocks(text, _SPECS["tags"], strict)
  if isinstance(split, str):
    return _malformed(text, split)
  name, body = split
  if name == "answer":
    return Action(kind=ActionKind.ANSWER, text=body)
  return Action(
    kind=ActionKind.TOOL_CALL, name=SEARCH_TOOL, arguments={"query": body}
  )


def _reject_constant(name: str) -> Any:
  raise ValueError(f"non-standard JSON constant {name}")


def _decode_call(body: str) -> tuple[str, dict[str, Any]] | str:
  """Decodes a tool-call JSON body, or returns why it is malformed."""
  try:
    call = json.loads(body, parse_constant=_reject_constant)
  except (ValueError, RecursionError) as e:
    return f"tool call is not valid JSON: {e}"
  if not isinstance(call, dict):
    return f"tool call must be a JSON object, got {type(call).__name__}"
  name = call.get("name")
  if not isinstance(name, str) or not name.strip():
    return 'tool call needs a non-empty string "name"'
  arguments = call.get("arguments", {})
  if isinstance(arguments, str):
    # Some chat templates stringify the arguments object; accept that form.
    try:
      arguments = json.loads(arguments, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
      return f'"arguments" string is not valid JSON: {e}'
  if not isinstance(arguments, dict):
    kind = type(arguments).__name__
    return f'"arguments" must be a JSON object, got {kind}'
  if not _finite(arguments):
    return "tool call arguments hold a non-finite number"
  return name.strip(), arguments


def parse_tool_call(text: str, strict: bool = False) -> Action:
  """Parses the JSON tool-call protocol (see the module docstring)."""
  if not isinstance(text, str):
    return _malformed(str(text), f"action is {type(text).__name__}, not str")
  split = _split_blocks(text, _SPECS["tool_call"], strict)
  if isinstance(split, str):
    return _malformed(text, split)
  tag, body = split
  if tag == "answer":
    return Action(kind=ActionKind.ANSWER, text=body)
  decoded = _decode_call(body)
  if isinstance(decoded, str):
    return _malformed(text, decoded)
  name, arguments = decoded
  return Action(kind=ActionKind.TOOL_CALL, name=name, arguments=arguments)


def parse_action(text: str, protocol: str, strict: bool = False) -> Action:
  """Dispatches on the protocol name; never raises, whatever the input."""
  try:
    if protocol == "tags":
      return parse_tags(text, strict=strict)
    if protocol == "tool_call":
      return parse_tool_call(text, strict=strict)
    return _malformed(
      str(text), f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}"
    )
  except Exception as e:  # noqa: BLE001 - the contract is "never raises"
    return _malformed(str(text), f"parser error: {type(e).__name__}: {e}")


def format_observation(text: str, protocol: str) -> str:
  """Wraps observation text in the protocol's observation tag."""
  if protocol not in _SPECS:
    raise ValueError(f"unknown protocol {protocol!r}; expected {PROTOCOLS}")
  tag = _SPECS[protocol].observation
  return f"\n<{tag}>\n{text}\n</{tag}>\n"


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
  """Renders a call in the `tool_call` protocol (for demos and tests)."""
  payload = json.dumps({"name": name, "arguments": arguments})
  return f"<tool_call>{payload}</tool_call>"


def _finite(value: Any) -> bool:
  """True if `value` holds no NaN/inf floats (JSON-safe arguments)."""
  if isinstance(value, float):
    return math.isfinite(value)
  if isinstance(value, dict):
    return all(_finite(v) for v in value.values())
  if isinstance(value, list):
    return all(_finite(v) for v in value)
  return True
