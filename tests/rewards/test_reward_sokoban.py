"""Reward stack on real Sokoban episodes, played by the scripted expert."""

import pytest

from agentic_rl import envs, rewards
from agentic_rl.envs.parsing import parse_tags
from agentic_rl.types import Task, Termination, Trajectory, Turn


def play(env: envs.Environment, task: Task, actions: list[str]) -> Trajectory:
  """A minimal host rollout: no tokens, just the env's text and rewards."""
  env.reset(task)
  turns, done = [], False
  for text in actions:
    result = env.step(text)
    turns.append(
      Turn(
        obs_tokens=[],
        action_tokens=[],
        action_logp=[],
        action=parse_tags(text),
        observation=result.observation,
        failure=result.failure,
        reward_components=dict(result.reward_components),
        state_key=result.state_key,
      )
    )
    done = result.done
    if done:
      break
  termination = Termination.DONE if done else Termination.MAX_TURNS
  return Trajectory(task=task, group_id=0, turns=turns, termination=termination)


def test_expert_episode_is_a_success_with_ragen_totals():
  env = envs.make("sokoban")
  task = env.generate_task(seed=7, difficulty=0)
  moves = env.expert_actions(task)
  stack = rewards.from_config(rewards.default_config())
  scored = stack.score_trajectory(play(env, task, moves))
  assert scored.termination == Termination.DONE
  assert scored.outcome == 1.0
  assert rewards.diagnose(scored) == rewards.SUCCESS
  n = len(moves)
  boxes = task.payload["num_boxes"]
  # RAGEN defaults: -0.1 per move, net +1 per box that ends on a target,
  # +10 for solving; verifier weights default to 1.
  total = sum(t.reward for t in scored.turns)
  assert total == pytest.approx(-0.1 * n + boxes + 10.0)


def test_invalid_moves_until_turn_limit_could_not():
  env = envs.make("sokoban")
  task = env.generate_task(seed=7, difficulty=0)
  stack = rewards.from_config(rewards.default_config())
  scored = stack.score_trajectory(
    play(env, task, ["<answer>Jump</answer>"] * 4)
  )
  assert scored.outcome == 0.0
  # each turn: step -0.1 and bad-arguments penalty -0.1
  assert [t.reward for t in scored.turns] == pytest.approx([-0.2] * 4)
  assert rewards.diagnose(scored) == rewards.COULD_NOT
  summary = rewards.trace_summary([scored])
  assert summary["failure/bad_arguments_rate"] == 1.0
