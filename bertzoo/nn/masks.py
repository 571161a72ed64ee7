"""Attention masks. Convention everywhere: boolean, True = this query may attend to this key.

Masks broadcast to (batch, heads, query, key); the attention accepts any of these shapes, so the
same layer serves padding (BERT), causal (GPT), prefix (UniLM, T5 prefix-LM) and arbitrary
per-example masks (XLNet's permutation masks, MASS).
"""

from __future__ import annotations

import torch


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, key) 1/0 or bool -> (batch, 1, 1, key) bool."""
    return attention_mask.bool()[:, None, None, :]


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """(query, key) bool lower-triangular mask; with k_len > q_len the extra keys are a visible past
    (memory), as in Transformer-XL."""
    k_len = q_len if k_len is None else k_len
    offset = k_len - q_len
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)


def causal_attention_mask(mask: torch.Tensor | None, seq_len: int, device: torch.device | None = None) -> torch.Tensor:
    """A 4-D boolean `mask` (or None) restricted to each query's own and earlier positions: the mask of
    a decoder-only model (GPT), built once per forward pass and shared by every layer.

    A query always keeps its own key: a padded query whose earlier keys are all padding (left padding)
    would otherwise have no key at all, SDPA would return NaN for it, and later layers would carry the
    NaN to real tokens through its values (0 x NaN). Real queries see themselves anyway, so their
    outputs do not change."""
    causal = causal_mask(seq_len, device=device)  # (query, key)
    if mask is None:
        return causal[None, None]
    own = torch.eye(seq_len, dtype=torch.bool, device=device)
    return (mask | own) & causal  # (batch, 1, query, key)


def prefix_lm_mask(prefix_lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(batch,) prefix lengths -> (batch, 1, seq, seq): bidirectional inside the prefix, causal after.

    This is UniLM's sequence-to-sequence mask and T5's prefix-LM mask.
    """
    device = prefix_lengths.device
    causal = causal_mask(seq_len, device=device)[None]  # (1, seq, seq)
    key_in_prefix = torch.arange(seq_len, device=device)[None, :] < prefix_lengths[:, None]  # (batch, key)
    return (causal | key_in_prefix[:, None, :])[:, None]


def to_attention_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Normalise a user mask to a 4-D boolean mask broadcastable to (batch, heads, query, key).

    2-D (batch, key) is read as a padding mask, 3-D (batch, query, key) as a per-example mask,
    4-D is taken as is. Float masks are additive (0 = keep, large negative = drop).
    """
    if mask is None:
        return None
    if mask.dtype.is_floating_point:
        mask = mask > torch.finfo(mask.dtype).min / 2
    else:
        mask = mask.bool()
    if mask.dim() == 2:
        return padding_mask(mask)
    if mask.dim() == 3:
        return mask[:, None]
    if mask.dim() == 4:
        return mask
    raise ValueError(f"attention mask must have 2, 3 or 4 dimensions, got shape {tuple(mask.shape)}")


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (None = no restriction)."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of `hidden` (batch, seq, dim) over the positions where `mask` (batch, seq) is nonzero
    (all positions when None): sentence-transformers-style mean pooling."""
    if mask is None:
        return hidden.mean(dim=1)
    real = mask.to(hidden.dtype).unsqueeze(-1)  # (batch, seq, 1)
    return (hidden * real).sum(dim=1) / real.sum(dim=1).clamp(min=1)
