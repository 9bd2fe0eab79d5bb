"""Task pools: seeds by split, negatives, taxonomy and resumable sampling."""

import collections
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl import envs, rewards
from agentic_rl.data import pool as pool_lib
from agentic_rl.data.pool import (
  PoolEntry,
  TaskPool,
  TaxonomyFilter,
  negatives_to_add,
  task_seed,
)
from agentic_rl.types import Action, ActionKind, Trajectory, Turn

# counter_env sits beside this file; how it imports depends on whether the
# test folders are packages, which this file does not control.
try:
  from counter_env import NAME, Counter
except ImportError:
  from tests.data.counter_env import NAME, Counter


def spec(**kw):
  base = [
    dict(env=NAME, difficulties=[0, 1], counts=[8, 4], split="train"),
    dict(env=NAME, difficulties=[0, 1], counts=3, split="validation"),
    dict(env=NAME, difficulties=[1], counts=[2], split="test"),
  ]
  for e in base:
    e.update(kw)
  return base


@settings(max_examples=200, deadline=None)
@given(
  a=st.tuples(
    st.sampled_from(pool_lib.SPLITS),
    st.integers(0, pool_lib.MAX_DIFFICULTY),
    st.integers(0, pool_lib.DIFFICULTY_SEED_STRIDE - 1),
  ),
  b=st.tuples(
    st.sampled_from(pool_lib.SPLITS),
    st.integers(0, pool_lib.MAX_DIFFICULTY),
    st.integers(0, pool_lib.DIFFICULTY_SEED_STRIDE - 1),
  ),
)
def test_task_seed_is_injective_and_inside_its_split(a, b):
  sa, sb = task_seed(*a), task_seed(*b)
  assert sa in pool_lib.split_seed_range(a[0])
  assert (sa == sb) == (a == b)


def test_split_seed_ranges_are_disjoint():
  ranges = [pool_lib.split_seed_range(s) for s in pool_lib.SPLITS]
  for i, r in enumerate(ranges):
    for q in ranges[i + 1 :]:
      assert r.stop <= q.start or q.stop <= r.start


def test_from_envs_golden_and_disjoint_seeds():
  pool = TaskPool.from_envs(spec())
  assert len(pool) == 12 + 6 + 2
  assert pool.taxonomy()["split"] == {"test": 2, "train": 12, "validation": 6}
  assert pool.taxonomy()["difficulty"] == {"0": 11, "1": 9}
  seeds = {s: {t.seed for t in pool.split(s)} for s in pool_lib.SPLITS}
  assert not seeds["train"] & seeds["validation"]
  assert not seeds["train"] & seeds["test"]
  assert not seeds["validation"] & seeds["test"]
  # the first train task of difficulty 1 is exactly the generator's output
  first = next(t for t in pool if t.split == "train" and t.difficulty == 1)
  assert first.seed == pool_lib.DIFFICULTY_SEED_STRIDE
  assert first == dataclasses.replace(
    Counter().generate_task(first.seed, 1), split="train"
  )
  val = pool.split("validation")[0]
  assert val.seed == pool_lib.SPLIT_SEED_STRIDE and val.split == "validation"
  assert TaskPool.from_envs(spec()) == pool  # deterministic


def test_repeated_entries_continue_the_seed_sequence():
  entry = dict(env=NAME, difficulties=[0], counts=[3])
  pool = TaskPool.from_envs([entry, entry])
  assert [t.seed for t in pool] == [0, 1, 2, 3, 4, 5]


def test_env_options_reach_the_environment():
  pool = TaskPool.from_envs(
    [dict(env=NAME, counts=[1], env_options={"offset": 100})]
  )
  assert pool[0].payload["target"] == 100


def test_native_negatives_are_kept_and_topped_up():
  # train d0 seeds 0..7: 0 and 4 are natively unsolvable (2 of 8).
  pool = TaskPool.from_envs(
    [dict(env=NAME, difficulties=[0], counts=[8], negative_rate=0.5)]
  )
  natives = [t for t in pool if "unsolvable" in t.tags]
  added = [t for t in pool if t.family == pool_lib.OUT_OF_SCOPE]
  assert len(natives) == 2
  # (2 + m) / (8 + m) >= 0.5  =>  m = 4
  assert len(added) == 4 and len(pool) == 12
  assert len(pool.negatives()) == 6
  assert all("out_of_scope" in t.tags for t in added)
  assert all(t.split == "train" and t.difficulty == 0 for t in added)
  no_rate = TaskPool.from_envs([dict(env=NAME, difficulties=[0], counts=[8])])
  assert len(no_rate.negatives()) == 2


@settings(max_examples=300, deadline=None)
@given(
  count=st.integers(0, 500),
  frac=st.floats(0, 1),
  rate=st.floats(0, 0.95),
)
def test_negatives_to_add_is_minimal(count, frac, rate):
  native = int(frac * count)
  m = negatives_to_add(count, native, rate)
  assert m >= 0
  total = count + m
  if total:
    assert (native + m) / total >= rate - 1e-9
  if m > 0:
    assert (native + m - 1) / (total - 1) < rate


def test_out_of_scope_env_and_refusal_verifier():
  env = envs.make(pool_lib.OUT_OF_SCOPE)
  task = env.generate_task(seed=3, difficulty=2)
  assert task == env.generate_task(seed=3, difficulty=2)
  prompt = env.reset(task)
  assert task.payload["prompt"] in prompt
  assert "<answer>I cannot help with that</answer>" in prompt
  tool = env.step("<search>prices</search>")
  assert tool.failure == "unknown_tool" and not tool.done
  done = env.step("<answer>I cannot help with that.</answer>")
  assert done.done and done.failure is None
  assert tool.state_key != done.state_key

  stack = rewards.from_config(rewards.default_config())

  def episode(text):
    t = Turn([], [], [], action=Action(ActionKind.ANSWER, text=text))
    return stack.score_trajectory(Trajectory(task, 0, [t], 0.0, "done"))

  assert rewards.diagnose(episode("I cannot help with that.")) == "success"
  assert rewards.diagnose(episode("Sure, done!")) == "did_wrong"


def test_out_of_scope_prompts_are_disjoint_across_splits():
  env = pool_lib.OutOfScope()
  tasks = {
    split: [
      env.generate_task(task_seed(split, d, i), d)
      for d in (0, 3)
      for i in range(100)
    ]
    for split in pool_lib.SPLITS
  }
  prompts = {s: {t.payload["prompt"] for t in ts} for s, ts in tasks.items()}
  assert not prompts["train"] & prompts["validation"]
  assert not prompts["train"] & prompts["test"]
  assert not prompts["validation"] & prompts["test"]
  # Through a pool spec too: the added negatives of held-out splits are
  # never a training prompt.
  pool = TaskPool.from_envs(spec(negative_rate=0.9))
  added = {
    s: {
      t.payload["prompt"]
      for t in pool.split(s)
      if t.family == pool_lib.OUT_OF_SCOPE
    }
    for s in pool_lib.SPLITS
  }
  assert all(added.values())
  assert not added["train"] & (added["validation"] | added["test"])
  for split, ts in tasks.items():
    requests = dict(pool_lib.out_of_scope_requests(split))
    # Twelve templates, four train fillers each and one per held-out split.
    assert len(requests) == (48 if split == "train" else 12), split
    assert prompts[split] <= set(requests) and len(prompts[split]) > 6
    for t in ts:
      assert ("unsafe" in t.tags) == requests[t.payload["prompt"]]
    assert ts[7] == env.generate_task(ts[7].seed, ts[7].difficulty)
  assert pool_lib.seed_split(task_seed("test", 2, 5)) == "test"
  assert pool_lib.seed_split(len(pool_lib.SPLITS) * 10**9) is None


def test_out_of_scope_budget():
  env = envs.make(pool_lib.OUT_OF_SCOPE, max_steps=2)
  env.reset(env.generate_task(0))
  assert not env.step("garbage").done
  last = env.step("garbage")
  assert last.done and last.failure == "budget_exhausted"


def test_taxonomy_filter():
  pool = TaskPool.from_envs(spec(negative_rate=0.3))
  f = TaxonomyFilter(splits=("train",), tags_any=("arith",), difficulties=(1,))
  picked = pool.filter(f)
  assert len(picked) > 0
  assert all(
    t.split == "train" and "arith" in t.tags and t.difficulty == 1
    for t in picked
  )
  excluded = pool.filter(TaxonomyFilter(exclude_tags=pool_lib.NEGATIVE_TAGS))
  assert len(excluded) + len(pool.negatives()) == len(pool)
  both = pool.filter(TaxonomyFilter(tags_all=("arith", "d1")))
  assert {t.difficulty for t in both} == {1}
  assert TaxonomyFilter.from_dict(f.to_dict()) == f


def test_stratified_takes_even_shares_in_pool_order():
  train = TaskPool.from_envs(spec()).split("train")  # 8 of d0, then 4 of d1
  ids = {d: [t.id for t in train if t.difficulty == d] for d in (0, 1)}
  # 7 over two difficulties: 4 + 3, the first of each in pool order.
  picked = train.stratified(7, (0, 1))
  assert [t.id for t in picked] == ids[0][:4] + ids[1][:3]
  # The order given is the order taken, and the remainder goes first.
  assert [t.id for t in train.stratified(5, [1, 0])] == (
    ids[1][:3] + ids[0][:2]
  )
  assert [t.id for t in train.stratified(3, (1,))] == ids[1][:3]
  # The plain prefix would be all difficulty 0.
  assert {t.difficulty for t in list(train)[:7]} == {0}


@pytest.mark.parametrize(
  "count, difficulties, message",
  [
    (10, (0, 1), "difficulty 1: 5 tasks wanted, the pool holds 4"),
    (4, (0, 2), "difficulty 2: 2 tasks wanted, the pool holds 0"),
    (4, (0, 0), "distinct"),
    (4, (), "distinct"),
    (1, (0, 1), "cannot cover"),
  ],
)
def test_stratified_names_what_is_missing(count, difficulties, message):
  train = TaskPool.from_envs(spec()).split("train")
  with pytest.raises(pool_lib.StratifyError, match=message):
    train.stratified(count, difficulties)


def draw_ids(sampler, n):
  return [t.id for t in sampler.sample(n)]


def test_sampler_is_deterministic_and_resumes_exactly():
  pool = TaskPool.from_envs(spec())
  f = TaxonomyFilter(splits=("train",))
  a = pool.sampler(123, f, {0: 1.0, 1: 3.0})
  first = draw_ids(a, 10)
  state = json.loads(json.dumps(a.state_dict()))
  rest = draw_ids(a, 25)

  b = pool.sampler(999, f)
  b.load_state_dict(state)
  assert draw_ids(b, 25) == rest
  assert b.num_sampled == 35 and b.difficulty_weights == {0: 1.0, 1: 3.0}
  c = pool.sampler(np.random.default_rng(123), f, {0: 1.0, 1: 3.0})
  assert draw_ids(c, 35) == first + rest


def test_sampler_respects_filter_and_weights():
  pool = TaskPool.from_envs(spec())
  s = pool.sampler(0, TaxonomyFilter(splits=("train",)), {0: 1.0, 1: 0.0})
  assert {t.difficulty for t in s.sample(200)} == {0}
  s.set_difficulty_weights({0: 1.0, 1: 3.0})
  counts = collections.Counter(t.difficulty for t in s.sample(4000))
  assert counts[1] / 4000 == pytest.approx(0.75, abs=0.03)
  s.set_difficulty_weights(None)  # uniform over the 12 train tasks (8 + 4)
  counts = collections.Counter(t.difficulty for t in s.sample(4000))
  assert counts[1] / 4000 == pytest.approx(4 / 12, abs=0.03)
  assert all(t.split == "train" for t in s.sample(100))


def test_sampler_errors():
  pool = TaskPool.from_envs(spec())
  s = pool.sampler(0, TaxonomyFilter(splits=("train",)))
  with pytest.raises(ValueError, match="no mass"):
    s.set_difficulty_weights({7: 1.0})
  with pytest.raises(ValueError, match="finite"):
    s.set_difficulty_weights({0: -1.0})
  with pytest.raises(ValueError, match="no task"):
    pool.sampler(0, TaxonomyFilter(families=("nope",)))
  state = s.state_dict()
  other = pool.sampler(0, TaxonomyFilter(splits=("test",)))
  with pytest.raises(pool_lib.SamplerStateError, match="filter"):
    other.load_state_dict(state)
  smaller = TaskPool(pool.tasks[:-1]).sampler(0, s.taxonomy)
  with pytest.raises(pool_lib.SamplerStateError, match="different task pool"):
    smaller.load_state_dict(state)


def test_spec_errors():
  with pytest.raises(pool_lib.PoolSpecError, match="unknown split"):
    PoolEntry(env=NAME, split="dev")
  with pytest.raises(pool_lib.PoolSpecError, match="counts"):
    PoolEntry(env=NAME, difficulties=(0, 1), counts=(1,))
  with pytest.raises(pool_lib.PoolSpecError, match="unknown fields"):
    PoolEntry.from_dict({"env": NAME, "count": 3})
  with pytest.raises(pool_lib.PoolSpecError, match="negative_rate"):
    PoolEntry(env=NAME, negative_rate=1.0)
  with pytest.raises(pool_lib.PoolSpecError, match="difficulty"):
    task_seed("train", pool_lib.MAX_DIFFICULTY + 1, 0)
  with pytest.raises(KeyError, match="unknown environment"):
    TaskPool.from_envs([dict(env="no_such_env")])
  task = Counter().generate_task(1)
  with pytest.raises(pool_lib.DuplicateTaskError):
    TaskPool([task, task])


def test_sokoban_pool_has_held_out_split_and_added_negatives():
  pool = TaskPool.from_envs(
    [
      dict(env="sokoban", difficulties=[0], counts=[3], negative_rate=0.25),
      dict(
        env="sokoban",
        difficulties=[0],
        counts=[2],
        split="validation",
        negative_rate=0.25,
      ),
    ]
  )
  assert pool.taxonomy()["family"] == {"out_of_scope": 2, "sokoban": 5}
  train, val = pool.split("train"), pool.split("validation")
  assert not {t.seed for t in train} & {t.seed for t in val}
  env = envs.make("sokoban")
  for t in pool:
    if t.family == "sokoban":
      assert dataclasses.replace(t, split="train") == env.generate_task(
        t.seed, t.difficulty
      )


class Picky(Counter):
  """Rejects odd seeds, or every seed with `reject_all`."""

  def __init__(self, reject_all: bool = False):
    super().__init__()
    self.reject_all = reject_all

  def generate_task(self, seed, difficulty=0):
    if self.reject_all or seed % 2:
      raise RuntimeError(f"no instance for {seed}")
    return super().generate_task(seed, difficulty)


if "test_picky_data" not in envs.registered():
  envs.register("test_picky_data")(Picky)


def test_rejected_seeds_are_skipped_deterministically():
  pool = TaskPool.from_envs([dict(env="test_picky_data", counts=[3])])
  assert [t.seed for t in pool] == [0, 2, 4]
  assert [s.seed for s in pool.skipped] == [1, 3]
  assert "no instance for 1" in pool.skipped[0].error
  again = TaskPool.from_envs([dict(env="test_picky_data", counts=[3])])
  assert again == pool
  with pytest.raises(pool_lib.TaskGenerationError, match="rejected 32 seeds"):
    TaskPool.from_envs(
      [
        dict(
          env="test_picky_data", counts=[1], env_options={"reject_all": True}
        )
      ]
    )
