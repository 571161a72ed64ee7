"""Text primitives every reader shares: reading a file's lines (gzip, invalid UTF-8 counted), cleaning
text, and the statistics a read collects. Below both `corpus` (files and directories) and `builtin`
(packaged corpora), so each can use them without importing the other.
"""

from __future__ import annotations

import gzip
import os
import re
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bertzoo.errors import DataError

BUILTIN_PREFIX = "builtin:"


@dataclass
class ReadStats:
    """What `read_documents` saw; pass one in and it is filled while the stream is consumed."""

    files: int = 0
    documents: int = 0
    lines: int = 0
    bad_utf8_lines: int = 0  # lines with invalid UTF-8, decoded with U+FFFD replacement characters
    first_bad_utf8: str | None = None  # "path:line" of the first such line
    empty_docs_skipped: int = 0  # documents that were empty after cleaning

    def note_bad_utf8(self, path: str | os.PathLike, line: int) -> None:
        self.bad_utf8_lines += 1
        if self.first_bad_utf8 is None:
            self.first_bad_utf8 = f"{path}:{line}"


# C0/C1 control characters (Unicode category Cc) except tab and newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPACES = re.compile(r" {2,}")
# Lone UTF-16 surrogates: JSON can spell them ("\ud800") but they cannot be encoded, so no tokenizer takes them.
LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SPACE_AROUND_NEWLINE = re.compile(r" *\n *")


def is_cjk(ch: str) -> bool:
    """A CJK ideograph: BERT's tokenizer splits these into single characters (each a word of its own)."""
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def clean_text(text: str) -> str:
    """Drop control characters (keeping newline and tab), replace lone surrogates with U+FFFD,
    NFC-normalise, collapse spaces, strip."""
    if "\r" in text:  # Windows and old-Mac line ends become newlines, not deleted characters
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    if not text.isascii():
        text = LONE_SURROGATE.sub("\ufffd", text)
        if not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
    if "  " in text:
        text = _SPACES.sub(" ", text)
    if "\n" in text:
        text = _SPACE_AROUND_NEWLINE.sub("\n", text)
    return text.strip()


def _open_binary(path: Path) -> BinaryIO:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


# How much of a file's start is looked at to tell a binary file from text (as git and grep do, by NUL bytes).
BINARY_WINDOW = 1 << 16


def iter_lines(path: str | os.PathLike, stats: ReadStats | None = None) -> Iterator[str]:
    """Lines of a UTF-8 file without their line ends; invalid bytes become U+FFFD and are counted. A file whose
    start holds NUL bytes and invalid UTF-8 (an executable, an image, a UTF-16 file) is a DataError: text with a
    stray NUL or a bad byte is cleaned, but a binary file would only train a vocabulary of noise."""
    path = Path(path)
    try:
        f = _open_binary(path)
    except FileNotFoundError:
        raise DataError(f"corpus file not found: {path}; check the path") from None
    except OSError as exc:
        raise DataError(f"cannot read corpus file {path} ({exc.strerror}); check its permissions") from None
    lineno = 0
    seen = 0  # bytes of the binary window read so far
    nul = bad = False
    with f:
        try:
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line = raw.decode("utf-8", errors="replace")
                    bad = True
                    if stats is not None:
                        stats.note_bad_utf8(path, lineno)
                if seen < BINARY_WINDOW:
                    seen += len(raw)
                    nul = nul or b"\x00" in raw
                    if nul and bad:
                        raise DataError(
                            f"{path} is not a text file (NUL bytes and invalid UTF-8 in its first "
                            f"{min(seen, BINARY_WINDOW):,} bytes); pass UTF-8 text or JSONL"
                        )
                if lineno == 1 and line.startswith("\ufeff"):  # byte-order mark written by some editors
                    line = line[1:]
                if stats is not None:
                    stats.lines += 1
                yield line.rstrip("\r\n")
        except (OSError, EOFError, zlib.error) as exc:  # a damaged .gz, or a read error of the disk
            raise DataError(
                f"cannot read {path} after line {lineno} ({type(exc).__name__}: {exc}); check or re-create the file"
            ) from None
