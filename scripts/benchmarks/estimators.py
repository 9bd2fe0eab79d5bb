"""Estimator throughput: `python scripts/bench.py estimators`.

A batch of G-trajectory groups with up to T turns each (lengths uniform in
[1, T]; anchors from a few states per turn index, so anchor groups of
several turns are common), made dense once on the host as `pack` does. Each
estimator is timed jitted, after compilation, as the median of `--repeats`
runs; then the number of groups is scaled by 4 and 16 to check linear
growth.
"""

import argparse
import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from agentic_rl import estimators as E


def make_batch(groups: int, g: int, t: int, seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  b = groups * g
  group_B = np.repeat(np.arange(groups), g).astype(np.int32)
  lengths_B = rng.integers(1, t + 1, size=b)
  mask_BxT = (np.arange(t)[None, :] < lengths_B[:, None]).astype(np.float32)
  reward_BxT = np.zeros((b, t), np.float32)
  reward_BxT[np.arange(b), lengths_B - 1] = rng.integers(0, 2, size=b)
  reward_BxT -= 0.1 * mask_BxT  # step penalty
  # States: 3 per turn index; the anchor is unique per (group, t, state).
  state_BxT = rng.integers(0, 3, size=(b, t))
  key_BxT = (group_B[:, None] * t + np.arange(t)[None, :]) * 3 + state_BxT
  _, anchor = np.unique(key_BxT.ravel(), return_inverse=True)
  return dict(
    reward=jnp.asarray(reward_BxT),
    mask=jnp.asarray(mask_BxT),
    group=jnp.asarray(group_B),
    anchor=jnp.asarray(anchor.reshape(b, t).astype(np.int32)),
    process=jnp.asarray(rng.uniform(size=(b, t)).astype(np.float32)),
    turns=int(mask_BxT.sum()),
  )


ESTIMATORS = {
  "gigpo": lambda x: E.gigpo(
    x["reward"],
    x["mask"],
    x["group"],
    x["anchor"],
    gamma=0.95,
    mode="mean_std_norm",
  ),
  "grpo": lambda x: E.grpo((x["reward"] * x["mask"]).sum(1), x["group"]),
  "turn_discounted": lambda x: E.turn_discounted(
    x["reward"], x["mask"], x["group"], gamma=0.95
  ),
  "prm_weighted": lambda x: E.prm_weighted(
    (x["reward"] * x["mask"]).sum(1), x["group"], x["process"], x["mask"]
  ),
}


def time_fn(fn, batch, repeats: int) -> tuple[float, float]:
  """(compile seconds, median run seconds) of jit(fn) on batch."""
  jitted = jax.jit(fn)
  arrays = {k: v for k, v in batch.items() if k != "turns"}
  t0 = time.perf_counter()
  jitted(arrays).block_until_ready()
  compile_s = time.perf_counter() - t0
  runs = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jitted(arrays).block_until_ready()
    runs.append(time.perf_counter() - t0)
  return compile_s, float(np.median(runs))


def main(argv):
  parser = argparse.ArgumentParser(prog="bench.py estimators")
  parser.add_argument("--groups", type=int, default=1024)
  parser.add_argument("--group_size", type=int, default=8)
  parser.add_argument("--turns", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=30)
  parser.add_argument("--out", default="experiments/benchmarks/estimators.json")
  args = parser.parse_args(argv)

  rows = []
  for scale in (1, 4, 16):
    batch = make_batch(args.groups * scale, args.group_size, args.turns)
    for name, fn in ESTIMATORS.items():
      if scale > 1 and name == "prm_weighted":
        continue
      compile_s, run_s = time_fn(fn, batch, args.repeats)
      rows.append(
        dict(
          estimator=name,
          groups=args.groups * scale,
          trajectories=args.groups * scale * args.group_size,
          turns=batch["turns"],
          compile_s=compile_s,
          run_ms=run_s * 1e3,
        )
      )

  base = {r["estimator"]: r for r in rows if r["groups"] == args.groups}
  print(
    f"{'estimator':16} {'groups':>7} {'turns':>9} {'compile s':>10} "
    f"{'run ms':>8} {'x base':>7}"
  )
  for r in rows:
    r["ratio_to_base"] = r["run_ms"] / base[r["estimator"]]["run_ms"]
    print(
      f"{r['estimator']:16} {r['groups']:7d} {r['turns']:9d} "
      f"{r['compile_s']:10.2f} {r['run_ms']:8.2f} "
      f"{r['ratio_to_base']:7.2f}"
    )

  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(
    json.dumps(
      dict(
        benchmark="estimators",
        machine=platform.processor() or platform.machine(),
        cpu_count=len(jax.devices()),
        jax=jax.__version__,
        backend=jax.default_backend(),
        args=vars(args),
        rows=rows,
      ),
      indent=2,
    )
  )
  print(f"wrote {out}")
