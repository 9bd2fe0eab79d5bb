"""Expert demonstrations in exactly the token stream a rollout produces.

Cold-start SFT must train on the framing the policy will later see: the
same prompt template, the same observation wrapping, the same stop tags.
`expert_trajectories` replays an environment's scripted expert through the
framing of `Rollout` (its `prompt_template` and `_wrap`), so a demo differs
from a policy rollout only in who chose the actions.
"""

from __future__ import annotations

import collections
import inspect
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.envs.base import Environment
from agentic_rl.envs.parsing import PROTOCOLS, parse_action
from agentic_rl.models.tokenizer import EnvTokenizer
from agentic_rl.rewards.stack import RewardStack
from agentic_rl.rollout.config import RolloutConfig
from agentic_rl.rollout.driver import EnvFactory, Rollout
from agentic_rl.types import Task, Termination, Trajectory, Turn


class NoExpertError(ValueError):
  """The environment has no scripted expert to demonstrate with."""


def expert_actions(env: Environment, task: Task) -> list[str]:
  """The env's scripted expert: its method, else its module's function.

  Experts of stochastic environments (slippery FrozenLake) plan for one
  reset seed; they get the task's seed, the one the demo replays with.
  """
  method = getattr(env, "expert_actions", None)
  if callable(method):
    if "seed" in inspect.signature(method).parameters:
      return list(method(task, seed=task.seed))
    return list(method(task))
  module_fn = getattr(sys.modules[type(env).__module__], "expert_actions", None)
  if callable(module_fn):
    return list(module_fn(task))
  raise NoExpertError(f"environment {type(env).__name__} has no expert")


def expert_trajectory(
  task: Task,
  env: Environment,
  tokenizer: EnvTokenizer,
  config: RolloutConfig,
  group_id: int = 0,
) -> Trajectory:
  """One expert episode, framed and tokenized as `Rollout` would."""
  actions = expert_actions(env, task)
  observation = env.reset(task, seed=task.seed)
  protocol = getattr(env, "protocol", None)
  protocol = protocol if protocol in PROTOCOLS else config.protocol
  prompt = config.prompt_template.replace("{observation}", str(observation))
  pending = tokenizer.encode(prompt) or [tokenizer.eos_id]
  turns: list[Turn] = []
  termination = Termination.MAX_TURNS
  for text in actions[: config.max_turns]:
    ids = tokenizer.encode(text)
    result = env.step(text)
    turns.append(
      Turn(
        obs_tokens=pending,
        action_tokens=ids,
        action_logp=[0.0] * len(ids),  # scripted: no policy log-probs
        action=parse_action(text, protocol),
        observation=result.observation,
        failure=result.failure,
        reward_components=dict(result.reward_components),
        state_key=result.state_key,
      )
    )
    if result.done:
      termination = Termination.DONE
      break
    pending = tokenizer.encode(Rollout._wrap(result.observation, protocol))
  env.close()
  return Trajectory(
    task=task,
    group_id=group_id,
    turns=turns,
    termination=termination,
    info={"expert": True},
  )


class DemoProcessError(shd.ProcessPartError):
  """Some process's part of the expert demonstrations failed (a
  multi-process run's `expert_trajectories(..., per_process=True)`)."""


def has_expert(env: Environment) -> bool:
  """Whether `expert_actions` can script `env` (without running it)."""
  if callable(getattr(env, "expert_actions", None)):
    return True
  module = sys.modules[type(env).__module__]
  return callable(getattr(module, "expert_actions", None))


def expert_trajectories(
  tasks: Sequence[Task],
  env_factory: EnvFactory,
  tokenizer: EnvTokenizer,
  config: RolloutConfig,
  reward_stack: RewardStack | None = None,
  per_process: bool = False,
) -> list[Trajectory]:
  """One scored expert demonstration per task (group id = task index).

  With `per_process` (a multi-process run; every process calls it with the
  same `tasks`, else `ProcessDivergenceError`), process p of P replays the
  p-th of P contiguous parts of `tasks`, so the environments, tools and
  rewards run once per task over the run, and the parts are gathered:
  every process returns the list one process would. An environment with no
  expert is a `NoExpertError` in every process before anything is played;
  any other failure in one process's part is a `DemoProcessError` in all.
  """
  framing = (env_factory, tokenizer, config, reward_stack)
  if not per_process:
    return _replay(tasks, 0, len(tasks), *framing)
  shd.check_same_across_processes(
    [(t.id, t.family, t.seed) for t in tasks], "the expert demos' tasks"
  )
  if not tasks:
    return []
  _check_expert_everywhere(env_factory, tasks[0])
  lo, hi = shd.process_part(
    len(tasks), jax.process_index(), jax.process_count()
  )
  return shd.gather_parts(
    lambda: _replay(tasks, lo, hi, *framing),
    "the expert demos",
    DemoProcessError,
  )


def _replay(
  tasks: Sequence[Task],
  lo: int,
  hi: int,
  env_factory: EnvFactory,
  tokenizer: EnvTokenizer,
  config: RolloutConfig,
  reward_stack: RewardStack | None,
) -> list[Trajectory]:
  """The scored expert demos of `tasks[lo:hi]` (group id = task index)."""
  demos = []
  for i in range(lo, hi):
    traj = expert_trajectory(
      tasks[i], env_factory(tasks[i]), tokenizer, config, i
    )
    demos.append(
      traj if reward_stack is None else reward_stack.score_trajectory(traj)
    )
  return demos


def _check_expert_everywhere(env_factory: EnvFactory, task: Task) -> None:
  """Every process decides alike whether the environment has an expert (a
  collective, before any process could raise alone and leave the others
  waiting at the gather): `NoExpertError` or `DemoProcessError` in all."""
  try:
    probe = env_factory(task)
    name, expert, why = type(probe).__name__, has_expert(probe), None
    probe.close()
  except Exception as e:  # noqa: BLE001 - raised in every process below
    name, expert, why = "", False, f"{type(e).__name__}: {e}"
  shd.check_same_across_processes(
    np.frombuffer(f"{name}{expert}{why}".encode(), np.uint8),
    "whether the expert demos' environment has an expert",
  )
  if why is not None:
    raise DemoProcessError(f"the expert demos' environment failed: {why}")
  if not expert:
    raise NoExpertError(f"environment {name} has no expert")


# ---------------------------------------------------------------------------
# How closely a model imitates demonstrations, turn by turn.


@nnx.jit
def _fit_BxL(model, tokens_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(log-prob of each token, whether it is the argmax), aligned to the
  token as `losses.token_logp` aligns them (position 0: 0 and True)."""
  logits_BxLxV = model(tokens_BxL)
  top_BxM = jnp.argmax(logits_BxLxV[:, :-1], axis=-1) == tokens_BxL[:, 1:]
  return (
    losses.token_logp(logits_BxLxV, tokens_BxL),
    jnp.pad(top_BxM, ((0, 0), (1, 0)), constant_values=True),
  )


def episode_rows(trajectories) -> tuple[list[list[int]], list[list[tuple]]]:
  """Each episode's token sequence and its action turns' [start, end)."""
  rows, spans = [], []
  for traj in trajectories:
    tokens, turns = [], []
    for turn in traj.turns:
      tokens += turn.obs_tokens
      turns.append((len(tokens), len(tokens) + len(turn.action_tokens)))
      tokens += turn.action_tokens
    rows.append(tokens)
    spans.append(turns)
  return rows, spans


def turn_fit(
  model, trajectories: Sequence[Trajectory], pad_id: int, batch: int = 8
) -> list[dict]:
  """Teacher-forced fit of `model` to the trajectories' actions, by turn.

  For each turn index k (1-based, over the episodes that reach it): the
  episodes, the action tokens, the mean negative log-likelihood per action
  token, and `exact`, the fraction of those turns whose every token is the
  model's argmax given the episode so far (what greedy decoding reproduces
  from the same history). Episodes run `batch` at a time, right-padded
  with `pad_id` to the longest (causal attention: padding after a token
  does not change its prediction).
  """
  rows, spans = episode_rows(trajectories)
  length = max(map(len, rows))  # one shape: one compilation
  nll = collections.defaultdict(list)
  exact = collections.defaultdict(list)
  for i in range(0, len(rows), batch):
    chunk = rows[i : i + batch]
    tokens_BxL = np.full((batch, length), pad_id, np.int32)
    for r, row in enumerate(chunk):
      tokens_BxL[r, : len(row)] = row  # right padding: causal, so inert
    logp_BxL, top_BxL = map(np.asarray, _fit_BxL(model, tokens_BxL))
    for r in range(len(chunk)):
      for k, (a, b) in enumerate(spans[i + r]):
        nll[k].append(-logp_BxL[r, a:b])
        exact[k].append(bool(top_BxL[r, a:b].all()))
  return [
    {
      "turn": k + 1,
      "episodes": len(exact[k]),
      "tokens": int(sum(map(len, nll[k]))),
      "nll_per_token": float(np.concatenate(nll[k]).mean()),
      "exact": float(np.mean(exact[k])),
    }
    for k in sorted(nll)
  ]
