"""GLUE from its official files: the directory the GLUE download script writes (CoLA/, SST-2/, MRPC/, QQP/, STS-B/,
MNLI/, QNLI/, RTE/, WNLI/), read into bertzoo's text examples {"text", optional "text_pair", optional "label",
"source"}.

The layouts, as the download script and transformers' GLUE processors read them:

* every file is tab-separated and read with quoting off (`csv.QUOTE_NONE`): sentences hold unbalanced quotes;
* CoLA's train.tsv and dev.tsv have NO header: four columns, source, label, original label (`*` or empty),
  sentence; its test.tsv has the header `index sentence`;
* every other file has a header, and the columns are found by name: SST-2 `sentence label`; MRPC `Quality #1 ID
  #2 ID #1 String #2 String` (the label is Quality; the file may start with a byte-order mark); QQP `id qid1 qid2
  question1 question2 is_duplicate`; STS-B ten columns ending `sentence1 sentence2 score`; MNLI twelve (train) or
  sixteen (dev) columns with `sentence1 sentence2` and `gold_label` last; QNLI `index question sentence label`;
  RTE and WNLI `index sentence1 sentence2 label`;
* test files carry no label column (GLUE's test labels are hidden): their examples are unlabelled;
* MNLI has two dev sets, `dev_matched.tsv` and `dev_mismatched.tsv` (and two test sets).

A field that is the header's last column is read as the row's last field (transformers' `line[-1]`), so STS-B and
MNLI rows with a stray tab inside a field still give their score and label. QQP's train file has a few rows with
missing fields: they are skipped, as transformers skips them; in any other task such a row is an error.
"""

from __future__ import annotations

import csv
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from bertzoo.errors import DataError

__all__ = ["GLUE_TASKS", "GlueTask", "glue_task", "glue_task_dir", "read_glue"]

log = logging.getLogger(__name__)


class GlueTask(NamedTuple):
    """Where a GLUE task's files are and which columns hold its texts and label."""

    directory: str  # the folder inside the GLUE directory
    text: str  # column of the first text
    pair: str  # column of the second text ("" for single-sentence tasks)
    label: str  # column of the label (absent from test files)
    labels: tuple[str, ...]  # the label set; () for regression (STS-B's score)
    splits: dict[str, str]  # split name -> file name
    header: str  # the columns of the files' header (tab-separated in the files), as errors show them
    skip_short_rows: bool = False  # QQP: rows with missing fields are dropped (transformers' IndexError skip)
    drop_labels: tuple[str, ...] = ()  # labels of pairs without a gold label (MNLI's "-"), dropped


_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
_PAIR_HEADER = "index, sentence1, sentence2, label"

GLUE_TASKS: dict[str, GlueTask] = {
    # CoLA's train/dev files are headerless (`_cola_rows`); these names are those of its test file's header.
    "CoLA": GlueTask("CoLA", "sentence", "", "label", _BINARY, _SPLITS, "index, sentence (test only)"),
    "SST-2": GlueTask("SST-2", "sentence", "", "label", _BINARY, _SPLITS, "sentence, label"),
    "MRPC": GlueTask(
        "MRPC", "#1 String", "#2 String", "Quality", _BINARY, _SPLITS, "Quality, #1 ID, #2 ID, #1 String, #2 String"
    ),
    "QQP": GlueTask(
        "QQP",
        "question1",
        "question2",
        "is_duplicate",
        _BINARY,
        _SPLITS,
        "id, qid1, qid2, question1, question2, is_duplicate",
        skip_short_rows=True,
    ),
    "STS-B": GlueTask(
        "STS-B", "sentence1", "sentence2", "score", (), _SPLITS, "index, genre, ..., sentence1, sentence2, score"
    ),
    "MNLI": GlueTask(
        "MNLI",
        "sentence1",
        "sentence2",
        "gold_label",
        ("contradiction", "entailment", "neutral"),
        {
            "train": "train.tsv",
            "dev_matched": "dev_matched.tsv",
            "dev_mismatched": "dev_mismatched.tsv",
            "test_matched": "test_matched.tsv",
            "test_mismatched": "test_mismatched.tsv",
        },
        "index, promptID, pairID, genre, ..., sentence1, sentence2, ..., gold_label",
        drop_labels=("-",),
    ),
    "QNLI": GlueTask("QNLI", "question", "sentence", "label", _ENTAILMENT, _SPLITS, "index, question, sentence, label"),
    "RTE": GlueTask("RTE", "sentence1", "sentence2", "label", _ENTAILMENT, _SPLITS, _PAIR_HEADER),
    "WNLI": GlueTask("WNLI", "sentence1", "sentence2", "label", _BINARY, _SPLITS, _PAIR_HEADER),
}


def glue_task(name: str) -> GlueTask:
    """The GLUE task called `name` (case-insensitive); DataError listing them otherwise."""
    for key, task in GLUE_TASKS.items():
        if key.lower() == name.lower():
            return task
    raise DataError(f"unknown GLUE task {name!r}; choose from: {', '.join(GLUE_TASKS)}")


def glue_task_dir(root: str | Path, name: str) -> Path:
    """The folder of task `name` inside the GLUE directory `root` (its exact name, else any case)."""
    root = Path(root)
    task = glue_task(name)
    if not root.is_dir():
        raise DataError(f"GLUE directory not found: {root}; pass the folder the GLUE download script wrote")
    exact = root / task.directory
    if exact.is_dir():
        return exact
    for child in root.iterdir():
        if child.is_dir() and child.name.lower() == task.directory.lower():
            return child
    found = ", ".join(sorted(c.name for c in root.iterdir() if c.is_dir())) or "no folders"
    raise DataError(
        f"{root} has no {task.directory}/ folder (it holds: {found}); download it with the GLUE download script, "
        "or leave the task out with --tasks"
    )


def _rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a GLUE TSV file, quoting off, a leading byte-order mark dropped."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in reader:
            if row and any(field.strip() for field in row):
                yield reader.line_num, row


def _checked_label(value: str, task: GlueTask, where: str) -> str | float:
    value = value.strip()
    if not task.labels:
        try:
            return float(value)
        except ValueError:
            raise DataError(f"{where}: score {value!r} is not a number; STS-B's last column is the score") from None
    if value not in task.labels:
        raise DataError(
            f"{where}: label {value!r} is not one of {', '.join(task.labels)}; check that this is {task.directory}'s "
            f"file (tab-separated columns: {task.header})"
        )
    return value


def _cola_rows(path: Path, task: GlueTask) -> list[dict[str, Any]]:
    """CoLA's headerless train/dev file: source, label, original label, sentence."""
    out = []
    for line, row in _rows(path):
        where = f"{path}:{line}"
        if len(row) != 4:
            raise DataError(
                f"{where}: {len(row)} field(s); CoLA's train.tsv and dev.tsv have no header and 4 tab-separated "
                "columns (source, label, original label, sentence)"
            )
        if row[1].strip() not in task.labels:
            raise DataError(
                f"{where}: label {row[1]!r} is not 0 or 1; CoLA's train.tsv and dev.tsv have no header and 4 columns "
                "(source, label, original label, sentence)"
            )
        out.append({"text": row[3], "label": row[1].strip(), "source": where})
    return out


def _header_index(header: list[str], column: str, path: Path, task: GlueTask) -> int:
    try:
        return header.index(column)
    except ValueError:
        raise DataError(
            f"{path}: the header has no column {column!r} (found: {', '.join(header)}); {task.directory}'s files "
            f"have the tab-separated columns {task.header}"
        ) from None


def _headed_rows(path: Path, task: GlueTask, labelled: bool) -> list[dict[str, Any]]:
    """A file with a header: texts and label found by column name."""
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path} is empty; {task.directory}'s files start with a header: {task.header}")
    header = [h.strip() for h in first[1]]
    columns = [task.text] + ([task.pair] if task.pair else [])
    text_at = [_header_index(header, c, path, task) for c in columns]
    label_at = _header_index(header, task.label, path, task) if labelled else None
    if label_at == len(header) - 1:
        label_at = -1  # the last column: the row's last field
    # Fields a row needs: up to the last column read (all of them when the label is read as the last field).
    need = len(header) if label_at == -1 else max([*text_at, label_at or 0]) + 1
    out, skipped = [], 0
    for line, row in rows:
        where = f"{path}:{line}"
        if len(row) < need:
            if task.skip_short_rows:
                skipped += 1
                continue
            raise DataError(f"{where}: {len(row)} field(s) but the header has {len(header)}; the row is cut short")
        ex: dict[str, Any] = {"text": row[text_at[0]]}
        if task.pair:
            ex["text_pair"] = row[text_at[1]]
        if label_at is not None:
            raw = row[label_at].strip()
            if raw in task.drop_labels:
                continue
            ex["label"] = _checked_label(raw, task, where)
        ex["source"] = where
        out.append(ex)
    if skipped:
        log.warning("%s: skipped %d row(s) with missing fields (as transformers' GLUE reader does)", path, skipped)
    return out


def read_glue(root: str | Path, name: str, split: str) -> list[dict[str, Any]]:
    """The examples of GLUE task `name` (CoLA, SST-2, ..., case-insensitive) and `split` ("train", "dev", "test";
    MNLI: "train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched") from the GLUE directory
    `root`. Test examples have no "label"."""
    task = glue_task(name)
    if split not in task.splits:
        raise DataError(f"GLUE {task.directory} has no split {split!r}; it has: {', '.join(task.splits)}")
    path = glue_task_dir(root, name) / task.splits[split]
    if not path.is_file():
        raise DataError(f"{path} not found; GLUE's {task.directory}/ holds {', '.join(task.splits.values())}")
    labelled = not split.startswith("test")
    if task.directory == "CoLA" and labelled:
        out = _cola_rows(path, task)
    else:
        out = _headed_rows(path, task, labelled)
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out
