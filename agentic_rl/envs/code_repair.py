"""`code_repair`: fix an injected bug in a small generated Python project.

A task is a few procedurally generated functions (arithmetic helpers, string
utilities, list processing) split over one or more modules, with generated
unit tests, and exactly one injected bug (off-by-one, wrong operator, swapped
arguments, wrong constant, dropped step). Difficulty adds functions and
modules and, from difficulty 1, allows the subtler bug kinds; from
difficulty 2 only subtle bugs are drawn. Every bug is checked on the host to
break at least one generated test, so every task is solvable and needed.

Tools (JSON `tool_call` protocol), all acting inside a per-episode `Sandbox`:

* ``search_code(pattern)``: literal substring search over the project (no
  regex, so a policy cannot stall the host with catastrophic backtracking);
* ``read_file(path)``: a file with line numbers (the first 20,000
  characters; the edit tools refuse a longer file, and an edit that would
  make one, rather than write back a cut file);
* ``edit_file(path, old, new)``: replace the one exact occurrence of `old`
  in a module file; test files are read-only (FORBIDDEN);
* or, with ``edit_tool="replace_lines"``, ``replace_lines(path, start, end,
  new)`` in its place: replace lines `start`..`end` (1-based, inclusive, as
  `read_file` numbers them) with `new`, and show the lines written. The
  edit then copies no code into the call, only the fixed text;
* ``run_tests()``: runs the canonical tests in the sandbox (test files are
  rewritten from the task first, so edits to them can never count).

Rewards: the verifier is a fresh canonical test run on ``<answer>..``
(conventionally ``<answer>done</answer>``) together with the task's held-out
checks: calls of the project's functions on arguments the tests do not use,
whose results are compared on the host (``payload["hidden"]``, drawn so that
the bug fails at least one). ``success`` is 1 iff every test and every check
passes, and the episode ends; the observation gives the checks' counts, never
their calls. So a project that special-cases the visible tests (or reads
their expected values) earns nothing. ``hidden_checks=False`` scores the
visible tests alone. With ``finish_on_pass=True`` a ``run_tests`` call that
passes every test also ends the episode, with the same verdict. The
process signal ``progress`` is the rise of the best count of passing
held-out checks so far, as a fraction of all checks, on the ``run_tests``
call that achieved it (so an episode's progress sums to at most the fraction
of checks the bug fails, ``payload["initial_hidden_passed"]`` being the
rest). Like ``success`` it cannot be earned by special-casing the visible
tests. With ``hidden_checks=False``, or a task stored without that count,
it follows the visible tests instead.

The scripted expert (`expert_actions`, for SFT demonstrations) by default
(``expert="oracle"``) starts by searching for the buggy function, a name
the task text does not give, so a policy imitating it learns to guess.
``expert="tests_first"`` acts only on what its observations showed: it
runs the tests first, and their failures name the function;
``expert="read_all"`` never searches: it reads every module the task text
lists, then edits. On the tiny preset the oracle's SFT stage solved more
held-out tasks than tests_first's and fewer than read_all's (3 seeds,
`experiments/code_repair_sft/`); it stays the default so that earlier
numbers reproduce.

`state_key` hashes the module files' contents: two trajectories that reached
the same code share a key, however they got there.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import random
import uuid
from collections.abc import Callable
from typing import Any

from agentic_rl.envs.base import StepResult, Tool, register
from agentic_rl.envs.parsing import format_tool_call
from agentic_rl.envs.sandbox import Sandbox
from agentic_rl.envs.tool_env import AnswerResult, ToolEnvironment
from agentic_rl.envs.tools import ForbiddenError, ToolFailure, ToolOutcome
from agentic_rl.types import Action, FailureCode, Task

# ---------------------------------------------------------------------------
# Function templates. Generated code is data (PEP 8, 4 spaces), not ours.


@dataclasses.dataclass(frozen=True)
class _Bug:
  kind: str
  old: str  # fragment of the correct source
  new: str  # what it becomes
  subtle: bool


@dataclasses.dataclass(frozen=True)
class _Function:
  name: str
  category: str
  source: str
  cases: tuple[tuple[Any, ...], ...]  # argument tuples
  bugs: tuple[_Bug, ...]
  # One argument tuple for the held-out checks, drawn from its own stream.
  draw: Callable[[random.Random], tuple[Any, ...]]


def _pick_name(rng: random.Random, names: tuple[str, ...]) -> str:
  return rng.choice(names)


def _draw_word(
  r: random.Random, shortest: int = 1, longest: int = 9
) -> tuple[str]:
  """A random mixed-case word, vowels and consonants alike."""
  return (
    "".join(
      r.choice("aeiouAEIOUbcdkmrstyBCDKMRSTY")
      for _ in range(r.randint(shortest, longest))
    ),
  )


def _draw_list(r: random.Random) -> tuple[list[int]]:
  return ([r.randint(-12, 12) for _ in range(r.randint(0, 9))],)


def _clamp(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("clamp", "bound", "limit_value"))
  lo = rng.randint(-5, 5)
  hi = lo + rng.randint(3, 9)
  src = (
    f"def {n}(x, lo, hi):\n"
    '    """Returns x limited to the closed interval [lo, hi]."""\n'
    "    if x < lo:\n"
    "        return lo\n"
    "    if x > hi:\n"
    "        return hi\n"
    "    return x\n"
  )
  cases = (
    (lo - 3, lo, hi),
    (hi + 4, lo, hi),
    (lo + 1, lo, hi),
    (hi + 1, lo, hi),
  )
  bugs = (
    _Bug("wrong_operator", "if x > hi:", "if x < hi:", False),
    _Bug("swapped_return", "        return lo\n", "        return hi\n", False),
    _Bug("off_by_one", "if x > hi:", "if x > hi + 1:", True),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    a = r.randint(-20, 20)
    b = a + r.randint(0, 10)
    return (r.choice((a, b, r.randint(a - 5, b + 5))), a, b)

  return _Function(n, "math", src, cases, bugs, draw)


def _power_sum(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("power_sum", "sum_of_powers", "series_total"))
  p = rng.choice((1, 2, 3))
  src = (
    f"def {n}(n):\n"
    f'    """Returns 1**{p} + 2**{p} + ... + n**{p}."""\n'
    "    total = 0\n"
    "    for i in range(1, n + 1):\n"
    f"        total += i ** {p}\n"
    "    return total\n"
  )
  cases = tuple((k,) for k in rng.sample(range(1, 12), 3)) + ((0,),)
  bugs = (
    _Bug("off_by_one", "range(1, n + 1)", "range(1, n)", True),
    _Bug("wrong_operator", "total += i", "total -= i", False),
    _Bug("wrong_constant", "total = 0", "total = 1", True),
  )
  return _Function(n, "math", src, cases, bugs, lambda r: (r.randint(0, 20),))


def _affine(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("rescale", "linear_map", "convert_units"))
  a = rng.randint(2, 9)
  b = rng.randint(1, 30)
  src = (
    f"def {n}(x):\n"
    f'    """Applies the linear map {a} * x + {b}."""\n'
    f"    return {a} * x + {b}\n"
  )
  cases = tuple((x,) for x in rng.sample(range(-20, 20), 3))
  bugs = (
    _Bug("wrong_operator", f"x + {b}\n", f"x - {b}\n", False),
    _Bug("wrong_constant", f"return {a} * x", f"return {a + 1} * x", True),
  )
  return _Function(n, "math", src, cases, bugs, lambda r: (r.randint(-60, 60),))


def _floor_div(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("whole_times", "safe_floor_div", "count_fits"))
  src = (
    f"def {n}(a, b):\n"
    '    """Returns how many whole times b fits into a (0 when b is 0)."""\n'
    "    if b == 0:\n"
    "        return 0\n"
    "    return a // b\n"
  )
  b = rng.randint(2, 7)
  cases = ((b * rng.randint(3, 9) + 1, b), (rng.randint(20, 60), b), (5, 0))
  bugs = (
    _Bug("swapped_args", "return a // b", "return b // a", True),
    _Bug("wrong_operator", "return a // b", "return a % b", False),
    _Bug("wrong_constant", "        return 0\n", "        return 1\n", True),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    return (r.randint(-30, 80), r.choice((0, r.randint(1, 9), r.randint(1, 9))))

  return _Function(n, "math", src, cases, bugs, draw)


_WORDS = (
  "Umbrella",
  "queue",
  "ORANGE",
  "sky",
  "Tutorial",
  "education",
  "rhythm",
  "AUDIO",
  "banana",
)


def _count_vowels(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("count_vowels", "vowel_count", "num_vowels"))
  src = (
    f"def {n}(s):\n"
    '    """Counts the vowels (a, e, i, o, u) in s, ignoring case."""\n'
    '    return sum(1 for c in s.lower() if c in "aeiou")\n'
  )
  cases = tuple((w,) for w in rng.sample(_WORDS, 4))
  bugs = (
    _Bug("dropped_step", "in s.lower() if", "in s if", True),
    _Bug("wrong_constant", '"aeiou"', '"aeio"', True),
    _Bug("wrong_operator", "if c in", "if c not in", False),
  )
  return _Function(n, "text", src, cases, bugs, _draw_word)


_PHRASES = (
  "Racecar",
  "Never odd or even",
  "hello",
  "Step on no pets!",
  "abca",
  "Noon",
  "python",
)


def _palindrome(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("is_palindrome", "reads_same_backwards"))
  src = (
    f"def {n}(s):\n"
    '    """True if s reads the same backwards, ignoring case and spaces'
    ' and punctuation."""\n'
    "    letters = [c.lower() for c in s if c.isalnum()]\n"
    "    return letters == letters[::-1]\n"
  )
  cases = tuple((p,) for p in rng.sample(_PHRASES, 4))
  bugs = (
    _Bug("dropped_step", "[c.lower() for c", "[c for c", True),
    _Bug("wrong_operator", "letters == letters", "letters != letters", False),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    half = _draw_word(r)[0]
    if r.random() < 0.5:  # a mixed-case palindrome with spaces and marks
      text = half + r.choice(("", "x", "Y")) + half[::-1].swapcase()
      return (r.choice(("", " ", "!", ", ")).join(text) + r.choice("?. "),)
    return (half,)

  return _Function(n, "text", src, cases, bugs, draw)


def _pad_left(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("pad_left", "left_pad", "right_align"))
  fill = rng.choice(("0", "*", "."))
  src = (
    f'def {n}(s, width, fill="{fill}"):\n'
    '    """Pads s on the left with fill up to width characters."""\n'
    "    if len(s) >= width:\n"
    "        return s\n"
    "    return fill * (width - len(s)) + s\n"
  )
  cases = (("42", 5), ("abc", 3), ("x", rng.randint(3, 6)), ("", 2))
  bugs = (
    _Bug("off_by_one", "(width - len(s))", "(width - len(s) - 1)", True),
    _Bug(
      "swapped_args",
      "fill * (width - len(s)) + s",
      "s + fill * (width - len(s))",
      False,
    ),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    args = (_draw_word(r, 0, 6)[0], r.randint(0, 9))
    return args + ((r.choice("-#_"),) if r.random() < 0.3 else ())

  return _Function(n, "text", src, cases, bugs, draw)


def _reverse_words(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("reverse_words", "flip_word_order"))
  src = (
    f"def {n}(s):\n"
    '    """Reverses the order of the words in s (single spaces)."""\n'
    '    return " ".join(reversed(s.split()))\n'
  )
  sentences = ("the quick brown fox", "a b", "hello  world", "one", "x y z")
  cases = tuple((t,) for t in rng.sample(sentences, 3))
  bugs = (
    _Bug("dropped_step", "reversed(s.split())", "s.split()", False),
    _Bug("wrong_constant", '" ".join', '"".join', True),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    return (" ".join(_draw_word(r)[0] for _ in range(r.randint(1, 5))),)

  return _Function(n, "text", src, cases, bugs, draw)


def _running_max(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("running_max", "prefix_maxima", "cumulative_max"))
  src = (
    f"def {n}(xs):\n"
    '    """Returns the running maximum of xs."""\n'
    "    out = []\n"
    "    best = None\n"
    "    for x in xs:\n"
    "        if best is None or x > best:\n"
    "            best = x\n"
    "        out.append(best)\n"
    "    return out\n"
  )
  cases = tuple(
    ([rng.randint(-9, 9) for _ in range(rng.randint(3, 7))],) for _ in range(3)
  ) + (([],),)
  bugs = (
    _Bug("wrong_operator", "x > best", "x < best", False),
    _Bug("wrong_variable", "out.append(best)", "out.append(x)", True),
  )
  return _Function(n, "list", src, cases, bugs, _draw_list)


def _chunk(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("chunk", "split_into_chunks", "batched"))
  src = (
    f"def {n}(xs, size):\n"
    '    """Splits xs into consecutive chunks of length size (the last may'
    ' be shorter)."""\n'
    "    return [xs[i:i + size] for i in range(0, len(xs), size)]\n"
  )
  cases = (
    (list(range(rng.randint(5, 9))), 2),
    (list(range(6)), 3),
    ([1], rng.randint(2, 4)),
  )
  bugs = (
    _Bug("off_by_one", "xs[i:i + size]", "xs[i:i + size - 1]", True),
    _Bug(
      "off_by_one", "range(0, len(xs), size)", "range(1, len(xs), size)", True
    ),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    return (list(range(r.randint(0, 11))), r.randint(1, 5))

  return _Function(n, "list", src, cases, bugs, draw)


def _dedupe(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("dedupe", "unique_in_order", "drop_repeats"))
  src = (
    f"def {n}(xs):\n"
    '    """Removes repeated items, keeping first occurrences in order."""\n'
    "    seen = set()\n"
    "    out = []\n"
    "    for x in xs:\n"
    "        if x not in seen:\n"
    "            seen.add(x)\n"
    "            out.append(x)\n"
    "    return out\n"
  )
  cases = tuple(
    ([rng.randint(0, 4) for _ in range(rng.randint(4, 8))],) for _ in range(3)
  )
  bugs = (
    _Bug("wrong_operator", "if x not in seen", "if x in seen", False),
    _Bug("dropped_step", "seen.add(x)", "seen.discard(x)", True),
  )

  def draw(r: random.Random) -> tuple[Any, ...]:
    return ([r.randint(0, 5) for _ in range(r.randint(0, 10))],)

  return _Function(n, "list", src, cases, bugs, draw)


def _mean(rng: random.Random) -> _Function:
  n = _pick_name(rng, ("mean", "average", "arithmetic_mean"))
  src = (
    f"def {n}(xs):\n"
    '    """Arithmetic mean of xs (0.0 for an empty list)."""\n'
    "    if not xs:\n"
    "        return 0.0\n"
    "    return sum(xs) / len(xs)\n"
  )
  cases = (
    ([rng.randint(0, 9) for _ in range(4)],),
    ([1, 2],),
    ([],),
    ([rng.randint(-5, 5) for _ in range(3)],),
  )
  bugs = (
    _Bug("off_by_one", "/ len(xs)", "/ (len(xs) + 1)", True),
    _Bug("wrong_operator", "sum(xs) / len", "sum(xs) * len", False),
  )
  return _Function(n, "list", src, cases, bugs, _draw_list)


_TEMPLATES: tuple[Callable[[random.Random], _Function], ...] = (
  _clamp,
  _power_sum,
  _affine,
  _floor_div,
  _count_vowels,
  _palindrome,
  _pad_left,
  _reverse_words,
  _running_max,
  _chunk,
  _dedupe,
  _mean,
)

_MODULE_OF = {"math": "mathutils", "text": "textutils", "list": "listutils"}

# ---------------------------------------------------------------------------
# Task generation.


def _evaluate(source: str, name: str, args: tuple[Any, ...]) -> tuple:
  """Runs our own generated (trusted) source on the host: (ok, value)."""
  namespace: dict[str, Any] = {}
  try:
    exec(compile(source, "<generated>", "exec"), namespace)
    return True, namespace[name](*args)
  except Exception as e:  # noqa: BLE001 - a buggy variant may crash
    return False, f"{type(e).__name__}"


# The tests' comparison. `result == expected` would ask the result, and an
# object whose __eq__ always says True (or an int subclass that does) would
# pass every test. Expected values are plain builtins, so the result must
# have the same exact type at every level (int and float may meet), and
# `==` then runs only between builtins. Defined before the project module
# is imported, with the builtins it needs bound as defaults: patching
# `builtins.type` at import time changes nothing here.
_SAME = """\
def _same(a, b, _type=type, _len=len, _zip=zip, _all=all, _list=list,
          _seqs=(list, tuple), _dict=dict, _nums=(int, float)):
    if _type(a) is not _type(b):
        return _type(a) in _nums and _type(b) in _nums and a == b
    if _type(a) in _seqs:
        return _len(a) == _len(b) and _all(
            _same(x, y) for x, y in _zip(a, b))
    if _type(a) is _dict:
        return _same(_list(a.items()), _list(b.items()))
    return a == b

"""


def _test_source(module: str, functions: list[_Function]) -> tuple[str, list]:
  """A test module (plain asserts) and the ids of its tests."""
  names = ", ".join(f.name for f in functions)
  lines = [
    f'"""Tests for {module}.py."""',
    "",
    _SAME,
    f"from {module} import {names}",
  ]
  ids = []
  for f in functions:
    for k, args in enumerate(f.cases):
      ok, expected = _evaluate(f.source, f.name, args)
      if not ok:
        raise RuntimeError(f"template {f.name} fails on its own case {args}")
      call = f"{f.name}({', '.join(repr(a) for a in args)})"
      test = f"test_{f.name}_{k}"
      ids.append(f"test_{module}::{test}")
      lines += [
        "",
        "",
        f"def {test}():",
        f"    result = {call}",
        f"    expected = {expected!r}",
        f"    assert _same(result, expected), "
        f'"{call} returned %r, expected %r" % (result, expected)',
      ]
  return "\n".join(lines) + "\n", ids


# The host's copy of the same comparison, for the held-out checks.
_SAME_NAMESPACE: dict[str, Any] = {}
exec(_SAME, _SAME_NAMESPACE)
_same: Callable[[Any, Any], bool] = _SAME_NAMESPACE["_same"]

_HIDDEN_PER_FUNCTION = 6


def _hidden_checks(
  rng: random.Random,
  modules: dict[str, list[_Function]],
  target: _Function,
  buggy: str,
) -> tuple[list[dict[str, Any]], int]:
  """The verifier's held-out checks (calls the policy never sees), and how
  many of them the buggy project passes.

  Per function, `_HIDDEN_PER_FUNCTION` argument tuples the visible tests do
  not use, with the correct source's result; the buggy function gets more
  until at least one check breaks under the bug, so the checks alone can
  tell the bug from its fix. A project that special-cases the visible
  tests' calls (or reads their expected values) passes the tests and fails
  these.
  """
  checks, broken = [], 0
  for module, funcs in sorted(modules.items()):
    for f in funcs:
      seen = {repr(args) for args in f.cases}
      picked, caught = 0, f is not target
      for _ in range(500):
        if picked >= _HIDDEN_PER_FUNCTION and caught:
          break
        args = f.draw(rng)
        ok, want = _evaluate(f.source, f.name, args)
        if not ok or repr(args) in seen:
          continue
        breaks = False
        if f is target:
          ok, got = _evaluate(buggy, f.name, args)
          breaks = not (ok and _same(got, want))
        if picked >= _HIDDEN_PER_FUNCTION and not breaks:
          continue
        seen.add(repr(args))
        picked += 1
        caught = caught or breaks
        broken += breaks
        checks.append(
          {
            "module": module,
            "function": f.name,
            "args": list(args),
            "expected": want,
          }
        )
      if not caught:  # every template's draws reach every bug
        raise RuntimeError(f"no held-out check catches the bug in {f.name}")
  return checks, len(checks) - broken


def _breaks_a_case(f: _Function, buggy: str) -> bool:
  for args in f.cases:
    want = _evaluate(f.source, f.name, args)
    got = _evaluate(buggy, f.name, args)
    if got != want:
      return True
  return False


def _functions_for(difficulty: int) -> int:
  return min(2 + max(difficulty, 0), len(_TEMPLATES) // 2)


def generate_task(seed: int, difficulty: int = 0) -> Task:
  """A deterministic task for (seed, difficulty); see the module docstring."""
  rng = random.Random(f"code_repair:{seed}:{difficulty}")
  makers = rng.sample(_TEMPLATES, _functions_for(difficulty))
  functions = [make(rng) for make in makers]
  split = difficulty >= 2
  modules: dict[str, list[_Function]] = {}
  for f in functions:
    modules.setdefault(_MODULE_OF[f.category] if split else "utils", []).append(
      f
    )
  candidates = [(f, b) for f in functions for b in f.bugs]
  if difficulty <= 0:
    candidates = [(f, b) for f, b in candidates if not b.subtle]
  elif difficulty >= 2:
    candidates = [(f, b) for f, b in candidates if b.subtle]
  rng.shuffle(candidates)
  for target, bug in candidates:
    buggy = target.source.replace(bug.old, bug.new, 1)
    if buggy == target.source or not _breaks_a_case(target, buggy):
      continue
    layout = _assemble(modules, target, buggy)
    old_line, new_line = _changed_line(target.source, buggy)
    files, bug_path = layout
    # The expert edits the whole buggy line, so it must be unique.
    if files[bug_path].count(new_line) == 1:
      break
  else:  # every template has a usable bug; reaching this is a generator bug
    raise RuntimeError(f"no usable bug for seed {seed}")
  tests: dict[str, str] = {}
  test_ids: list[str] = []
  for module, funcs in sorted(modules.items()):
    tests[f"test_{module}.py"], ids = _test_source(module, funcs)
    test_ids += ids
  initial_passed = _host_pass_count(functions, target, buggy)
  # Their own stream: drawing them changes nothing else in the task.
  hidden, hidden_passed = _hidden_checks(
    random.Random(f"code_repair:hidden:{seed}:{difficulty}"),
    modules,
    target,
    buggy,
  )
  return Task(
    id=f"code_repair-d{difficulty}-s{seed}",
    family="code_repair",
    difficulty=difficulty,
    seed=seed,
    tags=(bug.kind,),
    payload={
      "files": files,
      "tests": tests,
      "test_ids": test_ids,
      "initial_passed": initial_passed,
      "hidden": hidden,
      "initial_hidden_passed": hidden_passed,
      "bug": {
        "path": bug_path,
        "function": target.name,
        "kind": bug.kind,
        "buggy_line": new_line,
        "fixed_line": old_line,
      },
    },
  )


def _assemble(
  modules: dict[str, list[_Function]], target: _Function, buggy: str
) -> tuple[dict[str, str], str]:
  """Module files with the bug injected, and the path of the buggy one."""
  files, bug_path = {}, ""
  for module, funcs in sorted(modules.items()):
    body = [buggy if f is target else f.source for f in funcs]
    path = f"{module}.py"
    files[path] = f'"""Helpers: {module}."""\n\n\n' + "\n\n".join(body)
    if target in funcs:
      bug_path = path
  return files, bug_path


def _changed_line(correct: str, buggy: str) -> tuple[str, str]:
  """The (correct, buggy) line pair; one bug changes exactly one line."""
  for a, b in zip(correct.splitlines(), buggy.splitlines(), strict=True):
    if a != b:
      return a, b
  raise RuntimeError("bug did not change any line")


def _host_pass_count(
  functions: list[_Function], target: _Function, buggy: str
) -> int:
  passed = 0
  for f in functions:
    for args in f.cases:
      if f is not target:
        passed += 1
      else:
        want = _evaluate(f.source, f.name, args)
        passed += int(_evaluate(buggy, f.name, args) == want)
  return passed


EDIT_TOOLS = ("edit_file", "replace_lines")
EXPERTS = ("tests_first", "read_all", "oracle")


def buggy_line_number(task: Task) -> int:
  """The 1-based number of the buggy line in its file (it is unique)."""
  bug = task.payload["bug"]
  lines = task.payload["files"][bug["path"]].splitlines()
  return lines.index(bug["buggy_line"]) + 1


def expert_actions(
  task: Task, edit_tool: str = "edit_file", expert: str = "oracle"
) -> list[str]:
  """A scripted expert: the action texts that fix the task's bug.

  `tests_first` acts only on what it has seen: it runs the tests, whose
  failures name the buggy function; searches for that function; reads the
  file the search found; replaces the buggy line with `edit_tool`; checks
  the tests and answers (six turns). `read_all` reads every module the
  task text lists (test files aside, in the listed order), then edits,
  checks and answers: no search, four turns where the project has one
  module. `oracle` starts at the search, for a function name the task
  text does not give (five turns): a policy that imitates it has to guess
  the name, and where the guess is wrong the search's answer is one no
  demonstration showed. Used for SFT demonstrations and tests.
  """
  bug = task.payload["bug"]
  if edit_tool == "edit_file":
    edit = {
      "path": bug["path"],
      "old": bug["buggy_line"],
      "new": bug["fixed_line"],
    }
  elif edit_tool == "replace_lines":
    line = buggy_line_number(task)
    edit = {
      "path": bug["path"],
      "start": line,
      "end": line,
      "new": bug["fixed_line"],
    }
  else:
    raise ValueError(f"edit_tool must be one of {EDIT_TOOLS}: {edit_tool!r}")
  if expert not in EXPERTS:
    raise ValueError(f"expert must be one of {EXPERTS}: {expert!r}")

  def search_and_read(why: str) -> list[str]:
    pattern = f"def {bug['function']}("
    return [
      f"<think>{why}</think>"
      + format_tool_call("search_code", {"pattern": pattern}),
      "<think>Read the module that defines it.</think>"
      + format_tool_call("read_file", {"path": bug["path"]}),
    ]

  if expert == "read_all":
    look = [
      "<think>Read the module.</think>"
      + format_tool_call("read_file", {"path": name})
      for name in sorted(task.payload["files"])  # the modules; tests apart
    ]
  elif expert == "tests_first":
    look = [
      "<think>Run the tests to see what fails.</think>"
      + format_tool_call("run_tests", {})
    ] + search_and_read("The failing tests call this function; find it.")
  else:
    look = search_and_read("Some tests fail. Find the function they exercise.")
  return look + [
    f"<think>This line is wrong ({bug['kind'].replace('_', ' ')}); fix it."
    "</think>" + format_tool_call(edit_tool, edit),
    "<think>Check the fix.</think>" + format_tool_call("run_tests", {}),
    "<think>All tests pass.</think><answer>done</answer>",
  ]


# ---------------------------------------------------------------------------
# Running the tests in the sandbox.

# Runs in the sandbox, in the same interpreter as the project code, so the
# report must not depend on anything project code can rebind. Before the
# first project import, the runner binds the few functions it calls (os.write
# and builtins; str and bytes methods cannot be patched) and takes a private
# copy of stdout for the report, pointing fd 1 at stderr so project output
# cannot garble it. The test modules are compiled from the task's sources,
# not imported, so a project cannot swap them in `sys.modules`.
#
# After the tests, the held-out checks (`probes`: module, function, args)
# call the project's functions and report each result as its repr, only if
# it is built of plain builtins (exact types, checked by identity); the host
# compares it with the expected value, which never enters the sandbox.
#
# The report is one line: a per-run nonce, each test's message (empty =
# passed), then `;` and each check's "=repr" or "!error", all hex-encoded.
# Hostile code that walks the interpreter's frames could still forge the
# test part; the held-out part it can only forge with the right results,
# which is solving the task.
_RUNNER = r"""
def _run(ids, sources, probes, nonce):
    import os
    write, run, build, load, show = os.write, exec, compile, __import__, repr
    kind, text, failed, count, attr = type, str, BaseException, len, getattr
    plain_types = (bool, int, float, str, type(None))
    sequences, mapping, items = (list, tuple), dict, dict.items
    out = os.dup(1)
    os.dup2(2, 1)

    def describe(prefix, error):
        try:
            return "%s%s: %s" % (prefix, kind(error).__name__, error)
        except failed:
            return prefix + "(an exception that cannot be printed)"

    def plain(value, depth):
        t = kind(value)
        for p in plain_types:
            if t is p:
                return True
        if depth > 8:
            return False
        if t is sequences[0] or t is sequences[1]:
            for item in value:
                if not plain(item, depth + 1):
                    return False
            return True
        if t is mapping:
            for key, item in items(value):
                if not (plain(key, depth + 1) and plain(item, depth + 1)):
                    return False
            return True
        return False

    namespaces = {}
    hexes = []
    for test_id in ids:
        module_name, test_name = test_id.split("::")
        namespace = namespaces.get(module_name)
        if namespace is None:
            namespace = {"__name__": module_name, "__builtins__": __builtins__}
            try:
                path = module_name + ".py"
                run(build(sources[module_name], path, "exec"), namespace)
            except failed as e:
                namespace = describe("import failed: ", e)
            namespaces[module_name] = namespace
        if kind(namespace) is text:
            message = namespace
        else:
            try:
                namespace[test_name]()
                message = ""
            except failed as e:
                message = describe("", e)
        hexes.append(message[:300].encode("utf-8", "replace").hex())
    checks = []
    for module_name, function, args in probes:
        try:
            value = attr(load(module_name), function)(*args)
            if not plain(value, 0):
                message = "!not a plain builtin value"
            else:
                message = "=" + show(value)
                if count(message) > 300:
                    message = "!result too long"
        except failed as e:
            message = describe("!", e)
        checks.append(message[:300].encode("utf-8", "replace").hex())
    report = "\n" + nonce + ",".join(hexes) + ";" + ",".join(checks) + "\n"
    report = report.encode()
    while report:
        report = report[write(out, report):]
"""


@dataclasses.dataclass(frozen=True)
class TestReport:
  """One run of the canonical tests, and of the held-out checks if asked."""

  passed: int
  total: int
  failures: dict[str, str]  # test id -> message
  error: str = ""  # the run itself failed (timeout, forbidden, no result)
  failure: FailureCode | None = None
  hidden_passed: int = 0
  hidden_total: int = 0
  hidden_failures: dict[str, str] = dataclasses.field(default_factory=dict)

  @property
  def all_passed(self) -> bool:
    return self.total > 0 and self.passed == self.total

  @property
  def verified(self) -> bool:
    """Every test and every held-out check run passed."""
    return self.all_passed and self.hidden_passed == self.hidden_total

  def summary(self, max_failures: int = 5, hidden: bool = False) -> str:
    """The tests' result; with `hidden`, the held-out checks' counts too."""
    lines = [
      f"Ran {self.total} tests: {self.passed} passed, "
      f"{self.total - self.passed} failed."
    ]
    if self.error:
      lines.append(f"Test run error: {self.error}")
    for test_id, message in list(self.failures.items())[:max_failures]:
      lines.append(f"FAILED {test_id}: {message[:300]}")
    if len(self.failures) > max_failures:
      lines.append(f"... and {len(self.failures) - max_failures} more")
    if hidden and self.hidden_total:  # counts only: the calls stay unseen
      lines.append(
        f"Held-out checks: {self.hidden_passed} of {self.hidden_total} passed."
      )
    return "\n".join(lines)


def _check_label(check: dict[str, Any]) -> str:
  args = ", ".join(repr(a) for a in check["args"])
  return f"{check['module']}.{check['function']}({args})"


def _judge_check(check: dict[str, Any], message: str) -> str:
  """'' if the sandbox's answer to a held-out check is right, else why not."""
  if message.startswith("!"):
    return message[1:] or "error"
  if not message.startswith("=") or len(message) > 300:
    return "malformed result"
  try:
    value = ast.literal_eval(message[1:])
  except Exception:  # noqa: BLE001 - forged text may fail in any way
    return "unreadable result"
  if _same(value, check["expected"]):
    return ""
  return f"returned {message[1:]}, expected {check['expected']!r}"


def _hex_messages(part: str) -> list[str] | None:
  if not part:
    return []
  try:
    return [
      bytes.fromhex(h).decode("utf-8", "replace") for h in part.split(",")
    ]
  except ValueError:
    return None


def run_test_suite(
  sandbox: Sandbox, task: Task, timeout_s: float, hidden: bool = False
) -> TestReport:
  """Rewrites the canonical tests into the sandbox and runs them.

  With `hidden`, the same child process then runs the task's held-out
  checks (`payload["hidden"]`; a task stored before they existed has none)
  and the report counts them; `summary(hidden=True)` shows only their
  counts, never the calls.
  """
  ids = list(task.payload["test_ids"])
  checks = list(task.payload.get("hidden", ())) if hidden else []
  every = {test_id: "not run" for test_id in ids}
  unchecked = {_check_label(c): "not run" for c in checks}

  def failed(error: str, failure: FailureCode | None = None) -> TestReport:
    return TestReport(
      0, len(ids), every, error, failure, 0, len(checks), unchecked
    )

  try:
    for path, text in task.payload["tests"].items():
      sandbox.write_file(path, text)
  except ValueError as e:  # project code put a FIFO or symlink in the way
    return failed(str(e), FailureCode.FORBIDDEN)
  except OSError as e:
    return failed(f"cannot write tests: {e}", FailureCode.TOOL_ERROR)
  sources = {
    path.removesuffix(".py"): text
    for path, text in task.payload["tests"].items()
  }
  probes = [(c["module"], c["function"], c["args"]) for c in checks]
  # A fresh nonce per run, so project code that prints cannot fake a result
  # line it has not seen.
  nonce = f"@@result-{uuid.uuid4().hex}@@"
  code = _RUNNER + f"\n_run({ids!r}, {sources!r}, {probes!r}, {nonce!r})\n"
  res = sandbox.run(
    code=code, timeout_s=timeout_s, memory_mb=256, max_output_bytes=1 << 17
  )
  if res.failure is not None:
    return failed(res.error, res.failure)
  lines = [line for line in res.stdout.splitlines() if line.startswith(nonce)]
  messages = results = None
  if len(lines) == 1 and lines[0].count(";") == 1:
    tests_part, checks_part = lines[0][len(nonce) :].split(";")
    messages = _hex_messages(tests_part)
    results = _hex_messages(checks_part)
  if (
    messages is None
    or results is None
    or len(messages) != len(ids)
    or len(results) != len(checks)
  ):
    if len(lines) > 1:
      why = f"{len(lines)} result lines"
    else:
      why = (res.stderr.strip().splitlines()[-1:] or ["no output"])[0]
    return failed(f"the test runner produced no result ({why})")
  failures = {k: m for k, m in zip(ids, messages, strict=True) if m}
  verdicts = {
    _check_label(c): _judge_check(c, m)
    for c, m in zip(checks, results, strict=True)
  }
  hidden_failures = {k: why for k, why in verdicts.items() if why}
  return TestReport(
    len(ids) - len(failures),
    len(ids),
    failures,
    hidden_passed=len(checks) - len(hidden_failures),
    hidden_total=len(checks),
    hidden_failures=hidden_failures,
  )


# ---------------------------------------------------------------------------
# The environment.

# A project file longer than this is shown cut (read_file says so) and the
# edit tools refuse it, and refuse an edit that would make a file longer:
# an edit writes the whole file back, so it must have read it whole.
_MAX_READ_CHARS = 20000
_MAX_ECHO_LINES = 10  # replace_lines shows at most this many written lines


@register("code_repair")
class CodeRepairEnv(ToolEnvironment):
  """Fix the injected bug with search/read/edit/test tools, then answer."""

  name = "code_repair"
  protocol = "tool_call"
  max_turns = 12

  def __init__(
    self,
    max_turns: int | None = None,
    test_timeout_s: float = 5.0,
    finish_on_pass: bool = False,
    hidden_checks: bool = True,
    edit_tool: str = "edit_file",
    expert: str = "oracle",
    **kwargs: Any,
  ):
    if edit_tool not in EDIT_TOOLS:
      raise ValueError(
        f"code_repair: edit_tool must be one of {EDIT_TOOLS}, got {edit_tool!r}"
      )
    if expert not in EXPERTS:
      raise ValueError(
        f"code_repair: expert must be one of {EXPERTS}, got {expert!r}"
      )
    kwargs.setdefault("tool_timeout_s", test_timeout_s + 5.0)
    super().__init__(max_turns=max_turns, protocol="tool_call", **kwargs)
    self.test_timeout_s = test_timeout_s
    self.finish_on_pass = finish_on_pass
    self.hidden_checks = hidden_checks
    self.edit_tool = edit_tool
    self.expert = expert
    self.task: Task | None = None
    self.sandbox: Sandbox | None = None
    self.best_passed = 0
    # With the held-out checks, `progress` follows them instead of the tests.
    self.best_checks: int | None = None
    self.last_report: TestReport | None = None
    self._finished = False

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    return generate_task(seed, difficulty)

  def expert_actions(self, task: Task) -> list[str]:
    return expert_actions(task, self.edit_tool, self.expert)

  def reset(self, task: Task, seed: int = 0) -> str:
    del seed  # the task fully determines the episode
    if self.sandbox is not None:
      self.sandbox.close()
    self.task = task
    self.sandbox = Sandbox()
    for path, text in {
      **task.payload["files"],
      **task.payload["tests"],
    }.items():
      self.sandbox.write_file(path, text)
    self.best_passed = int(task.payload["initial_passed"])
    initial_checks = task.payload.get("initial_hidden_passed")
    on_checks = self.hidden_checks and task.payload.get("hidden")
    self.best_checks = (
      int(initial_checks) if on_checks and initial_checks is not None else None
    )
    self.last_report = None
    self._finished = False
    self.begin_episode()
    total = len(task.payload["test_ids"])
    files = ", ".join(
      sorted({**task.payload["files"], **task.payload["tests"]})
    )
    edit = {
      "edit_file": "edit_file(path, old, new)",
      "replace_lines": "replace_lines(path, start, end, new)",
    }[self.edit_tool]
    return (
      "A small Python project has a bug: "
      f"{total - self.best_passed} of {total} tests fail.\n"
      f"Files: {files}\n"
      "Find and fix the bug with the tools search_code(pattern), "
      f"read_file(path), {edit} and run_tests(). Call one "
      'tool per turn as <tool_call>{"name": ..., "arguments": {...}}'
      "</tool_call>. Test files are read-only. When the tests pass, reply "
      "<answer>done</answer>."
    )

  # -- tools ------------------------------------------------------------------

  def tools(self) -> dict[str, Tool]:
    string = {"type": "string"}
    line = {"type": "integer", "minimum": 1}
    every = {
      "search_code": Tool(
        "search_code",
        "Lists the lines of project files that contain the literal text.",
        {
          "type": "object",
          "properties": {
            "pattern": {**string, "minLength": 1, "maxLength": 200}
          },
          "required": ["pattern"],
          "additionalProperties": False,
        },
        self._search_code,
      ),
      "read_file": Tool(
        "read_file",
        "Shows a project file with line numbers.",
        {
          "type": "object",
          "properties": {"path": {**string, "minLength": 1, "maxLength": 200}},
          "required": ["path"],
          "additionalProperties": False,
        },
        self._read_file,
      ),
      "edit_file": Tool(
        "edit_file",
        "Replaces the single exact occurrence of `old` with `new` in a "
        "module file (test files are read-only).",
        {
          "type": "object",
          "properties": {
            "path": {**string, "minLength": 1, "maxLength": 200},
            "old": {**string, "minLength": 1, "maxLength": 4000},
            "new": {**string, "maxLength": 4000},
          },
          "required": ["path", "old", "new"],
          "additionalProperties": False,
        },
        self._edit_file,
      ),
      "replace_lines": Tool(
        "replace_lines",
        "Replaces lines start..end (1-based, inclusive, as read_file numbers "
        "them) of a module file with `new` (test files are read-only).",
        {
          "type": "object",
          "properties": {
            "path": {**string, "minLength": 1, "maxLength": 200},
            "start": line,
            "end": line,
            "new": {**string, "maxLength": 4000},
          },
          "required": ["path", "start", "end", "new"],
          "additionalProperties": False,
        },
        self._replace_lines,
      ),
      "run_tests": Tool(
        "run_tests",
        "Runs the project's unit tests and reports failures.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        self._run_tests,
      ),
    }
    # One edit tool is offered: the task text and the expert name it.
    offered = ("search_code", "read_file", self.edit_tool, "run_tests")
    return {name: every[name] for name in offered}

  def _project_files(self) -> list[str]:
    assert self.task is not None
    return sorted({**self.task.payload["files"], **self.task.payload["tests"]})

  def _resolve(self, path: str) -> str:
    """A project file's name; FORBIDDEN outside the sandbox."""
    assert self.sandbox is not None
    try:
      full = self.sandbox.path(path)
    except ValueError as e:
      raise ForbiddenError(str(e)) from None
    name = str(full.relative_to(self.sandbox.root))
    if name not in self._project_files():
      raise ToolFailure(
        f"no project file {path!r}; files: {', '.join(self._project_files())}"
      )
    return name

  def _read_text(self, name: str) -> str:
    """The file's first _MAX_READ_CHARS + 1 characters: longer means cut."""
    assert self.sandbox is not None
    try:
      return self.sandbox.read_file(name, max_chars=_MAX_READ_CHARS + 1)
    except ValueError as e:  # a symlink or FIFO planted by project code
      raise ForbiddenError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
      raise ToolFailure(f"cannot read {name}: {e}") from None

  def _search_code(self, pattern: str) -> str:
    hits = []
    for name in self._project_files():
      text = self._read_text(name)[:_MAX_READ_CHARS]
      for i, line in enumerate(text.splitlines(), 1):
        if pattern in line:
          hits.append(f"{name}:{i}: {line}")
    if not hits:
      return f"No matches for {pattern!r}."
    return "\n".join(hits[:50])

  def _read_file(self, path: str) -> str:
    name = self._resolve(path)
    text = self._read_text(name)
    shown = "\n".join(
      f"{i:4d}| {line}"
      for i, line in enumerate(text[:_MAX_READ_CHARS].splitlines(), 1)
    )
    if len(text) > _MAX_READ_CHARS:  # said first: the tool output is capped
      shown = (
        f"[{name} is longer than {_MAX_READ_CHARS} characters: it is shown "
        "cut, and the edit tools refuse it]\n" + shown
      )
    return shown

  def _editable(self, path: str) -> str:
    """A module file's name (test files are FORBIDDEN)."""
    assert self.task is not None
    name = self._resolve(path)
    if name in self.task.payload["tests"]:
      raise ForbiddenError(f"{name} is a test file; test files are read-only")
    return name

  def _whole_text(self, name: str) -> str:
    """The whole file, for an edit to write back (too long: ToolFailure)."""
    text = self._read_text(name)
    if len(text) > _MAX_READ_CHARS:
      raise ToolFailure(
        f"{name} is longer than {_MAX_READ_CHARS} characters; the edit "
        "tools only edit files they can read whole"
      )
    return text

  def _write(self, name: str, text: str) -> None:
    assert self.sandbox is not None
    if len(text) > _MAX_READ_CHARS:
      raise ToolFailure(
        f"the edit would make {name} {len(text)} characters long, over the "
        f"{_MAX_READ_CHARS}-character limit; {name} is unchanged"
      )
    try:
      self.sandbox.write_file(name, text)
    except ValueError as e:
      raise ForbiddenError(f"cannot write {name}: {e}") from None
    except OSError as e:
      raise ToolFailure(f"cannot write {name}: {e}") from None

  def _edit_file(self, path: str, old: str, new: str) -> str:
    name = self._editable(path)
    text = self._whole_text(name)
    count = text.count(old)
    if count != 1:
      where = "not found" if count == 0 else f"found {count} times"
      raise ToolFailure(
        f"`old` text {where} in {name}; it must match exactly once "
        "(copy it from read_file, without the line numbers)"
      )
    self._write(name, text.replace(old, new, 1))
    return f"Edited {name}: replaced 1 occurrence."

  def _replace_lines(self, path: str, start: int, end: int, new: str) -> str:
    name = self._editable(path)
    lines = self._whole_text(name).splitlines(keepends=True)
    start, end = int(start), int(end)  # the schema allows 7.0 for 7
    if not start <= end <= len(lines):
      raise ToolFailure(
        f"lines {start}-{end} are not in {name}, which has {len(lines)} "
        "lines; need 1 <= start <= end <= that"
      )
    # `new` replaces the lines whole: it keeps the file's line ending after
    # it, and an empty `new` deletes them.
    ending = "\n" if lines[end - 1].endswith("\n") else ""
    written = [new.removesuffix("\n") + ending] if new else []
    self._write(name, "".join(lines[: start - 1] + written + lines[end:]))
    shown = new.removesuffix("\n").splitlines() if new else []
    head = (
      f"Edited {name}: replaced lines {start}-{end} with {len(shown)} "
      f"line{'' if len(shown) == 1 else 's'}"
    )
    if not shown:
      return head + "."
    echo = [
      f"{i:4d}| {line}" for i, line in enumerate(shown[:_MAX_ECHO_LINES], start)
    ]
    if len(shown) > _MAX_ECHO_LINES:
      echo.append(f"     ... {len(shown) - _MAX_ECHO_LINES} more lines")
    return head + ":\n" + "\n".join(echo)

  def _run_tests(self) -> str:
    assert self.sandbox is not None and self.task is not None
    # The held-out checks run beside the tests (one child process): they
    # measure `progress`, and with finish_on_pass a full pass is the
    # verdict. Their counts are shown only then, as the episode ends.
    checks = self.best_checks is not None or (
      self.finish_on_pass and self.hidden_checks
    )
    report = run_test_suite(
      self.sandbox, self.task, self.test_timeout_s, hidden=checks
    )
    self.last_report = report
    if report.failure is not None:
      raise ToolFailure(report.summary(), report.failure)
    return report.summary(hidden=self.finish_on_pass and report.all_passed)

  # -- rewards and state ----------------------------------------------------

  def on_tool_result(
    self, action: Action, outcome: ToolOutcome
  ) -> dict[str, float]:
    if action.name != "run_tests" or self.last_report is None:
      return {}
    report = self.last_report
    self.last_report = None
    components = {}
    if self.best_checks is not None:
      if report.hidden_passed > self.best_checks:
        rise = report.hidden_passed - self.best_checks
        components["progress"] = rise / report.hidden_total
        self.best_checks = report.hidden_passed
    elif report.passed > self.best_passed:
      components["progress"] = (report.passed - self.best_passed) / report.total
    self.best_passed = max(self.best_passed, report.passed)
    if self.finish_on_pass and outcome.ok and report.all_passed:
      components["success"] = float(report.verified)
      self._finished = True
    return components

  def _act(self, action_text: str, key: str) -> StepResult:
    # A pass with finish_on_pass ends the episode here, before the base
    # class's budget check, so a pass on the last turn is no BUDGET_EXHAUSTED.
    result = super()._act(action_text, key)
    if self._finished:
      result.done = True
    return result

  def on_answer(self, text: str) -> AnswerResult:
    assert self.sandbox is not None and self.task is not None
    report = run_test_suite(
      self.sandbox, self.task, self.test_timeout_s, hidden=self.hidden_checks
    )
    return AnswerResult(
      reward_components={"success": float(report.verified)},
      done=True,
      observation=report.summary(hidden=True),
      failure=report.failure,
      info={
        "tests_passed": report.passed,
        "tests_total": report.total,
        "hidden_passed": report.hidden_passed,
        "hidden_total": report.hidden_total,
      },
    )

  def state_key(self) -> str:
    if self.task is None or self.sandbox is None:
      return "code_repair:unset"
    digest = hashlib.sha256()
    for name in sorted(self.task.payload["files"]):
      try:
        content = self.sandbox.read_file(name)
      except (OSError, ValueError, UnicodeDecodeError) as e:
        content = f"<unreadable: {type(e).__name__}>"
      digest.update(name.encode() + b"\0" + content.encode() + b"\0")
    return f"code_repair:{digest.hexdigest()[:16]}"

  def render(self) -> str:
    """The project as text: every file with line numbers, and the budget."""
    if self.task is None:
      return "(no episode)"
    parts = [
      f"code_repair {self.task.id}: turn {self.turns_used}/"
      f"{self.max_turns}, best {self.best_passed}/"
      f"{len(self.task.payload['test_ids'])} tests passing"
    ]
    for name in self._project_files():
      try:
        body = self._read_file(name)
      except ToolFailure as e:
        body = f"<{e}>"
      parts.append(f"--- {name}\n{body}")
    return "\n".join(parts)

  def close(self) -> None:
    if self.sandbox is not None:
      self.sandbox.close()
      self.sandbox = None
    super().close()
