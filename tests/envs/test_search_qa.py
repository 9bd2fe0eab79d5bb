"""Tests for the Search-R1 style QA environment."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.envs import make
from agentic_rl.envs import search_qa as sq
from agentic_rl.envs.parsing import parse_tags
from agentic_rl.types import ActionKind, FailureCode, Task

SEEDS = range(40)
DIFFICULTIES = range(4)


def play(env, task, actions):
  env.reset(task)
  return [env.step(a) for a in actions]


# -- answer scoring goldens (worked by hand) ---------------------------------


@pytest.mark.parametrize(
  "text, expected",
  [
    ("The  Quick, Brown fox!", "quick brown fox"),
    ("An apple a day", "apple day"),
    ("  Keldara. ", "keldara"),
    ("theatre", "theatre"),  # articles only as whole words
    ("", ""),
  ],
)
def test_normalize_answer(text, expected):
  assert sq.normalize_answer(text) == expected


def test_exact_match_goldens():
  assert sq.exact_match("the Keldara", ["Keldara"]) == 1.0
  assert sq.exact_match("KELDARA!", ["x", "Keldara"]) == 1.0
  assert sq.exact_match("Keldara city", ["Keldara"]) == 0.0
  assert sq.exact_match("unknown", ["Keldara"]) == 0.0


def test_token_f1_goldens():
  # 2 shared tokens; precision 2/3, recall 1 -> F1 = 2*(2/3)/(5/3) = 0.8.
  assert sq.token_f1("Brisa Abernathy Voss", ["Brisa Abernathy"]) == (
    pytest.approx(0.8)
  )
  # precision 1, recall 1/2 -> 2/3.
  assert sq.token_f1("Abernathy", ["Brisa Abernathy"]) == pytest.approx(2 / 3)
  assert sq.token_f1("The Abernathy", ["Abernathy"]) == 1.0
  assert sq.token_f1("Voss", ["Brisa Abernathy"]) == 0.0
  assert sq.token_f1("", ["Brisa Abernathy"]) == 0.0
  # The best gold counts.
  assert sq.token_f1("Voss", ["Brisa Abernathy", "Voss"]) == 1.0


# -- generation -------------------------------------------------------------


def test_world_is_deterministic_and_names_unique():
  size = sq.world_size(3)
  a = sq.generate_world(11, size)
  b = sq.generate_world(11, size)
  assert a == b
  assert sq.passages(a) == sq.passages(b)
  assert sq.generate_world(12, size) != a
  people = a.entities("person")
  assert len(people) == size["people"]
  # First and last names are each unique, so a name query is unambiguous.
  assert len({p.split()[0] for p in people}) == len(people)
  assert len({p.split()[1] for p in people}) == len(people)
  assert len(a.kinds) == sum(size.values())


def test_task_is_deterministic_and_json_rebuildable():
  env = make("search_qa")
  for d in DIFFICULTIES:
    task = env.generate_task(7, d)
    assert task == env.generate_task(7, d)
    assert task.family == "search_qa" and task.difficulty == d
    again = Task.from_dict(json.loads(json.dumps(task.to_dict())))
    assert again == task
    assert env.reset(again) == make("search_qa").reset(task)


def test_hops_grow_with_difficulty():
  hops = {d: {len(sq.make_task(s, d).payload["chain"]) for s in SEEDS}
          for d in DIFFICULTIES}  # fmt: skip
  assert hops[0] == {1}
  assert hops[1] == {2}
  assert hops[2] == {2, 3}
  assert hops[3] == {3}


def test_unsolvable_rate():
  assert all(
    "unsolvable"
    in make("search_qa", unsolvable_rate=1.0).generate_task(s, 1).tags
    for s in range(10)
  )
  assert not any(
    make("search_qa", unsolvable_rate=0.0).generate_task(s, 1).tags
    for s in range(10)
  )


# -- retrieval --------------------------------------------------------------


def test_bm25_ranks_gold_passage_first_for_expert_queries():
  for seed in SEEDS:
    for d in DIFFICULTIES:
      task = sq.make_task(seed, d, unsolvable=seed % 4 == 0)
      retriever = sq.task_retriever(task.payload)
      queries = sq.expert_queries(task.payload)
      if task.payload["variant"] != "missing_entity":
        # One evidence passage per hop, one expert query for each.
        assert len(task.payload["gold_docs"]) == len(task.payload["chain"])
        assert len(queries) == len(task.payload["chain"])
      else:
        assert task.payload["gold_docs"] == [] and len(queries) == 1
      for query, gold in zip(queries, task.payload["gold_docs"], strict=False):
        hits = retriever.search(query, 3)
        assert hits and hits[0] == gold, (task.id, query)


def test_retriever_edge_cases():
  r = sq.Retriever(["Alder Voss was born in Qarleth.", "Qarleth is a city."])
  assert r.search("zzzz", 3) == []  # no overlap, no hits
  assert r.search("the", 3) == []  # stopwords only
  assert r.search("Qarleth", 10) == [1, 0]  # k clipped, shorter doc first
  assert r.search("Qarleth", 0) == []


# -- episodes ---------------------------------------------------------------


def test_expert_solves_every_task_including_multi_hop():
  env = make("search_qa", unsolvable_rate=0.2)
  multi_hop = 0
  for seed in SEEDS:
    for d in DIFFICULTIES:
      task = env.generate_task(seed, d)
      results = play(env, task, env.expert_actions(task))
      final = results[-1]
      assert final.done and final.failure is None
      assert final.reward_components == {"success": 1.0, "format": 0.0}
      assert final.info["metrics"] == {"em": 1.0, "f1": 1.0, "format": 1.0}
      assert all(not r.done and r.failure is None for r in results[:-1])
      if not task.tags:
        # Every hop's search finds a new gold passage.
        progress = [r.reward_components["progress"] for r in results[:-1]]
        assert progress == pytest.approx([0.1] * len(progress))
        multi_hop += len(task.payload["chain"]) > 1
  assert multi_hop > 50


def test_negative_tasks_rewarded_only_for_unknown():
  env = make("search_qa")
  variants = set()
  for seed in range(20):
    task = sq.make_task(seed, 2, unsolvable=True)
    assert task.tags == ("unsolvable",)
    assert task.payload["answers"] == [sq.UNKNOWN]
    variants.add(task.payload["variant"])
    searches = env.expert_actions(task)[:-1]
    # The real answer, had the fact not been dropped, is not rewarded.
    full = sq.follow(
      sq.generate_world(seed, task.payload["size"]),
      task.payload["path"][0],
      task.payload["chain"],
    )
    wrong = [full[-1]] if full else []
    cases = [("Unknown.", 1.0), ("Keldara", 0.0), *[(w, 0.0) for w in wrong]]
    for answer, em in cases:
      final = play(env, task, [*searches, f"<answer>{answer}</answer>"])[-1]
      assert final.done and final.reward_components["success"] == em, answer
      assert final.info["metrics"]["em"] == em
  assert variants == {"missing_entity", "missing_fact"}


def test_missing_fact_is_absent_from_passages():
  for seed in range(30):
    task = sq.make_task(seed, 1, unsolvable=True)
    if task.payload["variant"] != "missing_fact":
      continue
    subject, relation = task.payload["drops"][0]
    world = sq.task_world(task.payload)
    assert (subject, relation) not in world.facts
    full = sq.generate_world(seed, task.payload["size"])
    dropped_value = full.facts[subject, relation]
    assert dropped_value not in sq.render_passage(world, subject)


def test_positive_task_answering_unknown_scores_zero():
  env = make("search_qa", reward_metric="f1", format_weight=0.25)
  task = sq.make_task(3, 1)
  final = play(env, task, ["<answer>unknown</answer>"])[-1]
  assert final.done
  assert final.reward_components == {"success": 0.0, "format": 0.25}


def test_reward_metric_and_format_metric():
  task = sq.make_task(3, 2)
  gold = task.payload["answers"][0]
  answer = f"<answer>{gold} extra words</answer>"
  f1 = sq.token_f1(f"{gold} extra words", [gold])
  assert 0 < f1 < 1
  em_env = make("search_qa", format_weight=0.5)
  final = play(em_env, task, [answer])[-1]
  assert final.reward_components == {"success": 0.0, "format": 0.5}
  f1_env = make("search_qa", reward_metric="f1", format_weight=0.5)
  results = play(f1_env, task, ["no tags here", answer])
  assert results[0].failure == FailureCode.MALFORMED_CALL
  assert not results[0].done
  final = results[1]
  assert final.info["metrics"] == {"em": 0.0, "f1": f1, "format": 0.0}
  assert final.reward_components == {"success": f1, "format": 0.0}
  with pytest.raises(ValueError, match="reward_metric"):
    make("search_qa", reward_metric="bleu")


def test_malformed_and_empty_searches():
  env = make("search_qa", max_turns=10)
  task = sq.make_task(1, 1)
  env.reset(task)
  for text in ["<search></search>", "<search>a</search><search>b</search>",
               "<answer>x", "<information>forged</information>"]:  # fmt: skip
    r = env.step(text)
    assert r.failure == FailureCode.MALFORMED_CALL and not r.done, text
  r = env.step("<search>the of</search>")  # a valid call with no hits
  assert r.failure is None and "No results." in r.observation
  assert r.reward_components == {"progress": 0.0}


def test_budget_exhausted():
  env = make("search_qa", max_turns=3)
  task = sq.make_task(2, 0)
  results = play(env, task, ["<search>city</search>"] * 4)
  assert [r.done for r in results] == [False, False, True, True]
  assert results[2].failure == FailureCode.BUDGET_EXHAUSTED
  assert results[3].failure == FailureCode.BUDGET_EXHAUSTED


def test_default_budget_fits_expert_with_slack():
  for d in DIFFICULTIES:
    task = sq.make_task(5, d)
    assert task.payload["max_turns"] >= len(sq.expert_actions(task)) + 1


def test_state_key_depends_on_facts_not_order():
  env = make("search_qa")
  task = sq.make_task(4, 1)
  q1, q2 = sq.expert_queries(task.payload)
  a = play(env, task, [f"<search>{q1}</search>", f"<search>{q2}</search>",
                       "<answer>x</answer>"])  # fmt: skip
  b = play(env, task, [f"<search>{q2}</search>", f"<search>{q1}</search>",
                       "<answer>x</answer>"])  # fmt: skip
  assert a[0].state_key == b[0].state_key  # both start empty
  assert a[1].state_key != b[1].state_key  # different passages seen
  assert a[2].state_key == b[2].state_key  # same set of passages, same turn


def test_observation_wraps_hits_in_information():
  env = make("search_qa")
  task = sq.make_task(9, 0)
  obs = env.reset(task)
  assert task.payload["question"] in obs
  r = env.step(f"<search>{sq.expert_queries(task.payload)[0]}</search>")
  assert r.observation.strip().startswith("<information>")
  assert r.observation.strip().endswith("</information>")
  assert "[1] " in r.observation
  assert obs.isascii() and r.observation.isascii()


def test_tool_schema_is_openai_style():
  (schema,) = make("search_qa").tool_schemas()
  assert schema["type"] == "function"
  assert schema["function"]["name"] == "search"
  assert schema["function"]["parameters"]["required"] == ["query"]


# -- properties -------------------------------------------------------------

_TAGGY = st.lists(
  st.sampled_from(
    ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>",
     "<information>", "unknown", " ", "Voss", "a", "\n", "{", "é"]
  ),
  max_size=12,
).map("".join)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.one_of(st.text(max_size=60), _TAGGY), max_size=6))
def test_step_never_raises_on_arbitrary_text(texts):
  env = make("search_qa")
  task = sq.make_task(0, 1)
  env.reset(task)
  for text in texts:
    r = env.step(text)
    assert isinstance(r.observation, str) and isinstance(r.state_key, str)
    if parse_tags(text).kind == ActionKind.MALFORMED:
      assert r.failure == FailureCode.MALFORMED_CALL
    if r.done:
      break


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), difficulty=st.integers(0, 4))
def test_same_seed_same_reset_observation(seed, difficulty):
  env = make("search_qa")
  task = env.generate_task(seed, difficulty)
  assert env.reset(task) == make("search_qa").reset(
    make("search_qa").generate_task(seed, difficulty)
  )
