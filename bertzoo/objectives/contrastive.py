"""Losses that train sentence vectors: in-batch negatives (multiple-negatives ranking, InfoNCE) for pairs and
triplets, and CoSENT for pairs with a similarity score. Both score by cosine x `scale` (1 / temperature), in
fp32 whatever the autocast dtype, as sentence-transformers' losses of the same names do.

Under torchrun, multiple-negatives ranking can take its negatives from every process's batch (`gather`): each
query then picks its positive among the global batch's documents, and with DDP's gradient averaging the run
trains exactly as one process with the global batch would, whatever the number of processes."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["cosent_loss", "cosine_matrix", "gather_rows", "multiple_negatives_ranking_loss"]


def gather_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(every process's rows of x, in rank order; where this process's rows start), differentiable: the gradient
    reaching another process's copy of these rows flows back to them here. Ranks may hold different numbers of
    rows. In a single process: (x, 0)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x, 0
    import torch.distributed.nn.functional as dist_nn

    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([x.size(0)], device=x.device))
    counts = [int(n) for n in sizes]
    padded = F.pad(x, (0, 0, 0, max(counts) - x.size(0)))  # all_gather needs equal shapes
    parts = dist_nn.all_gather(padded)
    rank = dist.get_rank()
    return torch.cat([p[:n] for p, n in zip(parts, counts, strict=True)]), sum(counts[:rank])


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
    gather: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, accuracy) of picking each query's positive among every document of the batch.

    Query i's candidates are all positives (row i is its own, the others in-batch negatives) and, when given,
    all hard negatives: cross-entropy over scale x cosine (batch, batch or 2 x batch). `symmetric` adds the
    other direction, each positive picking its query among the queries, and averages the two. `gather`: the
    candidates are every process's (`gather_rows`), all positives first, then all hard negatives, so the columns
    are those of one process holding the global batch."""
    offset = 0
    all_positives, all_negatives, all_queries = positives, negatives, queries
    if gather:
        all_positives, offset = gather_rows(positives)
        if negatives is not None:
            all_negatives, _ = gather_rows(negatives)
        if symmetric:
            all_queries, _ = gather_rows(queries)
    documents = all_positives if all_negatives is None else torch.cat([all_positives, all_negatives])
    logits = scale * cosine_matrix(queries, documents)  # (batch, documents)
    target = torch.arange(queries.size(0), device=queries.device) + offset
    loss = F.cross_entropy(logits, target)
    if symmetric:
        loss = (loss + F.cross_entropy(scale * cosine_matrix(positives, all_queries), target)) / 2
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
