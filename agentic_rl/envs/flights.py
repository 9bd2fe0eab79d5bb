"""Flight booking with JSON tool calls over a stateful, seeded inventory.

The task: "book the cheapest flight from A to B tomorrow leaving before
HH:MM". Tools: `search_flights(origin, destination, date)`,
`filter_flights(max_departure, max_price?, sort_by?)` over the last search
results, `check_seats(flight_id)` and `book(flight_id)`. Search results do
not show seats, and the cheapest matching flights are often sold out, so a
good agent checks seats in price order before booking. Booking a sold-out
flight is a tool error (the episode goes on); a successful booking ends the
episode and scores 1 only if it is the cheapest matching flight with seats.
Tasks where no flight qualifies are kept (tag `unsolvable`): the right move is
`<answer>no flight</answer>` without booking.

Difficulty adds flights and distractors: other dates, departures at or after
the deadline, other routes and sold-out cheap flights; from difficulty 2 the
prompt says only "tomorrow" and gives today's date.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentic_rl.envs.base import StepResult, Tool, register
from agentic_rl.envs.tool_env import AnswerResult, ToolEnvironment
from agentic_rl.envs.tools import ToolFailure, ToolOutcome
from agentic_rl.types import Action, Task

FAMILY = "flights"

AIRPORTS = (
  "ARV", "BLM", "CDX", "DOR", "EKT", "FAL", "GRN", "HVB", "ILS", "JOR",
  "KAV", "LUN", "MEZ", "NOR", "OSK", "PRT",
)  # fmt: skip
AIRLINES = ("SK", "NV", "TW", "QA", "ZP", "LR")
DEADLINES = ("07:00", "08:00", "09:00", "10:00")

# Answers that mean "no flight satisfies the request" (after normalisation).
_NO_FLIGHT = re.compile(
  r"^(no|none|there is no|there are no)( suitable| matching| available)?"
  r"( flights?)?( available| exists?| found)?$"
)


@dataclasses.dataclass
class Flight:
  id: str
  origin: str
  destination: str
  date: str  # YYYY-MM-DD
  departure: str  # HH:MM, 24h
  price: int
  seats: int

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def minutes(hhmm: str) -> int:
  h, m = hhmm.split(":")
  return int(h) * 60 + int(m)


def hhmm(total: int) -> str:
  return f"{total // 60:02d}:{total % 60:02d}"


def qualifies(flight: Flight, request: dict[str, str]) -> bool:
  """Right route, right date, departs strictly before the deadline."""
  return (
    flight.origin == request["origin"]
    and flight.destination == request["destination"]
    and flight.date == request["date"]
    and minutes(flight.departure) < minutes(request["deadline"])
  )


def correct_flight(
  flights: Sequence[Flight], request: dict[str, str]
) -> Flight | None:
  """The cheapest qualifying flight with a free seat (None if there is none).

  Generated inventories give qualifying flights distinct prices, so the
  answer is unique; ties would fall to the earlier departure.
  """
  ok = [f for f in flights if qualifies(f, request) and f.seats > 0]
  return min(ok, key=lambda f: (f.price, minutes(f.departure)), default=None)


# --------------------------------------------------------------------------
# Generation.


def _times(rng: np.random.Generator, lo: int, hi: int, n: int) -> list[str]:
  """n departure times on a 5-minute grid in [lo, hi) minutes."""
  slots = np.arange(lo // 5, max(hi // 5, lo // 5 + 1))
  picks = rng.choice(slots, size=n, replace=n > len(slots))
  return [hhmm(int(s) * 5) for s in picks]


def generate_inventory(
  seed: int, difficulty: int, unsolvable: bool
) -> tuple[dict[str, str], list[Flight], str]:
  """(request, flights, today) fully determined by the arguments."""
  d = min(max(difficulty, 0), 4)
  rng = np.random.default_rng([seed, d, int(unsolvable), 0xF1])
  airports = [AIRPORTS[i] for i in rng.choice(len(AIRPORTS), 3 + d, False)]
  origin, destination = airports[0], airports[1]
  today = datetime.date(2025, 1, 1) + datetime.timedelta(
    days=int(rng.integers(0, 365))
  )
  day = lambda k: (today + datetime.timedelta(days=k)).isoformat()  # noqa: E731
  deadline = "09:00" if d == 0 else DEADLINES[rng.integers(len(DEADLINES))]
  request = {
    "origin": origin,
    "destination": destination,
    "date": day(1),
    "deadline": deadline,
  }
  cut = minutes(deadline)

  n_match = int(rng.integers(2, 4)) + d
  # Unsolvable tasks either have no qualifying flight at all or only
  # sold-out ones; solvable ones sell out some of the cheapest.
  no_match = unsolvable and rng.random() < 0.5
  if no_match:
    n_match = 0
  prices = sorted(
    int(p) for p in rng.choice(np.arange(80, 600, 7), n_match, False)
  )
  if unsolvable:
    sold_out = n_match
  else:
    sold_out = int(rng.integers(0, min(d + 1, n_match - 1) + 1))
  spec: list[tuple[str, str, str, str, int, int]] = []
  for i, (t, p) in enumerate(
    zip(_times(rng, 5 * 60, cut, n_match), prices, strict=True)
  ):
    seats = 0 if i < sold_out else int(rng.integers(1, 9))
    spec.append((origin, destination, day(1), t, p, seats))

  # Distractors are cheaper than the cheapest qualifying flight on purpose,
  # so an agent that ignores the date, the time or the route books them.
  floor = prices[0] if prices else 300
  n_distract = 2 + 3 * d
  others = airports[2:]
  for k in range(n_distract):
    kind = k % 4
    p = int(rng.integers(40, max(floor, 41)))
    seats = int(rng.integers(1, 9))
    if kind == 0:  # wrong date
      when = day(int(rng.choice([0, 2])))
      t = _times(rng, 5 * 60, cut, 1)[0]
      spec.append((origin, destination, when, t, p, seats))
    elif kind == 1:  # at or after the deadline (exactly on it sometimes)
      t = deadline if rng.random() < 0.3 else _times(rng, cut, 22 * 60, 1)[0]
      spec.append((origin, destination, day(1), t, p, seats))
    elif kind == 2:  # reverse route
      t = _times(rng, 5 * 60, cut, 1)[0]
      spec.append((destination, origin, day(1), t, p, seats))
    else:  # another route from the same origin or into the destination
      other = others[rng.integers(len(others))]
      a, b = (origin, other) if rng.random() < 0.5 else (other, destination)
      t = _times(rng, 5 * 60, cut, 1)[0]
      spec.append((a, b, day(1), t, p, seats))

  order = rng.permutation(len(spec))
  numbers = rng.choice(np.arange(100, 1000), len(spec), False)
  flights = [
    Flight(
      id=f"{AIRLINES[rng.integers(len(AIRLINES))]}{int(numbers[j])}",
      origin=spec[i][0],
      destination=spec[i][1],
      date=spec[i][2],
      departure=spec[i][3],
      price=spec[i][4],
      seats=spec[i][5],
    )
    for j, i in enumerate(order)
  ]
  return request, flights, today.isoformat()


def render_request(request: dict[str, str], today: str, relative: bool) -> str:
  if relative:
    when = f"tomorrow (today is {today})"
  else:
    when = f"tomorrow, {request['date']}"
  return (
    f"Book the cheapest flight from {request['origin']} to "
    f"{request['destination']} {when}, leaving before "
    f"{request['deadline']}. If no flight qualifies, answer no flight."
  )


def make_task(
  seed: int, difficulty: int = 0, unsolvable: bool = False, split: str = "train"
) -> Task:
  """A task fully determined by its arguments; the payload rebuilds it."""
  request, flights, today = generate_inventory(seed, difficulty, unsolvable)
  best = correct_flight(flights, request)
  payload = {
    "request": request,
    "today": today,
    "flights": [f.to_dict() for f in flights],
    "prompt": render_request(request, today, relative=difficulty >= 2),
    "correct": best.id if best else None,
    # Expert turns plus slack for one detour.
    "max_turns": len(_expert_calls(request, flights)) + 3,
  }
  digest = hashlib.sha1(
    json.dumps(payload, sort_keys=True).encode()
  ).hexdigest()[:10]
  return Task(
    id=f"{FAMILY}-d{difficulty}-s{seed}-{digest}",
    family=FAMILY,
    split=split,
    difficulty=difficulty,
    tags=("unsolvable",) if best is None else (),
    seed=seed,
    payload=payload,
  )


def task_flights(task: Task) -> list[Flight]:
  return [Flight(**f) for f in task.payload["flights"]]


# --------------------------------------------------------------------------
# The scripted expert.


def _expert_calls(
  request: dict[str, str], flights: Sequence[Flight]
) -> list[tuple[str, dict[str, Any]]]:
  """(tool, arguments) pairs, then ("answer", {"text": ..}) if unsolvable."""
  calls: list[tuple[str, dict[str, Any]]] = [
    (
      "search_flights",
      {
        "origin": request["origin"],
        "destination": request["destination"],
        "date": request["date"],
      },
    ),
    ("filter_flights", {"max_departure": request["deadline"]}),
  ]
  candidates = sorted(
    (f for f in flights if qualifies(f, request)),
    key=lambda f: (f.price, minutes(f.departure)),
  )
  for f in candidates:
    calls.append(("check_seats", {"flight_id": f.id}))
    if f.seats > 0:
      calls.append(("book", {"flight_id": f.id}))
      return calls
  calls.append(("answer", {"text": "no flight"}))
  return calls


def format_call(name: str, arguments: dict[str, Any]) -> str:
  """One action in the tool-call protocol (the answer tag for answers)."""
  if name == "answer":
    return f"<answer>{arguments['text']}</answer>"
  body = json.dumps({"name": name, "arguments": arguments})
  return f"<tool_call>{body}</tool_call>"


def expert_actions(task: Task) -> list[str]:
  """Search, filter, check seats in price order, book (or answer)."""
  calls = _expert_calls(task.payload["request"], task_flights(task))
  return [format_call(name, args) for name, args in calls]


def is_no_flight_answer(text: str) -> bool:
  norm = " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())
  return bool(_NO_FLIGHT.match(norm))


# --------------------------------------------------------------------------
# Tool schemas.

_CODE = {"type": "string", "pattern": "^[A-Z]{3}$"}
_TIME = {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}
_ID = {"type": "string", "minLength": 1, "maxLength": 16}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
  return {
    "type": "object",
    "properties": properties,
    "required": required,
    "additionalProperties": False,
  }


SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
  "search_flights": (
    "Flights on a route and date (no seat counts), by departure time.",
    _schema(
      {
        "origin": _CODE,
        "destination": _CODE,
        "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
      },
      ["origin", "destination", "date"],
    ),
  ),
  "filter_flights": (
    "Filters the last results: departure strictly before max_departure "
    "(HH:MM), price <= max_price; sorted by price (default) or departure.",
    _schema(
      {
        "max_departure": _TIME,
        "max_price": {"type": "integer", "minimum": 0},
        "sort_by": {"type": "string", "enum": ["price", "departure"]},
      },
      ["max_departure"],
    ),
  ),
  "check_seats": (
    "Seats left on a flight.",
    _schema({"flight_id": _ID}, ["flight_id"]),
  ),
  "book": (
    "Books one seat on a flight; fails if it is sold out. Ends the episode.",
    _schema({"flight_id": _ID}, ["flight_id"]),
  ),
}


def render_flights(flights: Sequence[Flight]) -> str:
  return "\n".join(f"{f.id} {f.departure} ${f.price}" for f in flights)


INSTRUCTIONS = (
  "Tools: search_flights(origin, destination, date), filter_flights("
  "max_departure, max_price, sort_by), check_seats(flight_id), "
  'book(flight_id). Call one per turn: <tool_call>{"name": .., '
  '"arguments": {..}}</tool_call>. Finish by booking, or with '
  "<answer>..</answer>."
)


# --------------------------------------------------------------------------
# The environment.


@register(FAMILY)
class Flights(ToolEnvironment):
  """Stateful flight booking; see the module docstring.

  Components: `success` (1 for booking the correct flight or, on an
  unsolvable task, answering "no flight"; 0 for any other booking or
  answer) and `progress`, `progress_reward` for each first useful call: the
  right search, a filter that leaves exactly the qualifying flights, and the
  seat check of the correct flight.
  """

  name = FAMILY
  protocol = "tool_call"

  def __init__(
    self,
    unsolvable_rate: float = 0.15,
    progress_reward: float = 0.1,
    instructions: bool = True,
    split: str = "train",
    max_turns: int | None = None,
    **tool_env_options: Any,
  ):
    super().__init__(max_turns=max_turns, **tool_env_options)
    self.unsolvable_rate = unsolvable_rate
    self.progress_reward = progress_reward
    self.instructions = instructions
    self.split = split
    self._fixed_max_turns = max_turns
    self.task: Task | None = None

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    rng = np.random.default_rng([seed, difficulty, 0xF11])
    unsolvable = bool(rng.random() < self.unsolvable_rate)
    return make_task(seed, difficulty, unsolvable, self.split)

  def reset(self, task: Task, seed: int = 0) -> str:
    del seed  # the task fixes the inventory
    self.task = task
    self.request = dict(task.payload["request"])
    self.inventory = {f.id: f for f in task_flights(task)}
    self.initial_seats = {i: f.seats for i, f in self.inventory.items()}
    self.correct = task.payload["correct"]
    self.qualifying = {
      i for i, f in self.inventory.items() if qualifies(f, self.request)
    }
    self.searched: set[str] = set()
    self.known_seats: dict[str, int] = {}
    self.last: list[str] | None = None
    self.booked: str | None = None
    self.milestones: set[str] = set()
    self.max_turns = self._fixed_max_turns or task.payload["max_turns"]
    self.begin_episode()
    prompt = task.payload["prompt"]
    return f"{prompt}\n{INSTRUCTIONS}" if self.instructions else prompt

  def expert_actions(self, task: Task) -> list[str]:
    return expert_actions(task)

  def tools(self) -> dict[str, Tool]:
    fns = {
      "search_flights": self._search,
      "filter_flights": self._filter,
      "check_seats": self._check_seats,
      "book": self._book,
    }
    return {
      name: Tool(name, description, parameters, fns[name])
      for name, (description, parameters) in SCHEMAS.items()
    }

  # -- tools -----------------------------------------------------------------

  def _flight(self, flight_id: str) -> Flight:
    flight = self.inventory.get(flight_id)
    if flight is None:
      raise ToolFailure(f"no flight with id {flight_id!r}")
    return flight

  def _search(self, origin: str, destination: str, date: str) -> str:
    found = sorted(
      (
        f
        for f in self.inventory.values()
        if (f.origin, f.destination, f.date) == (origin, destination, date)
      ),
      key=lambda f: (minutes(f.departure), f.id),
    )
    self.searched.add(f"{origin}-{destination}@{date}")
    self.last = [f.id for f in found]
    head = f"{origin}->{destination} on {date}"
    if not found:
      return f"No flights {head}."
    return f"{len(found)} flights {head}:\n{render_flights(found)}"

  def _filter(
    self,
    max_departure: str,
    max_price: int | None = None,
    sort_by: str = "price",
  ) -> str:
    if self.last is None:
      raise ToolFailure("nothing to filter; call search_flights first")
    cut = minutes(max_departure)
    kept = [
      self.inventory[i]
      for i in self.last
      if minutes(self.inventory[i].departure) < cut
      and (max_price is None or self.inventory[i].price <= max_price)
    ]
    if sort_by == "price":
      kept.sort(key=lambda f: (f.price, minutes(f.departure)))
    else:
      kept.sort(key=lambda f: (minutes(f.departure), f.price))
    self.last = [f.id for f in kept]
    if not kept:
      return f"No flights left departing before {max_departure}."
    return (
      f"{len(kept)} flights departing before {max_departure}, by {sort_by}:"
      f"\n{render_flights(kept)}"
    )

  def _check_seats(self, flight_id: str) -> str:
    flight = self._flight(flight_id)
    self.known_seats[flight.id] = flight.seats
    if flight.seats == 0:
      return f"{flight.id}: sold out (0 seats)."
    plural = "" if flight.seats == 1 else "s"
    return f"{flight.id}: {flight.seats} seat{plural} left."

  def _book(self, flight_id: str) -> str:
    flight = self._flight(flight_id)
    if flight.seats == 0:
      self.known_seats[flight.id] = 0
      raise ToolFailure(f"{flight.id} is sold out; nothing was booked")
    flight.seats -= 1
    self.booked = flight.id
    return (
      f"Booked {flight.id}: {flight.origin}->{flight.destination} "
      f"{flight.date} {flight.departure}, ${flight.price}."
    )

  # -- rewards and state -----------------------------------------------------

  def _milestone(self, name: str) -> float:
    if name in self.milestones:
      return 0.0
    self.milestones.add(name)
    return self.progress_reward

  def on_tool_result(
    self, action: Action, outcome: ToolOutcome
  ) -> dict[str, float]:
    if not outcome.ok:
      return {}
    args, r = action.arguments, self.request
    progress = 0.0
    if action.name == "search_flights" and (
      (args["origin"], args["destination"], args["date"])
      == (r["origin"], r["destination"], r["date"])
    ):
      progress = self._milestone("search")
    elif action.name == "filter_flights" and set(self.last) == self.qualifying:
      progress = self._milestone("filter")
    elif action.name == "check_seats" and args["flight_id"] == self.correct:
      progress = self._milestone("seats")
    components = {"progress": progress}
    if action.name == "book":
      components["success"] = float(self.booked == self.correct)
    return components

  def on_answer(self, text: str) -> AnswerResult:
    no_flight = is_no_flight_answer(text)
    success = float(self.correct is None and no_flight)
    return AnswerResult(
      reward_components={"success": success},
      done=True,
      info={"no_flight_answer": no_flight, "correct": self.correct},
    )

  def _act(self, action_text: str, key: str) -> StepResult:
    # A successful booking ends the episode; the base class only ends
    # episodes on answers, so close it here (before the budget check).
    result = super()._act(action_text, key)
    if self.booked is not None:
      result.done = True
      result.info.update(booked=self.booked, correct=self.correct)
    return result

  def state_key(self) -> str:
    """Turns used, searches made, seat counts learned, last results, bookings.

    Order-free: trajectories that learned the same facts by the same turn
    share a key.
    """
    seats = ",".join(f"{i}={n}" for i, n in sorted(self.known_seats.items()))
    last = "-" if self.last is None else ",".join(sorted(self.last))
    sold = ",".join(
      f"{i}={f.seats}"
      for i, f in sorted(self.inventory.items())
      if f.seats != self.initial_seats[i]
    )
    return (
      f"{FAMILY}|t={self.turns_used}|searched={','.join(sorted(self.searched))}"
      f"|seats={seats}|last={last}|sold={sold}"
    )
