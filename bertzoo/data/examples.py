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
"""

from __future__ import annotations

import random
from array import array
from typing import Any

import numpy as np

from bertzoo.data import rng as rng_mod
from bertzoo.data.shards import ShardedCorpus
from bertzoo.data.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError, DataError

__all__ = ["EpochPlan", "NspDataset", "build_plan", "truncation_counts"]

IS_NEXT, NOT_NEXT = 0, 1


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
    a_s, a_e, b_s, b_e = array("q"), array("q"), array("q"), array("q")
    labels, targets = array("b"), array("i")
    max_tokens = max_seq_len - 3 if nsp else max_seq_len - 2
    # Single-sentence chunks (NotNext only), all chunks and NotNext pairs so far, for the balance.
    forced = chunks = not_next = 0

    def new_target() -> int:
        if max_tokens > 2 and u.random() < short_seq_prob:
            return u.randint(2, max_tokens - 1)  # a *shorter* target: max_tokens itself is excluded
        return max_tokens

    def truncate(sa: int, ea: int, sb: int, eb: int) -> tuple[int, int, int, int]:
        ra, rb = truncation_counts(ea - sa, eb - sb, max_tokens)
        if ra:
            front = u.binomial_half(ra)
            sa, ea = sa + front, ea - (ra - front)
        if rb:
            front = u.binomial_half(rb)
            sb, eb = sb + front, eb - (rb - front)
        return sa, ea, sb, eb

    def emit_single(start: int, end: int, target: int) -> None:
        a_s.append(start)
        a_e.append(end)
        labels.append(-1)
        targets.append(target)

    # Documents are processed in blocks so only a block's offsets are Python lists (fast scalar access)
    # while the whole corpus stays in compact numpy arrays.
    for d_lo in range(0, num_docs, block_docs):
        d_hi = min(num_docs, d_lo + block_docs)
        s_base = int(doc_off[d_lo])
        doffs = doc_off[d_lo : d_hi + 1].tolist()
        soffs = sent_off[s_base : int(doc_off[d_hi]) + 1].tolist()
        for d in range(d_lo, d_hi):
            s0, s1 = doffs[d - d_lo] - s_base, doffs[d - d_lo + 1] - s_base
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
                        emit_single(start, prev, target)
                        start = prev
                        target = new_target()
                    while end - start > target:
                        emit_single(start, start + target, target)
                        start += target
                        target = new_target()
                    prev = end
                if prev > start:
                    emit_single(start, prev, target)
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
                    a_s.append(sa)
                    a_e.append(ea)
                    b_s.append(sb)
                    b_e.append(eb)
                    labels.append(label)
                    targets.append(target)
                    chunk_start = i + 1
                    target = new_target()
                i += 1

    n = len(labels)
    a = (
        np.stack([np.frombuffer(a_s, np.int64), np.frombuffer(a_e, np.int64)], axis=1)
        if n
        else np.zeros((0, 2), np.int64)
    )
    if nsp and n:
        b = np.stack([np.frombuffer(b_s, np.int64), np.frombuffer(b_e, np.int64)], axis=1)
    else:
        b = np.zeros((n, 2), np.int64)
    label = np.frombuffer(labels, np.int8).copy()
    return EpochPlan(a, b, label, np.frombuffer(targets, np.int32).copy(), max_tokens)


class NspDataset:
    """Map-style dataset of BERT pretraining examples (torch DataLoader compatible).

    An example is a dict of numpy arrays: `input_ids` ([CLS] A [SEP] B [SEP], int64),
    `token_type_ids` (0 for [CLS] A [SEP], 1 for B [SEP]), `next_sentence_label` (0 IsNext,
    1 NotNext; absent when nsp=False), `index` and `epoch` (they seed the mask in the collator).
    With nsp=False an example is `[CLS] sentences [SEP]` from one document.
    Call `set_epoch(e)` to build epoch e's plan (epoch 0 is built on construction).
    """

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
        if nsp and corpus.num_docs < 2:
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

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if not 0 <= i < self._length:
            raise IndexError(f"example {i} out of range 0..{self._length - 1}")
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
