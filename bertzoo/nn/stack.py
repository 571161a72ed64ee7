"""A stack of Transformer layers, with optional cross-layer parameter sharing (ALBERT)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertzoo.nn.kv_cache import KVCache
from bertzoo.nn.layer import LayerOutput, TransformerLayer
from bertzoo.nn.unpad import Packing


class TransformerStack(nn.Module):
    """`num_layers` applications of Transformer layers.

    share="none": independent layers; "all": one layer applied num_layers times; "attention" or
    "ffn": separate layers whose attention (or feed-forward) sub-modules are one shared module.
    """

    def __init__(self, make_layer: Callable[[], TransformerLayer], num_layers: int, share: str = "none") -> None:
        super().__init__()
        if share not in ("none", "all", "attention", "ffn"):
            raise ValueError(f"share must be none, all, attention or ffn, got {share!r}")
        self.num_layers = num_layers
        self.share = share
        self.layers = nn.ModuleList([make_layer() for _ in range(1 if share == "all" else num_layers)])
        if share in ("attention", "ffn"):
            first = self.layers[0]
            for layer in self.layers[1:]:
                if share == "attention":
                    layer.attention = first.attention
                    layer.attention_residual = first.attention_residual
                else:
                    layer.ffn = first.ffn
                    layer.ffn_residual = first.ffn_residual
        self.gradient_checkpointing = False

    def layer(self, i: int) -> TransformerLayer:
        """The module applied at depth i."""
        return self.layers[0 if self.share == "all" else i]

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
        top_queries: int | None = None,
        cache: KVCache | None = None,
        cross_attentions: list[torch.Tensor] | None = None,
        **layer_kwargs,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """Returns (last hidden, hidden states of every depth incl. the input, attentions).

        `cross_attentions`: a list that receives each layer's cross-attention weights (decoder layers,
        with `output_attentions`).

        `cache`: incremental decoding; x holds the new positions, each depth appends their keys and
        values to its slot of the cache, and `mask` covers (new, cached + new) positions.

        `top_queries=n` computes the last layer for the first n positions only (their attention still
        reads every position), so the result has n positions: a classifier that reads [CLS] alone
        skips the rest of the top layer's work. Exact for post-norm self-attention layers; other
        layers (and requests for hidden states or attentions) compute everything and slice.
        """
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i in range(self.num_layers):
            layer = self.layer(i)
            if top_queries is not None and i == self.num_layers - 1 and cache is None:
                if self._can_skip_queries(layer, layer_kwargs, output_hidden_states or output_attentions):
                    if isinstance(mask, Packing):  # packed tokens: each sequence's first one (top_queries=1)
                        return self._call(layer, x, mask.first_only()), hidden_states, attentions
                    return self._top_prefix(layer, x, mask, top_queries), hidden_states, attentions
            if cache is not None:
                out: LayerOutput = layer(x, mask, need_weights=output_attentions, kv=cache.layer(i), **layer_kwargs)
            elif self.gradient_checkpointing and self.training and not output_attentions:
                out = checkpoint(layer, x, mask, use_reentrant=False, **layer_kwargs)
            else:
                out = layer(x, mask, need_weights=output_attentions, **layer_kwargs)
            x = out.hidden
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(out.attention)
            if cross_attentions is not None and output_attentions:
                cross_attentions.append(out.cross_attention)
        if cache is not None:
            cache.advance(x.size(1))
        if top_queries is not None:
            x = x[:, :top_queries]
        return x, hidden_states, attentions

    def _call(self, layer: TransformerLayer, x: torch.Tensor, mask: object) -> torch.Tensor:
        """One layer's hidden output, checkpointed when activation checkpointing is on."""
        if self.gradient_checkpointing and self.training:
            return checkpoint(layer, x, mask, use_reentrant=False).hidden
        return layer(x, mask).hidden

    @staticmethod
    def _can_skip_queries(layer: TransformerLayer, layer_kwargs: dict, want_all: bool) -> bool:
        # Pre-norm layers normalise their keys' input inside the layer, which the memory path below
        # does not do; cross-attention and relative-position biases depend on the query layout.
        return not want_all and not layer_kwargs and layer.cross is None and not layer.attention_residual.pre

    def _top_prefix(self, layer: TransformerLayer, x: torch.Tensor, mask: torch.Tensor | None, n: int) -> torch.Tensor:
        """The last layer for queries x[:, :n]: the other positions enter as attention `memory`, which
        SelfAttention puts before the queries, so keys run [n, ..., S-1, 0, ..., n-1]. Attention is
        order-free over keys (positions live in the embeddings), so reordering the mask to match
        gives exactly the full layer's outputs at those positions."""
        if mask is not None:
            if mask.size(-2) > 1:  # a per-query mask: keep the queries' rows
                mask = mask[..., :n, :]
            mask = torch.cat([mask[..., n:], mask[..., :n]], dim=-1)
        if self.gradient_checkpointing and self.training:
            out = checkpoint(layer, x[:, :n], mask, use_reentrant=False, memory=x[:, n:])
        else:
            out = layer(x[:, :n], mask, memory=x[:, n:])
        return out.hidden


def enable_activation_checkpointing(module: nn.Module) -> int:
    """Turn on activation checkpointing in every TransformerStack inside `module`; returns how many."""
    stacks = [m for m in module.modules() if isinstance(m, TransformerStack)]
    for stack in stacks:
        stack.gradient_checkpointing = True
    return len(stacks)
