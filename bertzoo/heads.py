"""Heads: small modules that read an encoder's hidden states. Losses belong to objectives."""

from __future__ import annotations

import torch
from torch import nn

from bertzoo.nn import activation


class MaskedLMHead(nn.Module):
    """Transform (dense + activation + LayerNorm) then a decoder tied to the word embeddings.

    Call it on the hidden states of the masked positions only: with 15% of tokens masked this
    skips ~85% of the (tokens x vocab) product, which dominates a small model's step.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        *,
        embedding_size: int | None = None,
        act: str = "gelu",
        layer_norm_eps: float = 1e-12,
        tied_weight: nn.Parameter | None = None,
    ) -> None:
        super().__init__()
        width = embedding_size or hidden_size  # ALBERT projects back to the embedding width
        self.dense = nn.Linear(hidden_size, width)
        self.act = activation(act)
        self.norm = nn.LayerNorm(width, eps=layer_norm_eps)
        self.decoder = nn.Linear(width, vocab_size)
        if tied_weight is not None:
            self.decoder.weight = tied_weight
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """hidden: (..., hidden). positions: optional bool mask or index over the leading dims; then
        the result is (num_selected, vocab) for those positions only."""
        if positions is not None:
            hidden = hidden[positions]  # (num_selected, hidden)
        return self.decoder(self.norm(self.act(self.dense(hidden))))


class SentencePairHead(nn.Module):
    """Binary classifier on the pooled [CLS] vector: next-sentence (BERT) or sentence-order (ALBERT)."""

    def __init__(self, hidden_size: int, num_labels: int = 2) -> None:
        super().__init__()
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)
