"""Losses that train sentence vectors: in-batch negatives (multiple-negatives ranking, InfoNCE) for pairs and
triplets, and CoSENT for pairs with a similarity score. Both score by cosine x `scale` (1 / temperature), in
fp32 whatever the autocast dtype, as sentence-transformers' losses of the same names do."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["cosent_loss", "cosine_matrix", "multiple_negatives_ranking_loss"]


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(rows of a, rows of b) cosine similarities, in fp32."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def multiple_negatives_ranking_loss(
    queries: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor | None = None,
    *,
    scale: float = 20.0,
    symmetric: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, accuracy) of picking each query's positive among every document of the batch.

    Query i's candidates are all positives (row i is its own, the others in-batch negatives) and, when given,
    all hard negatives: cross-entropy over scale x cosine (batch, batch or 2 x batch). `symmetric` adds the
    other direction, each positive picking its query among the queries, and averages the two."""
    documents = positives if negatives is None else torch.cat([positives, negatives])
    logits = scale * cosine_matrix(queries, documents)  # (batch, documents)
    target = torch.arange(queries.size(0), device=queries.device)
    loss = F.cross_entropy(logits, target)
    if symmetric:
        loss = (loss + F.cross_entropy(logits[:, : positives.size(0)].T, target)) / 2
    with torch.no_grad():
        accuracy = (logits.argmax(-1) == target).float().mean()
    return loss, accuracy


def cosent_loss(a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor, *, scale: float = 20.0) -> torch.Tensor:
    """CoSENT (Su 2022): log(1 + sum over pairs (i, j) with scores[i] > scores[j] of exp(scale x (cos_j - cos_i))).

    It asks only that the pairs' cosines be ordered as their gold scores are, so any score range works."""
    cos = scale * F.cosine_similarity(a.float(), b.float(), dim=-1)  # (batch,)
    diff = cos[None, :] - cos[:, None]  # [i, j] = cos_j - cos_i
    ordered = scores[:, None] > scores[None, :]  # the pairs whose order the loss enforces
    diff = diff.masked_fill(~ordered, float("-inf"))
    zero = torch.zeros(1, device=cos.device)  # the "1 +" inside the log
    return torch.logsumexp(torch.cat([zero, diff.flatten()]), dim=0)
