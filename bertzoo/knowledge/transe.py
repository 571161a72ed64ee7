"""TransE knowledge-graph embeddings (Bordes et al. 2013), the entity vectors ERNIE (Tsinghua) fuses into text.

A relation is a translation: for a true triple (h, r, t), e_h + r ≈ e_t, so the score of a triple is
-‖e_h + r - e_t‖ (L1 or L2). Training is the margin ranking loss max(0, γ + d(h, r, t) - d(h', r, t')) against
a corrupted copy of each triple whose head or tail is replaced by a uniformly drawn entity: head or tail with
probability 1/2 ("unif", Bordes et al.), or per relation with the probability of Wang et al. 2014's "bern"
(replace the head with probability tph / (tph + hpt), so one-to-many relations corrupt their "one" side).
As in Bordes et al., entity vectors are projected back to unit L2 norm (`normalize_entities`, called after each
optimizer step by the trainer) and relation vectors are normalised once at initialisation.

A model and pure functions, no file IO (train/transe.py trains it, knowledge/graphs.py reads the graphs).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def bernoulli_head_probs(triples: np.ndarray | torch.Tensor, num_relations: int) -> torch.Tensor:
    """Per relation, the probability of corrupting the head in "bern" sampling: tph / (tph + hpt), with tph the
    mean number of tails per (head, relation) and hpt the mean number of heads per (relation, tail).
    A relation without triples gets 1/2."""
    t = torch.as_tensor(np.asarray(triples), dtype=torch.int64).reshape(-1, 3)
    probs = torch.full((num_relations,), 0.5, dtype=torch.float64)
    for r in torch.unique(t[:, 1]).tolist():
        rows = t[t[:, 1] == r]
        tph = len(rows) / len(torch.unique(rows[:, 0]))
        hpt = len(rows) / len(torch.unique(rows[:, 2]))
        probs[r] = tph / (tph + hpt)
    return probs.float()


class TransE(nn.Module):
    """Entity and relation tables of width `dim`; `norm` 1 or 2 is the distance. `sparse` embeddings give
    sparse gradients, so an optimizer step touches only the rows of the batch (SparseAdam, SGD)."""

    def __init__(self, num_entities: int, num_relations: int, dim: int = 100, *, norm: int = 1, sparse: bool = True):
        super().__init__()
        if norm not in (1, 2):
            raise ValueError(f"norm must be 1 or 2, got {norm}")
        self.norm = norm
        self.num_entities = num_entities
        self.entity = nn.Embedding(num_entities, dim, sparse=sparse)
        self.relation = nn.Embedding(num_relations, dim, sparse=sparse)
        bound = 6 / math.sqrt(dim)  # Bordes et al.'s uniform(-6/√k, 6/√k)
        with torch.no_grad():
            nn.init.uniform_(self.entity.weight, -bound, bound)
            nn.init.uniform_(self.relation.weight, -bound, bound)
            self.relation.weight.div_(self.relation.weight.norm(dim=1, keepdim=True).clamp_min(1e-12))
        self.normalize_entities()

    @torch.no_grad()
    def normalize_entities(self) -> None:
        """Project every entity vector onto the unit L2 sphere."""
        w = self.entity.weight
        w.div_(w.norm(dim=1, keepdim=True).clamp_min(1e-12))

    def distance(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """‖e_h + r - e_t‖ for index tensors of one shape."""
        diff = self.entity(h) + self.relation(r) - self.entity(t)
        return diff.norm(p=self.norm, dim=-1)

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Higher is more plausible: -distance."""
        return -self.distance(h, r, t)

    def _against_all(self, queries: torch.Tensor) -> torch.Tensor:
        # (B, dim) against every entity: (B, E) negative distances.
        table = self.entity.weight
        if self.norm == 1:
            return -torch.cdist(queries, table, p=1)
        # ‖q - e‖² = ‖q‖² - 2 q·e + ‖e‖² (one matmul); clamped before the root against rounding below zero.
        sq = (queries * queries).sum(1, keepdim=True) - 2 * queries @ table.T + (table * table).sum(1)
        return -sq.clamp_min(0).sqrt()

    def score_tails(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """(B, E): the score of (h, r, e) for every entity e."""
        return self._against_all(self.entity(h) + self.relation(r))

    def score_heads(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(B, E): the score of (e, r, t) for every entity e (‖e + r - t‖ = ‖e - (t - r)‖)."""
        return self._against_all(self.entity(t) - self.relation(r))

    def corrupt(
        self, triples: torch.Tensor, generator: torch.Generator, head_probs: torch.Tensor | None = None
    ) -> torch.Tensor:
        """One negative per triple: its head or its tail replaced by a uniformly drawn entity. The head is
        replaced with probability 1/2, or head_probs[relation] ("bern"). The draw may hit a true triple, as in
        Bordes et al. (filtering it would need the whole graph at every step for little gain)."""
        n = len(triples)
        p = torch.full((n,), 0.5) if head_probs is None else head_probs[triples[:, 1]]
        replace_head = torch.rand(n, generator=generator) < p
        random = torch.randint(self.num_entities, (n,), generator=generator)
        out = triples.clone()
        out[:, 0] = torch.where(replace_head, random, triples[:, 0])
        out[:, 2] = torch.where(replace_head, triples[:, 2], random)
        return out

    def margin_loss(self, positive: torch.Tensor, negative: torch.Tensor, margin: float) -> torch.Tensor:
        """mean(max(0, margin + d(positive) - d(negative))) over (B, 3) index triples."""
        d_pos = self.distance(positive[:, 0], positive[:, 1], positive[:, 2])
        d_neg = self.distance(negative[:, 0], negative[:, 1], negative[:, 2])
        return torch.relu(margin + d_pos - d_neg).mean()
