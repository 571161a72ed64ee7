"""The teacher's logits on a fixed training set, on disk, for repeated epochs (task distillation).

A cache is a directory with `logits.safetensors` ((features, classes), fp32) and `manifest.json`
naming the teacher (sha256 of its weights file) and the data (sha256 of every feature's token ids and
segment ids, in order). It is reused only when both match; a cache written for another teacher or
other data is an error naming the fix, never silently reused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bertzoo.batch import Batch
from bertzoo.engine.keyed_cache import matches, write

LOGITS = "logits.safetensors"
FORMAT = 1


def data_key(features) -> str:
    """sha256 over every feature's input ids and segment ids (and their lengths), in dataset order."""
    h = hashlib.sha256()
    for f in getattr(features, "features", features):
        for name in ("input_ids", "token_type_ids", "swapped_input_ids", "swapped_token_type_ids"):
            if name in f:
                array = np.ascontiguousarray(np.asarray(f[name], dtype=np.int64))
                h.update(name.encode() + len(array).to_bytes(8, "little") + array.tobytes())
    return h.hexdigest()


def teacher_logits(
    teacher: nn.Module,
    features,
    collate: Callable[[list], Batch],
    *,
    batch_size: int,
    device: torch.device,
) -> torch.Tensor:
    """(features, classes) fp32 logits of the teacher in eval mode, in dataset order."""
    from tqdm.auto import tqdm

    teacher.eval()
    rows = []
    n = len(features)
    with torch.inference_mode():
        for start in tqdm(range(0, n, batch_size), desc="teacher logits", unit="batch", leave=False):
            batch = collate([features[i] for i in range(start, min(n, start + batch_size))]).to(device)
            rows.append(teacher(batch).logits.float().cpu())
    return torch.cat(rows)


class LogitCache:
    """Cached teacher logits, looked up by the batch's `example_index` (feature indices)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def __call__(self, batch: Batch) -> torch.Tensor | None:
        if batch.example_index is None:
            return None
        return self.logits.to(batch.input_ids.device)[batch.example_index]


def open_cache(
    directory: str | Path, teacher_sha: str, data_sha: str, compute: Callable[[], torch.Tensor]
) -> tuple[LogitCache, bool]:
    """The cache at `directory`: read when its manifest names this teacher and data, written (atomically)
    from `compute()` when there is none; (cache, whether it was reused). A manifest for another teacher
    or other data is a ConfigError naming the fix."""
    directory = Path(directory)
    keys = {"teacher_sha256": teacher_sha, "data_sha256": data_sha}
    if matches(directory, keys, what="teacher cache", setting="teacher_cache"):
        return LogitCache(load_file(str(directory / LOGITS))["logits"]), True
    logits = compute().contiguous()
    write(
        directory,
        {"format": FORMAT, **keys, "shape": list(logits.shape)},
        lambda tmp: save_file({"logits": logits}, str(tmp / LOGITS)),
    )
    return LogitCache(logits), False
