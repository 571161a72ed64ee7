"""A stack of Transformer layers, with optional cross-layer parameter sharing (ALBERT)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertzoo.nn.layer import LayerOutput, TransformerLayer


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
        output_attentions: bool = False,
        **layer_kwargs,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """Returns (last hidden, hidden states of every depth incl. the input, attentions)."""
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i in range(self.num_layers):
            layer = self.layer(i)
            if self.gradient_checkpointing and self.training and not output_attentions:
                out: LayerOutput = checkpoint(layer, x, mask, use_reentrant=False, **layer_kwargs)
            else:
                out = layer(x, mask, need_weights=output_attentions, **layer_kwargs)
            x = out.hidden
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(out.attention)
        return x, hidden_states, attentions
