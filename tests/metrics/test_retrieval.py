"""Retrieval metrics (`bertzoo.metrics.retrieval`) against scikit-learn and hand-worked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import label_ranking_average_precision_score, ndcg_score, top_k_accuracy_score

from bertzoo.metrics.retrieval import rank_documents, retrieval_metrics


def test_hand_worked_case():
    # Query 0: its document (2) ranks second. Query 1: its documents 0 and 3 rank first and fourth.
    scores = np.array([[0.1, 0.5, 0.4, 0.9, 0.0], [0.8, 0.7, 0.6, 0.5, 0.1]])
    got = retrieval_metrics(scores, [[2], [0, 3]], ks=(1, 3), mrr_at=3)
    # Query 0 ranks 3, 1, 2, ... so document 2 is third; query 1 ranks 0, 1, 2, 3.
    assert got["recall_at_1"] == pytest.approx((0 + 0.5) / 2)
    assert got["recall_at_3"] == pytest.approx((1 + 0.5) / 2)
    assert got["mrr_at_3"] == pytest.approx((1 / 3 + 1) / 2)
    ndcg0 = (1 / math.log2(4)) / 1.0
    ndcg1 = 1.0 / (1 + 1 / math.log2(3))  # only rank 1 is within the top 3; ideal has both relevant first
    assert got["ndcg_at_3"] == pytest.approx((ndcg0 + ndcg1) / 2)


def test_against_scikit_learn_with_one_relevant_document():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(40, 10))
    gold = rng.integers(0, 10, size=40)
    got = retrieval_metrics(scores, [[g] for g in gold])
    truth = np.zeros_like(scores)
    truth[np.arange(40), gold] = 1
    for k in (1, 5):
        assert got[f"recall_at_{k}"] == pytest.approx(top_k_accuracy_score(gold, scores, k=k, labels=range(10)))
    # 10 documents: MRR@10 is the reciprocal rank, which label-ranking average precision equals for one relevant.
    assert got["mrr_at_10"] == pytest.approx(label_ranking_average_precision_score(truth, scores))
    assert got["ndcg_at_10"] == pytest.approx(ndcg_score(truth, scores, k=10))


def test_ndcg_with_several_relevant_documents_matches_scikit_learn():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(25, 30))
    relevant = [rng.choice(30, size=int(rng.integers(1, 4)), replace=False) for _ in range(25)]
    truth = np.zeros_like(scores)
    for i, r in enumerate(relevant):
        truth[i, r] = 1
    got = retrieval_metrics(scores, relevant)
    assert got["ndcg_at_10"] == pytest.approx(ndcg_score(truth, scores, k=10))
    # recall@10 by counting in scikit-learn's own ranking of each row.
    want = np.mean([len(set(np.argsort(-s)[:10]) & set(r)) / len(r) for s, r in zip(scores, relevant, strict=True)])
    assert got["recall_at_10"] == pytest.approx(want)


def test_mrr_is_zero_beyond_the_cutoff_and_ties_keep_corpus_order():
    scores = np.zeros((1, 12))
    got = retrieval_metrics(scores, [[11]])  # ties: corpus order, so document 11 ranks twelfth
    assert got["mrr_at_10"] == 0.0 and got["recall_at_10"] == 0.0 and got["ndcg_at_10"] == 0.0
    assert rank_documents(scores, 3).tolist() == [[0, 1, 2]]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="relevant"):
        retrieval_metrics(np.zeros((2, 3)), [[0], []])
    with pytest.raises(ValueError, match="outside"):
        retrieval_metrics(np.zeros((1, 3)), [[3]])
    with pytest.raises(ValueError, match="queries"):
        retrieval_metrics(np.zeros((2, 3)), [[0]])
