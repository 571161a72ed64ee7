"""The WordPiece tokenizer: agreement with Hugging Face, training, saving and options."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from bertzoo.data.text.corpus import split_sentences
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.errors import DataError

ODD_STRINGS = [
    "中文字符和English混合",
    "日本語のテキスト、한국어 텍스트",
    "Crème brûlée à la façon de Zoë — naïve café",
    "ÀÉÎÕÜ ñ ß ø å æ œ",
    "Ελληνικά και русский текст",
    "emoji 😀👍🏽 and symbols ©®™ ½ ∑ ≠",
    "tabs\tand\nnewlines\r\nand  multiple   spaces",
    "control\x00chars\x07here\u200bzero-width",
    "URLs like https://example.com/a?b=c&d=e#frag and e-mail a.b@c.org",
    "superlongwordthatisnotinthevocabularyatallandgoesonandonandonandonforeverandevermore",
    "a" * 150,
    "[MASK] [SEP] [CLS] literal special tokens [UNK]",
    "numbers 3.14159, 1,000,000 and 2nd/3rd",
    "'quotes' \"double\" «guillemets» „low“ ‹single›",
    "",
    "   ",
]


def _hf_references(vocab_path):
    """Hugging Face tokenizers built from the same vocab.txt: the pure-Python legacy one when this
    transformers version has it, and the fast one."""
    transformers = pytest.importorskip("transformers")
    refs = []
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

        refs.append(BertTokenizerLegacy(vocab_file=str(vocab_path)))
    except ImportError:
        if hasattr(transformers, "BertTokenizer") and hasattr(transformers, "BertTokenizerFast"):
            if transformers.BertTokenizer is not transformers.BertTokenizerFast:
                refs.append(transformers.BertTokenizer(vocab_file=str(vocab_path)))
    fast_cls = transformers.BertTokenizerFast
    # transformers 5 takes the vocabulary as `vocab` and silently ignores `vocab_file`.
    if "vocab" in inspect.signature(fast_cls.__init__).parameters:
        refs.append(fast_cls(vocab=str(vocab_path)))
    else:
        refs.append(fast_cls(vocab_file=str(vocab_path)))
    for ref in refs:
        assert len(ref) == 30522, f"{type(ref).__name__} did not load the vocabulary"
    return refs


def test_matches_huggingface_on_real_and_odd_text(minilm_vocab, wiki_docs):
    tok = Tokenizer.from_vocab(minilm_vocab)
    sentences = [s for doc in wiki_docs[::40] for s in split_sentences(doc)][:300]
    assert len(sentences) == 300
    texts = sentences + ODD_STRINGS
    ours = tok.encode_batch(texts)
    assert sum(map(len, ours)) > 5000
    for ref in _hf_references(minilm_vocab):
        theirs = [ref(t, add_special_tokens=False)["input_ids"] for t in texts]
        mismatches = [(t, a, b) for t, a, b in zip(texts, ours, theirs, strict=True) if a != b]
        assert not mismatches, f"{type(ref).__name__}: {mismatches[:3]}"
        for a, b in zip(sentences[:20], sentences[1:21], strict=True):
            enc = ref(a, b, return_token_type_ids=True)
            assert tok.encode(a, b) == (enc["input_ids"], enc["token_type_ids"])


def test_from_vocab_special_ids(minilm_vocab):
    tok = Tokenizer.from_vocab(minilm_vocab)
    lines = minilm_vocab.read_text(encoding="utf-8").split("\n")
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == tuple(
        lines.index(t) for t in SPECIAL_TOKENS
    )
    assert tok.special_ids.tolist() == sorted(lines.index(t) for t in SPECIAL_TOKENS)
    assert tok.vocab_size == 30522
    ids, types = tok.encode("hello", "world")
    assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and ids.count(tok.sep_id) == 2
    assert types == [0, 0, 0, 1, 1]


@pytest.fixture(scope="module")
def mixed_tokenizer(synthetic_docs):
    chinese = ["我们爱北京天安门。北京是中国的首都。", "中文文本需要按字切分。今天天气很好。"] * 20
    accented = ["Le café est très bon à Paris. Élise préfère le thé."] * 20
    return train_wordpiece(synthetic_docs[:400] + chinese + accented, 600, min_frequency=2)


def test_trained_specials_continuations_and_cjk(mixed_tokenizer):
    tok = mixed_tokenizer
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.special_ids.dtype == np.int64 and tok.special_ids.tolist() == [0, 1, 2, 3, 4]
    assert 550 <= tok.vocab_size <= 600
    vocab = tok.vocab_list()
    assert any(t.startswith("##") for t in vocab)
    pieces = tok.tokenize("abracadabrastuvwyabracadabra")
    assert len(pieces) > 1 and all(p.startswith("##") for p in pieces[1:])
    # CJK characters are split into single characters even without spaces.
    assert tok.tokenize("北京天安门") == ["北", "京", "天", "安", "门"]
    assert tok.decode(tok.encode_batch(["Le café"])[0]) == "le cafe"


def test_save_load_round_trip_and_transformers(tmp_path, mixed_tokenizer, synthetic_docs):
    tok = mixed_tokenizer
    tok.save(tmp_path / "tok")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / "tok" / name).is_file()
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer" and config["do_lower_case"] is True
    texts = synthetic_docs[400:450] + ["北京是首都", "Élise préfère le thé"]
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.encode_batch(texts) == tok.encode_batch(texts)
    assert loaded.vocab_sha256 == tok.vocab_sha256
    # vocab.txt alone gives the same ids.
    (tmp_path / "tok" / "tokenizer.json").unlink()
    from_txt = Tokenizer.load(tmp_path / "tok")
    assert from_txt.encode_batch(texts) == tok.encode_batch(texts)
    assert from_txt.lowercase is True

    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path / "hf")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert [hf(t, add_special_tokens=False)["input_ids"] for t in texts] == tok.encode_batch(texts)
    assert hf(texts[0], texts[1])["token_type_ids"] == tok.encode(texts[0], texts[1]).type_ids


def test_lowercase_and_strip_accents_options():
    docs = ["Paris Paris Paris est Été été ÉTÉ café Café"] * 30
    cased = train_wordpiece(docs, 200, lowercase=False)
    assert "Paris" in cased.tokenize("Paris") and "Été" in cased.tokenize("Été")
    uncased = train_wordpiece(docs, 200, lowercase=True)  # strip_accents=None: strips with lowercase
    assert uncased.tokenize("Été") == ["ete"]
    keep_accents = train_wordpiece(docs, 200, lowercase=True, strip_accents=False)
    assert keep_accents.tokenize("Été") == ["été"]
    strip_cased = train_wordpiece(docs, 200, lowercase=False, strip_accents=True)
    assert strip_cased.tokenize("Été") == ["Ete"]


def test_load_keeps_casing_from_config(tmp_path):
    tok = train_wordpiece(["Big Small Big Small"] * 10, 100, lowercase=False)
    tok.save(tmp_path)
    (tmp_path / "tokenizer.json").unlink()  # force the vocab.txt path, where the config decides
    loaded = Tokenizer.load(tmp_path)
    assert loaded.lowercase is False
    assert loaded.tokenize("Big") == ["Big"]


def test_errors(tmp_path):
    with pytest.raises(DataError, match="tokenizer not found"):
        Tokenizer.load(tmp_path / "missing")
    with pytest.raises(DataError, match="neither tokenizer.json nor vocab.txt"):
        Tokenizer.load(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"lacks the special token\(s\) \[CLS\], \[SEP\], \[MASK\]"):
        Tokenizer.from_vocab(tmp_path / "vocab.txt")
    with pytest.raises(DataError, match="empty corpus"):
        train_wordpiece([], 100)
