"""A learned weighted sum of a model's layers (ELMo's task-specific combination, Peters et al. 2018)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class ScalarMix(nn.Module):
    """gamma * sum_j softmax(s)_j * h_j over `num_layers` same-shaped layers, with s and gamma learned.

    s starts at zero (an even average) and gamma at one; the softmax keeps the weights positive and
    summing to one, so gamma alone scales the result to what the task model wants."""

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))  # s, (num_layers,); `weights` in saved task models
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: Sequence[torch.Tensor]) -> torch.Tensor:
        """num_layers tensors of one shape, e.g. (batch, seq, dim) -> their mix, the same shape."""
        if len(layers) != self.weights.numel():
            raise ValueError(f"ScalarMix was built for {self.weights.numel()} layers, got {len(layers)}")
        weights = torch.softmax(self.weights, dim=0)  # (num_layers,)
        stacked = torch.stack(tuple(layers), dim=0)  # (num_layers, *shape)
        return self.gamma * torch.einsum("l,l...->...", weights.to(stacked.dtype), stacked)
