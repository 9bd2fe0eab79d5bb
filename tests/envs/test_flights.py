"""Tests for the flight-booking tool environment."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.envs import flights as fl
from agentic_rl.envs import make
from agentic_rl.envs.parsing import parse_tool_call
from agentic_rl.types import ActionKind, FailureCode, Task

SEEDS = range(60)
DIFFICULTIES = range(5)


def call(name, **arguments):
  return fl.format_call(name, arguments)


def search(task):
  r = task.payload["request"]
  return call(
    "search_flights",
    origin=r["origin"],
    destination=r["destination"],
    date=r["date"],
  )


def play(env, task, actions):
  env.reset(task)
  return [env.step(a) for a in actions]


def solvable(seed, difficulty, sold_out_cheapest=False):
  """A solvable task; optionally one whose cheapest qualifying is sold out."""
  for s in range(seed, seed + 500):
    task = fl.make_task(s, difficulty)
    flights = fl.task_flights(task)
    q = sorted(
      (f for f in flights if fl.qualifies(f, task.payload["request"])),
      key=lambda f: f.price,
    )
    if not sold_out_cheapest or q[0].seats == 0:
      return task, flights, q
  raise AssertionError("no such task")


# -- generation -------------------------------------------------------------


def test_correct_flight_is_cheapest_qualifying_with_seats():
  for seed in SEEDS:
    for d in DIFFICULTIES:
      for unsolvable in (False, True):
        task = fl.make_task(seed, d, unsolvable)
        request = task.payload["request"]
        flights = fl.task_flights(task)
        assert len({f.id for f in flights}) == len(flights)
        ok = [f for f in flights if fl.qualifies(f, request) and f.seats > 0]
        if unsolvable:
          assert not ok and task.tags == ("unsolvable",)
          assert task.payload["correct"] is None
        else:
          best = min(ok, key=lambda f: f.price)
          assert [f.price for f in ok].count(best.price) == 1
          assert task.payload["correct"] == best.id and not task.tags


def test_difficulty_adds_flights_and_distractors():
  def mean_flights(d):
    return sum(len(fl.make_task(s, d).payload["flights"]) for s in SEEDS) / 60

  counts = [mean_flights(d) for d in DIFFICULTIES]
  assert counts == sorted(counts) and counts[-1] > 2 * counts[0]
  kinds = set()
  for seed in SEEDS:
    task = fl.make_task(seed, 3)
    r = task.payload["request"]
    for f in fl.task_flights(task):
      route = (f.origin, f.destination) == (r["origin"], r["destination"])
      if route and f.date != r["date"]:
        kinds.add("date")
      elif route and fl.minutes(f.departure) >= fl.minutes(r["deadline"]):
        kinds.add("late")
      elif not route:
        kinds.add("route")
      elif f.seats == 0:
        kinds.add("sold_out")
  assert {"date", "late", "route", "sold_out"} <= kinds


def test_prompt_date_is_explicit_then_relative():
  easy = fl.make_task(1, 0)
  assert easy.payload["request"]["date"] in easy.payload["prompt"]
  assert "before 09:00" in easy.payload["prompt"]
  hard = fl.make_task(1, 2)
  assert hard.payload["today"] in hard.payload["prompt"]
  assert hard.payload["request"]["date"] not in hard.payload["prompt"]


def test_task_is_deterministic_and_json_rebuildable():
  env = make("flights")
  for d in DIFFICULTIES:
    task = env.generate_task(5, d)
    assert task == env.generate_task(5, d)
    again = Task.from_dict(json.loads(json.dumps(task.to_dict())))
    assert again == task
    assert env.reset(again) == make("flights").reset(task)


def test_unsolvable_rate_and_both_kinds():
  env = make("flights", unsolvable_rate=1.0)
  kinds = set()
  for seed in range(30):
    task = env.generate_task(seed, 1)
    assert task.tags == ("unsolvable",)
    r = task.payload["request"]
    n = sum(fl.qualifies(f, r) for f in fl.task_flights(task))
    kinds.add("all_sold_out" if n else "none_qualify")
  assert kinds == {"all_sold_out", "none_qualify"}
  env = make("flights", unsolvable_rate=0.0)
  assert not any(env.generate_task(s, 1).tags for s in range(30))


@pytest.mark.parametrize(
  "text, expected",
  [
    ("no flight", True),
    ("No flights.", True),
    ("none", True),
    ("There is no suitable flight", True),
    ("no matching flights found", True),
    ("NV123", False),
    ("book no flight later", False),
    ("", False),
  ],
)
def test_no_flight_answer(text, expected):
  assert fl.is_no_flight_answer(text) == expected


# -- episodes ---------------------------------------------------------------


def test_expert_gets_reward_one_on_many_seeds():
  env = make("flights", unsolvable_rate=0.2)
  for seed in SEEDS:
    for d in DIFFICULTIES:
      task = env.generate_task(seed, d)
      results = play(env, task, env.expert_actions(task))
      final = results[-1]
      assert final.done and final.failure is None, task.id
      assert final.reward_components["success"] == 1.0
      assert all(not r.done and r.failure is None for r in results[:-1])
      progress = sum(r.reward_components.get("progress", 0) for r in results)
      # search + filter (+ the correct flight's seat check if solvable).
      want = 0.2 if task.tags else 0.3
      assert progress == pytest.approx(want)


def test_booking_a_wrong_flight_scores_zero():
  env = make("flights")
  task, flights, q = solvable(0, 2)
  correct = task.payload["correct"]
  wrong = [f for f in flights if f.seats > 0 and f.id != correct]
  assert wrong
  for f in wrong[:5]:
    results = play(env, task, [search(task), call("book", flight_id=f.id)])
    assert results[-1].done and results[-1].failure is None
    assert results[-1].reward_components["success"] == 0.0


def test_booking_sold_out_flight_is_a_tool_error_and_episode_continues():
  env = make("flights")
  task, _, q = solvable(0, 1, sold_out_cheapest=True)
  sold_out = q[0].id
  results = play(
    env,
    task,
    [
      search(task),
      call("book", flight_id=sold_out),
      call("book", flight_id=task.payload["correct"]),
    ],
  )
  failed = results[1]
  assert failed.failure == FailureCode.TOOL_ERROR and not failed.done
  assert "sold out" in failed.observation
  assert "success" not in failed.reward_components
  assert env.inventory[sold_out].seats == 0
  assert results[2].done and results[2].reward_components["success"] == 1.0


def test_booking_decrements_seats():
  env = make("flights")
  task, _, _ = solvable(3, 0)
  correct = task.payload["correct"]
  env.reset(task)
  before = env.inventory[correct].seats
  r = env.step(call("book", flight_id=correct))
  assert r.done and r.reward_components["success"] == 1.0
  assert env.inventory[correct].seats == before - 1
  # The booked inventory shows in the state after the booking.
  assert f"sold={correct}={before - 1}" in env.state_key()
  after = env.step(call("check_seats", flight_id=correct))
  assert after.done and after.failure == FailureCode.BUDGET_EXHAUSTED


def test_negative_tasks_reward_only_no_flight_answers():
  env = make("flights")
  for seed in range(10):
    task = fl.make_task(seed, 1, unsolvable=True)
    no = play(env, task, [search(task), "<answer>no flight</answer>"])
    assert no[-1].done and no[-1].reward_components == {"success": 1.0}
    other = play(env, task, [search(task), "<answer>NV123</answer>"])
    assert other[-1].reward_components == {"success": 0.0}
    bookable = [f for f in fl.task_flights(task) if f.seats > 0]
    booked = play(env, task, [call("book", flight_id=bookable[0].id)])
    assert booked[-1].done
    assert booked[-1].reward_components["success"] == 0.0
  task, _, _ = solvable(0, 1)
  wrong = play(env, task, ["<answer>no flight</answer>"])
  assert wrong[-1].done and wrong[-1].reward_components == {"success": 0.0}


def test_bad_arguments_and_unknown_tool():
  env = make("flights", max_turns=20)
  task, _, _ = solvable(1, 1)
  env.reset(task)
  r = task.payload["request"]
  bad = [
    call("search_flights", origin=r["origin"].lower(),
         destination=r["destination"], date=r["date"]),
    call("search_flights", origin=r["origin"], destination=r["destination"]),
    call("search_flights", origin=r["origin"], destination=r["destination"],
         date=r["date"], airline="SK"),
    call("filter_flights", max_departure="9am"),
    call("filter_flights", max_departure="09:00", max_price="cheap"),
    call("filter_flights", max_departure="09:00", sort_by="seats"),
    call("check_seats", flight_id=7),
    call("book"),
  ]  # fmt: skip
  for text in bad:
    step = env.step(text)
    assert step.failure == FailureCode.BAD_ARGUMENTS and not step.done, text
    assert step.reward_components == {}
  step = env.step(call("cancel", flight_id="SK100"))
  assert step.failure == FailureCode.UNKNOWN_TOOL and not step.done
  assert "book" in step.observation  # names the available tools
  assert env.searched == set()  # nothing ran


def test_tool_errors():
  env = make("flights")
  task, _, _ = solvable(2, 0)
  results = play(
    env,
    task,
    [
      call("filter_flights", max_departure="09:00"),
      call("check_seats", flight_id="XX999"),
      call("book", flight_id="XX999"),
    ],
  )
  assert [r.failure for r in results] == [FailureCode.TOOL_ERROR] * 3
  assert "search_flights first" in results[0].observation
  assert not any(r.done for r in results)


def test_filter_composes_and_sorts():
  env = make("flights")
  task, _, q = solvable(4, 2)
  r = task.payload["request"]
  env.reset(task)
  env.step(search(task))
  out = env.step(call("filter_flights", max_departure=r["deadline"]))
  lines = out.observation.strip().splitlines()[2:-1]
  prices = [int(line.split("$")[1]) for line in lines]
  assert prices == sorted(prices) == [f.price for f in q]
  cap = q[1].price
  env.step(call("filter_flights", max_departure="23:55", max_price=cap,
                sort_by="departure"))  # fmt: skip
  assert set(env.last) == {f.id for f in q if f.price <= cap}
  times = [fl.minutes(env.inventory[i].departure) for i in env.last]
  assert times == sorted(times)


def test_progress_is_paid_once():
  env = make("flights")
  task, _, _ = solvable(6, 1)
  correct = task.payload["correct"]
  steps = [search(task), search(task)]
  steps += [call("check_seats", flight_id=correct)] * 2
  results = play(env, task, steps)
  progress = [r.reward_components["progress"] for r in results]
  assert progress == pytest.approx([0.1, 0.0, 0.1, 0.0])
  wrong_route = call("search_flights", origin=task.payload["request"][
    "destination"], destination=task.payload["request"]["origin"],
    date=task.payload["request"]["date"])  # fmt: skip
  first = play(env, task, [wrong_route])[0]
  assert first.reward_components["progress"] == 0.0


def test_state_key_equal_for_equal_states():
  env = make("flights")
  task, _, q = solvable(0, 3, sold_out_cheapest=True)
  a, b = q[0].id, q[1].id
  check = lambda i: call("check_seats", flight_id=i)  # noqa: E731
  filt = call("filter_flights", max_departure=task.payload["request"][
    "deadline"])  # fmt: skip
  one = play(env, task, [search(task), filt, check(a), check(b), check(a)])
  two = play(env, task, [search(task), filt, check(b), check(a), check(b)])
  keys1 = [r.state_key for r in one]
  keys2 = [r.state_key for r in two]
  assert keys1[:3] == keys2[:3]  # same facts up to the first check
  assert keys1[3] != keys2[3]  # learned about a vs about b
  assert keys1[4] == keys2[4]  # both know a and b now, same turn
  # A malformed turn uses budget but learns nothing: only t differs.
  three = play(env, task, ["oops", search(task)])
  assert three[1].state_key.split("|", 2)[2] == keys1[0].split("|", 2)[2]
  assert three[1].state_key != keys1[0]


def test_budget_exhausted():
  env = make("flights", max_turns=2)
  task, _, _ = solvable(0, 0)
  results = play(env, task, [search(task)] * 3)
  assert [r.done for r in results] == [False, True, True]
  assert results[1].failure == FailureCode.BUDGET_EXHAUSTED


def test_tool_schemas_are_openai_style():
  schemas = make("flights").tool_schemas()
  names = [s["function"]["name"] for s in schemas]
  assert names == ["book", "check_seats", "filter_flights", "search_flights"]
  for s in schemas:
    assert s["type"] == "function"
    assert s["function"]["parameters"]["type"] == "object"


def test_observations_are_compact_ascii():
  env = make("flights")
  for seed in range(5):
    task = fl.make_task(seed, 4)
    obs = [env.reset(task)]
    obs += [r.observation for r in play(env, task, fl.expert_actions(task))]
    assert all(o.isascii() for o in obs)
    assert max(len(o) for o in obs) < 700


# -- properties -------------------------------------------------------------

_PIECES = st.sampled_from(
  ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<think>",
   "</think>", '{"name": "book", "arguments": {"flight_id": "SK1"}}',
   '{"name": "search_flights"', "}", '"arguments": {}', "no flight", " ",
   "\n", "\x00", "é"]
)  # fmt: skip
_TEXT = st.one_of(
  st.text(max_size=80), st.lists(_PIECES, max_size=10).map("".join)
)


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(_TEXT, max_size=6), seed=st.integers(0, 50))
def test_step_never_raises_on_arbitrary_text(texts, seed):
  env = make("flights")
  env.reset(env.generate_task(seed, 1))
  for text in texts:
    r = env.step(text)
    assert isinstance(r.observation, str) and isinstance(r.state_key, str)
    if parse_tool_call(text).kind == ActionKind.MALFORMED:
      assert r.failure == FailureCode.MALFORMED_CALL
    if r.done:
      break


@settings(max_examples=100, deadline=None)
@given(
  arguments=st.dictionaries(
    st.sampled_from(["origin", "destination", "date", "max_departure",
                     "flight_id", "max_price", "sort_by", "x"]),
    st.one_of(st.none(), st.integers(), st.text(max_size=8),
              st.lists(st.integers(), max_size=2)),
    max_size=4,
  ),
  name=st.sampled_from(sorted(fl.SCHEMAS) + ["nope"]),
)  # fmt: skip
def test_arbitrary_arguments_never_raise(arguments, name):
  env = make("flights")
  env.reset(fl.make_task(3, 1))
  r = env.step(fl.format_call(name, arguments))
  assert r.failure in (
    None,
    FailureCode.BAD_ARGUMENTS,
    FailureCode.UNKNOWN_TOOL,
    FailureCode.TOOL_ERROR,
  )
  if name == "nope":
    assert r.failure == FailureCode.UNKNOWN_TOOL


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), difficulty=st.integers(0, 6))
def test_same_seed_same_reset_observation(seed, difficulty):
  a = make("flights")
  b = make("flights")
  assert a.reset(a.generate_task(seed, difficulty)) == b.reset(
    b.generate_task(seed, difficulty)
  )
