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
    """Linear(hidden -> intermediate) -> activation -> Linear(intermediate -> hidden)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str = "gelu", bias: bool = True) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))
