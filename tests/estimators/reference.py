"""Loop-based numpy references written from the papers, row by row.

`gigpo_rows` mirrors how the GiGPO authors' verl-agent code sees a batch:
one row per real turn, the episode score repeated on every row of its
trajectory, step groups keyed by (group, anchor), torch-style unbiased std.
These are slow and obvious on purpose; the estimators must agree with them.
"""

from collections import defaultdict

import numpy as np


def _std(xs):
  return float(np.std(np.asarray(xs, np.float64), ddof=1))


def discounted(rewards, gamma):
  out, running = [], 0.0
  for r in reversed(rewards):
    running = r + gamma * running
    out.append(running)
  return out[::-1]


def gigpo_rows(
  reward_BxT,
  mask_BxT,
  group_B,
  anchor_BxT,
  *,
  gamma,
  omega,
  mode,
  eps,
  per_turn,
):
  b, t = reward_BxT.shape
  rows = []  # (i, j, group, anchor, episode score, step return)
  for i in range(b):
    js = [j for j in range(t) if mask_BxT[i, j] > 0]
    rs = [float(reward_BxT[i, j]) for j in js]
    rets = discounted(rs, gamma)
    for j, ret in zip(js, rets, strict=True):
      rows.append((i, j, int(group_B[i]), int(anchor_BxT[i, j]), sum(rs), ret))

  ep = defaultdict(list)
  seen = set()
  for i, _, g, _, score, _ in rows:
    if per_turn or i not in seen:
      ep[g].append(score)
      seen.add(i)
  step = defaultdict(list)
  for _, _, g, a, _, ret in rows:
    step[(g, a)].append(ret)

  adv = np.zeros((b, t))
  for i, j, g, a, score, ret in rows:
    xs = ep[g]
    mean, std = (0.0, 1.0) if len(xs) == 1 else (np.mean(xs), _std(xs))
    e = score - mean
    ys = step[(g, a)]
    s_mean, s_std = np.mean(ys), (1.0 if len(ys) == 1 else _std(ys))
    s = ret - s_mean
    if mode == "mean_std_norm":
      e, s = e / (std + eps), s / (s_std + eps)
    adv[i, j] = e + omega * s
  return adv


def gae_loop(rewards, values, mask, gamma, lam):
  adv = np.zeros_like(rewards)
  for i in range(rewards.shape[0]):
    idx = [k for k in range(rewards.shape[1]) if mask[i, k] > 0]
    next_v, next_a = 0.0, 0.0
    for k in reversed(idx):
      delta = rewards[i, k] + gamma * next_v - values[i, k]
      next_a = delta + gamma * lam * next_a
      next_v = values[i, k]
      adv[i, k] = next_a
  return adv
