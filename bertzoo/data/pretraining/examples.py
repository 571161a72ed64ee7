"""Pretraining examples from a `ShardedCorpus`: map-style datasets (torch DataLoader compatible) that
read each epoch's plan (`bertzoo.data.pretraining.plans`: the token ranges of every example) and slice
the memory-mapped shards in `__getitem__`.

`len(dataset)` is fixed by epoch 0's plan: later epochs draw a slightly different number of
examples and are trimmed (a random subset) or topped up (random repeats) to that length, so
samplers that fix the dataset size once keep working (a deliberate difference from Google's
`create_pretraining_data.py`, which writes a fixed set of examples).

One dataset per input format (`INPUT_FORMATS`, `pretraining_dataset`):

* ``segment_pair`` (BERT, `NspDataset`): segment A and a segment B that follows it (IsNext) or comes
  from another document (NotNext).
* ``sentence_order`` (ALBERT, `SopDataset`): two consecutive segments of one document, in order
  (label 0) or swapped (label 1).
* ``full_sentences`` (RoBERTa, `FullSentencesDataset`): contiguous sentences packed up to the
  length limit, crossing document boundaries, with a separator token where a document ends.
* ``doc_sentences`` / ``single`` (RoBERTa, `DocSentencesDataset`): contiguous sentences of one
  document. With `data.tokens_per_batch` the examples are grouped into token-budget bins
  (`bertzoo.data.pretraining.token_batches`) so that a batch holds a near-constant number of tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import bertzoo.data.rng as rng_mod
from bertzoo.config import DataConfig
from bertzoo.data.pretraining.plans import EpochPlan, build_full_sentences_plan, build_plan, build_sop_plan
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError, DataError

__all__ = [
    "INPUT_FORMATS",
    "DocSentencesDataset",
    "FullSentencesDataset",
    "NspDataset",
    "SopDataset",
    "pretraining_dataset",
]


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
        document_boundaries: bool = False,
    ) -> None:
        self._doc_starts = _doc_token_starts(corpus)
        self.document_boundaries = document_boundaries
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
        example = {"input_ids": ids, "token_type_ids": np.zeros(len(ids), np.int64), "index": i, "epoch": self.epoch}
        if self.document_boundaries:
            # Document k runs up to and including its closing separator; <s> belongs to the first document.
            closing = self._doc_starts[lo:hi] - sa + np.arange(hi - lo) + 1  # index of each inner separator in ids
            doc = np.zeros(len(ids), np.int64)
            doc[closing + 1] = 1
            example["document_ids"] = np.cumsum(doc)
        return example


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
        ds = FullSentencesDataset(
            corpus, tokenizer, data.max_seq_len, document_boundaries=data.document_boundaries, **common
        )
    elif input_format in ("doc_sentences", "single"):
        ds = DocSentencesDataset(corpus, tokenizer, data.max_seq_len, **common)
    else:
        raise ConfigError(
            f"data.input_format={input_format!r} is not an input format; choose one of: {', '.join(INPUT_FORMATS)}"
        )
    if data.document_boundaries and input_format != "full_sentences":
        raise ConfigError(
            f"data.document_boundaries applies to data.input_format=full_sentences, not {input_format!r}; "
            "drop it or switch the input format"
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
