"""Checkpoint directories on disk: their names, the manifest that proves one complete, and finding,
verifying, cleaning up and rotating them.

A checkpoint directory counts only once its `manifest.json` (every file's size and sha256, written
last) is in place; what is in the files is `bertzoo.engine.checkpoint`'s business.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from bertzoo.errors import CheckpointError
from bertzoo.io import WEIGHTS, fsync_dir, fsync_file, pause_for_tests, remove_stale_tmp, write_atomic

log = logging.getLogger("bertzoo.train")

CHECKPOINTS_DIR = "checkpoints"
MANIFEST = "manifest.json"
MODEL_FILE = WEIGHTS
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "trainer_state.json"
REQUIRED_FILES = (MODEL_FILE, OPTIMIZER_FILE, RNG_FILE, STATE_FILE)
FORMAT = "bertzoo-checkpoint"
FORMAT_VERSION = 1

_STEP_DIR = re.compile(r"^step-(\d{8,})$")


def checkpoint_name(step: int) -> str:
    """Directory name of the checkpoint taken after optimizer step `step`."""
    return f"step-{step:08d}"


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(directory: str | Path, step: int) -> dict[str, Any]:
    """fsync every file in `directory`, then write `manifest.json` (sizes and sha256) last."""
    directory = Path(directory)
    files = []
    for p in _files_in(directory):
        fsync_file(p)
        files.append({"path": p.relative_to(directory).as_posix(), "size": p.stat().st_size, "sha256": sha256_file(p)})
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "step": step,
        "created": time.time(),
        "files": files,
    }
    write_atomic(directory / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Checkpoints with a manifest (complete as written), oldest first; not verified."""
    root = Path(output_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / MANIFEST).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def verify_checkpoint(path: str | Path, *, check_hash: bool = True) -> dict[str, Any]:
    """Check a checkpoint against its manifest; return the manifest or raise CheckpointError."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{path} is not a complete checkpoint (no {MANIFEST}); pass a checkpoints/step-XXXXXXXX "
            "directory or use --resume auto"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = {f["path"]: f for f in manifest["files"]}
        step = int(manifest["step"])
        if not all(_valid_entry(f) for f in files.values()):
            raise ValueError("malformed file entry")
    except (UnicodeDecodeError, KeyError, TypeError, ValueError, RecursionError):  # ValueError: bad JSON too
        raise CheckpointError(f"{manifest_path} is corrupted; use another checkpoint") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format {manifest.get('format')} v{manifest.get('version')}, expected {FORMAT} "
            f"v{FORMAT_VERSION}; use a checkpoint written by this bertzoo version"
        )
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}; the checkpoint is incomplete, use another one")
    for name, meta in files.items():
        p = path / name
        if not p.is_file():
            raise CheckpointError(f"{p} listed in the manifest is missing; use another checkpoint")
        if p.stat().st_size != meta["size"]:
            raise CheckpointError(
                f"{p} has {p.stat().st_size} bytes, the manifest says {meta['size']}; the file is damaged, "
                "use another checkpoint"
            )
        if check_hash and sha256_file(p) != meta["sha256"]:
            raise CheckpointError(f"{p} fails its sha256 check; the file is damaged, use another checkpoint")
    manifest["step"] = step
    return manifest


def _valid_entry(entry: Any) -> bool:
    """A manifest file entry: a relative path inside the checkpoint, an int size and a hash string."""
    path = entry.get("path")
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        return False  # never check (or hash) files outside the checkpoint directory
    return isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)


def cleanup_tmp(output_dir: str | Path) -> list[Path]:
    """Remove `.tmp-*` leftovers of interrupted saves (except those of other live processes)."""
    return remove_stale_tmp(Path(output_dir) / CHECKPOINTS_DIR, ".tmp-")


def find_latest_checkpoint(output_dir: str | Path, *, verify_hash: bool = True, cleanup: bool = True) -> Path | None:
    """Newest checkpoint under `output_dir/checkpoints` that verifies against its manifest, or None.

    Incomplete `.tmp-*` directories are ignored (and removed when `cleanup`); damaged checkpoints
    are skipped with a warning, falling back to older ones.
    """
    if cleanup:
        cleanup_tmp(output_dir)
    for step, path in reversed(list_checkpoints(output_dir)):
        try:
            manifest = verify_checkpoint(path, check_hash=verify_hash)
        except CheckpointError as exc:
            log.warning("skipping checkpoint %s: %s", path, exc)
            continue
        if manifest["step"] != step:
            log.warning("skipping checkpoint %s: its manifest says step %d", path, manifest["step"])
            continue
        return path
    return None


def rotate_checkpoints(output_dir: str | Path, keep_last: int, protect: Path | None = None) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints; never deletes `protect`."""
    if keep_last is None or keep_last < 1:
        return []
    complete = list_checkpoints(output_dir)
    keep = {p for _, p in complete[-keep_last:]}
    if protect is not None:
        keep.add(Path(protect))
    removed = []
    for _, p in complete:
        if p in keep:
            continue
        # Rename first so a crash mid-delete leaves a .tmp-* leftover, not a half-deleted checkpoint
        # that still has a manifest.
        doomed = p.with_name(f".tmp-delete-{p.name}-{os.getpid()}")
        os.rename(p, doomed)
        pause_for_tests()
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(p)
    if removed:
        fsync_dir(Path(output_dir) / CHECKPOINTS_DIR)
    return removed
