"""Search-R1 style question answering over a generated knowledge base.

Every task carries its own small world of fictional people, cities,
countries and companies, drawn from name pools by the task seed and rendered
as one short passage per entity. Because the facts are invented per task, a
policy cannot memorise answers: it has to issue `<search>query</search>`,
read the `<information>` block of BM25 (bm25s) hits, and then
`<answer>..</answer>`. Questions follow a chain of relations from a start
entity (1 hop at difficulty 0, 2-3 hops above). A fraction of tasks is
unanswerable (tag `unsolvable`): the start entity does not exist or the last
fact is missing from the knowledge base; the correct answer is `unknown`.

Answers are scored SQuAD-style: normalized exact match and token F1.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import re
import string
from collections.abc import Sequence
from typing import Any

import bm25s
import numpy as np

from agentic_rl.envs.base import StepResult, Tool, register
from agentic_rl.envs.tool_env import AnswerResult, ToolEnvironment
from agentic_rl.envs.tools import ToolOutcome
from agentic_rl.types import Action, FailureCode, Task

FAMILY = "search_qa"
UNKNOWN = "unknown"  # the one correct answer to an unanswerable question

# --------------------------------------------------------------------------
# Name pools. Invented names, so no pretrained model has seen these facts.

FIRST_NAMES = (
  "Alder", "Brisa", "Caius", "Delphine", "Emrys", "Fenna", "Gideon", "Halla",
  "Ivo", "Jessamy", "Kester", "Liora", "Marek", "Nerys", "Osric", "Pella",
  "Quill", "Rosalind", "Soren", "Tamsin", "Ulric", "Vesna", "Wystan",
  "Xanthe", "Yorick", "Zinnia", "Anselm", "Bryony", "Corin", "Dagny",
  "Elowen", "Florian", "Greer", "Hollis", "Isolde", "Jarek", "Kaia", "Lucan",
  "Mireille", "Niamh",
)  # fmt: skip
LAST_NAMES = (
  "Voss", "Ashgrove", "Brennick", "Calder", "Dunmore", "Eskeland",
  "Fairholm", "Greaves", "Halloran", "Ingram", "Jessop", "Kettering",
  "Lindqvist", "Marlowe", "Norcross", "Orsini", "Pembury", "Quarles",
  "Redfern", "Stroud", "Thackery", "Underhill", "Vance", "Whitlock",
  "Yardley", "Zeller", "Abernathy", "Blackwood", "Carraway", "Drummond",
  "Ellery", "Fenwick", "Gorse", "Hartigan", "Ives", "Jardine", "Kilbride",
  "Lockhart", "Merriman", "Nettles",
)  # fmt: skip
CITY_HEADS = (
  "Qar", "Mor", "Vel", "Tal", "Ost", "Bran", "Cael", "Dun", "Esk", "Fal",
  "Gor", "Hal", "Ith", "Kel", "Lor", "Nar", "Pell", "Riv", "Sar", "Thal",
  "Ul", "Wen", "Yar", "Zor",
)  # fmt: skip
CITY_TAILS = (
  "leth", "vane", "moor", "haven", "dell", "ford", "mere", "wick", "gate",
  "holm", "stead", "bury", "crest", "fall",
)  # fmt: skip
COUNTRIES = (
  "Dravonia", "Keldara", "Ostravia", "Pellmark", "Sarnland", "Tovaria",
  "Ulmenia", "Valdoria", "Wexland", "Zarenia", "Brevany", "Calistria",
  "Elbaria", "Fenmarch",
)  # fmt: skip
COMPANY_HEADS = (
  "Zentrix", "Lumora", "Cobaltis", "Arborel", "Quantix", "Helixa", "Vantor",
  "Orbita", "Nimbra", "Ferrow", "Kestrel", "Solvane", "Tidewell", "Ironleaf",
  "Glimmer", "Stonebay", "Corvex", "Maribel", "Pyrana", "Wendell",
)  # fmt: skip
COMPANY_TAILS = (
  "Labs", "Foods", "Motors", "Textiles", "Systems", "Logistics", "Pharma",
  "Studios", "Mining", "Robotics",
)  # fmt: skip

# Relations: subject kind, object kind, and the passage word an informed
# searcher would pair with the subject's name (it appears in the passage, so
# BM25 can match it; there is no stemmer).
RELATIONS = {
  "born_in": ("person", "city", "born"),
  "birth_year": ("person", "year", "born"),
  "works_at": ("person", "company", "works"),
  "located_in": ("city", "country", "city"),
  "founded_by": ("company", "person", "founded"),
  "founded_year": ("company", "year", "founded"),
  "headquartered_in": ("company", "city", "headquartered"),
}

# Question templates by relation chain; `{e}` is the start entity.
TEMPLATES: dict[tuple[str, ...], str] = {
  ("born_in",): "In which city was {e} born?",
  ("birth_year",): "In what year was {e} born?",
  ("works_at",): "At which company does {e} work?",
  ("located_in",): "In which country is {e}?",
  ("founded_by",): "Who founded {e}?",
  ("founded_year",): "In what year was {e} founded?",
  ("headquartered_in",): "In which city is {e} headquartered?",
  ("founded_by", "born_in"): "In which city was the founder of {e} born?",
  ("founded_by", "birth_year"): "In what year was the founder of {e} born?",
  ("born_in", "located_in"): "In which country was {e} born?",
  ("headquartered_in", "located_in"): (
    "In which country is the headquarters of {e}?"
  ),
  ("works_at", "founded_by"): "Who founded the company where {e} works?",
  ("works_at", "headquartered_in"): (
    "In which city is the company where {e} works headquartered?"
  ),
  ("founded_by", "born_in", "located_in"): (
    "In which country was the founder of {e} born?"
  ),
  ("works_at", "founded_by", "born_in"): (
    "In which city was the founder of the company where {e} works born?"
  ),
  ("works_at", "headquartered_in", "located_in"): (
    "In which country is the company where {e} works headquartered?"
  ),
  ("works_at", "founded_by", "birth_year"): (
    "In what year was the founder of the company where {e} works born?"
  ),
}

# --------------------------------------------------------------------------
# Answer scoring (SQuAD-style normalisation).

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
  """Lowercase, drop punctuation and articles, collapse whitespace."""
  text = text.lower().translate(_PUNCT)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
  """1.0 if the normalized prediction equals any normalized gold."""
  pred = normalize_answer(prediction)
  return float(any(pred == normalize_answer(g) for g in golds))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  overlap = sum(common.values())
  if overlap == 0:
    return 0.0
  precision = overlap / len(pred_tokens)
  recall = overlap / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
  """Best token-overlap F1 of the normalized prediction against any gold."""
  pred = normalize_answer(prediction).split()
  return max(
    (_f1(pred, normalize_answer(g).split()) for g in golds), default=0.0
  )


# --------------------------------------------------------------------------
# Worlds: entities, facts and their passages.


@dataclasses.dataclass(frozen=True)
class World:
  """Entities by kind and facts keyed by (subject, relation)."""

  kinds: dict[str, str]  # entity name -> kind
  facts: dict[tuple[str, str], str]  # (subject, relation) -> object

  def entities(self, kind: str) -> list[str]:
    return [e for e, k in self.kinds.items() if k == kind]


def world_size(difficulty: int) -> dict[str, int]:
  """Entity counts; harder tasks get more distracting passages."""
  d = min(max(difficulty, 0), 4)
  return {
    "people": 6 + 4 * d,
    "cities": 4 + 2 * d,
    "companies": 3 + 2 * d,
    "countries": 3 + d,
  }


def _pick(rng: np.random.Generator, pool: Sequence[str], n: int) -> list[str]:
  return [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]


def _city_names(rng: np.random.Generator, n: int) -> list[str]:
  heads = _pick(rng, CITY_HEADS, n)
  return [h + CITY_TAILS[rng.integers(len(CITY_TAILS))] for h in heads]


def generate_world(seed: int, size: dict[str, int]) -> World:
  """A world fully determined by (seed, size)."""
  rng = np.random.default_rng(seed)
  firsts = _pick(rng, FIRST_NAMES, size["people"])
  lasts = _pick(rng, LAST_NAMES, size["people"])
  people = [f"{f} {l}" for f, l in zip(firsts, lasts, strict=True)]
  cities = _city_names(rng, size["cities"])
  countries = _pick(rng, COUNTRIES, size["countries"])
  companies = [
    f"{h} {COMPANY_TAILS[rng.integers(len(COMPANY_TAILS))]}"
    for h in _pick(rng, COMPANY_HEADS, size["companies"])
  ]
  kinds = {e: "person" for e in people}
  kinds |= {e: "city" for e in cities}
  kinds |= {e: "country" for e in countries}
  kinds |= {e: "company" for e in companies}

  facts: dict[tuple[str, str], str] = {}
  for city in cities:
    facts[city, "located_in"] = countries[rng.integers(len(countries))]
  born = {}
  for person in people:
    facts[person, "born_in"] = cities[rng.integers(len(cities))]
    born[person] = int(rng.integers(1920, 1990))
    facts[person, "birth_year"] = str(born[person])
  # Founders are distinct people; everyone else works at some company.
  founders = _pick(rng, people, len(companies))
  for company, founder in zip(companies, founders, strict=True):
    facts[company, "founded_by"] = founder
    year = born[founder] + int(rng.integers(22, 50))
    facts[company, "founded_year"] = str(year)
    facts[company, "headquartered_in"] = cities[rng.integers(len(cities))]
  for person in people:
    if person not in founders:
      facts[person, "works_at"] = companies[rng.integers(len(companies))]
  return World(kinds=kinds, facts=facts)


def drop_facts(world: World, drops: Sequence[Sequence[str]]) -> World:
  """The same world without the given (subject, relation) facts."""
  gone = {(s, r) for s, r in drops}
  facts = {k: v for k, v in world.facts.items() if k not in gone}
  return World(kinds=world.kinds, facts=facts)


def render_passage(world: World, entity: str) -> str:
  """One short passage stating every known fact about `entity`."""
  f = lambda rel: world.facts.get((entity, rel))  # noqa: E731
  kind = world.kinds[entity]
  if kind == "person":
    born = [f"in {v}" for v in (f("born_in"), f("birth_year")) if v]
    parts = [
      f"{entity} was born {' '.join(born)}."
      if born
      else f"{entity} is a person."
    ]
    if f("works_at"):
      parts.append(f"{entity} works at {f('works_at')}.")
    return " ".join(parts)
  if kind == "city":
    country = f("located_in")
    return (
      f"{entity} is a city in {country}."
      if country
      else (f"{entity} is a city.")
    )
  if kind == "company":
    text = f"{entity} is a company"
    if f("founded_by"):
      text += f" founded by {f('founded_by')}"
    if f("founded_year"):
      text += f" in {f('founded_year')}"
    if f("headquartered_in"):
      text += f", headquartered in {f('headquartered_in')}"
    return text + "."
  return f"{entity} is a country."


def passages(world: World) -> list[str]:
  """Passages in a fixed order (by entity insertion order)."""
  return [render_passage(world, e) for e in world.kinds]


# --------------------------------------------------------------------------
# Retrieval.


def _tokens(texts: list[str]) -> list[list[str]]:
  return bm25s.tokenize(
    texts, return_ids=False, stopwords="en", show_progress=False
  )


class Retriever:
  """BM25 (bm25s) over a fixed list of passages."""

  def __init__(self, docs: Sequence[str]):
    self.docs = list(docs)
    self._bm25 = bm25s.BM25()
    self._bm25.index(_tokens(self.docs), show_progress=False)

  def search(self, query: str, k: int) -> list[int]:
    """Indices of the top-k passages with a positive score, best first."""
    tokens = _tokens([query])
    if not tokens[0] or k <= 0:
      return []
    k = min(k, len(self.docs))
    ids, scores = self._bm25.retrieve(tokens, k=k, show_progress=False)
    return [int(i) for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


# --------------------------------------------------------------------------
# Tasks.


def num_hops(rng: np.random.Generator, difficulty: int) -> int:
  if difficulty <= 0:
    return 1
  if difficulty == 1:
    return 2
  if difficulty == 2:
    return int(rng.integers(2, 4))
  return 3


def follow(world: World, start: str, chain: Sequence[str]) -> list[str] | None:
  """[start, hop1, ..., answer], or None where a fact is missing."""
  path = [start]
  for rel in chain:
    nxt = world.facts.get((path[-1], rel))
    if nxt is None:
      return None
    path.append(nxt)
  return path


def _fresh_name(rng: np.random.Generator, world: World, kind: str) -> str:
  """A plausible name of `kind` that shares no word with the world's names."""
  used = {w for e in world.kinds for w in e.split()}
  if kind == "person":
    first = [n for n in FIRST_NAMES if n not in used]
    last = [n for n in LAST_NAMES if n not in used]
    return f"{first[rng.integers(len(first))]} {last[rng.integers(len(last))]}"
  if kind == "company":
    heads = [n for n in COMPANY_HEADS if n not in used]
    tail = COMPANY_TAILS[rng.integers(len(COMPANY_TAILS))]
    return f"{heads[rng.integers(len(heads))]} {tail}"
  heads = [
    h for h in CITY_HEADS if not any(e.startswith(h) for e in world.kinds)
  ]
  return (
    heads[rng.integers(len(heads))] + CITY_TAILS[rng.integers(len(CITY_TAILS))]
  )


def make_task(
  seed: int, difficulty: int = 0, unsolvable: bool = False, split: str = "train"
) -> Task:
  """A task fully determined by its arguments; the payload rebuilds it."""
  rng = np.random.default_rng([seed, difficulty, int(unsolvable), 17])
  size = world_size(difficulty)
  world = generate_world(seed, size)
  hops = num_hops(rng, difficulty)
  chains = [c for c in TEMPLATES if len(c) == hops]
  chain = chains[rng.integers(len(chains))]
  kind = RELATIONS[chain[0]][0]
  starts = [
    e for e in world.entities(kind) if follow(world, e, chain) is not None
  ]
  start = starts[rng.integers(len(starts))]
  path = follow(world, start, chain)
  drops: list[list[str]] = []
  variant = "answerable"
  answers = [path[-1]]
  if unsolvable:
    answers = [UNKNOWN]
    if rng.random() < 0.5:
      variant = "missing_entity"
      start = _fresh_name(rng, world, kind)
      path = [start]
    else:
      variant = "missing_fact"
      drops = [[path[-2], chain[-1]]]
      path = path[:-1]
  docs = list(world.kinds)
  payload = {
    "world_seed": seed,
    "size": size,
    "drops": drops,
    "question": TEMPLATES[chain].format(e=start),
    "answers": answers,
    "chain": list(chain),
    "path": path,
    # Evidence passages: those of the entities whose facts the chain reads
    # (not the answer entity's own passage).
    "gold_docs": [
      docs.index(e) for e in path[: len(chain)] if e in world.kinds
    ],
    "variant": variant,
    "max_turns": hops + 3,
  }
  digest = hashlib.sha1(
    json.dumps(payload, sort_keys=True).encode()
  ).hexdigest()[:10]
  return Task(
    id=f"{FAMILY}-d{difficulty}-s{seed}-{digest}",
    family=FAMILY,
    split=split,
    difficulty=difficulty,
    tags=("unsolvable",) if unsolvable else (),
    seed=seed,
    payload=payload,
  )


def task_world(payload: dict[str, Any]) -> World:
  world = generate_world(payload["world_seed"], payload["size"])
  return drop_facts(world, payload["drops"])


def expert_queries(payload: dict[str, Any]) -> list[str]:
  """The searches an informed agent issues: one per reachable hop."""
  path, chain = payload["path"], payload["chain"]
  return [
    f"{entity} {RELATIONS[rel][2]}"
    for entity, rel in zip(path, chain, strict=False)
  ]


def expert_actions(task: Task) -> list[str]:
  """Action texts that solve `task`: the hop searches, then the answer."""
  searches = [f"<search>{q}</search>" for q in expert_queries(task.payload)]
  return searches + [f"<answer>{task.payload['answers'][0]}</answer>"]


@functools.lru_cache(maxsize=64)
def _cached_retriever(world_json: str) -> Retriever:
  # Groups of rollouts replay the same task; index its world once.
  spec = json.loads(world_json)
  return Retriever(passages(task_world(spec)))


def task_retriever(payload: dict[str, Any]) -> Retriever:
  spec = {k: payload[k] for k in ("world_seed", "size", "drops")}
  return _cached_retriever(json.dumps(spec, sort_keys=True))


def render_hits(docs: Sequence[str], hits: Sequence[int]) -> str:
  if not hits:
    return "No results."
  return "\n".join(f"[{i + 1}] {docs[h]}" for i, h in enumerate(hits))


INSTRUCTIONS = (
  "Answer the question from the knowledge base. Search with "
  "<search>query</search>; results come back in <information>..."
  "</information>. Give the final answer as <answer>..</answer>, or "
  f"<answer>{UNKNOWN}</answer> if the knowledge base does not say."
)


# --------------------------------------------------------------------------
# The environment.


@register(FAMILY)
class SearchQA(ToolEnvironment):
  """Search-R1 protocol QA over a per-task generated knowledge base.

  The answer turn emits `success`, the score under `reward_metric` (exact
  match by default, or token F1), which the reward stack reads as the
  verdict, and `format`, `format_weight` times 1 if no turn of the episode
  was malformed (0 by default, Search-R1's optional format reward). The raw
  metrics `em`, `f1` and `format` are in `info["metrics"]`; they are not
  separate components because the reward stack sums components. A search
  earns `progress` = `progress_reward` per gold passage it retrieves for the
  first time (a per-turn process signal).
  """

  name = FAMILY
  protocol = "tags"

  def __init__(
    self,
    top_k: int = 3,
    unsolvable_rate: float = 0.1,
    reward_metric: str = "em",
    format_weight: float = 0.0,
    progress_reward: float = 0.1,
    instructions: bool = True,
    split: str = "train",
    max_turns: int | None = None,
    **tool_env_options: Any,
  ):
    super().__init__(max_turns=max_turns, **tool_env_options)
    if reward_metric not in ("em", "f1"):
      raise ValueError(
        f"reward_metric must be 'em' or 'f1', got {reward_metric!r}"
      )
    self.top_k = top_k
    self.unsolvable_rate = unsolvable_rate
    self.reward_metric = reward_metric
    self.format_weight = format_weight
    self.progress_reward = progress_reward
    self.instructions = instructions
    self.split = split
    self._fixed_max_turns = max_turns
    self.task: Task | None = None

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    rng = np.random.default_rng([seed, difficulty, 0x5EA])
    unsolvable = bool(rng.random() < self.unsolvable_rate)
    return make_task(seed, difficulty, unsolvable, self.split)

  def reset(self, task: Task, seed: int = 0) -> str:
    del seed  # the task fixes the world and the question
    self.task = task
    self.retriever = task_retriever(task.payload)
    self.gold = set(task.payload["gold_docs"])
    self.retrieved: set[int] = set()
    self.malformed_turns = 0
    self._new_gold = 0
    self.max_turns = self._fixed_max_turns or task.payload["max_turns"]
    self.begin_episode()
    question = f"Question: {task.payload['question']}"
    return f"{INSTRUCTIONS}\n{question}" if self.instructions else question

  def expert_actions(self, task: Task) -> list[str]:
    return expert_actions(task)

  def tools(self) -> dict[str, Tool]:
    return {
      "search": Tool(
        name="search",
        description="BM25 search over the knowledge base; top passages.",
        parameters={
          "type": "object",
          "properties": {"query": {"type": "string", "minLength": 1}},
          "required": ["query"],
          "additionalProperties": False,
        },
        fn=self._search,
      )
    }

  def _search(self, query: str) -> str:
    hits = self.retriever.search(query, self.top_k)
    self._new_gold = len((set(hits) & self.gold) - self.retrieved)
    self.retrieved |= set(hits)
    return render_hits(self.retriever.docs, hits)

  def on_tool_result(
    self, action: Action, outcome: ToolOutcome
  ) -> dict[str, float]:
    new, self._new_gold = self._new_gold, 0
    if not outcome.ok:
      return {}
    return {"progress": self.progress_reward * new}

  def on_answer(self, text: str) -> AnswerResult:
    golds = self.task.payload["answers"]
    metrics = {
      "em": exact_match(text, golds),
      "f1": token_f1(text, golds),
      "format": float(self.malformed_turns == 0),
    }
    components = {
      "success": metrics[self.reward_metric],
      "format": self.format_weight * metrics["format"],
    }
    return AnswerResult(
      reward_components=components,
      done=True,
      info={"metrics": metrics, "gold": list(golds)},
    )

  def state_key(self) -> str:
    seen = ",".join(str(i) for i in sorted(self.retrieved))
    return f"{FAMILY}|t={self.turns_used}|seen={seen}"

  def step(self, action_text: str) -> StepResult:
    result = super().step(action_text)
    if result.failure == FailureCode.MALFORMED_CALL:
      self.malformed_turns += 1
    return result
