"""SFT then RL on code repair (sandboxed tests, JSON tool calls), tiny
preset, CPU.

  python -m agentic_rl.main --config=configs/code_repair.py:gigpo \
      --workdir=runs/code_repair_gigpo

`arg` is read as in `configs/sokoban.py`: one estimator variant (default
gigpo) and optionally `smoke`, `quick`, `curriculum`, `replay`. The recipe
is Sokoban's; the environment, the protocol (`tool_call`) and the token
budgets differ. An expert episode (run the tests, search for the function
they name, read its file, edit, run the tests, answer) is six turns;
framed and tokenized as the rollout does (a token a character, a tag one
token), 120 of them at difficulties 0-2 took 2,032 tokens at the median
and 2,492 at most (2,076 and 2,538 with `replace_lines`), their longest
action (the edit) 250. So turns get `max_new_tokens=320` and contexts
3,072 tokens, room for about two extra turns.

Rewards: `success` is the verifier's (every visible test and every held-out
check passes, `agentic_rl/envs/code_repair.py`); the environment's
`progress` (the rise in passing held-out checks on a `run_tests` call; the
policy never sees those counts) is PRM evidence and a verifier component.
Like `success`, it is not earned by special-casing the visible tests.
"""

import ml_collections

from configs import sokoban

ESTIMATORS = sokoban.ESTIMATORS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c, smoke = sokoban.unit_success_config(arg)
  # The task text names the four tools; SFT teaches the call format.
  # `edit_tool="replace_lines"` offers an edit by line numbers in place of
  # edit_file's exact-text match; `expert="oracle"` is the demonstrator of
  # the runs before 2026-12-05's third part (searching first, for a name the
  # task does not give). Either changes the demos: a new SFT stage.
  c.env = {
    "name": "code_repair",
    "options": {"edit_tool": "edit_file", "expert": "tests_first"},
  }
  c.rollout.protocol = "tool_call"
  c.rollout.max_turns = 9  # the expert's six turns plus 3
  c.rollout.max_new_tokens = 320
  c.rollout.max_total_tokens = 3072
  c.sampler.max_len = 3072
  c.length_buckets = (768, 1024, 1536, 2048, 2560, 3072)
  c.rewards.process.signals = ("valid_action", "env:progress")
  # Memory: at 2,560 positions one layer's attention probabilities are
  # 2,560^2 floats a head and row. Sokoban's batch of 32 without remat took
  # over 18 GiB in its first SFT step (killed on a 24 GiB machine); SFT
  # rows of 8 under full remat and RL microbatches of 8 peaked at 6.5 GiB
  # (4 SFT steps, one RL step). As many demonstrations seen as Sokoban's
  # 150 x 32.
  c.model.remat = "full"
  # RL's learning rate rises over its first 10 optimizer steps (5 RL
  # steps). Without it one early update moved the SFT policy by a KL of 1.10
  # (seed 0) or 0.18 (seed 1); with it no step's KL passed 0.033, and
  # held-out success after 10 RL steps was the same within noise
  # (experiments/code_repair_sft/README.md).
  c.rl.optimizer.warmup_steps = 10
  if not smoke:
    c.sft.batch_size = 8
    c.sft.steps = 600
    c.rl.num_microbatches = 4
  else:
    c.rollout.max_turns = 6
    c.length_buckets = (1024, 3072)
  return c
