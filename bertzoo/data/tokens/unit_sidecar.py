"""Per-token sidecars of a shard directory: one value per shard token, stored beside the shards.

Two kinds exist: the unit flags (`unit_flags`: word/phrase/entity starts, uint8, ERNIE 1.0 and
SpanBERT) and the entity alignment (`entity_link`: the KG entity at the first token of each linked
mention, int32, -1 elsewhere; ERNIE from Tsinghua). Each shard gets `shard_NNNNN.<kind>.npy` (one
entry per token of that shard, same order), and `shard_<kind>.json`, written last, records the source,
the token count and the vocabulary hash. The shard files are never touched; `bertzoo prepare
--overwrite` replaces the whole directory, sidecars included, so stale values cannot outlive their
tokens, and a sidecar whose token count or vocabulary does not match its shards is not loaded.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.io import replace_atomically, write_atomic

__all__ = [
    "ENTITIES",
    "SIDECAR_FORMAT",
    "SIDECAR_META",
    "SIDECAR_VERSION",
    "UNITS",
    "SidecarKind",
    "TokenSidecar",
    "UnitFlags",
    "corpus_vocab_sha",
    "load_sidecar",
    "load_unit_flags",
    "write_sidecar",
    "write_unit_flags",
]


@dataclass(frozen=True)
class SidecarKind:
    """What one kind of per-token sidecar is called on disk and what its arrays hold."""

    name: str  # shard_NNNNN.<name>.npy and shard_<name>.json; the `shard_` prefix makes it shard output
    dtype: type
    version: int = 1

    @property
    def meta_name(self) -> str:
        return f"shard_{self.name}.json"

    @property
    def format(self) -> str:
        return f"bertzoo-{self.name}"

    def array_name(self, shard: str) -> str:
        return f"{shard}.{self.name}.npy"


UNITS = SidecarKind("units", np.uint8)
ENTITIES = SidecarKind("entities", np.int32)
SIDECAR_META = UNITS.meta_name
SIDECAR_FORMAT = UNITS.format
SIDECAR_VERSION = UNITS.version


class TokenSidecar:
    """Read-only view of one per-token sidecar of a shard directory, addressed like its tokens."""

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
        """Values of the tokens at global positions [start, end) (as `ShardedCorpus.token_range`)."""
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


def load_sidecar(corpus: ShardedCorpus | str | os.PathLike, kind: SidecarKind = UNITS) -> TokenSidecar | None:
    """The `kind` sidecar of a shard directory, or None when there is none (or it is stale)."""
    if not isinstance(corpus, ShardedCorpus):
        corpus = ShardedCorpus(corpus)
    try:
        meta = json.loads((corpus.path / kind.meta_name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != kind.format
        or meta.get("format_version") != kind.version
        or meta.get("num_tokens") != corpus.num_tokens
        or meta.get("vocab_sha256") != corpus_vocab_sha(corpus)
    ):
        return None
    arrays = []
    for shard in corpus.meta["shards"]:
        try:
            a = np.load(corpus.path / kind.array_name(shard["name"]), mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if len(a) != shard["num_tokens"] or a.dtype != kind.dtype:
            return None
        arrays.append(a)
    return TokenSidecar(arrays, meta)


def write_sidecar(
    corpus: ShardedCorpus, arrays: list[np.ndarray], meta: dict[str, Any], kind: SidecarKind = UNITS
) -> None:
    """Store one array per shard, then `meta` (stamped with the kind's format) as the sidecar's JSON
    (raises OSError on failure)."""
    (corpus.path / kind.meta_name).unlink(missing_ok=True)  # invalid until every array is in place
    for shard, array in zip(corpus.meta["shards"], arrays, strict=True):
        array = np.asarray(array, dtype=kind.dtype)
        replace_atomically(functools.partial(_save_npy, array=array), corpus.path / kind.array_name(shard["name"]))
    meta = {**meta, "format": kind.format, "format_version": kind.version}
    write_atomic(corpus.path / kind.meta_name, json.dumps(meta, indent=2) + "\n")


UnitFlags = TokenSidecar  # the unit-flag sidecar's view, by the name ERNIE 1.0 and SpanBERT use


def load_unit_flags(corpus: ShardedCorpus | str | os.PathLike) -> UnitFlags | None:
    """The unit-flag sidecar of a shard directory, or None when there is none (or it is stale)."""
    return load_sidecar(corpus, UNITS)


def write_unit_flags(corpus: ShardedCorpus, arrays: list[np.ndarray], meta: dict[str, Any]) -> None:
    """Store the unit flags of each shard and their JSON (raises OSError on failure)."""
    write_sidecar(corpus, arrays, meta, UNITS)


def _save_npy(path: str, array: np.ndarray) -> None:
    # Through a file object: given a path, np.save appends ".npy" to a temporary name that lacks it.
    with open(path, "wb") as f:
        np.save(f, array)
