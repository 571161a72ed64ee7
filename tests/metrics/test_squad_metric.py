"""SQuAD EM/F1 against hand-checked cases (the official v1.1/v2.0 evaluation rules)."""

from __future__ import annotations

import math

import pytest

from bertzoo.errors import DataError
from bertzoo.metrics.squad import (
    best_threshold,
    exact_match,
    f1_score,
    gold_answers,
    normalize_answer,
    squad_evaluate,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Quick, brown fox!", "quick brown fox"),  # case, punctuation, article, whitespace
        ("An apple a day", "apple day"),
        ("theory of the atom", "theory of atom"),  # "the" inside a word stays
        ("Hello-world", "helloworld"),  # punctuation is deleted, not replaced by a space
        ("  A.  B. ", "b"),  # "a." loses its dot first, then is an article
        ("\tnew\nline ", "new line"),
        ("Anne the Great", "anne great"),
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match():
    assert exact_match("the Eiffel Tower", "Eiffel tower.") == 1
    assert exact_match("Eiffel", "Eiffel Tower") == 0
    assert exact_match("  3.50 euros", "350 euros") == 1  # the official rule drops the decimal point too
    assert exact_match("", "") == 1


def test_f1_partial_overlap_by_hand():
    # pred tokens [big, red, barn], gold [red, barn, by, lake]: 2 shared, P = 2/3, R = 1/2, F1 = 4/7.
    assert f1_score("the big red barn", "red barn by the lake") == pytest.approx(4 / 7)
    # Counter overlap: "go" is shared once; P = 1/3, R = 1, F1 = 1/2.
    assert f1_score("go go go", "go") == pytest.approx(0.5)
    assert f1_score("Broncos", "the Denver Broncos") == pytest.approx(2 / 3)
    assert f1_score("red", "blue") == 0.0
    assert f1_score("A red, red rose.", "red rose") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))


def test_f1_empty_answers():
    assert f1_score("", "") == 1.0  # unanswerable, and the model abstained
    assert f1_score("the", "") == 1.0  # normalises to nothing
    assert f1_score("", "Denver") == 0.0
    assert f1_score("Denver", "") == 0.0


def test_gold_answers_unanswerable():
    assert gold_answers([]) == [""]
    assert gold_answers([{"text": "the"}, {"text": "Ostby"}]) == ["Ostby"]
    assert gold_answers([{"text": "a"}]) == [""]


def _dataset(questions):
    """A SQuAD JSON object with one paragraph holding (id, answer texts) questions."""
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in golds]}
        for qid, golds in questions
    ]
    return {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}


def test_squad_evaluate_v1_max_over_golds():
    data = _dataset(
        [
            ("q1", ["Denver Broncos", "the Denver Broncos"]),  # "Broncos": EM 0, F1 2/3 against either
            ("q2", ["1887"]),  # "in 1887": EM 0, F1 2/3
            ("q3", ["a small museum", "small museum"]),  # "Small museum.": EM 1, F1 1
        ]
    )
    preds = {"q1": "Broncos", "q2": "in 1887", "q3": "Small museum."}
    out = squad_evaluate(data, preds)
    assert out["exact"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 * (2 / 3 + 2 / 3 + 1) / 3)
    assert out["total"] == 3 and out["HasAns_total"] == 3 and "NoAns_exact" not in out
    assert out["missing"] == 0
    # The same scores from the data list and from a list of prediction dicts.
    listed = [{"id": k, "answer": v} for k, v in preds.items()]
    assert squad_evaluate(data["data"], listed)["f1"] == pytest.approx(out["f1"])


def test_squad_evaluate_best_gold_wins():
    data = _dataset([("q", ["Marta Vell", "the engineer Marta Vell"])])
    # Against gold 2: P = 3/3, R = 3/3 -> 1.0; against gold 1: P = 2/3, R = 1 -> 0.8.
    assert squad_evaluate(data, {"q": "engineer Marta Vell"})["f1"] == pytest.approx(100.0)
    assert squad_evaluate(data, {"q": "engineer Marta Vell"})["exact"] == pytest.approx(100.0)


def test_squad_evaluate_v2_no_answer():
    data = _dataset([("has", ["whale oil"]), ("none1", []), ("none2", [])])
    preds = {"has": "whale oil", "none1": "", "none2": "Lyon"}
    out = squad_evaluate(data, preds)
    assert out["exact"] == pytest.approx(200 / 3) and out["f1"] == pytest.approx(200 / 3)
    assert out["HasAns_exact"] == 100.0 and out["HasAns_total"] == 1
    assert out["NoAns_exact"] == 50.0 and out["NoAns_f1"] == 50.0 and out["NoAns_total"] == 2
    # With na_probs above the threshold a prediction counts as "no answer": none2 becomes right,
    # "has" becomes wrong.
    out = squad_evaluate(data, preds, na_probs={"has": 0.8, "none1": 0.2, "none2": 0.9}, na_threshold=0.5)
    assert out["HasAns_exact"] == 0.0 and out["NoAns_exact"] == 100.0
    assert out["exact"] == pytest.approx(200 / 3)
    # Default threshold 1.0 never fires on probabilities.
    out = squad_evaluate(data, preds, na_probs={"has": 1.0, "none1": 1.0, "none2": 1.0})
    assert out["exact"] == pytest.approx(200 / 3) and out["HasAns_exact"] == 100.0


def test_squad_evaluate_missing_prediction_counts_as_abstaining():
    data = _dataset([("has", ["Hamm"]), ("none", [])])
    out = squad_evaluate(data, {})
    assert out["missing"] == 2 and out["exact"] == 50.0 and out["NoAns_exact"] == 100.0


def test_squad_evaluate_from_loaded_examples():
    examples = [
        {"id": "a", "answers": [{"text": "Ilse Carrow", "answer_start": 0}], "is_impossible": False},
        {"id": "b", "answers": [], "is_impossible": True},
    ]
    out = squad_evaluate(examples, {"a": "Carrow", "b": ""})
    # a: EM 0, F1 = 2 * 1 * 0.5 / 1.5 = 2/3; b: 1.
    assert out["exact"] == 50.0
    assert out["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)


def test_best_threshold_by_hand():
    data = _dataset([("A", ["oil"]), ("B", []), ("C", ["Lyon"]), ("D", [])])
    preds = {"A": "oil", "B": "x", "C": "Paris", "D": "y"}
    na = {"A": 0.1, "B": 0.7, "C": 0.4, "D": 0.2}
    # All abstaining: 2/4. Answering A (na 0.1): 3/4. Then D: 2/4, C: 2/4, B: 1/4. Best 75 at 0.1.
    assert best_threshold(data, preds, na) == (pytest.approx(75.0), 0.1)
    assert best_threshold(data, preds, na, metric="exact") == (pytest.approx(75.0), 0.1)
    out = squad_evaluate(data, preds, na_probs=na, na_threshold=0.1)
    assert out["f1"] == pytest.approx(75.0)
    assert out["best_f1"] == pytest.approx(75.0) and out["best_f1_thresh"] == 0.1
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == 0.1


def test_best_threshold_partial_f1_and_score_differences():
    # na values may be logit differences (negative too). A: F1 2/3 when answered.
    data = _dataset([("A", ["Denver Broncos"]), ("B", [])])
    preds = {"A": "Broncos", "B": "z"}
    score, thresh = best_threshold(data, preds, {"A": -3.0, "B": 2.5})
    assert score == pytest.approx(100 * (2 / 3 + 1) / 2) and thresh == -3.0
    assert best_threshold(data, preds, {"A": -3.0, "B": 2.5}, metric="exact") == (
        pytest.approx(50.0),
        pytest.approx(-3.0),
    )


def test_best_threshold_ties_and_all_abstaining():
    # Equal na values cannot be separated: answering E (+1) also answers F (-1), so the best is 50.
    data = _dataset([("E", ["Sella"]), ("F", [])])
    score, thresh = best_threshold(data, {"E": "Sella", "F": "z"}, {"E": 0.3, "F": 0.3})
    assert score == pytest.approx(50.0) and thresh < 0.3
    assert squad_evaluate(data, {"E": "Sella", "F": "z"}, {"E": 0.3, "F": 0.3}, na_threshold=thresh)["f1"] == 50.0
    # Abstaining everywhere wins: the threshold lies just below the smallest value.
    data = _dataset([("G", [])])
    score, thresh = best_threshold(data, {"G": "w"}, {"G": 0.5})
    assert score == 100.0 and thresh < 0.5 and math.isclose(thresh, 0.5)


def test_bad_inputs():
    with pytest.raises(DataError, match="'data'"):
        squad_evaluate({"articles": []}, {})
    with pytest.raises(DataError, match="'id' and 'answer'"):
        squad_evaluate(_dataset([("q", ["x"])]), [{"qid": "q"}])
    with pytest.raises(DataError, match="no questions"):
        squad_evaluate({"data": []}, {})
    with pytest.raises(ValueError, match="metric"):
        best_threshold(_dataset([("q", ["x"])]), {}, {}, metric="em")
