"""A directory of derived data that is reused only while the inputs it was derived from are the same.

The directory holds the data and `manifest.json`, whose keys (sha256 digests of the inputs, and the settings
that shaped the data) are compared with the run's before anything is read. A directory written for other
inputs is an error naming the fix, never silently reused; a missing one is written whole or not at all
(`bertzoo.io.write_dir_atomic`). The teacher's logits (`teacher_cache`) and TinyBERT's augmented copies
(`augment_cache`) are two such caches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertzoo.engine.manifest import sha256_file
from bertzoo.errors import ConfigError
from bertzoo.io import WEIGHTS, write_dir_atomic

MANIFEST = "manifest.json"


def weights_key(model_dir: str | Path) -> str:
    """A model's identity: the sha256 of its weights file."""
    return sha256_file(Path(model_dir) / WEIGHTS)


def matches(directory: Path, keys: dict[str, Any], *, what: str, setting: str) -> bool:
    """True when `directory` holds a cache written for `keys`, False when it holds none. A manifest with
    another value for any key (or a damaged one) is a ConfigError naming `what` and the `setting` to change."""
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        return False
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except ValueError:
        raise ConfigError(f"{manifest_path} is damaged; delete {directory} to rebuild the {what}") from None
    for key, want in keys.items():
        if manifest.get(key) != want:
            found = str(manifest.get(key))[:12] if isinstance(want, str) else manifest.get(key)
            mine = want[:12] if isinstance(want, str) else want
            raise ConfigError(
                f"the {what} {directory} does not match this run's {key.removesuffix('_sha256')} ({found} there, "
                f"{mine} here); delete it or set {setting} to another directory"
            )
    return True


def write(directory: Path, keys: dict[str, Any], payload: Callable[[Path], None]) -> None:
    """Write the cache atomically: `payload(tmp_dir)` puts the data in, then the manifest records `keys`."""

    def fill(tmp: Path) -> None:
        payload(tmp)
        (tmp / MANIFEST).write_text(json.dumps(keys, indent=2) + "\n", encoding="utf-8")

    write_dir_atomic(directory, fill)
