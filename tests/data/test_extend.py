"""Vocabulary extension, the tokenizer side (bertzoo.data.tokens.extend): what is mined and in which order, and that
every word the old tokenizer read without [UNK] splits exactly as before while a new word becomes one token."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertzoo.data.tokens import extend as ext
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_bpe, train_unigram
from bertzoo.errors import DataError

from helpers.extend import VOCAB, tokenizer

# Known counts: 中 x4, 文 x2 (CJK: their own words, [UNK]); "aд" x3 lacks ##д, "дa" x1 lacks д; hemoglobin x3 is
# hem ##og ##lo ##bin (saves 3 x 3 = 9), cats x5 is cat ##s (saves 5), hemoglobinuria x1 is 5 pieces (saves 4).
CORPUS = [
    "中 中 中 中 文 文 Hemoglobin hemoglobin hemoglobin cats cats cats",
    "cats cats hemoglobinuria aд aд aд дa the",
]
# Words the old tokenizer reads without [UNK], some starting with, containing or glued to a new word.
EXISTING = [
    "hemoglobinuria",
    "hemoglobins",
    "hemo",
    "hem",
    "the",
    "blood",
    "catsup",
    "cat",
    "xhemoglobin",
    "hemoglobin2",
    "hemoglobin_x",
    "cats_",
    "level",
]


@pytest.fixture()
def tok(tmp_path) -> Tokenizer:
    return tokenizer(tmp_path / "tok")


def test_mining_ranks_unknown_characters_by_count_then_words_by_tokens_saved(tok) -> None:
    mined = ext.mine(tok, CORPUS, min_count=2)
    assert [(c.token, c.count) for c in mined.chars] == [("中", 4), ("##д", 3), ("文", 2)]
    assert {c.kind for c in mined.chars} == {"char"}
    assert mined.form_counts["д"] == 1  # seen once: no candidate
    assert [(c.token, c.count, c.saved) for c in mined.words] == [("hemoglobin", 3, 9), ("cats", 5, 5)]
    ids = {t: i for i, t in enumerate(VOCAB)}
    assert mined.words[0].pieces == (ids["hem"], ids["##og"], ids["##lo"], ids["##bin"])
    assert (mined.documents, mined.occurrences, mined.unk_occurrences) == (2, 20, 10)
    assert "aд" not in mined.plain_words and "the" in mined.plain_words
    # д and hemoglobinuria (seen once) become candidates from --min-count 1 on, after those seen more.
    everything = ext.mine(tok, CORPUS, min_count=1)
    assert [c.token for c in everything.chars] == ["中", "##д", "文", "д"]
    assert [c.token for c in everything.words] == ["hemoglobin", "cats", "hemoglobinuria"]
    # The top N: characters first; then words; the result is in id order (characters, then words).
    assert [c.token for c in ext.choose(mined, [], 2)] == ["中", "##д"]
    assert [c.token for c in ext.choose(mined, [], 4)] == ["中", "##д", "文", "hemoglobin"]
    assert [c.token for c in ext.choose(mined, [], 9, exclude={"hemoglobin"})] == ["中", "##д", "文", "cats"]


def test_existing_words_split_exactly_as_before_and_new_words_are_one_token(tok, tmp_path) -> None:
    mined = ext.mine(tok, CORPUS, min_count=1)
    chosen = ext.choose(mined, [], 6)
    new = ext.extend_tokenizer(tok, chosen)
    size = len(VOCAB)
    assert new.vocab_size == size + 6
    assert [new.token_to_id(t) for t in ["中", "##д", "文", "д", "hemoglobin", "cats"]] == list(range(size, size + 6))
    assert new.vocab_list()[:size] == VOCAB  # every old id keeps its token
    for word in EXISTING:
        assert new.tokenize(word) == tok.tokenize(word), word
    assert new.tokenize("hemoglobinuria") == ["hem", "##og", "##lo", "##bin", "##uria"]
    assert new.tokenize("The Hemoglobin, cats.") == ["the", "hemoglobin", ",", "cats", "."]
    assert tok.tokenize("中文 aд дa") == ["[UNK]", "[UNK]", "[UNK]", "[UNK]"]
    assert new.tokenize("中文 aд дa") == ["中", "文", "a", "##д", "д", "##a"]
    # Plain insertion into the WordPiece vocabulary would have changed hemoglobinuria (greedy longest match).
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in [*VOCAB, "hemoglobin"]), encoding="utf-8")
    plain = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    assert plain.tokenize("hemoglobinuria") == ["hemoglobin", "##uria"]
    # The one case the rules differ: a new word glued to a symbol the pre-tokenizer keeps in the word.
    assert ext.changed_words(tok, new, ["hemoglobin©", *EXISTING]) == {"hemoglobin©": ["hemoglobin", "©"]}


def test_the_extended_tokenizer_saves_and_loads_with_the_same_ids(tok, tmp_path) -> None:
    new = ext.extend_tokenizer(tok, ext.choose(ext.mine(tok, CORPUS, min_count=1), [], 6))
    new.save(tmp_path / "new")
    back = Tokenizer.load(tmp_path / "new")
    texts = ["The hemoglobin level, 中文 aд дa", "hemoglobinuria cats catsup"]
    assert back.encode_batch(texts) == new.encode_batch(texts) and back.vocab_sha256 == new.vocab_sha256
    assert back.prefix_sha256(len(VOCAB)) == tok.vocab_sha256  # shards of the old tokenizer still check


def test_minilm_keeps_every_english_word_and_gains_chinese_characters(minilm_vocab) -> None:
    old = Tokenizer.load(minilm_vocab.parent)
    assert old.tokenize("hemoglobin") == ["hem", "##og", "##lo", "##bin"]
    docs = ["血红蛋白 hemoglobin 血 红 hemoglobin", "血液 hemoglobin"]
    mined = ext.mine(old, docs, min_count=2)
    assert [c.token for c in mined.chars[:2]] == ["血", "红"]  # MiniLM's 244 CJK characters lack both
    new = ext.extend_tokenizer(old, ext.choose(mined, [], 10))
    assert new.tokenize("血红 Hemoglobin") == ["血", "红", "hemoglobin"]
    words = ["hemoglobinuria", "hemoglobins", "the", "unbelievable", "tokenization", "naïve", "中文", "hemo"]
    for word in words:
        assert new.tokenize(word) == old.tokenize(word), word
    assert new.tokenize("hemoglobinuria") == ["hem", "##og", "##lo", "##bin", "##uria"]


def test_listed_tokens_are_checked_line_by_line(tok, tmp_path) -> None:
    mined = ext.mine(tok, CORPUS)
    path = tmp_path / "tokens.txt"
    path.write_text("Hemoglobinuria\n\n中\n##д\nhemoglobinuria\n", encoding="utf-8")
    listed = ext.listed_candidates(tok, ext.read_token_file(path), mined)
    assert [(c.token, c.kind, c.source) for c in listed] == [
        ("hemoglobinuria", "word", "listed"),
        ("中", "char", "listed"),
        ("##д", "char", "listed"),
    ]
    assert listed[0].count == 1 and listed[1].count == 4
    chosen = ext.choose(mined, listed, 1)  # the listed ones, plus the best mined one not listed (文)
    assert [c.token for c in chosen] == ["中", "##д", "文", "hemoglobinuria"]
    cases = [
        ("level", r"is already in the vocabulary \(id"),
        ("LEVEL", "would collide"),
        ("##og", "would collide"),
        ("##abc", "only a single character can be added as a ## piece"),
        ("##中", "several words to the tokenizer"),
        ("血红", "several words to the tokenizer"),
        ("a b", "without spaces"),
    ]
    for line, message in cases:
        with pytest.raises(DataError, match=message) as info:
            ext.listed_candidates(tok, [(7, line)], mined)
        assert "line 7" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(DataError, match="token list not found"):
        ext.read_token_file(tmp_path / "missing.txt")


def test_a_tokenizer_extended_before_takes_cjk_characters_as_added_tokens(tok) -> None:
    once = ext.extend_tokenizer(tok, [ext.Candidate("hemoglobin", ext.WORD, added=True)])
    mined = ext.mine(once, CORPUS)
    assert mined.skipped_chars == 1  # ##д cannot take an id after an added token
    assert [(c.token, c.added) for c in mined.chars] == [("中", True), ("文", True)]
    assert "hemoglobin" not in [c.token for c in mined.words]  # already one token
    twice = ext.extend_tokenizer(once, ext.choose(mined, [], 3))
    assert twice.tokenize("中文 hemoglobin cats") == ["中", "文", "hemoglobin", "cats"]
    assert twice.tokenize("hemoglobinuria 中x") == tok.tokenize("hemoglobinuria") + ["中", "x"]
    with pytest.raises(DataError, match="extended before"):
        ext.listed_candidates(once, [(1, "##д")], mined)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_bpe_and_unigram_add_whole_words(kind) -> None:
    r = random.Random(0)
    words = ["".join(r.choice("abcdefghlmnorstu") for _ in range(r.randint(2, 5))) for _ in range(80)]
    docs = [" ".join(r.choice(words) for _ in range(12)) + "." for _ in range(200)]
    docs += ["the hemoglobin level."] * 3 + ["hemoglobinuria is low"]
    old = train_bpe(docs, 300) if kind == "bpe" else train_unigram(docs, 60)
    mined = ext.mine(old, docs, min_count=2)
    hemoglobin = next(c for c in mined.words if c.token == "hemoglobin")
    assert hemoglobin.count == 3 and len(hemoglobin.pieces) > 5
    if kind == "bpe":
        assert mined.chars == [] and mined.unk_occurrences == 0  # byte-level: nothing is [UNK]
        with pytest.raises(DataError, match="no \\[UNK\\] characters"):
            ext.extend_tokenizer(old, [ext.Candidate("ÿ", ext.CHAR)])
    new = ext.extend_tokenizer(old, [hemoglobin])
    added = new.token_to_id("hemoglobin")
    assert added == old.vocab_size and added in new.encode_batch(["the hemoglobin of"])[0]
    for text in ["hemoglobinuria is low", "the blood level of the cat", "hemoglobins"]:  # no new word in them
        assert new.encode_batch([text]) == old.encode_batch([text]), text


def test_a_unigram_piece_for_an_unknown_character_changes_no_other_word() -> None:
    docs = ["the cat and the dog sat on the mat"] * 30
    old = train_unigram(docs, 40)
    assert old.unk_id in old.encode_batch(["ж the cat"])[0]
    mined = ext.mine(old, ["ж ж the cat", "жж"])
    assert [(c.token, c.count) for c in mined.chars] == [("ж", 4)]
    new = ext.extend_tokenizer(old, mined.chars)
    assert new.token_to_id("ж") == old.vocab_size and old.unk_id not in new.encode_batch(["ж the cat"])[0]
    for text in docs[:1] + ["the mat sat", "dogs and cats"]:
        assert new.encode_batch([text]) == old.encode_batch([text]), text


def test_token_chunks_number_the_documents(tok) -> None:
    chunks = list(ext.token_chunks(tok, ["the cat", "hem", "the"], batch_docs=2))
    ids = np.concatenate([c[0] for c in chunks])
    docs = np.concatenate([c[1] for c in chunks])
    vocab = {t: i for i, t in enumerate(VOCAB)}
    assert ids.tolist() == [vocab["the"], vocab["cat"], vocab["hem"], vocab["the"]]
    assert docs.tolist() == [0, 0, 1, 2] and len(chunks) == 2
