"""Readers for fine-tuning data: labelled text (CSV/TSV/JSONL), token-labelled sentences (CoNLL,
JSONL), multiple-choice items (SWAG CSV, JSONL), and Hugging Face datasets of any kind of example:
`hf-dataset:NAME_OR_PATH[:config][:split]`, directories (saved with `save_to_disk`, or of data files) and
parquet / arrow files, read through `datasets` (`bertzoo.data.text.hf_datasets`).

Every reader returns a list of plain dicts and adds `source` ("path:line") to each, so a later
error (an unknown label, an empty text) can say where the example came from. Four kinds of
example exist, one per task family:

* text:    {"text", optional "text_pair", optional "label", "source"}
* tokens:  {"tokens": [...], optional "labels": [...], "source"}
* choices: {"context", "endings": [...], optional "label" (int), "source"}
* pairs:   {"query", "positive", optional "negative" or "score", "source"} (`bertzoo.data.tasks.pairs`)

`read_examples` picks the reader from the task kind and the format (auto-detected from the file
extension when `fmt="auto"`); the table `READERS` lists the combinations.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import bertzoo.data.text.hf_datasets as hf_datasets
from bertzoo.data.tasks.pairs import pair_example
from bertzoo.data.text.corpus import ReadStats, iter_lines, jsonl_records
from bertzoo.errors import DataError

__all__ = [
    "READERS",
    "detect_format",
    "read_choices_jsonl",
    "read_conll",
    "read_dataset",
    "read_disk",
    "read_examples",
    "read_swag_csv",
    "read_table",
    "read_token_jsonl",
]

log = logging.getLogger(__name__)

Kind = Literal["text", "tokens", "choices", "pairs"]
LabelType = Literal["single", "multi", "float"]

MULTI_LABEL_SEP = "|"
_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".conll": "conll",
    ".conllu": "conll",
    ".bio": "conll",
    ".iob": "conll",
    ".iobes": "conll",
    ".txt": "conll",  # only for token tasks; text tasks have no plain-text format
    ".parquet": "parquet",
    ".arrow": "arrow",
}
_TOKEN_FIELDS = ("tokens", "words")
_TAG_FIELDS = ("labels", "tags", "ner_tags")
_ENDING = re.compile(r"ending(\d+)$")


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"data file not found: {path}; check data.train / data.dev / data.test")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) with invalid UTF-8 replaced (and reported once at the end, as corpora do)."""
    stats = ReadStats()
    yield from enumerate(iter_lines(path, stats), 1)
    if stats.bad_utf8_lines:
        log.warning(
            "%d line(s) of %s had invalid UTF-8 (first at %s); invalid bytes were replaced by U+FFFD",
            stats.bad_utf8_lines,
            path,
            stats.first_bad_utf8,
        )


def detect_format(path: str | os.PathLike, kind: Kind = "text") -> str:
    """The format of `path` from its extension (a directory is a Hugging Face dataset: "disk")."""
    path = Path(path)
    if path.is_dir():
        return "disk"
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt == "conll" and kind != "tokens":
        fmt = None
    if fmt == "csv" and kind == "choices":
        fmt = "swag"
    if fmt is None:
        known = ", ".join(sorted(ext for ext, f in _EXTENSIONS.items() if (kind, f) in READERS))
        raise DataError(
            f"cannot tell the format of {path} from its extension; use one of {known} or set data.format explicitly"
        )
    return fmt


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------


def _label(value: Any, label_type: LabelType, where: str, column: str) -> Any:
    """Normalise a raw label: str (single), list[str] (multi) or float (regression)."""
    if label_type == "multi":
        if isinstance(value, str):
            return [p.strip() for p in value.split(MULTI_LABEL_SEP) if p.strip()]
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
        if value is None:
            return []
        return [str(value)]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where}: empty label in column {column!r}; fill it in or drop the example")
    if label_type == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise DataError(f"{where}: label {value!r} is not a number; regression needs numeric labels") from None
    if isinstance(value, (list, dict)):
        raise DataError(
            f"{where}: label {json.dumps(value, ensure_ascii=False)[:60]} is a {type(value).__name__}; "
            "single-label classification needs one label per example (set problem: multi_label for lists)"
        )
    if isinstance(value, bool):
        return str(value).lower()
    return value.strip() if isinstance(value, str) else str(value)


def _text_example(
    record: dict[str, Any],
    where: str,
    text_column: str,
    text_pair_column: str,
    label_column: str,
    label_type: LabelType,
) -> dict[str, Any]:
    def text(column: str) -> str:
        if column not in record:
            raise DataError(
                f"{where}: no column {column!r} (columns: {', '.join(sorted(record)) or 'none'}); "
                "set data.text_column / data.text_pair_column"
            )
        value = record[column]
        if value is None:
            return ""
        if not isinstance(value, str):
            raise DataError(f"{where}: column {column!r} is {type(value).__name__}, expected text")
        return value

    ex: dict[str, Any] = {"text": text(text_column)}
    if text_pair_column:
        ex["text_pair"] = text(text_pair_column)
    if label_column in record:
        ex["label"] = _label(record[label_column], label_type, where, label_column)
    ex["source"] = where
    return ex


# ---------------------------------------------------------------------------------------------
# Text: CSV / TSV / JSONL
# ---------------------------------------------------------------------------------------------


def _csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(first line of the row, {column: value}) for a delimited file with a header row."""
    _check_file(path)
    # Fields longer than csv's default 128 KiB limit are legitimate (long documents).
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    lines = (line + "\n" for _, line in _lines(path))
    # TSV as in GLUE: no quoting at all (quotes are text); CSV: standard double-quote quoting.
    reader = csv.reader(lines, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path} is empty; a header row naming the columns is required")
        header = [h.strip() for h in header]
        start = reader.line_num + 1
        for row in reader:
            line = start
            start = reader.line_num + 1
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if len(row) != len(header):
                raise DataError(
                    f"{path}:{line}: {len(row)} field(s) but the header has {len(header)}; "
                    "check quoting and delimiters (TSV files are read without quoting)"
                )
            yield line, dict(zip(header, row, strict=True))
    except csv.Error as exc:
        kind = "TSV" if delimiter == "\t" else "CSV"
        raise DataError(f"{path}:{reader.line_num}: malformed {kind} ({exc}); check the quoting") from None


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    _check_file(path)
    yield from jsonl_records(_lines(path), path)


def read_table(
    path: str | os.PathLike,
    fmt: str = "auto",
    *,
    text_column: str = "text",
    text_pair_column: str = "",
    label_column: str = "label",
    label_type: LabelType = "single",
) -> list[dict[str, Any]]:
    """Text examples from CSV, TSV (both with a header row) or JSONL.

    Labels: a string (single), a list of strings (multi: a JSON list, or `a|b` in CSV/TSV) or a
    float (regression). A file without the label column gives unlabelled examples (prediction).
    """
    path = Path(path)
    fmt = detect_format(path, "text") if fmt == "auto" else fmt
    if fmt == "jsonl":
        rows = _jsonl_rows(path)
    elif fmt in ("csv", "tsv"):
        rows = _csv_rows(path, "," if fmt == "csv" else "\t")
    else:
        raise DataError(f"read_table cannot read format {fmt!r}; use csv, tsv or jsonl")
    out = [
        _text_example(record, f"{path}:{line}", text_column, text_pair_column, label_column, label_type)
        for line, record in rows
    ]
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out


# ---------------------------------------------------------------------------------------------
# Tokens: CoNLL / JSONL
# ---------------------------------------------------------------------------------------------


def read_conll(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Sentences of a CoNLL file: one token per line, its label in the LAST whitespace-separated
    column, a blank line between sentences, `-DOCSTART-` lines skipped. Lines with a single column
    give unlabelled tokens (prediction input); a sentence may not mix the two."""
    path = Path(path)
    _check_file(path)
    out: list[dict[str, Any]] = []
    tokens: list[str] = []
    labels: list[str] = []
    start = 0
    labelled: bool | None = None

    def flush() -> None:
        if tokens:
            ex: dict[str, Any] = {"tokens": list(tokens)}
            if labelled:
                ex["labels"] = list(labels)
            ex["source"] = f"{path}:{start}"
            out.append(ex)
        tokens.clear()
        labels.clear()

    for lineno, line in _lines(path):
        cols = line.split()
        if not cols:
            flush()
            labelled = None
            continue
        if cols[0] == "-DOCSTART-":
            flush()
            labelled = None
            continue
        has_label = len(cols) > 1
        if labelled is None:
            labelled, start = has_label, lineno
        elif has_label != labelled:
            raise DataError(
                f"{path}:{lineno}: {'a labelled' if has_label else 'an unlabelled'} token inside a sentence whose "
                "other tokens are not; every line of a sentence needs a label column (or none does)"
            )
        tokens.append(cols[0])
        if has_label:
            labels.append(cols[-1])
    flush()
    if not out:
        raise DataError(f"{path} holds no sentences; CoNLL needs one token per line and blank lines between sentences")
    return out


def _token_example(record: dict[str, Any], where: str, text_column: str, label_column: str) -> dict[str, Any]:
    def pick(candidates: tuple[str, ...]) -> str | None:
        for name in candidates:
            if isinstance(record.get(name), list):
                return name
        return None

    tok_key = pick((text_column, *_TOKEN_FIELDS))
    if tok_key is None:
        raise DataError(
            f"{where}: no list of tokens under {text_column!r} or {', '.join(map(repr, _TOKEN_FIELDS))}; "
            "token classification JSONL needs {'tokens': [...], 'labels': [...]}"
        )
    tokens = record[tok_key]
    if not all(isinstance(t, str) for t in tokens):
        raise DataError(f"{where}: {tok_key!r} must be a list of strings")
    ex: dict[str, Any] = {"tokens": list(tokens)}
    tag_key = pick((label_column, *_TAG_FIELDS))
    if tag_key is not None:
        tags = [str(t) for t in record[tag_key]]
        if len(tags) != len(tokens):
            raise DataError(f"{where}: {len(tokens)} tokens but {len(tags)} labels; give one label per token")
        ex["labels"] = tags
    ex["source"] = where
    return ex


def read_token_jsonl(
    path: str | os.PathLike, *, text_column: str = "tokens", label_column: str = "labels"
) -> list[dict[str, Any]]:
    """Token-labelled sentences from JSONL: a token list (`tokens`/`words` or `text_column`) and an
    equally long label list (`labels`/`tags`/`ner_tags` or `label_column`)."""
    path = Path(path)
    out = [_token_example(r, f"{path}:{line}", text_column, label_column) for line, r in _jsonl_rows(path)]
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out


# ---------------------------------------------------------------------------------------------
# Multiple choice: SWAG CSV / JSONL
# ---------------------------------------------------------------------------------------------


def _choice_label(value: Any, n: int, where: str) -> int:
    try:
        label = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        label = None
    if label is None or not 0 <= label < n:
        raise DataError(f"{where}: label {value!r} is not an ending index in 0..{n - 1}")
    return label


def read_swag_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """SWAG's CSV release: `sent1` is the context, and choice i is `sent2 + " " + ending{i}` (the
    shared start of the second sentence completed by each ending, as in Hugging Face's run_swag).
    `label` (the gold ending) is absent in SWAG's test file, which then reads as unlabelled."""
    path = Path(path)
    out = []
    for line, row in _csv_rows(path, ","):
        where = f"{path}:{line}"
        missing = [c for c in ("sent1", "sent2") if c not in row]
        endings = sorted(((int(m.group(1)), k) for k in row if (m := _ENDING.match(k))), key=lambda t: t[0])
        if missing or not endings:
            raise DataError(
                f"{where}: a SWAG CSV needs columns sent1, sent2, ending0..endingN (and label); "
                f"columns found: {', '.join(row)}"
            )
        header = row["sent2"].strip()
        ex: dict[str, Any] = {
            "context": row["sent1"],
            "endings": [f"{header} {row[k].strip()}".strip() for _, k in endings],
        }
        if "label" in row and row["label"].strip():
            ex["label"] = _choice_label(row["label"], len(endings), where)
        ex["source"] = where
        out.append(ex)
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out


def _choices_example(record: dict[str, Any], where: str, label_column: str) -> dict[str, Any]:
    context, endings = record.get("context"), record.get("endings")
    if not isinstance(context, str) or not isinstance(endings, list) or not endings:
        raise DataError(
            f"{where}: multiple-choice JSONL needs 'context' (text) and 'endings' (a non-empty list of texts); "
            f"fields found: {', '.join(sorted(record))}"
        )
    if not all(isinstance(e, str) for e in endings):
        raise DataError(f"{where}: every entry of 'endings' must be text")
    ex: dict[str, Any] = {"context": context, "endings": list(endings)}
    if record.get(label_column) is not None:
        ex["label"] = _choice_label(record[label_column], len(endings), where)
    ex["source"] = where
    return ex


def read_choices_jsonl(path: str | os.PathLike, *, label_column: str = "label") -> list[dict[str, Any]]:
    """Multiple-choice items from JSONL: {"context": ..., "endings": [...], "label": index}."""
    path = Path(path)
    out = [_choices_example(r, f"{path}:{line}", label_column) for line, r in _jsonl_rows(path)]
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out


# ---------------------------------------------------------------------------------------------
# Hugging Face datasets: hf-dataset: specs, saved or data-file directories, parquet / arrow files
# ---------------------------------------------------------------------------------------------


def _pairs(rows: Iterator[tuple[int, dict[str, Any]]], path: Path) -> list[dict[str, Any]]:
    """Embedding examples (pairs, triplets or scored pairs) of a JSONL or delimited file."""
    out = [pair_example(record, f"{path}:{line}") for line, record in rows]
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out


def read_dataset(
    source: str | os.PathLike,
    kind: Kind = "text",
    *,
    split: str = "train",
    text_column: str = "text",
    text_pair_column: str = "",
    label_column: str = "label",
    label_type: LabelType = "single",
) -> list[dict[str, Any]]:
    """Rows of a Hugging Face dataset as examples of `kind`: an `hf-dataset:` spec, a directory (saved with
    `save_to_disk`, or holding data files) or a parquet / arrow file. `split` (train, dev, test) picks the split
    when the spec names none; ClassLabel integers are turned into their names."""
    where = str(source)
    ds = hf_datasets.open_dataset(source, split=split)
    if kind == "text":
        hf_datasets.check_columns(
            ds, [text_column, text_pair_column], where, "set data.text_column / data.text_pair_column"
        )
    out = []
    for i, row in enumerate(hf_datasets.iter_rows(ds, where)):
        at = f"{where}[row {i}]"
        if kind == "tokens":
            out.append(_token_example(row, at, text_column, label_column))
        elif kind == "choices":
            out.append(_choices_example(row, at, label_column))
        elif kind == "pairs":
            out.append(pair_example(row, at))
        else:
            out.append(_text_example(row, at, text_column, text_pair_column, label_column, label_type))
    if not out:
        raise DataError(f"{where} holds no rows; check the dataset")
    return out


def read_disk(path: str | os.PathLike, kind: Kind = "text", **columns: Any) -> list[dict[str, Any]]:
    """A dataset directory (written with `save_to_disk`, or holding data files); see `read_dataset`."""
    hf_datasets.require_datasets(str(path))
    if not Path(path).is_dir():
        raise DataError(f"dataset directory not found: {path}; check data.train / data.dev / data.test")
    return read_dataset(path, kind, **columns)


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------

Reader = Callable[..., list[dict[str, Any]]]


def _table(fmt: str) -> Reader:
    def read(path: Path, **kw: Any) -> list[dict[str, Any]]:
        return read_table(
            path,
            fmt,
            text_column=kw["text_column"],
            text_pair_column=kw["text_pair_column"],
            label_column=kw["label_column"],
            label_type=kw["label_type"],
        )

    return read


def _dataset(kind: Kind) -> Reader:
    def read(path: Path, **kw: Any) -> list[dict[str, Any]]:
        return read_dataset(path, kind, **kw)

    return read


# (task kind, format) -> reader. Keyword arguments: text_column, text_pair_column, label_column,
# label_type, split; each reader takes what it needs.
READERS: dict[tuple[str, str], Reader] = {
    ("text", "csv"): _table("csv"),
    ("text", "tsv"): _table("tsv"),
    ("text", "jsonl"): _table("jsonl"),
    ("text", "disk"): _dataset("text"),
    ("text", "parquet"): _dataset("text"),
    ("text", "arrow"): _dataset("text"),
    ("tokens", "conll"): lambda path, **kw: read_conll(path),
    ("tokens", "jsonl"): lambda path, **kw: read_token_jsonl(
        path, text_column=kw["text_column"], label_column=kw["label_column"]
    ),
    ("tokens", "disk"): _dataset("tokens"),
    ("tokens", "parquet"): _dataset("tokens"),
    ("tokens", "arrow"): _dataset("tokens"),
    ("choices", "swag"): lambda path, **kw: (
        read_choices_jsonl(path, label_column=kw["label_column"])
        if _EXTENSIONS.get(Path(path).suffix.lower()) == "jsonl"
        else read_swag_csv(path)
    ),
    ("choices", "csv"): lambda path, **kw: read_swag_csv(path),
    ("choices", "jsonl"): lambda path, **kw: read_choices_jsonl(path, label_column=kw["label_column"]),
    ("choices", "disk"): _dataset("choices"),
    ("choices", "parquet"): _dataset("choices"),
    ("choices", "arrow"): _dataset("choices"),
    ("pairs", "jsonl"): lambda path, **kw: _pairs(_jsonl_rows(path), path),
    ("pairs", "csv"): lambda path, **kw: _pairs(_csv_rows(path, ","), path),
    ("pairs", "tsv"): lambda path, **kw: _pairs(_csv_rows(path, "\t"), path),
    ("pairs", "disk"): _dataset("pairs"),
    ("pairs", "parquet"): _dataset("pairs"),
    ("pairs", "arrow"): _dataset("pairs"),
}


def read_examples(
    path: str | os.PathLike,
    kind: Kind,
    fmt: str = "auto",
    *,
    text_column: str = "text",
    text_pair_column: str = "",
    label_column: str = "label",
    label_type: LabelType = "single",
    split: str = "train",
) -> list[dict[str, Any]]:
    """Read `path` as examples of `kind` ("text", "tokens", "choices" or "pairs"); see the module doc. An `hf-dataset:`
    spec is read through `datasets` whatever `fmt` says."""
    columns = dict(
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        label_type=label_type,
        split=split,
    )
    if hf_datasets.is_spec(path):
        return read_dataset(str(path), kind, **columns)
    path = Path(path)
    if not path.exists():
        raise DataError(f"data file not found: {path}; check data.train / data.dev / data.test")
    fmt = detect_format(path, kind) if fmt == "auto" else fmt
    reader = READERS.get((kind, fmt))
    if reader is None:
        allowed = ", ".join(f for k, f in READERS if k == kind)
        raise DataError(f"format {fmt!r} does not hold {kind} examples; for this task use one of: {allowed}")
    return reader(path, **columns)
