"""The README's Python examples run as written, and every relative link in README.md and docs/*.md points to a
file that exists."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))

PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"^```.*?^```[ \t]*$|`[^`\n]*`", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path) -> list[str]:
    return PYTHON_BLOCK.findall(path.read_text(encoding="utf-8"))


def relative_links(path: Path) -> list[str]:
    """Link targets outside code, without anchors; external links (a scheme or mailto) and pure anchors left out."""
    text = CODE.sub("", path.read_text(encoding="utf-8"))
    links = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue
        links.append(target.split("#", 1)[0])
    return [t for t in links if t]


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the example."""

    def refuse(*args, **kwargs):
        raise RuntimeError("the README example tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_readme_has_python_examples():
    assert python_blocks(README), "README.md has no ```python block"


@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_block_runs(index, tmp_path, monkeypatch, no_network):
    import torch

    code = python_blocks(README)[index]
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(path):
    missing = [t for t in relative_links(path) if not (path.parent / t).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"
