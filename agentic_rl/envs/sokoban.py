"""Sokoban, the grid puzzle RAGEN and GiGPO train on.

The player walks a walled room and pushes boxes (never pulls, never two at
once) until every box sits on a target.

Text rendering (ASCII, one character per cell, rows joined by newlines, so a
byte-level tokenizer spends one token per cell):

  #  wall        _  floor       .  target
  $  box         *  box on target
  @  player      +  player on target

Actions: `<answer>Up</answer>` with Up, Down, Left, Right (case-insensitive);
with `max_actions_per_turn > 1` several moves separated by commas, spaces or
`||` (RAGEN's separator) run in order. Walking into a wall or an immovable box
is a legal no-op, as in gym-sokoban; only text that names no move fails.

Rewards follow RAGEN's defaults and are reported as separate components:
`step` -0.1 per move taken (or per failed turn), `box` +1 for each push onto a
target and -1 for each push off one, `solved` +10 when the last box lands.
A valid turn that uses up `max_steps` unsolved ends the episode with
`FailureCode.BUDGET_EXHAUSTED`.

Levels are made by reverse play: boxes start on their targets and a random
walker pulls them away, so every level is solvable by construction; the A*
solver then re-verifies it and records the optimal move count. The same
solver is the scripted expert.

The pure functions (`transition`, `legal_moves`, `state_key`, `state_graph`)
work on a `Level` and a `State` and let other code enumerate the reachable
state space of small levels.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import heapq
import re
from typing import NamedTuple

import numpy as np

from agentic_rl.envs.base import (
  Environment,
  StepResult,
  check_budget,
  episode_over,
  register,
)
from agentic_rl.envs.parsing import parse_tags
from agentic_rl.types import ActionKind, FailureCode, Task

MOVES = ("Up", "Down", "Left", "Right")
MOVE_INDEX = {m.lower(): i for i, m in enumerate(MOVES)}

# (height, width, boxes, reverse-play steps, fewest optimal moves) per
# difficulty level; the floor keeps trivial one-push levels out.
DIFFICULTIES: dict[int, tuple[int, int, int, int, int]] = {
  0: (6, 6, 1, 30, 4),
  1: (7, 7, 1, 40, 6),
  2: (7, 7, 2, 50, 8),
  3: (8, 8, 2, 60, 10),
  4: (9, 9, 3, 80, 12),
}

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#_.$*@+"
_INF = 1 << 30


class State(NamedTuple):
  """Player cell and box cells as flat indices `row * width + col`."""

  player: int
  boxes: frozenset[int]


@dataclasses.dataclass(frozen=True)
class Level:
  """The static part of a level: walls and targets on a width x height grid.

  Cells outside the room are walls, so a move never leaves the grid.
  """

  width: int
  height: int
  walls: frozenset[int]
  targets: frozenset[int]

  @property
  def deltas(self) -> tuple[int, int, int, int]:
    """Flat-index offsets of Up, Down, Left, Right."""
    return (-self.width, self.width, -1, 1)


def parse_level(rows: list[str]) -> tuple[Level, State]:
  """Reads a level in this module's symbols (spaces also count as floor)."""
  height, width = len(rows), max(len(r) for r in rows)
  walls, targets, boxes, players = set(), set(), set(), []
  for r, row in enumerate(rows):
    for c, ch in enumerate(row.ljust(width, WALL)):
      i = r * width + c
      if ch == WALL:
        walls.add(i)
      elif ch not in "_ .$*@+":
        raise ValueError(f"unknown level symbol {ch!r}")
      if ch in ".*+":
        targets.add(i)
      if ch in "$*":
        boxes.add(i)
      if ch in "@+":
        players.append(i)
  if len(players) != 1:
    raise ValueError(f"a level needs exactly one player, got {len(players)}")
  if len(boxes) != len(targets) or not boxes:
    raise ValueError(f"{len(boxes)} boxes but {len(targets)} targets")
  level = Level(width, height, frozenset(walls), frozenset(targets))
  for i in _flood(level, players[0]):
    r, c = divmod(i, width)
    if r in (0, height - 1) or c in (0, width - 1):
      raise ValueError("the player's region of the level is not enclosed")
  return level, State(players[0], frozenset(boxes))


def _flood(level: Level, start: int) -> set[int]:
  """Cells the player could reach if there were no boxes."""
  seen, todo = {start}, [start]
  while todo:
    p = todo.pop()
    for d in level.deltas:
      q = p + d
      if q not in level.walls and q not in seen:
        seen.add(q)
        todo.append(q)
  return seen


def transition(level: Level, state: State, move: int) -> State:
  """The state after one move; an unchanged state if the move is blocked."""
  d = level.deltas[move]
  player, boxes = state
  q = player + d
  if q in level.walls:
    return state
  if q in boxes:
    r = q + d
    if r in level.walls or r in boxes:
      return state
    return State(q, (boxes - {q}) | {r})
  return State(q, boxes)


def legal_moves(level: Level, state: State) -> list[int]:
  """Moves that change the state (not blocked by a wall or stuck box)."""
  return [m for m in range(4) if transition(level, state, m) != state]


def is_solved(level: Level, state: State) -> bool:
  return state.boxes == level.targets


def state_key(state: State) -> str:
  """Canonical text id of a state: `player:box,box,...` (boxes sorted)."""
  return f"{state.player}:{','.join(map(str, sorted(state.boxes)))}"


def render(level: Level, state: State) -> str:
  return _Renderer(level)(state)


class _Renderer:
  """Renders states of one level by patching a precomputed static grid."""

  def __init__(self, level: Level):
    w = level.width
    cells = []
    for i in range(level.height * w):
      if i and i % w == 0:
        cells.append("\n")
      if i in level.walls:
        cells.append(WALL)
      else:
        cells.append(TARGET if i in level.targets else FLOOR)
    self.base = bytearray("".join(cells), "ascii")
    self.width = w
    self.targets = level.targets

  def __call__(self, state: State) -> str:
    grid = self.base[:]
    w, targets = self.width, self.targets
    for b in state.boxes:
      grid[b + b // w] = 42 if b in targets else 36  # '*' or '$'
    p = state.player
    grid[p + p // w] = 43 if p in targets else 64  # '+' or '@'
    return grid.decode("ascii")


@functools.lru_cache(maxsize=1024)
def _compiled(rows: tuple[str, ...]) -> tuple[Level, State, _Renderer]:
  """Parsed level and renderer, shared by every reset of the same level."""
  level, state = parse_level(list(rows))
  return level, state, _Renderer(level)


def level_rows(level: Level, state: State) -> list[str]:
  return render(level, state).split("\n")


def state_graph(
  level: Level, start: State, max_states: int = 200_000
) -> tuple[list[State], np.ndarray]:
  """Every state reachable from `start` and the move table between them.

  Returns `(states, next_Nx4)`: `states[0] == start` in BFS order and
  `next_Nx4[i, m]` is the index of `transition(states[i], m)`. Solved states
  are included but not expanded (the episode ends there): their rows point
  to themselves. Raises if more than `max_states` states are reachable.
  """
  index = {start: 0}
  states = [start]
  rows: list[list[int]] = []
  i = 0
  while i < len(states):
    s = states[i]
    i += 1
    row = []
    for m in range(4):
      t = s if is_solved(level, s) else transition(level, s, m)
      j = index.get(t)
      if j is None:
        if len(states) >= max_states:
          raise ValueError(f"more than {max_states} reachable states")
        j = index[t] = len(states)
        states.append(t)
      row.append(j)
    rows.append(row)
  return states, np.asarray(rows, dtype=np.int32).reshape(-1, 4)


def push_distances(level: Level) -> dict[int, int]:
  """Fewest pushes that bring a box from each cell onto some target.

  Other boxes are ignored, so this is a lower bound on the real count (an
  admissible A* heuristic); cells absent from the map are dead squares from
  which no box can ever reach a target.
  """
  dist = {t: 0 for t in level.targets}
  queue = collections.deque(level.targets)
  while queue:
    x = queue.popleft()
    for d in level.deltas:
      # A push along d moved the box from x - d to x, player standing at x - 2d.
      c, p = x - d, x - 2 * d
      if c in level.walls or p in level.walls or c in dist:
        continue
      dist[c] = dist[x] + 1
      queue.append(c)
  return dist


def solve(
  level: Level, start: State, max_expansions: int = 500_000
) -> list[int] | None:
  """A move-optimal solution (fewest steps) by A*, or None if none is found.

  The heuristic is the sum of each box's push distance: every push moves one
  box one cell, so it never overestimates and changes by at most 1 per move
  (consistent); boxes on dead squares are pruned.
  """
  dist = push_distances(level)

  def h(boxes: frozenset[int]) -> int:
    total = 0
    for b in boxes:
      total += dist.get(b, _INF)
    return total

  h0 = h(start.boxes)
  if h0 >= _INF:
    return None
  parent: dict[State, tuple[State, int] | None] = {start: None}
  g_of = {start: 0}
  # Ties on f prefer deeper nodes (larger g), then insertion order.
  heap = [(h0, 0, 0, start)]
  counter = 0
  expansions = 0
  while heap:
    f, neg_g, _, s = heapq.heappop(heap)
    g = -neg_g
    if g > g_of[s]:
      continue
    if s.boxes == level.targets:
      moves = []
      while parent[s] is not None:
        s, m = parent[s]
        moves.append(m)
      return moves[::-1]
    expansions += 1
    if expansions > max_expansions:
      return None
    for m in range(4):
      t = transition(level, s, m)
      if t == s:
        continue
      # A plain walk keeps the same boxes object, hence the same heuristic.
      ht = f - g if t.boxes is s.boxes else h(t.boxes)
      if ht >= _INF:
        continue
      if g + 1 < g_of.get(t, _INF):
        g_of[t] = g + 1
        parent[t] = (s, m)
        counter += 1
        heapq.heappush(heap, (g + 1 + ht, -(g + 1), counter, t))
  return None


def _carve_room(
  rng: np.random.Generator, height: int, width: int, fraction: float
) -> set[int]:
  """Floor cells carved by a random walk with some momentum inside a wall."""
  interior = [
    r * width + c for r in range(1, height - 1) for c in range(1, width - 1)
  ]
  goal = max(4, int(fraction * len(interior)))
  deltas = (-width, width, -1, 1)
  p = interior[int(rng.integers(len(interior)))]
  floor = {p}
  d = deltas[int(rng.integers(4))]
  while len(floor) < goal:
    if rng.random() < 0.35:
      d = deltas[int(rng.integers(4))]
    q = p + d
    r, c = divmod(q, width)
    if 0 < r < height - 1 and 0 < c < width - 1:
      p = q
      floor.add(p)
  return floor


def _reverse_walk(
  rng: np.random.Generator,
  level: Level,
  floor: list[int],
  steps: int,
) -> State:
  """Random reverse play from the solved state: walk, sometimes pulling.

  A pull (player steps from p to p + d, box follows from p - d to p) undoes
  the push in direction -d, so the forward game can replay it backwards.
  """
  boxes = set(level.targets)
  free = [c for c in floor if c not in boxes]
  player = free[int(rng.integers(len(free)))]
  deltas = level.deltas
  for _ in range(steps):
    d = deltas[int(rng.integers(4))]
    q = player + d
    if q in level.walls or q in boxes:
      continue
    behind = player - d
    if behind in boxes and rng.random() < 0.8:
      boxes.remove(behind)
      boxes.add(player)
    player = q
  return State(player, frozenset(boxes))


def generate_level(
  rng: np.random.Generator,
  height: int,
  width: int,
  num_boxes: int,
  steps: int,
  min_moves: int = 1,
  walks: int = 16,
) -> tuple[Level, State, list[int]]:
  """A solvable level with every box off its target, and its solution.

  Tries rooms until one gives a good reverse walk; among `walks` walks keeps
  the one whose boxes are farthest (in pushes) from the targets, and keeps
  the level if its optimal solution has at least `min_moves` moves.
  """
  while True:
    floor = sorted(_carve_room(rng, height, width, 0.6))
    if len(floor) < 2 * num_boxes + 3:
      continue
    cells = set(range(height * width))
    choice = rng.choice(len(floor), size=num_boxes, replace=False)
    targets = frozenset(floor[int(i)] for i in choice)
    level = Level(width, height, frozenset(cells - set(floor)), targets)
    dist = push_distances(level)
    best, best_score = None, 0
    for _ in range(walks):
      s = _reverse_walk(rng, level, floor, steps)
      if s.boxes & targets:
        continue
      score = sum(dist.get(b, _INF) for b in s.boxes)
      if best_score < score < _INF:
        best, best_score = s, score
    if best is None:
      continue
    solution = solve(level, best)
    if solution is not None and len(solution) >= min_moves:
      return level, best, solution


def parse_moves(
  text: str, names: dict[str, int], max_moves: int
) -> tuple[list[int], FailureCode | None, str]:
  """Moves named in the `<answer>` of `text`: (moves, failure, reason).

  Follows `parsing.parse_tags`; a bare `<answer>words</answer>` (the common
  case) skips the general parser, which would accept it with the same body.
  """
  simple = _SIMPLE_ANSWER.fullmatch(text)
  if simple is not None and simple.group(1).strip():
    return _named_moves(simple.group(1), names, max_moves)
  action = parse_tags(text)
  if action.kind is ActionKind.MALFORMED:
    return [], FailureCode.MALFORMED_CALL, action.error
  if action.kind is ActionKind.TOOL_CALL:
    return [], FailureCode.UNKNOWN_TOOL, "this environment has no tools"
  return _named_moves(action.text, names, max_moves)


def _named_moves(
  body: str, names: dict[str, int], max_moves: int
) -> tuple[list[int], FailureCode | None, str]:
  words = _SEPARATORS.split(body.strip())
  if len(words) > max_moves:
    return [], FailureCode.BAD_ARGUMENTS, f"more than {max_moves} moves"
  moves = []
  for w in words:
    m = names.get(w.lower())
    if m is None:
      return [], FailureCode.BAD_ARGUMENTS, f"unknown move {w[:20]!r}"
    moves.append(m)
  return moves, None, ""


_SEPARATORS = re.compile(r"[\s,;|]+")
# Optional whitespace, one answer block of letters and separators, whitespace.
_SIMPLE_ANSWER = re.compile(r"\s*<answer>([A-Za-z\s,;|]*)</answer>\s*")


def expert_actions(task: Task, max_actions_per_turn: int = 1) -> list[str]:
  """The solver's optimal solution as action texts, chunked per turn."""
  level, start = parse_level(task.payload["rows"])
  moves = solve(level, start)
  if moves is None:
    raise ValueError(f"task {task.id} has no solution")
  k = max_actions_per_turn
  chunks = [moves[i : i + k] for i in range(0, len(moves), k)]
  return [
    "<answer>" + ", ".join(MOVES[m] for m in c) + "</answer>" for c in chunks
  ]


@register("sokoban")
class Sokoban(Environment):
  """Sokoban with RAGEN's rewards; one turn runs up to N moves."""

  name = "sokoban"

  def __init__(
    self,
    max_steps: int = 100,
    max_actions_per_turn: int = 1,
    step_penalty: float = -0.1,
    box_reward: float = 1.0,
    solve_reward: float = 10.0,
    instructions: bool = True,
  ):
    check_budget("max_steps", max_steps)
    check_budget("max_actions_per_turn", max_actions_per_turn)
    self.max_steps = max_steps
    self.max_actions_per_turn = max_actions_per_turn
    self.step_penalty = step_penalty
    self.box_reward = box_reward
    self.solve_reward = solve_reward
    self.instructions = instructions
    self.level: Level | None = None
    self.state: State | None = None
    self.steps = 0
    self.done = True

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    if difficulty not in DIFFICULTIES:
      raise ValueError(f"difficulty must be in {sorted(DIFFICULTIES)}")
    height, width, boxes, steps, min_moves = DIFFICULTIES[difficulty]
    rng = np.random.default_rng([seed, difficulty, 0x50C0])
    level, start, solution = generate_level(
      rng, height, width, boxes, steps, min_moves
    )
    return Task(
      id=f"sokoban/d{difficulty}/s{seed}",
      family=self.name,
      difficulty=difficulty,
      seed=seed,
      payload={
        "rows": level_rows(level, start),
        "num_boxes": boxes,
        "optimal_moves": len(solution),
      },
    )

  def reset(self, task: Task, seed: int = 0) -> str:
    del seed  # Sokoban is deterministic; the level fixes everything.
    self.level, self.state, self._render = _compiled(
      tuple(task.payload["rows"])
    )
    self._on_target = len(self.state.boxes & self.level.targets)
    self.steps = 0
    self.done = False
    grid = self._render(self.state)
    if not self.instructions:
      return grid
    return (
      "Push every box ($) onto a target (.). # wall, @ you, * box on target."
      " Moves: Up Down Left Right.\n" + grid
    )

  def legal_moves(self) -> list[int]:
    return legal_moves(self.level, self.state)

  def transition(self, state: State, move: int) -> State:
    return transition(self.level, state, move)

  def state_key(self, state: State | None = None) -> str:
    return state_key(self.state if state is None else state)

  def render(self) -> str:
    return self._render(self.state)

  def expert_actions(self, task: Task) -> list[str]:
    return expert_actions(task, self.max_actions_per_turn)

  def step(self, action_text: str) -> StepResult:
    key = state_key(self.state)
    if self.done:
      return episode_over(self._render(self.state), key)
    moves, failure, reason = parse_moves(
      action_text, MOVE_INDEX, self.max_actions_per_turn
    )
    if failure is not None:
      self.steps += 1
      self.done = self.steps >= self.max_steps
      return StepResult(
        f"Invalid action ({reason}).\n" + self._render(self.state),
        {"step": self.step_penalty},
        self.done,
        failure,
        key,
        {"reason": reason},
      )
    level, state = self.level, self.state
    targets = level.targets
    taken = noops = 0
    solved = False
    for m in moves:
      new = transition(level, state, m)
      taken += 1
      if new is state:
        noops += 1
      state = new
      solved = state.boxes == targets
      if solved or self.steps + taken >= self.max_steps:
        break
    self.state = state
    self.steps += taken
    on_target = len(state.boxes & targets)
    components = {
      "step": self.step_penalty * taken,
      "box": self.box_reward * (on_target - self._on_target),
    }
    if solved:
      components["solved"] = self.solve_reward
    self._on_target = on_target
    self.done = solved or self.steps >= self.max_steps
    # Out of moves unsolved: the policy never finished (diagnose: could_not).
    failure = None if solved or not self.done else FailureCode.BUDGET_EXHAUSTED
    return StepResult(
      self._render(state),
      components,
      self.done,
      failure,
      key,
      {
        "moves": taken,
        "noops": noops,
        "boxes_on_target": on_target,
        "solved": solved,
      },
    )


def task_level(task: Task) -> tuple[Level, State]:
  """The level and start state a Sokoban task describes."""
  return parse_level(task.payload["rows"])
