"""Segmenters: raw Chinese text -> tagged words, where no gold annotation exists.

Chinese text is tokenized into characters, so whole-word, phrase and entity masking need its words
from elsewhere. In order of preference (`make_segmenter`):

* a user lexicon (`data.lexicon`): one entry per line, `entry [kind]`, where kind is `word` (the
  default), `phrase`, `entity`, an entity tag (nr/ns/nt, PER/LOC/ORG) or any other tag; text is
  segmented by forward maximum matching;
* jieba (`pip install jieba`), when installed;
* otherwise every Chinese character is a word of its own (no phrases, no entities).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Protocol

import numpy as np

from bertzoo.data.text.lines import iter_lines
from bertzoo.data.tokens.annotation import ENTITY_TAGS, Annotation, annotation_from_words
from bertzoo.errors import DataError

__all__ = [
    "CharSegmenter",
    "JiebaSegmenter",
    "LexiconSegmenter",
    "Segmenter",
    "make_segmenter",
    "read_lexicon",
    "segment_units",
]

# Lexicon kinds given as NER labels become the People's Daily tags that `chunk_tagged` knows.
_NER_TO_TAG = {"PER": "nr", "LOC": "ns", "ORG": "nt"}


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


def segment_units(segmenter: Segmenter, text: str) -> Annotation:
    """Annotation of a run of Chinese text by a segmenter."""
    if isinstance(segmenter, LexiconSegmenter):
        words, tags, extra = segmenter.units(text)
    else:
        pairs = segmenter(text)
        words, tags, extra = [w for w, _ in pairs], [t for _, t in pairs], []
    starts = np.cumsum([0] + [len(w) for w in words[:-1]]).tolist() if words else []
    if "".join(words) != text:  # a segmenter that dropped or changed characters: trust nothing
        return Annotation(words=[(i, i + 1) for i in range(len(text))])
    return annotation_from_words(starts, words, tags, extra)
