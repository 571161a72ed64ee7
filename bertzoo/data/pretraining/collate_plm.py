"""Permutation-LM batches (XLNet): which tokens are predicted, in which factorisation order, stated as the
model's `perm_mask` and `target_mapping`.

Targets are spans (partial prediction, Yang et al. 2019 section 2.3): the sequence is walked in contexts of
`span / plm_probability` tokens, each holding one span of 1..max_span_length tokens at a random offset, so
about plm_probability = 1/K of the tokens (K = 6) are predicted (transformers'
DataCollatorForPermutationLanguageModeling draws them the same way). The factorisation order puts every
other token first and the targets last in a random order: only the last 1/K of each order is predicted.

`perm_mask[i, j] = 1` (i may not see j) when j is a target or a functional token ([CLS], [SEP]) that does
not come before i in the order (a target does not see itself; its content stream does anyway, the model's
rule). The paper's code masks functional tokens like targets; transformers' collator combines the rank test
with "j is masked" alone, so a functional token is seen by every target while it has seen earlier targets
itself: through two layers a target then reads targets that come after it. Inputs stay unmasked: the query
stream never reads its own token, and the content stream of a target is what later targets condition on.

**Unit-level PLM** (`unit`: `whole_word`, `phrase` or `entity`; beyond the paper, after ERNIE's knowledge
masking): the factorisation order runs over units instead of tokens, with the unit starts ERNIE masks by
(the shards' unit flags: an entity where there is one, else a word; `##` words without flags). Target spans
are drawn over units (1..max_span_length units per context, ~plm_probability of the units), and all tokens of
a target unit share one place in the order, so they are **predicted together**: none of them sees another,
each reads the context and the units ordered before its own. Left to right inside the unit would let
哈尔 predict 滨, the local shortcut that entity masking exists to remove; together, the unit is recovered
from its context, as in ERNIE, while the units keep XLNet's autoregressive order among themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator, flatten_bins
from bertzoo.data.pretraining.collate_units import batch_unit_flags, continuation_table
from bertzoo.data.rng import KeyedRNG
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.data.tokens.unit_flags import LEVEL_FLAGS
from bertzoo.errors import ConfigError

__all__ = ["UNITS", "PermutationLMCollator", "factorisation_mask", "sample_spans", "unit_index"]

UNITS = ("token", "whole_word", "phrase", "entity")  # what one place in the factorisation order holds


def sample_spans(
    length: int, rng: np.random.Generator, plm_probability: float = 1 / 6, max_span_length: int = 5
) -> np.ndarray:
    """(length,) bool: one span of 1..max_span_length tokens per context of int(span / plm_probability)
    tokens, at a uniform offset inside it, context after context to the end."""
    chosen = np.zeros(length, dtype=bool)
    start = 0
    while start < length:
        span = int(rng.integers(1, max_span_length + 1))
        context = int(span / plm_probability)
        offset = start + int(rng.integers(0, context - span + 1))
        chosen[offset : offset + span] = True
        start += context
    return chosen


def unit_index(starts: np.ndarray, special: np.ndarray) -> np.ndarray:
    """(n,) int: the unit of each token, numbered from 0, from where units start; a special token is a unit of
    its own and the token after it starts one."""
    starts = np.asarray(starts, dtype=bool) | special
    starts[1:] |= special[:-1]
    if len(starts):
        starts[0] = True
    return np.cumsum(starts) - 1


def factorisation_mask(rank: np.ndarray, targets: np.ndarray, functional: np.ndarray) -> np.ndarray:
    """(seq, seq) bool, True = query i may not see key j, for a factorisation order where `rank[p]` is
    position p's place among the targets and functional tokens, every other token ranking first (-1).

    A target sees the context and the targets and functional tokens ranked before it, a functional token
    those up to its own rank, a context token the context only (the paper's `_local_perm`)."""
    ordered = targets | functional  # the tokens with a place in the order
    rev = np.where(ordered, rank, -1)  # (seq,)
    own = np.where(targets, rev, rev + 1)  # a target may not see itself; others see their own rank
    return (own[:, None] <= rev[None, :]) & ordered[None, :]


class PermutationLMCollator(PretrainingCollator):
    """Pads examples into a `Batch` with `labels` (batch, num_predict) and, in `extra`, `perm_mask` (batch,
    seq, seq) and `target_mapping` (batch, num_predict, seq), float as transformers takes them; num_predict
    is the largest target count of the batch (shorter rows pad with IGNORE_INDEX and zero rows). Targets and
    order depend on (seed, epoch, example index) only."""

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        *,
        seed: int = 0,
        pad_to_multiple_of: int = 8,
        vocab_size: int | None = None,
        plm_probability: float = 1 / 6,
        max_span_length: int = 5,
        unit: str = "token",
    ) -> None:
        if not 0.0 < plm_probability <= 0.5:
            raise ConfigError(f"objective_args.plm_probability must be in (0, 0.5], got {plm_probability}")
        if isinstance(max_span_length, bool) or not isinstance(max_span_length, int) or max_span_length < 1:
            raise ConfigError(f"objective_args.max_span_length must be an integer >= 1, got {max_span_length!r}")
        if unit not in UNITS:
            raise ConfigError(f"objective_args.unit must be one of: {', '.join(UNITS)}; got {unit!r}")
        super().__init__(
            tokenizer, MaskingConfig(), seed=seed, pad_to_multiple_of=pad_to_multiple_of, vocab_size=vocab_size
        )
        self.plm_probability = plm_probability
        self.max_span_length = max_span_length
        self.unit = unit
        self.continuation = continuation_table(tokenizer, self.vocab_size) if unit != "token" else None

    def __call__(self, examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Batch:
        examples = flatten_bins(examples)
        rows = self.inputs(examples)
        b, seq = rows.ids.shape
        perm = np.zeros((b, seq, seq), dtype=bool)
        positions: list[np.ndarray] = []
        flags = None
        if self.continuation is not None:
            flags = batch_unit_flags(examples, rows.ids, rows.lengths, rows.index, self.continuation)
        for row in range(b):
            rng = KeyedRNG(self.seed, int(rows.epoch[row]), int(rows.index[row]), "plm")
            n = int(rows.lengths[row])
            targets = np.zeros(seq, dtype=bool)
            rank = np.zeros(seq, dtype=np.int64)
            if flags is None:  # a token per place in the order
                targets[:n] = sample_spans(n, rng, self.plm_probability, self.max_span_length)
                rank[:n] = rng.permutation(n)
            else:  # a unit per place: its tokens are targets together and share its rank
                starts = (flags[row, :n] & LEVEL_FLAGS[self.unit]) != 0
                unit = unit_index(starts, rows.special_mask[row, :n])
                units = int(unit[-1]) + 1 if n else 0
                targets[:n] = sample_spans(units, rng, self.plm_probability, self.max_span_length)[unit]
                rank[:n] = rng.permutation(units)[unit]
            targets &= ~rows.special_mask[row]  # never a special token or padding
            functional = rows.special_mask[row] & rows.attention[row]
            perm[row] = factorisation_mask(rank, targets, functional)
            positions.append(np.flatnonzero(targets))
        num_predict = max(1, max(len(p) for p in positions))
        mapping = np.zeros((b, num_predict, seq), dtype=np.float32)
        labels = np.full((b, num_predict), IGNORE_INDEX, dtype=np.int64)
        for row, where in enumerate(positions):
            mapping[row, np.arange(len(where)), where] = 1.0
            labels[row, : len(where)] = rows.ids[row, where]
        batch = self.assemble(examples, rows, rows.ids, labels)
        batch.extra["perm_mask"] = torch.from_numpy(perm.astype(np.float32))
        batch.extra["target_mapping"] = torch.from_numpy(mapping)
        return batch
