"""Estimator quality against exact advantages.

A study fixes a `TabularMDP`, a Markov policy pi_SxA and a horizon H, and
computes the true per-turn advantage A_t(s, a) = Q_t(s, a) - V_t(s) by
finite-horizon dynamic programming (`mdp.evaluate`). It then samples rollout
batches from the same policy on the host (seeded numpy), turns them into
`Trajectory`s with state keys, rewards and process scores, packs them and
runs each estimator; every real turn's estimated advantage is compared with
A_t(s_t, a_t) of that turn.

Group size without resampling: every task gets G_max trajectories per seed,
and for a group size G they are split into G_max / G disjoint groups. So the
turns (and the truth) are the same for every G; only the grouping, hence
the estimators' baselines, changes.

The scale problem: normalized estimators (GRPO, GiGPO std) live on a
different scale than raw advantages, and outcome-level ones broadcast one
number to all turns. Scale-free metrics are Pearson r, Spearman rho and sign
agreement (on turns with |A| > threshold; an estimate of exactly 0 counts as
a disagreement). Bias and variance are of the error e = est - c * A after
the best least-squares scale c = <est, A> / <A, A> (fit through the origin,
since both are advantages); `nmse` = mean(e^2) / mean(est^2) is the share of
the estimate's energy the scaled truth does not explain (0 is perfect, 1 is
no relation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.stats

from agentic_rl import estimators
from agentic_rl.data import packing
from agentic_rl.exact.mdp import TabularMDP, advantages, evaluate
from agentic_rl.exact.policy import action_texts
from agentic_rl.types import (
  Action,
  ActionKind,
  Termination,
  Trajectory,
  TrajectoryBatch,
  Turn,
)


@dataclasses.dataclass(frozen=True)
class Episodes:
  """Sampled episodes, task-major: task i owns rows i*n .. (i+1)*n - 1.

  `state_BxT`, `action_BxT`, `outcome_BxT` (index into K) are -1 after the
  episode's last turn.
  """

  task_B: np.ndarray
  state_BxT: np.ndarray
  action_BxT: np.ndarray
  outcome_BxT: np.ndarray
  length_B: np.ndarray
  done_B: np.ndarray


def sample_episodes(
  mdp: TabularMDP,
  pi_SxA: np.ndarray,
  horizon: int,
  per_task: int,
  rng: np.random.Generator,
) -> Episodes:
  """Plays `per_task` episodes of every task, all at once (vectorized)."""
  n = len(mdp.start_N) * per_task
  task_B = np.repeat(np.arange(len(mdp.start_N)), per_task)
  state_B = mdp.start_N[task_B].copy()
  alive_B = ~mdp.terminal_S[state_B]
  shape = (n, horizon)
  state_BxT = np.full(shape, -1)
  action_BxT = np.full(shape, -1)
  outcome_BxT = np.full(shape, -1)
  done_B = np.zeros(n, bool)
  cum_pi_SxA = np.cumsum(pi_SxA, axis=1)
  cum_p_SxAxK = np.cumsum(mdp.prob_SxAxK, axis=2)
  for t in range(horizon):
    idx = np.flatnonzero(alive_B)
    if idx.size == 0:
      break
    s = state_B[idx]
    # Inverse-CDF draws; the clip guards against rows summing to 1 - ulp.
    a = (rng.random(idx.size)[:, None] >= cum_pi_SxA[s]).sum(axis=1)
    a = np.minimum(a, 3)
    cp = cum_p_SxAxK[s, a]
    k = (rng.random(idx.size)[:, None] >= cp).sum(axis=1)
    k = np.minimum(k, cp.shape[1] - 1)
    state_BxT[idx, t], action_BxT[idx, t], outcome_BxT[idx, t] = s, a, k
    d = mdp.done_SxAxK[s, a, k]
    state_B[idx] = mdp.next_SxAxK[s, a, k]
    done_B[idx] = d
    alive_B[idx] = ~d
  length_B = (state_BxT >= 0).sum(axis=1)
  return Episodes(task_B, state_BxT, action_BxT, outcome_BxT, length_B, done_B)


def to_trajectories(
  mdp: TabularMDP,
  episodes: Episodes,
  pi_SxA: np.ndarray,
  tokenizer,
) -> list[Trajectory]:
  """Scored `Trajectory`s, as the default reward stack would score them.

  Turns carry the real token ids of the action text, its behaviour log-prob
  log pi(a|s) on the first action token, the env's reward components, the
  reward (their sum), the process score (mean of `mdp.process_signals`)
  and the state key. Observation tokens are left empty: the estimators read
  only turn-level arrays, and a batch of thousands of episodes stays small.
  Group ids are the task index (`regroup` changes them).
  """
  texts = action_texts(mdp)
  ids = [tokenizer.encode(t) for t in texts]
  names = list(mdp.components)
  out = []
  for b in range(len(episodes.task_B)):
    turns: list[Turn] = []
    seen: set[int] = set()
    for t in range(int(episodes.length_B[b])):
      s = int(episodes.state_BxT[b, t])
      a = int(episodes.action_BxT[b, t])
      k = int(episodes.outcome_BxT[b, t])
      comps = {n: float(mdp.components[n][s, a, k]) for n in names}
      # Sokoban reports `solved` only on the solving move.
      if "solved" in comps and comps["solved"] == 0:
        del comps["solved"]
      signals = []
      for sig in mdp.process_signals:
        if sig == "novel_state":
          signals.append(float(s not in seen))
        else:
          signals.append(comps.get(sig.removeprefix("env:"), 0.0))
      seen.add(s)
      logp = math.log(max(float(pi_SxA[s, a]), 1e-30))
      turns.append(
        Turn(
          obs_tokens=[],
          action_tokens=list(ids[a]),
          action_logp=[logp] + [0.0] * (len(ids[a]) - 1),
          action=Action(ActionKind.ANSWER, text=mdp.moves[a]),
          reward_components=comps,
          reward=math.fsum(comps.values()),
          process_score=float(np.mean(signals)) if signals else 0.0,
          state_key=mdp.keys[s],
        )
      )
    verdict = turns[-1].reward_components.get(mdp.outcome_key, 0.0)
    out.append(
      Trajectory(
        task=mdp.tasks[int(episodes.task_B[b])],
        group_id=int(episodes.task_B[b]),
        turns=turns,
        outcome=min(1.0, max(0.0, verdict)),
        termination=(
          Termination.DONE if episodes.done_B[b] else Termination.MAX_TURNS
        ),
      )
    )
  return out


def regroup(trajectories: Sequence[Trajectory], per_task: int, g: int) -> None:
  """Splits each task's `per_task` trajectories into groups of `g`."""
  if per_task % g:
    raise ValueError(f"group size {g} does not divide {per_task}")
  for i, traj in enumerate(trajectories):
    task, j = divmod(i, per_task)
    traj.group_id = task * (per_task // g) + j // g


def at_turns(
  values_TxS: np.ndarray, episodes: Episodes, t_pad: int
) -> np.ndarray:
  """values_TxS[t, s_t] at each real turn, 0 elsewhere: BxT (padded)."""
  state_BxT = _fit(episodes.state_BxT, t_pad)
  b, h = state_BxT.shape
  out = np.zeros((b, t_pad))
  valid = state_BxT >= 0
  t_idx = np.broadcast_to(np.arange(h), (b, h))
  out[:, :h][valid] = values_TxS[t_idx[valid], state_BxT[valid]]
  return out


def _fit(x_BxT: np.ndarray, t_pad: int) -> np.ndarray:
  """Drops turn columns past `t_pad`; the packed batch's turn bucket holds
  the longest episode, so they are all past every episode's end."""
  if np.any(x_BxT[:, t_pad:] >= 0):
    raise ValueError(f"episodes are longer than {t_pad} turns")
  return x_BxT[:, :t_pad]


def true_advantages(
  adv_TxSxA: np.ndarray, episodes: Episodes, t_pad: int
) -> np.ndarray:
  """A_t(s_t, a_t) at each real turn, 0 elsewhere: BxT (padded)."""
  state_BxT = _fit(episodes.state_BxT, t_pad)
  action_BxT = episodes.action_BxT[:, : state_BxT.shape[1]]
  b, h = state_BxT.shape
  out = np.zeros((b, t_pad))
  valid = state_BxT >= 0
  t_idx = np.broadcast_to(np.arange(h), (b, h))
  out[:, :h][valid] = adv_TxSxA[
    t_idx[valid], state_BxT[valid], action_BxT[valid]
  ]
  return out


# ---------------------------------------------------------------------------
# Estimators under study.

# (batch, v_BxT: true V_t(s_t) at the spec's gamma) -> adv_BxT
EstimateFn = Callable[[TrajectoryBatch, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Spec:
  """One estimator row: a label, how to compute it, the truth's gamma."""

  label: str
  fn: EstimateFn
  gamma: float = 1.0


def registry_spec(
  label: str, name: str, gamma: float = 1.0, **hparams: Any
) -> Spec:
  """A registered estimator with fixed hyper-parameters."""
  est = estimators.get(name)
  return Spec(label, lambda batch, v: np.asarray(est(batch, **hparams)), gamma)


def gigpo_step_spec(label: str, gamma: float = 1.0, **hparams: Any) -> Spec:
  """GiGPO's anchor-state step part alone: gigpo(omega=1) - gigpo(omega=0)."""
  est = estimators.get("gigpo")

  def fn(batch: TrajectoryBatch, v_BxT: np.ndarray) -> np.ndarray:
    del v_BxT
    full = est(batch, gamma=gamma, omega=1.0, **hparams)
    episode = est(batch, gamma=gamma, omega=0.0, **hparams)
    return np.asarray(full) - np.asarray(episode)

  return Spec(label, fn, gamma)


def oracle_spec(label: str = "oracle G_t-V_t", gamma: float = 1.0) -> Spec:
  """Monte Carlo return minus the exact value: an unbiased single-sample
  advantage with a perfect baseline, the floor no critic-free estimator
  beats in variance."""

  def fn(batch: TrajectoryBatch, v_BxT: np.ndarray) -> np.ndarray:
    ret = estimators.discounted_returns(
      batch.turn_reward_BxT, batch.turn_mask_BxT, gamma=gamma
    )
    return (np.asarray(ret) - v_BxT) * np.asarray(batch.turn_mask_BxT)

  return Spec(label, fn, gamma)


def critic_spec(label: str, lam: float, gamma: float = 1.0) -> Spec:
  """PPO's turn-level GAE(gamma, lam) with a perfect critic: the exact
  V_t(s_t) at each decision point (`estimators.critic_gae`, unwhitened).
  The ceiling of a learned critic; lam = 1 is `oracle_spec`, lam = 0 the
  one-step TD error r_t + V_{t+1} - V_t."""

  def fn(batch: TrajectoryBatch, v_BxT: np.ndarray) -> np.ndarray:
    b, l, t = batch.shape
    pos_BxT, _ = estimators.critic.decision_positions(
      batch.turn_id_BxL, batch.loss_mask_BxL, t
    )
    real_BxT = np.asarray(batch.turn_mask_BxT) > 0
    rows_BxT = np.broadcast_to(np.arange(b)[:, None], (b, t))
    value_BxL = np.zeros((b, l), np.float32)
    value_BxL[rows_BxT[real_BxT], np.asarray(pos_BxT)[real_BxT]] = v_BxT[
      real_BxT
    ]
    est = estimators.critic_gae(
      batch, value_BxL, level="turn", gamma=gamma, lam=lam, whiten=False
    )
    return np.asarray(est.adv_BxT)

  return Spec(label, fn, gamma)


def default_specs() -> list[Spec]:
  """Every registered estimator (defaults, plus variants worth a row).

  GiGPO and turn-discounted run at gamma = 1 (compared with gamma = 1
  truth) and at their usual 0.95 (compared with gamma = 0.95 truth).
  Estimators registered later (say, in a notebook) get a default row.
  """
  specs = [
    registry_spec("GRPO", "grpo"),
    registry_spec("Dr.GRPO", "dr_grpo"),
    registry_spec("RLOO", "rloo"),
    registry_spec("REINFORCE++", "reinforce_pp"),
    registry_spec("GiGPO mean", "gigpo", gamma=1.0),
    registry_spec("GiGPO std", "gigpo", gamma=1.0, mode="mean_std_norm"),
    registry_spec("GiGPO mean g.95", "gigpo", gamma=0.95),
    gigpo_step_spec("GiGPO step only"),
    registry_spec("turn-disc. g1", "turn_discounted", gamma=1.0),
    registry_spec("turn-disc. g.95", "turn_discounted", gamma=0.95),
    registry_spec("PRM add", "prm_weighted", beta=0.5),
    registry_spec("PRM mult", "prm_weighted", mode="multiplicative"),
    oracle_spec(),
    critic_spec("GAE l.95 exact V", lam=0.95),
    critic_spec("TD(0) exact V", lam=0.0),
  ]
  covered = {
    "grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "turn_discounted",
    "prm_weighted",
  }  # fmt: skip
  specs += [
    registry_spec(n, n)
    for n in estimators.names()
    if n not in covered and not estimators.uses_values(n)  # critic_spec
  ]
  return specs


# ---------------------------------------------------------------------------
# Metrics.


def compare(
  est_N: np.ndarray, true_N: np.ndarray, threshold: float = 1e-3
) -> dict[str, float]:
  """Scale-free agreement and scaled error of estimates vs true advantages.

  See the module docstring for the definitions.
  """
  est_N = np.asarray(est_N, np.float64)
  true_N = np.asarray(true_N, np.float64)
  nan = float("nan")
  flat = np.std(est_N) == 0 or np.std(true_N) == 0
  pearson = nan if flat else float(np.corrcoef(est_N, true_N)[0, 1])
  spearman = nan if flat else float(scipy.stats.spearmanr(est_N, true_N)[0])
  big = np.abs(true_N) > threshold
  sign = (
    float(np.mean(np.sign(est_N[big]) == np.sign(true_N[big])))
    if big.any()
    else nan
  )
  aa = float(true_N @ true_N)
  scale = float(est_N @ true_N) / aa if aa > 0 else 0.0
  err_N = est_N - scale * true_N
  energy = float(np.mean(est_N**2))
  return {
    "pearson": pearson,
    "spearman": spearman,
    "sign_agree": sign,
    "scale": scale,
    "bias": float(err_N.mean()),
    "err_var": float(err_N.var()),
    "nmse": float(np.mean(err_N**2)) / energy if energy > 0 else nan,
  }


METRICS = (
  "pearson", "spearman", "sign_agree", "scale", "bias", "err_var", "nmse",
)  # fmt: skip


# ---------------------------------------------------------------------------
# The study.


def run_study(
  mdp: TabularMDP,
  pi_SxA: np.ndarray,
  tokenizer,
  *,
  horizon: int,
  group_sizes: Sequence[int] = (2, 4, 8, 16),
  seeds: Sequence[int] = (0, 1, 2),
  specs: Sequence[Spec] | None = None,
  threshold: float = 1e-3,
) -> dict[str, Any]:
  """Per (estimator, G): metrics per seed and their mean and std.

  Returns {"rows": [...], "per_seed": [...], "stats": {...}} where each row
  has `estimator`, `G`, `gamma` and `<metric>` / `<metric>_std` (std over
  seeds).
  """
  specs = list(default_specs() if specs is None else specs)
  per_task = max(group_sizes)
  truths = {}
  for gamma in sorted({s.gamma for s in specs}):
    q, v = evaluate(mdp, pi_SxA, horizon, gamma)
    truths[gamma] = (advantages(q, v), v)
  per_seed, stats = [], []
  for seed in seeds:
    rng = np.random.default_rng(seed)
    eps = sample_episodes(mdp, pi_SxA, horizon, per_task, rng)
    trajs = to_trajectories(mdp, eps, pi_SxA, tokenizer)
    stats.append(
      {
        "seed": seed,
        "episodes": len(trajs),
        "turns": int(eps.length_B.sum()),
        "mean_outcome": float(np.mean([t.outcome for t in trajs])),
        "mean_return": float(
          np.mean([sum(u.reward for u in t.turns) for t in trajs])
        ),
      }
    )
    for g in group_sizes:
      regroup(trajs, per_task, g)
      batch = packing.pack(trajs)
      mask = np.asarray(batch.turn_mask_BxT) > 0
      t_b = mask.shape[1]
      for spec in specs:
        adv_TxSxA, v_TxS = truths[spec.gamma]
        true_BxT = true_advantages(adv_TxSxA, eps, t_b)
        v_BxT = at_turns(v_TxS, eps, t_b)
        est_BxT = spec.fn(batch, v_BxT)
        row = compare(est_BxT[mask], true_BxT[mask], threshold)
        per_seed.append(
          {
            "estimator": spec.label,
            "G": g,
            "gamma": spec.gamma,
            "seed": seed,
            **row,
          }  # fmt: skip
        )
  rows = _aggregate(per_seed, [s.label for s in specs], group_sizes)
  v0 = truths[1.0][1][0, mdp.start_N] if 1.0 in truths else None
  summary = {
    "tasks": len(mdp.start_N),
    "states": mdp.num_states,
    "horizon": horizon,
    "group_sizes": list(group_sizes),
    "seeds": list(seeds),
    "threshold": threshold,
    "exact_mean_return_gamma1": None if v0 is None else float(v0.mean()),
    "sampled": stats,
  }
  return {"rows": rows, "per_seed": per_seed, "summary": summary}


def _aggregate(
  per_seed: Sequence[Mapping[str, Any]],
  labels: Sequence[str],
  group_sizes: Sequence[int],
) -> list[dict[str, Any]]:
  rows = []
  for label in labels:
    for g in group_sizes:
      sel = [r for r in per_seed if r["estimator"] == label and r["G"] == g]
      row: dict[str, Any] = {"estimator": label, "G": g,
                             "gamma": sel[0]["gamma"]}  # fmt: skip
      for m in METRICS:
        vals = np.asarray([r[m] for r in sel], np.float64)
        row[m] = float(np.mean(vals))
        row[f"{m}_std"] = float(np.std(vals))
      rows.append(row)
  return rows


# ---------------------------------------------------------------------------
# Reporting.


def markdown(result: Mapping[str, Any], title: str) -> str:
  """A pivot per headline metric (estimator x G) and the full table."""
  rows = result["rows"]
  gs = result["summary"]["group_sizes"]
  labels = list(dict.fromkeys(r["estimator"] for r in rows))
  by = {(r["estimator"], r["G"]): r for r in rows}
  out = [f"## {title}", ""]
  for m in ("pearson", "spearman", "sign_agree", "nmse"):
    out += [
      f"**{m}** (mean ± std over seeds)",
      "",
      "| estimator | gamma | " + " | ".join(f"G={g}" for g in gs) + " |",
      "|---|---|" + "---|" * len(gs),
    ]
    for lab in labels:
      cells = [
        f"{by[lab, g][m]:.3f} ± {by[lab, g][m + '_std']:.3f}" for g in gs
      ]
      gamma = by[lab, gs[0]]["gamma"]
      out.append(f"| {lab} | {gamma:g} | " + " | ".join(cells) + " |")
    out.append("")
  out += [
    "**scaled error** (c = best LS scale; bias and variance of est - c*A)",
    "",
    "| estimator | G | c | bias | err var |",
    "|---|---|---|---|---|",
  ]
  for lab in labels:
    for g in gs:
      r = by[lab, g]
      out.append(
        f"| {lab} | {g} | {r['scale']:.3f} | {r['bias']:.4f} | "
        f"{r['err_var']:.4f} |"
      )
  return "\n".join(out) + "\n"


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
  """Fixed-width text: estimator, G and the headline metrics."""
  cols = ("pearson", "spearman", "sign_agree", "scale", "nmse")
  head = f"{'estimator':<18} {'G':>3} " + " ".join(f"{c:>10}" for c in cols)
  lines = [head]
  for r in rows:
    vals = " ".join(f"{r[c]:>10.3f}" for c in cols)
    lines.append(f"{r['estimator']:<18} {r['G']:>3} {vals}")
  return "\n".join(lines)


def plot(result: Mapping[str, Any], path: str, title: str) -> None:
  """Pearson, Spearman, sign agreement and nmse vs G, one line each."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = result["rows"]
  labels = list(dict.fromkeys(r["estimator"] for r in rows))
  fig, axes = plt.subplots(2, 2, figsize=(12, 8))
  cmap = plt.get_cmap("tab20")
  for ax, m in zip(
    axes.flat, ("pearson", "spearman", "sign_agree", "nmse"), strict=True
  ):
    for i, lab in enumerate(labels):
      sel = [r for r in rows if r["estimator"] == lab]
      ax.errorbar(
        [r["G"] for r in sel],
        [r[m] for r in sel],
        yerr=[r[m + "_std"] for r in sel],
        label=lab,
        color=cmap(i % 20),
        marker="o",
        ms=3,
        capsize=2,
        ls="--" if lab.startswith("oracle") else "-",
      )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("group size G")
    ax.set_title(m)
    ax.grid(alpha=0.3)
  axes[0, 1].legend(fontsize=7, loc="best")
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
