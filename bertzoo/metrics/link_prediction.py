"""Link prediction metrics: filtered ranks of the true head and tail among all entities, MRR and Hits@k.

For a test triple (h, r, t), tail prediction scores (h, r, e) for every entity e and ranks t; head prediction
ranks h among (e, r, t). The *filtered* setting (Bordes et al. 2013) first removes every other entity that
makes a known triple (train, valid or test), so a model is not penalised for ranking another true answer
higher; with no known triples the ranks are the *raw* ones.

Ties use the realistic (mean) rank: rank = 1 + #(higher scores) + #(equal scores among the others) / 2, the
mean of the optimistic and the pessimistic rank (Berrendorf et al. 2020, PyKEEN's default). A model that gives
every entity the same score thus gets the rank a random ordering would get on average, (E + 1) / 2, not 1.

Pure functions over tensors, no file IO.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch

# scores_fn(triples (B, 3) int64, side) -> (B, E) scores, higher = more plausible. side "tail" scores every
# entity as the tail of (h, r, ?); side "head" scores every entity as the head of (?, r, t).
ScoresFn = Callable[[torch.Tensor, str], torch.Tensor]


def _answers(known: np.ndarray, side: str) -> dict[tuple[int, int], list[int]]:
    """(h, r) -> known tails, or (r, t) -> known heads."""
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    if side == "tail":
        for h, r, t in known.tolist():
            out[(h, r)].append(t)
    else:
        for h, r, t in known.tolist():
            out[(r, t)].append(h)
    return out


@torch.no_grad()
def filtered_ranks(
    scores_fn: ScoresFn,
    test_triples: np.ndarray | torch.Tensor,
    known_triples: np.ndarray | torch.Tensor | None,
    num_entities: int,
    batch: int = 256,
) -> dict[str, np.ndarray]:
    """{"head": ranks, "tail": ranks} (float64, one per test triple, realistic ranks from 1) of the true
    entity, leaving out the other entities that form a triple in `known_triples` (None: raw ranks)."""
    test = torch.as_tensor(np.asarray(test_triples), dtype=torch.int64).reshape(-1, 3)
    known = np.zeros((0, 3), np.int64) if known_triples is None else np.asarray(known_triples).reshape(-1, 3)
    out: dict[str, np.ndarray] = {}
    for side in ("head", "tail"):
        answers = _answers(known, side)
        true_col = 0 if side == "head" else 2
        ranks = []
        for start in range(0, len(test), batch):
            chunk = test[start : start + batch]
            scores = scores_fn(chunk, side)
            if scores.shape != (len(chunk), num_entities):
                raise ValueError(f"scores_fn returned {tuple(scores.shape)}, expected ({len(chunk)}, {num_entities})")
            true = chunk[:, true_col]
            true_score = scores.gather(1, true[:, None])
            rows, cols = [], []
            for i, (h, r, t) in enumerate(chunk.tolist()):
                key = (r, t) if side == "head" else (h, r)
                others = answers.get(key, ())
                rows.extend([i] * len(others))
                cols.extend(others)
            keep = torch.ones_like(scores, dtype=torch.bool)
            if rows:
                keep[torch.tensor(rows), torch.tensor(cols)] = False
            keep[torch.arange(len(chunk)), true] = False  # the true entity is not its own competitor
            higher = ((scores > true_score) & keep).sum(1)
            equal = ((scores == true_score) & keep).sum(1)
            ranks.append((1 + higher + equal.double() / 2).numpy())
        out[side] = np.concatenate(ranks) if ranks else np.zeros(0)
    return out


def _both(ranks: dict[str, np.ndarray] | np.ndarray) -> np.ndarray:
    if isinstance(ranks, dict):
        return np.concatenate([np.asarray(ranks["head"]), np.asarray(ranks["tail"])])
    return np.asarray(ranks)


def mrr(ranks: dict[str, np.ndarray] | np.ndarray) -> float:
    """Mean reciprocal rank over head and tail prediction together (or over one array of ranks)."""
    r = _both(ranks)
    return float(np.mean(1.0 / r)) if len(r) else float("nan")


def hits_at(ranks: dict[str, np.ndarray] | np.ndarray, k: int) -> float:
    """Share of ranks <= k over head and tail prediction together (a realistic rank of k + 0.5 is no hit)."""
    r = _both(ranks)
    return float(np.mean(r <= k)) if len(r) else float("nan")


def mean_rank(ranks: dict[str, np.ndarray] | np.ndarray) -> float:
    r = _both(ranks)
    return float(np.mean(r)) if len(r) else float("nan")


def link_prediction_metrics(ranks: dict[str, np.ndarray]) -> dict[str, float]:
    """MRR, MR and Hits@1/3/10 over both sides."""
    return {
        "mrr": mrr(ranks),
        "mr": mean_rank(ranks),
        "hits@1": hits_at(ranks, 1),
        "hits@3": hits_at(ranks, 3),
        "hits@10": hits_at(ranks, 10),
    }
