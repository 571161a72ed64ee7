"""Metrics on hand-checked cases, and against scikit-learn / scipy / seqeval when they are installed
(they are not dependencies)."""

from __future__ import annotations

import math
import random
import sys

import numpy as np
import pytest

from bertzoo.metrics.classification import (
    accuracy,
    confusion_matrix,
    confusion_matrix_png,
    entity_metrics,
    format_table,
    get_entities,
    multilabel_metrics,
    pearson,
    precision_recall_f1,
    rankdata,
    regression_metrics,
    spearman,
)


def test_accuracy_and_prf_by_hand():
    gold = ["a", "a", "b", "b", "c"]
    pred = ["a", "b", "b", "b", "a"]
    assert accuracy(gold, pred) == pytest.approx(3 / 5)
    m = precision_recall_f1(gold, pred, ["a", "b", "c"])
    # a: tp 1, predicted 2, gold 2 -> P=R=F=0.5; b: tp 2, predicted 3, gold 2 -> P=2/3, R=1, F=0.8; c: 0.
    assert m["per_label"]["a"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert m["per_label"]["b"]["precision"] == pytest.approx(2 / 3)
    assert m["per_label"]["b"]["f1"] == pytest.approx(0.8)
    assert m["per_label"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    assert m["micro_f1"] == pytest.approx(3 / 5)  # single-label micro F1 equals accuracy
    assert m["weighted_f1"] == pytest.approx((0.5 * 2 + 0.8 * 2) / 5)
    assert confusion_matrix(gold, pred, ["a", "b", "c"]).tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 0]]
    assert accuracy([], []) == 0.0


def test_against_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    r = random.Random(0)
    gold = [r.choice("abcd") for _ in range(200)]
    pred = [g if r.random() < 0.6 else r.choice("abcd") for g in gold]
    labels = list("abcd")
    m = precision_recall_f1(gold, pred, labels)
    assert m["macro_f1"] == pytest.approx(sk.f1_score(gold, pred, average="macro"))
    assert m["micro_f1"] == pytest.approx(sk.f1_score(gold, pred, average="micro"))
    assert m["weighted_f1"] == pytest.approx(sk.f1_score(gold, pred, average="weighted"))
    assert (confusion_matrix(gold, pred, labels) == sk.confusion_matrix(gold, pred, labels=labels)).all()


def test_multilabel_by_hand():
    gold = [{"x", "y"}, {"y"}, set()]
    pred = [{"x"}, {"y", "z"}, set()]
    m = multilabel_metrics(gold, pred, ["x", "y", "z"])
    # tp: x 1, y 1, z 0; predicted: x 1, y 1, z 1; gold: x 1, y 2, z 0.
    assert m["micro_precision"] == pytest.approx(2 / 3)
    assert m["micro_recall"] == pytest.approx(2 / 3)
    assert m["micro_f1"] == pytest.approx(2 / 3)
    assert m["macro_f1"] == pytest.approx((1.0 + 2 / 3 + 0.0) / 3)
    assert m["exact_match"] == pytest.approx(1 / 3)
    arr = multilabel_metrics(np.array([[1, 1, 0], [0, 1, 0]]), np.array([[1, 1, 0], [0, 1, 1]]))
    assert arr["exact_match"] == 0.5


def test_rankdata_averages_ties():
    assert rankdata([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert rankdata([3, 1, 3, 3]).tolist() == [3.0, 1.0, 3.0, 3.0]


def test_regression_by_hand():
    # Pearson of (1, 2, 3) and (2, 4, 7): 5 / sqrt(2 * 114 / 9) = 15 / sqrt(228).
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228))
    # Spearman with a tie: ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4) -> 4.5 / sqrt(4.5 * 5) = sqrt(0.9).
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    m = regression_metrics([1.0, 2.0, 3.0], [1.0, 2.0, 5.0])
    assert m["mse"] == pytest.approx(4 / 3)
    assert m["spearman"] == pytest.approx(1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0  # undefined: reported as no correlation


def test_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 100).astype(float)  # many ties
    y = x + rng.normal(0, 1.5, 100)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert rankdata(x).tolist() == stats.rankdata(x).tolist()


# -- entities (seqeval default mode) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),  # seqeval's docstring example
        (["I-PER", "I-PER", "O"], [("PER", 0, 1)]),  # I- without B- starts an entity
        (["O", "I-PER", "B-PER", "I-PER"], [("PER", 1, 1), ("PER", 2, 3)]),
        (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # a type change closes and opens
        (["B-PER", "B-PER"], [("PER", 0, 0), ("PER", 1, 1)]),
        (["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "E-ORG"], [("PER", 0, 0), ("LOC", 1, 3), ("ORG", 5, 5)]),
        (["B-PER", "E-PER", "I-PER"], [("PER", 0, 1), ("PER", 2, 2)]),  # an I- after E- starts anew
        (["B-PER", "I-PER"], [("PER", 0, 1)]),  # IOBES without E-: closed at the end
        (["O", "O"], []),
    ],
)
def test_get_entities(tags, expected):
    assert get_entities(tags) == expected


def test_entity_metrics_seqeval_readme_example():
    y_true = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    y_pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    m = entity_metrics(y_true, y_pred)
    assert (m["precision"], m["recall"], m["f1"]) == (0.5, 0.5, 0.5)
    assert m["per_type"]["PER"]["f1"] == 1.0 and m["per_type"]["MISC"]["f1"] == 0.0
    assert m["macro_f1"] == 0.5


def test_entity_metrics_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["I-ORG", "O"]]  # the I-ORG still forms the ORG entity
    m = entity_metrics(gold, pred)
    assert (m["n_gold"], m["n_pred"], m["n_correct"]) == (3, 2, 2)
    assert m["precision"] == 1.0 and m["recall"] == pytest.approx(2 / 3) and m["f1"] == pytest.approx(0.8)


def test_against_seqeval():
    seqeval = pytest.importorskip("seqeval.metrics")
    r = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-PER"]
    gold = [[r.choice(tags) for _ in range(r.randint(1, 12))] for _ in range(200)]
    pred = [[t if r.random() < 0.7 else r.choice(tags) for t in s] for s in gold]
    m = entity_metrics(gold, pred)
    assert m["f1"] == pytest.approx(seqeval.f1_score(gold, pred))
    assert m["precision"] == pytest.approx(seqeval.precision_score(gold, pred))
    assert m["recall"] == pytest.approx(seqeval.recall_score(gold, pred))
    from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities

    for s in gold:
        assert get_entities(s) == seqeval_entities(s)


# -- reports -----------------------------------------------------------------------------------


def test_format_table():
    text = format_table({"a": {"precision": 0.5, "support": 3}, "bb": {"precision": 1.0, "support": 12}})
    lines = text.splitlines()
    assert lines[0].split() == ["precision", "support"]
    assert lines[1].split() == ["a", "0.5000", "3"]
    assert lines[2].split() == ["bb", "1.0000", "12"]


def test_confusion_matrix_png(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    out = confusion_matrix_png([[3, 1], [0, 2]], ["neg", "pos"], tmp_path / "cm.png")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="does not match"):
        confusion_matrix_png([[1]], ["a", "b"], tmp_path / "x.png")
    # Without matplotlib: a warning and no file.
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.warns(UserWarning, match="matplotlib is not installed"):
        assert confusion_matrix_png([[1]], ["a"], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
