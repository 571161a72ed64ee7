"""A batch sampler whose order depends only on (seed, epoch, position), so runs resume exactly.

Each epoch shuffles all examples with a generator seeded from (seed, epoch). The permutation is cut
into *global* batches of `batch_size * world_size` consecutive indices and rank r takes the r-th
slice of each. The position saved in a checkpoint is (epoch, examples of the permutation consumed),
which means the same thing for any world size, so a run can resume on a different number of
processes and still see every example of the epoch exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from bertzoo.data.rng import epoch_permutation  # the order is a data fact: datasets need it too
from bertzoo.errors import CheckpointError, ConfigError


class EpochSelection(Protocol):
    """Which examples each epoch trains on when not all of them (`bertzoo.data.tasks.mixture.Mixture`): `size`
    indices per epoch, a pure function of (seed, epoch)."""

    size: int

    def epoch_indices(self, seed: int, epoch: int) -> np.ndarray: ...


def examples_per_epoch(dataset: Any) -> int:
    """Examples one epoch of `dataset` trains on: its `selection`'s size (a multi-task mixture), else all."""
    selection = getattr(dataset, "selection", None)
    return int(selection.size) if selection is not None else len(dataset)


class ResumableBatchSampler:
    """Yields this rank's lists of example indices for the current epoch, from the saved position on.

    Call `set_epoch(e)` before iterating epoch e (it rewinds to the epoch start); `state_dict()` /
    `load_state_dict()` save and restore the position; `skip(n)` drops n global batches. With
    `drop_last=False` the last global batch is short for a single process, and padded by wrapping
    around the permutation when `world_size > 1` so every rank gets a full batch (DDP needs equal
    step counts on all ranks).

    With a `selection` (a multi-task mixture) an epoch is the `selection.size` indices it picks for
    that epoch, shuffled; `num_examples` is then that size, and the position counts entries of them.
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        *,
        seed: int,
        shuffle: bool = True,
        drop_last: bool = True,
        rank: int = 0,
        world_size: int = 1,
        selection: EpochSelection | None = None,
    ) -> None:
        if selection is not None and selection.size != num_examples:
            raise ValueError(f"num_examples={num_examples} must be the selection's size {selection.size}")
        if num_examples < 1:
            raise ConfigError("the training dataset is empty; check the data path or the preparation step")
        if batch_size < 1:
            raise ConfigError(f"train.batch_size must be >= 1, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not within world size {world_size}; fix the launcher")
        global_batch = batch_size * world_size
        if drop_last and num_examples < global_batch:
            raise ConfigError(
                f"the dataset has {num_examples} examples, fewer than one global batch of {global_batch} "
                f"(batch_size {batch_size} x {world_size} processes); lower train.batch_size or add data"
            )
        self.num_examples = num_examples
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.selection = selection
        self.epoch = 0
        self.offset = 0  # entries of this epoch's permutation consumed, by all ranks together

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def _end(self) -> int:
        """Offset after the last batch of the epoch (drop_last leaves the tail out)."""
        if self.drop_last:
            return self.offset + (self.num_examples - self.offset) // self.global_batch_size * self.global_batch_size
        return self.num_examples

    def __len__(self) -> int:
        """Batches left in the current epoch from the current position."""
        remaining = max(0, self._end() - self.offset)
        return -(-remaining // self.global_batch_size)

    @property
    def exhausted(self) -> bool:
        """True when no batch of the current epoch is left (the next epoch should be selected)."""
        return self.offset >= self._end()

    def batches_per_epoch(self) -> int:
        """Batches in a whole epoch started from its beginning."""
        gb = self.global_batch_size
        return self.num_examples // gb if self.drop_last else -(-self.num_examples // gb)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch to draw next and rewind to its beginning."""
        self.epoch = int(epoch)
        self.offset = 0

    def skip(self, n: int) -> None:
        """Drop the next `n` global batches of the current epoch (without producing them)."""
        if n < 0:
            raise ValueError("skip count must be >= 0")
        self.offset = min(self.num_examples, self.offset + n * self.global_batch_size)

    def state_dict(self) -> dict[str, Any]:
        """Position as plain JSON-able values (independent of world size)."""
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "offset": self.offset,
            "num_examples": self.num_examples,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position saved by `state_dict` (possibly by a run with another world size)."""
        try:
            num, epoch, offset, seed = (int(state[k]) for k in ("num_examples", "epoch", "offset", "seed"))
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                f"sampler state {state!r} is malformed; resume from another checkpoint or start fresh"
            ) from None
        if num != self.num_examples:
            raise CheckpointError(
                f"the checkpoint was taken on a dataset of {num} examples but this one has "
                f"{self.num_examples}; resume with the same data or start a fresh run"
            )
        if not 0 <= offset <= num:
            raise CheckpointError(f"sampler offset {offset} is outside 0..{num}; the checkpoint is corrupted")
        # The saved seed wins: a run resumes with the data order it started with.
        self.seed, self.epoch, self.offset = seed, epoch, offset

    def epoch_order(self) -> np.ndarray:
        """All example indices of the current epoch in the order they are served; consecutive runs of
        `global_batch_size` entries form the global batches."""
        order = epoch_permutation(self.num_examples, self.seed, self.epoch, self.shuffle)
        return order if self.selection is None else self._selected()[order]

    def _selected(self) -> np.ndarray:
        """The example indices the selection picks for the current epoch."""
        chosen = self.selection.epoch_indices(self.seed, self.epoch)
        if len(chosen) != self.num_examples:
            raise ValueError(f"the selection gave {len(chosen)} indices for an epoch of {self.num_examples}")
        return chosen

    def __iter__(self) -> Iterator[list[int]]:
        # An epoch already consumed to its end starts again from the beginning (plain-sampler behaviour
        # when set_epoch is not called). The DataLoader may run ahead of the training loop, so the loop
        # tracks the position of batches it actually consumed rather than relying on `self.offset`.
        if self.exhausted and self.offset > 0:
            self.offset = 0
        perm = self.epoch_order()
        gb = self.global_batch_size
        end = self._end()
        while self.offset < end:
            chunk = perm[self.offset : self.offset + gb]
            if len(chunk) < gb and self.world_size > 1:
                chunk = np.concatenate([chunk, np.resize(perm, gb - len(chunk))])
            self.offset = min(self.offset + gb, self.num_examples)
            mine = chunk[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
            yield mine.tolist()


def bucketed_order(
    lengths: np.ndarray, global_batch: int, seed: int, epoch: int, chunk_batches: int = 50
) -> np.ndarray:
    """One epoch's example order with similar lengths batched together.

    Shuffle everything, set aside `n % global_batch` random examples as the (short) last batch, cut
    the rest into chunks of `chunk_batches` batches, sort each chunk by length, form batches of
    consecutive entries and shuffle the order of the batches. Batches are length-homogeneous (little
    padding) yet differ from epoch to epoch, and the order depends only on (seed, epoch).
    """
    n = len(lengths)
    perm = epoch_permutation(n, seed, epoch, shuffle=True)
    tail = n % global_batch
    body, rest = perm[: n - tail], perm[n - tail :]
    chunk = global_batch * max(1, chunk_batches)
    pieces = []
    for start in range(0, len(body), chunk):
        idx = body[start : start + chunk]
        pieces.append(idx[np.argsort(lengths[idx], kind="stable")])
    if not pieces:
        return rest.astype(np.int64)
    batches = np.concatenate(pieces).reshape(-1, global_batch)
    # A separate stream (third seed word), so the batch order is not tied to the example permutation.
    batch_order = np.random.default_rng([seed, epoch, 1]).permutation(len(batches))
    return np.concatenate([batches[batch_order].reshape(-1), rest]).astype(np.int64)


class LengthBucketSampler(ResumableBatchSampler):
    """`ResumableBatchSampler` whose epoch order groups examples of similar length (`bucketed_order`),
    for dynamic padding with little waste. Same state, same resume semantics: the position is the
    number of entries of the epoch's order consumed. `lengths` are every example's; with a `selection`
    the epoch's selected examples are bucketed by their own lengths."""

    def __init__(
        self,
        lengths,
        batch_size: int,
        *,
        seed: int,
        drop_last: bool = True,
        rank: int = 0,
        world_size: int = 1,
        chunk_batches: int = 50,
        selection: EpochSelection | None = None,
    ) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        super().__init__(
            len(self.lengths) if selection is None else selection.size,
            batch_size,
            seed=seed,
            shuffle=True,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            selection=selection,
        )
        if chunk_batches < 1:
            raise ConfigError(f"chunk_batches must be >= 1, got {chunk_batches}")
        self.chunk_batches = chunk_batches
        self._cache: tuple[tuple[int, int], np.ndarray] | None = None

    def epoch_order(self) -> np.ndarray:
        key = (self.seed, self.epoch)
        if self._cache is None or self._cache[0] != key:
            gb, chunks = self.global_batch_size, self.chunk_batches
            if self.selection is None:
                order = bucketed_order(self.lengths, gb, self.seed, self.epoch, chunks)
            else:
                chosen = self._selected()
                order = chosen[bucketed_order(self.lengths[chosen], gb, self.seed, self.epoch, chunks)]
            self._cache = (key, order)
        return self._cache[1]
