"""Expert demonstrations: solved episodes in the rollout's own framing."""

import pytest

from agentic_rl import envs, rewards
from agentic_rl.envs import frozenlake
from agentic_rl.models.tokenizer import build_env_tokenizer
from agentic_rl.rollout import RolloutConfig, env_factory_from_options
from agentic_rl.rollout.demos import (
  NoExpertError,
  expert_trajectories,
  has_expert,
)


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


class NoExpert(envs.Environment):
  """An environment without a scripted expert."""

  def generate_task(self, seed, difficulty=0):
    raise AssertionError

  def reset(self, task, seed=0):
    return "obs"

  def step(self, action_text):
    raise AssertionError


def test_environment_without_expert_is_a_named_error():
  tokenizer = build_env_tokenizer()

  task = envs.make("sokoban").generate_task(0, 0)
  with pytest.raises(NoExpertError, match="NoExpert"):
    expert_trajectories(
      [task], lambda t: NoExpert(), tokenizer, RolloutConfig()
    )


def test_per_process_demos_of_one_process_are_the_whole_list():
  # One process plays every part: the same demos as without per_process
  # (tests/test_multiprocess.py splits them over two processes).
  tokenizer = build_env_tokenizer()
  config = RolloutConfig(max_turns=40)
  factory = env_factory_from_options({"sokoban": {}})
  env = envs.make("sokoban")
  tasks = [env.generate_task(seed, 0) for seed in range(5)]
  stack = rewards.from_config(rewards.default_config())
  whole = expert_trajectories(tasks, factory, tokenizer, config, stack)
  split = expert_trajectories(
    tasks, factory, tokenizer, config, stack, per_process=True
  )
  assert [d.group_id for d in split] == list(range(5))
  assert [d.to_dict() for d in split] == [d.to_dict() for d in whole]
  assert all(stack.succeeded(d) for d in split)
  assert expert_trajectories([], factory, tokenizer, config) == []
  assert has_expert(env) and not has_expert(NoExpert())
  # No expert: the named error before anything is played, as without it.
  with pytest.raises(NoExpertError, match="NoExpert"):
    expert_trajectories(
      tasks, lambda t: NoExpert(), tokenizer, config, per_process=True
    )


def test_turn_fit_matches_each_episode_scored_alone():
  # Reference: each episode alone, unpadded, through the training forward
  # pass (`token_logp`) and the logits' argmax. turn_fit pads a batch of
  # two to the longest of three episodes with 2, 3 and 1 turns.
  import jax
  import numpy as np

  from agentic_rl import models
  from agentic_rl.models import ModelConfig
  from agentic_rl.rollout.demos import turn_fit
  from agentic_rl.types import Trajectory, Turn

  config = ModelConfig(
    vocab_size=11, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
    head_dim=8, mlp_dim=48, rope_theta=10_000.0, norm_eps=1e-6, max_len=64,
  )  # fmt: skip
  model = models.build(config, 0)
  rng = np.random.default_rng(0)

  def turn(n_obs, n_act):
    act = rng.integers(0, 11, n_act).tolist()
    return Turn(rng.integers(0, 11, n_obs).tolist(), act, [0.0] * n_act)

  episodes = [
    Trajectory(task=None, group_id=0, turns=[turn(5, 4), turn(3, 6)]),
    Trajectory(
      task=None, group_id=0, turns=[turn(2, 3), turn(4, 2), turn(1, 5)]
    ),
    Trajectory(task=None, group_id=0, turns=[turn(7, 8)]),
  ]
  nll, exact = {}, {}
  for ep in episodes:
    tokens = [t for u in ep.turns for t in u.obs_tokens + u.action_tokens]
    tokens_1xL = np.asarray([tokens], np.int32)
    logp = np.asarray(model.token_logp(tokens_1xL)[0][0])
    top = np.asarray(jax.numpy.argmax(model(tokens_1xL)[0], axis=-1))
    at = 0
    for k, u in enumerate(ep.turns):
      at += len(u.obs_tokens)
      span = slice(at, at + len(u.action_tokens))
      nll.setdefault(k, []).extend(-logp[span])
      hit = top[at - 1 : span.stop - 1] == np.asarray(u.action_tokens)
      exact.setdefault(k, []).append(bool(hit.all()))
      at = span.stop
  got = turn_fit(model, episodes, pad_id=0, batch=2)
  assert [r["turn"] for r in got] == [1, 2, 3]
  assert [r["episodes"] for r in got] == [3, 2, 1]
  assert [r["tokens"] for r in got] == [4 + 3 + 8, 6 + 2, 5]
  for k, r in enumerate(got):
    assert r["nll_per_token"] == pytest.approx(np.mean(nll[k]), abs=1e-5)
    assert r["exact"] == pytest.approx(np.mean(exact[k]))
  # Greedy-exact turns exist here only if the reference says so; make one
  # certain: an action equal to the model's own argmax continuation.
  ep = episodes[2]
  obs = ep.turns[0].obs_tokens
  greedy = []
  for _ in range(3):
    logits = model(np.asarray([obs + greedy], np.int32))[0, -1]
    greedy.append(int(jax.numpy.argmax(logits)))
  mine = Trajectory(task=None, group_id=0, turns=[Turn(obs, greedy, [0.0] * 3)])
  assert turn_fit(model, [mine], pad_id=0)[0]["exact"] == 1.0


def _sokoban_rollout(max_steps, max_turns, max_len=2048):
  from agentic_rl import models
  from agentic_rl.rollout import Rollout
  from agentic_rl.sampling import Sampler

  sampler = Sampler(models.build("tiny", 0), num_slots=1, max_len=max_len)
  factory = env_factory_from_options(
    {"sokoban": {"instructions": False, "max_steps": max_steps}}
  )
  stack = rewards.from_config(rewards.default_config())
  config = RolloutConfig(max_turns=max_turns, max_total_tokens=4096)
  return Rollout(sampler, build_env_tokenizer(), factory, stack, config)


def test_expert_ceiling_counts_the_levels_solvable_within_the_limits():
  from agentic_rl.rollout import expert_ceiling

  env = envs.make("sokoban")
  tasks = [env.generate_task(s, d) for d in (1, 2) for s in range(24)]
  optimal = [t.payload["optimal_moves"] for t in tasks]
  assert min(optimal) <= 9 < max(optimal)  # the budgets below cut some

  def rate(tasks, budget):  # A*'s optimum, recorded by the generator
    return sum(t.payload["optimal_moves"] <= budget for t in tasks) / len(tasks)

  d2 = [t for t in tasks if t.difficulty == 2]
  # the turn budget (one move a turn), then the env's own step budget
  for max_steps, max_turns, budget in ((100, 9, 9), (9, 100, 9), (20, 12, 12)):
    got = expert_ceiling(_sokoban_rollout(max_steps, max_turns), tasks)
    assert got["success_rate"] == rate(tasks, budget)
    assert got["success_rate/d2"] == rate(d2, budget)
    assert got["success_rate/d1"] == rate(tasks[:24], budget)
  assert expert_ceiling(_sokoban_rollout(100, 100), tasks)["success_rate"] == 1
  # a context the episodes do not fit in: nothing is solvable
  short = _sokoban_rollout(100, 100, max_len=64)
  assert expert_ceiling(short, tasks) == {
    "success_rate": 0.0,
    "success_rate/d1": 0.0,
    "success_rate/d2": 0.0,
  }


def test_expert_ceiling_without_an_expert_is_empty():
  from agentic_rl.rollout import expert_ceiling

  rollout = _sokoban_rollout(10, 10)

  task = envs.make("sokoban").generate_task(0, 0)
  rollout.env_factory = lambda t: NoExpert()
  assert expert_ceiling(rollout, [task]) == {}
  with pytest.raises(ValueError, match="at least one task"):
    expert_ceiling(rollout, [])


def test_fits_context_follows_the_rollout_overflow_rules():
  from agentic_rl.rollout import fits_context
  from agentic_rl.types import Trajectory, Turn

  env = envs.make("sokoban")

  def episode(*lengths):  # (observation, action) token counts a turn
    turns = [
      Turn(obs_tokens=[1] * o, action_tokens=[2] * a, action_logp=[0.0] * a)
      for o, a in lengths
    ]
    return Trajectory(task=env.generate_task(0, 0), group_id=0, turns=turns)

  ep = episode((10, 3), (4, 3))  # 20 tokens in all
  assert fits_context(ep, 20, 8)  # the last action may end at the limit
  assert not fits_context(ep, 19, 8)
  assert not fits_context(ep, 20, 2)  # an action over the turn budget
  # an observation must leave a position free for the next action
  assert not fits_context(episode((10, 3), (7, 1)), 20, 8)
  assert fits_context(episode((10, 3), (6, 1)), 20, 8)
  assert not fits_context(episode((20, 1)), 20, 8)  # the prompt alone
