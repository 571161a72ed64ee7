"""Hugging Face `datasets` as input: `hf-dataset:NAME_OR_PATH[:config][:split]`, directories written by
`save_to_disk`, and parquet / arrow / CSV / JSON files read through `datasets.load_dataset`.

The corpus reader (`tokenizer train`, `prepare`) and the fine-tuning readers open their datasets here. NAME_OR_PATH
is a hub name (`wikitext`, `stanfordnlp/imdb`) or a local file or directory; a local path wins, and may itself
contain ':'. Rows are read `BATCH_ROWS` at a time through `.iter(batch_size=...)`: hub datasets and local files are
streamed (`streaming=True`) and a saved directory is memory-mapped, so memory does not grow with the dataset.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertzoo.errors import DataError, is_disk_full

__all__ = [
    "BATCH_ROWS",
    "FILE_FORMATS",
    "PREFIX",
    "SPLIT_ALIASES",
    "DatasetSpec",
    "check_columns",
    "file_format",
    "is_saved_dataset",
    "is_spec",
    "iter_batches",
    "iter_column",
    "iter_rows",
    "open_dataset",
    "parse_spec",
    "require_datasets",
]

PREFIX = "hf-dataset:"
USAGE = f"{PREFIX}NAME_OR_PATH[:config][:split]"
# The `datasets` builder that reads each kind of data file.
FILE_FORMATS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}
# A split asked for by its role (fine-tuning's data.dev) accepts the names datasets commonly give it.
SPLIT_ALIASES = {"train": ("train",), "dev": ("validation", "dev", "valid", "val"), "test": ("test",)}
BATCH_ROWS = 1000  # rows per Arrow batch read: large enough to be fast, small enough to bound memory


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed `hf-dataset:` input: a hub name or local path, and optionally a config and a split."""

    text: str  # as the user wrote it, for messages
    name: str
    config: str | None = None
    split: str | None = None
    local: bool = False


def is_spec(item: object) -> bool:
    """True for an `hf-dataset:` input."""
    return isinstance(item, str) and item.startswith(PREFIX)


def parse_spec(text: str) -> DatasetSpec:
    """Split `hf-dataset:NAME_OR_PATH[:config][:split]`; an empty part is omitted (`NAME::validation`).

    The longest leading part that names an existing local file or directory is the path, so a path may contain
    ':'; otherwise the first part is a hub name (hub names have no ':').
    """
    body = text[len(PREFIX) :] if is_spec(text) else text
    parts = body.split(":")
    for n in range(len(parts), 0, -1):
        name, rest = ":".join(parts[:n]), parts[n:]
        if len(rest) > 2:
            break
        if name and Path(name).expanduser().exists():
            return _spec(text, str(Path(name).expanduser()), rest, local=True)
    name = parts[0]
    if not name or len(parts) > 3:
        raise DataError(f"{text!r} is not a dataset spec; write {USAGE} (empty parts are skipped: NAME::SPLIT)")
    if _looks_local(name):
        raise DataError(f"{text}: no such file or directory {name}; check the path (hub names look like ORG/NAME)")
    return _spec(text, name, parts[1:], local=False)


def _looks_local(name: str) -> bool:
    """A name no hub dataset has: a path from the root, home or current directory, or a data file's name."""
    return name.startswith(("/", ".", "~", "\\")) or name.count("/") > 1 or Path(name).suffix.lower() in FILE_FORMATS


def _spec(text: str, name: str, rest: list[str], *, local: bool) -> DatasetSpec:
    config, split = (rest + ["", ""])[:2]
    if local and (is_saved_dataset(name) or Path(name).is_file()):
        if config and split:
            what = "a dataset saved with save_to_disk" if is_saved_dataset(name) else "a single data file"
            raise DataError(f"{text}: {what} has no configs; write {PREFIX}{name}:SPLIT")
        config, split = "", config or split  # no configs here, so the one extra part is the split
    return DatasetSpec(text, name, config or None, split or None, local)


def is_saved_dataset(path: str | os.PathLike) -> bool:
    """True for a directory written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`."""
    p = Path(path)
    return p.is_dir() and (
        (p / "dataset_dict.json").is_file() or ((p / "state.json").is_file() and (p / "dataset_info.json").is_file())
    )


def file_format(path: str | os.PathLike) -> str:
    """The `datasets` builder of a data file, from its extension."""
    fmt = FILE_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise DataError(f"cannot tell the format of {path} from its extension; use one of {', '.join(FILE_FORMATS)}")
    return fmt


def require_datasets(what: str) -> Any:
    """The `datasets` module, or a DataError saying how to install it."""
    if importlib.util.find_spec("datasets") is None:
        raise DataError(f"reading {what} needs the datasets package; install it with `pip install datasets`")
    import datasets

    return datasets


def _load_error(exc: Exception, where: str) -> Exception:
    """The one-line error for a failure inside `datasets` (a disk-full error is left for the CLI to report)."""
    if is_disk_full(exc) or isinstance(exc, DataError):
        return exc
    if isinstance(exc, (FileNotFoundError, ConnectionError)):
        return DataError(
            f"{where}: not found ({exc}); give an existing local file or directory, or a hub dataset name "
            "(the hub needs network access)"
        )
    if isinstance(exc, ValueError):  # an unknown or missing config: datasets lists the available ones
        return DataError(f"{where}: {exc} (inputs are written {USAGE})")
    return DataError(f"{where}: datasets cannot read it ({type(exc).__name__}: {exc})")


def _call(fn: Any, where: str) -> Any:
    try:
        return fn()
    except Exception as exc:
        raise _load_error(exc, where) from None


def _pick_split(available: Sequence[str], wanted: str, explicit: bool, where: str) -> str:
    """The split to read: `wanted` exactly when the user named it, else the first of its aliases present."""
    names = (wanted,) if explicit else SPLIT_ALIASES.get(wanted, (wanted,))
    for name in names:
        if name in available:
            return name
    asked = repr(wanted) if explicit or len(names) == 1 else f"{wanted!r} ({', '.join(names)})"
    raise DataError(
        f"{where} has no split {asked}; available splits: {', '.join(available) or 'none'}; "
        f"name one as {PREFIX}NAME_OR_PATH[:config]:SPLIT"
    )


def open_dataset(
    source: str | os.PathLike, *, split: str = "train", streaming: bool | None = None, fmt: str | None = None
) -> Any:
    """One split of `source`, a `datasets.Dataset` or `IterableDataset` to read with `iter_batches`.

    `source`: an `hf-dataset:` spec, a local directory (saved with `save_to_disk`, or holding data files) or a
    parquet / arrow / CSV / JSON file. `split` is used when the spec names none ("dev" also finds validation,
    valid, val); a single file is its own one split. `streaming`: True streams hub datasets too (the corpus
    readers); None streams local data and downloads a hub dataset into the datasets cache (fine-tuning reads it
    again at every run). `fmt` names the builder of a file (parquet, arrow, csv, json); default: its extension.
    """
    text = str(source)
    spec = parse_spec(text) if is_spec(text) else DatasetSpec(text, text, local=True)
    datasets = require_datasets(text)
    if spec.local and not Path(spec.name).exists():
        raise DataError(f"{text}: no such file or directory; check the path")
    wanted, explicit = spec.split or split, spec.split is not None
    if spec.local and is_saved_dataset(spec.name):
        ds = _call(lambda: datasets.load_from_disk(spec.name), text)
        if isinstance(ds, datasets.DatasetDict):
            return ds[_pick_split(list(ds), wanted, explicit, text)]
        if explicit:  # one Dataset is one split, which datasets names train
            _pick_split(["train"], wanted, explicit, text)
        return ds
    if spec.local and Path(spec.name).is_file():
        if explicit:  # one file is one split: train
            _pick_split(["train"], wanted, explicit, text)
        builder = fmt or file_format(spec.name)
        return _call(lambda: datasets.load_dataset(builder, data_files=spec.name, split="train", streaming=True), text)
    # A hub name or a directory of data files: listing the splits of the streamed dataset reads no rows.
    splits = _call(lambda: datasets.load_dataset(spec.name, spec.config, streaming=True), text)
    chosen = _pick_split(list(splits), wanted, explicit, text)
    if streaming or (streaming is None and spec.local):
        return splits[chosen]
    return _call(lambda: datasets.load_dataset(spec.name, spec.config, split=chosen), text)


def check_columns(ds: Any, columns: Sequence[str], where: str, fix: str) -> None:
    """A DataError naming the available columns when one of `columns` (empty names skipped) is missing.

    A streamed CSV or JSON file knows its columns only once read; `iter_column` checks those on the first batch.
    """
    available = getattr(ds, "column_names", None)
    if available is None:
        return
    for column in columns:
        if column and column not in available:
            raise DataError(f"{where}: no column {column!r} (columns: {', '.join(available) or 'none'}); {fix}")


def iter_batches(ds: Any, where: str, batch_size: int | None = None) -> Iterator[dict[str, list[Any]]]:
    """Column batches of `BATCH_ROWS` rows, read one at a time; a failure while reading is one DataError."""
    batches = iter(ds.iter(batch_size=batch_size or BATCH_ROWS))
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as exc:
            raise _load_error(exc, where) from None
        yield batch


def iter_column(ds: Any, column: str, where: str, fix: str) -> Iterator[Any]:
    """The values of one column, batch by batch."""
    check_columns(ds, [column], where, fix)
    for batch in iter_batches(ds, where):
        if column not in batch:
            raise DataError(f"{where}: no column {column!r} (columns: {', '.join(batch) or 'none'}); {fix}")
        yield from batch[column]


def _class_names(feature: Any) -> list[str] | None:
    """Names of a ClassLabel feature, or of a Sequence(ClassLabel) / [ClassLabel] feature."""
    names = getattr(feature, "names", None)
    if names:
        return list(names)
    inner = getattr(feature, "feature", None)
    if inner is None and isinstance(feature, list) and feature:
        inner = feature[0]
    names = getattr(inner, "names", None)
    return list(names) if names else None


def _named(value: Any, names: list[str]) -> Any:
    if isinstance(value, list):
        return [names[v] if isinstance(v, int) and 0 <= v < len(names) else v for v in value]
    return names[value] if isinstance(value, int) and 0 <= value < len(names) else value


def iter_rows(ds: Any, where: str) -> Iterator[dict[str, Any]]:
    """Rows as plain dicts, batch by batch; ClassLabel integers become their names."""
    features = getattr(ds, "features", None) or {}
    convert = {col: names for col, feature in features.items() if (names := _class_names(feature)) is not None}
    for batch in iter_batches(ds, where):
        columns = list(batch)
        for values in zip(*(batch[c] for c in columns), strict=True):
            row = dict(zip(columns, values, strict=True))
            for col, names in convert.items():
                if col in row:
                    row[col] = _named(row[col], names)
            yield row
