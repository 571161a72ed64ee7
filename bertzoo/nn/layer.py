"""One Transformer layer: self-attention, optional cross-attention, feed-forward, each wrapped in a
residual connection with LayerNorm after it (post-norm, BERT) or before it (pre-norm, GPT-2/T5)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bertzoo.nn.attention import CrossAttention, SelfAttention
from bertzoo.nn.ffn import FeedForward
from bertzoo.nn.kv_cache import LayerCache


@dataclass
class LayerOutput:
    hidden: torch.Tensor  # (batch, seq, hidden)
    attention: torch.Tensor | None = None  # (batch, heads, seq, key) when requested
    cross_attention: torch.Tensor | None = None


class Residual(nn.Module):
    """x + dropout(f(x)) with a LayerNorm placed after (post) or before (pre) the sublayer."""

    def __init__(self, hidden_size: int, norm: str, dropout: float, eps: float) -> None:
        super().__init__()
        if norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', got {norm!r}")
        self.pre = norm == "pre"
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        """What the sublayer reads."""
        return self.norm(x) if self.pre else x

    def outer(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Combine the input with the sublayer's output."""
        out = x + self.dropout(y)
        return out if self.pre else self.norm(out)


class TransformerLayer(nn.Module):
    """Encoder layer, or decoder layer when `cross_attention=True`."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        act: str = "gelu",
        norm: str = "post",
        layer_norm_eps: float = 1e-12,
        cross_attention: bool = False,
        cross_kv_size: int | None = None,
    ) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden_size, num_heads, attention_dropout)
        self.attention_residual = Residual(hidden_size, norm, dropout, layer_norm_eps)
        self.cross = (
            CrossAttention(hidden_size, num_heads, attention_dropout, cross_kv_size) if cross_attention else None
        )
        self.cross_residual = Residual(hidden_size, norm, dropout, layer_norm_eps) if cross_attention else None
        self.ffn = FeedForward(hidden_size, intermediate_size, act)
        self.ffn_residual = Residual(hidden_size, norm, dropout, layer_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        bias: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        need_weights: bool | str = False,
        kv: LayerCache | None = None,
    ) -> LayerOutput:
        """x: (batch, seq, hidden); mask: bool (batch|1, heads|1, seq, key); context: encoder states;
        kv: this depth's key/value cache (incremental decoding)."""
        r = self.attention_residual
        y, probs = self.attention(r.inner(x), mask, bias, memory, need_weights, kv)
        x = r.outer(x, y)
        cross_probs = None
        if self.cross is not None and context is not None:
            r = self.cross_residual
            y, cross_probs = self.cross(r.inner(x), context, context_mask, need_weights=need_weights)
            x = r.outer(x, y)
        r = self.ffn_residual
        x = r.outer(x, self.ffn(r.inner(x)))
        return LayerOutput(x, probs, cross_probs)
