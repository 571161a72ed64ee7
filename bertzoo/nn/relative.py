"""T5's relative position bias (Raffel et al. 2020, section 2.1): a learned scalar per head and per
*bucket* of the key-minus-query distance, added to the attention scores. Half the buckets hold exact
small distances, the other half logarithmically wider ranges up to `max_distance`, beyond which all
distances share the last bucket. An encoder uses separate buckets for keys before and after the query
(bidirectional); a decoder, whose queries never see later keys, spends all buckets on the past.

One bias serves every layer of a stack (T5 computes it in the first layer and reuses it).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket ids in [0, num_buckets) of `relative_position` = key position - query position (any integer
    tensor). The same operations as Mesh TensorFlow's and transformers' `_relative_position_bucket`, so
    the float rounding of the logarithmic buckets is theirs too."""
    buckets = torch.zeros_like(relative_position, dtype=torch.long)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2  # distances [0, max_exact) have a bucket each
    is_small = relative_position < max_exact
    log_ratio = torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position.to(torch.long), large)


class RelativePositionBias(nn.Module):
    """A (num_buckets, num_heads) table -> the additive score bias (1, heads, query, key) of a stack."""

    def __init__(self, num_buckets: int, max_distance: int, num_heads: int, *, bidirectional: bool) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, query_length: int, key_length: int | None = None, past: int = 0) -> torch.Tensor:
        """Queries at positions past .. past + query_length - 1 (incremental decoding: `past` cached
        positions), keys at 0 .. key_length - 1 (default past + query_length)."""
        key_length = past + query_length if key_length is None else key_length
        device = self.weight.device
        query = torch.arange(past, past + query_length, dtype=torch.long, device=device)[:, None]
        key = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = relative_position_bucket(key - query, self.bidirectional, self.num_buckets, self.max_distance)
        return nn.functional.embedding(buckets, self.weight).permute(2, 0, 1).unsqueeze(0)  # (1, heads, q, k)

    def local_offsets(self) -> list[int]:
        """The key - query offset each head is pointed at by `start_local`: the first half of the heads (at least
        one) at the nearest neighbours, -1, +1, -2, +2, ... in an encoder, -1, -2, ... in a decoder."""
        count = max(1, self.weight.size(1) // 2)
        if self.bidirectional:
            return [(-1 if h % 2 == 0 else 1) * (h // 2 + 1) for h in range(count)]
        return [-(h + 1) for h in range(count)]

    @torch.no_grad()
    def start_local(self) -> list[int]:
        """Point the first half of the heads at their nearest neighbours (`local_offsets`), keeping the other
        entries as initialised; returns the offsets.

        Each pointed head's bucket gets log(max_distance), so over max_distance keys of equal content score the
        head gives about half its attention to that one neighbour, which a few hundred steps of AdamW do not grow
        from N(0, d_model ** -0.5). Meant for copying (the encoder marks each token with the one before it); on
        T5-mini's title task it measured no better than T5's own start (docs/generation.md, "Two more levers")."""
        offsets = self.local_offsets()
        buckets = relative_position_bucket(
            torch.tensor(offsets), self.bidirectional, self.num_buckets, self.max_distance
        ).tolist()
        for head, bucket in enumerate(buckets):
            self.weight[bucket, head] = math.log(self.max_distance)
        return offsets
