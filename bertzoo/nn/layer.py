"""One Transformer layer: self-attention, optional cross-attention, feed-forward, each wrapped in a
residual connection with LayerNorm after it (post-norm, BERT) or before it (pre-norm, GPT-2/T5). The
norm is a LayerNorm or T5's scale-only RMS norm (`norm_kind`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bertzoo.nn.attention import CrossAttention, SelfAttention
from bertzoo.nn.ffn import FeedForward
from bertzoo.nn.kv_cache import LayerCache
from bertzoo.nn.norm import build_norm
from bertzoo.nn.unpad import Packing


@dataclass
class LayerOutput:
    hidden: torch.Tensor  # (batch, seq, hidden)
    attention: torch.Tensor | None = None  # (batch, heads, seq, key) when requested
    cross_attention: torch.Tensor | None = None


class Residual(nn.Module):
    """x + dropout(f(x)) with a norm (`kind`: layernorm or rms) placed after (post) or before (pre) the
    sublayer."""

    def __init__(self, hidden_size: int, norm: str, dropout: float, eps: float, kind: str = "layernorm") -> None:
        super().__init__()
        if norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', got {norm!r}")
        self.pre = norm == "pre"
        self.norm = build_norm(kind, hidden_size, eps)
        self.dropout = nn.Dropout(dropout)

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        """What the sublayer reads."""
        return self.norm(x) if self.pre else x

    def outer(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Combine the input with the sublayer's output."""
        out = x + self.dropout(y)
        return out if self.pre else self.norm(out)


class TransformerLayer(nn.Module):
    """Encoder layer, or decoder layer when `cross_attention=True`.

    The defaults are BERT's; T5 asks for `bias=False` (no bias in any linear), `norm_kind="rms"`,
    `gated=True` (v1.1), `head_dim` (its d_kv), `attention_scale=1.0` and `ffn_dropout`."""

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
        bias: bool = True,
        norm_kind: str = "layernorm",
        gated: bool = False,
        head_dim: int | None = None,
        attention_scale: float | None = None,
        ffn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        heads = {"head_dim": head_dim, "scale": attention_scale}
        self.attention = SelfAttention(hidden_size, num_heads, attention_dropout, bias, **heads)
        self.attention_residual = Residual(hidden_size, norm, dropout, layer_norm_eps, norm_kind)
        self.cross = (
            CrossAttention(hidden_size, num_heads, attention_dropout, cross_kv_size, bias, **heads)
            if cross_attention
            else None
        )
        self.cross_residual = (
            Residual(hidden_size, norm, dropout, layer_norm_eps, norm_kind) if cross_attention else None
        )
        self.ffn = FeedForward(hidden_size, intermediate_size, act, bias, gated=gated, dropout=ffn_dropout)
        self.ffn_residual = Residual(hidden_size, norm, dropout, layer_norm_eps, norm_kind)

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
        """x: (batch, seq, hidden); mask: bool (batch|1, heads|1, seq, key); context: encoder states
        (None while decoding incrementally once `kv` holds their keys and values); kv: this depth's
        key/value cache (incremental decoding)."""
        r = self.attention_residual
        y, probs = self.attention(r.inner(x), mask, bias, memory, need_weights, kv)
        if isinstance(mask, Packing) and mask.queries is not None:
            x = x.index_select(0, mask.queries)  # packed tokens, only some of which ask: the rest end here
        x = r.outer(x, y)
        cross_probs = None
        if self.cross is not None and (context is not None or (kv is not None and kv.cross is not None)):
            r = self.cross_residual
            y, cross_probs = self.cross(r.inner(x), context, context_mask, need_weights=need_weights, kv=kv)
            x = r.outer(x, y)
        r = self.ffn_residual
        x = r.outer(x, self.ffn(r.inner(x)))
        return LayerOutput(x, probs, cross_probs)
