"""Computing the unit flags of a shard directory (`annotate_shards`), from gold annotations or a segmenter.

Gold annotations (`tagged_corpus`) are aligned with the shards by re-running the exact preparation
pipeline (`clean_text`, `split_sentences`, the tokenizer with character offsets) and checking that
every sentence yields as many tokens as the shards hold. Segmenter-based flags are computed from the
shard tokens themselves (runs of single-character Chinese tokens are segmented), so they need no raw
text at all. The result goes to the sidecar (`unit_sidecar`).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertzoo.data.text.corpus import read_documents, split_sentences
from bertzoo.data.text.lines import BUILTIN_PREFIX
from bertzoo.data.text.tagged import PEOPLES_DAILY, is_tagged_file, tagged_documents
from bertzoo.data.tokens.segmenters import Segmenter, make_segmenter, segment_units
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.unit_flags import (
    ALL_STARTS,
    ENTITY_START,
    IN_ENTITY,
    IN_PHRASE,
    PHRASE_START,
    WORD_START,
    char_unit_arrays,
    flags_from_units,
    token_flags,
    vocab_tables,
    wordpiece_flags,
)
from bertzoo.data.tokens.unit_sidecar import (
    SIDECAR_FORMAT,
    SIDECAR_VERSION,
    UnitFlags,
    corpus_vocab_sha,
    write_unit_flags,
)
from bertzoo.errors import DataError

__all__ = ["AnnotationMismatch", "annotate_shards", "prepare_segmented_shards", "segment_token_flags"]


class AnnotationMismatch(DataError):
    """Gold annotations that do not belong to the shards (they were prepared from other text)."""


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
        ann = segment_units(segmenter, text)
        new[a:b] = False
        for s, _ in ann.words:
            new[a + s] = True
        for arr, ranges in ((phrase, ann.phrases), (entity, ann.entities)):
            for s, e in ranges:
                arr[a + s : a + e] = a + s
    return flags_from_units(new, phrase, entity)


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
        units = char_unit_arrays(len(text), annotation) if annotation is not None else None
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
        "vocab_sha256": corpus_vocab_sha(corpus),
        "flags": {"WORD_START": WORD_START, "PHRASE_START": PHRASE_START, "ENTITY_START": ENTITY_START},
        "counts": _flag_counts(arrays),
        "seconds": round(time.perf_counter() - start, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if write:
        try:
            write_unit_flags(corpus, arrays, meta)
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
    tagged = source == PEOPLES_DAILY or (Path(source).is_file() and is_tagged_file(source))
    if tagged:
        docs: Iterable[str] = (text for text, _ in tagged_documents(source))
    else:
        docs = read_documents([source])
    prepare_shards(docs, tokenizer, out, source=source, **prepare_kwargs)
    return annotate_shards(out, source if tagged else (annotations or "auto"))
