"""Reading raw corpora as a stream of cleaned documents, and splitting documents into sentences.

Inputs are files, directories (recursed in sorted order) or built-in corpora (`builtin:wiki-en`).
Files are read line by line, so a corpus of any size streams through in constant memory.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from bertzoo.data.text.builtin import check_builtin, iter_builtin
from bertzoo.data.text.lines import BUILTIN_PREFIX, LONE_SURROGATE, ReadStats, clean_text, iter_lines
from bertzoo.errors import DataError

__all__ = ["ReadStats", "clean_text", "expand_inputs", "read_documents", "split_sentences"]

log = logging.getLogger(__name__)

Format = Literal["auto", "text", "jsonl"]
DocPer = Literal["block", "file", "line"]
_JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}


# ---------------------------------------------------------------------------------------------
# Sentence splitting
# ---------------------------------------------------------------------------------------------

# Words that end with a period but rarely end a sentence (compared lower-cased, without the dot).
# "etc." is left out on purpose: it ends sentences more often than it precedes a capital.
_ABBREVIATIONS = frozenset(
    """mr mrs ms mx dr prof sr jr st mt ft vs v fig figs eq eqs no nos vol vols pp p ch sec sect
    gen col lt sgt capt cmdr adm gov sen rep rev hon pres supt insp messrs mme mlle
    inc ltd co corp bros dept univ assn approx ca cf al est op ed eds jan feb mar apr jun jul aug
    sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun""".split()
)
# English (and other cased scripts): terminator(s) and optional closing quotes/brackets before
# whitespace; `_NEXT_START` then checks that the next sentence starts with a capital or digit.
# Chinese/full-width: terminator(s) plus closing quotes, no space needed.
_BOUNDARY = re.compile(
    r"(?P<en>[.!?]+[\"'\u201d\u2019\u00bb)\]]*)(?=\s)"
    r"|(?P<cjk>[\u3002\uff61\uff01\uff1f\uff1b]+[\u201d\u2019\u300d\u300f\uff09\u300b\u3009\u3011\"')]*)"
)
_NEXT_START = re.compile(r"\s+[\"'\u201c\u2018\u00ab\u00bf\u00a1(\[]*(\S)")
_LAST_WORD = re.compile(r"(\S+)$")
_OPENERS = "\"'\u201c\u2018([{"


def _is_abbreviation(line: str, dot: int) -> bool:
    """True when the '.' at `line[dot]` ends an abbreviation or an initial rather than a sentence."""
    m = _LAST_WORD.search(line, max(0, dot - 40), dot)
    if m is None:
        return False
    word = m.group(1).lstrip(_OPENERS)
    if not word:
        return False
    if len(word) == 1 and word.isalpha():  # initials: "Arthur C. Clarke", "J. R. R. Tolkien"
        return True
    if "." in word and word.replace(".", "").isalpha():  # dotted acronyms: "U.S.", "e.g.", "Ph.D."
        return True
    return word.lower() in _ABBREVIATIONS


def split_sentences(text: str) -> list[str]:
    """Split a document into sentences: at newlines, English `.!?` before a capital/digit/quote
    (not after common abbreviations or initials), and after Chinese 。！？； (full-width forms)."""
    out: list[str] = []
    for line in text.split("\n"):
        start = 0
        for m in _BOUNDARY.finditer(line):
            end = m.end()
            if m.group("en") is not None:
                nxt = _NEXT_START.match(line, end)
                if nxt is None:  # only trailing space follows
                    continue
                first = nxt.group(1)
                if not (first.isupper() or first.isdigit()):
                    continue
                if line[m.start()] == "." and _is_abbreviation(line, m.start()):
                    continue
            piece = line[start:end].strip()
            if piece:
                out.append(piece)
            start = end
        piece = line[start:].strip()
        if piece:
            out.append(piece)
    return out


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _text_documents(path: Path, doc_per: DocPer, stats: ReadStats | None) -> Iterator[str]:
    lines = iter_lines(path, stats)
    if doc_per == "line":
        for line in lines:
            doc = clean_text(line)
            if doc:
                yield doc
            elif line.strip() and stats is not None:  # blank lines are separators, not documents
                stats.empty_docs_skipped += 1
        return
    if doc_per == "file":
        # A file is one document, so its size bounds memory here by definition of the format.
        doc = clean_text("\n".join(lines))
        if doc:
            yield doc
        elif stats is not None:
            stats.empty_docs_skipped += 1
        return
    block: list[str] = []
    for line in lines:
        cleaned = clean_text(line)
        if cleaned:
            block.append(cleaned)
        elif block:
            yield "\n".join(block)
            block = []
    if block:
        yield "\n".join(block)


def jsonl_records(
    lines: Iterable[tuple[int, str]], path: str | os.PathLike, hint: str = ""
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) for every non-blank line of a JSONL file, given as (number, line).

    A line that is not a JSON object is a DataError naming `path:line`; `hint` is appended to the
    invalid-JSON message (e.g. how to read the file as plain text instead).
    """
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, an int over 4300 digits, deep nesting
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise DataError(
                f"{path}:{lineno}: invalid JSON ({reason}); JSONL needs one JSON object per line{hint}"
            ) from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object per line, got {type(record).__name__}")
        yield lineno, record


def _jsonl_documents(path: Path, text_field: str, stats: ReadStats | None) -> Iterator[str]:
    lines = enumerate(iter_lines(path, stats), 1)
    for lineno, record in jsonl_records(lines, path, " (use --format text for plain text)"):
        if text_field not in record:
            raise DataError(
                f"{path}:{lineno}: no field {text_field!r} (fields: {', '.join(sorted(record)) or 'none'}); "
                "pass the right --text-field"
            )
        value = record[text_field]
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise DataError(f"{path}:{lineno}: field {text_field!r} is {type(value).__name__}, expected a string")
        if stats is not None and not value.isascii() and LONE_SURROGATE.search(value):
            stats.note_bad_utf8(path, lineno)  # JSON's spelling of invalid UTF-8; clean_text replaces them
        doc = clean_text(value)
        if doc:
            yield doc
        elif stats is not None:
            stats.empty_docs_skipped += 1


def _file_format(path: Path, fmt: Format) -> Literal["text", "jsonl"]:
    if fmt != "auto":
        return fmt
    name = path.name[:-3] if path.suffix == ".gz" else path.name
    return "jsonl" if Path(name).suffix.lower() in _JSONL_SUFFIXES else "text"


def expand_inputs(inputs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str | Path]:
    """Resolve inputs into builtin names (kept as strings) and files (directories recursed, sorted).

    Raises DataError for a path that does not exist, before anything is read.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    out: list[str | Path] = []
    for item in inputs:
        if isinstance(item, str) and item.startswith(BUILTIN_PREFIX):
            check_builtin(item)
            out.append(item)
            continue
        path = Path(item)
        if path.is_dir():
            # Hidden files and folders (.git, .DS_Store) are never corpus text.
            files = [
                p
                for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            ]
            out.extend(sorted(files))
        elif path.is_file():
            out.append(path)
        else:
            raise DataError(
                f"corpus file not found: {path}; check the path (built-in corpora are named like builtin:wiki-en)"
            )
    return out


def _describe(inputs: list[str | Path]) -> str:
    names = [str(x) for x in inputs]
    if not names:
        return "the input list"
    return names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} more)"


def read_documents(
    inputs: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    fmt: Format = "auto",
    text_field: str = "text",
    doc_per: DocPer = "block",
    stats: ReadStats | None = None,
) -> Iterator[str]:
    """Stream cleaned, non-empty documents from files, directories and `builtin:` corpora.

    Plain text: `doc_per="block"` (blank-line separated blocks, lines kept as newlines), `"file"`
    or `"line"`. JSONL (`.jsonl`/`.json`/`.ndjson`, or `fmt="jsonl"`): one object per line, text
    in `text_field`. Missing paths fail at call time; a corpus without any text fails at its end.
    """
    if fmt not in ("auto", "text", "jsonl"):
        raise DataError(f"unknown corpus format {fmt!r}; choose auto, text or jsonl")
    if doc_per not in ("block", "file", "line"):
        raise DataError(f"unknown document unit {doc_per!r}; choose block, file or line")
    sources = expand_inputs(inputs)
    return _read(sources, fmt, text_field, doc_per, stats)


def _read(
    sources: list[str | Path], fmt: Format, text_field: str, doc_per: DocPer, stats: ReadStats | None
) -> Iterator[str]:
    # A caller that passes its own ReadStats reports what they hold (the CLI prints one warning); otherwise the
    # reader warns here, so invalid UTF-8 is never replaced silently.
    report = stats is None
    stats = stats if stats is not None else ReadStats()
    bad_before = stats.bad_utf8_lines
    docs_before = stats.documents
    for source in sources:
        if isinstance(source, str):
            docs = iter_builtin(source, stats)
        else:
            stats.files += 1
            if _file_format(source, fmt) == "jsonl":
                docs = _jsonl_documents(source, text_field, stats)
            else:
                docs = _text_documents(source, doc_per, stats)
        for doc in docs:
            stats.documents += 1
            yield doc
    if stats.documents == docs_before:
        raise DataError(
            f"empty corpus: {_describe(sources)} contains no text; check the paths, --format "
            f"(text or jsonl) and --text-field"
        )
    if report and stats.bad_utf8_lines > bad_before:
        log.warning(
            "%d line(s) had invalid UTF-8 (first at %s); invalid bytes were replaced by U+FFFD",
            stats.bad_utf8_lines - bad_before,
            stats.first_bad_utf8,
        )
