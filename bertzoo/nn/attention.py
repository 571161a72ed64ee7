"""Multi-head attention on torch's scaled_dot_product_attention.

SDPA picks a fused kernel (flash / memory-efficient / the CPU flash kernel) whenever the mask
allows; the explicit softmax path runs only when attention probabilities are requested (for
visualisation or distillation).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.nn.kv_cache import LayerCache
from bertzoo.nn.masks import Causal, causal_mask
from bertzoo.nn.unpad import Packing


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | Causal | None = None,
    bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool | str = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention.

    q: (batch, heads, query, head_dim); k, v: (batch, heads, key, head_dim).
    mask: bool, broadcastable to (batch, heads, query, key), True = attend; `CAUSAL` (bertzoo.nn.masks) for a
    purely causal pattern, which SDPA runs with `is_causal=True` and no mask tensor. None (no mask) is what
    lets SDPA take its fused kernels (flash on CUDA, the CPU flash kernel): callers pass None, not an all-True
    mask, when nothing is hidden.
    bias: additive scores (e.g. relative positions), broadcastable the same way.
    Returns the context (batch, heads, query, head_dim) and, if asked, the probabilities
    (`need_weights=True`) or the scores before the softmax and before any mask (`need_weights="scores"`:
    q.k / sqrt(d) + bias, what TinyBERT distils; masked positions are the caller's to ignore).
    `scale` multiplies q.k: None is 1 / sqrt(head_dim); T5 passes 1.0 (its initialisation holds the scaling).
    """
    if isinstance(mask, Causal):
        if bias is None and not need_weights and q.size(-2) == k.size(-2):
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
            return out, None
        mask = causal_mask(q.size(-2), k.size(-2), device=q.device)
    if bias is not None:
        # SDPA takes one additive mask: fold the boolean mask into the bias.
        bias = bias.to(q.dtype)
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    else:
        attn_mask = mask
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale), None
    scores = q @ k.transpose(-1, -2)  # (batch, heads, query, key)
    scores = scores / math.sqrt(q.size(-1)) if scale is None else scores * scale
    raw = scores if bias is None else scores + bias
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    probs = scores.float().softmax(dim=-1).to(q.dtype)
    dropped = F.dropout(probs, p=dropout_p) if dropout_p > 0 else probs
    return dropped @ v, (raw if need_weights == "scores" else probs)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused projection for queries, keys and values.

    `head_dim` defaults to hidden_size / num_heads; another value gives an inner width heads x head_dim
    different from the hidden size (T5's d_kv). `scale` multiplies the scores (None: 1 / sqrt(head_dim))."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        head_dim: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if head_dim is None and hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = head_dim or hidden_size // num_heads
        self.scale = scale
        self.dropout = dropout
        inner = num_heads * self.head_dim
        # One (hidden -> 3*inner) matmul instead of three: fewer kernel launches, better GEMM shapes.
        self.qkv = nn.Linear(hidden_size, 3 * inner, bias=bias)
        self.out = nn.Linear(inner, hidden_size, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | Causal | Packing | None = None,
        bias: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        need_weights: bool | str = False,
        kv: LayerCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (batch, seq, hidden), or (tokens, hidden) when `mask` is a `Packing` (unpadded execution: each
        sequence attends to its own tokens). `memory` (batch, mem, hidden) is prepended to the keys and values
        (Transformer-XL recurrence); it is used as is, so detach it upstream if gradients must stop.
        `kv`: incremental decoding; x holds the new positions only, their keys and values are appended
        to the cache and the queries read every cached position (the mask is (.., seq, past + seq))."""
        if isinstance(mask, Packing):
            return self._packed(x, mask), None
        b, s, _ = x.shape
        if memory is None:
            qkv = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, seq, head_dim)
            if kv is not None:
                k, v = kv.update(k, v)  # (batch, heads, past + seq, head_dim)
        else:
            full = torch.cat([memory, x], dim=1)  # (batch, mem + seq, hidden)
            kv_len = full.size(1)
            qkv = self.qkv(full).view(b, kv_len, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0][:, :, -s:], qkv[1], qkv[2]
        dropout = self.dropout if self.training else 0.0
        ctx, probs = attend(q, k, v, mask, bias, dropout, need_weights, self.scale)
        ctx = ctx.transpose(1, 2).reshape(b, s, -1)  # (batch, seq, inner)
        return self.out(ctx), probs

    def _packed(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        """Self-attention over packed tokens x (tokens, hidden)."""
        q, k, v = self.qkv(x).view(x.size(0), 3, self.num_heads, self.head_dim).unbind(1)  # (tokens, heads, dim)
        dropout = self.dropout if self.training else 0.0
        ctx = packing.attend(q, k, v, dropout, self.scale)  # (tokens | queries, heads, dim)
        return self.out(ctx.reshape(ctx.size(0), -1))


class CrossAttention(nn.Module):
    """Multi-head attention from a decoder sequence to encoder states (encoder-decoder models); `head_dim`
    and `scale` as in SelfAttention. Keys and values are one fused projection of the context."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float = 0.0,
        kv_size: int | None = None,
        bias: bool = True,
        *,
        head_dim: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim or hidden_size // num_heads
        self.scale = scale
        self.dropout = dropout
        inner = num_heads * self.head_dim
        self.q = nn.Linear(hidden_size, inner, bias=bias)
        self.kv = nn.Linear(kv_size or hidden_size, 2 * inner, bias=bias)
        self.out = nn.Linear(inner, hidden_size, bias=bias)

    def project(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (batch, heads, key, head_dim) of the context."""
        kv = self.kv(context).view(context.size(0), context.size(1), 2, self.num_heads, self.head_dim)
        k, v = kv.permute(2, 0, 3, 1, 4)
        return k, v

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None,
        mask: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        need_weights: bool | str = False,
        kv: LayerCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (batch, query, hidden); context: (batch, key, kv_size); mask over keys. `kv` (incremental
        decoding): the context's keys and values are projected on the first call and kept in the cache
        (`LayerCache.cross`), later calls read them (the context may then be None)."""
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        if kv is not None and kv.cross is not None:
            k, v = kv.cross
        else:
            k, v = self.project(context)
            if kv is not None:
                kv.cross = (k, v)
        dropout = self.dropout if self.training else 0.0
        ctx, probs = attend(q, k, v, mask, bias, dropout, need_weights, self.scale)
        return self.out(ctx.transpose(1, 2).reshape(b, s, -1)), probs
