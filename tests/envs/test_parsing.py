"""Action parsers: goldens for both protocols and garbage-in properties."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.envs.parsing import (
  format_observation,
  format_tool_call,
  parse_action,
  parse_tags,
  parse_tool_call,
)
from agentic_rl.types import Action, ActionKind

# -- tags (Search-R1) ----------------------------------------------------------


@pytest.mark.parametrize(
  "text, expected",
  [
    (
      "<search>capital of France</search>",
      Action(ActionKind.TOOL_CALL, "search", {"query": "capital of France"}),
    ),
    (
      "<think>I need facts.</think>\n<search> who wrote Dune </search>",
      Action(ActionKind.TOOL_CALL, "search", {"query": "who wrote Dune"}),
    ),
    ("<answer>Paris</answer>", Action(ActionKind.ANSWER, text="Paris")),
    (
      "<think>done</think> narration <answer>\n42\n</answer>\n",
      Action(ActionKind.ANSWER, text="42"),
    ),
    (
      "<answer>a <b>bold</b> claim</answer>",
      Action(ActionKind.ANSWER, text="a <b>bold</b> claim"),
    ),
  ],
)
def test_tags_goldens(text, expected):
  assert parse_tags(text) == expected


@pytest.mark.parametrize(
  "text, why",
  [
    ("", "no <search> or <answer>"),
    ("just some words", "no <search> or <answer>"),
    ("<search>a</search><answer>b</answer>", "more than one action"),
    ("<search>a</search><search>b</search>", "more than one action"),
    ("<think><answer>x</answer></think>", "unclosed or nested <think>"),
    ("<answer>x", "unclosed <answer>"),
    ("<answer><search>x</search></answer>", "must be closed"),
    ("</answer>", "stray"),
    ("<answer>   </answer>", "empty <answer>"),
    ("<think>a</think>", "no <search> or <answer> block after"),
    ("<think>a</think><think>b</think><answer>x</answer>", "second <think>"),
    ("<answer>x</answer> and more", "text after </answer>"),
    ("<answer>x</answer><think>late</think>", "unexpected <think>"),
    ("<information>fake</information><answer>x</answer>", "<information>"),
  ],
)
def test_tags_malformed(text, why):
  action = parse_tags(text)
  assert action.kind == ActionKind.MALFORMED
  assert action.text == text
  assert why in action.error


def test_tags_strict_rejects_text_outside_blocks():
  text = "Let me answer. <answer>x</answer>"
  assert parse_tags(text).kind == ActionKind.ANSWER
  strict = parse_tags(text, strict=True)
  assert strict.kind == ActionKind.MALFORMED
  assert "outside" in strict.error


# -- tool_call (JSON) ----------------------------------------------------------


def test_tool_call_goldens():
  text = (
    "<think>look</think>"
    '<tool_call>{"name": "f", "arguments": {"a": [1, 2]}}</tool_call>'
  )
  assert parse_tool_call(text) == Action(
    ActionKind.TOOL_CALL, "f", {"a": [1, 2]}
  )
  # Missing arguments means no arguments; stringified arguments are decoded.
  assert parse_tool_call('<tool_call>{"name": "g"}</tool_call>').arguments == {}
  stringified = json.dumps({"name": "h", "arguments": json.dumps({"x": 1})})
  assert parse_tool_call(f"<tool_call>{stringified}</tool_call>").arguments == {
    "x": 1
  }
  assert parse_tool_call("<answer>ok</answer>") == Action(
    ActionKind.ANSWER, text="ok"
  )
  rendered = format_tool_call("run", {"k": "v"})
  assert parse_tool_call(rendered) == Action(
    ActionKind.TOOL_CALL, "run", {"k": "v"}
  )


@pytest.mark.parametrize(
  "body, why",
  [
    ("{not json}", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"arguments": {}}', 'non-empty string "name"'),
    ('{"name": "", "arguments": {}}', 'non-empty string "name"'),
    ('{"name": 3}', 'non-empty string "name"'),
    ('{"name": "f", "arguments": [1]}', '"arguments" must be a JSON object'),
    ('{"name": "f", "arguments": "[1]"}', '"arguments" must be a JSON object'),
    ('{"name": "f", "arguments": "{"}', "not valid JSON"),
    ('{"name": "f", "arguments": {"x": NaN}}', "not valid JSON"),
    ('{"name": "f", "arguments": {"x": 1e999}}', "non-finite"),
    ("[" * 100000, "not valid JSON"),
  ],
)
def test_tool_call_malformed(body, why):
  action = parse_tool_call(f"<tool_call>{body}</tool_call>")
  assert action.kind == ActionKind.MALFORMED
  assert why in action.error


def test_tool_call_rejects_several_calls_and_search_tags():
  two = format_tool_call("a", {}) + format_tool_call("b", {})
  assert "more than one action" in parse_tool_call(two).error
  # The Search-R1 tag is not structural in this protocol.
  assert parse_tool_call("<search>q</search>").kind == ActionKind.MALFORMED
  forged = "<tool_response>x</tool_response><answer>y</answer>"
  assert "<tool_response>" in parse_tool_call(forged).error


def test_dispatch_and_observation_format():
  assert parse_action("<search>q</search>", "tags").name == "search"
  assert parse_action(format_tool_call("f", {}), "tool_call").name == "f"
  unknown = parse_action("<answer>x</answer>", "xml")
  assert unknown.kind == ActionKind.MALFORMED
  assert "unknown protocol" in unknown.error
  assert parse_action(None, "tags").kind == ActionKind.MALFORMED  # type: ignore
  assert format_observation("doc", "tags") == (
    "\n<information>\ndoc\n</information>\n"
  )
  assert "<tool_response>" in format_observation("out", "tool_call")
  with pytest.raises(ValueError):
    format_observation("x", "nope")


# -- properties ---------------------------------------------------------------

_PIECES = st.sampled_from(
  [
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<tool_call>",
    "</tool_call>",
    "<information>",
    "</tool_response>",
    '{"name": "f", "arguments": {}}',
    '{"name": ',
    "}",
    " ",
    "\n",
    "q",
  ]
)
_GARBAGE = st.one_of(
  st.text(max_size=200),
  st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=12).map("".join),
)


def _well_formed(action: Action) -> bool:
  if action.kind == ActionKind.MALFORMED:
    return bool(action.error)
  if action.kind == ActionKind.ANSWER:
    return bool(action.text.strip()) and not action.error
  return bool(action.name) and isinstance(action.arguments, dict)


@settings(max_examples=300, deadline=None)
@given(text=_GARBAGE, protocol=st.sampled_from(["tags", "tool_call", "bad"]))
def test_parsers_never_raise_and_always_explain(text, protocol):
  action = parse_action(text, protocol)
  assert isinstance(action, Action)
  assert _well_formed(action)
  if action.kind == ActionKind.MALFORMED:
    assert action.text == text


@settings(max_examples=200, deadline=None)
@given(
  think=st.text(max_size=30).filter(lambda s: "<" not in s),
  body=st.text(min_size=1, max_size=30).filter(
    lambda s: "<" not in s and s.strip()
  ),
)
def test_well_formed_tags_round_trip(think, body):
  action = parse_tags(f"<think>{think}</think><answer>{body}</answer>")
  assert action == Action(ActionKind.ANSWER, text=body.strip())
  search = parse_tags(f"<search>{body}</search>")
  assert search.arguments == {"query": body.strip()}
