"""XLNet (Yang et al. 2019): a stack of two-stream relative-attention layers with Transformer-XL memory.

The content stream h is an ordinary bidirectional (or, with `causal`, left-to-right) encoder over relative
positions; the query stream g starts from one learned vector (`mask_emb`) at each predicted position and
reads the content stream through the same layers, so a prediction knows where it is but not what is there.
`perm_mask` (batch, seq, seq), 1 = "may not attend", states a factorisation order; `target_mapping` (batch,
num_predict, seq) which positions the query stream predicts. Both follow transformers' XLNetModel, as do
the memory (each layer's input, last `mem_len` positions, detached: memory keys are always visible and
count as segment 0) and the layout: post-norm attention and feed-forward sublayers shared by both streams.

Keys: `embeddings.word.weight`, `mask_emb`, `layers.{i}.attention.*` (`bertzoo.nn.two_stream`),
`layers.{i}.attention_norm`, `layers.{i}.ffn.{up,down}`, `layers.{i}.ffn_norm`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bertzoo.config import ModelConfig
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import init_weights
from bertzoo.models.transfo_xl import TransfoXLConfig
from bertzoo.nn import Embeddings, FeedForward
from bertzoo.nn.relative_attention import relative_sinusoids, signed_distances
from bertzoo.nn.two_stream import TwoStreamAttention

__all__ = ["LAYOUT", "XLNet", "XLNetConfig", "XLNetLayer", "XLNetOutput", "layout_problems", "stream_masks"]


@dataclass
class XLNetConfig(TransfoXLConfig):
    """XLNet's config: Transformer-XL's memory fields (`reuse_len` and `same_length` included, which XLNet reads);
    its attn_type "uni" is `causal`."""


# The ModelConfig fields an XLNet stack has no place for, at the only value it computes: relative positions
# and segments (no absolute table, no segment rows), no embedding norm, no pooler, post-norm, BERT's layers.
LAYOUT: tuple[tuple[str, Any], ...] = (
    ("position", "none"),
    ("type_vocab_size", 0),
    ("task_type_vocab_size", 0),
    ("embedding_size", None),
    ("embedding_norm", False),
    ("position_offset", 0),
    ("pooler", False),
    ("norm", "post"),
    ("norm_kind", "layernorm"),
    ("share", "none"),
    ("linear_bias", True),
    ("ffn_gated", False),
    ("inner_dropout", False),
    ("attention_scale", None),
    ("relative_buckets", 0),
)


def layout_problems(config: ModelConfig) -> list[str]:
    """What in `config` an XLNet stack cannot compute, one phrase each ([] = nothing)."""
    problems = [
        f"{name}={getattr(config, name)!r} (it has {want!r})" for name, want in LAYOUT if getattr(config, name) != want
    ]
    if config.hidden_size % 2:
        problems.append(f"an odd hidden_size={config.hidden_size} (its sin/cos position table needs an even one)")
    return problems


@dataclass
class XLNetOutput:
    """transformers' XLNetModelOutput, with the two streams under their own names."""

    last_hidden_state: torch.Tensor | None  # (batch, seq, hidden): the content stream; None with top_content=False
    query_hidden_state: torch.Tensor | None = None  # (batch, num_predict, hidden): with a target_mapping
    mems: tuple[torch.Tensor, ...] | None = None  # per layer (batch, <= mem_len, hidden), detached; use_mems
    hidden_states: tuple[torch.Tensor, ...] | None = None  # content stream: embeddings + every layer
    query_hidden_states: tuple[torch.Tensor, ...] | None = None  # query stream: mask_emb + every layer
    attentions: tuple[torch.Tensor, ...] | None = None  # content (batch, heads, seq, mem + seq) per layer
    query_attentions: tuple[torch.Tensor, ...] | None = None  # query stream, at the predicted positions


def stream_masks(
    batch: int,
    seq: int,
    mem: int,
    device: torch.device,
    *,
    attention_mask: torch.Tensor | None = None,
    perm_mask: torch.Tensor | None = None,
    causal: bool = False,
    same_length: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(content mask, query mask), bool (batch|1, 1, seq, mem + seq), True = attend; None = see everything.

    A key is hidden from query i when it is padding (`attention_mask` 0), when `perm_mask[b, i, j]` is 1, or,
    with `causal`, when it lies after i (and, with `same_length`, more than `mem` positions before i). Memory
    keys are hidden by the causal rule only. The query stream obeys all of it; the content stream also sees
    its own position, whatever the masks say (a token knows itself)."""
    blocked = None  # (batch|1, seq, mem + seq) bool, True = hidden
    if causal:
        query = torch.arange(seq, device=device)[:, None]
        key = torch.arange(mem + seq, device=device)[None, :]
        blocked = key > mem + query  # the future
        if same_length:
            blocked = blocked | (key < query)  # a window of mem + 1 keys for every query
        blocked = blocked[None]
    data = None
    if attention_mask is not None:
        data = ~attention_mask.bool()[:, None, :]  # (batch, 1, seq)
    if perm_mask is not None:
        data = perm_mask.bool() if data is None else data | perm_mask.bool()
    if data is not None:
        data = nn.functional.pad(data, (mem, 0), value=False)  # memory is always visible
        blocked = data if blocked is None else blocked | data
    if blocked is None:
        return None, None
    own = (
        torch.arange(mem + seq, device=device)[None, None, :] == (mem + torch.arange(seq, device=device))[None, :, None]
    )
    content = ~(blocked & ~own)
    return content[:, None], ~blocked[:, None]


def one_hot_rows(mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(positions, present), both (batch, num_predict), of a target_mapping whose rows are each one-hot or all
    zero (the collators' and transformers'), else None (a soft mapping keeps the general path)."""
    present = mapping.sum(-1)
    exact = ((mapping == 0) | (mapping == 1)).all() & ((present == 0) | (present == 1)).all()
    if not bool(exact):
        return None
    return mapping.argmax(-1), present


class XLNetLayer(nn.Module):
    """Two-stream attention and a feed-forward, each added to its input then normalised (post-norm); the
    query stream goes through the same sublayers as the content stream."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.attention = TwoStreamAttention(c.hidden_size, c.num_heads, c.head_dim, c.attention_dropout)
        self.attention_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.ffn = FeedForward(c.hidden_size, c.intermediate_size, c.hidden_act, dropout=c.dropout)
        self.ffn_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)

    def sublayers(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """One stream after attention: residual + norm, then the feed-forward with its residual + norm."""
        x = self.attention_norm(x + self.drop(attended))
        return self.ffn_norm(x + self.drop(self.ffn(x)))

    def forward(
        self, h: torch.Tensor, g: torch.Tensor | None, pos: torch.Tensor, **attention
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, tuple[torch.Tensor | None, torch.Tensor | None]]:
        """h: (batch, seq, hidden); g: (batch, num_predict, hidden) or None; `attention`: TwoStreamAttention's
        (with content=False the content stream's output is None)."""
        out_h, out_g, probs = self.attention(h, g, pos, **attention)
        h = None if out_h is None else self.sublayers(h, out_h)
        return h, None if g is None else self.sublayers(g, out_g), probs


class XLNet(nn.Module):
    """Word embeddings, the query stream's start vector `mask_emb` and `num_layers` XLNetLayers.

    `config.causal` is transformers' attn_type "uni"; no absolute positions (position "none"), no segment
    table (segments are compared, not embedded), no pooler."""

    # None can be added either (transformers' XLNetModel has none): a task model reads a token's state instead,
    # by default the last real one, as XLNet's own sequence summary does (bertzoo.tasks.base.poolable).
    poolable = False
    # The query stream (from its learned start vector) serves pretraining alone: no task runs it.
    task_unused = ("mask_emb",)

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        problems = layout_problems(c)
        if problems:
            raise ConfigError(f"an XLNet model cannot have {'; '.join(problems)}; remove those model settings")
        self.config = config
        self.embeddings = Embeddings(
            c.vocab_size,
            c.hidden_size,
            position="none",
            type_vocab_size=0,
            pad_token_id=c.pad_token_id,
            dropout=c.dropout,
            norm=False,
        )
        self.mask_emb = nn.Parameter(torch.zeros(1, 1, c.hidden_size))
        self.layers = nn.ModuleList(XLNetLayer(c) for _ in range(c.num_layers))
        self.drop = nn.Dropout(c.dropout)
        self.apply(lambda m: init_weights(m, c.initializer_range))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if ".attention." in name or name == "mask_emb":
                    p.normal_(0.0, c.initializer_range)

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.embeddings.word

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        mems: tuple[torch.Tensor, ...] | list[torch.Tensor] | None = None,
        use_mems: bool = False,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        top_content: bool = True,
    ) -> XLNetOutput:
        """input_ids: (batch, seq); attention_mask: (batch, seq) 1 = real token; token_type_ids: (batch, seq)
        segment ids (None: no segment term); perm_mask: (batch, seq, seq) 1 = may not attend; target_mapping:
        (batch, num_predict, seq) one-hot rows, runs the query stream; mems: a previous call's `mems`;
        use_mems: return this call's memory for the next one; top_content=False: with a query stream, the top
        layer's content stream (read by nobody when only the query stream's predictions count) is not
        computed and `last_hidden_state` is None (ignored when hidden states or attentions are asked for)."""
        c = self.config
        b, seq = input_ids.shape
        mem = 0 if not mems else mems[0].size(1)
        device = input_ids.device
        content_mask, query_mask = stream_masks(
            b, seq, mem, device, attention_mask=attention_mask, perm_mask=perm_mask, causal=c.causal,
            same_length=c.same_length,
        )  # fmt: skip
        h = self.embeddings(input_ids)  # (batch, seq, hidden), dropped out
        g = None
        if target_mapping is not None:
            g = self.drop(self.mask_emb.expand(b, target_mapping.size(1), -1))  # (batch, num_predict, hidden)
            target_mapping = target_mapping.to(h.dtype)
        # The collators' mappings are one-hot: then the query stream asks at the predicted positions only
        # (num_predict rows, not seq). Attention maps keep the scattered layout transformers returns.
        query_rows = None if target_mapping is None or output_attentions else one_hot_rows(target_mapping)
        skip_top = g is not None and not top_content and not (output_hidden_states or output_attentions)
        different = None
        if token_type_ids is not None:
            # Memory counts as segment 0 (transformers' and the paper's code).
            keys = nn.functional.pad(token_type_ids, (mem, 0), value=0)  # (batch, mem + seq)
            different = token_type_ids[:, :, None] != keys[:, None, :]  # (batch, seq, mem + seq)
        # One table for every layer; the two-sided one reaches keys after the query.
        top, bottom = mem + seq - 1, 0 if c.causal else -(seq - 1)
        distances = signed_distances(top, bottom, c.clamp_len or None, device)
        pos = self.drop(relative_sinusoids(distances, c.hidden_size).to(h.dtype))  # (r_len, hidden)
        new_mems: list[torch.Tensor] = []
        hs, gs = ([h], [g]) if output_hidden_states else (None, None)
        probs_h: list[torch.Tensor] | None = [] if output_attentions else None
        probs_g: list[torch.Tensor] | None = [] if output_attentions and g is not None else None
        for i, layer in enumerate(self.layers):
            memory = mems[i] if mems else None
            if use_mems:
                new_mems.append(self.cache(h, memory))
            h, g, (p_h, p_g) = layer(
                h,
                g,
                pos,
                top=top,
                memory=memory,
                different=different,
                content_mask=content_mask,
                query_mask=query_mask,
                target_mapping=target_mapping,
                query_rows=query_rows,
                content=not (skip_top and i == len(self.layers) - 1),
                need_weights=output_attentions,
            )
            if hs is not None:
                hs.append(h)
                gs.append(g)
            if probs_h is not None:
                probs_h.append(p_h)
            if probs_g is not None:
                probs_g.append(p_g)
        return XLNetOutput(
            last_hidden_state=None if h is None else self.drop(h),
            query_hidden_state=None if g is None else self.drop(g),
            mems=tuple(new_mems) if use_mems else None,
            hidden_states=None if hs is None else tuple(hs),
            query_hidden_states=None if gs is None or g is None else tuple(gs),
            attentions=None if probs_h is None else tuple(probs_h),
            query_attentions=None if probs_g is None else tuple(probs_g),
        )

    def cache(self, h: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
        """The next memory of one layer: [memory; the first reuse_len positions of its input h], its last
        mem_len positions (0: all), detached so that gradients stop at the segment boundary."""
        c = self.config
        current = h[:, : c.reuse_len] if c.reuse_len else h
        full = current if memory is None else torch.cat([memory, current], dim=1)  # (batch, mem + new, hidden)
        return full[:, -c.mem_len :].detach() if c.mem_len else full.detach()
