"""Transformer-XL (Dai et al. 2019): a causal stack of relative-attention layers with segment-level recurrence.

Each layer attends over [memory; current segment], where its memory is what that layer read as input for the
previous segment(s), kept to the last `mem_len` positions and detached, so gradients stay inside a segment while
the context reaches back n_layer x mem_len positions. The layout is the paper's post-norm one:
x + attention -> LayerNorm, then x + FFN(ReLU) -> LayerNorm. Word embeddings are scaled by sqrt(d_model) and
the LM head is a plain softmax tied to them (the adaptive softmax and embeddings of the WikiText-103 model are
left out, as is `same_length`, which only changes evaluation of very long spans).

Semantics follow transformers' TransfoXLModel (mems hold layer inputs; memory positions are not queries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.errors import ConfigError
from bertzoo.nn.ffn import FeedForward
from bertzoo.nn.masks import causal_mask
from bertzoo.nn.relative_attention import RelativeSelfAttention, relative_distances, relative_sinusoids

__all__ = ["PRESETS", "TransfoXL", "TransfoXLConfig", "TransfoXLLayer", "TransfoXLOutput", "preset"]


@dataclass
class TransfoXLConfig:
    vocab_size: int = 32000
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    d_head: int = 64
    d_inner: int = 1024
    mem_len: int = 128  # positions of memory kept per layer (0: no recurrence)
    clamp_len: int | None = None  # distances beyond this share its embedding (None: no clamping)
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.mem_len < 0:
            raise ConfigError(f"mem_len must be >= 0, got {self.mem_len}")
        if self.clamp_len is not None and self.clamp_len < 0:
            raise ConfigError(f"clamp_len must be >= 0 or None, got {self.clamp_len}")
        if self.d_model % 2:
            raise ConfigError(f"d_model must be even for the sin/cos position table, got {self.d_model}")


# Sizes only; vocab_size comes from the tokenizer (`preset(name, vocab_size=...)`).
PRESETS: dict[str, TransfoXLConfig] = {
    "transfo-xl-tiny": TransfoXLConfig(n_layer=2, d_model=64, n_head=2, d_head=32, d_inner=256, mem_len=64),
    "transfo-xl-mini": TransfoXLConfig(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024, mem_len=128),
}


def preset(name: str, **overrides) -> TransfoXLConfig:
    """A preset's config with some fields replaced."""
    if name not in PRESETS:
        raise ConfigError(f"unknown Transformer-XL preset {name!r}; choose one of {', '.join(PRESETS)}")
    return replace(PRESETS[name], **overrides)


class TransfoXLOutput(NamedTuple):
    """Unpacks as (hidden, logits, mems)."""

    last_hidden_state: torch.Tensor  # (batch, seq, d_model)
    logits: torch.Tensor  # (batch, seq, vocab)
    mems: list[torch.Tensor]  # one (batch, <= mem_len, d_model) per layer, detached


class TransfoXLLayer(nn.Module):
    """Relative attention and a ReLU feed-forward, each added to its input and then normalised (post-norm)."""

    def __init__(self, c: TransfoXLConfig) -> None:
        super().__init__()
        self.attn = RelativeSelfAttention(c.d_model, c.n_head, c.d_head, c.dropout)
        self.attn_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.ffn = FeedForward(c.d_model, c.d_inner, "relu", dropout=c.dropout)
        self.ffn_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, memory: torch.Tensor | None, mask: torch.Tensor
    ) -> torch.Tensor:
        """x: (batch, seq, d_model); pos: (mem + seq, d_model); memory: (batch, mem, d_model) or None."""
        h, _ = self.attn(x, pos, memory, mask)
        x = self.attn_norm(x + self.drop(h))
        return self.ffn_norm(x + self.drop(self.ffn(x)))


class TransfoXL(nn.Module):
    """Embeddings, n_layer `TransfoXLLayer`s and the tied LM head; `forward` carries the memory."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList(TransfoXLLayer(c) for _ in range(c.n_layer))
        self.drop = nn.Dropout(c.dropout)
        self.lm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeSelfAttention):
            nn.init.normal_(module.u, std=std)
            nn.init.normal_(module.v, std=std)

    def forward(self, input_ids: torch.Tensor, mems: list[torch.Tensor] | None = None) -> TransfoXLOutput:
        """input_ids: (batch, seq), one segment; mems: the previous call's `mems` (None: no history).
        No padding mask: a language-model stream has none."""
        c = self.config
        seq = input_ids.size(1)
        mem = 0 if mems is None else mems[0].size(1)
        device = input_ids.device
        x = self.drop(self.embed(input_ids) * math.sqrt(c.d_model))  # (batch, seq, d_model)
        # One position table and one mask for every layer: they depend on lengths only.
        distances = relative_distances(mem + seq, c.clamp_len, device)
        pos = self.drop(relative_sinusoids(distances, c.d_model).to(x.dtype))  # (mem + seq, d_model)
        mask = causal_mask(seq, mem + seq, device)  # (seq, mem + seq): key j visible to query i iff j <= mem + i
        inputs = []
        for i, layer in enumerate(self.layers):
            inputs.append(x)
            x = layer(x, pos, None if mems is None else mems[i], mask)
        hidden = self.drop(x)
        logits = F.linear(hidden, self.embed.weight, self.lm_bias)  # (batch, seq, vocab)
        return TransfoXLOutput(hidden, logits, self.update_mems(inputs, mems))

    def update_mems(self, inputs: list[torch.Tensor], mems: list[torch.Tensor] | None) -> list[torch.Tensor]:
        """Per layer: the last `mem_len` positions of [old memory; this segment's layer input], detached so
        that backpropagation stops at the segment boundary (the paper's stop-gradient SG(.))."""
        new = []
        for i, x in enumerate(inputs):
            full = x if mems is None else torch.cat([mems[i], x], dim=1)  # (batch, mem + seq, d_model)
            start = max(0, full.size(1) - self.config.mem_len)  # not -mem_len: mem_len 0 must keep nothing
            new.append(full[:, start:].detach())
        return new
