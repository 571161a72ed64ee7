"""Helpers shared by the classification, token-classification and multiple-choice tasks: finding a
split's examples (files or a built-in dataset), pair encoding with longest-first truncation,
padding, and numpy softmax/loss for evaluation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from bertzoo.batch import pad_batch
from bertzoo.config import FinetuneConfig
from bertzoo.data.tasks.builtin import BUILTIN_TASKS, BuiltinTask, load_builtin_task
from bertzoo.data.tasks.readers import Kind, LabelType, read_examples
from bertzoo.data.text.corpus import BUILTIN_PREFIX
from bertzoo.errors import ConfigError, DataError

__all__ = [
    "PAD_MULTIPLE",
    "SPLITS",
    "attention_from_lengths",
    "builtin_spec",
    "check_max_len",
    "encode_pair_orders",
    "encode_pairs",
    "eval_batch_size",
    "example_index",
    "labels_present",
    "load_split",
    "log_softmax",
    "pad_2d",
    "sigmoid",
    "softmax",
    "truncate_pair",
]

PAD_MULTIPLE = 8  # dynamic padding rounds the batch's longest sequence up to a multiple of this
SPLITS = ("train", "dev", "test")


def builtin_spec(cfg: FinetuneConfig) -> BuiltinTask | None:
    """The `BuiltinTask` named by `data.dataset`, or None when the data comes from files."""
    name = cfg.data.dataset
    if not name:
        return None
    base = name[len(BUILTIN_PREFIX) :] if name.startswith(BUILTIN_PREFIX) else name
    spec = BUILTIN_TASKS.get(base)
    if spec is None:
        raise ConfigError(
            f"data.dataset={name!r} is not a built-in dataset; choose one of: "
            + ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_TASKS)
            + " (or leave it empty and set data.train/dev/test)"
        )
    if spec.task != cfg.task:
        raise ConfigError(f"{BUILTIN_PREFIX}{base} is a {spec.task} dataset, not {cfg.task}; set task: {spec.task}")
    return spec


def load_split(cfg: FinetuneConfig, split: str, kind: Kind, label_type: LabelType = "single") -> list[dict[str, Any]]:
    """Raw examples of `split` from `data.dataset` (built-in) or the file in data.train/dev/test."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    data = cfg.data
    if builtin_spec(cfg) is not None:
        return load_builtin_task(data.dataset, split)
    path = getattr(data, split)
    if not path:
        raise ConfigError(f"data.{split} is not set; give a data file (or data.dataset: builtin:NAME)")
    return read_examples(
        path,
        kind,
        data.format,
        text_column=data.text_column,
        text_pair_column=data.text_pair_column,
        label_column=data.label_column,
        label_type=label_type,
        split=split,
    )


def check_max_len(tokenizer, max_seq_len: int, pair: bool) -> int:
    """Tokens left for text once the specials are added; ConfigError when none are."""
    budget = max_seq_len - tokenizer.backend.num_special_tokens_to_add(pair)
    if budget < (2 if pair else 1):
        raise ConfigError(f"data.max_seq_len={max_seq_len} leaves no room for text; use at least 8")
    return budget


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths after BERT's longest-first truncation (`_truncate_seq_pair`): drop a token from the
    longer side until both fit, from the second side when they are equally long."""
    excess = len_a + len_b - budget
    if excess <= 0:
        return len_a, len_b
    if len_a > len_b:
        d = min(excess, len_a - len_b)
        len_a, excess = len_a - d, excess - d
    elif len_b > len_a:
        d = min(excess, len_b - len_a)
        len_b, excess = len_b - d, excess - d
    # Equal lengths now: alternate, the second side first.
    return len_a - excess // 2, len_b - (excess + 1) // 2


def _truncated_pairs(
    tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_seq_len: int, symmetric: bool
) -> Iterator[tuple[Any, Any]]:
    """(A, B or None) tokenizer encodings without specials, truncated longest-first to fit `max_seq_len`
    with the specials. `symmetric`: (A, B) and (B, A) keep the same tokens (where longest-first would drop
    one token more from the second side, both sides lose it)."""
    backend = tokenizer.backend
    budget = check_max_len(tokenizer, max_seq_len, pairs is not None)
    firsts = backend.encode_batch(list(texts), add_special_tokens=False)
    seconds = backend.encode_batch(list(pairs), add_special_tokens=False) if pairs is not None else None
    for i, a in enumerate(firsts):
        b = seconds[i] if seconds is not None else None
        la, lb = truncate_pair(len(a), len(b) if b is not None else 0, budget)
        if symmetric and b is not None:
            lb2, la2 = truncate_pair(len(b), len(a), budget)
            la, lb = min(la, la2), min(lb, lb2)
        if la < len(a):
            a.truncate(la)
        if b is not None and lb < len(b):
            b.truncate(lb)
        yield a, b


def _merged(backend, a, b) -> tuple[np.ndarray, np.ndarray]:
    merged = backend.post_process(a, b, add_special_tokens=True)
    return np.asarray(merged.ids, dtype=np.int32), np.asarray(merged.type_ids, dtype=np.int32)


def encode_pairs(
    tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_seq_len: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(input_ids, token_type_ids) int32 arrays of [CLS] A [SEP] (or [CLS] A [SEP] B [SEP] with B's
    segment id 1), built by the tokenizer's own post-processor after longest-first truncation
    to `max_seq_len` tokens in total. For a left-to-right model this is GPT's input transformation:
    start token [CLS], delimiter [SEP], and the final [SEP] as the extract token."""
    backend = tokenizer.backend
    return [_merged(backend, a, b) for a, b in _truncated_pairs(tokenizer, texts, pairs, max_seq_len, False)]


def encode_pair_orders(
    tokenizer, texts: Sequence[str], pairs: Sequence[str], max_seq_len: int
) -> list[tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]]:
    """Both orders of each pair, ([CLS] A [SEP] B [SEP], [CLS] B [SEP] A [SEP]) as `encode_pairs` gives
    them, from the same tokens of A and B (GPT's similarity input: the pair has no natural order)."""
    backend = tokenizer.backend
    return [
        (_merged(backend, a, b), _merged(backend, b, a))
        for a, b in _truncated_pairs(tokenizer, texts, pairs, max_seq_len, True)
    ]


def pad_2d(sequences: Sequence[np.ndarray], value: int) -> tuple[torch.Tensor, np.ndarray]:
    """(batch, longest rounded up to PAD_MULTIPLE) int64 tensor padded with `value`, and the lengths."""
    padded, lengths = pad_batch(sequences, value, PAD_MULTIPLE)
    return torch.from_numpy(padded), lengths


def attention_from_lengths(lengths: np.ndarray, width: int) -> torch.Tensor:
    """(batch, width) int64 mask: 1 on the first `lengths[i]` positions of row i."""
    return torch.from_numpy((np.arange(width)[None, :] < lengths[:, None]).astype(np.int64))


def eval_batch_size(cfg: FinetuneConfig) -> int:
    """train.eval_batch_size, or train.batch_size when unset."""
    return int(cfg.train.eval_batch_size or cfg.train.batch_size)


def example_index(features: Sequence[dict[str, Any]]) -> torch.Tensor | None:
    """The dataset indices of a batch's features (set by FeatureDataset.__getitem__), if present."""
    if "index" not in features[0]:
        return None
    return torch.tensor([int(f["index"]) for f in features], dtype=torch.int64)


def labels_present(examples: Sequence[dict[str, Any]], key: str, what: str) -> bool:
    """True when every example has `key`, False when none has; DataError for a mix."""
    have = [key in e for e in examples]
    if all(have):
        return bool(have)
    if not any(have):
        return False
    missing = next(e for e in examples if key not in e)
    raise DataError(f"{missing.get('source', 'an example')}: has no {what} while others do; label every example")


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in float64."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable log-softmax in float64 (for evaluation losses)."""
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function in float64."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # tanh form: no overflow warnings for large |x|
