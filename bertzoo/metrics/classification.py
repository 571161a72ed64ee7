"""Evaluation metrics for fine-tuning tasks, in plain numpy (no scikit-learn/scipy/seqeval needed).

* classification: `accuracy`, `precision_recall_f1` (per label, macro, micro, weighted),
  `confusion_matrix`, `matthews_corrcoef` (and `confusion_mcc`, the same from a confusion matrix)
* multi-label: `multilabel_metrics` (micro/macro F1, exact match)
* regression: `regression_metrics` (MSE, Pearson, Spearman with average ranks for ties), `rankdata`
* entities: `get_entities` and `entity_metrics`, matching seqeval's default (conlleval) mode for
  BIO, IOB1 and IOBES tags
* reports: `format_table` (plain-text table) and `confusion_matrix_png` (needs matplotlib)

Division by zero gives 0 (seqeval's and scikit-learn's `zero_division` default, without the
warning), so an empty class never turns a report into NaN.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "accuracy",
    "confusion_matrix",
    "confusion_matrix_png",
    "confusion_mcc",
    "entity_metrics",
    "format_table",
    "get_entities",
    "matthews_corrcoef",
    "multilabel_metrics",
    "pearson",
    "precision_recall_f1",
    "rankdata",
    "regression_metrics",
    "spearman",
]


def _div(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def _f1(p: float, r: float) -> float:
    return _div(2 * p * r, p + r)


def accuracy(y_true: Sequence[Hashable], y_pred: Sequence[Hashable]) -> float:
    """Share of positions where the prediction equals the gold label (0.0 for empty input)."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold labels but {len(y_pred)} predictions")
    return _div(sum(t == p for t, p in zip(y_true, y_pred, strict=True)), len(y_true))


def _prf_from_counts(tp: np.ndarray, n_pred: np.ndarray, n_true: np.ndarray, labels: Sequence[Any]) -> dict[str, Any]:
    per_label = {}
    for i, label in enumerate(labels):
        p, r = _div(tp[i], n_pred[i]), _div(tp[i], n_true[i])
        per_label[str(label)] = {"precision": p, "recall": r, "f1": _f1(p, r), "support": int(n_true[i])}
    rows = list(per_label.values())
    micro_p, micro_r = _div(tp.sum(), n_pred.sum()), _div(tp.sum(), n_true.sum())
    support = n_true.sum()
    out: dict[str, Any] = {
        "micro_precision": micro_p,
        "micro_recall": micro_r,
        "micro_f1": _f1(micro_p, micro_r),
        "macro_precision": _div(sum(r["precision"] for r in rows), len(rows)),
        "macro_recall": _div(sum(r["recall"] for r in rows), len(rows)),
        # The mean of per-label F1 (scikit-learn's definition), not the F1 of the mean P and R.
        "macro_f1": _div(sum(r["f1"] for r in rows), len(rows)),
        "weighted_f1": _div(sum(r["f1"] * r["support"] for r in rows), support),
        "per_label": per_label,
    }
    return out


def precision_recall_f1(
    y_true: Sequence[Hashable], y_pred: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> dict[str, Any]:
    """Per-label precision/recall/F1/support plus micro, macro and support-weighted averages.

    `labels` fixes the label set and order (default: sorted union of gold and predicted labels);
    predictions outside it count as false positives of nothing, i.e. only lower recall.
    """
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold labels but {len(y_pred)} predictions")
    if labels is None:
        labels = sorted(set(y_true) | set(y_pred), key=str)
    index = {label: i for i, label in enumerate(labels)}
    tp = np.zeros(len(labels), dtype=np.int64)
    n_pred = np.zeros(len(labels), dtype=np.int64)
    n_true = np.zeros(len(labels), dtype=np.int64)
    for t, p in zip(y_true, y_pred, strict=True):
        if t in index:
            n_true[index[t]] += 1
        if p in index:
            n_pred[index[p]] += 1
            if p == t:
                tp[index[p]] += 1
    return _prf_from_counts(tp, n_pred, n_true, labels)


def confusion_matrix(
    y_true: Sequence[Hashable], y_pred: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> np.ndarray:
    """(n_labels, n_labels) int64 counts: row = gold label, column = predicted label (scikit-learn's
    layout). Pairs with a label outside `labels` are left out."""
    if labels is None:
        labels = sorted(set(y_true) | set(y_pred), key=str)
    index = {label: i for i, label in enumerate(labels)}
    out = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for t, p in zip(y_true, y_pred, strict=True):
        if t in index and p in index:
            out[index[t], index[p]] += 1
    return out


def confusion_mcc(matrix: np.ndarray | Sequence[Sequence[int]]) -> float:
    """Matthews correlation coefficient of a (gold x predicted) confusion matrix: Gorodkin's multi-class form,
    scikit-learn's `matthews_corrcoef`; 0.0 when it is undefined (every gold or every predicted label the same)."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"a confusion matrix is square, got shape {m.shape}")
    gold, pred = m.sum(1), m.sum(0)  # per label: how often it is the gold one, how often predicted
    total, correct = m.sum(), np.trace(m)
    denom = math.sqrt(float(total**2 - pred @ pred) * float(total**2 - gold @ gold))
    return float((correct * total - gold @ pred) / denom) if denom > 0 else 0.0


def matthews_corrcoef(
    y_true: Sequence[Hashable], y_pred: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> float:
    """Matthews correlation coefficient (CoLA's metric), binary or multi-class, as scikit-learn computes it."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold labels but {len(y_pred)} predictions")
    return confusion_mcc(confusion_matrix(y_true, y_pred, labels))


# ---------------------------------------------------------------------------------------------
# Multi-label
# ---------------------------------------------------------------------------------------------


def _indicator(rows: Sequence[Any] | np.ndarray, labels: Sequence[Hashable] | None) -> np.ndarray:
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        return rows.astype(bool)
    if labels is None:
        raise ValueError("labels are needed when multi-label targets are given as label sets")
    index = {label: i for i, label in enumerate(labels)}
    out = np.zeros((len(rows), len(labels)), dtype=bool)
    for r, row in enumerate(rows):
        for label in row:
            if label in index:
                out[r, index[label]] = True
    return out


def multilabel_metrics(
    y_true: Sequence[Any] | np.ndarray, y_pred: Sequence[Any] | np.ndarray, labels: Sequence[Hashable] | None = None
) -> dict[str, Any]:
    """Micro/macro precision, recall and F1 over labels, and exact match (all labels right).

    Targets are (n, n_labels) 0/1 arrays or, with `labels`, sequences of label sets.
    """
    t, p = _indicator(y_true, labels), _indicator(y_pred, labels)
    if t.shape != p.shape:
        raise ValueError(f"gold shape {t.shape} differs from prediction shape {p.shape}")
    names = list(labels) if labels is not None else list(range(t.shape[1]))
    tp = (t & p).sum(0)
    out = _prf_from_counts(tp, p.sum(0), t.sum(0), names)
    out["exact_match"] = float((t == p).all(1).mean()) if len(t) else 0.0
    out["hamming_accuracy"] = float((t == p).mean()) if t.size else 0.0
    return out


# ---------------------------------------------------------------------------------------------
# Regression
# ---------------------------------------------------------------------------------------------


def rankdata(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the average of their ranks (scipy.stats.rankdata "average")."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # Start of each run of equal values; a run [s, e) gets rank (s + 1 + e) / 2.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    avg = (starts + 1 + ends) / 2.0
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Pearson correlation; 0.0 when either side is constant (undefined: scipy returns NaN, but a
    metric that picks checkpoints must stay comparable)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} gold values but {len(y)} predictions")
    if len(x) < 2:
        return 0.0
    dx, dy = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(np.clip(float(dx @ dy) / denom, -1.0, 1.0)) if denom > 0 else 0.0


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (ties handled as scipy does)."""
    return pearson(rankdata(x), rankdata(y))


def regression_metrics(y_true: Sequence[float] | np.ndarray, y_pred: Sequence[float] | np.ndarray) -> dict[str, float]:
    """MSE, Pearson and Spearman correlation (the STS-B metrics)."""
    t = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    if t.shape != p.shape:
        raise ValueError(f"{t.shape} gold values but {p.shape} predictions")
    mse = float(((t - p) ** 2).mean()) if t.size else 0.0
    return {"mse": mse, "pearson": pearson(t, p), "spearman": spearman(t, p)}


# ---------------------------------------------------------------------------------------------
# Entities (seqeval default mode)
# ---------------------------------------------------------------------------------------------


def _split_tag(tag: str) -> tuple[str, str]:
    """("B", "PER") for "B-PER"; seqeval reads the prefix as the first character and the type as
    what follows the first "-" ("_" when there is none, e.g. "O" or a bare "B")."""
    return tag[:1], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    # An I- or E- tag that does not continue an open chunk starts one (conlleval's rule).
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities of one tag sequence as (type, start, end) with `end` INCLUSIVE, exactly as
    seqeval's `get_entities` in its default mode: an I- (or E-) tag after O, after an entity's
    end or after a different type opens a new entity; a type change closes the open one."""
    chunks = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, chunk in enumerate([*tags, "O"]):
        tag, type_ = _split_tag(chunk)
        if _end_of_chunk(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _start_of_chunk(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def entity_metrics(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision/recall/F1 over sentences (lists of tags): an entity counts when its
    type, start and end all match (seqeval's default mode, micro-averaged as its `f1_score`).
    Also macro F1 over types and a per-type table."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold sentences but {len(y_pred)} predicted")
    gold: set[tuple[int, str, int, int]] = set()
    pred: set[tuple[int, str, int, int]] = set()
    for s, (t, p) in enumerate(zip(y_true, y_pred, strict=True)):
        if len(t) != len(p):
            raise ValueError(f"sentence {s}: {len(t)} gold tags but {len(p)} predicted")
        gold.update((s, *e) for e in get_entities(list(t)))
        pred.update((s, *e) for e in get_entities(list(p)))
    types = sorted({e[1] for e in gold} | {e[1] for e in pred})
    per_type = {}
    for ty in types:
        g = {e for e in gold if e[1] == ty}
        pr = {e for e in pred if e[1] == ty}
        correct = len(g & pr)
        prec, rec = _div(correct, len(pr)), _div(correct, len(g))
        per_type[ty] = {"precision": prec, "recall": rec, "f1": _f1(prec, rec), "support": len(g)}
    correct = len(gold & pred)
    prec, rec = _div(correct, len(pred)), _div(correct, len(gold))
    return {
        "precision": prec,
        "recall": rec,
        "f1": _f1(prec, rec),
        "macro_f1": _div(sum(r["f1"] for r in per_type.values()), len(per_type)),
        "n_gold": len(gold),
        "n_pred": len(pred),
        "n_correct": correct,
        "per_type": per_type,
    }


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


def format_table(rows: Mapping[str, Mapping[str, float]], columns: Sequence[str] | None = None, digits: int = 4) -> str:
    """A plain-text table: one row per key of `rows` (e.g. a per-label report), one column per
    metric; integers print as integers, floats with `digits` decimals."""
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows.values() for k in r))
    header = ["", *columns]
    body = []
    for name, row in rows.items():
        cells = [str(name)]
        for col in columns:
            v = row.get(col, "")
            if isinstance(v, (bool, np.bool_)):
                cells.append(str(v))
            elif isinstance(v, (int, np.integer)):
                cells.append(str(int(v)))
            elif isinstance(v, (float, np.floating)):
                cells.append(f"{float(v):.{digits}f}")
            else:
                cells.append(str(v))
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = []
    for r in [header, *body]:
        lines.append("  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))]))
    return "\n".join(line.rstrip() for line in lines)


def confusion_matrix_png(
    matrix: np.ndarray | Sequence[Sequence[int]],
    labels: Sequence[str],
    path: str | Path,
    title: str = "confusion matrix",
) -> Path | None:
    """Draw a confusion matrix (rows gold, columns predicted) to a PNG with matplotlib's Agg
    backend. Without matplotlib it warns and returns None, so callers need not check."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        warnings.warn(
            "matplotlib is not installed; skipping the confusion matrix plot (pip install bertzoo[plot])", stacklevel=2
        )
        return None
    m = np.asarray(matrix)
    n = len(labels)
    if m.shape != (n, n):
        raise ValueError(f"a {m.shape} matrix does not match {n} labels")
    size = max(4.0, 0.5 * n + 2.0)
    fig = Figure(figsize=(size, size))
    FigureCanvasAgg(fig)  # attaches itself to fig: no global pyplot state
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(m, cmap="Blues", interpolation="nearest")
    ax.set_xticks(range(n), labels=list(labels), rotation=45, ha="right")
    ax.set_yticks(range(n), labels=list(labels))
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(title)
    if n <= 30:  # numbers stop being readable beyond that
        threshold = m.max() / 2 if m.size else 0
        for i in range(n):
            for j in range(n):
                ax.text(j, i, str(m[i, j]), ha="center", va="center", color="white" if m[i, j] > threshold else "black")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
