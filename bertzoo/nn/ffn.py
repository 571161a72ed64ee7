"""Position-wise feed-forward network."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {
    "gelu": F.gelu,  # exact erf GELU, as in BERT
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2 / some TF ports
    "relu": F.relu,
}


def activation(name: str):
    """Activation function by config name."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}") from None


class FeedForward(nn.Module):
    """Linear(hidden -> intermediate) -> activation -> Linear(intermediate -> hidden).

    `gated`: act(up(x)) * gate(x) before the down projection (GEGLU, Shazeer 2020; T5 v1.1's
    gated-gelu), one more (hidden -> intermediate) matrix. `dropout` acts on the intermediate
    activations (T5; 0 = none, BERT). `bias=False` drops every bias (T5)."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        act: str = "gelu",
        bias: bool = True,
        *,
        gated: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.gate = nn.Linear(hidden_size, intermediate_size, bias=bias) if gated else None
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = activation(act)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.up(x))
        if self.gate is not None:
            h = h * self.gate(x)
        if self.dropout is not None:
            h = self.dropout(h)
        return self.down(h)
