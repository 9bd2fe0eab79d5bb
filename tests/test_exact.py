"""Exact advantages: hand-computed DP values, Monte Carlo agreement, the
advantage identity, Sokoban enumeration, the model's Markov policy and the
estimator-quality metrics."""

import math

import numpy as np
import pytest

from agentic_rl import exact, rewards
from agentic_rl.data import packing
from agentic_rl.envs import frozenlake, sokoban
from agentic_rl.exact import study
from agentic_rl.models import build, build_env_tokenizer
from agentic_rl.types import Task

TOK = build_env_tokenizer()
LEFT, DOWN, RIGHT, UP = range(4)


def _lake(rows, slippery=False):
  return Task(
    id="lake",
    family="frozenlake",
    payload={"rows": rows, "slippery": slippery},
  )


def _lake_mdp(rows, slippery=False):
  env = frozenlake.FrozenLake(instructions=False)
  return exact.frozenlake_mdp([_lake(rows, slippery)], env)


def _soko(rows):
  return Task(id="soko", family="sokoban", payload={"rows": rows})


# ---------------------------------------------------------------------------
# Hand-computed values.


def test_frozenlake_2x2_uniform_hand_values():
  # S F / H G, deterministic, uniform policy, H = 2, gamma = 1.
  mdp = _lake_mdp(["SF", "HG"])
  assert sorted(mdp.keys) == ["s0", "s1", "s2", "s3"]
  s0, s1, s2, s3 = (mdp.keys.index(f"s{i}") for i in range(4))
  q, v = exact.evaluate(mdp, exact.uniform_policy(mdp), horizon=2)
  # Last turn: only Down from s1 reaches G.
  np.testing.assert_allclose(q[1, s1], [0, 1, 0, 0])
  np.testing.assert_allclose(q[1, s0], [0, 0, 0, 0])
  np.testing.assert_allclose(v[1, [s0, s1]], [0, 0.25])
  # First turn: Right from s0 leads to s1 (worth 1/4 with one turn left).
  np.testing.assert_allclose(q[0, s0], [0, 0, 0.25, 0])
  np.testing.assert_allclose(v[0, s0], 0.0625)
  np.testing.assert_allclose(q[0, s1], [0, 1, 0.25, 0.25])
  np.testing.assert_allclose(v[0, s1], 0.375)
  a = exact.advantages(q, v)
  np.testing.assert_allclose(a[0, s0], [-0.0625, -0.0625, 0.1875, -0.0625])
  # Terminal cells are never acted in: value 0 throughout.
  assert np.all(v[:, [s2, s3]] == 0)


def test_frozenlake_2x2_slippery_hand_values():
  # Slippery, one turn left: from s1, Down slips Right (stay), Down (goal)
  # or Left with 1/3 each, so Q(s1, Down) = 1/3; Right slips Down w.p. 1/3.
  mdp = _lake_mdp(["SF", "HG"], slippery=True)
  s1 = mdp.keys.index("s1")
  q, v = exact.evaluate(mdp, exact.uniform_policy(mdp), horizon=1)
  np.testing.assert_allclose(q[0, s1], [1 / 3, 1 / 3, 1 / 3, 0])
  np.testing.assert_allclose(v[0, s1], 0.25)


def test_optimal_finite_is_the_best_success_within_the_budget():
  # S F F / F H F / F F G, deterministic: the goal is 4 moves away, so the
  # best success is 1 with >= 4 turns and 0 with 3.
  mdp = _lake_mdp(["SFF", "FHF", "FFG"])
  start = mdp.start_N[0]
  assert exact.optimal_finite(mdp, horizon=3)[1][0, start] == 0.0
  q, v = exact.optimal_finite(mdp, horizon=4)
  assert v[0, start] == 1.0
  np.testing.assert_allclose(q[0, start], [0, 1, 1, 0])  # Down or Right
  # Slippery 2x2 (hand values as above): from s1 with one turn left the best
  # is 1/3; from s0 with two, any move that can reach s1 does so w.p. 1/3
  # (staying at s0 leaves no way to G in one move): 1/3 * 1/3.
  slip = _lake_mdp(["SF", "HG"], slippery=True)
  s0, s1 = slip.keys.index("s0"), slip.keys.index("s1")
  _, v = exact.optimal_finite(slip, horizon=2)
  np.testing.assert_allclose(v[1, s1], 1 / 3)
  np.testing.assert_allclose(v[0, s0], 1 / 9)
  # No policy beats it: uniform is below it everywhere.
  _, v_uniform = exact.evaluate(slip, exact.uniform_policy(slip), horizon=2)
  assert np.all(v_uniform <= v + 1e-12)
  with pytest.raises(ValueError, match="horizon"):
    exact.optimal_finite(slip, horizon=0)


def test_gamma_discounts_later_rewards():
  mdp = _lake_mdp(["SF", "HG"])
  s0, s1 = mdp.keys.index("s0"), mdp.keys.index("s1")
  pi = np.zeros((4, 4))
  pi[:, RIGHT] = 1.0
  pi[s1] = [0, 1, 0, 0]  # s1: Down to the goal
  q, v = exact.evaluate(mdp, pi, horizon=3, gamma=0.5)
  np.testing.assert_allclose(v[0, s0], 0.5)  # reward 1 one turn later
  np.testing.assert_allclose(q[0, s0, LEFT], 0.5 * 0.5)  # stay, then go


def test_sokoban_corridor_hand_values():
  # Player, floor, box, target in a corridor: two walks then a push.
  task = _soko(["######", "#@_$.#", "######"])
  mdp = exact.sokoban_mdp([task], sokoban.Sokoban(instructions=False))
  assert mdp.num_states == 3
  assert list(mdp.terminal_S) == [False, False, True]
  q, v = exact.evaluate(mdp, exact.uniform_policy(mdp), horizon=2)
  up, down, left, right = range(4)
  # s1 (next to the box): the push pays -0.1 + 1 + 10.
  np.testing.assert_allclose(q[1, 1, right], 10.9)
  np.testing.assert_allclose(q[1, 1, [up, down, left]], -0.1)
  np.testing.assert_allclose(v[1, 1], (10.9 - 0.3) / 4)
  np.testing.assert_allclose(q[0, 0, right], -0.1 + 2.65)
  np.testing.assert_allclose(q[0, 0, [up, down, left]], -0.2)
  np.testing.assert_allclose(v[0, 0], (2.55 - 0.6) / 4)


def test_optimal_q_matches_frozenlake_value_iteration():
  env = frozenlake.FrozenLake(slippery=True, instructions=False)
  task = env.generate_task(3, 0)
  mdp = exact.frozenlake_mdp([task], env)
  q = exact.optimal_q(mdp, gamma=0.9)
  model = frozenlake.transition_model(task.payload["rows"], True)
  v_ref, _ = frozenlake.value_iteration(model, gamma=0.9)
  cells = [int(k[1:]) for k in mdp.keys]
  live = ~mdp.terminal_S
  np.testing.assert_allclose(q.max(1)[live], v_ref[cells][live], atol=1e-8)


# ---------------------------------------------------------------------------
# Identities and Monte Carlo agreement.


def _soft_lake(num_tasks=3, slippery=True):
  env = frozenlake.FrozenLake(slippery=slippery, instructions=False)
  mdp = exact.frozenlake_mdp(
    [env.generate_task(s, 0) for s in range(num_tasks)], env
  )
  return mdp, exact.softmax_policy(exact.optimal_q(mdp), 0.02)


def test_advantage_identity():
  mdp, pi = _soft_lake()
  q, v = exact.evaluate(mdp, pi, horizon=6)
  a = exact.advantages(q, v)
  np.testing.assert_allclose((pi[None] * a).sum(-1), 0.0, atol=1e-12)


def test_dp_values_agree_with_monte_carlo():
  mdp, pi = _soft_lake(num_tasks=2)
  h = 8
  q, v = exact.evaluate(mdp, pi, horizon=h)
  n = 20_000
  eps = study.sample_episodes(mdp, pi, h, n, np.random.default_rng(0))
  r = np.zeros(eps.state_BxT.shape)
  valid = eps.state_BxT >= 0
  s, a, k = (x[valid] for x in (eps.state_BxT, eps.action_BxT,
                                eps.outcome_BxT))  # fmt: skip
  r[valid] = mdp.reward_SxAxK[s, a, k]
  ret_BxT = np.cumsum(r[:, ::-1], axis=1)[:, ::-1]
  for i in range(2):
    rows = eps.task_B == i
    mc = ret_BxT[rows, 0].mean()
    se = ret_BxT[rows, 0].std() / math.sqrt(rows.sum())
    assert abs(mc - v[0, mdp.start_N[i]]) < 4 * se + 1e-9
  # Q_0 at the first start state, per first action.
  rows = eps.task_B == 0
  for act in range(4):
    sel = rows & (eps.action_BxT[:, 0] == act)
    if sel.sum() < 500:
      continue
    se = ret_BxT[sel, 0].std() / math.sqrt(sel.sum())
    assert abs(ret_BxT[sel, 0].mean() - q[0, mdp.start_N[0], act]) < 4 * se


def test_sampled_sokoban_episode_replays_in_the_env():
  env = sokoban.Sokoban(instructions=False)
  task = env.generate_task(5, 0)
  mdp = exact.sokoban_mdp([task], env)
  pi = exact.softmax_policy(exact.optimal_q(mdp), 0.5)
  eps = study.sample_episodes(mdp, pi, 12, 8, np.random.default_rng(1))
  trajs = study.to_trajectories(mdp, eps, pi, TOK)
  for traj in trajs:
    env.reset(task)
    for turn in traj.turns:
      key = env.state_key()
      result = env.step(f"<answer>{turn.action.text}</answer>")
      assert turn.state_key == key
      assert turn.reward_components == pytest.approx(result.reward_components)
    assert env.done == (traj.termination == "done")


def test_trajectories_score_like_the_reward_stack():
  env = sokoban.Sokoban(instructions=False)
  mdp = exact.sokoban_mdp([env.generate_task(s, 0) for s in range(2)], env)
  pi = exact.softmax_policy(exact.optimal_q(mdp), 0.5)
  eps = study.sample_episodes(mdp, pi, 12, 6, np.random.default_rng(2))
  cfg = rewards.default_config()
  cfg.process.signals = mdp.process_signals
  stack = rewards.from_config(cfg)
  for traj in study.to_trajectories(mdp, eps, pi, TOK):
    scored = stack.score_trajectory(traj)
    assert scored.outcome == traj.outcome
    for mine, ref in zip(traj.turns, scored.turns, strict=True):
      assert mine.reward == pytest.approx(ref.reward)
      assert mine.process_score == pytest.approx(ref.process_score)


def test_sokoban_enumeration_counts_states():
  # Box in the middle of a 1x4 corridor with a target at the right end:
  # walks left of the box, then one push solves it.
  task = _soko(["#######", "#@_$_.#", "#######"])
  mdp = exact.sokoban_mdp([task], sokoban.Sokoban(instructions=False))
  # Player 8 or 9 with the box at 10; box at 11 with the player at 8, 9,
  # 10; solved (box 12, player 11).
  assert sorted(mdp.keys) == sorted(
    ["8:10", "9:10", "10:11", "8:11", "9:11", "11:12"]
  )
  assert mdp.terminal_S.sum() == 1
  np.testing.assert_allclose(mdp.prob_SxAxK.sum(-1), 1.0)


# ---------------------------------------------------------------------------
# The model's Markov policy.


def test_model_policy_matches_full_teacher_forcing():
  from agentic_rl import losses

  model = build("tiny", 0)
  mdp = _lake_mdp(["SFF", "FHF", "FFG"])
  template = "Task:\n{observation}\n"
  pi = exact.model_policy(model, TOK, mdp, template, chunk_rows=8)
  np.testing.assert_allclose(pi.sum(1), 1.0, atol=1e-6)
  # Direct, unbatched: the log-prob of each action text after the prompt.
  s = int(np.flatnonzero(~mdp.terminal_S)[2])
  prompt = TOK.encode(template.replace("{observation}", mdp.observations[s]))
  logps = []
  for text in exact.action_texts(mdp):
    ids = np.asarray([prompt + TOK.encode(text)])
    lp = np.asarray(losses.token_logp(model(ids), ids))[0]
    logps.append(lp[len(prompt) :].sum())
  ref = np.exp(np.asarray(logps) - np.logaddexp.reduce(logps))
  np.testing.assert_allclose(pi[s], ref, rtol=1e-4, atol=1e-6)
  assert np.all(pi[mdp.terminal_S] == 0.25)
  # A sequence temperature of 2 takes the square root before normalizing.
  pi2 = exact.model_policy(model, TOK, mdp, template, 8, temperature=2.0)
  np.testing.assert_allclose(
    pi2[s], np.sqrt(ref) / np.sqrt(ref).sum(), rtol=1e-4, atol=1e-6
  )


# ---------------------------------------------------------------------------
# Metrics and the study.


def test_compare_metrics():
  rng = np.random.default_rng(0)
  true = rng.normal(size=5000)
  est = 3.0 * true + 0.5 + 0.1 * rng.normal(size=5000)
  m = study.compare(est, true)
  assert m["scale"] == pytest.approx(3.0, abs=0.02)
  assert m["bias"] == pytest.approx(0.5, abs=0.02)
  assert m["err_var"] == pytest.approx(0.01, abs=0.002)
  assert m["sign_agree"] > 0.9
  assert m["pearson"] == pytest.approx(np.corrcoef(est, true)[0, 1])
  # Spearman is Pearson of ranks; a monotone transform keeps it at 1.
  assert study.compare(np.exp(true), true)["spearman"] == pytest.approx(1.0)
  # Exact zeros count as sign disagreements.
  z = study.compare(np.zeros(4), np.array([1.0, -1.0, 2.0, -2.0]))
  assert z["sign_agree"] == 0.0 and math.isnan(z["pearson"])


def test_true_advantages_align_with_packed_turns():
  mdp, pi = _soft_lake(num_tasks=2)
  eps = study.sample_episodes(mdp, pi, 6, 4, np.random.default_rng(3))
  trajs = study.to_trajectories(mdp, eps, pi, TOK)
  batch = packing.pack(trajs)
  mask = np.asarray(batch.turn_mask_BxT) > 0
  np.testing.assert_array_equal(mask.sum(1), eps.length_B)
  q, v = exact.evaluate(mdp, pi, 6)
  a = exact.advantages(q, v)
  true = study.true_advantages(a, eps, mask.shape[1])
  b, t = 1, 0
  s, act = eps.state_BxT[b, t], eps.action_BxT[b, t]
  assert true[b, t] == a[0, s, act]
  assert np.all(true[~mask] == 0)


def test_study_runs_and_oracle_is_unbiased():
  mdp, pi = _soft_lake(num_tasks=4, slippery=False)
  specs = [
    exact.registry_spec("GRPO", "grpo"),
    exact.gigpo_step_spec("step"),
    exact.oracle_spec(),
  ]
  res = exact.run_study(
    mdp, pi, TOK, horizon=6, group_sizes=(2, 4), seeds=(0,), specs=specs
  )
  rows = {(r["estimator"], r["G"]): r for r in res["rows"]}
  assert len(rows) == 6
  oracle = rows["oracle G_t-V_t", 4]
  # G_t - V_t(s_t) = A_t + noise with mean 0: scale near 1, positive r.
  assert oracle["pearson"] > 0.2
  assert 0.7 < oracle["scale"] < 1.3
  text = study.markdown(res, "t")
  assert "| GRPO | 1 |" in text


def test_gae_with_the_exact_critic():
  """On a deterministic lake, r_t + V_{t+1}(s_{t+1}) = Q_t(s_t, a_t): the
  one-step TD error with the exact V is the true advantage, and lam = 1
  is the Monte Carlo oracle G_t - V_t."""
  mdp, pi = _soft_lake(num_tasks=3, slippery=False)
  eps = study.sample_episodes(mdp, pi, 6, 8, np.random.default_rng(1))
  trajs = study.to_trajectories(mdp, eps, pi, TOK)
  batch = packing.pack(trajs)
  t_b = batch.turn_mask_BxT.shape[1]
  q, v = exact.evaluate(mdp, pi, 6)
  true = study.true_advantages(exact.advantages(q, v), eps, t_b)
  v_BxT = study.at_turns(v, eps, t_b)
  td = exact.critic_spec("td", lam=0.0).fn(batch, v_BxT)
  np.testing.assert_allclose(td, true, atol=1e-5)
  mc = exact.critic_spec("mc", lam=1.0).fn(batch, v_BxT)
  np.testing.assert_allclose(
    mc, exact.oracle_spec().fn(batch, v_BxT), atol=1e-5
  )
  assert np.abs(mc - true).max() > 1e-3  # the oracle is noisy, TD(0) not


def test_truth_fits_a_turn_bucket_shorter_than_the_horizon():
  # A horizon of 40 on a 2x2 lake: episodes end long before, so the packed
  # batch's turn bucket is shorter than the horizon.
  mdp = _lake_mdp(["SF", "HG"])
  pi = exact.uniform_policy(mdp)
  eps = study.sample_episodes(mdp, pi, 40, 4, np.random.default_rng(0))
  trajs = study.to_trajectories(mdp, eps, pi, TOK)
  t_b = packing.pack(trajs).turn_mask_BxT.shape[1]
  assert int(eps.length_B.max()) <= t_b < 40
  q, v = exact.evaluate(mdp, pi, 40)
  true = study.true_advantages(exact.advantages(q, v), eps, t_b)
  assert true.shape == (4, t_b)
