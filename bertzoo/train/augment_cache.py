"""TinyBERT's augmented training set on disk, so that the runs reading the same copies make them once.

Augmentation runs one masked-LM forward per copy of every example (minutes to hours on a CPU), and the copies
depend only on the augmenting model, the training examples and the `augment` settings, not on the student, the
teacher or the training seed. A cache is a directory with `examples.jsonl` (the originals, then their copies,
as `bertzoo.data.tasks.augment.augment_examples` returns them) and `manifest.json` naming the augmenter (sha256 of its
weights file), the data (sha256 of the examples as canonical JSON) and the settings. It is reused only when all
match (`bertzoo.engine.keyed_cache`); a cache for another augmenter, other data or other settings is an error
naming the fix. A resumed task distillation, a second seed that shares `augment.cache`, and the same data
trained without the teacher all read the copies back instead of making them again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertzoo.engine.keyed_cache import matches, weights_key, write

EXAMPLES = "examples.jsonl"
FORMAT = 1


def examples_key(examples: list[dict[str, Any]]) -> str:
    """sha256 over the examples as canonical JSON (sorted keys), one line each, in order."""
    h = hashlib.sha256()
    for example in examples:
        h.update(json.dumps(example, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


def cached_augmentation(
    directory: str | Path,
    augmenter_dir: str | Path,
    examples: list[dict[str, Any]],
    settings: dict[str, Any],
    compute: Callable[[], list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], bool]:
    """The augmented examples from `directory` when its manifest names this augmenter, these examples and
    `settings`; else `compute()`, written there (atomically) first. Returns (examples, whether reused)."""
    directory = Path(directory)
    keys = {
        "format": FORMAT,
        "augmenter_sha256": weights_key(augmenter_dir),
        "data_sha256": examples_key(examples),
        "settings": settings,
    }
    if matches(directory, keys, what="augmentation cache", setting="augment.cache"):
        lines = (directory / EXAMPLES).read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines], True
    augmented = compute()

    def payload(tmp: Path) -> None:
        text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in augmented)
        (tmp / EXAMPLES).write_text(text, encoding="utf-8")

    write(directory, keys, payload)
    return augmented, False
