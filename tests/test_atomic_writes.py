"""The one atomic-write implementation (`bertzoo.io`): a write that fails part-way leaves the old
content in place and no temporary file or directory behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bertzoo import io
from bertzoo.errors import DiskFullError


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_write_atomic_replaces_the_content(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.json"
    io.write_atomic(target, '{"a": 1}')
    io.write_atomic(target, b'{"a": 2}')
    assert target.read_text() == '{"a": 2}'
    assert entries(target.parent) == ["report.json"]


@pytest.mark.parametrize(
    ("error", "raised", "message"),
    [
        (OSError(5, "Input/output error"), OSError, "Input/output error"),  # passed on as it is
        (OSError(28, "No space left on device"), DiskFullError, "disk full while writing .*report.json"),
    ],
)
def test_write_atomic_failing_before_the_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch, error: OSError, raised: type[Exception], message: str
) -> None:
    target = tmp_path / "report.json"
    target.write_text("old")
    written: list[str] = []

    def fail(path: str | Path) -> None:  # the temporary file is complete here: fail at the fsync
        written.append(Path(path).read_text())
        raise error

    monkeypatch.setattr(io, "fsync_file", fail)
    with pytest.raises(raised, match=message):
        io.write_atomic(target, "new")
    assert written == ["new"]  # the new content did reach a temporary file ...
    assert target.read_text() == "old"  # ... but never the target
    assert entries(tmp_path) == ["report.json"]


def test_a_writer_raising_half_way_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "weights.bin"
    target.write_bytes(b"old weights")

    def half(path: str) -> None:
        with open(path, "wb") as f:
            f.write(b"new wei")
        raise KeyboardInterrupt  # e.g. Ctrl-C in the middle of a save

    with pytest.raises(KeyboardInterrupt):
        io.replace_atomically(half, target)
    assert target.read_bytes() == b"old weights"
    assert entries(tmp_path) == ["weights.bin"]


def test_write_dir_atomic_failing_half_way_keeps_the_old_directory(tmp_path: Path) -> None:
    target = tmp_path / "model"
    io.write_dir_atomic(target, lambda d: (d / "config.json").write_text("old"))

    def half(d: Path) -> None:
        (d / "config.json").write_text("new")
        raise RuntimeError("the weights could not be written")

    with pytest.raises(RuntimeError, match="weights"):
        io.write_dir_atomic(target, half)
    assert entries(target) == ["config.json"] and (target / "config.json").read_text() == "old"
    assert entries(tmp_path) == ["model"]


def test_replace_dir_puts_the_old_directory_back_when_the_rename_fails(tmp_path: Path, monkeypatch) -> None:
    target, new = tmp_path / "shards", tmp_path / "shards.tmp-1"
    target.mkdir()
    (target / "meta.json").write_text("old")
    new.mkdir()
    (new / "meta.json").write_text("new")
    rename = os.rename

    def rename_fails_for_new(src, dst) -> None:
        if Path(src) == new:
            raise OSError(18, "Invalid cross-device link")
        rename(src, dst)

    monkeypatch.setattr(io.os, "rename", rename_fails_for_new)
    with pytest.raises(OSError, match="cross-device"):
        io.replace_dir(new, target)
    assert (target / "meta.json").read_text() == "old"
    assert entries(tmp_path) == ["shards", "shards.tmp-1"]  # the old one is back under its name
