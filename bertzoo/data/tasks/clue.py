"""CLUE's classification tasks from their official files, read into bertzoo's text examples {"text", optional
"text_pair", optional "label", "source"}.

Each task is a folder with train.json, dev.json and test.json, one JSON object per line (the files of CLUE's
`<task>_public.zip`; the folder may be named `afqmc`, `AFQMC` or `afqmc_public`, and may hold the files one level
down in `<task>_public/`). Fields, as CLUE's baseline processors (baselines/models/classifier_utils.py) read them:

* AFQMC: sentence1, sentence2, label ("0"/"1");
* TNEWS: sentence, label ("100".."116", 15 classes), label_desc;
* IFLYTEK: sentence, label ("0".."118"), label_des;
* CMNLI and OCNLI: sentence1, sentence2, label (entailment/neutral/contradiction; "-", no gold label, dropped);
* WSC (CLUEWSC2020): text, target {span1_index, span1_text, span2_index, span2_text}, label ("true"/"false"); the
  text is given with the noun marked `_noun_` and the pronoun `[pronoun]`, as CLUE's baseline does;
* CSL: abst, keyword (a list), label ("0"/"1"); the keywords joined by spaces are the first text, the abstract
  the second, as CLUE's baseline does.

Test files have no labels: their examples are unlabelled.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bertzoo.data.text.lines import iter_lines
from bertzoo.errors import DataError

__all__ = ["CLUE_TASKS", "ClueTask", "clue_task", "clue_task_dir", "read_clue", "wsc_marked_text"]

SPLITS = {"train": "train.json", "dev": "dev.json", "test": "test.json"}


def wsc_marked_text(text: str, target: dict[str, Any], where: str) -> str:
    """CLUEWSC's text with the candidate noun (span 1) marked `_noun_` and the pronoun (span 2) `[pronoun]`,
    CLUE's baseline input; DataError when a span's index does not point at its text."""
    spans = []
    for n, marks in ((1, ("_", "_")), (2, ("[", "]"))):
        try:
            start, span = int(target[f"span{n}_index"]), str(target[f"span{n}_text"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{where}: target needs span{n}_index (a number) and span{n}_text") from None
        if text[start : start + len(span)] != span:
            raise DataError(f"{where}: span{n}_text {span!r} is not at span{n}_index {start} of the text")
        spans.append((start, start + len(span), marks))
    # Insert from the right, so the earlier span's indices stay valid.
    for start, end, (left, right) in sorted(spans, reverse=True):
        text = text[:start] + left + text[start:end] + right + text[end:]
    return text


def _field(record: dict[str, Any], name: str, where: str) -> Any:
    if name not in record:
        raise DataError(f"{where}: no field {name!r} (fields: {', '.join(sorted(record)) or 'none'})")
    return record[name]


def _text(record: dict[str, Any], name: str, where: str) -> str:
    value = _field(record, name, where)
    if not isinstance(value, str):
        raise DataError(f"{where}: field {name!r} is {type(value).__name__}, expected text")
    return value


def _pair(first: str, second: str) -> Callable[[dict[str, Any], str], tuple[str, str | None]]:
    return lambda r, where: (_text(r, first, where), _text(r, second, where))


def _single(field: str) -> Callable[[dict[str, Any], str], tuple[str, str | None]]:
    return lambda r, where: (_text(r, field, where), None)


def _wsc(record: dict[str, Any], where: str) -> tuple[str, str | None]:
    target = _field(record, "target", where)
    if not isinstance(target, dict):
        raise DataError(f"{where}: field 'target' must be an object with the two spans")
    return wsc_marked_text(_text(record, "text", where), target, where), None


def _csl(record: dict[str, Any], where: str) -> tuple[str, str | None]:
    keywords = _field(record, "keyword", where)
    if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
        raise DataError(f"{where}: field 'keyword' must be a list of texts")
    return " ".join(keywords), _text(record, "abst", where)


class ClueTask(NamedTuple):
    """A CLUE classification task: its folder names, how a record becomes texts, and its label set."""

    names: tuple[str, ...]  # folder names it may have (case-insensitive); the first is the task's
    texts: Callable[[dict[str, Any], str], tuple[str, str | None]]  # (record, where) -> (text, text_pair or None)
    labels: tuple[str, ...]
    pair: bool
    drop_labels: tuple[str, ...] = ()  # labels of examples without a gold label ("-"), dropped


_NLI = ("contradiction", "entailment", "neutral")
_TNEWS = tuple(str(100 + i) for i in range(17) if i not in (5, 11))

CLUE_TASKS: dict[str, ClueTask] = {
    "AFQMC": ClueTask(("afqmc", "afqmc_public"), _pair("sentence1", "sentence2"), ("0", "1"), True),
    "TNEWS": ClueTask(("tnews", "tnews_public"), _single("sentence"), _TNEWS, False),
    "IFLYTEK": ClueTask(("iflytek", "iflytek_public"), _single("sentence"), tuple(str(i) for i in range(119)), False),
    "CMNLI": ClueTask(("cmnli", "cmnli_public"), _pair("sentence1", "sentence2"), _NLI, True, ("-",)),
    "OCNLI": ClueTask(("ocnli", "ocnli_public"), _pair("sentence1", "sentence2"), _NLI, True, ("-",)),
    "WSC": ClueTask(("wsc", "cluewsc2020", "cluewsc", "cluewsc2020_public"), _wsc, ("false", "true"), False),
    "CSL": ClueTask(("csl", "csl_public"), _csl, ("0", "1"), True),
}


def clue_task(name: str) -> tuple[str, ClueTask]:
    """(canonical name, task) of CLUE task `name`, matched case-insensitively against its folder names."""
    for key, task in CLUE_TASKS.items():
        if name.lower() == key.lower() or name.lower() in task.names:
            return key, task
    raise DataError(f"unknown CLUE task {name!r}; choose from: {', '.join(CLUE_TASKS)}")


def clue_task_dir(root: str | Path, name: str) -> Path:
    """The folder holding task `name`'s train.json/dev.json/test.json inside the CLUE directory `root`."""
    root = Path(root)
    key, task = clue_task(name)
    if not root.is_dir():
        raise DataError(f"CLUE directory not found: {root}; pass the folder holding the tasks' folders")
    folders = {c.name.lower(): c for c in root.iterdir() if c.is_dir()}
    for candidate in task.names:
        folder = folders.get(candidate)
        if folder is None:
            continue
        if any((folder / f).is_file() for f in SPLITS.values()):
            return folder
        nested = [c for c in folder.iterdir() if c.is_dir() and c.name.lower().endswith("_public")]
        if len(nested) == 1:  # some zips unpack into <task>_public/ inside the folder
            return nested[0]
        return folder
    found = ", ".join(sorted(c.name for c in folders.values())) or "no folders"
    raise DataError(
        f"{root} has no folder for CLUE's {key} (looked for {', '.join(task.names)}; it holds: {found}); unzip the "
        "task's zip from CLUE's download page there, or leave the task out with --tasks"
    )


def read_clue(root: str | Path, name: str, split: str) -> list[dict[str, Any]]:
    """The examples of CLUE task `name` (AFQMC, TNEWS, IFLYTEK, CMNLI, OCNLI, WSC, CSL) and `split` (train, dev,
    test) from the CLUE directory `root`. Test examples have no "label"."""
    key, task = clue_task(name)
    if split not in SPLITS:
        raise DataError(f"CLUE {key} has no split {split!r}; it has: {', '.join(SPLITS)}")
    path = clue_task_dir(root, name) / SPLITS[split]
    if not path.is_file():
        raise DataError(f"{path} not found; CLUE's {key} folder holds {', '.join(SPLITS.values())}")
    out = []
    for line, text in enumerate(iter_lines(path), 1):
        if not text.strip():
            continue
        where = f"{path}:{line}"
        try:
            record = json.loads(text.lstrip("\ufeff") if line == 1 else text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not JSON ({exc.msg}); CLUE files hold one JSON object per line") from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: a JSON {type(record).__name__}, expected an object")
        first, second = task.texts(record, where)
        ex: dict[str, Any] = {"text": first}
        if second is not None:
            ex["text_pair"] = second
        if split != "test":
            raw = _field(record, "label", where)
            label = str(raw).lower() if isinstance(raw, bool) else str(raw).strip()
            if label in task.drop_labels:
                continue
            if label not in task.labels:
                shown = ", ".join(task.labels) if len(task.labels) <= 20 else f"{task.labels[0]}..{task.labels[-1]}"
                raise DataError(f"{where}: label {label!r} is not one of {shown}; check that this is {key}'s file")
            ex["label"] = label
        ex["source"] = where
        out.append(ex)
    if not out:
        raise DataError(f"{path} holds no examples; check the file")
    return out
