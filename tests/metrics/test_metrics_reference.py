"""The claims of bertzoo.metrics.classification that tests/metrics/test_metrics.py does not compare with the reference
libraries yet: per-label and macro precision/recall and multi-label averages as scikit-learn,
seqeval's macro average and per-type report, and IOB1/IOBES entities as seqeval reads them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertzoo.metrics.classification import entity_metrics, get_entities, multilabel_metrics, precision_recall_f1


def test_per_label_and_macro_scores_as_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    r = random.Random(1)
    for _ in range(6):  # scikit-learn's input checks make each call slow; a few varied cases suffice
        labels = list("abcde")[: r.randint(2, 5)]
        gold = [r.choice(labels) for _ in range(r.randint(1, 40))]
        pred = [r.choice(labels) for _ in gold]
        m = precision_recall_f1(gold, pred, labels)
        p, rec, f, support = sk.precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
        for i, label in enumerate(labels):
            row = m["per_label"][label]
            assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((p[i], rec[i], f[i]))
            assert row["support"] == support[i]
        for avg in ("macro", "micro"):
            for name, fn in (("precision", sk.precision_score), ("recall", sk.recall_score)):
                assert m[f"{avg}_{name}"] == pytest.approx(fn(gold, pred, labels=labels, average=avg, zero_division=0))


def test_multilabel_averages_as_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(2)
    for _ in range(6):
        # At least two label columns: scikit-learn reads a single column as binary, not multi-label.
        shape = (int(rng.integers(1, 25)), int(rng.integers(2, 6)))
        gold, pred = rng.random(shape) < 0.4, rng.random(shape) < 0.4
        m = multilabel_metrics(gold.astype(int), pred.astype(int))
        for avg in ("micro", "macro", "weighted"):
            assert m[f"{avg}_f1"] == pytest.approx(sk.f1_score(gold, pred, average=avg, zero_division=0))
        for avg in ("micro", "macro"):
            assert m[f"{avg}_precision"] == pytest.approx(sk.precision_score(gold, pred, average=avg, zero_division=0))
            assert m[f"{avg}_recall"] == pytest.approx(sk.recall_score(gold, pred, average=avg, zero_division=0))
        assert m["exact_match"] == pytest.approx(sk.accuracy_score(gold, pred))
        assert m["hamming_accuracy"] == pytest.approx(1 - sk.hamming_loss(gold, pred))


@pytest.mark.parametrize(
    "tags",
    [
        ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-PER"],  # IOBES mixed with BIO
        ["O", "I-PER", "I-LOC", "B-PER", "B-LOC"],  # IOB1: entities open with I-
        ["O", "B", "I", "E", "S"],  # untyped tags
    ],
    ids=["iobes", "iob1", "untyped"],
)
def test_entities_macro_and_per_type_as_seqeval(tags):
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities

    r = random.Random(3)
    gold = [[r.choice(tags) for _ in range(r.randint(1, 12))] for _ in range(150)]
    pred = [[t if r.random() < 0.6 else r.choice(tags) for t in s] for s in gold]
    m = entity_metrics(gold, pred)
    assert m["f1"] == pytest.approx(seqeval.f1_score(gold, pred))
    assert m["macro_f1"] == pytest.approx(seqeval.f1_score(gold, pred, average="macro"))
    report = seqeval.classification_report(gold, pred, output_dict=True, zero_division=0)
    assert set(m["per_type"]) == {k for k in report if not k.endswith(" avg")}
    for name, row in m["per_type"].items():
        ref = report[name]
        assert (row["precision"], row["recall"], row["f1"]) == pytest.approx(
            (ref["precision"], ref["recall"], ref["f1-score"])
        )
        assert row["support"] == ref["support"]
    for s in gold + pred:
        assert get_entities(s) == seqeval_entities(s)
