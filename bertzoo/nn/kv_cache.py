"""Keys and values of the positions decoded so far, per layer: what makes incremental decoding cost one
position per step instead of the whole prefix.

Buffers are allocated once for the longest sequence the decoder will reach and written in place, so a
step copies one position per layer (growing by concatenation would copy the whole past every step).
Beam search reorders the rows (`reorder`); UniLM's mask-predict decoding drops the [MASK] position it
fed only to read a prediction from (`truncate`). An encoder-decoder's layers also keep the keys and values
of their cross-attention over the encoded source (`LayerCache.cross`), projected once at the first step.
"""

from __future__ import annotations

import torch


class LayerCache:
    """One layer's keys and values: (batch, heads, capacity, head_dim) buffers and a shared length."""

    def __init__(self, owner: KVCache) -> None:
        self.owner = owner
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        # Cross-attention keys and values (batch, heads, source, head_dim), fixed for the whole decoding.
        self.cross: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' k, v (batch, heads, new, head_dim); returns every cached position's
        keys and values, (batch, heads, past + new, head_dim). The owner advances the length once all
        layers have appended (`KVCache.advance`)."""
        past = self.owner.length
        end = past + k.size(2)
        if self.keys is None:
            b, h, _, d = k.shape
            cap = max(self.owner.capacity, end)
            self.keys = k.new_empty(b, h, cap, d)
            self.values = v.new_empty(b, h, cap, d)
        elif end > self.keys.size(2):
            # Beyond the planned capacity: grow (doubling) rather than fail.
            grow = max(end, 2 * self.keys.size(2)) - self.keys.size(2)
            self.keys = torch.cat([self.keys, self.keys.new_empty(*self.keys.shape[:2], grow, self.keys.size(3))], 2)
            self.values = torch.cat(
                [self.values, self.values.new_empty(*self.values.shape[:2], grow, self.values.size(3))], 2
            )
        self.keys[:, :, past:end] = k
        self.values[:, :, past:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    """The cache of a whole stack: one `LayerCache` per depth (an ALBERT stack that applies one layer
    12 times still has 12 depths, each with its own keys). `length` is the number of cached positions."""

    def __init__(self, num_layers: int, capacity: int = 0) -> None:
        self.capacity = capacity
        self.length = 0
        self.layers = [LayerCache(self) for _ in range(num_layers)]

    def layer(self, i: int) -> LayerCache:
        return self.layers[i]

    def advance(self, n: int) -> None:
        """Count `n` new positions as cached (called once per forward pass, after every layer wrote them)."""
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (their buffers are overwritten by the next update)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        self.length = length

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (batch,) of every buffer, in that order (beam search)."""
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys = layer.keys.index_select(0, index)
                layer.values = layer.values.index_select(0, index)
            if layer.cross is not None:
                layer.cross = tuple(t.index_select(0, index) for t in layer.cross)
