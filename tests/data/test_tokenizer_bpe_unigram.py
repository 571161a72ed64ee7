"""Byte-level BPE (RoBERTa) and Unigram (ALBERT) tokenizers: special ids by role, behaviour,
save/load, agreement with transformers' RobertaTokenizer / AlbertTokenizer, and use in shards."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.tokenizer import BPE_SPECIAL_TOKENS, UNIGRAM_SPECIAL_TOKENS, SpecialIds, Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_bpe, train_unigram
from bertzoo.errors import DataError

ODD = [
    "Crème brûlée à la façon de Zoë — naïve café",
    "emoji 😀👍🏽 and symbols ©®™ ½",
    "tabs\tand\nnewlines\r\nand  multiple   spaces",
    "``quoted'' and 'single' text",
    "北京是首都",
    "a <mask> in text and [MASK] too",
    "",
    "   ",
]


@pytest.fixture(scope="module")
def bpe(synthetic_docs) -> Tokenizer:
    return train_bpe(synthetic_docs[:400], 800)


@pytest.fixture(scope="module")
def unigram(synthetic_docs) -> Tokenizer:
    return train_unigram(synthetic_docs[:400] + ["Été à Zürich, naïve café."] * 5, 800)


def test_bpe_special_ids_by_role(bpe):
    # RoBERTa's ids: <s> 0, <pad> 1, </s> 2, <unk> 3, then <mask>.
    assert [bpe.token_to_id(t) for t in BPE_SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert bpe.special == SpecialIds(pad=1, unk=3, cls=0, sep=2, mask=4)
    assert bpe.kind == "bpe" and bpe.vocab_size == 800
    assert bpe.special_ids.tolist() == [0, 1, 2, 3, 4]


def test_bpe_is_byte_level_and_lossless(bpe, synthetic_docs):
    vocab = bpe.vocab_list()
    assert sum(t.startswith("Ġ") for t in vocab) > 100  # word-initial pieces carry the space marker
    for text in ODD + synthetic_docs[500:520]:
        ids = bpe.encode_batch([text])[0]
        assert bpe.unk_id not in ids  # every byte is a symbol: nothing is unknown
        if "<mask>" in text:
            assert bpe.mask_id in ids  # the literal special token maps to its id
            continue
        # add_prefix_space puts one space before the first word; decoding gives the text back.
        assert bpe.decode(ids).removeprefix(" ") == text.removeprefix(" ")
    # The first word of a text is tokenized like the same word inside a sentence.
    word = synthetic_docs[0].split()[3]
    assert bpe.tokenize(f"{word} {word}") == bpe.tokenize(word) * 2


def test_bpe_pair_template(bpe):
    e = bpe.encode("first part", "second part")
    a, b = bpe.encode_batch(["first part", "second part"])
    assert e.ids == [0, *a, 2, 2, *b, 2]  # <s> A </s></s> B </s>
    assert set(e.type_ids) == {0}  # RoBERTa has one segment embedding


def test_unigram_special_ids_and_normalisation(unigram):
    # ALBERT's ids: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4.
    assert [unigram.token_to_id(t) for t in UNIGRAM_SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert unigram.special == SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    assert unigram.kind == "unigram" and unigram.lowercase and unigram.strip_accents
    pieces = unigram.tokenize("Été à Zürich")
    assert pieces[0].startswith("▁") and "".join(pieces).replace("▁", " ").strip() == "ete a zurich"
    # Every word starts a new piece with the ▁ marker, whatever the spacing.
    assert unigram.tokenize("ete   a\tzurich") == pieces
    assert unigram.decode(unigram.encode_batch(["Été à Zürich"])[0]) == "ete a zurich"
    # A character never seen in training is <unk> (no byte fallback in ALBERT's model).
    assert unigram.unk_id in unigram.encode_batch(["Ω"])[0]
    e = unigram.encode("one", "two")
    assert e.ids[0] == 2 and e.ids.count(3) == 2 and e.ids[-1] == 3
    assert e.type_ids == [0] * (e.ids.index(3) + 1) + [1] * (len(e.ids) - e.ids.index(3) - 1)


def test_unigram_keep_accents_option(synthetic_docs):
    tok = train_unigram(synthetic_docs[:100] + ["Été café"] * 20, 300, strip_accents=False)
    assert tok.strip_accents is False
    assert "é" in "".join(tok.tokenize("Été café"))


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_save_load_and_transformers_auto_tokenizer(kind, bpe, unigram, synthetic_docs, tmp_path):
    tok = bpe if kind == "bpe" else unigram
    tok.save(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == {"bpe": "RobertaTokenizer", "unigram": "AlbertTokenizer"}[kind]
    assert config["cls_token"] == tok.special_tokens["cls"] and config["mask_token"] == tok.special_tokens["mask"]
    assert not (tmp_path / "vocab.txt").exists()  # vocab.txt would be read as a WordPiece vocabulary
    texts = synthetic_docs[600:640] + ODD
    loaded = Tokenizer.load(tmp_path)
    assert loaded.kind == kind and loaded.special == tok.special
    assert (loaded.lowercase, loaded.strip_accents) == (tok.lowercase, tok.strip_accents)
    assert loaded.encode_batch(texts) == tok.encode_batch(texts)
    assert loaded.vocab_sha256 == tok.vocab_sha256

    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(hf).__name__ == config["tokenizer_class"]
    assert [hf(t, add_special_tokens=False)["input_ids"] for t in texts] == tok.encode_batch(texts)
    pair = hf(texts[0], texts[1], return_token_type_ids=True)
    ours = tok.encode(texts[0], texts[1])
    assert pair["input_ids"] == ours.ids and pair["token_type_ids"] == ours.type_ids
    assert (hf.cls_token_id, hf.sep_token_id, hf.pad_token_id, hf.mask_token_id) == (
        tok.cls_id,
        tok.sep_id,
        tok.pad_id,
        tok.mask_id,
    )


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_shards_carry_the_tokenizer(kind, bpe, unigram, synthetic_docs, tmp_path):
    tok = bpe if kind == "bpe" else unigram
    prepare_shards(synthetic_docs[:60], tok, tmp_path / "shards", progress=False)
    corpus = ShardedCorpus(tmp_path / "shards")
    back = corpus.tokenizer()
    corpus.check_tokenizer(back)  # kind, vocabulary and normalisation survive the round trip
    assert back.kind == kind and back.special == tok.special
    first = corpus.sentence(0)
    assert first.dtype == np.uint16 and len(first) > 0 and int(first.max()) < tok.vocab_size


def test_errors(tmp_path, bpe):
    with pytest.raises(DataError, match="empty corpus"):
        train_bpe([], 1000)
    with pytest.raises(DataError, match="must exceed 261"):
        train_bpe(["text"], 200)
    with pytest.raises(DataError, match="empty corpus"):
        train_unigram([], 100)
    # A tokenizer_config naming a special token the vocabulary lacks is refused with the role names.
    bpe.save(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["mask_token"] = "<not-there>"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="lacks the special token"):
        Tokenizer.load(tmp_path)
    # Other tokenizers models are refused clearly.
    import tokenizers
    from tokenizers import models

    tokenizers.Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(tmp_path / "t.json"))
    with pytest.raises(DataError, match="WordLevel model; bertzoo needs a WordPiece, BPE or Unigram"):
        Tokenizer.load(tmp_path / "t.json")
