"""Layer normalisation kinds: LayerNorm (BERT, GPT) and scale-only RMS normalisation (T5)."""

from __future__ import annotations

import torch
from torch import nn

NORM_KINDS = ("layernorm", "rms")


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight: no mean subtracted, no bias (T5's LayerNorm, Zhang and Sennrich
    2019). The statistics are computed in float32 whatever the input dtype, as transformers' T5LayerNorm
    does, so a bf16 model normalises like an fp32 one."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.promote_types(x.dtype, torch.float32))  # half precision up, float64 stays
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * h).to(x.dtype)


def build_norm(kind: str, hidden_size: int, eps: float) -> nn.Module:
    """The one place a norm-kind name becomes a module."""
    if kind == "layernorm":
        return nn.LayerNorm(hidden_size, eps=eps)
    if kind == "rms":
        return RMSNorm(hidden_size, eps=eps)
    raise ValueError(f"unknown norm kind {kind!r}; choose one of {', '.join(NORM_KINDS)}")
