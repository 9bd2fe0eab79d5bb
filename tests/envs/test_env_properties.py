"""Property tests shared by the built-in puzzle and reasoning environments.

Arbitrary text never raises from `step`; every rejected action carries a
failure code and leaves the state alone; an accepted action really is a
well-formed answer; `reset` with the same seed reproduces the episode.
"""

import functools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rl import envs
from agentic_rl.envs import frozenlake as fl
from agentic_rl.envs import sokoban as sk
from agentic_rl.envs.parsing import parse_tags
from agentic_rl.types import ActionKind, FailureCode

# name, options, the move vocabulary (None: free-form answers).
ENVS = [
  ("sokoban", {}, sk.MOVES),
  ("sokoban", {"max_actions_per_turn": 3}, sk.MOVES),
  ("frozenlake", {}, fl.MOVES),
  ("frozenlake", {"slippery": True, "max_actions_per_turn": 2}, fl.MOVES),
  ("reasoning_gym", {"family": "chain_sum", "max_attempts": 3}, None),
]
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(ENVS)]

WORDS = ["Up", "down", "LEFT", "Right", "Jump", "", "42", "up,", "||"]
TAGS = ["<think>", "</think>", "<answer>", "</answer>", "<search>", "</search>"]

# Mixes of protocol tags, move names, separators and arbitrary text, so that
# both valid and subtly broken actions are drawn often.
texts = st.one_of(
  st.text(max_size=60),
  st.lists(
    st.one_of(
      st.sampled_from(WORDS + TAGS + [" ", ", ", "\n"]), st.text(max_size=4)
    ),
    max_size=12,
  ).map("".join),
  st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=4).map(
    lambda ws: "<answer>" + " ".join(ws) + "</answer>"
  ),
)

SETTINGS = settings(
  max_examples=100,
  deadline=None,
  suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@functools.cache
def task_for(index: int):
  # Generation is tested separately; examples reuse one task per env.
  name, options, _ = ENVS[index]
  return envs.make(name, **options).generate_task(seed=3, difficulty=1)


def fresh(index: int, seed: int = 0):
  name, options, _ = ENVS[index]
  env = envs.make(name, **options)
  task = task_for(index)
  env.reset(task, seed=seed)
  return env, task


def snapshot(env) -> tuple:
  """The part of an environment's state an action may change."""
  return tuple(
    getattr(env, a, None) for a in ("state", "s", "attempt", "steps", "done")
  )


def well_formed(text: str, moves, max_moves: int) -> bool:
  action = parse_tags(text)
  if action.kind is not ActionKind.ANSWER:
    return False
  if moves is None:
    return True
  words = sk._SEPARATORS.split(action.text.strip())
  names = {m.lower() for m in moves}
  return len(words) <= max_moves and all(w.lower() in names for w in words)


@pytest.mark.parametrize("index", range(len(ENVS)), ids=IDS)
@SETTINGS
@given(actions=st.lists(texts, min_size=1, max_size=6))
def test_arbitrary_text_never_raises_and_failures_are_coded(index, actions):
  env, _ = fresh(index)
  _, options, moves = ENVS[index]
  max_moves = options.get("max_actions_per_turn", 1)
  for text in actions:
    before = snapshot(env)
    was_done = env.done
    result = env.step(text)
    assert isinstance(result.observation, str)
    assert isinstance(result.state_key, str) and result.state_key
    assert all(
      isinstance(v, float) and math.isfinite(v)
      for v in result.reward_components.values()
    )
    if was_done:
      assert result.failure == FailureCode.BUDGET_EXHAUSTED
    elif well_formed(text, moves, max_moves):
      assert result.failure is None, text
    else:
      assert isinstance(result.failure, FailureCode), text
      if moves is not None:  # a bad move changes nothing but the clock
        assert snapshot(env)[:2] == before[:2]
    if "<answer>" not in text:
      assert result.failure is not None


@pytest.mark.parametrize("index", range(len(ENVS)), ids=IDS)
@SETTINGS
@given(
  seed=st.integers(0, 2**31 - 1),
  actions=st.lists(texts, min_size=1, max_size=8),
)
def test_reset_with_same_seed_replays_the_same_episode(index, seed, actions):
  def play():
    env, task = fresh(index, seed)
    first = env.reset(task, seed=seed)
    out = [(first, None, None, None)]
    for text in actions:
      r = env.step(text)
      out.append((r.observation, r.state_key, r.failure, r.reward_components))
    return out

  assert play() == play()


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
@pytest.mark.parametrize("option", ["max_steps", "max_actions_per_turn"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True])
def test_grid_envs_refuse_an_empty_or_non_int_budget(name, option, value):
  """0 ended every episode at its first move (budget exhausted)."""
  with pytest.raises(ValueError, match=f"{option} must be an int >= 1"):
    envs.make(name, **{option: value})
  envs.make(name, **{option: 1})


@pytest.mark.parametrize("index", range(len(ENVS)), ids=IDS)
def test_generated_tasks_are_seed_deterministic(index):
  name, options, _ = ENVS[index]
  a, b = envs.make(name, **options), envs.make(name, **options)
  for seed in range(3):
    for difficulty in range(3):
      task = a.generate_task(seed, difficulty)
      assert task == b.generate_task(seed, difficulty)
      assert task.family == name
      assert a.reset(task, seed=1) == b.reset(task, seed=1)


@pytest.mark.parametrize("index", range(len(ENVS)), ids=IDS)
def test_expert_solves_every_difficulty(index):
  name, options, _ = ENVS[index]
  env = envs.make(name, **options)
  for difficulty in range(4):
    for seed in range(2):
      task = env.generate_task(seed, difficulty)
      env.reset(task, seed=0)
      for text in env.expert_actions(task):
        result = env.step(text)
        assert result.failure is None
      assert result.done
      if name == "frozenlake" and options.get("slippery"):
        continue  # the best policy can still slip into a hole
      solved = result.reward_components.get(
        "solved", result.reward_components.get("success")
      )
      assert solved and solved > 0
