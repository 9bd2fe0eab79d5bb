"""Sweeps: a config's `sweep` field expanded into runs, launched, resumed.

An ablation config (`configs/ablations/*.py`) returns its base config plus
`config.sweep`, a ConfigDict with

  name        the sweep's name (the manifest records it)
  envs        environment label -> per-env config file (`configs/<env>.py`)
  estimators  estimator variants those files accept as their `arg`
  seeds       config.seed values; a seed is one paired replicate
  smoke       appends `smoke` to every run's config arg
  baseline    the estimator the report compares every other one against
  pairs       (optional) "A:B" entries naming two swept estimators (arms):
              the report also pairs B against A on the same seeds (e.g.
              a treatment against its equal-compute control), besides
              every arm against the baseline
  overrides   nested config fields -> values, applied to every grid run
              ({"rl": {"steps": 5}} is `--config.rl.steps=5`)
  checks      extra runs that are not part of the comparison (e.g. the
              sharded path on simulated devices): dicts with name, env,
              estimator, seed, overrides, env_vars and optionally
              from_shared_sft (start RL from the (env, seed) SFT stage,
              with shared_sft; a stage may restore onto another mesh)
  arms        (optional) named arms that are not a config variant of their
              own: arm name -> {"variant": <an estimator variant>,
              "overrides": {...}}. An entry of `estimators` naming an arm
              runs that variant with the arm's overrides added (after
              `overrides`), under the arm's name: a loss or critic
              setting becomes one more arm of the comparison
  shared_sft  (optional, default False) run the SFT stage once per
              (env, seed), as `<env>/sft/seed<seed>` with `rl.steps=0`,
              and start every estimator's RL from it (`config.init_from`):
              the estimators then share the SFT policy exactly, and the
              sweep pays for SFT |envs| x |seeds| times instead of
              |envs| x |estimators| x |seeds| times

Every grid run is `python -m agentic_rl.main --config=<file>:<arg>
--workdir=<root>/<env>/<estimator>/seed<seed> --config.seed=<seed>` plus
`--config.<field>=<value>` overrides (and, with `shared_sft`,
`--config.init_from=<root>/<env>/sft/seed<seed>`), so a run is reproducible
from its command alone. A run is finished when its workdir holds
`summary.json`; an unfinished one is simply launched again and resumes from
its checkpoints. Each launch adds its wall time and peak resident memory
to the run's `sweep_timing.json` (an arm's cost, in the report). Local
runs (`run_sweep`) share a persistent XLA compilation cache,
`<root>/jax_cache`, so only the first run of a shape pays for its compiles.

A follow-up sweep whose SFT stages have an earlier root's recipe can start
from that root's stages instead of training them again (`adopt_stages`,
`scripts/sweep.py --stages_from=<root>`): each stage is checked against the
fields `config.init_from` checks, then copied with its checkpoint, so the
two sweeps' runs of a seed start from the same policy.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fnmatch
import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections
from absl import flags
from ml_collections import config_flags

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
MANIFEST = "sweep.json"
SUMMARY = "summary.json"
TIMING = "sweep_timing.json"
# Written into a stage copied from another root: where it came from.
ADOPTED = "adopted_from.json"
# Read by agentic_rl.main: call jax.distributed.initialize() before training.
DISTRIBUTED_ENV = "AGENTIC_RL_DISTRIBUTED"
# Process count and this process's id, for launches no cluster describes
# (several processes on one machine, hand-started hosts); a TPU pod, SLURM
# or Open MPI job leaves them unset and JAX reads its own environment.
NUM_PROCESSES_ENV = "AGENTIC_RL_NUM_PROCESSES"
PROCESS_ID_ENV = "AGENTIC_RL_PROCESS_ID"
# Local runs share a persistent XLA compilation cache under the root.
CACHE_DIR = "jax_cache"
CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
SIMULATED_DEVICES_FLAG = "--xla_force_host_platform_device_count"
_REQUIRED = ("name", "envs", "estimators", "seeds")


class SweepSpecError(ValueError):
  """A sweep description (or a flag that shapes it) is malformed."""


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run of a sweep: a config file, its arg, overrides and a seed."""

  name: str  # e.g. "sokoban/gigpo/seed0"; also the workdir under the root
  env: str
  estimator: str
  seed: int
  config_file: str  # relative to the repository root
  config_arg: str
  overrides: tuple[tuple[str, str], ...] = ()
  env_vars: tuple[tuple[str, str], ...] = ()
  kind: str = "grid"  # "grid" runs are compared; "sft", "check" are not
  init_from_run: str = ""  # name of the "sft" run this run starts from

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["overrides"] = dict(self.overrides)
    d["env_vars"] = dict(self.env_vars)
    return d


def _config_file(path: str) -> pathlib.Path:
  """A config file path as this process can open it: as given (from the
  working directory), else under the repository root, where runs start."""
  file = pathlib.Path(path)
  if file.is_absolute():
    return file
  here = (pathlib.Path.cwd() / file).resolve()
  return here if here.exists() else REPO_ROOT / path


def load_config(spec: str) -> ml_collections.ConfigDict:
  """`path/to/file.py[:arg]` -> that file's `get_config(arg)`."""
  path, _, arg = spec.partition(":")
  file = _config_file(path)
  if file.suffix != ".py" or not file.is_file():
    raise SweepSpecError(f"config file {path!r} not found (from {spec!r})")
  # Config files import their siblings as `configs.<name>`.
  if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
  module_spec = importlib.util.spec_from_file_location(
    f"_sweep_config_{file.stem}", file
  )
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise SweepSpecError(f"{file} has no get_config(arg)")
  return module.get_config(arg or None)


def override_value(value: Any) -> str:
  """A value as absl/ml_collections parse it from `--config.x=<value>`."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, (list, tuple)):
    body = ",".join(override_value(v) for v in value)
    return f"({body},)" if len(value) == 1 else f"({body})"
  return str(value)


def parse_mesh(text: str) -> tuple[int, ...]:
  """`"2,2,2"` -> (2, 2, 2): the (data, fsdp, tensor) mesh shape."""
  try:
    shape = tuple(int(p) for p in text.replace(" ", "").strip("()").split(","))
  except ValueError as e:
    raise SweepSpecError(f"--mesh {text!r}: expected ints like 2,2,2") from e
  if len(shape) != 3 or min(shape) < 1:
    raise SweepSpecError(f"--mesh {text!r}: expected 3 positive ints")
  return shape


def _as_dict(value: Any, what: str) -> dict[str, Any]:
  if isinstance(value, ml_collections.ConfigDict):
    return value.to_dict()
  if isinstance(value, Mapping):
    return dict(value)
  raise SweepSpecError(f"sweep.{what} must be a mapping, got {value!r}")


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{"rl": {"steps": 5}} -> {"rl.steps": 5} (ConfigDicts forbid dots)."""
  flat = {}
  for key, value in values.items():
    if isinstance(value, (Mapping, ml_collections.ConfigDict)):
      flat.update(flatten(_as_dict(value, key), f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def _overrides(values: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
  return tuple(
    sorted((k, override_value(v)) for k, v in flatten(values).items())
  )


def _check_sweep(sweep: Any) -> None:
  if not isinstance(sweep, (ml_collections.ConfigDict, Mapping)):
    raise SweepSpecError("config has no `sweep` field (a ConfigDict)")
  missing = [k for k in _REQUIRED if k not in sweep]
  if missing:
    raise SweepSpecError(f"sweep lacks field(s) {missing}")
  envs = _as_dict(sweep["envs"], "envs")
  if not envs or not sweep["estimators"] or not sweep["seeds"]:
    raise SweepSpecError("sweep.envs, .estimators and .seeds must be non-empty")
  for label, file in envs.items():
    if "/" in label or not (REPO_ROOT / file).is_file():
      raise SweepSpecError(f"sweep.envs[{label!r}] = {file!r}: no such file")
  for seed in sweep["seeds"]:
    if not isinstance(seed, int) or isinstance(seed, bool):
      raise SweepSpecError(f"sweep.seeds must be ints, got {seed!r}")
  for axis in ("estimators", "seeds"):
    if len(set(sweep[axis])) != len(sweep[axis]):
      raise SweepSpecError(f"sweep.{axis} has duplicates: {sweep[axis]}")
  baseline = sweep.get("baseline")
  if baseline is not None and baseline not in sweep["estimators"]:
    raise SweepSpecError(f"sweep.baseline {baseline!r} is not swept")
  parse_pairs(sweep.get("pairs") or (), sweep["estimators"], SweepSpecError)
  _arms(sweep)


def parse_pairs(
  entries: Sequence[str],
  estimators: Sequence[str],
  error: type[Exception] = SweepSpecError,
) -> list[tuple[str, str]]:
  """ "A:B" entries as (A, B): two different swept estimators, each pair
  once; `error` (the caller's exception type) names a bad entry."""
  if isinstance(entries, str):
    raise error(f"pairs {entries!r}: expected a list of 'A:B' entries")
  pairs = []
  for entry in entries:
    a, sep, b = str(entry).partition(":")
    if not isinstance(entry, str) or not sep or not a or not b or ":" in b:
      raise error(f"pair {entry!r}: expected 'A:B' (two estimator names)")
    unknown = [e for e in (a, b) if e not in estimators]
    if unknown or a == b or (a, b) in pairs:
      why = f"{unknown} not swept" if unknown else "a duplicate or A = B"
      raise error(f"pair {entry!r}: {why} (estimators: {list(estimators)})")
    pairs.append((a, b))
  return pairs


def _arms(sweep: Any) -> dict[str, tuple[str, dict[str, Any]]]:
  """sweep.arms as arm name -> (variant, flat overrides), checked."""
  arms = {}
  for name, arm in _as_dict(sweep.get("arms") or {}, "arms").items():
    arm = _as_dict(arm, f"arms[{name!r}]")
    unknown = set(arm) - {"variant", "overrides"}
    if "/" in name or not isinstance(arm.get("variant"), str) or unknown:
      raise SweepSpecError(
        f"sweep.arms[{name!r}] = {arm!r}: expected a name without '/' and "
        "{'variant': <estimator variant>, 'overrides': {...}}"
      )
    overrides = _as_dict(arm.get("overrides", {}), f"arms[{name!r}].overrides")
    arms[name] = (arm["variant"], flatten(overrides))
  return arms


def expand(sweep: Any, mesh: tuple[int, ...] | None = None) -> list[RunSpec]:
  """Every run of the sweep: SFT stages, grid runs, then checks.

  Grid runs go env by env and, within an env, seed by seed, so any prefix
  of the sweep that finishes holds complete paired replicates (every
  estimator of a seed) rather than one estimator's seeds.

  `mesh` sets `config.mesh.shape` on every grid run (not on check runs,
  which pin their own mesh).
  """
  _check_sweep(sweep)
  envs = _as_dict(sweep["envs"], "envs")
  smoke = bool(sweep.get("smoke", False))
  common = _as_dict(sweep.get("overrides", {}), "overrides")
  if mesh is not None:
    common = {**flatten(common), "mesh.shape": tuple(mesh)}
  arms = _arms(sweep)

  def spec(env, est, seed, name, overrides, env_vars=(), kind="grid", init=""):
    if env not in envs:
      raise SweepSpecError(f"run {name!r}: unknown env {env!r}")
    variant, arm_overrides = arms.get(est, (est, {}))
    return RunSpec(
      name=name,
      env=env,
      estimator=est,
      seed=int(seed),
      config_file=envs[env],
      config_arg=f"{variant},smoke" if smoke else variant,
      overrides=_overrides(
        {"seed": seed, **flatten(overrides), **arm_overrides}
      ),
      env_vars=tuple(sorted(env_vars)),
      kind=kind,
      init_from_run=init,
    )

  shared = bool(sweep.get("shared_sft", False))
  runs = []
  if shared:  # one SFT stage per (env, seed); the grid starts RL from it
    first = sweep.get("baseline") or sweep["estimators"][0]
    sft_only = {**flatten(common), "rl.steps": 0}
    runs += [
      spec(env, first, seed, sft_name(env, seed), sft_only, kind="sft")
      for env in envs
      for seed in sweep["seeds"]
    ]
  runs += [
    spec(
      env,
      est,
      seed,
      f"{env}/{est}/seed{seed}",
      common,
      init=sft_name(env, seed) if shared else "",
    )
    for env in envs
    for seed in sweep["seeds"]
    for est in sweep["estimators"]
  ]
  for check in sweep.get("checks", ()) or ():
    c = _as_dict(check, "checks[]")
    if c.get("from_shared_sft") and (
      not shared or c.get("seed") not in sweep["seeds"]
    ):
      raise SweepSpecError(
        f"sweep check {c.get('name')!r} starts from a shared SFT stage, but "
        f"the sweep runs none for seed {c.get('seed')!r} (shared_sft "
        f"{shared}, seeds {list(sweep['seeds'])})"
      )
    try:
      runs.append(
        spec(
          c["env"],
          c["estimator"],
          c["seed"],
          f"checks/{c['name']}",
          _as_dict(c.get("overrides", {}), "checks[].overrides"),
          _as_dict(c.get("env_vars", {}), "checks[].env_vars").items(),
          kind="check",
          init=sft_name(c["env"], c["seed"])
          if c.get("from_shared_sft")
          else "",
        )
      )
    except KeyError as e:
      raise SweepSpecError(f"sweep check {c!r} lacks {e}") from e
  names = [r.name for r in runs]
  if len(set(names)) != len(names):
    raise SweepSpecError(f"duplicate run names in sweep: {names}")
  return runs


def select(runs: Sequence[RunSpec], patterns: Sequence[str]) -> list[RunSpec]:
  """Runs whose name matches a glob pattern, plus the SFT stages they need.

  E.g. `("sokoban/*",)` or `("*/seed0",)`; order is kept. A pattern that
  matches nothing is an error (a typo should not silently run nothing).
  """
  chosen = set()
  for pattern in patterns:
    hits = {r.name for r in runs if fnmatch.fnmatchcase(r.name, pattern)}
    if not hits:
      raise SweepSpecError(f"--only pattern {pattern!r} matches no run")
    chosen |= hits
  chosen |= {r.init_from_run for r in runs if r.name in chosen} - {""}
  return [r for r in runs if r.name in chosen]


def sft_name(env: str, seed: int) -> str:
  """Name (and workdir under the root) of a shared SFT stage."""
  return f"{env}/sft/seed{seed}"


def workdir(root: str | os.PathLike, run: RunSpec) -> pathlib.Path:
  return pathlib.Path(root) / run.name


def is_finished(root: str | os.PathLike, run: RunSpec) -> bool:
  """A run is finished once the loop has written its summary.json.

  A shared SFT stage must also still hold its checkpoint, which the runs
  after it start from: a stage whose checkpoint was dropped (e.g. a sweep
  root committed without checkpoints) runs again. SFT is deterministic for
  a config and seed on the same software and CPU type, so the rerun hands
  over the same policy (compare its post-SFT evaluation to be sure).
  """
  wd = workdir(root, run)
  if run.kind == "sft" and not any((wd / "checkpoints").glob("[0-9]*")):
    return False
  return (wd / SUMMARY).is_file()


def unfinished(
  runs: Sequence[RunSpec], root: str | os.PathLike
) -> list[RunSpec]:
  """The runs a sweep still has to launch, in order.

  Finished runs are left out (`is_finished`), and so is a shared SFT stage
  that lost its checkpoint once every run of `runs` that starts from it has
  finished: nothing would start from the rerun. Extending a committed sweep
  root with more seeds or arms then trains only the stages the new runs
  need. A stage that no run of `runs` starts from (`--only` picked it
  alone) runs as asked.
  """
  left = [r for r in runs if not is_finished(root, r)]
  waited_on = {r.init_from_run for r in left}
  started_from = {r.init_from_run for r in runs}
  return [
    r
    for r in left
    if r.kind != "sft" or r.name in waited_on or r.name not in started_from
  ]


def run_config(run: RunSpec) -> dict[str, Any]:
  """The config `run`'s command builds, as the JSON its config.json holds
  (without `init_from`). The overrides go through ml_collections' own flag
  parsing, exactly as in `agentic_rl.main`."""
  argv = ["run", f"--config={_config_file(run.config_file)}:{run.config_arg}"]
  argv += [f"--config.{k}={v}" for k, v in run.overrides]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file(
    "config", None, flag_values=values, lock_config=True, sys_argv=argv
  )
  values(argv)
  return json.loads(values.config.to_json_best_effort())


def check_runs(runs: Sequence[RunSpec]) -> None:
  """`loop.check_config` on every run's config, before any is launched, so
  a bad setting in a sweep's last arm fails now rather than after the runs
  before it. Raises SweepSpecError naming each run that fails, and why."""
  from agentic_rl.train import loop  # imports jax: only when asked

  bad = []
  for run in runs:
    try:
      loop.check_config(ml_collections.ConfigDict(run_config(run)))
    except (ValueError, KeyError, TypeError) as e:
      bad.append(f"{run.name}: {type(e).__name__}: {e}")
  if bad:
    raise SweepSpecError(
      f"{len(bad)} of {len(runs)} runs have configs that would fail at "
      "setup:\n  " + "\n  ".join(bad)
    )


def adopt_stages(
  runs: Sequence[RunSpec],
  root: str | os.PathLike,
  source: str | os.PathLike,
) -> list[tuple[str, str]]:
  """Copies the finished shared SFT stages of `runs` from another root.

  A stage of `runs` that `root` lacks and `source` holds finished (summary
  and checkpoint) is compared with that finished stage on every field
  `config.init_from` checks (seed, model, environment, tasks, sampler,
  rollout, SFT, ...; not the estimator, the RL length or the evaluation
  grid, which SFT does not use). Any difference raises SweepSpecError
  naming the field; otherwise the stage is copied whole, through a
  temporary name so an interrupted copy never looks finished, and
  `adopted_from.json` records the source. The copy keeps the source's
  config.json, logs and machine records: they say how the policy was made.

  Returns (stage name, outcome) for each stage of `runs`: "adopted",
  "finished here", "finished here, no checkpoint" or "begun here" (a
  directory of its own is never replaced: it is that root's record), or
  "not finished in source" (it will train here).
  """
  from agentic_rl.train import loop  # imports jax: only when asked

  out = []
  for run in runs:
    if run.kind != "sft":
      continue
    mine, theirs = workdir(root, run), workdir(source, run)
    if is_finished(root, run):
      out.append((run.name, "finished here"))
      continue
    if mine.exists():  # a committed stage without its checkpoint, or begun
      kept = (
        "finished here, no checkpoint"
        if (mine / SUMMARY).is_file()
        else "begun here"
      )
      out.append((run.name, kept))
      continue
    if not is_finished(source, run):
      out.append((run.name, "not finished in source"))
      continue
    made = json.loads((theirs / "config.json").read_text())
    if (bad := loop.warm_start_mismatch(made, run_config(run))) is not None:
      field, there, here = bad
      raise SweepSpecError(
        f"{theirs} cannot stand in for {run.name}: config.{field} differs "
        f"({there!r} there, {here!r} here)"
      )
    partial = mine.with_name(f".{mine.name}.adopting")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(theirs, partial, symlinks=True)
    (partial / ADOPTED).write_text(
      json.dumps(
        {
          "source": str(pathlib.Path(theirs).resolve()),
          "checked_fields": list(loop.WARM_START_FIELDS),
          "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        indent=2,
      )
    )
    os.replace(partial, mine)
    out.append((run.name, "adopted"))
  return out


def command(
  run: RunSpec,
  root: str | os.PathLike,
  *,
  python: str = sys.executable,
  module: str = "agentic_rl.main",
) -> list[str]:
  """argv of one run (environment variables are separate: `environ`)."""
  argv = [
    python,
    "-m",
    module,
    f"--config={run.config_file}:{run.config_arg}",
    f"--workdir={workdir(root, run)}",
  ]
  argv += [f"--config.{k}={v}" for k, v in run.overrides]
  if run.init_from_run:
    init = pathlib.Path(root) / run.init_from_run
    argv.append(f"--config.init_from={init}")
  return argv


def initialize_distributed(environ: dict[str, str] | None = None) -> None:
  """`jax.distributed.initialize()` for a multi-process run.

  Cluster environments (TPU pods, SLURM, Open MPI) are detected by JAX; a
  local launch names `JAX_COORDINATOR_ADDRESS` (host:port of process 0),
  `AGENTIC_RL_NUM_PROCESSES` and `AGENTIC_RL_PROCESS_ID`. On CPU the
  processes' collectives go over gloo.
  """
  environ = os.environ if environ is None else environ
  counts = {}
  for key, name in (
    (NUM_PROCESSES_ENV, "num_processes"),
    (PROCESS_ID_ENV, "process_id"),
  ):
    if environ.get(key):
      try:
        counts[name] = int(environ[key])
      except ValueError:
        raise SweepSpecError(
          f"{key}={environ[key]!r} is not an integer"
        ) from None
  if len(counts) == 1:
    raise SweepSpecError(
      f"set both {NUM_PROCESSES_ENV} and {PROCESS_ID_ENV}, or neither"
    )
  import jax  # the sweep process itself never starts JAX

  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**counts)


def simulated_devices_env(
  devices: int, base: Mapping[str, str] | None = None
) -> dict[str, str]:
  """`base` (default: this process's environment) with `XLA_FLAGS` asking
  for `devices` simulated CPU devices, its other flags kept."""
  env = dict(os.environ if base is None else base)
  flags = re.sub(rf"{SIMULATED_DEVICES_FLAG}=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = " ".join(
    [f"{SIMULATED_DEVICES_FLAG}={devices}", *flags.split()]
  )
  return env


def launch_local_processes(
  argv: Sequence[str],
  num_processes: int,
  *,
  devices_each: int,
  cwd: str | os.PathLike | None = None,
  timeout: float = 600,
) -> list[tuple[int, str, str]]:
  """Runs `argv` as processes 0..n-1 of one multi-process job on this
  machine (`initialize_distributed`'s local launch, `devices_each`
  simulated CPU devices a process) and waits for them: (return code,
  stdout, stderr) of each. All are killed after `timeout` seconds (then a
  `subprocess.TimeoutExpired`) or when this call fails.
  """
  with socket.socket() as s:  # a free port for the coordinator
    s.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{s.getsockname()[1]}"
  # They talk over 127.0.0.1 only; a proxy setting can hang gRPC's
  # coordinator connection (JAX warns of it), so none is passed on.
  base = {k: v for k, v in os.environ.items() if "_proxy" not in k.lower()}
  procs = [
    subprocess.Popen(
      list(argv),
      cwd=cwd,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      env={
        **simulated_devices_env(devices_each, base),
        DISTRIBUTED_ENV: "1",
        "JAX_COORDINATOR_ADDRESS": address,
        NUM_PROCESSES_ENV: str(num_processes),
        PROCESS_ID_ENV: str(i),
      },
    )
    for i in range(num_processes)
  ]
  deadline = time.monotonic() + timeout
  outs = []
  try:
    for p in procs:
      out, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
      outs.append((p.returncode, out, err))
  finally:
    for p in procs:
      p.kill()
  return outs


def environ(run: RunSpec, distributed: bool = False) -> dict[str, str]:
  """The extra environment variables a run needs."""
  env = dict(run.env_vars)
  if distributed:
    env[DISTRIBUTED_ENV] = "1"
  return env


def shell_command(
  run: RunSpec,
  root: str | os.PathLike,
  *,
  python: str = "python",
  distributed: bool = False,
) -> str:
  """One copy-pasteable launch line (for a cluster job or a pod worker)."""
  env = [f"{k}={shlex.quote(v)}" for k, v in environ(run, distributed).items()]
  argv = command(run, root, python=python)
  return " ".join(env + [shlex.quote(a) for a in argv])


def write_manifest(
  root: str | os.PathLike,
  sweep: Any,
  runs: Sequence[RunSpec],
  config_spec: str = "",
) -> pathlib.Path:
  """`<root>/sweep.json`: the runs and the axes the report groups by."""
  root = pathlib.Path(root)
  root.mkdir(parents=True, exist_ok=True)
  manifest = {
    "name": sweep["name"],
    "config": config_spec,
    "root": str(root),
    "envs": list(_as_dict(sweep["envs"], "envs")),
    "estimators": list(sweep["estimators"]),
    "seeds": [int(s) for s in sweep["seeds"]],
    "baseline": sweep.get("baseline") or sweep["estimators"][0],
    "pairs": list(sweep.get("pairs") or ()),
    "smoke": bool(sweep.get("smoke", False)),
    "runs": [r.to_dict() for r in runs],
  }
  path = root / MANIFEST
  path.write_text(json.dumps(manifest, indent=2) + "\n")
  return path


@dataclasses.dataclass
class RunResult:
  name: str
  status: str  # "skipped" (already finished), "ok" or "failed"
  seconds: float = 0.0
  returncode: int | None = None
  log: str | None = None


def compilation_cache_dir(
  root: str | os.PathLike, cache: str | os.PathLike | None
) -> str:
  """The persistent XLA cache local runs share: `<root>/jax_cache` if None.

  "" turns it off.
  """
  return str(pathlib.Path(root) / CACHE_DIR) if cache is None else str(cache)


def _child_env(
  root: str | os.PathLike,
  compilation_cache: str | os.PathLike | None,
  *extra: Mapping[str, str],
) -> dict[str, str]:
  """This process's environment with `extra` on top and the compilation
  cache a local run gets (`compilation_cache_dir`, unless already set):
  what a run, and the child that measures the probe handed to the runs,
  start with."""
  env = {**os.environ}
  for more in extra:
    env.update(more)
  cache = compilation_cache_dir(root, compilation_cache)
  if cache and CACHE_ENV not in env:
    env[CACHE_ENV] = cache
  return env


PROBE_TIMEOUT_S = 600


def probe_environ(
  root: str | os.PathLike,
  *,
  python: str = sys.executable,
  compilation_cache: str | os.PathLike | None = None,
) -> dict[str, str]:
  """This machine's numerics probe as the environment a sweep's runs take
  it from (`machine.probe_environ`), measured once in a child process
  with the runs' interpreter, environment and compilation cache: the
  sweep itself never starts JAX, so it holds no accelerator or memory its
  runs need. If the child fails (or runs past `PROBE_TIMEOUT_S`) it says
  so on stderr and returns {}: each run then measures its own probe.
  """
  env = _child_env(root, compilation_cache)
  code = "import json; from agentic_rl import machine; "
  code += "print(json.dumps(machine.probe_environ()))"
  try:
    done = subprocess.run(
      [python, "-c", code],
      cwd=REPO_ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=PROBE_TIMEOUT_S,
    )
    if done.returncode:
      raise RuntimeError(f"exit {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout.splitlines()[-1])
  except (OSError, RuntimeError, IndexError, ValueError) as e:
    why = f"{type(e).__name__}: {e}"
  except subprocess.TimeoutExpired:
    why = f"no probe within {PROBE_TIMEOUT_S} s"
  print(
    f"numerics probe not measured for the runs ({why}); each run measures"
    " its own",
    file=sys.stderr,
    flush=True,
  )
  return {}


def launch(
  run: RunSpec,
  root: str | os.PathLike,
  *,
  python: str = sys.executable,
  module: str = "agentic_rl.main",
  distributed: bool = False,
  compilation_cache: str | os.PathLike | None = None,
  extra_env: Mapping[str, str] | None = None,
) -> RunResult:
  """Runs one run to completion (resuming it if it was interrupted).

  `extra_env` is added to the run's environment (scripts/sweep.py hands
  the runs the machine's numerics probe, `probe_environ`); the run's own
  variables (`environ`) win.

  The run gets `JAX_COMPILATION_CACHE_DIR` (see `compilation_cache_dir`)
  unless the caller's environment sets it: the runs of a sweep compile the
  same sampler and update steps for the same shapes, so all but the first
  load them from disk. A cached executable is the one a fresh compile would
  build (same HLO, compiler and flags), so results do not change.
  """
  if is_finished(root, run):
    return RunResult(run.name, "skipped")
  wd = workdir(root, run)
  wd.mkdir(parents=True, exist_ok=True)
  # A finished run launched again (a stage that lost its checkpoint) starts
  # over, so its timing does too; an interrupted one resumes and adds up.
  rerun = (wd / SUMMARY).is_file()
  log = wd / "run.log"
  env = _child_env(
    root, compilation_cache, extra_env or {}, environ(run, distributed)
  )
  start = time.perf_counter()
  with open(log, "a") as f:
    f.write(f"$ {shell_command(run, root, python=python)}\n")
    f.flush()
    returncode, rss_mib = _wait_with_peak_memory(
      subprocess.Popen(
        command(run, root, python=python, module=module),
        cwd=REPO_ROOT,
        env=env,
        stdout=f,
        stderr=subprocess.STDOUT,
      )
    )
  seconds = time.perf_counter() - start
  ok = returncode == 0 and is_finished(root, run)
  # Wall time of this launch (a resumed run adds its launches up) and the
  # largest resident memory of any launch.
  timing = wd / TIMING
  previous = (
    json.loads(timing.read_text()) if timing.is_file() and not rerun else {}
  )
  timing.write_text(
    json.dumps(
      {
        "seconds": previous.get("seconds", 0) + seconds,
        "returncode": returncode,
        "peak_rss_mib": max(rss_mib, previous.get("peak_rss_mib") or 0),
      }
    )
  )
  return RunResult(
    run.name, "ok" if ok else "failed", seconds, returncode, str(log)
  )


_MEMORY_POLL_S = 0.25


def _wait_with_peak_memory(proc: subprocess.Popen) -> tuple[int, float]:
  """Waits for `proc`: (its return code, its peak resident memory in MiB).

  The peak is the kernel's high-water mark of the run's own process
  (`VmHWM`), read every `_MEMORY_POLL_S` while it runs: a peak in its last
  moments can be missed, and its child processes are not counted. Not
  `wait4`'s `ru_maxrss`: that includes the launching process's memory,
  which a spawned child starts from. 0 where /proc is absent.
  """
  peak = 0.0
  while True:
    try:
      return proc.wait(timeout=_MEMORY_POLL_S), peak
    except subprocess.TimeoutExpired:
      peak = max(peak, _high_water_mib(proc.pid))
    except BaseException:
      proc.kill()
      proc.wait()
      raise


def _high_water_mib(pid: int) -> float:
  try:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
  except OSError:  # gone, or no /proc
    return 0.0
  for line in status.splitlines():
    if line.startswith("VmHWM:"):
      return int(line.split()[1]) / 1024  # kB
  return 0.0


def run_sweep(
  runs: Sequence[RunSpec],
  root: str | os.PathLike,
  *,
  workers: int = 1,
  python: str = sys.executable,
  module: str = "agentic_rl.main",
  distributed: bool = False,
  on_result: Callable[[RunResult], None] | None = None,
  compilation_cache: str | os.PathLike | None = None,
  extra_env: Mapping[str, str] | None = None,
) -> list[RunResult]:
  """Runs every unfinished run (`unfinished`), `workers` at a time, in order.

  A run that starts from a shared SFT stage (`init_from_run`) of this call
  waits for that stage only: with three stages on two workers, seed 0's
  runs start while seed 2's stage trains, not after it. Stages come first
  in `expand`'s order, so a free worker takes a stage before a grid run.
  A failed run does not stop the others; its log stays in its workdir. A
  run whose SFT stage failed is not launched (status "failed", no log).
  """
  if workers < 1:
    raise SweepSpecError(f"--workers must be >= 1, got {workers}")
  results: dict[str, RunResult] = {}
  names = {r.name for r in runs}
  todo = {r.name for r in unfinished(runs, root)}
  pending = [r for r in runs if r.name in todo]
  running: dict[concurrent.futures.Future, RunSpec] = {}

  def record(result: RunResult) -> None:
    results[result.name] = result
    if on_result is not None:
      on_result(result)

  def ready(run: RunSpec) -> bool:  # its stage is not run here, or is done
    return run.init_from_run not in names or run.init_from_run in results

  for run in runs:
    if run.name not in todo:
      record(RunResult(run.name, "skipped"))
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    while pending or running:
      for run in [r for r in pending if ready(r)]:
        if len(running) == workers:
          break
        pending.remove(run)
        source = results.get(run.init_from_run)
        if source is not None and source.status == "failed":
          record(RunResult(run.name, "failed"))
          continue
        future = pool.submit(
          launch,
          run,
          root,
          python=python,
          module=module,
          distributed=distributed,
          compilation_cache=compilation_cache,
          extra_env=extra_env,
        )
        running[future] = run
      if not running:
        if pending:  # waiting on stages that cannot run (a cycle)
          names_left = [r.name for r in pending]
          raise SweepSpecError(
            f"runs wait on stages that never run: {names_left}"
          )
        break
      done, _ = concurrent.futures.wait(
        running, return_when=concurrent.futures.FIRST_COMPLETED
      )
      for future in done:
        del running[future]
        record(future.result())
  return [results[r.name] for r in runs]
