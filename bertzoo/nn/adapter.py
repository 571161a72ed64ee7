"""Bottleneck adapters (Houlsby et al. 2019, "Parameter-Efficient Transfer Learning for NLP").

An adapter is a small residual MLP, h + up(GELU(down(h))), inserted after the output projection of
each sublayer (attention and feed-forward) and before that sublayer's residual add and LayerNorm.
Only the adapters (and the task head, plus LayerNorms optionally) are trained, so one frozen encoder
serves many tasks with a few percent of new parameters each.

`add_adapters` wraps the existing projections in place instead of changing `bertzoo.nn.layer`: the
wrapped projection keeps its parameter names (`attention.out.weight`, ...), so checkpoints and the
Hugging Face key maps still see the same base weights; the adapter adds `... .adapter.*` keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ADAPTER_KEY = ".adapter."


class Adapter(nn.Module):
    """x + up(GELU(down(x))). `up` starts at zero, so a fresh adapter is exactly the identity and
    training starts from the pretrained network's function."""

    def __init__(self, dim: int, bottleneck: int, init_std: float = 1e-3) -> None:
        super().__init__()
        if bottleneck < 1:
            raise ValueError(f"adapter bottleneck must be >= 1, got {bottleneck}")
        self.down = nn.Linear(dim, bottleneck)
        self.up = nn.Linear(bottleneck, dim)
        nn.init.normal_(self.down.weight, std=init_std)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(F.gelu(self.down(x)))


class AdaptedLinear(nn.Module):
    """A linear projection followed by an adapter. Holds the original `weight`/`bias` parameters
    themselves (not a copy), so their state-dict names and any sharing stay as they were."""

    def __init__(self, linear: nn.Linear, adapter: Adapter) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.adapter = adapter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adapter(F.linear(x, self.weight, self.bias))


def _wrap(parent: nn.Module, name: str, bottleneck: int, done: dict[int, AdaptedLinear]) -> int:
    module = getattr(parent, name)
    if isinstance(module, AdaptedLinear):
        return 0  # already adapted (a shared sublayer seen through another layer)
    if id(module) in done:
        setattr(parent, name, done[id(module)])
        return 0
    if not isinstance(module, nn.Linear):
        raise TypeError(f"cannot add an adapter after {type(module).__name__}; expected nn.Linear")
    wrapped = AdaptedLinear(module, Adapter(module.out_features, bottleneck)).to(module.weight.device)
    done[id(module)] = wrapped
    setattr(parent, name, wrapped)
    return 1


def add_adapters(encoder: nn.Module, bottleneck: int) -> int:
    """Insert an adapter after every layer's attention output projection (`layer.attention.out`) and
    feed-forward output (`layer.ffn.down`). Shared sublayers (ALBERT) get one shared adapter.
    Returns the number of adapters added (0 when the encoder already has them)."""
    done: dict[int, AdaptedLinear] = {}
    added = 0
    for layer in encoder.stack.layers:
        added += _wrap(layer.attention, "out", bottleneck, done)
        added += _wrap(layer.ffn, "down", bottleneck, done)
    return added


def has_adapters(module: nn.Module) -> bool:
    """True when `module` contains adapters."""
    return any(isinstance(m, Adapter) for m in module.modules())


def adapter_size_from_state(state: dict[str, torch.Tensor]) -> int:
    """The bottleneck width recorded in a state dict's adapter weights, 0 when there are none."""
    for key, value in state.items():
        if ADAPTER_KEY in key and key.endswith("adapter.down.weight"):
            return int(value.shape[0])
    return 0
