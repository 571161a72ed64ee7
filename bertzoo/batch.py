"""The typed batch that flows from the collator to the objectives, and the padding every collator uses.

Field names follow the Hugging Face convention users already know (`input_ids`,
`attention_mask`, `token_type_ids`, `labels` with -100 for ignored positions), so a batch can be
passed as keyword arguments to either library.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import torch

IGNORE_INDEX = -100


@dataclass
class Batch:
    """A batch of examples as tensors; optional fields are None when a task does not use them."""

    input_ids: torch.Tensor  # (batch, seq) int64
    attention_mask: torch.Tensor | None = None  # (batch, seq) bool/int, 1 = real token
    token_type_ids: torch.Tensor | None = None  # (batch, seq) int64 segment ids
    labels: torch.Tensor | None = None  # (batch, seq) int64 MLM targets, IGNORE_INDEX elsewhere
    next_sentence_label: torch.Tensor | None = None  # (batch,) int64, 0 = IsNext, 1 = NotNext
    # Global example indices; they seed masking so a run is reproducible and resumable.
    example_index: torch.Tensor | None = None  # (batch,) int64
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Move every tensor to `device`."""

        def move(t):
            return t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t

        kwargs = {f.name: move(getattr(self, f.name)) for f in fields(self) if f.name != "extra"}
        return Batch(**kwargs, extra={k: move(v) for k, v in self.extra.items()})

    def keys(self) -> Iterator[str]:
        """Names of the fields that are set (dict-like access for `**batch`)."""
        for f in fields(self):
            if f.name != "extra" and getattr(self, f.name) is not None:
                yield f.name
        yield from self.extra

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.extra:
            return self.extra[key]
        value = getattr(self, key, None) if key != "extra" else None
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in set(self.keys())

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) tokens in the batch."""
        if self.attention_mask is None:
            return self.input_ids.numel()
        return int(self.attention_mask.sum())


def pad_batch(
    sequences: Sequence[np.ndarray], pad_id: int, pad_to_multiple_of: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Stack 1-D int sequences into (batch, length) int64 padded with `pad_id`; also the lengths.

    `length` is the longest sequence rounded up to a multiple of `pad_to_multiple_of` (tensor
    cores and fused kernels run faster on multiples of 8).
    """
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    m = max(1, int(pad_to_multiple_of))
    length = -(-int(lengths.max(initial=0)) // m) * m
    out = np.full((len(sequences), length), pad_id, dtype=np.int64)
    if len(sequences):
        # One boolean scatter instead of a Python loop over rows.
        out[np.arange(length)[None, :] < lengths[:, None]] = np.concatenate([np.asarray(s) for s in sequences])
    return out, lengths
