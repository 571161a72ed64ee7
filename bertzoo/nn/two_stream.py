"""Two-stream relative self-attention (Yang et al. 2019, section 2.3) with relative segment encoding.

Every position i has a content stream h_i (it has read token i) and, for a predicted position, a query
stream g_i (it knows position i but not token i). Both streams ask with the same projections and read
keys and values of the content stream only, over [memory; segment]:

    score(i, j) = ((q_i + u) . k_j + (q_i + v) . W_R R_{i - j} + (q_i + s) . e_{seg(i) != seg(j)}) / sqrt(d)

the Transformer-XL score (`relative_scores`) plus a segment term: e_0 / e_1 are two learned vectors per
head for "same segment" / "different segment", so any number of segments works and no absolute segment id
enters the model. What each stream may see is the caller's mask; the content stream's includes the query's
own position, the query stream's does not.

Projections are stored as (hidden, heads, head_dim) tensors, the layout of the paper's code, so checkpoints
convert by name alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.nn.relative_attention import relative_scores

__all__ = ["TwoStreamAttention", "heads_of", "merge_heads", "rows_at", "segment_scores"]


def segment_scores(q: torch.Tensor, bias: torch.Tensor, embed: torch.Tensor, different: torch.Tensor) -> torch.Tensor:
    """(q_i + s) . e_{different(i, j)}: q (batch, heads, q_len, d), bias (heads, d), embed (2, heads, d),
    different (batch, q_len, k_len) bool. Returns (batch, heads, q_len, k_len)."""
    both = torch.einsum("bnqd,snd->bnqs", q + bias[:, None], embed)  # (batch, heads, q_len, 2)
    return torch.where(different[:, None], both[..., 1:], both[..., :1])


class TwoStreamAttention(nn.Module):
    """Relative multi-head attention for a content stream and an optional query stream; returns each
    stream's output projection (the residual and norm are the layer's). No biases in the projections."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout = dropout
        shape = (hidden_size, num_heads, head_dim)
        self.q = nn.Parameter(torch.zeros(shape))
        self.k = nn.Parameter(torch.zeros(shape))
        self.v = nn.Parameter(torch.zeros(shape))
        self.o = nn.Parameter(torch.zeros(shape))
        self.r = nn.Parameter(torch.zeros(shape))  # W_R: sinusoid -> positional key
        self.content_bias = nn.Parameter(torch.zeros(num_heads, head_dim))  # u
        self.position_bias = nn.Parameter(torch.zeros(num_heads, head_dim))  # v
        self.segment_bias = nn.Parameter(torch.zeros(num_heads, head_dim))  # s
        self.segment_embed = nn.Parameter(torch.zeros(2, num_heads, head_dim))  # e_same, e_different

    def forward(
        self,
        h: torch.Tensor,
        g: torch.Tensor | None,
        pos: torch.Tensor,
        *,
        top: int,
        memory: torch.Tensor | None = None,
        different: torch.Tensor | None = None,
        content_mask: torch.Tensor | None = None,
        query_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        query_rows: tuple[torch.Tensor, torch.Tensor] | None = None,
        content: bool = True,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, tuple[torch.Tensor | None, torch.Tensor | None]]:
        """h: (batch, seq, hidden) content stream; g: (batch, num_predict, hidden) query stream or None;
        pos: (r_len, hidden) sinusoids whose row c is distance top - c; memory: (batch, mem, hidden), used as
        is (detach it upstream); different: (batch, seq, mem + seq) bool segment inequality (None: no segment
        term); masks: bool broadcastable to (batch, heads, seq, mem + seq), True = attend, None = all;
        target_mapping: (batch, num_predict, seq) float, the position each query-stream row predicts (None:
        g is position-aligned with h); query_rows: (positions, present), both (batch, num_predict), the same
        mapping when its rows are one-hot or empty (`XLNet.forward` finds out): the query stream is then scored
        at the predicted positions only, not scattered over all of them, and an empty row reads nothing, as
        an all-zero mapping row does. content=False skips the content stream's own attention (its keys and
        values are still read by the query stream), for a top layer whose content output nobody reads.
        Returns (h output or None, g output or None, (h probs, g probs) if asked)."""
        full = h if memory is None else torch.cat([memory, h], dim=1)  # (batch, k_len, hidden)
        mem_len = full.size(1) - h.size(1)
        k, v = heads_of(full, self.k), heads_of(full, self.v)  # (batch, heads, k_len, d)
        r = heads_of(pos[None], self.r)[0]  # (heads, r_len, d)

        def attend(
            q: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor | None]:
            scores = relative_scores(
                q, k, r, self.content_bias, self.position_bias, mem_len=mem_len, top=top, query_positions=positions
            )
            if different is not None:
                rows = different if positions is None else rows_at(different[:, None], positions)[:, 0]
                scores = scores + segment_scores(q, self.segment_bias, self.segment_embed, rows)
            scores = scores / math.sqrt(self.head_dim)  # (batch, heads, q_len, k_len)
            if mask is not None:
                if positions is not None:
                    mask = rows_at(mask, positions)
                # The dtype's minimum, not -inf: a row with no visible key (a query stream seeing nothing)
                # gets uniform weights instead of NaN, as transformers' `score - 1e30 * mask` gives.
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            probs = scores.float().softmax(dim=-1).to(q.dtype)
            ctx = F.dropout(probs, p=self.dropout, training=self.training) @ v  # (batch, heads, q_len, d)
            return ctx, probs if need_weights else None

        out_h = probs_h = None
        if content:
            q_h = heads_of(h, self.q)  # (batch, heads, seq, d)
            ctx_h, probs_h = attend(q_h, content_mask)
            out_h = merge_heads(ctx_h, self.o)  # (batch, seq, hidden)
        if g is None:
            return out_h, None, (probs_h, None)
        q_g = heads_of(g, self.q)  # (batch, heads, num_predict, d)
        if query_rows is not None:
            positions, present = query_rows
            ctx_g, probs_g = attend(q_g, query_mask, positions)
            ctx_g = ctx_g * present[:, None, :, None].to(ctx_g.dtype)  # an empty mapping row reads nothing
        elif target_mapping is not None:
            # Each prediction asks from the position it predicts (its distances and segment are that position's).
            q_g = torch.einsum("bnmd,bms->bnsd", q_g, target_mapping)  # (batch, heads, seq, d)
            ctx_g, probs_g = attend(q_g, query_mask)
            ctx_g = torch.einsum("bnsd,bms->bnmd", ctx_g, target_mapping)  # (batch, heads, num_predict, d)
        else:
            ctx_g, probs_g = attend(q_g, query_mask)
        out_g = merge_heads(ctx_g, self.o)  # (batch, num_predict, hidden)
        return out_h, out_g, (probs_h, probs_g)


def heads_of(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (batch, len, hidden) projected by a (hidden, heads, d) weight: (batch, heads, len, d). One 2-D matmul
    (an einsum of these shapes runs as a batch-1 bmm, measured slower on CPU)."""
    b, n = x.size(0), x.size(1)
    return (x @ weight.flatten(1)).view(b, n, weight.size(1), weight.size(2)).transpose(1, 2)


def merge_heads(ctx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ctx (batch, heads, len, d) through the (hidden, heads, d) output weight: (batch, len, hidden)."""
    b, _, n, _ = ctx.shape
    return ctx.transpose(1, 2).reshape(b, n, -1) @ weight.flatten(1).t()


def rows_at(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The rows `positions` (batch, q_len) of x (batch or 1, heads or 1, seq, k_len), a mask or a segment
    comparison broadcast over the batch: (batch, heads or 1, q_len, k_len)."""
    x = x.expand(positions.size(0), *x.shape[1:])
    index = positions[:, None, :, None].expand(-1, x.size(1), -1, x.size(-1))
    return x.gather(-2, index)
