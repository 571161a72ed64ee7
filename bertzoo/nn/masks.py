"""Attention masks. Convention everywhere: boolean, True = this query may attend to this key.

Masks broadcast to (batch, heads, query, key); the attention accepts any of these shapes, so the
same layer serves padding (BERT), causal (GPT), prefix (UniLM, T5 prefix-LM) and arbitrary
per-example masks (XLNet's permutation masks, MASS).
"""

from __future__ import annotations

import torch

from bertzoo.nn.unpad import tracing


class Causal:
    """A purely causal mask (each query sees itself and the keys before it) left unmaterialised: attention
    hands it to SDPA as `is_causal=True`, with no mask tensor, which keeps its fused kernels."""

    def __repr__(self) -> str:
        return "CAUSAL"


CAUSAL = Causal()


def drop_full(mask: torch.Tensor | None) -> torch.Tensor | None:
    """None when a boolean `mask` hides nothing (no sequence has padding): SDPA runs its fused kernels only
    without a mask tensor. Checked once per forward pass, not per layer (it reads one flag on the host); under
    tracing or compilation the mask is kept, so the graph holds for any batch."""
    if mask is None or mask.dtype != torch.bool or tracing() or not bool(mask.all()):
        return mask
    return None


def document_positions(document_ids: torch.Tensor) -> torch.Tensor:
    """(batch, seq) document id of each token (documents contiguous within a row) -> each token's position
    inside its own document: positions restart at 0 where the id changes."""
    pos = torch.arange(document_ids.size(1), device=document_ids.device).expand_as(document_ids)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    first = torch.where(starts, pos, torch.zeros_like(pos)).cummax(dim=1).values  # where this token's document starts
    return pos - first


def document_mask(document_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Block-diagonal attention of packed documents: (batch, seq) ids and padding mask -> (batch, 1, seq, seq) bool,
    a real query sees the real keys of its own document. A padded query sees only itself (an all-False row would
    make SDPA return NaN, see `seq2seq_mask`)."""
    same = document_ids[:, :, None] == document_ids[:, None, :]  # (batch, query, key)
    if attention_mask is not None:
        real = attention_mask.bool()
        own = torch.eye(document_ids.size(1), dtype=torch.bool, device=document_ids.device)[None]
        same = (same & real[:, None, :] & real[:, :, None]) | (own & ~real[:, :, None])
    return same[:, None]


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, key) 1/0 or bool -> (batch, 1, 1, key) bool."""
    return attention_mask.bool()[:, None, None, :]


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """(query, key) bool lower-triangular mask; with k_len > q_len the extra keys are a visible past
    (memory), as in Transformer-XL."""
    k_len = q_len if k_len is None else k_len
    offset = k_len - q_len
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)


def causal_attention_mask(
    mask: torch.Tensor | None, seq_len: int, device: torch.device | None = None, past: int = 0
) -> torch.Tensor:
    """A 4-D boolean `mask` (or None) restricted to each query's own and earlier positions: the mask of
    a decoder-only model (GPT), built once per forward pass and shared by every layer. With `past` > 0
    (incremental decoding) the queries are positions past .. past + seq_len - 1 and the keys every
    position up to the last query; `mask` then covers those past + seq_len keys.

    A query always keeps its own key: a padded query whose earlier keys are all padding (left padding)
    would otherwise have no key at all, SDPA would return NaN for it, and later layers would carry the
    NaN to real tokens through its values (0 x NaN). Real queries see themselves anyway, so their
    outputs do not change."""
    causal = causal_mask(seq_len, past + seq_len, device=device)  # (query, key)
    if mask is None:
        return causal[None, None]
    keys = torch.arange(past + seq_len, device=device)
    own = keys[None, :] == (keys[past:, None])  # (query, key): the query's own position
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


def seq2seq_mask(source_lengths: torch.Tensor, lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """UniLM's sequence-to-sequence self-attention mask over right-padded rows.

    (batch,) source lengths and real lengths -> (batch, seq_len, seq_len) bool, True = query may attend
    key. A real query sees the real keys that are in the source (key < source_length) or not after it
    (key <= query): source tokens see the whole source and nothing of the target, target tokens see
    the source and the target up to themselves. Padding keys are never seen. A padded query sees only
    itself: an all-False row would make SDPA return NaN, which later layers would carry into real
    tokens (0 x NaN); nothing real reads a padded query, so real outputs do not depend on it.

    source_length = length gives the bidirectional mask of each row, 0 the left-to-right one; the
    right-to-left mask is the transpose of the left-to-right one (the padded rows included).
    Unlike `prefix_lm_mask`, padding is part of the mask, so this is the whole attention mask.
    """
    device = lengths.device
    lengths = lengths.to(device=device, dtype=torch.long)
    source_lengths = source_lengths.to(device=device, dtype=torch.long)
    if lengths.dim() != 1 or source_lengths.shape != lengths.shape:
        raise ValueError(
            f"source_lengths and lengths must both be (batch,), got {tuple(source_lengths.shape)} "
            f"and {tuple(lengths.shape)}"
        )
    if bool((lengths > seq_len).any()) or bool((source_lengths < 0).any()) or bool((source_lengths > lengths).any()):
        raise ValueError(f"need 0 <= source_length <= length <= seq_len={seq_len} in every row")
    pos = torch.arange(seq_len, device=device)
    query, key = pos[None, :, None], pos[None, None, :]  # (1, seq, 1), (1, 1, seq)
    length, source = lengths[:, None, None], source_lengths[:, None, None]  # (batch, 1, 1)
    real = query < length  # (batch, seq, 1)
    # What a query sees is one interval of keys [first, end): two comparisons over (batch, seq, seq)
    # instead of a handful of full-size boolean operations.
    end = torch.where(real, torch.minimum(length, torch.maximum(source, query + 1)), query + 1)  # (batch, seq, 1)
    first = torch.where(real, torch.zeros_like(query), query)  # (batch, seq, 1)
    return (key >= first) & (key < end)


def halves_mask(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split each row's real tokens into a first and a second half that cannot see each other.

    (batch, seq) padding mask (real tokens first) -> ((batch, seq, seq) bool, True = query may attend key;
    (batch, seq) half index: 0 for the first ceil(n / 2) real tokens, 1 for the rest, -1 for padding).
    A real query sees the real keys of its own half; a padded query sees only itself (an all-False row
    would make SDPA return NaN, see `seq2seq_mask`). The two halves are then two independent views of one
    text in one row, as a document-level contrastive objective needs.
    """
    real = attention_mask.bool()  # (batch, seq)
    lengths = real.sum(dim=1, keepdim=True)  # (batch, 1)
    pos = torch.arange(real.size(1), device=real.device)[None, :]  # (1, seq)
    half = (pos >= (lengths + 1) // 2).long()  # (batch, seq)
    half = torch.where(real, half, torch.full_like(half, -1))
    same = half[:, :, None] == half[:, None, :]  # (batch, query, key)
    own = pos[:, :, None] == pos[:, None, :]  # (1, query, key)
    pattern = (same & real[:, None, :]) | (own & ~real[:, :, None])
    return pattern, half
