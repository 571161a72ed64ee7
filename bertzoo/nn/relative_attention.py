"""Transformer-XL's relative multi-head attention (Dai et al. 2019, section 3.3).

The score of query i (absolute position mem_len + i) and key j (position j of [memory; current]) is

    score(i, j) = ((q_i + u) . k_j + (q_i + v) . W_R R_{mem_len + i - j}) / sqrt(d_head)

with R a fixed sinusoid of the distance, W_R a learned projection, and u, v learned per-head biases (the
paper's global content and position biases). No absolute position enters the model, so hidden states
computed for one segment stay valid as memory for the next.

The relative shift is a gather rather than the paper's pad-and-reshape trick: the trick is exact only on
the entries a causal mask keeps (the others read the neighbouring row), leans on the memory layout of a
padded tensor, and needs a different reshape for XLNet's two-sided distance table; a gather states the
index (row = top - distance) directly, is exact for every entry, and costs one (q_len, k_len) index.

The score's content lives in `relative_scores`, which takes q, k, the projected positional keys and the
two biases, so XLNet can add its segment term to it and call it again for its query stream.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "RelativeSelfAttention",
    "relative_distances",
    "signed_distances",
    "relative_scores",
    "relative_shift",
    "relative_sinusoids",
]


def relative_distances(k_len: int, clamp_len: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """The distances k_len - 1, ..., 1, 0 (descending: row c of the positional table is distance k_len - 1 - c),
    float, with every distance beyond `clamp_len` read as `clamp_len` (None: no clamping): the causal,
    one-sided case of `signed_distances`."""
    return signed_distances(k_len - 1, 0, clamp_len, device)


def signed_distances(
    top: int, bottom: int, clamp_len: int | None = None, device: torch.device | None = None
) -> torch.Tensor:
    """The distances top, top - 1, ..., bottom (descending, float), each clamped to [-clamp_len, clamp_len]
    (None: no clamping). A bidirectional model's table reaches negative distances (keys after the query):
    top = k_len - 1, bottom = -(q_len - 1); pass `top` on to `relative_shift`."""
    distances = torch.arange(top, bottom - 1, -1, dtype=torch.float32, device=device)
    if clamp_len is not None:
        # Distances never seen in training share the largest trained one instead of extrapolating.
        distances = distances.clamp(-clamp_len, clamp_len)
    return distances


def relative_sinusoids(distances: torch.Tensor, dim: int) -> torch.Tensor:
    """(len,) distances -> (len, dim) embeddings [sin(d f_0) .. sin(d f_{dim/2-1}), cos(d f_0) .. cos(...)],
    f_k = 1 / 10000^(2k / dim). sin and cos are concatenated, not interleaved as in `sinusoid_table`: that is
    the paper's code (and transformers'), so the columns of a converted W_R line up."""
    inv_freq = 1.0 / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float64, device=distances.device) / dim)
    angles = distances.to(torch.float64)[:, None] * inv_freq[None, :]  # (len, dim / 2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1).float()  # (len, dim)


def relative_shift(
    position: torch.Tensor,
    mem_len: int,
    k_len: int,
    top: int | None = None,
    query_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scores against the positional table -> scores against the keys.

    position: (batch, heads, q_len, r_len), column c scored against distance top - c (default top = r_len - 1,
    the causal table k_len - 1 .. 0). Returns (batch, heads, q_len, k_len) whose [i, j] is the column of distance
    mem_len + i - j. Causal tables have no negative distances: future keys read a clamped column and must be
    masked by the caller (they always are: they are the future). query_positions: (batch, q_len), the segment
    position each query row stands for when the rows are not simply 0 .. q_len - 1 (XLNet's query stream asks
    only at the predicted positions).
    """
    q_len, r_len = position.shape[-2:]
    top = r_len - 1 if top is None else top
    if query_positions is None:
        query = torch.arange(q_len, device=position.device)[:, None]
    else:
        query = query_positions[:, None, :, None]  # (batch, 1, q_len, 1)
    key = torch.arange(k_len, device=position.device)[None, :]
    column = (top - (mem_len + query - key)).clamp(0, r_len - 1)  # (q_len, k_len), or (batch, 1, q_len, k_len)
    return position.gather(-1, column.expand(*position.shape[:-2], q_len, k_len))


def relative_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    r: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    *,
    mem_len: int,
    top: int | None = None,
    query_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """(q_i + u) . k_j + (q_i + v) . r_{mem_len + i - j}, unscaled and unmasked.

    q: (batch, heads, q_len, d_head); k: (batch, heads, k_len, d_head); r: the projected positional keys
    (heads, r_len, d_head) or (batch, heads, r_len, d_head), row c for distance top - c (see `relative_shift`);
    u, v: (heads, d_head); query_positions: see `relative_shift`. Returns (batch, heads, q_len, k_len).
    """
    content = (q + u[:, None]) @ k.transpose(-1, -2)  # (batch, heads, q_len, k_len)
    position = (q + v[:, None]) @ r.transpose(-1, -2)  # (batch, heads, q_len, r_len)
    return content + relative_shift(position, mem_len, k.size(-2), top, query_positions)


class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention over [memory; x] with relative position scores. No biases in the
    projections, as in the paper's code; u and v are (heads, head_dim) parameters."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout = dropout
        inner = num_heads * head_dim
        self.qkv = nn.Linear(hidden_size, 3 * inner, bias=False)
        self.r = nn.Linear(hidden_size, inner, bias=False)  # W_R: sinusoid -> positional key
        self.out = nn.Linear(inner, hidden_size, bias=False)
        self.u = nn.Parameter(torch.zeros(num_heads, head_dim))  # content bias
        self.v = nn.Parameter(torch.zeros(num_heads, head_dim))  # position bias

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool | str = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (batch, q_len, hidden); pos: (k_len, hidden) sinusoids of distances k_len - 1 .. 0 (one table
        built by the caller for every layer); memory: (batch, mem, hidden), used as is, so detach it upstream
        to stop gradients; mask: bool broadcastable to (batch, heads, q_len, k_len), True = attend.
        Returns the output (batch, q_len, hidden) and, if asked, the probabilities (`need_weights=True`) or
        the scaled scores before the mask (`need_weights="scores"`)."""
        b, s, _ = x.shape
        full = x if memory is None else torch.cat([memory, x], dim=1)  # (batch, k_len, hidden)
        k_len = full.size(1)
        # One fused projection of every position (queries of the memory are thrown away): a single GEMM.
        qkv = self.qkv(full).view(b, k_len, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, k_len, head_dim)
        q = q[:, :, k_len - s :]  # (batch, heads, q_len, head_dim): only the current segment asks
        r = self.r(pos).view(k_len, self.num_heads, self.head_dim).transpose(0, 1)  # (heads, k_len, head_dim)
        scores = relative_scores(q, k, r, self.u, self.v, mem_len=k_len - s) / math.sqrt(self.head_dim)
        raw = scores  # (batch, heads, q_len, k_len)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = scores.float().softmax(dim=-1).to(q.dtype)
        dropped = F.dropout(probs, p=self.dropout, training=self.training)
        ctx = (dropped @ v).transpose(1, 2).reshape(b, s, -1)  # (batch, q_len, inner)
        weights = raw if need_weights == "scores" else probs if need_weights else None
        return self.out(ctx), weights
