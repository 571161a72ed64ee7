"""Counter-based randomness: every random number is a pure function of its key.

A draw depends only on (seed, epoch, example index, position, stream), never on which other
examples share its batch, how many DataLoader workers exist or how many processes train. That is
what makes masking reproducible across batch sizes and exactly resumable.

The per-position generator is splitmix64: the key (seed, epoch, index, stream) is hashed into a
64-bit state `k`, and position `p` gets `mix(k + (p + 1) * GOLDEN)`, i.e. the p-th output of a
splitmix64 sequence started at `k`. It is vectorised with numpy uint64 arithmetic (wrap-around
multiplication is exactly what the hash needs).
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["KeyedRNG", "hash64", "integers", "stream_id", "uniform"]

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
# Distinct odd constants per key component, so (seed=1, epoch=2) and (seed=2, epoch=1) differ.
_PART = [np.uint64(c) for c in (0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3)]
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))
_TO_UNIT = 2.0**-53


def _u64(x: int | np.ndarray) -> np.ndarray:
    """Any integer (or integer array, negatives included) as uint64 with two's-complement wrap."""
    if isinstance(x, (int, np.integer)):
        return np.asarray(int(x) & _MASK64, dtype=np.uint64)
    a = np.asarray(x)
    if a.dtype == np.uint64:
        return a
    if a.dtype.kind not in "iu":
        raise TypeError(f"random keys must be integers, got dtype {a.dtype}")
    return a.astype(np.int64).astype(np.uint64) if a.dtype.kind == "i" else a.astype(np.uint64)


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser: a bijective avalanche hash of 64-bit words."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def stream_id(stream: int | str) -> int:
    """A stream name or number as a 64-bit integer (names hash stably, independent of PYTHONHASHSEED)."""
    if isinstance(stream, str):
        return int.from_bytes(hashlib.sha1(stream.encode("utf-8")).digest()[:8], "little")
    return int(stream) & _MASK64


def hash64(
    seed: int | np.ndarray, epoch: int | np.ndarray, index: int | np.ndarray, stream: int | str = 0
) -> np.ndarray:
    """The 64-bit key of (seed, epoch, index, stream); arrays broadcast."""
    with np.errstate(over="ignore"):
        h = _mix(_u64(seed) + _PART[0])
        h = _mix(h ^ _mix(_u64(stream_id(stream)) + _PART[1]))
        h = _mix(h ^ _mix(_u64(epoch) + _PART[2]))
        return _mix(h ^ _mix(_u64(index) + _PART[3]))


def _bits(seed, epoch, index, pos, stream) -> np.ndarray:
    # The key is computed on the (small) broadcast shape of its parts; only the last step runs on
    # the full (index x position) grid, which keeps a 32x128 batch at a few microseconds per stream.
    k = hash64(seed, epoch, index, stream)
    with np.errstate(over="ignore"):
        return _mix(k + (_u64(pos) + np.uint64(1)) * _GOLDEN)


def uniform(
    seed: int | np.ndarray,
    epoch: int | np.ndarray,
    index: int | np.ndarray,
    pos: int | np.ndarray,
    stream: int | str = 0,
) -> np.ndarray:
    """Uniform float64 in [0, 1) for every broadcast (seed, epoch, index, pos) under `stream`.

    Typical use: `uniform(seed, epoch, index[:, None], np.arange(seq_len)[None, :], "select")`.
    """
    return (_bits(seed, epoch, index, pos, stream) >> _S11).astype(np.float64) * _TO_UNIT


def integers(
    seed: int | np.ndarray,
    epoch: int | np.ndarray,
    index: int | np.ndarray,
    pos: int | np.ndarray,
    high: int | np.ndarray,
    stream: int | str = 0,
) -> np.ndarray:
    """Integers uniform in [0, high) (int64), keyed like `uniform`; bias is below high / 2**53."""
    u = uniform(seed, epoch, index, pos, stream)
    return np.minimum(np.floor(u * high), np.asarray(high) - 1).astype(np.int64)


class KeyedRNG(np.random.Generator):
    """A `numpy.random.Generator` seeded by (seed, epoch, index, stream) for per-example scalar draws.

    Use it for decisions that are naturally sequential (how long a span is, which document to take)
    while keeping them independent of everything except the key.
    """

    def __init__(self, seed: int, epoch: int, index: int, stream: int | str = 0) -> None:
        # SeedSequence only accepts non-negative entropy; wrap negatives like the hash does.
        entropy = [int(seed) & _MASK64, int(epoch) & _MASK64, int(index) & _MASK64, stream_id(stream)]
        super().__init__(np.random.PCG64(np.random.SeedSequence(entropy)))


def epoch_permutation(num_examples: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The example order of one epoch (identity when `shuffle` is false)."""
    if not shuffle:
        return np.arange(num_examples, dtype=np.int64)
    # SeedSequence mixes the (seed, epoch) pair properly; seed + epoch would make run (s, e+1) equal
    # to run (s+1, e).
    rng = np.random.default_rng([seed, epoch])
    return rng.permutation(num_examples).astype(np.int64)
