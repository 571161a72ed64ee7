"""Absolute position encodings: learned tables (BERT) and fixed sinusoids (the Transformer).

Relative schemes (Transformer-XL, T5) act inside attention as a score bias instead, so they are
passed to the attention layers rather than added to the embeddings.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LearnedPositions(nn.Module):
    """A trainable (max_position, dim) table, looked up by position id."""

    def __init__(self, max_position: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_position, dim))
        nn.init.normal_(self.weight, std=0.02)

    @property
    def max_position(self) -> int:
        return self.weight.size(0)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(position_ids, self.weight)


def sinusoid_table(max_position: int, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), as in "Attention is all you need"."""
    position = torch.arange(max_position, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(max_position, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal encodings; a buffer, not saved, so checkpoints stay small."""

    def __init__(self, max_position: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoid_table(max_position, dim), persistent=False)

    @property
    def max_position(self) -> int:
        return self.table.size(0)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(position_ids, self.table)


def build_positions(kind: str, max_position: int, dim: int) -> nn.Module | None:
    """The one place a position-kind name becomes a module."""
    if kind == "learned":
        return LearnedPositions(max_position, dim)
    if kind == "sinusoidal":
        return SinusoidalPositions(max_position, dim)
    if kind == "none":
        return None
    raise ValueError(f"unknown position kind {kind!r}; choose learned, sinusoidal or none")
