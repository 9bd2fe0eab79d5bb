"""Character-level tokenizer for the procedurally generated environments.

Tiny policies trained from scratch on generated environments do not need a
30k-token BPE vocabulary: every environment speaks printable ASCII plus a few
protocol tags. This tokenizer gives each printable ASCII character (and
newline and tab) one id, and each protocol tag one special id, so the rollout
can stop on tag ids without ever looking at strings inside jit.

Layout of the vocabulary (stable, so saved checkpoints keep their meaning):

  0 `<pad>`, 1 `<eos>`, 2 `<unk>`, then the protocol tags in `PROTOCOL_TAGS`
  order, then the characters of `BASE_CHARS`, then any `extra_chars`.

Characters outside the vocabulary encode to `<unk>` (one id per character)
instead of raising: an environment observation with a stray glyph must not
crash the host loop. Such text does not round-trip; everything made of known
characters and special tokens does, exactly (`decode(encode(x)) == x`).

Special tokens are matched anywhere in the input, so the literal text
`<answer>` always becomes the single `<answer>` id, which is what makes
stop conditions token ids.

The underlying `tokenizers.Tokenizer` runs in Rust (well under a microsecond
per character), and the saved directory also loads with
`transformers.AutoTokenizer.from_pretrained(dir)`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

import numpy as np
import tokenizers
from tokenizers import decoders, models

PAD = "<pad>"
EOS = "<eos>"
UNK = "<unk>"

PROTOCOL_TAGS: tuple[str, ...] = (
  "<tool_call>",
  "</tool_call>",
  "<answer>",
  "</answer>",
  "<search>",
  "</search>",
  "<information>",
  "</information>",
  "<think>",
  "</think>",
)

SPECIAL_TOKENS: tuple[str, ...] = (PAD, EOS, UNK, *PROTOCOL_TAGS)

# Printable ASCII (space through tilde) plus the two whitespace controls that
# generated text uses. Carriage return is deliberately absent: environments
# emit "\n" line endings only.
BASE_CHARS: str = "".join(chr(c) for c in range(0x20, 0x7F)) + "\n\t"

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def _char_vocab(extra_chars: str) -> list[str]:
  """Base characters then new extra characters, first occurrence order."""
  chars = list(BASE_CHARS)
  seen = set(chars)
  for c in extra_chars:
    if c not in seen:
      seen.add(c)
      chars.append(c)
  return chars


def _build(chars: Sequence[str]) -> tokenizers.Tokenizer:
  """A BPE model with no merges: each known character is one token.

  BPE (rather than WordLevel) because it splits a pre-token into characters
  by itself and maps each unknown character to `<unk>`, so no pre-tokenizer
  regex is needed and the cost stays linear in the text length.
  """
  vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
  for c in chars:
    vocab[c] = len(vocab)
  tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
  tok.add_special_tokens(
    [
      tokenizers.AddedToken(s, special=True, normalized=False)
      for s in SPECIAL_TOKENS
    ]
  )
  # Fuse joins tokens with no separator (the default decoder inserts spaces).
  tok.decoder = decoders.Fuse()
  return tok


def _check_layout(tok: tokenizers.Tokenizer) -> dict[str, int]:
  """Ids of the special tokens; raises if the file is not ours."""
  ids = {}
  for s in SPECIAL_TOKENS:
    i = tok.token_to_id(s)
    if i is None:
      raise ValueError(f"tokenizer has no special token {s!r}")
    if tok.encode(s, add_special_tokens=False).ids != [i]:
      raise ValueError(f"special token {s!r} does not encode to a single id")
    ids[s] = i
  if ids[PAD] != 0:
    raise ValueError(f"{PAD!r} must have id 0, found {ids[PAD]}")
  return ids


class EnvTokenizer:
  """Character-level tokenizer with single-id protocol tags.

  Attributes:
    tokenizer: the underlying `tokenizers.Tokenizer`.
  """

  def __init__(self, tokenizer: tokenizers.Tokenizer):
    self.tokenizer = tokenizer
    self._special_ids = _check_layout(tokenizer)
    self._vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

  @property
  def vocab_size(self) -> int:
    return self._vocab_size

  @property
  def pad_id(self) -> int:
    return self._special_ids[PAD]

  @property
  def eos_id(self) -> int:
    return self._special_ids[EOS]

  @property
  def unk_id(self) -> int:
    return self._special_ids[UNK]

  def tag_id(self, tag: str) -> int:
    """Id of a special token, e.g. `tag_id("</answer>")`."""
    try:
      return self._special_ids[tag]
    except KeyError:
      raise KeyError(
        f"unknown tag {tag!r}; special tokens are {list(SPECIAL_TOKENS)}"
      ) from None

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    """Encodes many texts in one Rust call (parallel across cores)."""
    encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [e.ids for e in encs]

  def decode(self, ids: Iterable[int] | np.ndarray) -> str:
    """Text of `ids`, special tokens included (so tags round-trip)."""
    if isinstance(ids, np.ndarray):
      ids = ids.tolist()
    elif not isinstance(ids, list):
      ids = [int(i) for i in ids]
    return self.tokenizer.decode(ids, skip_special_tokens=False)

  def save(self, directory: str | os.PathLike) -> None:
    """Writes tokenizer.json plus a config that transformers understands."""
    os.makedirs(directory, exist_ok=True)
    self.tokenizer.save(os.path.join(directory, TOKENIZER_FILE))
    config = {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "pad_token": PAD,
      "eos_token": EOS,
      "unk_token": UNK,
      "additional_special_tokens": list(PROTOCOL_TAGS),
      # transformers would otherwise delete spaces before punctuation.
      "clean_up_tokenization_spaces": False,
      "model_max_length": 1_000_000_000,
    }
    path = os.path.join(directory, TOKENIZER_CONFIG_FILE)
    with open(path, "w") as f:
      json.dump(config, f, indent=2)

  @classmethod
  def load(cls, directory: str | os.PathLike) -> EnvTokenizer:
    path = os.path.join(directory, TOKENIZER_FILE)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"no {TOKENIZER_FILE} in {directory}")
    return cls(tokenizers.Tokenizer.from_file(path))


def build_env_tokenizer(extra_chars: str = "") -> EnvTokenizer:
  """The environment tokenizer; `extra_chars` adds characters after ASCII.

  Adding characters appends ids, so a vocabulary built with extra characters
  agrees with the default one on every default id.
  """
  if not isinstance(extra_chars, str):
    raise TypeError(
      f"extra_chars must be a str, got {type(extra_chars).__name__}"
    )
  return EnvTokenizer(_build(_char_vocab(extra_chars)))
