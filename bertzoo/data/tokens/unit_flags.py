"""One byte of flags per token: where words, phrases and entities start.

Masking needs to know where units start; token ids alone tell that only for English WordPiece
(`##` marks a continuation). The flags carry the rest: WORD_START (first token of a word),
PHRASE_START / ENTITY_START (first token of a unit at that level: a phrase / an entity where there
is one, otherwise a word), IN_PHRASE, IN_ENTITY. A masking strategy reads the start flag of its
level (`LEVEL_FLAGS`). `unit_sidecar` stores them beside the shards.
"""

from __future__ import annotations

import functools

import numpy as np

from bertzoo.data.text.lines import is_cjk
from bertzoo.data.tokens.annotation import Annotation
from bertzoo.data.tokens.tokenizer import Tokenizer

__all__ = [
    "ALL_STARTS",
    "ENTITY_START",
    "IN_ENTITY",
    "IN_PHRASE",
    "LEVEL_FLAGS",
    "PHRASE_START",
    "WORD_START",
    "char_unit_arrays",
    "flags_from_units",
    "token_flags",
    "vocab_tables",
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


def char_unit_arrays(n: int, annotation: Annotation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    (`char_unit_arrays`); tokens outside every annotated word fall back to WordPiece words
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
    cjk = np.fromiter((len(t) == 1 and is_cjk(t) for t in vocab), dtype=bool, count=len(vocab))
    return cont, cjk


def vocab_tables(tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """(continuation, single-CJK-character) bool tables over the tokenizer's vocabulary."""
    return _vocab_tables(tuple(tokenizer.vocab_list()))
