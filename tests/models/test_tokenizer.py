"""Tests for the environment tokenizer."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.models import tokenizer as tk

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOK = tk.build_env_tokenizer()

# Printable text interleaved with every special token, so tags land next to
# characters that could be confused with their brackets.
_text = st.text(alphabet=st.sampled_from(tk.BASE_CHARS), max_size=40)
_piece = st.one_of(_text, st.sampled_from(tk.SPECIAL_TOKENS))
_document = st.lists(_piece, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_document)
def test_round_trip(text):
  assert TOK.decode(TOK.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(_text.filter(lambda t: not any(s in t for s in tk.SPECIAL_TOKENS)))
def test_one_id_per_character(text):
  ids = TOK.encode(text)
  assert len(ids) == len(text)
  assert TOK.unk_id not in ids


@pytest.mark.parametrize("tag", tk.SPECIAL_TOKENS)
def test_each_special_token_is_one_id(tag):
  assert TOK.encode(tag) == [TOK.tag_id(tag)]
  # Still one id when glued to surrounding text.
  ids = TOK.encode(f"ab{tag}cd")
  assert ids[2] == TOK.tag_id(tag) and len(ids) == 5


def test_layout():
  assert TOK.pad_id == 0
  assert TOK.eos_id == 1
  ids = {TOK.tag_id(t) for t in tk.SPECIAL_TOKENS}
  assert len(ids) == len(tk.SPECIAL_TOKENS)
  assert TOK.vocab_size == len(tk.SPECIAL_TOKENS) + len(tk.BASE_CHARS)
  assert TOK.vocab_size <= 512
  assert max(TOK.encode(tk.BASE_CHARS)) == TOK.vocab_size - 1


def test_unknown_characters_become_unk():
  ids = TOK.encode("a\u00e9\r\U0001f600b")
  assert ids == [
    TOK.encode("a")[0],
    TOK.unk_id,
    TOK.unk_id,
    TOK.unk_id,
    TOK.encode("b")[0],
  ]
  assert TOK.decode(ids) == "a<unk><unk><unk>b"


def test_unknown_tag_is_a_named_error():
  with pytest.raises(KeyError, match="<tool>"):
    TOK.tag_id("<tool>")


def test_extra_chars_append_ids():
  ext = tk.build_env_tokenizer(extra_chars="\u2588\u00b7#\u2588")
  # '#' is already ASCII and the repeat is dropped: two new ids.
  assert ext.vocab_size == TOK.vocab_size + 2
  text = "ab <answer>x</answer>"
  assert ext.encode(text) == TOK.encode(text)
  assert ext.encode("\u2588\u00b7") == [TOK.vocab_size, TOK.vocab_size + 1]
  assert ext.decode(ext.encode("#\u2588\u00b7")) == "#\u2588\u00b7"
  with pytest.raises(TypeError, match="extra_chars"):
    tk.build_env_tokenizer(extra_chars=["x"])


def test_decode_accepts_arrays():
  ids = TOK.encode("go <eos>")
  assert TOK.decode(np.asarray(ids, np.int32)) == "go <eos>"
  assert TOK.decode(tuple(ids)) == "go <eos>"


def test_encode_batch_matches_encode():
  texts = ["", "a b", "<think>hm</think><answer>4</answer>"]
  assert TOK.encode_batch(texts) == [TOK.encode(t) for t in texts]


def test_save_load_and_transformers(tmp_path):
  ext = tk.build_env_tokenizer(extra_chars="\u2588")
  ext.save(tmp_path)
  back = tk.EnvTokenizer.load(tmp_path)
  text = '<tool_call>{"a": 1}</tool_call>\u2588\n\t~<eos>'
  assert back.encode(text) == ext.encode(text)
  assert back.vocab_size == ext.vocab_size

  from transformers import AutoTokenizer

  hf = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
  assert hf.pad_token_id == 0 and hf.eos_token_id == ext.eos_id
  assert hf.encode(text, add_special_tokens=False) == ext.encode(text)
  tricky = "a , b . c ! <answer> x </answer>"
  assert hf.decode(ext.encode(tricky)) == tricky


def test_load_rejects_foreign_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="tokenizer.json"):
    tk.EnvTokenizer.load(tmp_path)
  import tokenizers
  from tokenizers import models

  other = tokenizers.Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
  other.save(str(tmp_path / "tokenizer.json"))
  with pytest.raises(ValueError, match="<pad>"):
    tk.EnvTokenizer.load(tmp_path)
