"""The unit-flag sidecar of a shard directory: per-token flags (`unit_flags`) stored beside the shards.

Each shard gets `shard_NNNNN.units.npy` (uint8, one entry per token of that shard, same order), and
`shard_units.json`, written last, records the annotation source, the token count and the vocabulary
hash. The shard files are never touched; `bertzoo prepare --overwrite` replaces the whole directory,
sidecar included, so stale flags cannot outlive their tokens, and a sidecar whose token count or
vocabulary does not match its shards is not loaded.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import numpy as np

from bertzoo.data.shards import ShardedCorpus
from bertzoo.io import replace_atomically, write_atomic

__all__ = [
    "SIDECAR_FORMAT",
    "SIDECAR_META",
    "SIDECAR_VERSION",
    "UnitFlags",
    "corpus_vocab_sha",
    "load_unit_flags",
    "write_unit_flags",
]

SIDECAR_META = "shard_units.json"  # the `shard_` prefix: `prepare --overwrite` treats it as shard output
SIDECAR_FORMAT = "bertzoo-units"
SIDECAR_VERSION = 1


class UnitFlags:
    """Read-only view of the per-token flags of a shard directory, addressed like its tokens."""

    def __init__(self, arrays: list[np.ndarray], meta: dict[str, Any]) -> None:
        self._arrays = arrays
        self._base = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
        self.meta = meta

    @property
    def annotations(self) -> str:
        """The annotation source the flags came from (builtin:peoples-daily, a path, jieba, ...)."""
        return str(self.meta.get("annotations", ""))

    @property
    def num_tokens(self) -> int:
        return int(self._base[-1])

    def range(self, start: int, end: int) -> np.ndarray:
        """Flags of the tokens at global positions [start, end) (as `ShardedCorpus.token_range`)."""
        if not 0 <= start <= end <= self.num_tokens:
            raise IndexError(f"token range [{start}, {end}) outside 0..{self.num_tokens}")
        parts = []
        while start < end:
            k = int(np.searchsorted(self._base, start, side="right")) - 1
            stop = min(end, int(self._base[k + 1]))
            parts.append(self._arrays[k][start - self._base[k] : stop - self._base[k]])
            start = stop
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps are reopened in DataLoader workers (not copied); in-memory flags travel as they are.
        arrays = [a.filename if isinstance(a, np.memmap) and a.filename else np.asarray(a) for a in self._arrays]
        return {"arrays": arrays, "meta": self.meta}

    def __setstate__(self, state: dict[str, Any]) -> None:
        arrays = [np.load(a, mmap_mode="r", allow_pickle=False) if isinstance(a, str) else a for a in state["arrays"]]
        self.__init__(arrays, state["meta"])


def corpus_vocab_sha(corpus: ShardedCorpus) -> str:
    """The vocabulary hash the shards were tokenized with (the sidecar must carry the same)."""
    return str(corpus.meta.get("tokenizer", {}).get("vocab_sha256", ""))


def load_unit_flags(corpus: ShardedCorpus | str | os.PathLike) -> UnitFlags | None:
    """The sidecar flags of a shard directory, or None when there is none (or it is stale)."""
    if not isinstance(corpus, ShardedCorpus):
        corpus = ShardedCorpus(corpus)
    meta_path = corpus.path / SIDECAR_META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != SIDECAR_FORMAT
        or meta.get("format_version") != SIDECAR_VERSION
        or meta.get("num_tokens") != corpus.num_tokens
        or meta.get("vocab_sha256") != corpus_vocab_sha(corpus)
    ):
        return None
    arrays = []
    for shard in corpus.meta["shards"]:
        try:
            a = np.load(corpus.path / f"{shard['name']}.units.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if len(a) != shard["num_tokens"] or a.dtype != np.uint8:
            return None
        arrays.append(a)
    return UnitFlags(arrays, meta)


def write_unit_flags(corpus: ShardedCorpus, arrays: list[np.ndarray], meta: dict[str, Any]) -> None:
    """Store one flag array per shard, then `meta` as the sidecar's JSON (raises OSError on failure)."""
    (corpus.path / SIDECAR_META).unlink(missing_ok=True)  # invalid until every array is in place
    for shard, array in zip(corpus.meta["shards"], arrays, strict=True):
        replace_atomically(functools.partial(_save_npy, array=array), corpus.path / f"{shard['name']}.units.npy")
    write_atomic(corpus.path / SIDECAR_META, json.dumps(meta, indent=2) + "\n")


def _save_npy(path: str, array: np.ndarray) -> None:
    # Through a file object: given a path, np.save appends ".npy" to a temporary name that lacks it.
    with open(path, "wb") as f:
        np.save(f, array)
