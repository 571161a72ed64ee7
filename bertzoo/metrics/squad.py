"""SQuAD exact match and F1, computed as the official evaluation scripts do (v1.1 and v2.0).

`normalize_answer`, `exact_match` and `f1_score` reproduce the official v2.0 script's
normalisation (lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace) and
its token-level F1 (Counter overlap of normalised tokens). Scores are maxed over the gold answers;
a question without gold answers (SQuAD 2.0 unanswerable) has the single gold answer "", which
scores 1 only for an empty prediction. On SQuAD 1.1 data this gives the v1.1 script's numbers
(its gold answers never normalise to the empty string).

`squad_evaluate` returns the official keys (`exact`, `f1`, `total`, `HasAns_*`, `NoAns_*`, and with
`na_probs` the `best_*` keys of the v2.0 script's threshold search), as percentages.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from bertzoo.errors import DataError

__all__ = [
    "best_threshold",
    "exact_match",
    "f1_score",
    "gold_answers",
    "normalize_answer",
    "squad_evaluate",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lowercase, remove punctuation, articles (a, an, the) and extra whitespace: the official order."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact_match(prediction: str, ground_truth: str) -> int:
    """1 when the normalised strings are equal, else 0."""
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token F1 over normalised tokens (bag-of-tokens overlap). If either side has no tokens (an
    unanswerable question's gold "", or an empty prediction) the score is 1 when both are empty, else 0."""
    pred, gold = _tokens(prediction), _tokens(ground_truth)
    if not pred or not gold:
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(gold)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Iterable[Any]) -> list[str]:
    """Gold answer texts that survive normalisation; [""] when there are none (unanswerable)."""
    texts = [a["text"] if isinstance(a, Mapping) else str(a) for a in answers]
    texts = [t for t in texts if normalize_answer(t)]
    return texts or [""]


def _gold_by_id(dataset_or_examples: Any) -> dict[str, list[str]]:
    """qid -> gold texts, from a SQuAD JSON object, its `data` list, or our loaded examples."""
    data = dataset_or_examples
    if isinstance(data, Mapping):
        if "data" not in data:
            raise DataError("the SQuAD dataset has no 'data' key; pass the parsed SQuAD JSON or a list of examples")
        data = data["data"]
    if not isinstance(data, (list, tuple)):
        raise DataError(
            f"cannot read gold answers from a {type(data).__name__}; pass SQuAD JSON, its data list or examples"
        )
    gold: dict[str, list[str]] = {}
    for item in data:
        if isinstance(item, Mapping) and "paragraphs" in item:  # an article of the official format
            for paragraph in item["paragraphs"]:
                for qa in paragraph["qas"]:
                    gold[str(qa["id"])] = gold_answers(qa.get("answers", []))
        elif isinstance(item, Mapping) and "id" in item:  # an example loaded by bertzoo.tasks.qa
            gold[str(item["id"])] = gold_answers([] if item.get("is_impossible") else item.get("answers", []))
        else:
            raise DataError("a SQuAD item has neither 'paragraphs' nor 'id'; pass SQuAD JSON or loaded examples")
    return gold


def _predictions_by_id(predictions: Any) -> dict[str, str]:
    """qid -> text, from a {qid: text} mapping or a list of {"id", "answer"} dicts."""
    if isinstance(predictions, Mapping):
        return {str(k): ("" if v is None else str(v)) for k, v in predictions.items()}
    out: dict[str, str] = {}
    for p in predictions:
        if not isinstance(p, Mapping) or "id" not in p or "answer" not in p:
            raise DataError("each prediction must be a dict with 'id' and 'answer' (or pass a {id: text} mapping)")
        out[str(p["id"])] = "" if p["answer"] is None else str(p["answer"])
    return out


def _raw_scores(gold: dict[str, list[str]], preds: dict[str, str]) -> tuple[dict[str, float], dict[str, float]]:
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        pred = preds.get(qid, "")  # a missing prediction counts as abstaining
        exact[qid] = float(max(exact_match(pred, a) for a in answers))
        f1[qid] = max(f1_score(pred, a) for a in answers)
    return exact, f1


def _apply_threshold(
    scores: dict[str, float], na_probs: Mapping[str, float], has_ans: dict[str, bool], threshold: float
) -> dict[str, float]:
    # As the official script: predicting "no answer" scores 1 exactly when the question has none.
    return {
        qid: (float(not has_ans[qid]) if float(na_probs.get(qid, 0.0)) > threshold else s) for qid, s in scores.items()
    }


def _summary(exact: dict[str, float], f1: dict[str, float], qids: list[str]) -> tuple[float, float]:
    n = len(qids)
    return 100.0 * sum(exact[q] for q in qids) / n, 100.0 * sum(f1[q] for q in qids) / n


def _best(
    preds: dict[str, str], scores: dict[str, float], na_probs: Mapping[str, float], has_ans: dict[str, bool]
) -> tuple[float, float]:
    """The official find_best_thresh, with two fixes that leave the best score unchanged: tied
    `na_probs` are passed as one group (so the reported threshold really gives the reported score),
    and when abstaining everywhere wins the threshold lies just below the smallest `na_prob`
    (the official script returns 0.0 there, which is wrong for score differences)."""
    values = {qid: float(na_probs.get(qid, 0.0)) for qid in scores}
    cur = best = float(sum(not has_ans[q] for q in scores))  # everything predicted "no answer"
    ordered = sorted(scores, key=lambda q: values[q])
    best_thresh = math.nextafter(values[ordered[0]], -math.inf) if ordered else 0.0
    for i, qid in enumerate(ordered):
        # Answering qid: its own score replaces the abstention's (1 for unanswerable, 0 otherwise).
        if has_ans[qid]:
            cur += scores[qid]
        else:
            cur += -1.0 if preds.get(qid, "") else 0.0
        if i + 1 < len(ordered) and values[ordered[i + 1]] == values[qid]:
            continue  # a threshold cannot separate equal values
        if cur > best:
            best, best_thresh = cur, values[qid]
    return 100.0 * best / max(1, len(scores)), best_thresh


def best_threshold(
    dataset_or_examples: Any, predictions: Any, na_probs: Mapping[str, float], metric: str = "f1"
) -> tuple[float, float]:
    """Tune the no-answer threshold like the official v2.0 script's find_best_thresh.

    `predictions` are the best non-null answers; `na_probs` is any score where larger means "more
    likely unanswerable" (a probability, or the null-minus-best logit difference). Returns
    (best `metric` in percent, threshold): predict "" exactly when na_probs[qid] > threshold.
    """
    if metric not in ("exact", "f1"):
        raise ValueError(f"metric must be 'exact' or 'f1', got {metric!r}")
    gold = _gold_by_id(dataset_or_examples)
    preds = _predictions_by_id(predictions)
    exact, f1 = _raw_scores(gold, preds)
    has_ans = {qid: answers != [""] for qid, answers in gold.items()}
    return _best(preds, exact if metric == "exact" else f1, na_probs, has_ans)


def squad_evaluate(
    dataset_or_examples: Any,
    predictions: Any,
    na_probs: Mapping[str, float] | None = None,
    na_threshold: float = 1.0,
) -> dict[str, float]:
    """Official-style SQuAD scores, in percent.

    dataset_or_examples: the parsed SQuAD JSON (v1.1 or v2.0), its `data` list, or examples from
    `QATask.load`. predictions: {qid: text} or [{"id", "answer"}, ...]; a missing prediction counts
    as "" (abstaining). na_probs: optional {qid: no-answer score}; where it exceeds `na_threshold` the
    prediction counts as "no answer". Keys: exact, f1, total, HasAns_* / NoAns_* (when such questions
    exist), missing, and with na_probs best_exact, best_exact_thresh, best_f1, best_f1_thresh.
    """
    gold = _gold_by_id(dataset_or_examples)
    if not gold:
        raise DataError("the SQuAD dataset has no questions; check the file")
    preds = _predictions_by_id(predictions)
    has_ans = {qid: answers != [""] for qid, answers in gold.items()}
    exact_raw, f1_raw = _raw_scores(gold, preds)
    exact, f1 = exact_raw, f1_raw
    if na_probs is not None:
        exact = _apply_threshold(exact_raw, na_probs, has_ans, na_threshold)
        f1 = _apply_threshold(f1_raw, na_probs, has_ans, na_threshold)
    qids = list(gold)
    out: dict[str, float] = {}
    out["exact"], out["f1"] = _summary(exact, f1, qids)
    out["total"] = len(qids)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        subset = [q for q in qids if has_ans[q] == wanted]
        if subset:  # the official script reports a group only when it has questions
            out[f"{name}_exact"], out[f"{name}_f1"] = _summary(exact, f1, subset)
            out[f"{name}_total"] = len(subset)
    out["missing"] = sum(q not in preds for q in qids)
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = _best(preds, exact_raw, na_probs, has_ans)
        out["best_f1"], out["best_f1_thresh"] = _best(preds, f1_raw, na_probs, has_ans)
    return out
