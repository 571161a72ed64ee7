"""Pretraining examples from a `ShardedCorpus`, built the way Google's `create_pretraining_data.py` does.

Each epoch has a *plan*: for every example, two global token ranges (segment A and B) plus the
NSP label, held as numpy arrays (a few dozen bytes per example, no token lists). The plan depends
only on (seed, epoch), so every worker and process builds the same one, and `__getitem__` just
slices the memory-mapped shards.

Differences from Google's script (all deliberate, see the docstrings below):

* The short target length (probability `short_seq_prob`) is drawn per example instead of once per
  document, so ~`short_seq_prob` of the *examples* are short, as BERT's paper describes.
* Chunks of a single sentence (one-sentence documents, long sentences, the last sentence of a
  document) can only form NotNext pairs. Google's script lets them push the NotNext share above
  50%; here the probability used for the other chunks is lowered to compensate (with a small
  feedback on the running count), so `nsp_random_prob` is the actual NotNext share whenever the
  forced chunks alone do not exceed it.
* `len(dataset)` is fixed by epoch 0's plan: later epochs draw a slightly different number of
  examples and are trimmed (a random subset) or topped up (random repeats) to that length, so
  samplers that fix the dataset size once keep working.

The other input formats share the plan machinery (`INPUT_FORMATS`, `pretraining_dataset`):

* ``sentence_order`` (ALBERT, `SopDataset`): two consecutive segments of one document, in order
  (label 0) or swapped (label 1).
* ``full_sentences`` (RoBERTa, `FullSentencesDataset`): contiguous sentences packed up to the
  length limit, crossing document boundaries, with a separator token where a document ends.
* ``doc_sentences`` / ``single`` (RoBERTa, `DocSentencesDataset`): contiguous sentences of one
  document. With `data.tokens_per_batch` the examples are grouped into token-budget bins
  (`bertzoo.data.pretraining.token_batches`) so that a batch holds a near-constant number of tokens.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import bertzoo.data.rng as rng_mod
from bertzoo.config import DataConfig
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError, DataError

__all__ = [
    "INPUT_FORMATS",
    "DocSentencesDataset",
    "EpochPlan",
    "FullSentencesDataset",
    "NspDataset",
    "SopDataset",
    "build_full_sentences_plan",
    "build_plan",
    "build_sop_plan",
    "pretraining_dataset",
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
            # DOC-SENTENCES: pack whole sentences up to the target; a sentence longer than the
            # target is cut into target-sized windows rather than thrown away.
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


class NspDataset:
    """Map-style dataset of BERT pretraining examples (torch DataLoader compatible).

    An example is a dict of numpy arrays: `input_ids` ([CLS] A [SEP] B [SEP], int64),
    `token_type_ids` (0 for [CLS] A [SEP], 1 for B [SEP]), `next_sentence_label` (0 IsNext,
    1 NotNext; absent when nsp=False), `index` and `epoch` (they seed the mask in the collator).
    With nsp=False an example is `[CLS] sentences [SEP]` from one document.
    Call `set_epoch(e)` to build epoch e's plan (epoch 0 is built on construction).
    """

    _needs_other_documents = True  # NotNext segments come from another document

    def __init__(
        self,
        corpus: ShardedCorpus,
        tokenizer_ids: tuple[int, int] | SpecialIds | Tokenizer,
        max_seq_len: int = 128,
        *,
        seed: int,
        short_seq_prob: float = 0.1,
        nsp_random_prob: float = 0.5,
        nsp: bool = True,
    ) -> None:
        if isinstance(tokenizer_ids, Tokenizer):
            tokenizer_ids = tokenizer_ids.special
        if isinstance(tokenizer_ids, SpecialIds):
            cls_id, sep_id = tokenizer_ids.cls, tokenizer_ids.sep
        else:
            cls_id, sep_id = (int(x) for x in tokenizer_ids)
        if max(cls_id, sep_id) >= corpus.vocab_size:
            raise DataError(
                f"[CLS]/[SEP] ids {cls_id}/{sep_id} are outside the shards' vocabulary of "
                f"{corpus.vocab_size}; "
                "use the tokenizer the shards were prepared with"
            )
        min_len = 5 if nsp else 3
        if max_seq_len < min_len:
            raise ConfigError(f"data.max_seq_len must be >= {min_len}, got {max_seq_len}")
        for name, p in (("short_seq_prob", short_seq_prob), ("nsp_random_prob", nsp_random_prob)):
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"data.{name} must be within [0, 1], got {p}")
        if nsp and self._needs_other_documents and corpus.num_docs < 2:
            raise DataError(
                f"next-sentence prediction needs at least 2 documents, {corpus.path} has {corpus.num_docs}; "
                "add data or set data.nsp=false"
            )
        self.corpus = corpus
        self.cls_id, self.sep_id = cls_id, sep_id
        self.max_seq_len = max_seq_len
        self.seed = int(seed)
        self.short_seq_prob = short_seq_prob
        self.nsp_random_prob = nsp_random_prob
        self.nsp = nsp
        self.epoch = -1
        self.plan: EpochPlan
        self._length = 0
        self.set_epoch(0)

    def _build(self, epoch: int) -> EpochPlan:
        return build_plan(
            self.corpus,
            max_seq_len=self.max_seq_len,
            seed=self.seed,
            epoch=epoch,
            short_seq_prob=self.short_seq_prob,
            nsp_random_prob=self.nsp_random_prob,
            nsp=self.nsp,
        )

    def set_epoch(self, epoch: int) -> None:
        """Build the example plan of `epoch` (deterministic in (seed, epoch))."""
        epoch = int(epoch)
        if epoch == self.epoch:
            return
        plan = self._build(epoch)
        if self.epoch == -1:  # first plan: it fixes the dataset length for every epoch
            self._length = len(plan) if epoch == 0 else len(self._build(0))
            if self._length == 0:
                raise DataError(f"{self.corpus.path} yields no pretraining example; add data")
        self.epoch_examples = len(plan)  # the epoch's natural size before trimming/topping up
        if len(plan) != self._length:
            g = rng_mod.KeyedRNG(self.seed, epoch, 0, "nsp/resize")
            if len(plan) > self._length:
                idx = np.sort(g.choice(len(plan), self._length, replace=False))
            else:
                idx = np.concatenate([np.arange(len(plan)), g.choice(len(plan), self._length - len(plan))])
            plan = plan.take(idx)
        self.plan = plan
        self.epoch = epoch

    def __len__(self) -> int:
        return self._length

    def example_lengths(self) -> np.ndarray:
        """Token count of every example of the current epoch, special tokens included (int64)."""
        n = (self.plan.a[:, 1] - self.plan.a[:, 0]) + 2
        if self.nsp:
            n = n + (self.plan.b[:, 1] - self.plan.b[:, 0]) + 1
        return n.astype(np.int64)

    def _index(self, i: int) -> int:
        """`i` as an int, checked against the dataset length."""
        i = int(i)
        if not 0 <= i < self._length:
            raise IndexError(f"example {i} out of range 0..{self._length - 1}")
        return i

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = self._index(i)
        sa, ea = self.plan.a[i]
        sb, eb = self.plan.b[i]
        la, lb = int(ea - sa), int(eb - sb)
        seg_b = lb + 1 if self.nsp else 0
        ids = np.empty(2 + la + seg_b, dtype=np.int64)
        ids[0] = self.cls_id
        ids[1 : 1 + la] = self.corpus.token_range(int(sa), int(ea))
        ids[1 + la] = self.sep_id
        types = np.zeros(len(ids), dtype=np.int64)
        out: dict[str, Any] = {"input_ids": ids, "token_type_ids": types, "index": i, "epoch": self.epoch}
        if self.nsp:
            ids[2 + la : 2 + la + lb] = self.corpus.token_range(int(sb), int(eb))
            ids[-1] = self.sep_id
            types[2 + la :] = 1
            out["next_sentence_label"] = int(self.plan.label[i])
        return out


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


class SopDataset(NspDataset):
    """ALBERT's sentence-order examples: `[CLS] A [SEP] B [SEP]` where A and B are consecutive
    segments of one document, in order (`next_sentence_label` 0) or swapped (1). The label keeps
    BERT's field name so the collator and the sentence-pair head need nothing new.
    `swap_prob` is the share of swapped pairs (0.5 in ALBERT)."""

    _needs_other_documents = False

    def __init__(
        self,
        corpus: ShardedCorpus,
        tokenizer_ids: tuple[int, int] | SpecialIds | Tokenizer,
        max_seq_len: int = 128,
        *,
        seed: int,
        short_seq_prob: float = 0.1,
        swap_prob: float = 0.5,
    ) -> None:
        super().__init__(
            corpus,
            tokenizer_ids,
            max_seq_len,
            seed=seed,
            short_seq_prob=short_seq_prob,
            nsp_random_prob=swap_prob,
            nsp=True,
        )

    def _build(self, epoch: int) -> EpochPlan:
        return build_sop_plan(
            self.corpus,
            max_seq_len=self.max_seq_len,
            seed=self.seed,
            epoch=epoch,
            short_seq_prob=self.short_seq_prob,
            swap_prob=self.nsp_random_prob,
        )


# --- RoBERTa: FULL-SENTENCES and DOC-SENTENCES -------------------------------------------------


def _doc_token_starts(corpus: ShardedCorpus) -> np.ndarray:
    """Global token offset where each document starts (increasing)."""
    return np.asarray(corpus.sentence_offsets[corpus.doc_offsets[:-1]], dtype=np.int64)


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


class FullSentencesDataset(NspDataset):
    """RoBERTa's FULL-SENTENCES input: `<s> sentences </s>`, where the sentences may span several
    documents and a separator (`</s>`, the [SEP] role) marks each document end inside the example.
    One segment, token type 0, no sentence-pair label."""

    def __init__(
        self,
        corpus: ShardedCorpus,
        tokenizer_ids: tuple[int, int] | SpecialIds | Tokenizer,
        max_seq_len: int = 512,
        *,
        seed: int,
        short_seq_prob: float = 0.0,
    ) -> None:
        self._doc_starts = _doc_token_starts(corpus)
        super().__init__(corpus, tokenizer_ids, max_seq_len, seed=seed, short_seq_prob=short_seq_prob, nsp=False)

    def _build(self, epoch: int) -> EpochPlan:
        return build_full_sentences_plan(
            self.corpus, max_seq_len=self.max_seq_len, seed=self.seed, epoch=epoch, short_seq_prob=self.short_seq_prob
        )

    def _separators(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index range into `_doc_starts` of the documents starting strictly inside [start, end)."""
        lo = np.searchsorted(self._doc_starts, start, side="right")
        hi = np.searchsorted(self._doc_starts, end, side="left")
        return lo, np.maximum(hi, lo)

    def example_lengths(self) -> np.ndarray:
        lo, hi = self._separators(self.plan.a[:, 0], self.plan.a[:, 1])
        return (self.plan.a[:, 1] - self.plan.a[:, 0] + (hi - lo) + 2).astype(np.int64)

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = self._index(i)
        sa, ea = (int(x) for x in self.plan.a[i])
        lo, hi = self._separators(sa, ea)
        body = np.insert(self.corpus.token_range(sa, ea).astype(np.int64), self._doc_starts[lo:hi] - sa, self.sep_id)
        ids = np.empty(len(body) + 2, dtype=np.int64)
        ids[0], ids[-1] = self.cls_id, self.sep_id
        ids[1:-1] = body
        return {"input_ids": ids, "token_type_ids": np.zeros(len(ids), np.int64), "index": i, "epoch": self.epoch}


class DocSentencesDataset(NspDataset):
    """RoBERTa's DOC-SENTENCES input (also BERT's single-segment mode): `<s> sentences </s>` from one
    document, never crossing a document boundary; a document's last example is often short, which
    `data.tokens_per_batch` (token-budget batches) compensates by putting more of them in a batch."""

    def __init__(
        self,
        corpus: ShardedCorpus,
        tokenizer_ids: tuple[int, int] | SpecialIds | Tokenizer,
        max_seq_len: int = 512,
        *,
        seed: int,
        short_seq_prob: float = 0.0,
    ) -> None:
        super().__init__(corpus, tokenizer_ids, max_seq_len, seed=seed, short_seq_prob=short_seq_prob, nsp=False)


# Every input format by config name (`data.input_format`).
INPUT_FORMATS = ("segment_pair", "sentence_order", "full_sentences", "doc_sentences", "single")


def pretraining_dataset(
    input_format: str,
    corpus: ShardedCorpus,
    tokenizer: Tokenizer | SpecialIds,
    data: DataConfig,
    *,
    seed: int,
) -> Any:
    """The dataset of one input format, configured from `data` (max_seq_len, short_seq_prob,
    nsp_random_prob = the share of negative pairs for NSP and SOP alike, tokens_per_batch).

    With `data.tokens_per_batch` > 0 the result is a `TokenBudgetDataset`: each item is a bin of
    examples holding at most that many (padded) tokens, and the collator flattens bins.
    """
    from bertzoo.data.pretraining.token_batches import TokenBudgetDataset

    common: dict[str, Any] = {"seed": seed, "short_seq_prob": data.short_seq_prob}
    if input_format == "segment_pair":
        ds: Any = NspDataset(
            corpus, tokenizer, data.max_seq_len, nsp_random_prob=data.nsp_random_prob, nsp=True, **common
        )
    elif input_format == "sentence_order":
        ds = SopDataset(corpus, tokenizer, data.max_seq_len, swap_prob=data.nsp_random_prob, **common)
    elif input_format == "full_sentences":
        ds = FullSentencesDataset(corpus, tokenizer, data.max_seq_len, **common)
    elif input_format in ("doc_sentences", "single"):
        ds = DocSentencesDataset(corpus, tokenizer, data.max_seq_len, **common)
    else:
        raise ConfigError(
            f"data.input_format={input_format!r} is not an input format; choose one of: {', '.join(INPUT_FORMATS)}"
        )
    if data.tokens_per_batch < 0:
        raise ConfigError(f"data.tokens_per_batch must be >= 0, got {data.tokens_per_batch}")
    if data.tokens_per_batch:
        ds = TokenBudgetDataset(ds, data.tokens_per_batch, seed=seed, pad_to_multiple_of=data.pad_to_multiple_of)
    return ds


def one_of_formats(
    cfg: Any, corpus: ShardedCorpus, tokenizer: Tokenizer | SpecialIds, formats: tuple[str, ...], family: str
) -> Any:
    """`pretraining_dataset` of `cfg.data.input_format` (default: the first of `formats`) for a family that
    reads one segment per example (RoBERTa, GPT); any other format is a ConfigError naming the choices."""
    fmt = cfg.data.input_format or formats[0]
    if fmt not in formats:
        raise ConfigError(
            f"data.input_format={fmt!r} is not a {family} input format (it reads one segment of running text, "
            f"no sentence pairs); choose one of: {', '.join(formats)}"
        )
    return pretraining_dataset(fmt, corpus, tokenizer, cfg.data, seed=cfg.train.seed)
