"""UniLM's pretraining batches (Dong et al. 2019): one encoder, four self-attention masks.

Every example is a segment pair `[CLS] A [SEP] B [SEP]` ([CLS]/[SEP] play the paper's [SOS]/[EOS]) and
gets one language-model type, drawn from (seed, epoch, example index) with the paper's shares:

* bidirectional (1/3): every real token sees every real token (BERT);
* left-to-right (1/6): a token sees itself and the tokens before it;
* right-to-left (1/6): a token sees itself and the tokens after it;
* sequence-to-sequence (1/3): A is the source, B the target; source tokens see the whole source,
  target tokens the source and the target up to themselves.

The pair is read as one text by the unidirectional types (the paper feeds them a single segment).
Masking is BERT's (`mask_tokens`, 80/10/10, tokens of both segments for every type) with the paper's
n-gram rule: `ngram_prob` (0.2) of the masked units are bigrams or trigrams, one 80/10/10 decision
per unit. Segment ids tell the model which LM it is (the paper's "LM identifier"): with
`segments="per_lm"` bidirectional keeps 0/1, left-to-right is 2, right-to-left 3 and seq2seq 4/5
(type_vocab_size 6); `segments="pair"` keeps BERT's 0/1 for every type.

The masks are built for the whole batch at once (`lm_attention_masks`, no loop over tokens) and
ride in `batch.extra["attention_pattern"]` ((batch, seq, seq) bool, padding included), which
`MaskedLM` hands to the encoder; `batch.attention_mask` stays the (batch, seq) padding mask, so token
counts, `.to(device)` and the trainer see an ordinary batch. `batch.extra["lm_type"]` holds each
example's type (the indices of `LM_TYPES`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

import bertzoo.data.rng as rng
from bertzoo.batch import Batch
from bertzoo.config import MaskingConfig, is_number
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator, flatten_bins
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError

__all__ = [
    "BIDIRECTIONAL",
    "DEFAULT_SHARES",
    "LEFT_TO_RIGHT",
    "LM_TYPES",
    "RIGHT_TO_LEFT",
    "SEGMENTS",
    "SEQ2SEQ",
    "UniLMCollator",
    "check_ngrams",
    "check_shares",
    "choose_lm_types",
    "lm_attention_masks",
    "lm_segment_ids",
    "ngram_starts",
]

LM_TYPES = ("bidirectional", "left_to_right", "right_to_left", "seq2seq")
BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ = range(4)
# The paper's mix: "1/3 of the time bidirectional, 1/3 sequence-to-sequence, 1/6 each unidirectional".
DEFAULT_SHARES: dict[str, float] = {
    "bidirectional": 1 / 3,
    "left_to_right": 1 / 6,
    "right_to_left": 1 / 6,
    "seq2seq": 1 / 3,
}
SEGMENTS = ("per_lm", "pair")
# per_lm: the segment id of (segment A, segment B) for each LM type; needs type_vocab_size 6.
PER_LM_SEGMENT_IDS = np.array([[0, 1], [2, 2], [3, 3], [4, 5]], dtype=np.int64)
PER_LM_TYPE_VOCAB = 6

STREAM_LM_TYPE = "unilm/lm_type"
STREAM_NGRAM = "unilm/ngram"


def check_shares(shares: Mapping[str, Any] | None, name: str = "objective_args.lm_shares") -> np.ndarray:
    """The four LM-type shares as a float64 array in `LM_TYPES` order (None: the paper's), or a one-line
    ConfigError: unknown type, not a number, negative, or not summing to 1. A type left out has share 0."""
    if shares is None:
        shares = DEFAULT_SHARES
    if not isinstance(shares, Mapping):
        raise ConfigError(f"{name} must be a mapping of {', '.join(LM_TYPES)} to shares, got {shares!r}")
    unknown = sorted(str(k) for k in shares if k not in LM_TYPES)
    if unknown:
        raise ConfigError(f"{name} has an unknown LM type {unknown[0]!r}; choose from: {', '.join(LM_TYPES)}")
    out = np.zeros(len(LM_TYPES), dtype=np.float64)
    for i, lm in enumerate(LM_TYPES):
        value = shares.get(lm, 0.0)
        if not is_number(value) or not math.isfinite(value):
            raise ConfigError(f"{name}.{lm} must be a number, got {value!r}")
        if value < 0:
            raise ConfigError(f"{name}.{lm} must be >= 0, got {value}")
        out[i] = value
    if abs(out.sum() - 1.0) > 1e-6:
        raise ConfigError(f"{name} must sum to 1, got {out.sum():.6g} ({', '.join(f'{s:.4g}' for s in out)})")
    return out


def choose_lm_types(seed: int, epoch: np.ndarray | int, index: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Each example's LM type (indices of `LM_TYPES`, int64), a pure function of (seed, epoch, index):
    one keyed uniform per example, cut at the cumulative shares."""
    u = rng.uniform(seed, np.asarray(epoch, dtype=np.int64), np.asarray(index, dtype=np.int64), 0, STREAM_LM_TYPE)
    # side="right": a uniform on a boundary goes to the later type, so a type with share 0 is never drawn.
    return np.searchsorted(np.cumsum(shares)[:-1], u, side="right").astype(np.int64)


def ngram_starts(
    seed: int, epoch: np.ndarray, index: np.ndarray, seq_len: int, ngram_prob: float, max_ngram: int = 3
) -> np.ndarray:
    """(batch, seq_len) bool, True where a masking unit starts: rows are cut into consecutive units, a
    unit being 1 token long with probability 1 - `ngram_prob`, else 2..`max_ngram` tokens (uniform).

    Whole-unit selection (`select_units`) then masks units in random order, so about `ngram_prob` of
    the masked units are n-grams, the paper's "20% of the time a bigram or a trigram". The k-th unit's
    length is keyed by (seed, epoch, index, k): the cut of an example does not depend on its batch.
    Units never cross special tokens or padding (`unit_bounds` cuts there too)."""
    epoch = np.broadcast_to(np.asarray(epoch, dtype=np.int64), np.shape(index))[:, None]
    index = np.asarray(index, dtype=np.int64)[:, None]
    u = rng.uniform(seed, epoch, index, np.arange(seq_len, dtype=np.int64)[None, :], STREAM_NGRAM)  # (B, L)
    extra = np.minimum((u / max(ngram_prob, 1e-12) * (max_ngram - 1)).astype(np.int64), max_ngram - 2)
    length = np.where(u < ngram_prob, 2 + extra, 1)  # (B, L): length of the k-th unit
    first = np.cumsum(length, axis=1) - length  # (B, L): first position of the k-th unit
    starts = np.zeros((len(index), seq_len), dtype=bool)
    rows, units = np.nonzero(first < seq_len)
    starts[rows, first[rows, units]] = True
    return starts


def lm_attention_masks(
    lm_types: torch.Tensor, source_lengths: torch.Tensor, lengths: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """(batch, seq_len, seq_len) bool attention masks (True = may attend) for right-padded rows, each
    of its LM type, with `seq2seq_mask`'s conventions (padding never seen, a padded query sees itself).

    Each real query sees one interval of keys: bidirectional [0, length), left-to-right [0, query],
    seq2seq [0, max(source, query + 1)) (`seq2seq_mask`; bidirectional is a source of the whole row,
    left-to-right a source of nothing) and right-to-left [query, length), the transpose of
    left-to-right. So the whole batch is two comparisons against per-query interval ends."""
    zero = torch.zeros_like(lengths)
    source = torch.where(lm_types == BIDIRECTIONAL, lengths, torch.where(lm_types == SEQ2SEQ, source_lengths, zero))
    query = torch.arange(seq_len, device=lengths.device)[None, :, None]  # (1, seq, 1)
    length, source = lengths[:, None, None], source[:, None, None]  # (batch, 1, 1)
    r2l = (lm_types == RIGHT_TO_LEFT)[:, None, None]
    real = query < length  # (batch, seq, 1)
    forward_end = torch.minimum(length, torch.maximum(source, query + 1))
    end = torch.where(real, torch.where(r2l, length, forward_end), query + 1)  # (batch, seq, 1)
    first = torch.where(real & ~r2l, torch.zeros_like(query), query)  # (batch, seq, 1)
    key = torch.arange(seq_len, device=lengths.device)[None, None, :]  # (1, 1, seq)
    return (key >= first) & (key < end)


def lm_segment_ids(token_type_ids: np.ndarray, lm_types: np.ndarray, attention: np.ndarray) -> np.ndarray:
    """The `per_lm` segment ids: (batch, seq) pair ids (0 = A, 1 = B) to the id of that segment under
    each row's LM type (`PER_LM_SEGMENT_IDS`); padding stays 0."""
    ids = PER_LM_SEGMENT_IDS[lm_types[:, None], np.clip(token_type_ids, 0, 1)]
    return np.where(attention, ids, 0)


class UniLMCollator(PretrainingCollator):
    """Segment-pair examples (`input_ids`, `token_type_ids` 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`,
    `index`, `epoch`) -> a masked `Batch` with each example's LM-type attention mask in
    `batch.extra["attention_pattern"]` (see the module doc). Everything random is keyed by
    (seed, epoch, index): the same example gets the same LM type and mask in any batch.

    An example without a B segment (no `token_type_ids`, or all 0) has no target: its seq2seq mask is
    the bidirectional one.
    """

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        masking: MaskingConfig,
        seed: int,
        *,
        pad_to_multiple_of: int = 8,
        vocab_size: int | None = None,
        lm_shares: Mapping[str, Any] | None = None,
        segments: str = "per_lm",
        ngram_prob: float = 0.2,
        max_ngram: int = 3,
    ) -> None:
        super().__init__(tokenizer, masking, seed, pad_to_multiple_of=pad_to_multiple_of, vocab_size=vocab_size)
        if masking.strategy != "token":
            raise ConfigError(
                f"data.masking.strategy={masking.strategy!r}: UniLM masks tokens and n-grams "
                "(objective_args.ngram_prob); set the strategy to token"
            )
        check_ngrams(ngram_prob, max_ngram)
        if segments not in SEGMENTS:
            raise ConfigError(f"objective_args.segments={segments!r}; choose one of: {', '.join(SEGMENTS)}")
        self.shares = check_shares(lm_shares)
        self.segments = segments
        self.ngram_prob = float(ngram_prob)
        self.max_ngram = int(max_ngram)

    def __call__(self, examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Batch:
        examples = flatten_bins(examples)
        rows = self.inputs(examples)
        seq_len = rows.ids.shape[1]
        starts = None
        if self.ngram_prob > 0:
            starts = ngram_starts(self.seed, rows.epoch, rows.index, seq_len, self.ngram_prob, self.max_ngram)
        masked, labels = self.mask(rows, "token" if starts is None else "whole_word", starts)
        batch = self.assemble(examples, rows, masked, labels)
        batch.next_sentence_label = None  # segment pairs are always consecutive: nothing to classify
        types = choose_lm_types(self.seed, rows.epoch, rows.index, self.shares)
        pair_ids = batch.token_type_ids.numpy()
        # The source is segment A with its [CLS] and [SEP] (type 0); B [SEP] is the target.
        source = np.where(rows.attention & (pair_ids == 0), 1, 0).sum(axis=1)
        batch.extra["attention_pattern"] = lm_attention_masks(
            torch.from_numpy(types), torch.from_numpy(source), torch.from_numpy(rows.lengths), seq_len
        )
        batch.extra["lm_type"] = torch.from_numpy(types)
        if self.segments == "per_lm":
            batch.token_type_ids = torch.from_numpy(lm_segment_ids(pair_ids, types, rows.attention))
        return batch


def check_ngrams(ngram_prob: Any, max_ngram: Any) -> None:
    """ConfigError unless 0 <= ngram_prob <= 1 and max_ngram is an int >= 2 (>= 1 without n-grams)."""
    if not is_number(ngram_prob) or not 0.0 <= ngram_prob <= 1.0:
        raise ConfigError(f"objective_args.ngram_prob must be a number in [0, 1], got {ngram_prob!r}")
    least = 2 if ngram_prob > 0 else 1
    if isinstance(max_ngram, bool) or not isinstance(max_ngram, int) or max_ngram < least:
        raise ConfigError(f"objective_args.max_ngram must be an integer >= {least}, got {max_ngram!r}")
