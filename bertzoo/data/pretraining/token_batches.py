"""Token-budget batches (RoBERTa's DOC-SENTENCES): vary the number of sequences per batch so that
every batch holds about the same number of tokens.

DOC-SENTENCES examples never cross a document boundary, so the last example of a document is
often short. RoBERTa "dynamically increases the batch size in these cases to achieve a similar
number of total tokens as FULL-SENTENCES". fairseq does it by sorting examples by length and
cutting batches under a `max_tokens` budget of *padded* tokens (longest sequence x count); so does
`pack_token_budget`.

The result is a dataset whose item i is a *bin* of examples (a list of example dicts), not a
sampler: the Trainer's resumable, world-size independent sampler then shuffles and shards bins
exactly as it does examples, and a checkpoint's position means the same thing on resume. The
collator flattens bins, so with `train.batch_size: 1` a micro-batch is one bin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import bertzoo.data.rng as rng_mod
from bertzoo.errors import ConfigError, DataError

__all__ = ["TokenBudgetDataset", "pack_token_budget"]


def pack_token_budget(
    lengths: np.ndarray, tokens_per_batch: int, *, seed: int, epoch: int, pad_to_multiple_of: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Group examples into bins of at most `tokens_per_batch` padded tokens.

    Examples are sorted by padded length (ties broken by a key of (seed, epoch, index), so equal
    lengths mix differently every epoch) and bins filled greedily: a bin of c examples whose
    longest is L costs c * L tokens. Returns (order, offsets): bin k holds the example indices
    `order[offsets[k]:offsets[k + 1]]`. Every example is in exactly one bin.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    m = max(1, int(pad_to_multiple_of))
    padded = -(-lengths // m) * m
    if len(lengths) and int(padded.max()) > tokens_per_batch:
        raise ConfigError(
            f"data.tokens_per_batch={tokens_per_batch} is smaller than the longest example "
            f"({int(padded.max())} tokens after padding to a multiple of {m}); "
            "raise data.tokens_per_batch (at least data.max_seq_len)"
        )
    tie = rng_mod.uniform(seed, epoch, np.arange(len(lengths), dtype=np.int64), 0, "token_batches/tie")
    order = np.lexsort((tie, padded)).astype(np.int64)  # ascending length: a bin's newest member is its longest
    offsets = [0]
    count = 0
    for j, length in enumerate(padded[order].tolist()):
        if count and (count + 1) * length > tokens_per_batch:
            offsets.append(j)
            count = 0
        count += 1
    if len(order):
        offsets.append(len(order))
    return order, np.asarray(offsets, dtype=np.int64)


class TokenBudgetDataset:
    """Wraps an example dataset (with `set_epoch`, `example_lengths`, `__getitem__`): item i is the
    list of examples of bin i of the current epoch (`pack_token_budget`).

    Like `NspDataset`, the length is fixed by epoch 0 (samplers fix the dataset size once): an epoch
    that packs into more bins drops a random subset of them, one with fewer repeats random bins.
    With a plan that does not change between epochs (RoBERTa: short_seq_prob 0) the bin count never
    changes and every example is seen exactly once per epoch.
    """

    def __init__(self, dataset: Any, tokens_per_batch: int, *, seed: int, pad_to_multiple_of: int = 8) -> None:
        if tokens_per_batch < 1:
            raise ConfigError(f"data.tokens_per_batch must be >= 1, got {tokens_per_batch}")
        self.dataset = dataset
        self.tokens_per_batch = int(tokens_per_batch)
        self.seed = int(seed)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.epoch = -1
        self._length = 0
        self.set_epoch(max(0, int(getattr(dataset, "epoch", 0))))

    def _bins(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        self.dataset.set_epoch(epoch)
        return pack_token_budget(
            self.dataset.example_lengths(),
            self.tokens_per_batch,
            seed=self.seed,
            epoch=epoch,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )

    def set_epoch(self, epoch: int) -> None:
        """Select epoch `epoch` of the wrapped dataset and pack its examples into bins."""
        epoch = int(epoch)
        if epoch == self.epoch:
            return
        if self.epoch == -1 and epoch != 0:
            self._length = len(self._bins(0)[1]) - 1
        order, offsets = self._bins(epoch)
        n = len(offsets) - 1
        if self.epoch == -1 and epoch == 0:
            self._length = n
        if self._length <= 0:
            raise DataError("the dataset yields no token-budget batch; add data")
        bins = np.arange(n)
        if n != self._length:
            g = rng_mod.KeyedRNG(self.seed, epoch, 0, "token_batches/resize")
            if n > self._length:
                bins = np.sort(g.choice(n, self._length, replace=False))
            else:
                bins = np.concatenate([bins, g.choice(n, self._length - n)])
        self.order, self.offsets, self.bins = order, offsets, bins
        self.epoch = epoch

    def __len__(self) -> int:
        return self._length

    def bin_indices(self, i: int) -> np.ndarray:
        """Example indices (into the wrapped dataset) of bin `i`."""
        if not 0 <= i < self._length:
            raise IndexError(f"bin {i} out of range 0..{self._length - 1}")
        k = int(self.bins[i])
        return self.order[self.offsets[k] : self.offsets[k + 1]]

    def __getitem__(self, i: int) -> list[dict[str, Any]]:
        return [self.dataset[int(j)] for j in self.bin_indices(int(i))]
