"""The inputs and labels of ERNIE 2.0's auxiliary tasks (`bertzoo.objectives.auxiliary`), built from the shards.

Each task turns one planned example (a run of whole sentences of one document, `[CLS] text [SEP]`: the `plan` row
of `NspDataset` without NSP) into its own example; every draw is keyed by (seed, epoch, index), so a resumed run
builds the same ones.

* `capitalization`: the example as it is, with a label at each word's first token: 1 when its text starts with a
  capital letter, 0 with a lower-case one; nothing at `##` pieces, specials and words without case (digits,
  punctuation, CJK). The shards keep token ids only, no raw text, so the case comes from the token strings, which
  keep it only in a cased vocabulary: with a lower-casing tokenizer the task is refused (`case_table`).
* `token_document`: the example as it is, with a label at each word's first token: 1 when the same word (first
  piece and its `##` continuations) also occurs in its document outside this example, 0 when not. Words without
  a letter or digit (punctuation) get no label: they occur everywhere.
* `sentence_reorder`: the example's text cut into k segments, k uniform in 1..m (at sentence boundaries when the
  text has enough, else at tokens), shown in a random order as `[CLS] s1 [SEP] s2 [SEP] ...` (the separators make
  the cut visible); the label is the permutation: sum_{j<k} j! + its lexicographic rank among the k! orders.
* `sentence_distance`: `[CLS] A [SEP] B [SEP]` with A the front of the example's text and B of the same length
  as the rest: 0 the rest itself (adjacent), 1 sentences of the same document at least one sentence away from
  the example (in either direction), 2 sentences of another document. Where a document has no sentence that far
  (short documents), the example draws between 0 and 2, and the other examples draw 1 more often, so that over
  an epoch the three labels each take a third.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import bertzoo.data.rng as rng
from bertzoo.data.pretraining.plans import EpochPlan, truncation_counts
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.unit_flags import ALL_STARTS, vocab_tables
from bertzoo.errors import ConfigError, DataError
from bertzoo.objectives.auxiliary import AUX_TASKS, MAX_REORDER_SEGMENTS

__all__ = ["TaskExamples", "case_table", "permutation_rank", "reorder_label", "word_tables"]

IGNORE = -100
ADJACENT, SAME_DOCUMENT, OTHER_DOCUMENT = 0, 1, 2
SegmentFlags = Callable[[int, int], np.ndarray] | None  # unit flags of a global token range, when the shards have them
_MARKERS = "Ġ▁"  # byte-level BPE's and SentencePiece's word-start marks


def _text(token: str) -> str:
    """A vocabulary entry's text without its word-start or continuation mark."""
    return token[2:] if token.startswith("##") else token.lstrip(_MARKERS)


def case_table(tokenizer: Tokenizer) -> np.ndarray:
    """int8 per vocabulary id: 1 when the token starts a word with a capital letter, 0 with a lower-case one, -1
    when it has no case label (a `##` piece, a special token, a first character without case). ConfigError for a
    lower-casing tokenizer, whose ids have lost the case the shards do not keep otherwise."""
    if tokenizer.lowercase:
        raise ConfigError(
            "ERNIE 2.0 task capitalization needs a cased tokenizer: the shards keep token ids only and this "
            "tokenizer lower-cases, so the case is lost; prepare the shards with a cased one "
            "(bertzoo tokenizer train --cased, or --model bpe)"
        )
    vocab = tokenizer.vocab_list()
    table = np.full(len(vocab), -1, dtype=np.int8)
    for i, token in enumerate(vocab):
        text = _text(token)
        if token.startswith("##") or not text or not text[0].isalpha() or text[0].lower() == text[0].upper():
            continue
        table[i] = 1 if text[0].isupper() else 0
    table[list(tokenizer.special)] = -1
    return table


def word_tables(tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """(continuation, worded) bool tables over the vocabulary: `##` pieces, and tokens with a letter or digit."""
    continuation, _ = vocab_tables(tokenizer)
    worded = np.fromiter((any(ch.isalnum() for ch in _text(t)) for t in tokenizer.vocab_list()), dtype=bool)
    worded[list(tokenizer.special)] = False
    return continuation, worded


def permutation_rank(order: Sequence[int]) -> int:
    """The rank of a permutation of 0..k-1 among all k! in lexicographic order (its Lehmer code)."""
    order = list(order)
    rank = 0
    for i, x in enumerate(order):
        rank += sum(1 for y in order[i + 1 :] if y < x) * math.factorial(len(order) - 1 - i)
    return rank


def reorder_label(order: Sequence[int]) -> int:
    """The class of a shown order of k segments: sum_{j<k} j! (the classes of fewer segments) + its rank."""
    return sum(math.factorial(j) for j in range(1, len(order))) + permutation_rank(order)


class TaskExamples:
    """Builds the auxiliary tasks' examples over `corpus` (see the module doc); `set_plan` gives it each epoch's
    plan, `build` one example."""

    def __init__(
        self,
        corpus: ShardedCorpus,
        tokenizer: Tokenizer,
        tasks: Sequence[str],
        *,
        max_seq_len: int,
        seed: int,
        reorder_segments: int = 3,
    ) -> None:
        unknown = [t for t in tasks if t not in AUX_TASKS]
        if unknown:
            raise ConfigError(f"unknown ERNIE 2.0 task {unknown[0]!r}; choose one of: {', '.join(AUX_TASKS)}")
        if not 1 <= reorder_segments <= MAX_REORDER_SEGMENTS:
            raise ConfigError(f"reorder_segments must be within 1..{MAX_REORDER_SEGMENTS}, got {reorder_segments}")
        if "sentence_reorder" in tasks and max_seq_len < 2 * reorder_segments + 2:
            raise ConfigError(
                f"sentence_reorder into up to {reorder_segments} segments needs data.max_seq_len >= "
                f"{2 * reorder_segments + 2}, got {max_seq_len}"
            )
        if "sentence_distance" in tasks and corpus.num_docs < 2:
            raise DataError(f"sentence_distance needs at least 2 documents, {corpus.path} has {corpus.num_docs}")
        self.corpus = corpus
        self.tasks = tuple(tasks)
        self.max_seq_len = int(max_seq_len)
        self.seed = int(seed)
        self.segments = int(reorder_segments)
        self.cls, self.sep = tokenizer.special.cls, tokenizer.special.sep
        self.case = case_table(tokenizer) if "capitalization" in tasks else None
        self.continuation, self.worded = word_tables(tokenizer)
        self.sentences = np.asarray(corpus.sentence_offsets, dtype=np.int64)  # global token start of each sentence
        self.docs = np.asarray(corpus.doc_offsets, dtype=np.int64)  # global sentence start of each document
        self.doc_tokens = self.sentences[self.docs]  # global token start of each document (+ the end)
        self._plan: EpochPlan | None = None
        self._far = np.zeros(0, dtype=bool)
        self._p_far = 1 / 3

    # --- the epoch ------------------------------------------------------------------------------------------

    def set_plan(self, plan: EpochPlan) -> None:
        """The epoch's examples: which of them have a sentence of their document at least one sentence away, and
        the share of label 1 those draw so that it is a third over the epoch."""
        if plan is self._plan:
            return
        self._plan = plan
        start, end = plan.a[:, 0], plan.a[:, 1]
        doc = np.searchsorted(self.doc_tokens, start, side="right") - 1
        first = np.searchsorted(self.sentences, start, side="right") - 1  # the sentence holding the first token
        after = np.searchsorted(self.sentences, np.maximum(end - 1, start), side="right")  # the one after the text
        self._far = (after + 1 < self.docs[doc + 1]) | (first - 2 >= self.docs[doc])
        near = 1.0 - float(self._far.mean()) if len(self._far) else 0.0
        self._p_far = min(1.0, (1 / 3) / (1.0 - near)) if near < 1.0 else 0.0

    def document_of(self, token: int) -> int:
        """The document holding global token position `token`."""
        return int(np.searchsorted(self.doc_tokens, token, side="right")) - 1

    # --- building -------------------------------------------------------------------------------------------

    def build(self, task: str, example: dict[str, Any], index: int, epoch: int, flags: SegmentFlags) -> dict[str, Any]:
        """Example `index` of the epoch (`example` as the plan made it) turned into one of `task`."""
        if self._plan is None:
            raise DataError("TaskExamples.build before set_plan; the dataset must give it the epoch's plan")
        sa, ea = (int(x) for x in self._plan.a[index])
        if task == "capitalization":
            ids = example["input_ids"]
            return {**example, "task_labels": np.where(self.case[ids] >= 0, self.case[ids], IGNORE).astype(np.int64)}
        if task == "token_document":
            return {**example, "task_labels": self.document_labels(sa, ea, len(example["input_ids"]))}
        g = rng.KeyedRNG(self.seed, epoch, index, f"ernie/{task}")
        if task == "sentence_reorder":
            segments, label = self.reorder(sa, ea, g)
        else:
            segments, label = self.distance(sa, ea, index, g)
        return {**example, **self.layout(segments, flags), "task_label": label}

    def document_labels(self, sa: int, ea: int, n: int) -> np.ndarray:
        """(n,) labels of the example [CLS] tokens[sa:ea] [SEP]: 1 at the first token of a word that also occurs
        in the document outside [sa, ea), 0 at one that does not, IGNORE elsewhere."""
        d = self.document_of(sa)
        ds, de = int(self.doc_tokens[d]), int(self.doc_tokens[d + 1])
        doc = self.corpus.token_range(ds, de).astype(np.int64)
        starts = ~self.continuation[doc]
        starts[0] = True
        first = np.flatnonzero(starts)  # each word's first position in the document
        word = np.cumsum(starts) - 1
        offset = np.minimum(np.arange(len(doc)) - first[word], 255)
        # A word's key: the xor of hashes of (piece, place in the word), equal exactly for equal piece sequences
        # (up to 64-bit collisions).
        keys = np.bitwise_xor.reduceat(rng.hash64(0, 0, doc * 256 + offset, "ernie/word"), first)
        inside = (first >= sa - ds) & (first < ea - ds)
        related = np.isin(keys[inside], keys[~inside])
        labels = np.full(n, IGNORE, dtype=np.int64)
        places = first[inside]
        keep = self.worded[doc[places]]
        labels[1 + places[keep] - (sa - ds)] = related[keep]
        return labels

    def reorder(self, sa: int, ea: int, g: np.random.Generator) -> tuple[list[tuple[int, int]], int]:
        """The shown segments of [sa, ea) cut into 1..m pieces and shuffled, and the permutation's class."""
        k = min(1 + int(g.integers(self.segments)), ea - sa)
        ea = min(ea, sa + self.max_seq_len - 1 - k)  # [CLS] and a [SEP] after each segment
        inside = self.sentences[
            np.searchsorted(self.sentences, sa, side="right") : np.searchsorted(self.sentences, ea, side="left")
        ]
        if len(inside) >= k - 1:
            cuts = np.sort(g.choice(inside, k - 1, replace=False)) if k > 1 else inside[:0]
        else:  # too few sentence boundaries (one long sentence): cut between tokens
            cuts = sa + 1 + np.sort(g.choice(ea - sa - 1, k - 1, replace=False))
        edges = [sa, *(int(c) for c in cuts), ea]
        order = [int(x) for x in g.permutation(k)]  # order[p]: the original place of the p-th shown segment
        return [(edges[j], edges[j + 1]) for j in order], reorder_label(order)

    def distance(self, sa: int, ea: int, index: int, g: np.random.Generator) -> tuple[list[tuple[int, int]], int]:
        """(A, B) for sentence distance and its label (0 adjacent, 1 same document apart, 2 another document)."""
        d = self.document_of(sa)
        u = float(g.random())
        far = bool(self._far[index]) if index < len(self._far) else False
        p_far = self._p_far if far else 0.0
        label = SAME_DOCUMENT if u < p_far else ADJACENT if u < p_far + (1 - p_far) / 2 else OTHER_DOCUMENT
        inside = self.sentences[
            np.searchsorted(self.sentences, sa, side="right") : np.searchsorted(self.sentences, ea, side="left")
        ]
        if len(inside):
            cut = int(g.choice(inside))
        else:
            cut = sa + 1 + int(g.integers(ea - sa - 1)) if ea - sa >= 2 else ea
        want = max(1, ea - cut)
        if label == ADJACENT and cut == int(self.doc_tokens[d + 1]):
            label = OTHER_DOCUMENT  # a one-token document: nothing follows it
        if label == ADJACENT:
            b = (cut, min(int(self.doc_tokens[d + 1]), cut + want))
        elif label == SAME_DOCUMENT:
            b = self._apart(sa, ea, d, want, g)
        else:
            b = self._elsewhere(d, want, g)
        # Trimmed at the outer ends (A's front, B's back), so an adjacent pair still meets exactly.
        ra, rb = truncation_counts(cut - sa, b[1] - b[0], self.max_seq_len - 3)
        return [(sa + ra, cut), (b[0], b[1] - rb)], label

    def _elsewhere(self, d: int, want: int, g: np.random.Generator) -> tuple[int, int]:
        """Up to `want` tokens from a random sentence of a random document other than `d`."""
        other = int(g.integers(self.corpus.num_docs - 1))
        other += other >= d  # uniform over the other documents
        start = int(self.sentences[int(g.integers(self.docs[other], self.docs[other + 1]))])
        return start, min(int(self.doc_tokens[other + 1]), start + want)

    def _apart(self, sa: int, ea: int, d: int, want: int, g: np.random.Generator) -> tuple[int, int]:
        """Up to `want` tokens from a sentence of document `d` with at least one sentence between it and [sa, ea)."""
        s0, s1 = int(self.docs[d]), int(self.docs[d + 1])
        first = int(np.searchsorted(self.sentences, sa, side="right")) - 1
        after = int(np.searchsorted(self.sentences, max(ea - 1, sa), side="right"))
        n_after, n_before = max(0, s1 - (after + 1)), max(0, first - 1 - s0)
        pick = int(g.integers(n_after + n_before))
        if pick < n_after:
            s, limit = after + 1 + pick, int(self.doc_tokens[d + 1])
        else:  # before the example: B stops where the sentence next to it starts
            s, limit = s0 + pick - n_after, int(self.sentences[first - 1])
        start = int(self.sentences[s])
        return start, min(limit, start + want)

    def layout(self, segments: Sequence[tuple[int, int]], flags: SegmentFlags) -> dict[str, np.ndarray]:
        """`[CLS] s1 [SEP] s2 [SEP] ...` of global token ranges: input ids, token types alternating 0 / 1 by
        segment, and unit flags (each segment starts a unit at every level) when the shards have them."""
        n = 1 + sum(e - s + 1 for s, e in segments)
        ids = np.empty(n, dtype=np.int64)
        types = np.zeros(n, dtype=np.int64)
        unit = np.zeros(n, dtype=np.uint8) if flags is not None else None
        ids[0] = self.cls
        p = 1
        for j, (s, e) in enumerate(segments):
            ids[p : p + e - s] = self.corpus.token_range(s, e)
            ids[p + e - s] = self.sep
            types[p : p + e - s + 1] = j % 2
            if unit is not None and e > s:
                unit[p : p + e - s] = flags(s, e)
                unit[p] |= ALL_STARTS
            p += e - s + 1
        out = {"input_ids": ids, "token_type_ids": types}
        if unit is not None:
            out["unit_flags"] = unit
        return out
