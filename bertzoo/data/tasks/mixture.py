"""Multi-task mixing (T5: Raffel et al. 2020, section 3.5.2): several datasets trained as one, each task's
share of the training examples set by its mixing rate.

Examples-proportional mixing with an artificial limit K: task t with n_t examples gets the rate
r_t = min(n_t, K) / sum_s min(n_s, K), so one huge dataset cannot crowd out the others. Temperature
scaling raises each min(n_t, K) to 1 / T before normalising (T = 1: proportional; larger T moves the
rates towards equal mixing). Fixed rates (weights, normalised) replace both.

T5 samples every batch from the mixture; bertzoo trains in epochs, so an epoch is made of
N = sum_t min(n_t, K) examples (what the capped datasets hold together), of which task t takes
m_t = N r_t (largest-remainder rounding, so the counts sum to N; with T = 1 and no fixed rates
m_t = min(n_t, K) exactly). A task walks through its examples in passes, a fresh permutation per pass,
m_t at a time, each epoch going on where the one before stopped: a task capped by K meets every example
once before any repeats, and an upsampled one repeats each example m_t // n_t or m_t // n_t + 1 times in
an epoch. Which examples an epoch takes depends on (seed, epoch) alone, so a resumed run, or any number
of processes, draws the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertzoo.data.rng import KeyedRNG
from bertzoo.errors import ConfigError

__all__ = ["Mixture", "epoch_counts", "mixing_rates"]

_STREAM = "mixture"


def mixing_rates(
    sizes: Sequence[int], *, limit: int | None = None, temperature: float = 1.0, rates: Sequence[float] | None = None
) -> np.ndarray:
    """The rates (summing to 1) of tasks with `sizes` examples: `rates` normalised when given, else
    min(n, limit) ** (1 / temperature), normalised."""
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"every task of a mixture needs training examples; sizes {list(sizes)}")
    if rates is not None:
        if len(rates) != len(sizes) or min(rates) <= 0:
            raise ConfigError(f"mixture rates must be one positive number per task, got {list(rates)}")
        weights = np.asarray(rates, dtype=np.float64)
    else:
        if limit is not None and limit < 1:
            raise ConfigError(f"data.mixture_limit must be >= 1 or null (no limit), got {limit}")
        if not temperature > 0:
            raise ConfigError(f"data.mixture_temperature must be > 0 (1 = examples-proportional), got {temperature}")
        capped = np.minimum(np.asarray(sizes, dtype=np.float64), float(limit) if limit is not None else np.inf)
        # Scaled by the largest first: x ** (1 / T) of large counts and small T would overflow.
        weights = (capped / capped.max()) ** (1.0 / temperature)
    return weights / weights.sum()


def epoch_counts(sizes: Sequence[int], rates: np.ndarray, limit: int | None = None) -> np.ndarray:
    """Examples of each task in one epoch: N = sum min(n, limit) divided by `rates`, rounded by largest
    remainder (ties to the earlier task) so the counts sum to N."""
    total = int(sum(min(n, limit) if limit is not None else n for n in sizes))
    quotas = total * np.asarray(rates, dtype=np.float64)
    counts = np.floor(quotas).astype(np.int64)
    left = total - int(counts.sum())
    order = np.argsort(-(quotas - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


class Mixture:
    """Which examples of a multi-task training set each epoch trains on (see the module doc).

    `groups[t]` holds the indices (into the whole example list) of task t's examples, `counts[t]` how many
    of them an epoch draws. `epoch_indices(seed, epoch)` gives the `size` indices of an epoch, task by
    task (the sampler shuffles them); `bertzoo.engine.sampler` serves them in place of all examples."""

    def __init__(self, groups: Sequence[np.ndarray], counts: Sequence[int], names: Sequence[str] = ()) -> None:
        if len(groups) != len(counts):
            raise ValueError(f"{len(groups)} task groups but {len(counts)} counts")
        self.groups = [np.asarray(g, dtype=np.int64) for g in groups]
        self.counts = [int(c) for c in counts]
        self.names = list(names) or [str(t) for t in range(len(groups))]
        for name, group, count in zip(self.names, self.groups, self.counts, strict=True):
            if len(group) == 0:
                raise ConfigError(f"mixture task {name!r} has no training examples; check its data")
            if count < 1:
                raise ConfigError(
                    f"mixture task {name!r} gets no example per epoch at its mixing rate; raise its rate or "
                    "data.mixture_temperature"
                )
        self.size = sum(self.counts)

    @classmethod
    def build(
        cls,
        groups: Sequence[np.ndarray],
        names: Sequence[str] = (),
        *,
        limit: int | None = None,
        temperature: float = 1.0,
        rates: Sequence[float] | None = None,
    ) -> Mixture:
        """A mixture with T5's examples-proportional rates (or fixed `rates`) over `groups`."""
        sizes = [len(g) for g in groups]
        shares = mixing_rates(sizes, limit=limit, temperature=temperature, rates=rates)
        return cls(groups, epoch_counts(sizes, shares, limit), names)

    def epoch_indices(self, seed: int, epoch: int) -> np.ndarray:
        """The example indices epoch `epoch` trains on (int64, `size` of them, grouped by task)."""
        parts = []
        for t, (group, m) in enumerate(zip(self.groups, self.counts, strict=True)):
            n = len(group)
            start, end = epoch * m, (epoch + 1) * m  # this epoch's slice of the task's endless pass sequence
            for p in range(start // n, (end - 1) // n + 1):
                perm = KeyedRNG(seed, p, t, _STREAM).permutation(n)
                parts.append(group[perm[max(start, p * n) - p * n : min(end, (p + 1) * n) - p * n]])
        return np.concatenate(parts).astype(np.int64)

    def shares(self) -> dict[str, float]:
        """Each task's share of an epoch."""
        return {name: count / self.size for name, count in zip(self.names, self.counts, strict=True)}
