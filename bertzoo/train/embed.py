"""Batch inference: sort texts by length, pad per batch, run under inference mode.

Sorting by length means a batch pads to its own longest text, not the corpus's, which is most of
the speed-up over running texts in their given order on mixed-length data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn

from bertzoo.nn.masks import masked_mean
from bertzoo.precision import autocast_dtype, resolve_precision

Pooling = Literal["cls", "mean", "pooler"]


def tokenize_sorted(tokenizer, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], np.ndarray]:
    """[CLS] text [SEP] ids truncated to max_length, and the order that sorts them by length."""
    body = tokenizer.encode_batch(list(texts))
    ids = [[tokenizer.cls_id, *t[: max_length - 2], tokenizer.sep_id] for t in body]
    order = np.argsort([len(x) for x in ids], kind="stable")
    return ids, order


def pad(ids: list[list[int]], pad_id: int, multiple: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), padded to the longest row rounded up to `multiple`."""
    longest = max(len(x) for x in ids)
    width = -(-longest // multiple) * multiple
    out = np.full((len(ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        out[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return torch.from_numpy(out), torch.from_numpy(mask)


def encode(
    encoder: nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int = 128,
    pooling: Pooling = "mean",
    precision: Literal["auto", "fp32", "bf16"] = "fp32",
    normalize: bool = False,
) -> np.ndarray:
    """Sentence vectors (len(texts), hidden) in the input order.

    pooling: "mean" over real tokens (sentence-transformers style), "cls" (the [CLS] hidden state)
    or "pooler" (tanh(W h_[CLS]), BERT's classifier input). precision "auto" picks bf16 only where the
    device runs it natively (`bertzoo.precision`).
    """
    device = next(encoder.parameters()).device
    ids, order = tokenize_sorted(tokenizer, texts, max_length)
    out = np.zeros((len(texts), encoder.config.hidden_size), dtype=np.float32)
    dtype = autocast_dtype(resolve_precision(precision, device))
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode(), autocast:
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                input_ids, mask = pad([ids[i] for i in chunk], tokenizer.pad_id)
                input_ids, mask = input_ids.to(device), mask.to(device)
                result = encoder(input_ids, mask)
                if pooling == "pooler":
                    vec = result.pooler_output
                elif pooling == "cls":
                    vec = result.last_hidden_state[:, 0]
                else:
                    vec = masked_mean(result.last_hidden_state, mask)
                out[chunk] = vec.float().cpu().numpy()
    finally:
        encoder.train(was_training)
    if normalize:
        out /= np.linalg.norm(out, axis=1, keepdims=True).clip(min=1e-12)
    return out
