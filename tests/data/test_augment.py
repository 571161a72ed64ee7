"""TinyBERT's data augmentation (bertzoo.data.tasks.augment): tiny vocabularies and hand-built masked LMs whose
proposals are known, so every expected text is built here."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from bertzoo.config import ModelConfig
from bertzoo.data.tasks.augment import augment_examples, word_tokens
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertzoo.errors import ConfigError, DataError
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM

LETTERS = "abcdefghijklmnopqrstuvwxyz"
WORDS = ["the", "cat", "sat", "on", "mat", "dog", "sun", "moon", "star", "tree", "我", "爱", "中", "国", "猫"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    """Specials, a placeholder, punctuation, letters and their ## forms, and WORDS; any other word splits
    into letters (several pieces)."""
    vocab = [*SPECIAL_TOKENS, "[unused0]", *".,!?", *LETTERS, *(f"##{c}" for c in LETTERS), *WORDS]
    path = Path(tmp_path_factory.mktemp("augment")) / "vocab.txt"
    path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    return Tokenizer.from_vocab(path)


def tiny_mlm(vocab_size: int, seed: int = 0, **config) -> MaskedLM:
    torch.manual_seed(seed)
    c = ModelConfig(
        vocab_size=vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position=64
    )
    return MaskedLM(Encoder(ModelConfig(**{**c.to_dict(), **config})), sentence_task=None).eval()


def fixed_mlm(tok: Tokenizer, scores: dict[str, float]) -> MaskedLM:
    """A masked LM whose logits are `scores` (0 for any other token) at every position: decoder weights
    zero, the scores in its bias."""
    mlm = tiny_mlm(tok.vocab_size, tie_word_embeddings=False)
    bias = torch.zeros(tok.vocab_size)
    for token, score in scores.items():
        bias[tok.token_to_id(token)] = score
    with torch.no_grad():
        mlm.mlm_head.decoder.weight.zero_()
        mlm.mlm_head.decoder.bias.copy_(bias)
    return mlm


def run(examples, mlm, tok, **kwargs):
    return augment_examples(examples, mlm, tok, progress=False, **kwargs)


# A text as (piece, replaceable) parts: odd spacing, upper case, punctuation, a word of several pieces.
PARTS = [("  ", False), ("The", True), (" ", False), ("cat", True), (",\t", False), ("sat", True), ("  ", False)]
PARTS += [("on", True), (" ", False), ("zebra", False), ("! ", False), ("mat", True), (".", False)]
TEXT = "".join(piece for piece, _ in PARTS)


def pattern(parts, new: str) -> re.Pattern:
    """Each replaceable word (a group) as itself or `new`, everything else byte for byte."""
    return re.compile("".join(f"({re.escape(p)}|{re.escape(new)})" if r else re.escape(p) for p, r in parts))


def test_replaced_words_become_the_winner_and_the_rest_is_untouched(tok) -> None:
    mlm = fixed_mlm(tok, {"sun": 5.0})
    examples = [
        {"text": TEXT, "label": 1, "source": "a.tsv"},
        {"text": "dog", "text_pair": TEXT, "label": 0, "source": "b.tsv"},
    ]
    copies = 6
    out = run(examples, mlm, tok, copies=copies, replace_prob=0.5, candidates=1)
    assert len(out) == len(examples) * (1 + copies)
    assert out[: len(examples)] == examples
    originals = [p for p, r in PARTS if r]
    words = pattern(PARTS, "sun")
    changed = [0] * len(originals)
    for i, example in enumerate(examples):
        made = out[len(examples) + i * copies : len(examples) + (i + 1) * copies]
        assert [c["augmented"] for c in made] == list(range(1, copies + 1))
        for c in made:
            assert {k: v for k, v in c.items() if k != "augmented"}.keys() == example.keys()
            assert (c["label"], c["source"]) == (example["label"], example["source"])
            match = words.fullmatch(c["text"] if i == 0 else c["text_pair"])
            assert match, c
            changed = [n + (g == "sun") for n, g in zip(changed, match.groups(), strict=True)]
            if i == 1:
                assert c["text"] in ("dog", "sun")
    # With p = 0.5 over 12 copies every word was replaced in some copies and kept in others.
    assert all(0 < n < 2 * copies for n in changed), changed


def test_replace_prob_zero_and_one(tok) -> None:
    mlm = tiny_mlm(tok.vocab_size)
    words = ["the", "cat", "zebra", ",", "sat", "on", "xyz", "mat", "!", "dog"]
    single = {"the", "cat", "sat", "on", "mat", "dog"}  # one word token each
    examples = [{"text": " ".join(words), "label": 3}, {"text": " ".join(reversed(words)), "label": 4}]
    out = run(examples, mlm, tok, copies=3, replace_prob=0.0)
    assert [c["text"] for c in out[2:]] == [examples[0]["text"]] * 3 + [examples[1]["text"]] * 3
    out = run(examples, mlm, tok, copies=3, replace_prob=1.0)
    allowed = word_tokens(tok)
    for c in out[2:]:
        original = words if c["label"] == 3 else list(reversed(words))
        new = c["text"].split(" ")
        assert len(new) == len(original)
        for before, after in zip(original, new, strict=True):
            if before in single:
                assert after != before and allowed[tok.token_to_id(after)], (before, after)
            else:  # several pieces, or punctuation
                assert after == before


def test_the_original_specials_pieces_and_punctuation_are_never_proposed(tok) -> None:
    # Ranked above everything a word could become: specials, a placeholder, ## pieces, punctuation; then
    # the two words of the text, then `moon`.
    scores = {t: 9.0 for t in SPECIAL_TOKENS} | {"[unused0]": 9.0, "##a": 8.0, "##s": 8.0, ",": 7.5, "!": 7.5}
    scores |= {"cat": 7.0, "dog": 7.0, "moon": 6.0}
    mlm = fixed_mlm(tok, scores)
    out = run([{"text": "cat dog"}], mlm, tok, copies=2, replace_prob=1.0, candidates=1)
    assert [c["text"] for c in out[1:]] == ["dog cat", "dog cat"]  # each the best word other than itself
    out = run([{"text": "cat dog"}], mlm, tok, copies=30, replace_prob=1.0, candidates=2)
    firsts = {c["text"].split(" ")[0] for c in out[1:]}
    seconds = {c["text"].split(" ")[1] for c in out[1:]}
    assert firsts == {"dog", "moon"} and seconds == {"cat", "moon"}  # drawn from the top 2, both drawn


def test_same_seed_same_output_whatever_the_batch_size(tok) -> None:
    mlm = tiny_mlm(tok.vocab_size, seed=3)
    examples = [
        {"text": "the cat sat on the mat", "text_pair": "the dog sat", "label": 0},
        {"text": "sun", "label": 1},
        {"text": "moon star tree zebra the dog on mat cat sun", "label": 2},
        {"text": "我爱中国", "label": 1},
    ]
    base = run(examples, mlm, tok, copies=5, seed=11, batch_size=64)
    assert run(examples, mlm, tok, copies=5, seed=11, batch_size=64) == base
    assert run(examples, mlm, tok, copies=5, seed=11, batch_size=1) == base
    assert run(examples, mlm, tok, copies=5, seed=11, batch_size=3) == base
    assert any(c["text"] != examples[c["label"]]["text"] for c in base[4:])
    assert run(examples, mlm, tok, copies=5, seed=12) != base
    mlm.train()  # dropout is off while augmenting, and the mode comes back
    assert run(examples, mlm, tok, copies=5, seed=11) == base
    assert mlm.training


def test_cjk_characters_are_words(tok) -> None:
    mlm = fixed_mlm(tok, {"猫": 5.0, "sun": 4.0})
    out = run([{"text": "我爱中国"}, {"text": "我 爱猫!"}], mlm, tok, copies=1, replace_prob=1.0, candidates=1)
    assert out[2]["text"] == "猫猫猫猫"
    assert out[3]["text"] == "猫 猫sun!"  # 猫 is not proposed for itself: the next best word is
    # A Latin word put in place of a CJK character is kept apart from a Latin neighbour.
    mlm = fixed_mlm(tok, {"sun": 5.0})
    out = run([{"text": "zebra中cat国"}], mlm, tok, copies=1, replace_prob=1.0, candidates=1)
    assert out[1]["text"] == "zebra sun sun sun"


def test_words_past_max_seq_len_are_never_replaced(tok) -> None:
    mlm = fixed_mlm(tok, {"sun": 5.0})
    text = "cat dog mat tree star moon"
    out = run([{"text": text}], mlm, tok, copies=1, replace_prob=1.0, candidates=1, max_seq_len=5)
    assert out[1]["text"] == "sun sun sun tree star moon"  # [CLS] + 3 words + [SEP]
    # A pair is cut longest field first: 7 = [CLS] + 2 + [SEP] + 2 + [SEP].
    out = run(
        [{"text": text, "text_pair": "cat dog"}], mlm, tok, copies=1, replace_prob=1.0, candidates=1, max_seq_len=7
    )
    assert (out[1]["text"], out[1]["text_pair"]) == ("sun sun mat tree star moon", "sun sun")


def test_copies_zero_returns_the_examples(tok) -> None:
    examples = [{"text": "the cat", "label": 1}]
    assert run(examples, tiny_mlm(tok.vocab_size), tok, copies=0) == examples


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"copies": -1}, "augment.copies"),
        ({"copies": 2, "replace_prob": 1.5}, "augment.replace_prob"),
        ({"copies": 2, "replace_prob": -0.1}, "augment.replace_prob"),
        ({"copies": 2, "replace_prob": math.nan}, "augment.replace_prob"),
        ({"copies": 2, "candidates": 0}, "augment.candidates"),
        ({"copies": 2, "batch_size": 0}, "augment.batch_size"),
        ({"copies": 2, "max_seq_len": 2}, "augment.max_seq_len"),
        ({"copies": 2, "seed": -1}, "augment.seed"),
    ],
)
def test_bad_arguments_name_their_key(tok, kwargs, key) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)) as info:
        run([{"text": "the cat"}], tiny_mlm(tok.vocab_size), tok, **kwargs)
    assert "\n" not in str(info.value)


def test_a_masked_lm_of_another_vocabulary_is_refused(tok) -> None:
    with pytest.raises(ConfigError, match=f"{tok.vocab_size + 1}.*{tok.vocab_size}"):
        run([{"text": "the cat"}], tiny_mlm(tok.vocab_size + 1), tok, copies=1)


def test_examples_without_text_are_refused(tok) -> None:
    mlm = tiny_mlm(tok.vocab_size)
    with pytest.raises(DataError, match="example 1 field 'text_pair'"):
        run([{"text": "the cat"}, {"text": "dog", "text_pair": ["x"]}], mlm, tok, copies=1)
    with pytest.raises(DataError, match="no example has a text field"):
        run([{"tokens": ["the", "cat"]}], mlm, tok, copies=1)
