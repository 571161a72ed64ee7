"""Reading raw corpora as a stream of cleaned documents, and splitting documents into sentences.

Inputs are files, directories (recursed in sorted order), built-in corpora (`builtin:wiki-en`) and Hugging Face
datasets (`hf-dataset:NAME_OR_PATH[:config][:split]`, a directory saved with `save_to_disk`, parquet / arrow / CSV
files; `hf_datasets`). Text files are read line by line and datasets batch by batch, so a corpus of any size streams
through in constant memory.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import bertzoo.data.text.hf_datasets as hf_datasets
from bertzoo.data.text.builtin import check_builtin, iter_builtin
from bertzoo.data.text.lines import BUILTIN_PREFIX, LONE_SURROGATE, ReadStats, clean_text, iter_lines
from bertzoo.errors import DataError

__all__ = ["ReadStats", "clean_text", "expand_inputs", "read_documents", "split_sentences"]

log = logging.getLogger(__name__)

Format = Literal["auto", "text", "jsonl", "csv", "parquet", "arrow"]
FileFormat = Literal["text", "jsonl", "csv", "parquet", "arrow", "dataset"]
FORMATS = ("auto", "text", "jsonl", "csv", "parquet", "arrow")
DocPer = Literal["block", "file", "line"]
_JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}
# Tables read through `datasets`, one document per row (JSON stays bertzoo's own JSONL reader).
_TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
_TEXT_FIELD_FIX = "pass the column that holds the text with --text-field"


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


def _dataset_documents(ds: object, where: str, text_field: str, stats: ReadStats) -> Iterator[str]:
    """One document per row of a `datasets` dataset: the text in column `text_field`, cleaned."""
    for value in hf_datasets.iter_column(ds, text_field, where, _TEXT_FIELD_FIX):
        if value is not None and not isinstance(value, str):
            raise DataError(f"{where}: column {text_field!r} holds {type(value).__name__}, not text; {_TEXT_FIELD_FIX}")
        doc = clean_text(value or "")
        if doc:
            yield doc
        else:
            stats.empty_docs_skipped += 1


def _file_format(path: Path, fmt: Format) -> FileFormat:
    if hf_datasets.is_saved_dataset(path):
        return "dataset"
    if fmt != "auto":
        return fmt
    name = path.name[:-3] if path.suffix == ".gz" else path.name
    suffix = Path(name).suffix.lower()
    if path.suffix != ".gz" and suffix in _TABLE_SUFFIXES:
        return _TABLE_SUFFIXES[suffix]  # type: ignore[return-value]
    return "jsonl" if suffix in _JSONL_SUFFIXES else "text"


def expand_inputs(inputs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str | Path]:
    """Resolve inputs into builtin names and `hf-dataset:` specs (kept as strings), directories saved with
    `save_to_disk` (kept whole) and files (other directories recursed, sorted).

    Raises DataError for a path that does not exist, or a dataset input without the datasets package, before
    anything is read.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    out: list[str | Path] = []
    for item in inputs:
        if isinstance(item, str) and item.startswith(BUILTIN_PREFIX):
            check_builtin(item)
            out.append(item)
            continue
        if hf_datasets.is_spec(item):
            hf_datasets.parse_spec(str(item))
            hf_datasets.require_datasets(str(item))
            out.append(str(item))
            continue
        path = Path(item)
        if hf_datasets.is_saved_dataset(path):
            hf_datasets.require_datasets(str(path))
            out.append(path)
        elif path.is_dir():
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
                f"corpus file not found: {path}; check the path (built-in corpora are named like builtin:wiki-en, "
                f"Hugging Face datasets like {hf_datasets.USAGE})"
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
    """Stream cleaned, non-empty documents from files, directories, `builtin:` corpora and `hf-dataset:` specs.

    Plain text: `doc_per="block"` (blank-line separated blocks, lines kept as newlines), `"file"`
    or `"line"`. JSONL (`.jsonl`/`.json`/`.ndjson`, or `fmt="jsonl"`): one object per line, text
    in `text_field`. Hugging Face datasets, saved datasets and CSV / parquet / arrow files (read through
    `datasets`, streamed): one document per row, text in column `text_field`; a spec without a split reads
    `train`. Missing paths fail at call time; a corpus without any text fails at its end.
    """
    if fmt not in FORMATS:
        raise DataError(f"unknown corpus format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if doc_per not in ("block", "file", "line"):
        raise DataError(f"unknown document unit {doc_per!r}; choose block, file or line")
    sources = expand_inputs(inputs)
    return _read(sources, fmt, text_field, doc_per, stats)


def _source_documents(
    source: str | Path, fmt: Format, text_field: str, doc_per: DocPer, stats: ReadStats
) -> Iterator[str]:
    if isinstance(source, str) and not hf_datasets.is_spec(source):
        return iter_builtin(source, stats)
    stats.files += 1
    kind = "dataset" if isinstance(source, str) else _file_format(source, fmt)
    if kind == "jsonl":
        return _jsonl_documents(source, text_field, stats)  # type: ignore[arg-type]
    if kind == "text":
        return _text_documents(source, doc_per, stats)  # type: ignore[arg-type]
    # Streamed: a corpus larger than memory is never loaded whole.
    builder = None if kind == "dataset" else hf_datasets.FILE_FORMATS[f".{kind}"]
    ds = hf_datasets.open_dataset(source, split="train", streaming=True, fmt=builder)
    return _dataset_documents(ds, str(source), text_field, stats)


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
        for doc in _source_documents(source, fmt, text_field, doc_per, stats):
            stats.documents += 1
            yield doc
    if stats.documents == docs_before:
        raise DataError(
            f"empty corpus: {_describe(sources)} contains no text; check the paths, --format "
            f"({', '.join(FORMATS[1:])}) and --text-field"
        )
    if report and stats.bad_utf8_lines > bad_before:
        log.warning(
            "%d line(s) had invalid UTF-8 (first at %s); invalid bytes were replaced by U+FFFD",
            stats.bad_utf8_lines - bad_before,
            stats.first_bad_utf8,
        )
