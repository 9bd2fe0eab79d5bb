"""code_repair: generation, the scripted expert, rewards, failure codes."""

import ast
import dataclasses
import json
import os
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rl.envs import code_repair, make
from agentic_rl.envs.code_repair import (
  CodeRepairEnv,
  expert_actions,
  generate_task,
)
from agentic_rl.envs.parsing import format_tool_call, parse_tool_call
from agentic_rl.types import FailureCode, Task


@pytest.fixture(scope="module")
def env():
  e = make("code_repair")
  yield e
  e.close()


def _tool(name, **arguments):
  return format_tool_call(name, arguments)


def test_generation_is_deterministic_and_varied():
  a = generate_task(7, 2)
  assert a == generate_task(7, 2)
  assert Task.from_dict(json.loads(json.dumps(a.to_dict()))) == a
  tasks = [generate_task(s, d) for s in range(20) for d in range(4)]
  assert len({t.payload["bug"]["function"] for t in tasks}) >= 8
  assert len({t.payload["bug"]["kind"] for t in tasks}) >= 4
  for t in tasks:
    bug = t.payload["bug"]
    assert bug["buggy_line"] != bug["fixed_line"]
    assert t.payload["files"][bug["path"]].count(bug["buggy_line"]) == 1
    assert t.payload["initial_passed"] < len(t.payload["test_ids"])


def test_difficulty_adds_functions_and_modules():
  def functions(task):
    return sum(src.count("\ndef ") for src in task.payload["files"].values())

  easy = [generate_task(s, 0) for s in range(10)]
  hard = [generate_task(s, 3) for s in range(10)]
  assert all(functions(t) == 2 for t in easy)
  assert all(functions(t) == 5 for t in hard)
  assert all(list(t.payload["files"]) == ["utils.py"] for t in easy)
  assert any(len(t.payload["files"]) > 1 for t in hard)


@pytest.mark.parametrize("difficulty", [0, 1, 2, 4])
def test_expert_solves_generated_tasks(env, difficulty):
  for seed in range(3):
    task = env.generate_task(seed, difficulty)
    env.reset(task)
    results = [env.step(a) for a in expert_actions(task)]
    assert [r.failure for r in results] == [None] * len(results)
    assert [r.done for r in results] == [False] * (len(results) - 1) + [True]
    assert results[-1].reward_components == {"success": 1.0}
    # Progress follows the held-out checks: the fix earns every check the
    # bug failed, as a fraction of all of them.
    checks = len(task.payload["hidden"])
    progress = results[-2].reward_components["progress"]
    assert progress == pytest.approx(
      (checks - task.payload["initial_hidden_passed"]) / checks
    )


def test_the_stored_count_of_checks_the_bug_passes_matches_the_sandbox(env):
  # `initial_hidden_passed` is computed on the host at generation; the
  # sandbox's judge must agree, or progress would pay for nothing.
  for difficulty in range(4):
    for seed in range(6):
      task = generate_task(seed, difficulty)
      env.reset(task)
      report = code_repair.run_test_suite(env.sandbox, task, 5.0, hidden=True)
      assert report.passed == task.payload["initial_passed"]
      assert report.hidden_passed == task.payload["initial_hidden_passed"]
      assert report.hidden_passed < report.hidden_total


def test_wrong_edit_gets_no_reward(env):
  task = generate_task(1, 0)
  bug = task.payload["bug"]
  env.reset(task)
  r = env.step(_tool("run_tests"))
  assert r.failure is None and "failed" in r.observation
  assert "progress" not in r.reward_components
  # A wrong "fix" of the buggy line: still failing, no progress, no success.
  wrong = bug["buggy_line"] + "  # fixed?"
  r = env.step(
    _tool("edit_file", path=bug["path"], old=bug["buggy_line"], new=wrong)
  )
  assert r.failure is None
  r = env.step(_tool("run_tests"))
  assert "progress" not in r.reward_components
  r = env.step("<answer>done</answer>")
  assert r.done and r.reward_components == {"success": 0.0}


def test_state_key_tracks_file_contents(env):
  task = generate_task(2, 1)
  bug = task.payload["bug"]
  env.reset(task)
  start = env.state_key()
  r = env.step(_tool("read_file", path=bug["path"]))
  assert r.state_key == start and env.state_key() == start
  fix = _tool(
    "edit_file", path=bug["path"], old=bug["buggy_line"], new=bug["fixed_line"]
  )
  env.step(fix)
  fixed = env.state_key()
  assert fixed != start
  # Undoing the edit returns to the same key; a fresh episode starts there.
  undo = _tool(
    "edit_file", path=bug["path"], old=bug["fixed_line"], new=bug["buggy_line"]
  )
  assert env.step(undo).state_key == fixed
  assert env.state_key() == start
  env.reset(task)
  assert env.state_key() == start
  assert bug["path"] in env.render()


def test_failure_codes(env):
  task = generate_task(3, 0)
  bug = task.payload["bug"]
  test_file = next(iter(task.payload["tests"]))
  env.reset(task)
  cases = [
    ("I think the bug is on line 3.", FailureCode.MALFORMED_CALL),
    ("<tool_call>{oops}</tool_call>", FailureCode.MALFORMED_CALL),
    (_tool("delete_everything"), FailureCode.UNKNOWN_TOOL),
    (_tool("read_file"), FailureCode.BAD_ARGUMENTS),
    (_tool("read_file", path="utils.py", mode="rb"), FailureCode.BAD_ARGUMENTS),
    (_tool("read_file", path="../../etc/passwd"), FailureCode.FORBIDDEN),
    (_tool("read_file", path="missing.py"), FailureCode.TOOL_ERROR),
    (
      _tool("edit_file", path=test_file, old="assert", new="pass;"),
      FailureCode.FORBIDDEN,
    ),
    (
      _tool("edit_file", path=bug["path"], old="no such text", new="x"),
      FailureCode.TOOL_ERROR,
    ),
  ]
  for text, code in cases:
    r = env.step(text)
    assert r.failure == code, (text, r)
    assert code.value in r.observation and not r.done
  # The budget ran out on the next turns, with the episode ended.
  env.step(_tool("run_tests"))
  env.step(_tool("run_tests"))
  last = env.step(_tool("run_tests"))
  assert last.done and last.failure == FailureCode.BUDGET_EXHAUSTED


def test_broken_and_hostile_project_code(env):
  task = generate_task(4, 0)
  bug = task.payload["bug"]
  path = bug["path"]
  env.reset(task)
  # Breaking the module: every test fails but the run itself is fine.
  env.step(_tool("edit_file", path=path, old=bug["buggy_line"], new="    )("))
  r = env.step(_tool("run_tests"))
  assert r.failure is None and "import failed" in r.observation
  # Project code that hangs at import: the test run times out.
  env.reset(task)
  env.test_timeout_s = 0.5
  hang = bug["buggy_line"] + "\nwhile True:\n    pass"
  env.step(_tool("edit_file", path=path, old=bug["buggy_line"], new=hang))
  r = env.step(_tool("run_tests"))
  assert r.failure == FailureCode.TIMEOUT
  # Project code that tries the network is stopped as FORBIDDEN.
  env.reset(task)
  env.test_timeout_s = 5.0
  net = "import socket\nsocket.create_connection(('127.0.0.1', 9))\n"
  first = task.payload["files"][path].splitlines()[0]
  env.step(_tool("edit_file", path=path, old=first, new=first + "\n" + net))
  r = env.step(_tool("run_tests"))
  assert r.failure == FailureCode.FORBIDDEN
  r = env.step("<answer>done</answer>")
  assert r.reward_components == {"success": 0.0}


@pytest.fixture(scope="module")
def line_env():
  e = make("code_repair", edit_tool="replace_lines")
  yield e
  e.close()


def test_replace_lines_expert_reaches_the_edit_file_experts_code(env, line_env):
  for difficulty in (0, 1, 3):
    for seed in range(3):
      task = generate_task(seed, difficulty)
      env.reset(task)
      line_env.reset(task)
      by_text = [env.step(a) for a in expert_actions(task)]
      by_line = [line_env.step(a) for a in line_env.expert_actions(task)]
      assert [r.failure for r in by_line] == [None] * len(by_line)
      assert "replace_lines" in line_env.expert_actions(task)[-3]
      # Same code after the edit, same rewards on every turn.
      assert by_line[-3].state_key == by_text[-3].state_key
      assert [r.reward_components for r in by_line] == [
        r.reward_components for r in by_text
      ]


def test_replace_lines_edits_by_number(line_env):
  task = generate_task(0, 0)  # utils.py: 13 lines, newline-terminated
  path = task.payload["bug"]["path"]
  original = task.payload["files"][path]
  lines = original.splitlines(keepends=True)
  assert len(lines) == 13 and original.endswith("\n")

  def replace(start, end, new):
    return line_env.step(
      _tool("replace_lines", path=path, start=start, end=end, new=new)
    )

  def text():
    return line_env.sandbox.read_file(path)

  line_env.reset(task)
  assert "replace_lines(path, start, end, new)" in line_env.reset(task)
  assert "edit_file" not in line_env.reset(task)
  # Two lines become three; the echo numbers them from `start`.
  r = replace(2, 3, "# a\n# b\n# c")
  assert r.failure is None
  assert r.observation.count("|") == 3 and "   4| # c" in r.observation
  assert text() == "".join(lines[:1] + ["# a\n# b\n# c\n"] + lines[3:])
  # A trailing newline in `new` adds no blank line; the last line keeps
  # the file's final newline.
  line_env.reset(task)
  assert replace(13, 13, "    return 1\n").failure is None
  assert text() == "".join(lines[:12]) + "    return 1\n"
  # Empty `new` deletes the lines.
  line_env.reset(task)
  r = replace(1, 3, "")
  assert r.failure is None and "with 0 lines." in r.observation
  assert text() == "".join(lines[3:])
  # An integral float is a line number; bad ranges name the file's length.
  line_env.reset(task)
  assert replace(1.0, 1.0, lines[0]).failure is None
  assert text() == original
  for start, end in [(5, 4), (13, 14)]:
    r = replace(start, end, "x")
    assert r.failure == FailureCode.TOOL_ERROR
    assert "has 13 lines" in r.observation
  for start, end in [(0, 1), (True, 1), ("1", 1), (1.5, 2)]:
    assert replace(start, end, "x").failure == FailureCode.BAD_ARGUMENTS
  test_file = next(iter(task.payload["tests"]))
  r = line_env.step(
    _tool("replace_lines", path=test_file, start=1, end=1, new="pass")
  )
  assert r.failure == FailureCode.FORBIDDEN
  assert text() == original
  # Only the configured edit tool is offered.
  r = line_env.step(_tool("edit_file", path=path, old="a", new="b"))
  assert r.failure == FailureCode.UNKNOWN_TOOL


@pytest.mark.parametrize("edit_tool", code_repair.EDIT_TOOLS)
def test_edits_never_cut_a_file_longer_than_a_read(edit_tool):
  # An edit writes the whole file back, so it must have read it whole: a
  # file over the read limit is refused, as is an edit that would make one,
  # and read_file says the file is cut. Nothing in the file is lost.
  limit = code_repair._MAX_READ_CHARS
  env = CodeRepairEnv(edit_tool=edit_tool)
  task = generate_task(0, 0)
  bug = task.payload["bug"]
  path, buggy, fixed = bug["path"], bug["buggy_line"], bug["fixed_line"]
  line = 1 + task.payload["files"][path].splitlines().index(buggy)

  def edit(new_line):
    if edit_tool == "edit_file":
      call = _tool("edit_file", path=path, old=buggy, new=new_line)
    else:
      call = _tool(
        "replace_lines", path=path, start=line, end=line, new=new_line
      )
    return env.step(call)

  try:
    env.reset(task)
    long = task.payload["files"][path] + "# pad\n" * (limit // 6 + 1)
    assert len(long) > limit
    env.sandbox.write_file(path, long)
    r = env.step(_tool("read_file", path=path))
    assert r.failure is None
    assert f"[{path} is longer than {limit} characters" in r.observation
    r = edit(fixed)
    assert r.failure == FailureCode.TOOL_ERROR
    assert f"longer than {limit} characters" in r.observation
    assert env.sandbox.read_file(path) == long
    # Just under the limit, an edit that would cross it is refused; one
    # that stays under goes through.
    short = task.payload["files"][path]
    room = limit - len(short) - (len(fixed) - len(buggy))
    fits = short + "#" * (room - 1) + "\n"
    assert len(fits.replace(buggy, fixed)) == limit
    env.sandbox.write_file(path, fits)
    r = env.step(_tool("read_file", path=path))
    assert r.failure is None and "longer than" not in r.observation
    r = edit(fixed + "  # one comment too many")
    assert r.failure == FailureCode.TOOL_ERROR
    assert f"{path} is unchanged" in r.observation
    assert env.sandbox.read_file(path) == fits
    assert edit(fixed).failure is None
    assert env.sandbox.read_file(path) == fits.replace(buggy, fixed)
  finally:
    env.close()


def test_an_unknown_edit_tool_or_expert_is_a_config_error():
  with pytest.raises(ValueError, match="edit_tool must be one of"):
    make("code_repair", edit_tool="sed")
  with pytest.raises(ValueError, match="edit_tool must be one of"):
    expert_actions(generate_task(0, 0), "sed")
  with pytest.raises(ValueError, match="expert must be one of"):
    make("code_repair", expert="psychic")
  with pytest.raises(ValueError, match="expert must be one of"):
    expert_actions(generate_task(0, 0), expert="psychic")


@pytest.mark.parametrize("edit_tool", code_repair.EDIT_TOOLS)
@pytest.mark.parametrize("expert", ["tests_first", "read_all"])
def test_the_honest_experts_act_only_on_what_they_have_seen(expert, edit_tool):
  # Each argument these experts copy (the function searched for, the file
  # read or edited, the line replaced) appeared in an observation before
  # the call; only the fixed text is their own. The oracle's search name is
  # in no observation before it: a policy imitating it would have to guess.
  env = CodeRepairEnv(edit_tool=edit_tool, expert=expert)
  for difficulty in range(5):
    for seed in range(4):
      task = generate_task(seed, difficulty)
      bug = task.payload["bug"]
      seen = env.reset(task)
      assert f"def {bug['function']}(" not in seen
      oracle = expert_actions(task, edit_tool)  # the default
      assert len(oracle) == 5 and f"def {bug['function']}(" in oracle[0]
      actions = env.expert_actions(task)
      calls = [parse_tool_call(a) for a in actions]
      tools = [c.name or c.kind for c in calls]
      assert tools[-3:] == [edit_tool, "run_tests", "answer"]
      if expert == "tests_first":
        assert tools[:-3] == ["run_tests", "search_code", "read_file"]
      else:  # every module once, in the listed order
        assert tools[:-3] == ["read_file"] * len(task.payload["files"])
        reads = [c.arguments["path"] for c in calls[:-3]]
        assert reads == sorted(task.payload["files"])
      for turn, action in enumerate(actions, 1):
        copied = dict(parse_tool_call(action).arguments or {})
        if "pattern" in copied:  # the name, without "def " and "("
          copied["pattern"] = copied["pattern"][4:-1]
        if copied.pop("new", None) is not None:
          if edit_tool == "replace_lines":  # as read_file numbers it
            assert copied.pop("end") == copied["start"]
            copied["start"] = f"{copied['start']:4d}| {bug['buggy_line']}"
        for value in copied.values():
          assert value in seen, (task.id, turn, value)
        r = env.step(action)
        assert r.failure is None, (task.id, turn, r)
        seen += r.observation
      assert r.reward_components == {"success": 1.0}
  env.close()


def test_finish_on_pass():
  env = CodeRepairEnv(finish_on_pass=True)
  task = generate_task(5, 1)
  env.reset(task)
  results = [env.step(a) for a in expert_actions(task)[:-1]]
  assert results[-1].done
  assert results[-1].reward_components["success"] == 1.0
  env.close()


def test_finish_on_pass_on_the_last_turn_is_no_budget_failure():
  task = generate_task(0, 0)
  actions = expert_actions(task)[:-1]  # the answer is not needed
  env = CodeRepairEnv(finish_on_pass=True, max_turns=len(actions))
  env.reset(task)
  results = [env.step(a) for a in actions]
  env.close()
  last = results[-1]
  assert last.done and last.failure is None
  assert last.reward_components["success"] == 1.0
  assert "budget_exhausted" not in last.info
  assert "budget" not in last.observation


def _edit_first_line(env, task, extra):
  path = task.payload["bug"]["path"]
  first = task.payload["files"][path].splitlines()[0]
  r = env.step(_tool("edit_file", path=path, old=first, new=extra + first))
  assert r.failure is None, r


def test_project_code_cannot_fake_the_verdict():
  # Each hack runs in the same interpreter as the tests, before they run;
  # none fixes the bug, so every answer must score 0.
  task = generate_task(0, 0)
  hacks = {
    "blank failures in json.dumps": (
      "import json as _j\n_d = _j.dumps\n"
      "_j.dumps = lambda r, *a, **k: _d({t: '' for t in r})"
      " if isinstance(r, dict) else _d(r, *a, **k)\n"
    ),
    "swap the test module": (
      "import sys, types\nm = types.ModuleType('test_utils')\n"
      "m.__getattr__ = lambda name: (lambda: None)\n"
      "sys.modules['test_utils'] = m\n"
    ),
    "print a result line": (
      "print('@@result-0@@{}')\nimport os\nos.write(1, b'\\n{}\\n')\n"
    ),
    "exit before the report": "import os\nos._exit(0)\n",
  }
  env = CodeRepairEnv()
  for name, hack in hacks.items():
    env.reset(task)
    _edit_first_line(env, task, hack)
    r = env.step("<answer>done</answer>")
    assert r.done and r.reward_components == {"success": 0.0}, (name, r)
    assert r.info["tests_passed"] < r.info["tests_total"], name
  # Output from project code does not disturb an honest report.
  env.reset(task)
  for a in expert_actions(task)[:-2]:
    env.step(a)
  _edit_first_line(env, task, "import os\nos.write(1, b'noise')\nprint(1)\n")
  r = env.step("<answer>done</answer>")
  assert r.reward_components == {"success": 1.0}, r
  env.close()


def test_results_that_claim_equality_do_not_pass():
  # Appended to the buggy module, after its functions: every public
  # function returns an object equal to anything. None fixes the bug.
  always = "class _Eq:\n    __eq__ = lambda self, other: True\n"
  int_eq = "class _Eq(int):\n    __eq__ = lambda self, other: True\n"
  rebind = (
    "for _n, _f in list(globals().items()):\n"
    "    if callable(_f) and not isinstance(_f, type) and _n[0] != '_':\n"
    "        globals()[_n] = lambda *a, **k: {}\n"
  )
  hacks = {
    "object equal to anything": always + rebind.format("_Eq()"),
    "int subclass equal to anything": int_eq + rebind.format("_Eq(0)"),
    "list of such objects": always + rebind.format("[_Eq()] * 3"),
    "patched builtins.type": (
      "import builtins\nbuiltins.type = lambda x: int\n"
      + always
      + rebind.format("_Eq()")
    ),
  }
  task = generate_task(0, 0)
  path = task.payload["bug"]["path"]
  text = task.payload["files"][path]
  env = CodeRepairEnv()
  for name, hack in hacks.items():
    env.reset(task)
    r = env.step(_tool("edit_file", path=path, old=text, new=text + hack))
    assert r.failure is None, (name, r)
    r = env.step("<answer>done</answer>")
    assert r.reward_components == {"success": 0.0}, (name, r)
    assert r.info["tests_passed"] == 0, (name, r.info)
    assert r.info["hidden_passed"] == 0 < r.info["hidden_total"], name
  # The real fix still passes.
  env.reset(task)
  for a in expert_actions(task)[:-2]:
    env.step(a)
  r = env.step("<answer>done</answer>")
  assert r.reward_components == {"success": 1.0}, r
  env.close()
  # The comparison itself: exact types at every level; int and float meet.
  namespace = {}
  exec(code_repair._SAME, namespace)
  same = namespace["_same"]
  assert same([[1, 2], [3]], [[1, 2], [3]]) and same(0, 0.0)
  assert same({"a": (1, "x")}, {"a": (1, "x")})
  assert not same([1, 2], (1, 2)) and not same(True, 1)
  assert not same([[1, 2]], [[1, 3]]) and not same([1], [1, 1])

  class Eq(str):
    __eq__ = lambda self, other: True  # noqa: E731

  assert not same(Eq("x"), "y") and not same([Eq("x")], ["y"])


def _fixed_files(task):
  bug = task.payload["bug"]
  files = dict(task.payload["files"])
  files[bug["path"]] = files[bug["path"]].replace(
    bug["buggy_line"], bug["fixed_line"]
  )
  return files


def _call(files, check):
  namespace = {}
  exec(files[check["module"] + ".py"], namespace)
  return namespace[check["function"]](*check["args"])


def _visible_calls(task):
  """(function name, args) of every visible test, read from the tests."""
  calls = []
  for text in task.payload["tests"].values():
    for line in text.splitlines():
      if line.startswith("    result = "):
        call = ast.parse(line.strip().removeprefix("result = ")).body[0].value
        args = tuple(ast.literal_eval(a) for a in call.args)
        calls.append((call.func.id, args))
  return calls


def test_every_task_generates_with_held_out_checks_that_catch_its_bug():
  # No "no usable bug": a template's bug once replaced a fragment of its
  # docstring, which left 14 of the first 1000 difficulty-0 seeds (38 the
  # first) with none.
  for difficulty in range(5):
    for seed in range(300 if difficulty == 0 else 60):
      task = generate_task(seed, difficulty)
      checks = task.payload["hidden"]
      bug = task.payload["bug"]
      fixed = _fixed_files(task)
      visible = {(name, repr(args)) for name, args in _visible_calls(task)}
      functions = {c["function"] for c in checks}
      assert functions == {name for name, _ in visible}
      assert len(checks) >= 6 * len(functions)
      caught = 0
      for check in checks:
        call = (check["function"], repr(tuple(check["args"])))
        assert call not in visible, call  # held out from the tests
        assert code_repair._same(_call(fixed, check), check["expected"])
        try:
          got = _call(task.payload["files"], check)
          caught += not code_repair._same(got, check["expected"])
        except Exception:  # noqa: BLE001 - a buggy variant may crash
          caught += 1
      assert caught >= 1, (seed, difficulty, bug)
  # The checks survive storage (a pool keeps tasks as JSON).
  assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_every_template_bug_changes_code_and_can_break_a_test():
  for make_function in code_repair._TEMPLATES:
    reached = set()
    for seed in range(40):
      f = make_function(random.Random(seed))
      for k, bug in enumerate(f.bugs):
        buggy = f.source.replace(bug.old, bug.new, 1)
        old, _ = code_repair._changed_line(f.source, buggy)
        assert '"""' not in old, (f.name, bug)  # code, not the docstring
        if code_repair._breaks_a_case(f, buggy):
          reached.add(k)
    assert len(reached) == len(f.bugs), make_function.__name__


def _special_case_the_tests(task):
  """The buggy module, plus a wrapper that returns the visible tests'
  expected values for their own calls (read off the test files, as a policy
  could with read_file) and the buggy result for any other."""
  bug = task.payload["bug"]
  fixed = _fixed_files(task)
  table = {
    repr(args): _call(
      fixed, {"module": bug["path"][:-3], "function": name, "args": args}
    )
    for name, args in _visible_calls(task)
    if name == bug["function"]
  }
  name = bug["function"]
  return (
    f"\n_table = {table!r}\n_buggy = {name}\n\n"
    f"def {name}(*args):\n"
    "    if repr(args) in _table:\n"
    "        return _table[repr(args)]\n"
    "    return _buggy(*args)\n"
  )


@pytest.mark.parametrize("seed", [0, 3, 11])
def test_held_out_checks_fail_a_project_that_special_cases_the_tests(seed):
  task = generate_task(seed, 1)
  path = task.payload["bug"]["path"]
  text = task.payload["files"][path]
  hack = _tool(
    "edit_file", path=path, old=text, new=text + _special_case_the_tests(task)
  )
  total = len(task.payload["test_ids"])
  outcomes, progress = {}, {}
  for hidden in (False, True):
    env = CodeRepairEnv(hidden_checks=hidden)
    env.reset(task)
    assert env.step(hack).failure is None
    r = env.step(_tool("run_tests"))
    assert f"{total} passed, 0 failed" in r.observation  # the tests are fooled
    progress[hidden] = r.reward_components.get("progress", 0.0)
    outcomes[hidden] = env.step("<answer>done</answer>")
    env.close()
  # On the visible tests the hack earns all the progress there is; on the
  # held-out checks none (the bug still fails the same ones).
  initial = task.payload["initial_passed"]
  assert progress[False] == pytest.approx((total - initial) / total)
  assert progress[True] == 0.0
  # Scored on the visible tests alone the hack wins; with the checks it
  # fails at least one of them and scores 0, and the verdict names counts.
  assert outcomes[False].reward_components == {"success": 1.0}
  assert outcomes[False].info["hidden_total"] == 0
  r = outcomes[True]
  assert r.reward_components == {"success": 0.0}
  assert r.info["tests_passed"] == total
  assert r.info["hidden_passed"] < r.info["hidden_total"]
  assert f"of {r.info['hidden_total']} passed" in r.observation
  assert "(" not in r.observation.split("Held-out")[1]  # no call shown
  # With finish_on_pass the passing run_tests is the verdict: it ends the
  # episode at 0 (the hack) or 1 (the real fix).
  env = CodeRepairEnv(finish_on_pass=True)
  env.reset(task)
  env.step(hack)
  r = env.step(_tool("run_tests"))
  assert r.done and r.reward_components["success"] == 0.0
  assert "Held-out checks" in r.observation
  env.reset(task)
  results = [env.step(a) for a in expert_actions(task)[:-1]]
  assert results[-1].done and results[-1].reward_components["success"] == 1.0
  env.close()


def test_held_out_results_are_judged_on_the_host():
  # What the sandbox may send back, forged or not, against expected [1, 2].
  check = {"module": "m", "function": "f", "args": [0], "expected": [1, 2]}
  judge = code_repair._judge_check
  assert judge(check, "=[1, 2]") == "" and judge(check, "=[1.0, 2]") == ""
  assert judge(check, "=(1, 2)") == "returned (1, 2), expected [1, 2]"
  assert judge(check, "!ValueError: x") == "ValueError: x"
  assert judge(check, "=__import__('os')") == "unreadable result"
  assert judge(check, "=" + "[" * 200 + "]" * 200) != ""
  assert judge(check, "=[1, 2" + " " * 400 + "]") == "malformed result"
  assert judge(check, "[1, 2]") == "malformed result"
  assert judge({**check, "expected": 1}, "=True") != ""  # bool is not int


def test_held_out_results_must_be_plain_builtins():
  # Objects that print as the fixed function's result: a str subclass, and
  # a list subclass installed as builtins.list (the runner bound `list`
  # before project code ran). Neither passes a check.
  task = generate_task(0, 0)
  bug = task.payload["bug"]
  name = bug["function"]
  fixed = _fixed_files(task)[bug["path"]]
  wrappers = {
    "subclass": (
      "\nclass _Fake(str):\n    def __repr__(self):\n"
      "        return repr(_real(*self.args))\n"
      f"_real = {name}\n"
      f"def {name}(*args):\n"
      "    out = _Fake('x')\n    out.args = args\n    return out\n"
    ),
    "patched builtins.list": (
      "\nimport builtins\n"
      f"_real = {name}\n"
      "class _L(list):\n    def __repr__(self):\n"
      "        return repr(_real(*self.args))\n"
      "builtins.list = _L\n"
      f"def {name}(*args):\n"
      "    out = _L()\n    out.args = args\n    return out\n"
    ),
  }
  env = CodeRepairEnv()
  for label, wrapper in wrappers.items():
    env.reset(task)
    old = task.payload["files"][bug["path"]]
    r = env.step(
      _tool("edit_file", path=bug["path"], old=old, new=fixed + wrapper)
    )
    assert r.failure is None, r
    r = env.step("<answer>done</answer>")
    assert r.reward_components == {"success": 0.0}, label
    wrapped = [c for c in task.payload["hidden"] if c["function"] == name]
    assert r.info["hidden_passed"] <= r.info["hidden_total"] - len(wrapped)
  env.close()


def test_a_task_stored_before_held_out_checks_is_scored_on_its_tests(env):
  task = generate_task(2, 0)
  old = dataclasses.replace(
    task,
    payload={k: v for k, v in task.payload.items() if k != "hidden"},
  )
  env.reset(old)
  results = [env.step(a) for a in expert_actions(old)]
  assert results[-1].reward_components == {"success": 1.0}
  assert results[-1].info["hidden_total"] == 0
  total = len(task.payload["test_ids"])
  on_tests = (total - task.payload["initial_passed"]) / total
  assert results[-2].reward_components["progress"] == pytest.approx(on_tests)
  # Checks stored without the count the bug passes: scored on them, but
  # progress follows the tests.
  older = dataclasses.replace(
    task,
    payload={
      k: v for k, v in task.payload.items() if k != "initial_hidden_passed"
    },
  )
  env.reset(older)
  results = [env.step(a) for a in expert_actions(older)]
  assert results[-1].reward_components == {"success": 1.0}
  assert results[-1].info["hidden_total"] == len(task.payload["hidden"])
  assert results[-2].reward_components["progress"] == pytest.approx(on_tests)


def test_forbidden_project_code_keeps_its_code_on_answer(env):
  task = generate_task(0, 0)
  env.reset(task)
  _edit_first_line(env, task, "import socket\nsocket.socket()\n")
  r = env.step(_tool("run_tests"))
  assert r.failure == FailureCode.FORBIDDEN
  r = env.step("<answer>done</answer>")
  assert r.done and r.failure == FailureCode.FORBIDDEN
  assert r.reward_components == {"success": 0.0}


def _step_within(env, text, seconds=20.0):
  """env.step in a thread: a blocked step fails the test, not the suite."""
  out = []
  thread = threading.Thread(target=lambda: out.append(env.step(text)))
  thread.daemon = True
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"step {text[:40]!r} still blocked"
  return out[0]


def test_a_fifo_in_the_project_cannot_hang_the_host():
  task = generate_task(0, 0)
  path = task.payload["bug"]["path"]
  test_file = next(iter(task.payload["tests"]))
  env = CodeRepairEnv(test_timeout_s=2.0)
  env.reset(task)
  # The sandbox guard stops project code from making one ...
  _edit_first_line(env, task, "import os\nos.mkfifo('x.py')\n")
  r = _step_within(env, _tool("run_tests"))
  assert r.failure == FailureCode.FORBIDDEN and "FIFO" in r.observation
  assert not (env.sandbox.root / "x.py").exists()
  # ... and should one get past it (here: made from outside), every host
  # read and write of project files refuses it instead of blocking.
  env.reset(task)
  for name in (path, test_file):
    os.remove(env.sandbox.root / name)
    os.mkfifo(env.sandbox.root / name)
  key = _step_within(env, _tool("read_file", path=path))
  assert key.failure == FailureCode.FORBIDDEN, key
  for action in (
    _tool("search_code", pattern="def"),
    _tool("edit_file", path=path, old="def", new="def"),
    _tool("run_tests"),
  ):
    r = _step_within(env, action)
    assert r.failure == FailureCode.FORBIDDEN and not r.done, (action, r)
  assert "not a regular file" in env.render()
  r = _step_within(env, "<answer>done</answer>")
  assert r.done and r.failure == FailureCode.FORBIDDEN
  assert r.reward_components == {"success": 0.0}
  env.close()


@settings(
  max_examples=60,
  deadline=None,
  suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
  text=st.one_of(
    st.text(max_size=120),
    st.lists(
      st.sampled_from(
        [
          "<tool_call>",
          "</tool_call>",
          "<think>",
          "</think>",
          "<answer>",
          "</answer>",
          '{"name": "read_file", "arguments": {"path": ',
          '"utils.py"',
          '"../x"',
          "}}",
          '{"name": "search_code", "arguments": {"pattern": "def"}}',
          "x",
        ]
      ),
      max_size=8,
    ).map("".join),
  )
)
def test_step_never_raises_on_garbage(env, text):
  env.reset(generate_task(0, 0))
  r = env.step(text)
  assert isinstance(r.observation, str) and isinstance(r.state_key, str)
  action = r.info.get("action", {})
  if action.get("kind") == "malformed":
    assert r.failure == FailureCode.MALFORMED_CALL
  if r.failure is not None:
    assert r.failure.value in r.observation or r.done
