"""Estimator advantages against exact DP advantages, as a function of G.

  python scripts/estimator_quality.py --env frozenlake \
      --out experiments/credit_assignment/estimator_quality
  python scripts/estimator_quality.py --env sokoban --policy model

Enumerates every reachable state of `--tasks` generated tasks, fixes a
Markov policy (`soft_optimal`: softmax of the discounted optimal Q over
`--temperature`; `uniform`; or `model`: the tiny preset with random weights
from `--model_seed`, its move probabilities computed by teacher forcing the
four action texts after the turn-0 prompt of each state), computes the true
A_t(s, a) by finite-horizon DP, samples `--seeds` batches of max(G)
trajectories per task, and compares every estimator's per-turn advantages
with the truth (see `agentic_rl.exact.study`). Prints the table and writes
`<name>.json`, `<name>.md` and `<name>.png` into --out, where name is
`<env>_<variant>_<policy>`.
"""

import argparse
import json
import pathlib
import platform
import time

import numpy as np

from agentic_rl import exact
from agentic_rl.envs import frozenlake, sokoban
from agentic_rl.exact import study
from agentic_rl.models import build, build_env_tokenizer
from agentic_rl.rollout import RolloutConfig


def _mdp(args) -> tuple[exact.TabularMDP, str]:
  seeds = range(args.task_seed, args.task_seed + args.tasks)
  if args.env == "frozenlake":
    env = frozenlake.FrozenLake(
      slippery=not args.deterministic, instructions=args.instructions
    )
    tasks = [env.generate_task(s, args.difficulty) for s in seeds]
    size = frozenlake.DIFFICULTIES[args.difficulty][0]
    kind = "det" if args.deterministic else "slippery"
    return exact.frozenlake_mdp(tasks, env), f"{size}x{size}_{kind}"
  env = sokoban.Sokoban(instructions=args.instructions)
  tasks = [env.generate_task(s, args.difficulty) for s in seeds]
  return exact.sokoban_mdp(tasks, env), f"d{args.difficulty}"


def _policy(args, mdp, tokenizer) -> tuple[np.ndarray, str]:
  if args.policy == "uniform":
    return exact.uniform_policy(mdp), "uniform over the four moves"
  if args.policy == "soft_optimal":
    q = exact.optimal_q(mdp, gamma=0.95)
    return (
      exact.softmax_policy(q, args.temperature),
      f"softmax(Q*_0.95 / {args.temperature})",
    )
  model = build("tiny", args.model_seed)
  template = RolloutConfig().prompt_template
  pi = exact.model_policy(
    model, tokenizer, mdp, template, temperature=args.model_temperature
  )
  return pi, (
    f"tiny preset, random init (seed {args.model_seed}), Markov policy by "
    f"teacher forcing, prompt_template {template!r}, sequence temperature "
    f"{args.model_temperature}"
  )


def _flags(args) -> str:
  """The command line that reproduces this run (booleans as bare flags)."""
  parts = []
  for k, v in vars(args).items():
    if isinstance(v, bool):
      parts += [f"--{k}"] if v else []
    else:
      parts.append(f"--{k} {v}")
  return " ".join(parts)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--env", choices=("frozenlake", "sokoban"), required=True)
  p.add_argument(
    "--policy", choices=("soft_optimal", "uniform", "model"),
    default="soft_optimal",
  )  # fmt: skip
  p.add_argument("--out", default="experiments/credit_assignment/"
                 "estimator_quality")  # fmt: skip
  p.add_argument("--tasks", type=int, default=200)
  p.add_argument("--task_seed", type=int, default=0)
  p.add_argument("--difficulty", type=int, default=0)
  p.add_argument("--deterministic", action="store_true",
                 help="FrozenLake without slipping")  # fmt: skip
  p.add_argument(
    "--instructions",
    action="store_true",
    help="show the env's instructions in the observation",
  )
  p.add_argument(
    "--horizon",
    type=int,
    default=None,
    help="max turns (default 16 frozenlake, 10 sokoban)",
  )
  p.add_argument(
    "--temperature",
    type=float,
    default=None,
    help="soft_optimal temperature (default 0.01 / 0.5)",
  )
  p.add_argument("--model_seed", type=int, default=0)
  p.add_argument(
    "--model_temperature",
    type=float,
    default=1.0,
    help="pi ~ p(move text)^(1/T) for the model policy",
  )
  p.add_argument("--group_sizes", default="2,4,8,16")
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--threshold", type=float, default=1e-3)
  args = p.parse_args()
  fl = args.env == "frozenlake"
  if args.horizon is None:
    args.horizon = 16 if fl else 10
  if args.temperature is None:
    args.temperature = 0.01 if fl else 0.5

  t0 = time.time()
  tokenizer = build_env_tokenizer()
  mdp, variant = _mdp(args)
  pi, policy_desc = _policy(args, mdp, tokenizer)
  t_policy = time.time() - t0
  result = exact.run_study(
    mdp,
    pi,
    tokenizer,
    horizon=args.horizon,
    group_sizes=[int(g) for g in args.group_sizes.split(",")],
    seeds=[int(s) for s in args.seeds.split(",")],
    threshold=args.threshold,
  )
  live = ~mdp.terminal_S
  ent = -(pi[live] * np.log(np.maximum(pi[live], 1e-30))).sum(1)
  result["summary"].update(
    env=args.env,
    variant=variant,
    policy=policy_desc,
    policy_entropy_nats=float(ent.mean()),
    seconds_policy=round(t_policy, 1),
    seconds_total=round(time.time() - t0, 1),
    machine=f"{platform.machine()} {platform.processor()}, CPU only",
  )
  result["args"] = vars(args)
  name = f"{args.env}_{variant}_{args.policy}"
  if args.policy == "model" and args.model_temperature != 1.0:
    name += f"_T{args.model_temperature:g}"
  title = (
    f"{args.env} {variant}, {args.policy}, H={args.horizon}, {args.tasks} tasks"
  )
  s = result["summary"]
  print(f"{title}: {s['states']} states, exact E[return] (gamma 1) "
        f"{s['exact_mean_return_gamma1']:.3f}, policy entropy "
        f"{s['policy_entropy_nats']:.3f} nats\n")  # fmt: skip
  print(study.format_table(result["rows"]))
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / f"{name}.json").write_text(json.dumps(result, indent=1))
  header = (
    f"Command: `python scripts/estimator_quality.py {_flags(args)}`"
    f"\n\nPolicy: {policy_desc}. {s['states']} states, exact mean return "
    f"(gamma 1) {s['exact_mean_return_gamma1']:.3f}, "
    f"{s['sampled'][0]['turns']} turns per seed, seeds {s['seeds']}.\n\n"
  )
  (out / f"{name}.md").write_text(header + study.markdown(result, title))
  study.plot(result, str(out / f"{name}.png"), title)
  print(f"\nwrote {out / name}.{{json,md,png}} in {s['seconds_total']} s")


if __name__ == "__main__":
  main()
