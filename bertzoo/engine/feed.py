"""Micro-batches for the training loop: a DataLoader per epoch over the resumable sampler, epoch after
epoch, and the data position the loop has actually consumed, which is what a checkpoint records
(the sampler itself runs ahead while workers prefetch)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from bertzoo.batch import Batch
from bertzoo.engine.sampler import ResumableBatchSampler
from bertzoo.engine.signals import ignore_stop_signals
from bertzoo.errors import ConfigError


class BatchFeed:
    """`iter(feed)` yields collated micro-batches forever from the sampler's current position.

    `epoch` and `offset` (examples of the epoch, over all ranks) say where the loop stands: set from
    the sampler when iteration starts and advanced by one global batch per batch handed out.
    `num_workers` > 0 loads in worker processes, started afresh each epoch so the dataset's
    `set_epoch` reaches them.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: ResumableBatchSampler,
        collate_fn: Callable[[list[dict[str, Any]]], Batch],
        *,
        num_workers: int,
        pin_memory: bool,
        seed: int,
        rank: int,
    ) -> None:
        self.dataset = dataset
        self.sampler = sampler
        self.collate_fn = collate_fn
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.seed = seed
        self.rank = rank
        self.epoch = 0
        self.offset = 0

    def sync_with_sampler(self) -> None:
        """Take the sampler's position as the consumed one (after it was restored from a checkpoint)."""
        self.epoch, self.offset = self.sampler.epoch, self.sampler.offset

    def position(self) -> dict[str, int]:
        """The consumed position as the sampler's state dict, for `trainer_state.json`."""
        return {
            "seed": self.sampler.seed,
            "epoch": self.epoch,
            "offset": self.offset,
            "num_examples": self.sampler.num_examples,
        }

    def epoch_ahead(self) -> int:
        """The epoch the next batch comes from (the current one, or the next when it is used up)."""
        s = self.sampler
        end = min(s.num_examples, s.batches_per_epoch() * s.global_batch_size)
        return self.epoch + (1 if self.offset >= end else 0)

    def _generator(self, epoch: int) -> torch.Generator:
        # The DataLoader draws its worker base seed from this generator; with none it would draw from the
        # global RNG, and a resumed run (which creates its loader at a different moment) would diverge.
        g = torch.Generator()
        g.manual_seed((self.seed * 1_000_003 + self.rank * 7919 + epoch) % 2**63)
        return g

    def __iter__(self) -> Iterator[Batch]:
        empty_epochs = 0
        while True:
            if self.sampler.exhausted:
                self.sampler.set_epoch(self.sampler.epoch + 1)
            epoch = self.sampler.epoch
            if hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(epoch)
            self.epoch, self.offset = epoch, self.sampler.offset
            loader = DataLoader(
                self.dataset,
                batch_sampler=self.sampler,
                collate_fn=self.collate_fn,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                generator=self._generator(epoch),
                worker_init_fn=ignore_stop_signals if self.num_workers else None,
            )
            produced = 0
            for batch in loader:
                produced += 1
                self.offset = min(self.sampler.num_examples, self.offset + self.sampler.global_batch_size)
                yield batch
            empty_epochs = empty_epochs + 1 if produced == 0 else 0
            if empty_epochs > 1:
                raise ConfigError("the data loader produced no batches; check the dataset and train.batch_size")
