"""Matthews correlation (CoLA's metric) against scikit-learn: binary, multi-class, degenerate cases."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertzoo.metrics.classification import confusion_matrix, confusion_mcc, matthews_corrcoef

sklearn_metrics = pytest.importorskip("sklearn.metrics")


@pytest.mark.parametrize("n_labels", [2, 3, 7])
def test_matches_scikit_learn(n_labels: int) -> None:
    r = random.Random(n_labels)
    for _ in range(50):
        n = r.randint(1, 60)
        gold = [r.randrange(n_labels) for _ in range(n)]
        # Predictions that agree with the gold label more often than chance, so the values are spread out.
        pred = [g if r.random() < 0.5 else r.randrange(n_labels) for g in gold]
        expected = sklearn_metrics.matthews_corrcoef(gold, pred)
        assert matthews_corrcoef(gold, pred) == pytest.approx(expected, abs=1e-12)
        assert confusion_mcc(confusion_matrix(gold, pred)) == pytest.approx(expected, abs=1e-12)


def test_hand_worked_and_degenerate_values() -> None:
    # tp=2, tn=1, fp=1, fn=0: (2*1 - 1*0) / sqrt(3 * 2 * 1 * 2) = 2 / sqrt(12)
    assert matthews_corrcoef(["1", "1", "0", "0"], ["1", "1", "1", "0"]) == pytest.approx(2 / np.sqrt(12))
    assert matthews_corrcoef([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    # Undefined (one predicted label): 0, as scikit-learn returns.
    assert matthews_corrcoef([0, 1, 1], [1, 1, 1]) == 0.0 == sklearn_metrics.matthews_corrcoef([0, 1, 1], [1, 1, 1])
    with pytest.raises(ValueError):
        confusion_mcc([[1, 2, 3]])
    with pytest.raises(ValueError):
        matthews_corrcoef([0, 1], [0])
