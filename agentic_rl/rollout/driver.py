"""The multi-turn rollout driver: sampler slots on the device, envs on the host.

One episode lives in one sampler slot (row) from its first prompt to its end:

  prefill(prompt) -> decode until a stop tag -> host: decode ids to text,
  env.step, tokenize the observation once -> extend(observation) -> decode ...

The ids the policy was conditioned on and the ids it emitted are recorded
turn by turn (`Turn.obs_tokens`, `Turn.action_tokens` with the sampler's
behaviour log-probs), so concatenating a trajectory's turns gives exactly the
row's token stream; history is never re-tokenized.

Slots are split into micro-batches (one sampler's rows in `num_microbatches`
parts, or one sampler per micro-batch). With `pipeline`, the main thread
decodes micro-batch A on the device while a worker thread runs the host work
of micro-batch B (env steps, tokenizing, scoring, starting new episodes), and
then the roles swap, so tool latency hides behind decoding. Finished slots are
refilled from that micro-batch's own queue of episodes; the queues are fixed
up front and every decision is made in a fixed order, so a run is
reproducible from its key whatever the threads' timing.

Nothing an environment does kills the run: exceptions from `reset`/`step`
become `TOOL_ERROR`, a context that would outgrow the budget becomes
`CONTEXT_OVERFLOW` with termination `max_tokens`.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from agentic_rl import envs
from agentic_rl import sharding as shd
from agentic_rl.envs.base import Environment, StepResult
from agentic_rl.envs.parsing import PROTOCOLS, format_observation, parse_action
from agentic_rl.models.tokenizer import EnvTokenizer
from agentic_rl.rewards.stack import NonFiniteRewardError, RewardStack
from agentic_rl.rollout.config import RolloutConfig
from agentic_rl.rollout.metrics import rollout_metrics
from agentic_rl.sampling import Sampler, StopReason
from agentic_rl.types import FailureCode, Task, Termination, Trajectory, Turn

EnvFactory = Callable[[Task], Environment]

# Where a context overflow happened, recorded in `Trajectory.info["overflow"]`.
OVERFLOW_PROMPT = "prompt"  # the first observation alone does not fit
OVERFLOW_ACTION = "action"  # a turn was cut off by the context budget
OVERFLOW_OBSERVATION = "observation"  # the next observation does not fit


def env_factory_from_options(
  options: Mapping[str, Mapping[str, Any]] | None = None,
) -> EnvFactory:
  """`envs.make(task.family, **options[task.family])`, one env per call."""
  options = dict(options or {})

  def factory(task: Task) -> Environment:
    return envs.make(task.family, **dict(options.get(task.family, {})))

  return factory


def make_samplers(
  model: Any, *, num_slots: int, max_len: int, num_samplers: int = 2, **kw
) -> list[Sampler]:
  """`num_samplers` samplers of `num_slots // num_samplers` slots each;
  `kw` goes to every `Sampler` (the config's `sampler` section maps onto
  these arguments).

  One sampler per micro-batch means a decode computes only that
  micro-batch's rows (a decode on a subset of one sampler's rows still runs
  every slot), which is what makes pipelining pay off.
  """
  count = isinstance(num_samplers, int) and not isinstance(num_samplers, bool)
  if not count or num_samplers < 1:
    raise ValueError(f"num_samplers must be an int >= 1: {num_samplers!r}")
  if num_slots % num_samplers:
    raise ValueError(
      f"num_slots ({num_slots}) must divide by num_samplers ({num_samplers})"
    )
  per = num_slots // num_samplers
  return [
    Sampler(model, num_slots=per, max_len=max_len, **kw)
    for _ in range(num_samplers)
  ]


class RolloutProcessError(shd.ProcessPartError):
  """A per-process rollout failed in some process of a multi-process run."""


@dataclasses.dataclass
class _Episode:
  """Host bookkeeping of one trajectory while it is played."""

  index: int  # position in `run`'s output
  task: Task
  group_id: int
  env: Environment | None = None
  protocol: str = "tags"
  turns: list[Turn] = dataclasses.field(default_factory=list)
  stream: list[int] = dataclasses.field(default_factory=list)  # all ids
  pending: list[int] = dataclasses.field(default_factory=list)  # not cached
  in_cache: bool = False  # the row holds this episode's context
  termination: Termination = Termination.DONE
  info: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Decoded:
  """One row's decode output, handed from the device side to the host side."""

  row: int
  tokens: np.ndarray
  logprobs: np.ndarray
  reason: StopReason
  budget: int


@dataclasses.dataclass
class _MicroBatch:
  sampler: Sampler
  rows: list[int]
  queue: collections.deque  # of _Episode, consumed only by this micro-batch
  occupant: dict[int, _Episode | None]
  pending: cf.Future | None = None

  @property
  def limit(self) -> int:
    """Largest number of tokens a trajectory may hold in this micro-batch."""
    return self.sampler.max_len


class _InlineExecutor:
  """`submit` runs the call now: the serial (non-pipelined) schedule."""

  def submit(self, fn: Callable, *args: Any) -> cf.Future:
    future: cf.Future = cf.Future()
    try:
      future.set_result(fn(*args))
    except BaseException as e:  # noqa: BLE001 - re-raised by .result()
      future.set_exception(e)
    return future

  def map(self, fn: Callable, items: Sequence) -> list:
    return [fn(x) for x in items]

  def shutdown(self, wait: bool = True) -> None:
    del wait


class Rollout:
  """Plays groups of episodes through samplers and environments.

  Args:
    samplers: one `Sampler` (its slots split into `num_microbatches` when
      pipelining) or several (one micro-batch each, see `make_samplers`).
    tokenizer: the tokenizer of the policy; protocol tags must be single ids.
    env_factory: `task -> Environment`, called once per trajectory (default:
      `envs.make(task.family)`).
    reward_stack: scores each finished trajectory.
    config: see `RolloutConfig`.
  """

  def __init__(
    self,
    samplers: Sampler | Sequence[Sampler],
    tokenizer: EnvTokenizer,
    env_factory: EnvFactory | None,
    reward_stack: RewardStack,
    config: RolloutConfig,
  ):
    self.samplers = (
      [samplers] if isinstance(samplers, Sampler) else list(samplers)
    )
    if not self.samplers:
      raise ValueError("Rollout needs at least one sampler")
    self.tokenizer = tokenizer
    self.env_factory = env_factory or env_factory_from_options()
    self.reward_stack = reward_stack
    self.config = config
    for s in self.samplers:
      if tokenizer.vocab_size > s.config.vocab_size:
        raise ValueError(
          f"tokenizer vocabulary ({tokenizer.vocab_size}) is larger than the "
          f"model's ({s.config.vocab_size})"
        )
    self.stop_ids = [tokenizer.tag_id(t) for t in config.stop_tags]
    if config.stop_on_eos:
      self.stop_ids.append(tokenizer.eos_id)
    self.last_metrics: dict[str, float] = {}
    self._groups_issued = 0

  # -- public --------------------------------------------------------------

  @property
  def per_process(self) -> bool:
    """Whether each process of a multi-process run plays only its part of
    the tasks: its samplers sit on its own devices
    (`sharding.is_process_local`). Samplers on a mesh that spans the
    processes decode in lockstep, so every process plays every task."""
    local = [shd.is_process_local(s.mesh) for s in self.samplers]
    if any(local) and not all(local):
      raise ValueError(
        "a Rollout's samplers must all sit on this process's devices or "
        "none of them"
      )
    return all(local)

  def run(
    self, tasks: Sequence[Task], key: jax.Array, policy_version: int = 0
  ) -> list[Trajectory]:
    """G scored trajectories per task, in task order then group member.

    `self.last_metrics` holds this batch's `rollout_metrics` afterwards.

    With `per_process`, process p of P plays the p-th of P contiguous parts
    of `tasks` (`np.array_split`; its sampling key folded with p), so its
    environments, tools and rewards run for its part only; the parts are
    gathered, and every process returns the whole list with the group ids
    and order one process would give. Every process must pass the same
    `tasks` (else `ProcessDivergenceError`, before any is played); an error
    in one process's part is raised in all of them as `RolloutProcessError`
    naming the process, rather than leave the others waiting.
    """
    if not self.per_process:
      return self._play(tasks, key, policy_version, part=(0, 1))
    start = time.perf_counter()
    me, count = jax.process_index(), jax.process_count()
    shd.check_same_across_processes(
      [(t.id, t.family, t.seed) for t in tasks], "a per-process rollout's tasks"
    )
    my_key = jax.random.fold_in(shd.key_on_this_process(key), me)
    trajectories = shd.gather_parts(
      lambda: self._play(tasks, my_key, policy_version, (me, count)),
      "the rollout",
      RolloutProcessError,
    )
    self.last_metrics = rollout_metrics(
      trajectories, time.perf_counter() - start
    )
    return trajectories

  def _play(
    self,
    tasks: Sequence[Task],
    key: jax.Array,
    policy_version: int,
    part: tuple[int, int],
  ) -> list[Trajectory]:
    """Plays part `part[0]` of `part[1]` contiguous parts of `tasks`."""
    start = time.perf_counter()
    episodes = self._episodes(tasks, *part)
    results: list[Trajectory | None] = [None] * len(episodes)
    mbs = self._micro_batches(episodes)
    pipelined = self.config.pipeline and len(mbs) > 1
    jobs = (
      cf.ThreadPoolExecutor(len(mbs), thread_name_prefix="rollout-host")
      if pipelined
      else _InlineExecutor()
    )
    workers = self.config.env_workers
    pool = (
      cf.ThreadPoolExecutor(workers, thread_name_prefix="rollout-env")
      if workers > 1
      else _InlineExecutor()
    )
    try:
      self._loop(mbs, jobs, pool, key, policy_version, results)
    finally:
      for mb in mbs:
        if mb.pending is not None:
          mb.pending.cancel()
      jobs.shutdown(wait=True)
      pool.shutdown(wait=True)
      for mb in mbs:
        for ep in mb.occupant.values():
          if ep is not None:
            _close(ep)
    trajectories = [t for t in results if t is not None]
    if len(trajectories) != len(episodes):
      raise RuntimeError("rollout ended with unfinished episodes")
    self.last_metrics = rollout_metrics(
      trajectories, time.perf_counter() - start
    )
    return trajectories

  # -- schedule ------------------------------------------------------------

  def _episodes(
    self, tasks: Sequence[Task], index: int, count: int
  ) -> list[_Episode]:
    """The episodes of part `index` of `count`; group ids count every task
    of every part."""
    g = self.config.group_size
    first = self._groups_issued
    self._groups_issued += len(tasks)
    lo, hi = shd.process_part(len(tasks), index, count)
    return [
      _Episode(index=(i - lo) * g + j, task=tasks[i], group_id=first + i)
      for i in range(lo, hi)
      for j in range(g)
    ]

  def _micro_batches(self, episodes: list[_Episode]) -> list[_MicroBatch]:
    parts: list[tuple[Sampler, list[int]]] = []
    if len(self.samplers) > 1:
      parts = [(s, list(range(s.num_slots))) for s in self.samplers]
    else:
      s = self.samplers[0]
      m = self.config.num_microbatches if self.config.pipeline else 1
      m = min(m, s.num_slots)
      parts = [
        (s, rows.tolist()) for rows in np.array_split(np.arange(s.num_slots), m)
      ]
    # Round-robin keeps micro-batches equally loaded and groups spread out.
    queues = [
      collections.deque(episodes[i :: len(parts)]) for i in range(len(parts))
    ]
    return [
      _MicroBatch(s, rows, q, dict.fromkeys(rows))
      for (s, rows), q in zip(parts, queues, strict=True)
    ]

  def _loop(
    self,
    mbs: list[_MicroBatch],
    jobs: Any,
    pool: Any,
    key: jax.Array,
    policy_version: int,
    results: list[Trajectory | None],
  ) -> None:
    """Alternates device decode and host work over the micro-batches."""
    host = lambda mb, decoded: self._host_work(
      mb, decoded, pool, policy_version, results
    )
    for mb in mbs:
      mb.pending = jobs.submit(host, mb, [])
    decodes = 0
    while any(mb.pending is not None for mb in mbs):
      for mb in mbs:
        if mb.pending is None:
          continue
        # Joining the future hands the micro-batch back to this thread.
        mb.pending.result()
        mb.pending = None
        rows = [r for r in mb.rows if mb.occupant[r] is not None]
        if not rows:
          continue
        decoded = self._decode(mb, rows, jax.random.fold_in(key, decodes))
        decodes += 1
        mb.pending = jobs.submit(host, mb, decoded)

  # -- device side (main thread) ---------------------------------------------

  def _decode(
    self, mb: _MicroBatch, rows: list[int], key: jax.Array
  ) -> list[_Decoded]:
    """Appends each row's pending ids, then decodes one turn for all rows."""
    eps = [mb.occupant[r] for r in rows]
    fresh = [
      (r, ep)
      for r, ep in zip(rows, eps, strict=True)
      if not ep.in_cache or self.config.reprefill
    ]
    more = [
      (r, ep)
      for r, ep in zip(rows, eps, strict=True)
      if ep.in_cache and not self.config.reprefill
    ]
    if fresh:
      mb.sampler.prefill([r for r, _ in fresh], [ep.stream for _, ep in fresh])
    if more:
      mb.sampler.extend([r for r, _ in more], [ep.pending for _, ep in more])
    lengths = mb.sampler.lengths
    for r, ep in zip(rows, eps, strict=True):
      if lengths[r] != len(ep.stream):
        raise RuntimeError(
          f"row {r} holds {lengths[r]} tokens but its episode has "
          f"{len(ep.stream)}: the cache and the record diverged"
        )
      ep.in_cache = True
    budgets = [
      min(self.config.max_new_tokens, self._limit(mb) - len(ep.stream))
      for ep in eps
    ]
    out = mb.sampler.decode(
      key,
      budget=budgets,
      stop_ids=self.stop_ids,
      rows=rows,
      temperature=self.config.temperature,
      top_k=self.config.top_k,
      top_p=self.config.top_p,
    )
    return [
      _Decoded(r, t, lp, reason, b)
      for r, t, lp, reason, b in zip(
        out.rows,
        out.tokens,
        out.logprobs,
        out.stop_reason,
        budgets,
        strict=True,
      )
    ]

  def _limit(self, mb: _MicroBatch) -> int:
    return min(self.config.max_total_tokens, mb.limit)

  # -- host side (worker thread when pipelining) ---------------------------

  def _host_work(
    self,
    mb: _MicroBatch,
    decoded: list[_Decoded],
    pool: Any,
    policy_version: int,
    results: list[Trajectory | None],
  ) -> None:
    """Steps the decoded rows' envs, finishes episodes, refills free rows."""
    limit = self._limit(mb)
    eps = [mb.occupant[d.row] for d in decoded]
    finished = pool.map(
      lambda pair: self._advance(pair[0], pair[1], limit),
      list(zip(eps, decoded, strict=True)),
    )
    for d, ep, done in zip(decoded, eps, finished, strict=True):
      if done:
        results[ep.index] = self._finish(ep, policy_version)
        mb.occupant[d.row] = None
    for row in mb.rows:
      while mb.occupant[row] is None and mb.queue:
        ep = mb.queue.popleft()
        if self._start(ep, limit):
          mb.occupant[row] = ep
        else:
          results[ep.index] = self._finish(ep, policy_version)

  def _start(self, ep: _Episode, limit: int) -> bool:
    """Makes and resets the env and tokenizes the prompt; False if it ended."""
    try:
      ep.env = self.env_factory(ep.task)
      observation = ep.env.reset(ep.task, seed=ep.task.seed)
    except Exception as e:  # noqa: BLE001 - a broken env ends one episode
      ep.info["error"] = f"reset failed: {type(e).__name__}: {e}"
      ep.info["failure"] = str(FailureCode.TOOL_ERROR)
      ep.termination = Termination.ERROR
      return False
    protocol = getattr(ep.env, "protocol", None)
    ep.protocol = protocol if protocol in PROTOCOLS else self.config.protocol
    text = self.config.prompt_template.replace(
      "{observation}", str(observation)
    )
    prompt = self.tokenizer.encode(text) or [self.tokenizer.eos_id]
    if len(prompt) >= limit:
      self._overflow(ep, OVERFLOW_PROMPT)
      return False
    ep.stream = list(prompt)
    ep.pending = list(prompt)
    ep.in_cache = False
    return True

  def _advance(self, ep: _Episode, d: _Decoded, limit: int) -> bool:
    """Records one turn and steps the env; True when the episode is over."""
    action_ids = [int(t) for t in d.tokens]
    text = self.tokenizer.decode(action_ids)
    turn = Turn(
      obs_tokens=ep.pending,
      action_tokens=action_ids,
      action_logp=[float(x) for x in d.logprobs],
      action=parse_action(text, ep.protocol),
    )
    ep.pending = []
    ep.stream.extend(action_ids)
    ep.turns.append(turn)
    cut = d.reason == StopReason.CACHE_FULL or (
      d.reason == StopReason.BUDGET and d.budget < self.config.max_new_tokens
    )
    if cut:  # the context budget, not the turn budget, ended this action
      turn.failure = FailureCode.CONTEXT_OVERFLOW
      self._overflow(ep, OVERFLOW_ACTION)
      return True
    result, error = _safe_step(ep.env, text)
    turn.observation = result.observation
    turn.failure = result.failure
    turn.reward_components = dict(result.reward_components)
    turn.state_key = result.state_key
    if error is not None:
      ep.info["error"] = error
      ep.info["failure"] = str(FailureCode.TOOL_ERROR)
      ep.termination = Termination.ERROR
      return True
    if result.done:
      ep.termination = Termination.DONE
      return True
    if len(ep.turns) >= self.config.max_turns:
      ep.termination = Termination.MAX_TURNS
      return True
    obs_ids = self.tokenizer.encode(self._wrap(result.observation, ep.protocol))
    # At least one position must stay free for the next action.
    if len(ep.stream) + len(obs_ids) >= limit:
      self._overflow(ep, OVERFLOW_OBSERVATION)
      return True
    ep.stream.extend(obs_ids)
    ep.pending = obs_ids
    return False

  @staticmethod
  def _wrap(observation: str, protocol: str) -> str:
    """Observation tags per the protocol, unless the env already added them."""
    wrapped = format_observation("", protocol)
    open_tag = wrapped.strip().split("\n", 1)[0]
    if observation.lstrip().startswith(open_tag):
      return observation
    return format_observation(observation, protocol)

  def _overflow(self, ep: _Episode, where: str) -> None:
    ep.termination = Termination.MAX_TOKENS
    ep.info["failure"] = str(FailureCode.CONTEXT_OVERFLOW)
    ep.info["overflow"] = where

  def _finish(self, ep: _Episode, policy_version: int) -> Trajectory:
    _close(ep)
    trajectory = Trajectory(
      task=ep.task,
      group_id=ep.group_id,
      turns=ep.turns,
      termination=ep.termination,
      policy_version=policy_version,
      info=ep.info,
    )
    try:
      return self.reward_stack.score_trajectory(trajectory)
    except NonFiniteRewardError as e:
      error = f"non-finite reward: {e}"
    except Exception as e:
      if self.reward_stack.judge is None:
        raise
      # Only the judge calls out of the stack; anything else it raises is a
      # config bug, which re-scoring below raises again.
      error = f"judge failed: {type(e).__name__}: {e}"
    # A NaN from an environment or a failing judge must not kill the batch:
    # keep the error on the trajectory, drop the non-finite environment
    # components and the judge, and score the rest.
    for turn in trajectory.turns:
      turn.reward_components = {
        k: v for k, v in turn.reward_components.items() if _finite(v)
      }
    trajectory.termination = Termination.ERROR
    trajectory.info["error"] = error
    without_judge = dataclasses.replace(self.reward_stack, judge=None)
    return without_judge.score_trajectory(trajectory)


def _finite(value: Any) -> bool:
  """A finite real number, numpy scalars included (as the reward stack)."""
  real = isinstance(value, numbers.Real | np.bool_)
  return real and math.isfinite(value)


def _safe_step(env: Environment, text: str) -> tuple[StepResult, str | None]:
  """`env.step` and None, or a TOOL_ERROR result and the exception's text."""
  try:
    return env.step(text), None
  except Exception as e:  # noqa: BLE001 - the contract says never, but be safe
    error = f"env.step raised {type(e).__name__}: {e}"
    result = StepResult(error, {}, True, FailureCode.TOOL_ERROR, "", {})
    return result, error


def _close(ep: _Episode) -> None:
  if ep.env is None:
    return
  try:
    ep.env.close()
  except Exception as e:  # noqa: BLE001 - a failed cleanup is only noted
    ep.info.setdefault("close_error", f"{type(e).__name__}: {e}")
  ep.env = None
