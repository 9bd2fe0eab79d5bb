"""Rollout driver: token streams, log-prob parity, packing, budgets, errors."""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import threading
import time

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_rl import envs, models, rewards
from agentic_rl.data.packing import pack
from agentic_rl.models import build_env_tokenizer
from agentic_rl.rewards import RewardStack
from agentic_rl.rollout import (
  OVERFLOW_ACTION,
  OVERFLOW_OBSERVATION,
  OVERFLOW_PROMPT,
  Rollout,
  RolloutConfig,
  env_factory_from_options,
  eval_metrics,
  evaluate,
  failure_codes,
  make_samplers,
  play,
  solved_by_task,
)
from agentic_rl.sampling import Sampler
from agentic_rl.types import (
  Action,
  ActionKind,
  FailureCode,
  Task,
  Termination,
  Trajectory,
  Turn,
)

try:
  from tests.rollout.echo_env import Echo
except ImportError:  # tests/ run without package __init__ files
  from echo_env import Echo

MAX_LEN = 256
KW = dict(chunk_buckets=(32, 64, 128, 256), budget_buckets=(4, 8))


class RecordingSampler(Sampler):
  """The real sampler, also writing down every row's id stream and decodes."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.current: dict[int, list[int]] = collections.defaultdict(list)
    self.finished: list[list[int]] = []
    self.decodes: list[tuple[float, float, tuple[int, ...]]] = []

  def prefill(self, rows, tokens):
    for r, t in zip(rows, tokens, strict=True):
      if self.current[r]:
        self.finished.append(self.current[r])
      self.current[r] = [int(x) for x in t]
    super().prefill(rows, tokens)

  def extend(self, rows, tokens):
    for r, t in zip(rows, tokens, strict=True):
      self.current[r] += [int(x) for x in t]
    super().extend(rows, tokens)

  def decode(self, key, **kwargs):
    start = time.perf_counter()
    out = super().decode(key, **kwargs)
    self.decodes.append((start, time.perf_counter(), tuple(out.rows)))
    for r, t in zip(out.rows, out.tokens, strict=True):
      self.current[r] += t.tolist()
    return out

  def streams(self) -> list[list[int]]:
    return self.finished + [s for s in self.current.values() if s]


@pytest.fixture(scope="module")
def model():
  return models.build("tiny", 0)


@pytest.fixture(scope="module")
def tokenizer():
  return build_env_tokenizer()


def echo_factory(**options):
  return lambda task: Echo(**options)


def echo_tasks(n: int) -> list[Task]:
  return [Echo().generate_task(seed) for seed in range(n)]


def make_rollout(model, tokenizer, factory, slots=4, **changes):
  sampler = RecordingSampler(model, num_slots=slots, max_len=MAX_LEN, **KW)
  config = RolloutConfig(
    group_size=2, max_turns=4, max_new_tokens=8, max_total_tokens=MAX_LEN
  ).replace(**changes)
  return Rollout(sampler, tokenizer, factory, RewardStack(), config)


def stream(trajectory: Trajectory) -> list[int]:
  return [i for t in trajectory.turns for i in t.obs_tokens + t.action_tokens]


@functools.partial(jax.jit, static_argnums=0)
def _log_softmax(graphdef, params, tokens_1xL):
  logits_1xLxV = nnx.merge(graphdef, params)(tokens_1xL)
  return jax.nn.log_softmax(logits_1xLxV, axis=-1)


def teacher_forced_logp(model, trajectory: Trajectory) -> np.ndarray:
  """log p(action token | everything before it), one forward pass."""
  seq = stream(trajectory)
  padded_1xL = np.zeros((1, MAX_LEN), np.int32)  # one shape, one compile
  padded_1xL[0, : len(seq)] = seq
  graphdef, params = nnx.split(model)
  logp_LxV = np.asarray(_log_softmax(graphdef, params, padded_1xL))[0]
  out, pos = [], 0
  for turn in trajectory.turns:
    pos += len(turn.obs_tokens)
    for tok in turn.action_tokens:
      out.append(logp_LxV[pos - 1, tok])
      pos += 1
  return np.asarray(out)


def test_sokoban_streams_match_sampler_and_teacher_forcing(model, tokenizer):
  """Turns concatenate to the row's stream; logps match a forward pass."""
  factory = env_factory_from_options({"sokoban": {"instructions": False}})
  rollout = make_rollout(model, tokenizer, factory, max_turns=3)
  tasks = [envs.make("sokoban").generate_task(seed) for seed in range(3)]
  trajectories = rollout.run(tasks, jax.random.PRNGKey(0), policy_version=7)

  assert len(trajectories) == 6  # 3 tasks x G=2 over 4 slots: refills
  assert [t.task.id for t in trajectories] == [
    t.id for t in tasks for _ in range(2)
  ]
  assert len({t.group_id for t in trajectories}) == 3
  recorded = sorted(rollout.samplers[0].streams())
  assert recorded == sorted(stream(t) for t in trajectories)
  for traj in trajectories:
    assert traj.policy_version == 7
    assert traj.termination == Termination.MAX_TURNS
    assert len(traj.turns) == 3
    assert "reward_trace" in traj.info
    for turn in traj.turns:
      assert turn.obs_tokens and turn.action_tokens
      assert turn.action is not None and turn.state_key
      assert turn.reward == pytest.approx(sum(turn.reward_components.values()))
      text = tokenizer.decode(turn.action_tokens)
      if turn.action_tokens[-1] in rollout.stop_ids:
        assert text.endswith(tokenizer.decode(turn.action_tokens[-1:]))
    # Observations after the first are wrapped once, in the protocol's tags.
    later = tokenizer.decode(traj.turns[1].obs_tokens)
    assert later.strip().startswith("<information>")
    assert later.strip().endswith("</information>")
    want = np.concatenate([t.action_logp for t in traj.turns])
    np.testing.assert_allclose(
      teacher_forced_logp(model, traj), want, atol=1e-4
    )
  # Same key, same schedule: the run is reproducible.
  again = make_rollout(model, tokenizer, factory, max_turns=3).run(
    tasks, jax.random.PRNGKey(0)
  )
  assert [stream(t) for t in again] == [stream(t) for t in trajectories]


def test_loss_mask_covers_exactly_the_action_tokens(model, tokenizer):
  # A context budget this small cuts some turns off: those are untrained.
  rollout = make_rollout(
    model, tokenizer, echo_factory(obs_len=10), max_total_tokens=50
  )
  trajectories = rollout.run(echo_tasks(3), jax.random.PRNGKey(1))
  assert any(not t.trained for tr in trajectories for t in tr.turns)
  batch = pack(trajectories)
  tokens_BxL = np.asarray(batch.tokens_BxL)
  mask_BxL = np.asarray(batch.loss_mask_BxL)
  logp_BxL = np.asarray(batch.behaviour_logp_BxL)
  for i, traj in enumerate(trajectories):
    want_mask, pos = np.zeros(mask_BxL.shape[1]), 0
    for turn in traj.turns:
      pos += len(turn.obs_tokens)
      end = pos + len(turn.action_tokens)
      want_mask[pos:end] = float(turn.trained)
      np.testing.assert_array_equal(logp_BxL[i, pos:end], turn.action_logp)
      pos = end
    np.testing.assert_array_equal(mask_BxL[i], want_mask)
    np.testing.assert_array_equal(tokens_BxL[i, :pos], stream(traj))


def test_context_overflow_is_a_failure_code_not_an_exception(model, tokenizer):
  # Prompt (20 'p' + newline) does not fit in 16 tokens.
  tiny = make_rollout(model, tokenizer, echo_factory(), max_total_tokens=16)
  for traj in tiny.run(echo_tasks(1), jax.random.PRNGKey(0)):
    assert traj.turns == []
    assert traj.termination == Termination.MAX_TOKENS
    assert traj.info["overflow"] == OVERFLOW_PROMPT
    assert failure_codes(traj) == [FailureCode.CONTEXT_OVERFLOW]

  # Prompt 21 + action <= 8 fit in 40, but then 200 'o's never do.
  obs = make_rollout(
    model, tokenizer, echo_factory(obs_len=200), max_total_tokens=40
  )
  for traj in obs.run(echo_tasks(1), jax.random.PRNGKey(0)):
    assert len(traj.turns) == 1
    assert traj.termination == Termination.MAX_TOKENS
    assert traj.info["overflow"] == OVERFLOW_OBSERVATION
    assert traj.turns[0].failure is None  # the turn itself was complete

  # Prompt 21 + 8-token action + 7-token observation leave 4 positions
  # of 40 for the second action: it is cut by the context, not the turn.
  cut = make_rollout(
    model, tokenizer, echo_factory(obs_len=1), max_total_tokens=40
  )
  trajectories = cut.run(echo_tasks(2), jax.random.PRNGKey(0))
  stops = set(cut.stop_ids)
  cuts = 0
  for traj in trajectories:
    last = traj.turns[-1]
    assert traj.num_tokens <= 40
    if traj.info.get("overflow") == OVERFLOW_ACTION:
      cuts += 1
      assert traj.termination == Termination.MAX_TOKENS
      assert last.failure == FailureCode.CONTEXT_OVERFLOW
      assert not last.trained and last.action_tokens[-1] not in stops
  assert cuts >= 1
  assert cut.last_metrics["failure/context_overflow"] == 4


def test_env_errors_become_failure_codes(model, tokenizer):
  step = make_rollout(model, tokenizer, echo_factory(fail="step"))
  for traj in step.run(echo_tasks(1), jax.random.PRNGKey(0)):
    assert traj.termination == Termination.ERROR
    assert traj.turns[-1].failure == FailureCode.TOOL_ERROR
    assert "step exploded" in traj.info["error"]

  reset = make_rollout(model, tokenizer, echo_factory(fail="reset"))
  for traj in reset.run(echo_tasks(1), jax.random.PRNGKey(0)):
    assert traj.termination == Termination.ERROR and traj.turns == []
    assert failure_codes(traj) == [FailureCode.TOOL_ERROR]

  nan = make_rollout(model, tokenizer, echo_factory(fail="nan"))
  for traj in nan.run(echo_tasks(1), jax.random.PRNGKey(0)):
    assert traj.termination == Termination.ERROR
    assert "non-finite" in traj.info["error"]
    assert all(np.isfinite(t.reward) for t in traj.turns)


def test_failing_judge_is_recorded_on_its_trajectory(model, tokenizer):
  def judge(task, turns_so_far, turn):
    if task.seed == 0:
      return math.nan
    return 0.25

  def broken(task, turns_so_far, turn):
    raise RuntimeError("judge backend down")

  for stack in (
    RewardStack(judge=judge, judge_final_only=False),
    RewardStack(judge=broken),
  ):
    sampler = Sampler(model, num_slots=4, max_len=MAX_LEN, **KW)
    config = RolloutConfig(
      group_size=2, max_turns=4, max_new_tokens=8, max_total_tokens=MAX_LEN
    )
    rollout = Rollout(sampler, tokenizer, echo_factory(), stack, config)
    trajectories = rollout.run(echo_tasks(2), jax.random.PRNGKey(0))
    assert len(trajectories) == 4
    for traj in trajectories:
      raw = [r["raw"] for r in traj.info[rewards.TRACE_KEY]]
      # Echo: "step" -0.1 before the last turn, "success" 0 or 1 on it.
      env = [r.get("verifier/step", r.get("verifier/success")) for r in raw]
      if stack.judge is judge and traj.task.seed == 1:
        assert traj.termination == Termination.DONE
        assert [t.reward for t in traj.turns] == pytest.approx(
          [v + 0.25 for v in env]
        )
        continue
      assert traj.termination == Termination.ERROR
      assert "judge" in traj.info["error"]
      assert all("judge" not in r for r in raw)
      assert [t.reward for t in traj.turns] == pytest.approx(env)
      assert env[:-1] == pytest.approx([-0.1] * (len(env) - 1))


def test_pipeline_overlaps_env_steps_with_decoding(model, tokenizer):
  """Env steps of one micro-batch run while the other one decodes."""
  log: list = []
  samplers = [
    RecordingSampler(model, num_slots=2, max_len=MAX_LEN, **KW)
    for _ in range(2)
  ]
  config = RolloutConfig(
    group_size=2, max_turns=3, max_new_tokens=8, max_total_tokens=MAX_LEN
  )
  factory = echo_factory(delay=0.03, log=log, episode_len=3)
  rollout = Rollout(samplers, tokenizer, factory, RewardStack(), config)
  trajectories = rollout.run(echo_tasks(4), jax.random.PRNGKey(0))
  assert len(trajectories) == 8
  assert all(t.termination == Termination.DONE for t in trajectories)
  decodes = [(a, b) for s in samplers for a, b, _ in s.decodes]
  overlapping = [
    (s0, s1) for s0, s1, _ in log if any(a < s1 and s0 < b for a, b in decodes)
  ]
  # Steps run on worker threads, some under a decode (how much is hidden is
  # a timing question for the benchmark, not for a test on a shared CPU).
  assert overlapping
  assert threading.get_ident() not in {t for _, _, t in log}
  serial = Rollout(
    samplers, tokenizer, factory, RewardStack(), config.replace(pipeline=False)
  )
  log.clear()
  for s in samplers:
    s.decodes.clear()
  again = serial.run(echo_tasks(4), jax.random.PRNGKey(0))
  decodes = [(a, b) for s in samplers for a, b, _ in s.decodes]
  assert not [
    1 for s0, s1, _ in log if any(a < s1 and s0 < b for a, b in decodes)
  ]
  # The schedule does not depend on threads: same trajectories either way.
  assert [stream(t) for t in again] == [stream(t) for t in trajectories]


def test_reprefill_gives_the_same_stream(model, tokenizer):
  factory = echo_factory(obs_len=6)
  base = make_rollout(model, tokenizer, factory)
  redo = make_rollout(model, tokenizer, factory, reprefill=True)
  a = base.run(echo_tasks(2), jax.random.PRNGKey(3))
  b = redo.run(echo_tasks(2), jax.random.PRNGKey(3))
  assert [stream(t) for t in a] == [stream(t) for t in b]
  for ta, tb in zip(a, b, strict=True):
    for x, y in zip(ta.turns, tb.turns, strict=True):
      np.testing.assert_allclose(x.action_logp, y.action_logp, atol=1e-4)


def test_parts_of_a_rollout_keep_group_ids_and_order(model, tokenizer):
  """What each process of a per-process rollout plays (`Rollout._play`'s
  part p of P): contiguous tasks, the whole run's group ids, a part with
  no task plays nothing; one part of one is `run` itself."""
  tasks = echo_tasks(3)
  key = jax.random.PRNGKey(5)
  whole = make_rollout(model, tokenizer, echo_factory()).run(tasks, key)
  assert not make_rollout(model, tokenizer, echo_factory()).per_process
  one = make_rollout(model, tokenizer, echo_factory())._play(
    tasks, key, 0, (0, 1)
  )
  assert [stream(t) for t in one] == [stream(t) for t in whole]
  for count, sizes in ((2, [2, 1]), (4, [1, 1, 1, 0])):
    played = [
      make_rollout(model, tokenizer, echo_factory())._play(
        tasks, key, 0, (p, count)
      )
      for p in range(count)
    ]
    assert [len(part) for part in played] == [2 * n for n in sizes]
    flat = [t for part in played for t in part]
    assert [(t.task.id, t.group_id) for t in flat] == [
      (t.task.id, t.group_id) for t in whole
    ]
  # group ids go on counting every task of every part
  rollout = make_rollout(model, tokenizer, echo_factory())
  rollout._play(tasks, key, 0, (1, 2))
  later = rollout._play(tasks, key, 0, (0, 2))
  assert [t.group_id for t in later] == [3, 3, 4, 4]


def test_evaluate_reports_the_reward_stacks_verdict(model, tokenizer):
  rollout = make_rollout(model, tokenizer, echo_factory(episode_len=2))
  tasks = echo_tasks(4)
  metrics = evaluate(rollout, tasks, key=jax.random.PRNGKey(5))
  greedy = make_rollout(
    model, tokenizer, echo_factory(episode_len=2), group_size=1, temperature=0.0
  )
  trajectories = greedy.run(tasks, jax.random.PRNGKey(5))
  assert metrics["episodes"] == 4
  # Echo's verdict: an odd-length final action text; recompute it directly.
  texts = [tokenizer.decode(t.turns[-1].action_tokens) for t in trajectories]
  want = np.mean([len(s) % 2 == 1 for s in texts])
  assert metrics["success_rate"] == pytest.approx(want)
  assert metrics["turns_per_episode"] == 2
  assert metrics["termination/done"] == 4
  assert "trace/rate/success" in metrics
  returns = [sum(t.reward for t in tr.turns) for tr in trajectories]
  assert metrics["return_mean"] == pytest.approx(np.mean(returns))
  # `play` hands over the episodes evaluate scored: greedy, one per task.
  played, _ = play(rollout, tasks, key=jax.random.PRNGKey(5))
  assert [[u.action_tokens for u in t.turns] for t in played] == [
    [u.action_tokens for u in t.turns] for t in trajectories
  ]
  # No tasks is a named error from either, not an empty metrics dict.
  for fn in (play, evaluate):
    with pytest.raises(ValueError, match="at least one task"):
      fn(rollout, [])


def test_eval_metrics_on_handmade_trajectories(model, tokenizer):
  rollout = make_rollout(model, tokenizer, echo_factory())
  stack = rollout.reward_stack
  task = Echo().generate_task(0)

  def traj(success: float, failure=None) -> Trajectory:
    turn = Turn([1], [2], [-0.5], failure=failure)
    turn.reward_components = {"success": success}
    return stack.score_trajectory(Trajectory(task, 0, [turn]))

  out = eval_metrics(
    [traj(1.0), traj(0.0, FailureCode.MALFORMED_CALL), traj(0.0)], rollout, 1.0
  )
  assert out["success_rate"] == pytest.approx(1 / 3)
  assert out["failure_rate/malformed_call"] == pytest.approx(1 / 3)
  assert out["generated_tokens"] == 3 and out["tokens_per_episode"] == 2
  assert out["return_mean"] == pytest.approx((1.0 - 0.1) / 3)
  assert [k for k in out if k.startswith("success_rate/")] == [
    "success_rate/d0"
  ]
  assert out["success_rate/d0"] == out["success_rate"]

  # Per difficulty: each rate counts only its own difficulty's episodes.
  def at(difficulty: int, success: float) -> Trajectory:
    t = traj(success)
    return dataclasses.replace(
      t, task=dataclasses.replace(task, difficulty=difficulty)
    )

  mixed = [at(2, 1.0), at(0, 0.0), at(2, 0.0), at(2, 1.0), at(0, 0.0)]
  out = eval_metrics(mixed, rollout, 1.0)
  assert out["success_rate"] == pytest.approx(2 / 5)
  assert out["success_rate/d0"] == 0.0
  assert out["success_rate/d2"] == pytest.approx(2 / 3)
  assert "success_rate/d1" not in out

  # Per task: the verdict `success_rate` averages, keyed by task id.
  def named(task_id: str, success: float) -> Trajectory:
    t = traj(success)
    return dataclasses.replace(t, task=dataclasses.replace(task, id=task_id))

  played = [named("a", 1.0), named("b", 0.0), named("c", 1.0)]
  solved = solved_by_task(played, rollout)
  assert solved == {"a": True, "b": False, "c": True}
  assert np.mean(list(solved.values())) == pytest.approx(
    eval_metrics(played, rollout, 1.0)["success_rate"]
  )
  with pytest.raises(ValueError, match="task b was played more than once"):
    solved_by_task([*played, named("b", 1.0)], rollout)


def test_tool_metrics_count_calls_and_failures_per_tool(model, tokenizer):
  rollout = make_rollout(model, tokenizer, echo_factory())
  stack = rollout.reward_stack
  task = Echo().generate_task(0)

  def turn(action: Action | None, failure=None) -> Turn:
    t = Turn([1], [2], [-0.5], action=action, failure=failure)
    t.reward_components = {"success": 0.0}
    return t

  def call(name: str) -> Action:
    return Action(ActionKind.TOOL_CALL, name=name)

  episodes = [
    [
      turn(call("edit_file")),
      turn(call("edit_file"), FailureCode.TOOL_ERROR),
      turn(call("run_tests")),
    ],
    [
      turn(call("edit_file"), FailureCode.BAD_ARGUMENTS),
      # A made-up name is not a metric key; a malformed call names no tool.
      turn(call("rm -rf"), FailureCode.UNKNOWN_TOOL),
      turn(Action(ActionKind.MALFORMED, text="{"), FailureCode.MALFORMED_CALL),
      # Cut by the context budget: the environment never saw it.
      turn(call("edit_fi"), FailureCode.CONTEXT_OVERFLOW),
      turn(Action(ActionKind.ANSWER, text="done")),
    ],
  ]
  trajectories = [
    stack.score_trajectory(Trajectory(task, 0, turns)) for turns in episodes
  ]
  out = eval_metrics(trajectories, rollout, 1.0)
  tools = {k: v for k, v in out.items() if k.startswith("tool")}
  assert tools == {
    "tool/_unknown/calls": 1.0,
    "tool/_unknown/unknown_tool": 1.0,
    "tool/edit_file/calls": 3.0,
    "tool/edit_file/bad_arguments": 1.0,
    "tool/edit_file/tool_error": 1.0,
    "tool/run_tests/calls": 1.0,
    "tool_failure_rate/_unknown": 1.0,
    "tool_failure_rate/edit_file": pytest.approx(2 / 3),
    "tool_failure_rate/run_tests": 0.0,
  }
  assert out["failure/malformed_call"] == 1.0


def test_config_and_sampler_checks(model, tokenizer):
  with pytest.raises(ValueError, match="group_size"):
    RolloutConfig(group_size=0)
  with pytest.raises(ValueError, match="protocol"):
    RolloutConfig(protocol="xml")
  with pytest.raises(ValueError, match="divide"):
    make_samplers(model, num_slots=3, max_len=32, num_samplers=2)
  for n in (0, 1.0):  # 0 was a ZeroDivisionError
    with pytest.raises(ValueError, match="num_samplers must be an int >= 1"):
      make_samplers(model, num_slots=4, max_len=32, num_samplers=n)
  for t in (math.nan, math.inf, -0.5):
    with pytest.raises(ValueError, match="temperature must be a finite"):
      RolloutConfig(temperature=t)
  cfg = RolloutConfig.from_mapping(
    {"group_size": 3, "stop_tags": ["</answer>"]}
  )
  assert cfg.stop_tags == ("</answer>",) and cfg.group_size == 3
  small = models.build(models.get_preset("tiny").replace(vocab_size=64), 0)
  with pytest.raises(ValueError, match="vocabulary"):
    Rollout(
      Sampler(small, num_slots=1, max_len=32),
      tokenizer,
      None,
      RewardStack(),
      RolloutConfig(),
    )
