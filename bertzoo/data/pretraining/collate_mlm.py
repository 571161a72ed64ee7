"""Collating pretraining examples into a padded, masked `Batch`, vectorised over the whole batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertzoo.batch import IGNORE_INDEX, Batch, pad_batch
from bertzoo.config import MaskingConfig
from bertzoo.data.pretraining.masking import Selector, mask_tokens
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError, DataError

__all__ = ["CausalLMCollator", "CollatedInputs", "PretrainingCollator", "flatten_bins"]


def flatten_bins(examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Example dicts, with token-budget bins (lists of examples, `bertzoo.data.pretraining.token_batches`) flattened."""
    if examples and isinstance(examples[0], list):
        return [e for group in examples for e in group]
    return list(examples)


@dataclass(frozen=True)
class CollatedInputs:
    """A padded batch before masking: what every collator derives the same way."""

    index: np.ndarray  # (batch,) example indices: with `epoch`, the key of each example's mask
    epoch: np.ndarray  # (batch,) epochs, folded modulo `static_copies` under static masking
    ids: np.ndarray  # (batch, seq) padded token ids
    lengths: np.ndarray  # (batch,) real lengths
    attention: np.ndarray  # (batch, seq) bool, True at real tokens
    special_mask: np.ndarray  # (batch, seq) bool, True where nothing may be masked (special or padding)


class PretrainingCollator:
    """Turns a list of example dicts (`input_ids`, optional `token_type_ids`,
    `next_sentence_label`, and `index`/`epoch` which seed the mask) into a masked `Batch`.

    The mask of an example depends only on (seed, its epoch, its index): the same example gets the
    same mask in any batch, with any number of workers or processes. Items that are lists of
    example dicts (token-budget bins, `bertzoo.data.pretraining.token_batches`) are flattened first.

    Static masking (RoBERTa's baseline): with `masking.static_copies = N > 0` the mask is keyed by
    `epoch % N` instead of the epoch, so every example has N fixed masks that recur every N epochs
    (N = 1 is BERT's original single static mask; RoBERTa duplicated its data N = 10 times).
    That is exactly "preprocess N masked copies" for datasets whose examples do not change between
    epochs (FULL-/DOC-SENTENCES with short_seq_prob 0); 0 keeps dynamic masking, a new mask per epoch.

    `token_weights` (one positive weight per vocabulary id) makes token selection weighted: still
    `mask_prob` of each row, drawn in proportion to the weights (`data.masking.frequency_power`).
    """

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        masking: MaskingConfig,
        seed: int,
        *,
        pad_to_multiple_of: int = 8,
        vocab_size: int | None = None,
        selector: str | Selector = "token",
        token_weights: np.ndarray | None = None,
    ) -> None:
        if isinstance(tokenizer, Tokenizer):
            special = tokenizer.special
            vocab_size = tokenizer.vocab_size if vocab_size is None else vocab_size
        else:
            special = SpecialIds(*tokenizer)
            if vocab_size is None:
                raise ConfigError("PretrainingCollator needs vocab_size when given special ids instead of a tokenizer")
        if max(special) >= vocab_size:
            raise ConfigError(f"special token id {max(special)} is outside the vocabulary of {vocab_size}")
        if masking.static_copies < 0:
            raise ConfigError(
                f"data.masking.static_copies must be >= 0 (0 = dynamic masking), got {masking.static_copies}"
            )
        self.special = special
        self.masking = masking
        self.seed = int(seed)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.vocab_size = int(vocab_size)
        self.selector = selector
        # A lookup table is faster than np.isin for marking special tokens in a batch.
        self._is_special = np.zeros(self.vocab_size, dtype=bool)
        self._is_special[list(special)] = True
        self.replacement_ids = np.flatnonzero(~self._is_special).astype(np.int64)
        if token_weights is not None:
            token_weights = np.asarray(token_weights, dtype=np.float64)
            if token_weights.shape != (self.vocab_size,) or not (token_weights > 0).all():
                raise ConfigError(f"token_weights must be {self.vocab_size} positive numbers, one per vocabulary id")
        self.token_weights = token_weights

    def __call__(self, examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Batch:
        examples = flatten_bins(examples)
        rows = self.inputs(examples)
        masked, labels = self.mask(rows)
        return self.assemble(examples, rows, masked, labels)

    def mask(
        self, rows: CollatedInputs, selector: str | Selector | None = None, starts: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(masked ids, labels) of padded rows under this collator's masking config, keyed by (seed, epoch,
        index); `selector` and unit `starts` override the collator's own selection."""
        return mask_tokens(
            rows.ids,
            rows.special_mask,
            seed=self.seed,
            epoch=rows.epoch,
            index=rows.index,
            config=self.masking,
            mask_id=self.special.mask,
            replacement_ids=self.replacement_ids,
            selector=self.selector if selector is None else selector,
            starts=starts,
            position_weights=None if self.token_weights is None else self.token_weights[rows.ids],
        )

    def inputs(self, examples: Sequence[dict[str, Any]]) -> CollatedInputs:
        """Pad, check and key the examples: everything masking needs, shared by every collator."""
        if not examples:
            raise DataError("cannot collate an empty list of examples")
        try:
            index = np.fromiter((int(e["index"]) for e in examples), dtype=np.int64, count=len(examples))
        except KeyError:
            raise DataError("pretraining examples need an 'index' (it seeds the mask); use NspDataset") from None
        epoch = np.fromiter((int(e.get("epoch", 0)) for e in examples), dtype=np.int64, count=len(examples))
        if self.masking.static_copies > 0:
            epoch = epoch % self.masking.static_copies
        ids, lengths = pad_batch([e["input_ids"] for e in examples], self.special.pad, self.pad_to_multiple_of)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise DataError(
                f"token id {int(ids.max())} is outside the vocabulary of {self.vocab_size}; "
                "the shards and the tokenizer or model do not match"
            )
        attention = np.arange(ids.shape[1])[None, :] < lengths[:, None]
        return CollatedInputs(index, epoch, ids, lengths, attention, self._is_special[ids] | ~attention)

    def assemble(
        self, examples: Sequence[dict[str, Any]], rows: CollatedInputs, masked: np.ndarray, labels: np.ndarray
    ) -> Batch:
        """The `Batch` of masked ids and labels, with segment ids and sentence-pair labels when present."""
        batch = Batch(
            input_ids=torch.from_numpy(masked),
            attention_mask=torch.from_numpy(rows.attention.astype(np.int64)),
            labels=torch.from_numpy(labels),
            example_index=torch.from_numpy(rows.index),
        )
        if "token_type_ids" in examples[0]:
            types, _ = pad_batch([e["token_type_ids"] for e in examples], 0, self.pad_to_multiple_of)
            batch.token_type_ids = torch.from_numpy(types)
        else:
            batch.token_type_ids = torch.zeros_like(batch.input_ids)
        if "document_ids" in examples[0]:
            # Padding gets id 0; the attention mask leaves it out whatever its id.
            docs, _ = pad_batch([e["document_ids"] for e in examples], 0, self.pad_to_multiple_of)
            batch.extra["document_ids"] = torch.from_numpy(docs)
        if "next_sentence_label" in examples[0]:
            nsp = np.fromiter((int(e["next_sentence_label"]) for e in examples), dtype=np.int64, count=len(examples))
            batch.next_sentence_label = torch.from_numpy(nsp)
        return batch


class CausalLMCollator(PretrainingCollator):
    """Pads examples into a `Batch` for a causal (left-to-right) LM: the inputs unmasked, the labels the
    inputs themselves with IGNORE_INDEX at padding (Hugging Face's convention; the objective shifts).
    Nothing is masked, so no masking config is read: a `data.masking` section changes nothing."""

    def __init__(
        self, tokenizer: Tokenizer | SpecialIds, *, pad_to_multiple_of: int = 8, vocab_size: int | None = None
    ) -> None:
        # The default MaskingConfig keeps each example's own epoch (static_copies 0); seed keys no mask.
        super().__init__(
            tokenizer, MaskingConfig(), seed=0, pad_to_multiple_of=pad_to_multiple_of, vocab_size=vocab_size
        )

    def __call__(self, examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Batch:
        examples = flatten_bins(examples)
        rows = self.inputs(examples)
        labels = np.where(rows.attention, rows.ids, IGNORE_INDEX)
        return self.assemble(examples, rows, rows.ids, labels)
