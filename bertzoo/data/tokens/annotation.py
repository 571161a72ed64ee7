"""What a text's word, phrase and entity units are, and the part-of-speech rules that find phrases
and entities among tagged words.

An `Annotation` is the common currency of the boundary sources: the gold `word/TAG` corpus
(`tagged_corpus`), a lexicon, jieba or single characters (`segmenters`). `unit_flags` turns it into
one byte of flags per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["ENTITY_TAGS", "Annotation", "annotation_from_words", "chunk_tagged"]

# Part-of-speech tags (People's Daily / ICTCLAS, as jieba uses them too) that make entities and phrases.
ENTITY_TAGS = frozenset({"nr", "ns", "nt", "nrt", "nrfg", "PER", "LOC", "ORG", "ENTITY"})
_PERSON_TAGS = frozenset({"nr", "nrt", "nrfg", "PER"})
_NOMINAL_TAGS = frozenset({"n", "vn", "nz", "nx", "j", "an", "Ng", "ng", "nr", "ns", "nt", "nrt", "nrfg"})
_NOMINAL_TAGS |= {"PER", "LOC", "ORG", "ENTITY"}
_MODIFIER_TAGS = frozenset({"a", "b"})


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


def annotation_from_words(
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
