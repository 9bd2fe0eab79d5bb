"""Expert demonstrations: solved episodes in the rollout's own framing."""

import pytest

from agentic_rl import envs, rewards
from agentic_rl.envs import frozenlake
from agentic_rl.models.tokenizer import build_env_tokenizer
from agentic_rl.rollout import RolloutConfig, env_factory_from_options
from agentic_rl.rollout.demos import NoExpertError, expert_trajectories


@pytest.mark.parametrize(
  "family, options",
  [
    ("sokoban", {"instructions": False}),
    ("frozenlake", {"slippery": True}),
  ],
)
def test_demos_solve_and_use_the_rollout_framing(family, options):
  tokenizer = build_env_tokenizer()
  config = RolloutConfig(max_turns=40, prompt_template="Task:\n{observation}\n")
  factory = env_factory_from_options({family: options})
  env = envs.make(family, **options)
  tasks = [env.generate_task(seed, 0) for seed in range(12)]
  stack = rewards.from_config(rewards.default_config())
  demos = expert_trajectories(tasks, factory, tokenizer, config, stack)
  if family == "sokoban":
    assert all(stack.succeeded(d) for d in demos)
  else:
    # Slippery: the expert must plan for the seed the demo replays with, so
    # every demo action is the expert's action in the state it was taken in
    # (success itself is not guaranteed: the optimal policy can slip).
    for task, demo in zip(tasks, demos, strict=True):
      policy = frozenlake.expert_policy(task)
      for turn in demo.turns:
        s = int(turn.state_key[1:])
        assert turn.action.text == frozenlake.MOVES[policy[s]]
  for task, demo in zip(tasks, demos, strict=True):
    first = factory(task).reset(task, seed=task.seed)
    assert demo.turns[0].obs_tokens == tokenizer.encode(
      config.prompt_template.replace("{observation}", first)
    )
    end = tokenizer.tag_id("</answer>")
    assert all(t.action_tokens[-1] == end for t in demo.turns)
    assert all(t.failure is None for t in demo.turns)


def test_environment_without_expert_is_a_named_error():
  tokenizer = build_env_tokenizer()

  class NoExpert(envs.Environment):
    def generate_task(self, seed, difficulty=0):
      raise AssertionError

    def reset(self, task, seed=0):
      return "obs"

    def step(self, action_text):
      raise AssertionError

  task = envs.make("sokoban").generate_task(0, 0)
  with pytest.raises(NoExpertError, match="NoExpert"):
    expert_trajectories(
      [task], lambda t: NoExpert(), tokenizer, RolloutConfig()
    )
