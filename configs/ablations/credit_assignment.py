"""Credit-assignment ablation: seven advantage estimators, three envs.

  python scripts/sweep.py --config=configs/ablations/credit_assignment.py \
      --root=runs/ca --workers=2
  python scripts/report.py --root=runs/ca --out=experiments/credit_assignment

Question: with everything else fixed (model, SFT warm start, task order,
sampling keys, optimizer), how much does the advantage estimator change
held-out success after RL, and how fast it gets there? Axes: estimators
GRPO, Dr.GRPO, RLOO, GiGPO (mean_norm and mean_std_norm), turn-discounted
and PRM-weighted; environments Sokoban, slippery FrozenLake and search QA
(Search-R1 tags over a BM25 tool); seeds 0, 1, 2. Runs are named
`<env>/<estimator>/seed<seed>`. The tool environment was flight booking
until its SFT stage (seed 0) solved 0 of 128 held-out tasks with 59% of
turns malformed JSON calls: RL from 0% success compares nothing, so search
QA (3.9% after SFT) took its place.

Shared SFT. The SFT stage does not depend on the estimator, so it runs once
per (env, seed) as `<env>/sft/seed<seed>` and every estimator's RL starts
from that checkpoint (`config.init_from`): the estimators share the SFT
policy and its evaluation bit for bit, and the sweep pays for 9 SFT stages
instead of 63.

Paired design. For one seed, every estimator's run starts from the same
state and sees the same data stream up to its own updates: `config.seed`
seeds the model init, the SFT minibatch order, the train-state key that
rollout keys are folded from, and the task sampler (`train_pool.sampler(
config.seed)`); task generation is a pure function of the task seed and
environments reset with `task.seed`, so even FrozenLake's slips repeat.
The estimator enters only after rollouts are scored, so the SFT policy,
its evaluation and the first RL batch are identical across estimators, and
the per-seed difference to GRPO is the estimator's effect (plus the chaos
of different updates feeding back into later rollouts).

`arg`: empty for the experiment; `smoke` for a small sweep (2
estimators x 2 envs x 2 seeds of smoke-size runs, plus one check run of the
sharded path on 8 simulated CPU devices with mesh (2, 2, 2)); `ci` for the
part of it the default test suite runs (Sokoban, seed 0, GRPO only, one RL
step, and the sharded check). The returned
config is the baseline run (first env, GRPO) so the file also runs alone
with `agentic_rl.main`; the loop ignores `config.sweep`.

Expected: see experiments/credit_assignment/README.md (all 63 runs have
run: GiGPO and turn-discounted ended 5-9 points above GRPO on every Sokoban
seed; FrozenLake and search QA do not separate on success).
"""

import ml_collections

from configs import sokoban
from configs.xla_cpu import FAST_COMPILE

ENVS = {
  "sokoban": "configs/sokoban.py",
  "frozenlake": "configs/frozenlake.py",
  "search_qa": "configs/search_qa.py",
}
ESTIMATORS = (
  "grpo",
  "dr_grpo",
  "rloo",
  "gigpo",
  "gigpo_std",
  "turn_discounted",
  "prm_weighted",
)
SEEDS = (0, 1, 2)


def parse_arg(arg: str | None) -> tuple[tuple[int, ...], bool]:
  """(seeds, smoke) from a follow-up sweep's arg: '', 'smoke', 'seeds=N'.

  `seeds=N` runs seeds 0..N-1 instead of `SEEDS`; the runs of the seeds
  both share are the same, so a finished root is extended in place.
  """
  seeds, smoke, _ = parse_switches(arg, ())
  return seeds, smoke


def parse_switches(
  arg: str | None, switches: tuple[str, ...]
) -> tuple[tuple[int, ...], bool, frozenset[str]]:
  """`parse_arg` for a sweep with switches of its own (say 'long'):
  (seeds, smoke, the switches present)."""
  parts = [p for p in (arg or "").split(",") if p]
  seeds = SEEDS
  for p in parts:
    if p.startswith("seeds=") and p[6:].isdigit() and int(p[6:]) > 0:
      seeds = tuple(range(int(p[6:])))
    elif p != "smoke" and p not in switches:
      allowed = "".join(f", '{s}'" for s in switches)
      raise ValueError(
        f"config arg {arg!r}: expected '', 'smoke'{allowed} or 'seeds=N' "
        "(N >= 1)"
      )
  return seeds, "smoke" in parts, frozenset(parts) & frozenset(switches)


def one_env_sweep(
  name: str,
  env: str,
  estimators: tuple[str, ...],
  seeds: tuple[int, ...],
  smoke: bool,
  changes: dict | None = None,
  smoke_changes: dict | None = None,
) -> ml_collections.ConfigDict:
  """A follow-up sweep of one of this sweep's arms: its size, its shared
  SFT stages and GRPO baseline, with `changes` added to every run's
  overrides (a one-seed sweep of smoke runs with `smoke_changes` only, if
  `smoke`). A top-level key of `changes` replaces that key's overrides
  whole; this sweep's own set only `rl` and `tasks`."""
  overrides = {**get_config().sweep.overrides.to_dict(), **(changes or {})}
  return ml_collections.ConfigDict(
    {
      "name": name,
      "envs": {env: ENVS[env]},
      "estimators": estimators,
      "seeds": (0,) if smoke else seeds,
      "smoke": smoke,
      "baseline": "grpo",
      "overrides": (smoke_changes or {}) if smoke else overrides,
      "shared_sft": True,
      "checks": (),
    }
  )


_DEVICES_8 = "--xla_force_host_platform_device_count=8"


def _sharded_check(xla_flags: str = _DEVICES_8, rl_steps: int = 0) -> dict:
  # The mesh path on one host: 8 simulated CPU devices as (data, fsdp,
  # tensor) = (2, 2, 2). Not compared; the report checks its metrics are
  # finite. A minibatch is split over data x fsdp = 4 devices, so it needs
  # a multiple of 4 rows (the smoke batch is 2 tasks x 2 rollouts). RL
  # starts from the sweep's own SFT stage (one device), restored onto the
  # mesh: that restore is checked too, and the check compiles no SFT step
  # for 8 devices (a third of its time).
  rl = {"minibatch_size": 4}
  if rl_steps:  # else the smoke config's
    rl["steps"] = rl_steps
  return {
    "name": "sokoban_gigpo_mesh222",
    "env": "sokoban",
    "estimator": "gigpo",
    "seed": 0,
    "from_shared_sft": True,
    "overrides": {"mesh": {"shape": (2, 2, 2)}, "rl": rl},
    "env_vars": {"XLA_FLAGS": xla_flags},
  }


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  if any(p not in ("smoke", "ci") for p in parts):
    raise ValueError(f"config arg {arg!r}: expected '', 'smoke' or 'ci'")
  ci = "ci" in parts
  smoke = "smoke" in parts or ci
  c = sokoban.get_config("grpo,smoke" if smoke else "grpo")
  c.sweep = ml_collections.ConfigDict(
    {
      "name": "credit_assignment",
      "envs": ENVS,
      "estimators": ESTIMATORS,
      "seeds": SEEDS,
      "smoke": smoke,
      "baseline": "grpo",
      # The experiment's size (the per-env configs' defaults otherwise):
      # 30 RL steps of 8 tasks x 8 rollouts from a shared 150-step SFT,
      # final success on 128 held-out tasks. See the README for its cost.
      "overrides": {"rl": {"steps": 30}, "tasks": {"eval_counts": (128,)}},
      "shared_sft": True,
      "checks": (),
    }
  )
  if smoke:
    c.sweep.envs = {k: ENVS[k] for k in ("sokoban", "frozenlake")}
    c.sweep.estimators = ("grpo", "gigpo")
    c.sweep.seeds = (0, 1)
    c.sweep.overrides = {}
    c.sweep.checks = (_sharded_check(),)
  if ci:  # the default test suite's sweep: SFT, GRPO, the sharded check
    c.sweep.envs = {"sokoban": ENVS["sokoban"]}
    # One estimator: a second run only repeated GRPO's path (9 of the
    # sweep's 61 s, cold, on 2 cores); tests/test_report.py pairs
    # estimators on synthetic runs.
    c.sweep.estimators = ("grpo",)
    c.sweep.seeds = (0,)
    c.sweep.overrides = {"rl": {"steps": 1}}
    # As in the test process (configs/xla_cpu.py): the check is mostly
    # compiles (LLVM opt level 0 alone took this sweep from 95 to 79 s on
    # 2 cores).
    # One RL step on the mesh, not the smoke's 2: the second compiled a
    # longer bucket and evaluated again (73 -> 53 s on 2 cores).
    check = _sharded_check(f"{_DEVICES_8} {FAST_COMPILE}", rl_steps=1)
    c.sweep.checks = (check,)
  return c
