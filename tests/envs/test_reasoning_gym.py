"""reasoning_gym: offline families, own verifier, difficulty, attempts."""

import dataclasses
import inspect
import json
import socket

import pytest
from reasoning_gym import factory
from reasoning_gym.dataset import ProceduralDataset

from agentic_rl import envs
from agentic_rl.envs import reasoning_gym as rge
from agentic_rl.types import FailureCode


@pytest.fixture
def offline(monkeypatch):
  """Fails the test if anything opens a network connection."""

  def refuse(*args, **kwargs):
    raise AssertionError(f"network access attempted: {args!r}")

  monkeypatch.setattr(socket.socket, "connect", refuse)
  monkeypatch.setattr(socket, "create_connection", refuse)
  monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("family", rge.OFFLINE_FAMILIES)
def test_family_works_offline_and_verifies_itself(family, offline):
  env = envs.make("reasoning_gym", family=family)
  for difficulty in range(3):
    task = env.generate_task(seed=difficulty + 5, difficulty=difficulty)
    assert task.family == "reasoning_gym" and task.tags == (family,)
    assert json.loads(json.dumps(task.to_dict())) == task.to_dict()
    question = env.reset(task)
    # reset rebuilds exactly the item that was generated.
    assert question == task.payload["question"]
    expert = env.expert_actions(task)
    assert expert == [f"<answer>{task.payload['answer']}</answer>"]
    result = env.step(expert[0])
    assert result.failure is None and result.done
    assert result.reward_components == {"success": 1.0}
    env.reset(task)
    wrong = env.step("<answer>certainly not the answer</answer>")
    assert wrong.done and wrong.reward_components["success"] < 1.0


def test_difficulty_maps_to_curriculum_levels():
  def config(level: int):
    dataset, _ = rge.build_item("basic_arithmetic", 0, level, {})
    return dataset.config

  # basic_arithmetic levels: num_terms 2..6, num_digits 1..4 (inclusive).
  assert (config(0).max_terms, config(0).max_digits) == (2, 1)
  assert (config(2).min_terms, config(2).max_terms) == (2, 4)
  assert (config(2).min_digits, config(2).max_digits) == (1, 3)
  # Past the top level every attribute stays at its top.
  assert (config(9).max_terms, config(9).max_digits) == (6, 4)


def test_family_without_curriculum_ignores_difficulty():
  env = envs.make("reasoning_gym", family="gsm_symbolic")
  easy, hard = env.generate_task(3, 0), env.generate_task(3, 4)
  assert easy.payload["question"] == hard.payload["question"]
  assert easy.id != hard.id


def test_config_overrides_win():
  env = envs.make("reasoning_gym", family="chain_sum", config={"max_terms": 2})
  for seed in range(5):
    task = env.generate_task(seed, difficulty=4)
    assert (
      task.payload["question"].count("+")
      + task.payload["question"].count(" - ")
      <= 1
    )


def test_generation_is_deterministic_and_seeded():
  env = envs.make("reasoning_gym", family="leg_counting")
  assert env.generate_task(7, 1) == env.generate_task(7, 1)
  questions = {env.generate_task(s, 1).payload["question"] for s in range(6)}
  assert len(questions) > 1


def test_attempts_with_feedback():
  env = envs.make("reasoning_gym", family="chain_sum", max_attempts=3)
  task = env.generate_task(1, 0)
  env.reset(task)
  r1 = env.step("<answer>nope</answer>")
  assert r1.observation == "Incorrect, try again."
  assert not r1.done and r1.reward_components == {"success": 0.0}
  assert r1.state_key == "attempt:0"
  r2 = env.step("no tags at all")
  assert r2.failure == FailureCode.MALFORMED_CALL and not r2.done
  r3 = env.step(env.expert_actions(task)[0])
  assert r3.state_key == "attempt:2"
  assert r3.done and r3.observation == "Correct."
  assert r3.reward_components == {"success": 1.0}
  assert env.step("<answer>1</answer>").failure == (
    FailureCode.BUDGET_EXHAUSTED
  )


def test_attempts_run_out():
  env = envs.make("reasoning_gym", family="chain_sum", max_attempts=2)
  env.reset(env.generate_task(2, 0))
  assert not env.step("<answer>x</answer>").done
  r = env.step("<search>what is the sum</search>")
  assert r.failure == FailureCode.UNKNOWN_TOOL
  assert r.done and r.reward_components == {"success": 0.0}


def test_bad_options_raise_at_construction():
  with pytest.raises(ValueError, match="unknown reasoning-gym family"):
    envs.make("reasoning_gym", family="no_such_family")
  with pytest.raises(ValueError, match="max_attempts"):
    envs.make("reasoning_gym", max_attempts=0)


@pytest.mark.parametrize(
  "family",
  ["polynomial_multiplication", "simple_integration", "puzzle24", "countdown"],
)
def test_families_whose_verifier_evaluates_text_are_refused(family):
  # These verifiers run the answer through sympy.parse_expr, i.e. eval:
  # `__import__('os').system(...)` would run on the host, `9**9**9**9` hangs.
  with pytest.raises(ValueError, match="not in SAFE_FAMILIES"):
    envs.make("reasoning_gym", family=family)


def test_reset_refuses_a_task_of_an_unsafe_family():
  env = envs.make("reasoning_gym", family="chain_sum")
  task = env.generate_task(0)
  smuggled = dataclasses.replace(
    task, payload={**task.payload, "family": "polynomial_multiplication"}
  )
  with pytest.raises(ValueError, match="not in SAFE_FAMILIES"):
    env.reset(smuggled)


def test_safe_families_never_evaluate_the_answer():
  # Structural check on the installed package: every admitted verifier is
  # either the base class's string match or free of eval/sympy.
  for family in rge.SAFE_FAMILIES:
    dataset_cls, _ = factory.DATASETS[family]
    if dataset_cls.score_answer is ProceduralDataset.score_answer:
      continue
    source = inspect.getsource(dataset_cls.score_answer)
    for word in ("parse_expr", "sympy", "sympify", "exec(", "eval(answer"):
      assert word not in source, (family, word)
