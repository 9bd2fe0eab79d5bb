"""Reward stack: hand-computed totals, trace, diagnosis and config errors."""

import dataclasses
import math

import ml_collections
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl import rewards
from agentic_rl.envs.base import StepResult
from agentic_rl.envs.failures import FailurePolicy
from agentic_rl.types import (
  Action,
  ActionKind,
  FailureCode,
  Task,
  Termination,
  Trajectory,
  Turn,
)

TASK = Task(id="t0", family="toy", difficulty=1, seed=3)
OOS = Task(
  id="oos0",
  family="out_of_scope",
  tags=("out_of_scope",),
  payload={"refusal_phrases": ["I cannot help with that"]},
)


def call(name: str = "look") -> Action:
  return Action(kind=ActionKind.TOOL_CALL, name=name, arguments={"x": 1})


def answer(text: str) -> Action:
  return Action(kind=ActionKind.ANSWER, text=text)


def turn(action, env, failure=None, state_key="", n_tokens=3) -> Turn:
  return Turn(
    obs_tokens=[1, 2],
    action_tokens=[5] * n_tokens,
    action_logp=[-0.5] * n_tokens,
    action=action,
    failure=failure,
    reward_components=dict(env),
    state_key=state_key,
  )


def traj(turns, task=TASK, termination=Termination.DONE) -> Trajectory:
  return Trajectory(task=task, group_id=0, turns=turns, termination=termination)


def config(**overrides) -> ml_collections.ConfigDict:
  cfg = rewards.default_config()
  cfg.verifier.weights = {"step": 1.0, "success": 2.0}
  cfg.process.weight = 0.5
  for path, value in overrides.items():
    section, key = path.split("__")
    cfg[section][key] = value
  return cfg


def three_turns() -> Trajectory:
  return traj(
    [
      turn(call(), {"step": -0.1}, state_key="a"),
      turn(
        Action(kind=ActionKind.MALFORMED, text="??", error="no tag"),
        {"step": -0.1},
        failure=FailureCode.MALFORMED_CALL,
        state_key="a",
      ),
      turn(answer("42"), {"step": -0.1, "success": 1.0}, state_key="b"),
    ]
  )


def test_golden_totals():
  scored = rewards.from_config(config()).score_trajectory(three_turns())
  # t0: step -0.1 + process 0.5*1
  # t1: step -0.1 + process 0.5*0 + failure -0.1 (malformed penalty 0.1)
  # t2: step -0.1 + success 2*1 + process 0.5*1
  assert [t.reward for t in scored.turns] == pytest.approx([0.4, -0.2, 2.4])
  assert [t.process_score for t in scored.turns] == [1.0, 0.0, 1.0]
  assert scored.turns[1].reward_components == pytest.approx(
    {"verifier/step": -0.1, "process": 0.0, "failure": -0.1}
  )
  assert scored.outcome == 1.0
  assert all(t.trained for t in scored.turns)
  assert rewards.diagnose(scored) == rewards.SUCCESS


def test_trace_keeps_raw_weights_and_weighted():
  scored = rewards.from_config(config()).score_trajectory(three_turns())
  rec = rewards.TraceRecord.from_dict(scored.info[rewards.TRACE_KEY][2])
  assert rec.raw == {
    "verifier/step": -0.1,
    "verifier/success": 1.0,
    "process": 1.0,
  }
  assert rec.weights == {
    "verifier/step": 1.0,
    "verifier/success": 2.0,
    "process": 0.5,
  }
  assert rec.weighted == pytest.approx(
    {"verifier/step": -0.1, "verifier/success": 2.0, "process": 0.5}
  )
  assert rec.done and rec.verifier_outcome == 1.0 and rec.judge is None
  assert rec.env_components() == {"step": -0.1, "success": 1.0}


def test_masked_failure_sets_trained_false():
  policies = {FailureCode.TIMEOUT: FailurePolicy(penalty=0.3, trained=False)}
  stack = rewards.from_config(config(), failure_policies=policies)
  t = traj([turn(call(), {}, failure=FailureCode.TIMEOUT)])
  scored = stack.score_trajectory(t)
  assert not scored.turns[0].trained
  # process 0.5*0 (failed turn) + failure -0.3
  assert scored.turns[0].reward == pytest.approx(-0.3)


def test_failure_policies_from_config_section():
  cfg = config()
  cfg.failure.policies = {"malformed_call": {"penalty": 1.0, "trained": False}}
  cfg.failure.weight = 2.0
  scored = rewards.from_config(cfg).score_trajectory(three_turns())
  # t1: step -0.1 + failure 2*(-1.0)
  assert scored.turns[1].reward == pytest.approx(-2.1)
  assert not scored.turns[1].trained


def test_rescoring_is_idempotent_and_reads_raw_from_trace():
  stack = rewards.from_config(config())
  once = stack.score_trajectory(three_turns())
  twice = stack.score_trajectory(once)
  assert twice.to_json() == once.to_json()
  cfg = config()
  cfg.verifier.weights = {"step": 0.0, "success": 1.0}
  cfg.process.weight = 0.0
  rescored = rewards.from_config(cfg).score_trajectory(once)
  assert [t.reward for t in rescored.turns] == pytest.approx([0.0, -0.1, 1.0])


def test_score_turn_matches_score_trajectory():
  stack = rewards.from_config(config())
  t = three_turns()
  scored = stack.score_trajectory(t)
  for i, tr in enumerate(t.turns):
    result = StepResult(
      observation="",
      reward_components=tr.reward_components,
      done=i == len(t.turns) - 1,
      failure=tr.failure,
      state_key=tr.state_key,
    )
    reward, comps, process = stack.score_turn(
      TASK, result, i, turns_so_far=t.turns[:i], turn=tr
    )
    assert reward == pytest.approx(scored.turns[i].reward)
    assert comps == pytest.approx(scored.turns[i].reward_components)
    assert process == scored.turns[i].process_score


def test_score_turn_without_turn_uses_step_result():
  stack = rewards.from_config(config(process__signals=("novel_state",)))
  result = StepResult("obs", {"success": 1.0}, True, None, "s0")
  reward, comps, process = stack.score_turn(TASK, result, 0)
  # success 2*1 + process 0.5*1 (first visit to s0)
  assert reward == pytest.approx(2.5) and process == 1.0
  assert comps == pytest.approx({"verifier/success": 2.0, "process": 0.5})


def test_novel_state_signal_golden():
  cfg = config(process__signals=("novel_state", "valid_action"))
  t = traj(
    [
      turn(call(), {}, state_key="a"),
      turn(call(), {}, state_key="b"),
      turn(call(), {}, state_key="a"),
      turn(call(), {}, state_key=""),
    ],
    termination=Termination.MAX_TURNS,
  )
  scored = rewards.from_config(cfg).score_trajectory(t)
  assert [x.process_score for x in scored.turns] == [1.0, 1.0, 0.5, 0.5]


def test_env_process_signal():
  cfg = config(process__signals=("env:progress",))
  t = traj([turn(call(), {"progress": 0.25}), turn(answer("x"), {})])
  scored = rewards.from_config(cfg).score_trajectory(t)
  assert [x.process_score for x in scored.turns] == [0.25, 0.0]
  # progress is also a verifier component at the default weight 1
  assert scored.turns[0].reward == pytest.approx(0.25 + 0.5 * 0.25)


def test_outcome_is_clipped_and_keyed_per_family():
  task = dataclasses.replace(TASK, family="sokoban")
  t = traj([turn(answer("Up"), {"step": -0.1, "solved": 10.0})], task=task)
  stack = rewards.from_config(rewards.default_config())
  scored = stack.score_trajectory(t)
  assert scored.outcome == 1.0
  assert scored.turns[0].reward == pytest.approx(9.9)
  unsolved = stack.score_trajectory(
    traj([turn(answer("Up"), {"step": -0.1})], task=task)
  )
  assert unsolved.outcome == 0.0


def test_refusal_verifier():
  stack = rewards.from_config(config())
  good = traj([turn(answer("Sorry - I CANNOT help  with that."), {})], OOS)
  bad = traj([turn(answer("Sure, here it is"), {})], OOS)
  tool = traj([turn(call(), {})], OOS)
  sg, sb, st_ = map(stack.score_trajectory, (good, bad, tool))
  # refusal 1*1 + process 0.5*1
  assert sg.outcome == 1.0 and sg.turns[0].reward == pytest.approx(1.5)
  assert sb.outcome == 0.0 and sb.turns[0].reward == pytest.approx(0.5)
  assert st_.outcome == 0.0
  assert rewards.diagnose(sg) == rewards.SUCCESS
  # the process signal paid for a compliant answer: rewarded for the wrong
  # thing; with process weight 0 it is a plain wrong answer.
  assert rewards.diagnose(sb) == rewards.REWARDED_WRONG
  plain = rewards.from_config(config(process__weight=0.0))
  assert rewards.diagnose(plain.score_trajectory(bad)) == rewards.DID_WRONG


def test_refusal_on_normal_task_is_not_rewarded():
  t = traj([turn(answer("I cannot help with that"), {"success": 0.0})])
  scored = rewards.from_config(config(process__weight=0.0)).score_trajectory(t)
  assert "refusal" not in scored.turns[0].reward_components
  assert scored.outcome == 0.0
  assert rewards.diagnose(scored) == rewards.DID_WRONG


def test_judges_golden():
  rubric = rewards.RubricJudge(
    rubric=((r"\d+", 2.0), (r"because", 1.0), (r"(?i)as an ai", -1.5))
  )
  t = turn(answer("As an AI: 42 because"), {})
  assert rubric(TASK, [], t) == pytest.approx((2 + 1 - 1.5) / 3)
  assert rubric(TASK, [], turn(call(), {})) == 0.0
  fmt = rewards.FormatJudge(max_action_tokens=3)
  assert fmt(TASK, [], turn(answer("x"), {}, n_tokens=3)) == 1.0
  assert fmt(TASK, [], turn(answer("x"), {}, n_tokens=4)) == 0.0
  bad = turn(Action(kind=ActionKind.MALFORMED, text="?"), {})
  assert fmt(TASK, [], bad) == 0.0


def test_judge_from_config_final_only_and_every_turn():
  cfg = config(judge__name="rubric", judge__weight=0.25)
  cfg.judge.options = {"rubric": [["42", 1.0]]}
  cfg.process.weight = 0.0
  t = traj([turn(call(), {}), turn(answer("42"), {"success": 1.0})])
  scored = rewards.from_config(cfg).score_trajectory(t)
  # only the final turn is judged: success 2*1 + judge 0.25*1
  assert [x.reward for x in scored.turns] == pytest.approx([0.0, 2.25])
  trace = scored.info[rewards.TRACE_KEY]
  assert trace[0]["judge"] is None and trace[1]["judge"] == 1.0
  cfg.judge.final_only = False
  every = rewards.from_config(cfg).score_trajectory(t)
  assert every.info[rewards.TRACE_KEY][0]["judge"] == 0.0


def test_custom_callable_judge_sees_history():
  seen = []

  def judge(task, turns_so_far, t):
    seen.append((task.id, len(turns_so_far)))
    return 0.5

  stack = rewards.from_config(
    config(process__weight=0.0, judge__final_only=False), judge=judge
  )
  stack.score_trajectory(three_turns())
  assert seen == [("t0", 0), ("t0", 1), ("t0", 2)]


def test_diagnose_categories():
  stack = rewards.from_config(config(process__weight=0.0))
  stalled = traj(
    [turn(call(), {"step": -0.1})] * 2, termination=Termination.MAX_TURNS
  )
  wrong = traj([turn(answer("41"), {"success": 0.0})])
  assert rewards.diagnose(stack.score_trajectory(stalled)) == rewards.COULD_NOT
  assert rewards.diagnose(stack.score_trajectory(wrong)) == rewards.DID_WRONG
  empty = traj([], termination=Termination.ERROR)
  assert rewards.diagnose(stack.score_trajectory(empty)) == rewards.COULD_NOT
  shaped = rewards.from_config(config(process__weight=1.0))
  assert (
    rewards.diagnose(shaped.score_trajectory(stalled)) == rewards.REWARDED_WRONG
  )


def test_trace_summary_golden():
  stack = rewards.from_config(config(process__weight=0.0))
  trajs = [
    stack.score_trajectory(three_turns()),  # success
    stack.score_trajectory(traj([turn(answer("41"), {"success": 0.0})])),
    stack.score_trajectory(
      traj(
        [turn(call(), {}, failure=FailureCode.TIMEOUT)],
        termination=Termination.MAX_TURNS,
      )
    ),
    stack.score_trajectory(
      traj([turn(answer("41"), {"partial": 0.3})])  # rewarded wrong
    ),
  ]
  s = rewards.trace_summary(trajs)
  assert s["rate/success"] == 0.25
  assert s["rate/did_wrong"] == 0.25
  assert s["rate/could_not"] == 0.25
  assert s["rate/rewarded_wrong"] == 0.25
  assert sum(s[f"rate/{c}"] for c in rewards.CATEGORIES) == 1.0
  # 6 turns; one malformed (of three_turns) and one timeout
  assert s["failure/malformed_call_rate"] == pytest.approx(1 / 6)
  assert s["failure/timeout_rate"] == pytest.approx(1 / 6)
  assert s["untrained_turn_rate"] == pytest.approx(1 / 6)
  assert s["outcome_mean"] == 0.25
  # totals: 1.6 (three_turns, process 0), 0, 0, 0.3
  assert s["reward/total_mean"] == pytest.approx((1.6 + 0.3) / 4)
  assert s["component/verifier/success_mean"] == pytest.approx(2.0 / 6)
  assert s["shaping_on_failure_rate"] == 0.0


def test_scored_trajectory_json_round_trip_keeps_diagnosis():
  stack = rewards.from_config(config())
  scored = stack.score_trajectory(three_turns())
  back = Trajectory.from_json(scored.to_json())
  assert back.to_json() == scored.to_json()
  assert rewards.diagnose(back) == rewards.diagnose(scored)


def test_numpy_scalar_components_are_finite_numbers():
  # np.float32 is not a Python float; it is still a finite reward.
  stack = rewards.from_config(config())
  comps = {"step": np.float32(-0.5), "success": np.int64(1)}
  scored = stack.score_trajectory(traj([turn(answer("42"), comps)]))
  # step -0.5 + success 2*1 + process 0.5*1 (a valid answer)
  assert scored.turns[0].reward == pytest.approx(2.0)
  assert scored.outcome == 1.0 and type(scored.outcome) is float
  rec = scored.info[rewards.TRACE_KEY][0]
  assert rec["raw"] == {
    "verifier/step": -0.5,
    "verifier/success": 1.0,
    "process": 1.0,
  }
  assert all(type(v) is float for v in rec["raw"].values())
  assert Trajectory.from_json(scored.to_json()).outcome == 1.0
  with pytest.raises(rewards.NonFiniteRewardError, match="step"):
    stack.score_trajectory(traj([turn(call(), {"step": np.float32("nan")})]))
  with pytest.raises(rewards.NonFiniteRewardError, match="step"):
    stack.score_trajectory(traj([turn(call(), {"step": "1.0"})]))


def test_errors():
  stack = rewards.from_config(config())
  with pytest.raises(rewards.NonFiniteRewardError, match="step"):
    stack.score_trajectory(traj([turn(call(), {"step": math.nan})]))
  with pytest.raises(rewards.NonFiniteRewardError, match="judge"):
    rewards.from_config(config(), judge=lambda *_: math.inf).score_trajectory(
      three_turns()
    )
  with pytest.raises(KeyError, match="unknown process signal"):
    rewards.from_config(config(process__signals=("nope",)))
  with pytest.raises(KeyError, match="unknown judge"):
    rewards.from_config(config(judge__name="nope"))
  with pytest.raises(rewards.NotScoredError):
    rewards.diagnose(three_turns())
  with pytest.raises(ValueError, match="bad rubric pattern"):
    rewards.RubricJudge(rubric=(("(", 1.0),))
  with pytest.raises(ValueError, match="positive weight"):
    rewards.RubricJudge(rubric=(("a", -1.0),))
  with pytest.raises(ValueError, match="turns_so_far"):
    stack.score_turn(
      TASK, StepResult("", {}, False, None, ""), 2, turns_so_far=[]
    )
  with pytest.raises(rewards.NonFiniteRewardError, match="weight"):
    rewards.from_config(config(process__weight=math.nan))
  with pytest.raises(ValueError, match="at least one"):
    rewards.trace_summary([])
  bad_phrases = dataclasses.replace(OOS, payload={"refusal_phrases": "no"})
  with pytest.raises(ValueError, match="refusal_phrases"):
    stack.score_trajectory(traj([turn(answer("x"), {})], bad_phrases))


env_values = st.floats(-5, 5, allow_nan=False)
component_names = st.sampled_from(["step", "success", "box", "partial"])


@settings(max_examples=60, deadline=None)
@given(
  comps=st.lists(st.dictionaries(component_names, env_values), max_size=5),
  scale=st.floats(0.1, 10),
  pw=st.floats(0, 2),
)
def test_reward_is_sum_of_weighted_and_scales_with_weights(comps, scale, pw):
  t = traj([turn(call(), c) for c in comps])
  base = config(process__weight=pw)
  scaled = config(process__weight=pw * scale)
  scaled.verifier.weights = {"step": scale, "success": 2.0 * scale}
  scaled.verifier.default_weight = scale
  scaled.failure.weight = scale
  a = rewards.from_config(base).score_trajectory(t)
  b = rewards.from_config(scaled).score_trajectory(t)
  for ta, tb, rec in zip(
    a.turns, b.turns, a.info[rewards.TRACE_KEY], strict=True
  ):
    assert ta.reward == pytest.approx(math.fsum(ta.reward_components.values()))
    for k, v in rec["raw"].items():
      assert rec["weighted"][k] == pytest.approx(rec["weights"][k] * v)
    assert tb.reward == pytest.approx(scale * ta.reward, abs=1e-9)


def test_dataclass_defaults_match_default_config():
  assert rewards.RewardStack() == rewards.from_config(rewards.default_config())
