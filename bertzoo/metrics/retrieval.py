"""Retrieval scores of a query x document score matrix: recall@k, MRR@k and nDCG@k with binary relevance,
as MTEB and BEIR report them (pytrec_eval's definitions), in plain numpy.

Every query has a set of relevant documents (usually one). Ties in the scores are broken by document index,
so a constant score matrix ranks documents in corpus order rather than by chance.

* recall@k: the share of a query's relevant documents found in its top k, averaged over queries;
* MRR@k: 1 / rank of the first relevant document within the top k (0 when none is there);
* nDCG@k: DCG of the top k (gain 1 / log2(rank + 1) per relevant document) over the DCG of the ideal
  ranking (all relevant documents first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["RETRIEVAL_KS", "rank_documents", "retrieval_metrics"]

RETRIEVAL_KS = (1, 5, 10)


def rank_documents(scores: np.ndarray, k: int) -> np.ndarray:
    """(queries, min(k, documents)) document indices, best first; equal scores keep corpus order."""
    scores = np.asarray(scores, dtype=np.float64)
    k = min(k, scores.shape[1])
    # A stable sort of the negated scores: among equal scores the lower index comes first.
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def retrieval_metrics(
    scores: np.ndarray, relevant: Sequence[Iterable[int]], ks: Sequence[int] = RETRIEVAL_KS, mrr_at: int = 10
) -> dict[str, float]:
    """`recall_at_k` for each k in `ks`, `mrr_at_{mrr_at}` and `ndcg_at_{max(ks)}`, averaged over queries.

    scores: (queries, documents), higher is better; relevant[i]: the indices of query i's relevant documents
    (a query without any is a ValueError: it would count as a miss that no model could avoid)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != len(relevant):
        raise ValueError(f"scores of shape {scores.shape} for {len(relevant)} queries")
    sets = [set(int(d) for d in r) for r in relevant]
    if any(not s for s in sets):
        raise ValueError("every query needs at least one relevant document")
    n_docs = scores.shape[1]
    if any(d < 0 or d >= n_docs for s in sets for d in s):
        raise ValueError(f"a relevant document index lies outside the {n_docs} documents")
    depth = max(max(ks), mrr_at)
    top = rank_documents(scores, depth)
    hits = np.array([[int(d) in s for d in row] for row, s in zip(top, sets, strict=True)], dtype=bool)
    hits = hits.reshape(len(sets), top.shape[1])
    n_relevant = np.array([len(s) for s in sets], dtype=np.float64)
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall_at_{k}"] = float((hits[:, :k].sum(1) / n_relevant).mean())
    first = np.where(hits[:, :mrr_at].any(1), hits[:, :mrr_at].argmax(1) + 1, 0)
    out[f"mrr_at_{mrr_at}"] = float(np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0).mean())
    k = max(ks)
    discounts = 1.0 / np.log2(np.arange(2, k + 2))  # rank r (1-based) -> 1 / log2(r + 1)
    dcg = (hits[:, :k] * discounts[: hits[:, :k].shape[1]]).sum(1)
    ideal = np.array([discounts[: int(min(n, k))].sum() for n in n_relevant])
    out[f"ndcg_at_{k}"] = float((dcg / ideal).mean())
    return out
