"""The epoch plans of pretraining examples: which token ranges of a `ShardedCorpus` make each example,
chosen the way Google's `create_pretraining_data.py` does.

Each epoch has a *plan*: for every example, two global token ranges (segment A and B) plus the
NSP label, held as numpy arrays (a few dozen bytes per example, no token lists). The plan depends
only on (seed, epoch), so every worker and process builds the same one, and the datasets
(`bertzoo.data.pretraining.examples`) just slice the memory-mapped shards.

One builder per kind of example: `build_plan` (BERT's segment pairs with NSP; without NSP, blocks of
one document's sentences: DOC-SENTENCES), `build_sop_plan` (ALBERT's sentence order) and
`build_full_sentences_plan` (RoBERTa's FULL-SENTENCES, crossing document boundaries).

Differences from Google's script (all deliberate, see the docstrings below):

* The short target length (probability `short_seq_prob`) is drawn per example instead of once per
  document, so ~`short_seq_prob` of the *examples* are short, as BERT's paper describes.
* Chunks of a single sentence (one-sentence documents, long sentences, the last sentence of a
  document) can only form NotNext pairs. Google's script lets them push the NotNext share above
  50%; here the probability used for the other chunks is lowered to compensate (with a small
  feedback on the running count), so `nsp_random_prob` is the actual NotNext share whenever the
  forced chunks alone do not exceed it.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import bertzoo.data.rng as rng_mod
from bertzoo.data.tokens.shards import ShardedCorpus

__all__ = [
    "IN_ORDER",
    "IS_NEXT",
    "NOT_NEXT",
    "SWAPPED",
    "EpochPlan",
    "build_full_sentences_plan",
    "build_plan",
    "build_sop_plan",
    "truncation_counts",
]

IS_NEXT, NOT_NEXT = 0, 1
IN_ORDER, SWAPPED = 0, 1  # sentence-order labels, as Hugging Face's AlbertForPreTraining reads them


def truncation_counts(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """Tokens removed from A and B by BERT's `truncate_seq_pair` (always trim the longer side,
    B on ties) to fit `max_tokens`, computed in O(1) instead of token by token."""
    excess = len_a + len_b - max_tokens
    if excess <= 0:
        return 0, 0
    diff = len_a - len_b
    if diff > 0:
        ra = min(excess, diff)
        rb = 0
    else:
        rb = min(excess, -diff)
        ra = 0
    rest = excess - ra - rb  # the sides are equal now; removal alternates starting with B
    return ra + rest // 2, rb + (rest + 1) // 2


class EpochPlan:
    """The examples of one epoch as arrays of global token ranges [start, end)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, label: np.ndarray, target: np.ndarray, max_tokens: int) -> None:
        self.a = a  # (n, 2) int64 token range of segment A
        self.b = b  # (n, 2) int64 token range of segment B (empty range when nsp=False)
        self.label = label  # (n,) int8: 0 IsNext, 1 NotNext, -1 no NSP
        self.target = target  # (n,) int32: the target length the example was built for
        self.max_tokens = max_tokens  # max_seq_len minus the special tokens

    @property
    def short(self) -> np.ndarray:
        """Examples built for a (randomly drawn) shorter target length."""
        return self.target < self.max_tokens

    def __len__(self) -> int:
        return len(self.label)

    def take(self, idx: np.ndarray) -> EpochPlan:
        return EpochPlan(self.a[idx], self.b[idx], self.label[idx], self.target[idx], self.max_tokens)

    def layout(self, i: int, n: int, values: Callable[[int, int], np.ndarray], fill: int, dtype: Any) -> np.ndarray:
        """Per-token values of example `i` (of `n` tokens) placed as its `input_ids` are laid out,
        [CLS] A [SEP] (B [SEP]): `values(start, end)` gives a segment's global token range, `fill`
        stands at the special tokens. How sidecars (unit flags, entity links) reach the examples."""
        out = np.full(n, fill, dtype=dtype)
        sa, ea = (int(x) for x in self.a[i])
        out[1 : 1 + ea - sa] = values(sa, ea)
        sb, eb = (int(x) for x in self.b[i])
        if eb > sb:
            b0 = 2 + ea - sa
            out[b0 : b0 + eb - sb] = values(sb, eb)
        return out


class _Uniform:
    """Fast scalar uniforms: Python's Mersenne Twister (its `random()` sequence for a given int
    seed is guaranteed stable across Python versions), seeded from the counter-based key."""

    def __init__(self, seed: int, epoch: int, stream: str) -> None:
        self._r = random.Random(int(rng_mod.hash64(seed, epoch, 0, stream)))
        self.random = self._r.random

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi] (both inclusive)."""
        return lo + int(self._r.random() * (hi - lo + 1))

    def binomial_half(self, n: int) -> int:
        """Binomial(n, 1/2): how many of n truncation steps cut the front."""
        if n <= 0:
            return 0
        return sum(self._r.random() < 0.5 for _ in range(n))

    def target_length(self, max_tokens: int, short_seq_prob: float) -> int:
        """An example's target length: `max_tokens`, or with probability `short_seq_prob` a *shorter*
        one, uniform in [2, max_tokens - 1] (max_tokens itself is excluded)."""
        if max_tokens > 2 and self._r.random() < short_seq_prob:
            return self.randint(2, max_tokens - 1)
        return max_tokens


class _PlanRows:
    """The examples of a plan as they are built: compact typed columns (no per-example objects)."""

    def __init__(self) -> None:
        self.a_s, self.a_e, self.b_s, self.b_e = array("q"), array("q"), array("q"), array("q")
        self.labels, self.targets = array("b"), array("i")

    def add(self, sa: int, ea: int, target: int, label: int = -1, sb: int = 0, eb: int = 0) -> None:
        """One example: segment A = [sa, ea), segment B = [sb, eb) (empty without a pair), its label."""
        self.a_s.append(sa)
        self.a_e.append(ea)
        self.b_s.append(sb)
        self.b_e.append(eb)
        self.labels.append(label)
        self.targets.append(target)

    def plan(self, max_tokens: int) -> EpochPlan:
        def ranges(starts: array, ends: array) -> np.ndarray:
            if not len(starts):
                return np.zeros((0, 2), np.int64)
            return np.stack([np.frombuffer(starts, np.int64), np.frombuffer(ends, np.int64)], axis=1)

        return EpochPlan(
            ranges(self.a_s, self.a_e),
            ranges(self.b_s, self.b_e),
            np.frombuffer(self.labels, np.int8).copy(),
            np.frombuffer(self.targets, np.int32).copy(),
            max_tokens,
        )


def _documents(corpus: ShardedCorpus, block_docs: int) -> Iterator[tuple[int, list[int], int, int]]:
    """(document, sentence offsets, first sentence, end sentence) for every document: `offsets[s0:s1 + 1]`
    are the global token offsets of its sentences. Documents go in blocks so that only a block's
    offsets are Python lists (fast scalar access) while the corpus stays in compact numpy arrays."""
    doc_off = corpus.doc_offsets
    sent_off = corpus.sentence_offsets
    for d_lo in range(0, corpus.num_docs, block_docs):
        d_hi = min(corpus.num_docs, d_lo + block_docs)
        s_base = int(doc_off[d_lo])
        doffs = doc_off[d_lo : d_hi + 1].tolist()
        soffs = sent_off[s_base : int(doc_off[d_hi]) + 1].tolist()
        for d in range(d_lo, d_hi):
            yield d, soffs, doffs[d - d_lo] - s_base, doffs[d - d_lo + 1] - s_base


def _pack_doc_sentences(rows: _PlanRows, soffs: list[int], s0: int, s1: int, new_target: Callable[[], int]) -> None:
    """Add one document's DOC-SENTENCES examples to `rows`; `soffs[s0:s1 + 1]` are its sentences' token offsets."""
    # Pack whole sentences up to the target; a sentence longer than the target is cut into
    # target-sized windows rather than thrown away.
    target = new_target()
    start = prev = soffs[s0]
    for s in range(s0 + 1, s1 + 1):
        end = soffs[s]
        if end - start <= target:
            prev = end
            continue
        if prev > start:
            rows.add(start, prev, target)
            start = prev
            target = new_target()
        while end - start > target:
            rows.add(start, start + target, target)
            start += target
            target = new_target()
        prev = end
    if prev > start:
        rows.add(start, prev, target)


def build_plan(
    corpus: ShardedCorpus,
    *,
    max_seq_len: int,
    seed: int,
    epoch: int,
    short_seq_prob: float = 0.1,
    nsp_random_prob: float = 0.5,
    nsp: bool = True,
    block_docs: int = 8192,
) -> EpochPlan:
    """Plan one epoch of examples over every document (see the module doc for the algorithm)."""
    u = _Uniform(seed, epoch, "nsp/plan")
    num_docs = corpus.num_docs
    doc_off = corpus.doc_offsets
    sent_off = corpus.sentence_offsets
    rows = _PlanRows()
    max_tokens = max_seq_len - 3 if nsp else max_seq_len - 2
    # Single-sentence chunks (NotNext only), all chunks and NotNext pairs so far, for the balance.
    forced = chunks = not_next = 0

    def new_target() -> int:
        return u.target_length(max_tokens, short_seq_prob)

    def truncate(sa: int, ea: int, sb: int, eb: int) -> tuple[int, int, int, int]:
        ra, rb = truncation_counts(ea - sa, eb - sb, max_tokens)
        if ra:
            front = u.binomial_half(ra)
            sa, ea = sa + front, ea - (ra - front)
        if rb:
            front = u.binomial_half(rb)
            sb, eb = sb + front, eb - (rb - front)
        return sa, ea, sb, eb

    for d, soffs, s0, s1 in _documents(corpus, block_docs):
        if s1 <= s0:
            continue
        if not nsp:
            _pack_doc_sentences(rows, soffs, s0, s1, new_target)
            continue

        target = new_target()
        i = s0
        chunk_start = s0
        while i < s1:
            if i == s1 - 1 or soffs[i + 1] - soffs[chunk_start] >= target:
                n = i - chunk_start + 1
                a_end = chunk_start + (1 if n < 2 else u.randint(1, n - 1))
                sa, ea = soffs[chunk_start], soffs[a_end]
                chunks += 1
                if n == 1:
                    forced += 1
                    random_next = True
                else:
                    # Lower the NotNext probability of free chunks by the share of forced ones
                    # (running estimate), plus a small correction towards the running deficit,
                    # so the overall NotNext share is nsp_random_prob (Google's script drifts).
                    f = forced / chunks
                    p = (nsp_random_prob - f) / (1.0 - f) if f < 1.0 else 0.0
                    p += (nsp_random_prob * (chunks - 1) - not_next) / 16.0
                    random_next = u.random() < min(1.0, max(0.0, p))
                if random_next:
                    target_b = target - (ea - sa)
                    other = u.randint(0, num_docs - 2)
                    if other >= d:  # uniform over the other documents, no retry loop
                        other += 1
                    o0, o1 = int(doc_off[other]), int(doc_off[other + 1])
                    rs = o0 + u.randint(0, o1 - o0 - 1)
                    sb = int(sent_off[rs])
                    # Whole sentences from rs until B reaches target_b (at least one sentence).
                    j = int(np.searchsorted(sent_off, sb + target_b, side="left"))
                    j = min(max(j, rs + 1), o1)
                    eb = int(sent_off[j])
                    label = NOT_NEXT
                    not_next += 1
                    i = a_end - 1  # the unused sentences of the chunk start the next one
                else:
                    sb, eb = ea, soffs[i + 1]
                    label = IS_NEXT
                sa, ea, sb, eb = truncate(sa, ea, sb, eb)
                rows.add(sa, ea, target, label, sb, eb)
                chunk_start = i + 1
                target = new_target()
            i += 1
    return rows.plan(max_tokens)  # without NSP, every B is the empty range [0, 0)


# --- ALBERT: sentence-order prediction --------------------------------------------------------


def build_sop_plan(
    corpus: ShardedCorpus,
    *,
    max_seq_len: int,
    seed: int,
    epoch: int,
    short_seq_prob: float = 0.1,
    swap_prob: float = 0.5,
    block_docs: int = 8192,
) -> EpochPlan:
    """Plan one epoch of sentence-order examples (ALBERT).

    Documents are cut into chunks exactly like BERT's (sentences accumulate up to a target length,
    sometimes a shorter one); a chunk of n >= 2 sentences splits at a random sentence boundary into
    A = the first 1..n-1 sentences and B = the rest, so B starts where A ends. A one-sentence chunk
    splits inside the sentence at a random token (ALBERT's script would pair it with a random other
    document, an NSP negative that SOP is meant to avoid); a one-token sentence is skipped. Too-long
    pairs are trimmed at the *outer* ends only (A's front, B's back), so the junction stays exact.
    With probability `swap_prob` the example holds (B, A) and label SWAPPED, else (A, B), IN_ORDER.
    """
    u = _Uniform(seed, epoch, "sop/plan")
    rows = _PlanRows()
    max_tokens = max_seq_len - 3

    def new_target() -> int:
        return u.target_length(max_tokens, short_seq_prob)

    def emit(sa: int, ea: int, sb: int, eb: int, target: int) -> None:
        ra, rb = truncation_counts(ea - sa, eb - sb, max_tokens)
        sa, eb = sa + ra, eb - rb
        if u.random() < swap_prob:
            (sa, ea), (sb, eb), label = (sb, eb), (sa, ea), SWAPPED
        else:
            label = IN_ORDER
        rows.add(sa, ea, target, label, sb, eb)

    for _, soffs, s0, s1 in _documents(corpus, block_docs):
        target = new_target()
        chunk_start = s0
        for i in range(s0, s1):
            if i < s1 - 1 and soffs[i + 1] - soffs[chunk_start] < target:
                continue
            n = i - chunk_start + 1
            if n >= 2:
                mid = soffs[chunk_start + u.randint(1, n - 1)]
                emit(soffs[chunk_start], mid, mid, soffs[i + 1], target)
            elif soffs[i + 1] - soffs[i] >= 2:
                start, end = soffs[i], soffs[i + 1]
                mid = start + u.randint(1, end - start - 1)
                emit(start, mid, mid, end, target)
            chunk_start = i + 1
            target = new_target()
    return rows.plan(max_tokens)


# --- RoBERTa: FULL-SENTENCES -----------------------------------------------------------------


def build_full_sentences_plan(
    corpus: ShardedCorpus,
    *,
    max_seq_len: int,
    seed: int,
    epoch: int,
    short_seq_prob: float = 0.0,
    block_docs: int = 8192,
) -> EpochPlan:
    """Plan FULL-SENTENCES examples (RoBERTa): whole sentences in corpus order, packed until the
    next one would exceed the target, crossing document boundaries; every boundary inside an
    example costs one separator token (inserted by `FullSentencesDataset`). A sentence longer than
    the target is cut into target-sized windows. Every token of the corpus is in exactly one
    example. With `short_seq_prob` 0 (RoBERTa) the plan is the same for every epoch.
    An example is a single global token range [start, end): sentences are contiguous across
    documents and shards, so the range needs no list of pieces.
    """
    u = _Uniform(seed, epoch, "full_sentences/plan")
    max_tokens = max_seq_len - 2
    doc_off = corpus.doc_offsets
    sent_off = corpus.sentence_offsets
    rows = _PlanRows()
    emit = rows.add

    def new_target() -> int:
        return u.target_length(max_tokens, short_seq_prob)

    target = new_target()
    start = used = 0  # current example: first token and tokens used so far (separators included)
    for d_lo in range(0, corpus.num_docs, block_docs):
        d_hi = min(corpus.num_docs, d_lo + block_docs)
        s_lo, s_hi = int(doc_off[d_lo]), int(doc_off[d_hi])
        soffs = sent_off[s_lo : s_hi + 1].tolist()
        first = set((doc_off[d_lo:d_hi] - s_lo).tolist())  # local index of each document's first sentence
        for k in range(s_hi - s_lo):
            pos, end = soffs[k], soffs[k + 1]
            cost = end - pos + (1 if used and k in first else 0)
            if used + cost <= target:
                if not used:
                    start = pos
                used += cost
                continue
            if used:
                emit(start, pos, target)
                target = new_target()
            while end - pos > target:
                emit(pos, pos + target, target)
                pos += target
                target = new_target()
            start, used = pos, end - pos
    if used:
        emit(start, int(sent_off[-1]), target)
    return rows.plan(max_tokens)
