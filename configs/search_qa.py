"""SFT then RL on search QA (Search-R1 protocol, BM25 tool), tiny preset.

  python -m agentic_rl.main --config=configs/search_qa.py:gigpo \
      --workdir=runs/search_qa_gigpo

`arg` is read as in `configs/sokoban.py`: one estimator variant (grpo,
dr_grpo, rloo, reinforce_pp, gigpo, gigpo_std, turn_discounted,
prm_weighted; default gigpo) and optionally `smoke` (a run of about a
minute for CI). The recipe is Sokoban's; the environment, the protocol
tags and the token budgets differ. Every task has its own invented
knowledge base, so answers cannot be memorised: the policy must issue
`<search>entity relation</search>`, read the top-3 BM25 passages in
`<information>`, and copy the answer out of them into `<answer>..</answer>`
(or answer `unknown`: 10% of questions have no answer in the base).
Difficulty 0 questions are one hop, so an expert episode is two turns
(search, answer) of about 320 tokens in all; turns need
`max_new_tokens=48` and contexts of 512 tokens.

Expected (2-core CPU, default size): see
experiments/credit_assignment/README.md.
"""

import ml_collections

from configs import sokoban

ESTIMATORS = sokoban.ESTIMATORS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c, smoke = sokoban.unit_success_config(arg)
  # No protocol preamble in the prompt: SFT teaches the tags.
  c.env = {"name": "search_qa", "options": {"instructions": False}}
  c.rollout.protocol = "tags"
  c.rollout.max_turns = 4  # one-hop tasks allow the expert's 2 turns plus 2
  c.rollout.max_new_tokens = 48
  c.rollout.max_total_tokens = 512
  c.sampler.max_len = 512
  c.length_buckets = (192, 256, 320, 384, 448, 512)
  # A search that retrieves a gold passage for the first time reports
  # `progress`: the PRM evidence, with well-formed turns.
  c.rewards.process.signals = ("valid_action", "env:progress")
  # The same `progress` also enters the return as a verifier component, at
  # the default weight 1; spelled out so that a flag can turn the retrieval
  # shaping off: --config.rewards.verifier.weights.progress=0
  # (configs/ablations/search_qa_shaping.py).
  c.rewards.verifier.weights.progress = 1.0
  if smoke:
    c.rollout.max_turns = 3
    c.length_buckets = (256, 512)
  return c
