"""ERNIE (Tsinghua)'s batches: BERT's token masking plus the dEA corruption of the entity alignments.

Each example carries `entity_ids` (`bertzoo.knowledge.linking.EntityDataset`): per token the KG entity at the
first token of a linked mention, -1 elsewhere. Of the aligned positions, as in the paper, 5% get another
entity (uniform over the other entities of the table), 15% are hidden (the input says no entity, so the model
must find it from the text) and 80% are kept; every aligned position is a dEA target with its true entity.
The draws are keyed by (seed, epoch, example index, position) through `bertzoo.data.rng`, like the token
mask, so a batch is the same whatever its neighbours, worker count or resume point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import bertzoo.data.rng as rng
from bertzoo.batch import IGNORE_INDEX, Batch, pad_batch
from bertzoo.config import MaskingConfig
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator, flatten_bins
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError, DataError

__all__ = ["ENTITY_MASK", "ENTITY_REPLACE", "EntityMaskingCollator", "corrupt_entities"]

NO_ENTITY = -1
ENTITY_REPLACE = 0.05  # the paper's shares of the aligned positions
ENTITY_MASK = 0.15


def check_shares(entity_replace: float, entity_mask: float) -> None:
    """ConfigError unless both shares are in [0, 1] and together at most 1."""
    if entity_replace < 0 or entity_mask < 0 or entity_replace + entity_mask > 1:
        raise ConfigError(
            "objective_args.entity_replace and entity_mask must be >= 0 with a sum of at most 1 (the rest of the "
            f"aligned entities is kept), got {entity_replace} and {entity_mask}"
        )


def corrupt_entities(
    entity_ids: np.ndarray,
    *,
    seed: int,
    epoch: np.ndarray,
    index: np.ndarray,
    num_entities: int,
    entity_replace: float = ENTITY_REPLACE,
    entity_mask: float = ENTITY_MASK,
) -> tuple[np.ndarray, np.ndarray]:
    """(corrupted input, labels) of padded entity ids (batch, seq), -1 = none: aligned positions are replaced
    by another entity (share `entity_replace`), hidden as -1 (`entity_mask`) or kept; labels are the true
    entity at every aligned position and IGNORE_INDEX elsewhere. Keyed by (seed, epoch, index, position)."""
    aligned = entity_ids >= 0
    labels = np.where(aligned, entity_ids, IGNORE_INDEX).astype(np.int64)
    out = entity_ids.astype(np.int64, copy=True)
    if not aligned.any():
        return out, labels
    epoch = np.asarray(epoch, dtype=np.int64)[:, None]
    index = np.asarray(index, dtype=np.int64)[:, None]
    pos = np.arange(entity_ids.shape[1], dtype=np.int64)[None, :]
    u = rng.uniform(seed, epoch, index, pos, "dea")
    # Another entity needs a second one to exist; with a single entity a "replaced" position is kept.
    replace = aligned & (u < entity_replace) if num_entities > 1 else np.zeros_like(aligned)
    hide = aligned & (u >= entity_replace) & (u < entity_replace + entity_mask)
    if replace.any():
        other = rng.integers(seed, epoch, index, pos, num_entities - 1, "dea-entity")
        other = other + (other >= entity_ids)  # uniform over the entities other than the true one
        out[replace] = other[replace]
    out[hide] = NO_ENTITY
    return out, labels


class EntityMaskingCollator(PretrainingCollator):
    """PretrainingCollator (the same token masking, keyed the same way) plus `extra["entity_ids"]` (the
    corrupted entity input, -1 = none, padding -1) and `extra["entity_labels"]` (the true entities,
    IGNORE_INDEX elsewhere), both (batch, seq) int64."""

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        masking: MaskingConfig,
        seed: int,
        *,
        num_entities: int,
        entity_replace: float = ENTITY_REPLACE,
        entity_mask: float = ENTITY_MASK,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, masking, seed, **kwargs)
        check_shares(entity_replace, entity_mask)
        if num_entities < 1:
            raise ConfigError(f"the entity table has {num_entities} entities; ERNIE-THU needs a knowledge graph")
        self.num_entities = int(num_entities)
        self.entity_replace = float(entity_replace)
        self.entity_mask = float(entity_mask)

    def __call__(self, examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Batch:
        examples = flatten_bins(examples)
        rows = self.inputs(examples)
        masked, labels = self.mask(rows)
        batch = self.assemble(examples, rows, masked, labels)
        links = []
        for e in examples:
            if "entity_ids" not in e:
                raise DataError("ERNIE-THU examples need 'entity_ids' (entity links); use EntityDataset")
            ids = np.asarray(e["entity_ids"], dtype=np.int64)
            if ids.shape != (len(e["input_ids"]),):
                raise DataError(f"entity_ids has {ids.shape} values for {len(e['input_ids'])} tokens")
            links.append(ids)
        padded, _ = pad_batch(links, NO_ENTITY, self.pad_to_multiple_of)
        padded = padded[:, : rows.ids.shape[1]]
        if padded.size and padded.max() >= self.num_entities:
            raise DataError(
                f"entity id {int(padded.max())} is outside the table of {self.num_entities} entities; the links were "
                "made with another knowledge graph"
            )
        entity_ids, entity_labels = corrupt_entities(
            padded,
            seed=self.seed,
            epoch=rows.epoch,
            index=rows.index,
            num_entities=self.num_entities,
            entity_replace=self.entity_replace,
            entity_mask=self.entity_mask,
        )
        batch.extra["entity_ids"] = torch.from_numpy(entity_ids)
        batch.extra["entity_labels"] = torch.from_numpy(entity_labels)
        return batch
