"""Using a fine-tuned model without training it: `bertzoo evaluate` (its metrics on a split or a labelled file)
and `bertzoo predict` (JSONL in, JSONL out); `map_jsonl` is the bounded-memory, atomic JSONL pass both
`predict` and `generate` write through."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertzoo.errors import ConfigError, DataError
from bertzoo.io import FINETUNE_CONFIG
from bertzoo.loading import load_finetuned
from bertzoo.loading import resolve as resolve_model_path
from bertzoo.train.finetune import SPLITS, has_split, json_default


def to_device(model: nn.Module, device: str) -> nn.Module:
    from bertzoo.engine.devices import resolve_device

    return model.to(resolve_device(device))


def _int8(model: nn.Module, int8: bool) -> nn.Module:
    """`model`, or its copy with int8 linear layers (`bertzoo.interop.int8`)."""
    if not int8:
        return model
    from bertzoo.interop.int8 import quantize_int8

    return quantize_int8(model)


def evaluate_model(
    model_dir: str | Path,
    *,
    split: str | None = None,
    data: str | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    int8: bool = False,
):
    """Score a fine-tuned model on a split of its own configured data (`split`, default test) or on a
    labelled file (`data`, read like the training data); `int8` quantizes its linear layers first (CPU only).
    Returns (EvalResult, FinetuneConfig)."""
    overrides: dict[str, Any] = {}
    if data:
        _refuse_file_for_mixture(model_dir)
        overrides["data"] = {"dataset": "", "test": str(data)}
        split = "test"
    split = split or "test"
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose dev or test")
    if batch_size is not None:
        if batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
        overrides["train"] = {"eval_batch_size": batch_size}
    task, model, _ = load_finetuned(model_dir, overrides)
    if not has_split(task.cfg, split):
        raise ConfigError(f"{model_dir} was fine-tuned without {split} data; pass a labelled file with --data FILE")
    model = _int8(to_device(model, device), int8)
    examples = task.load(split)
    if not examples:
        raise DataError(f"the {split} data holds no examples")
    result = task.evaluate(model, examples, task.featurize(examples, split))
    return result, task.cfg


def _refuse_file_for_mixture(model_dir: str | Path) -> None:
    """A multi-task model's sources take their task's prefix, which a labelled file does not name."""
    saved = resolve_model_path(str(model_dir)) / FINETUNE_CONFIG
    if not saved.is_file():
        return
    mixture = (json.loads(saved.read_text(encoding="utf-8")).get("data") or {}).get("mixture") or []
    if mixture:
        raise ConfigError(
            f"{model_dir} was fine-tuned on a mixture of tasks, and a --data file does not say which task's prefix "
            "its sources take; evaluate the tasks' own splits with --split dev or --split test"
        )


def read_jsonl(path: Path):
    """(line number, record) for each non-blank line; DataError naming the line for anything else."""
    if not path.is_file():
        raise DataError(f"input file not found: {path}; pass a JSONL file (one JSON object per line)")
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # JSONDecodeError, an int over 4300 digits, deep nesting
                raise DataError(f"{path}:{n} is not valid JSON; write one JSON object per line") from None
            if not isinstance(record, dict):
                raise DataError(f'{path}:{n} is not a JSON object; write one object per line, e.g. {{"text": ...}}')
            yield n, record


def predict_inputs(task: Any, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prediction inputs in the task's own field names: a classifier trained on other text columns
    (data.text_column / text_pair_column) reads them as `text` / `text_pair`, as its training data was."""
    d = task.cfg.data
    renames = {d.text_column: "text", d.text_pair_column: "text_pair"} if task.cfg.task == "classification" else {}
    renames = {src: dst for src, dst in renames.items() if src and src != dst}
    return [{renames.get(k, k): v for k, v in r.items()} for r in records] if renames else records


def predict_file(
    model_dir: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    *,
    batch_size: int = 64,
    chunk_size: int = 4096,
    device: str = "auto",
    overrides: dict[str, Any] | None = None,
    int8: bool = False,
) -> int:
    """Batch inference: one JSON object per input line in, one prediction object per line out (same
    order; an input `id` is carried over). Inputs use the training data's field names (e.g. `text`,
    or the configured data.text_column). Runs in chunks, so memory stays bounded for any file size,
    and writes the output atomically. `overrides` update the saved config (e.g. {"generation": {...}}).
    `int8`: the linear layers dynamically quantized (CPU only). Returns the number of predictions."""
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    task, model, _ = load_finetuned(model_dir, {**(overrides or {}), "train": {"eval_batch_size": batch_size}})
    model = _int8(to_device(model, device), int8)

    def predict(records: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
        # `source` ("path:line", as the training readers set it) lets the task's input checks name the line.
        inputs = predict_inputs(task, [{**r, "source": f"{input_path}:{n}"} for n, r in records])
        return task.predict(model, inputs)

    return map_jsonl(input_path, output_path, predict, chunk_size=chunk_size, what="predict")


def map_jsonl(
    input_path: str | Path,
    output_path: str | Path,
    fn: Callable[[list[tuple[int, dict[str, Any]]]], list[dict[str, Any]]],
    *,
    chunk_size: int = 4096,
    what: str = "predict",
) -> int:
    """One output object per input JSON line: `fn` maps chunks of (line number, record) to as many result
    dicts (an input `id` is carried over), under inference mode. Memory stays bounded for any file size, and
    the output is written atomically: on any error an existing file stays as it was. Returns the count."""
    from bertzoo.io import replace_atomically

    count = 0

    def flush(records: list[tuple[int, dict[str, Any]]], out) -> int:
        results = fn(records)
        if len(results) != len(records):
            raise DataError(f"the task returned {len(results)} results for {len(records)} inputs")
        for (_, record), result in zip(records, results, strict=True):
            row = {"id": record["id"], **result} if "id" in record and "id" not in result else result
            out.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
        return len(records)

    def write(tmp: str) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8") as out:
            chunk: list[tuple[int, dict[str, Any]]] = []
            with torch.inference_mode():
                for line_number, record in read_jsonl(Path(input_path)):
                    chunk.append((line_number, record))
                    if len(chunk) >= chunk_size:
                        count += flush(chunk, out)
                        chunk = []
                if chunk:
                    count += flush(chunk, out)
        if count == 0:  # raised before the rename: an existing output stays as it was
            raise DataError(f"{input_path} holds no JSON lines; nothing to {what}")

    replace_atomically(write, Path(output_path))
    return count
