"""Extractive question answering on SQuAD 1.1 / 2.0 JSON (the BERT paper's span prediction).

Features are `[CLS] question [SEP] context window [SEP]`; a context longer than fits is cut into
windows that overlap by `data.doc_stride` tokens. The model scores every token as a start and an
end (`SpanHead`); post-processing takes the `n_best` starts and ends of each window's context
tokens, keeps spans with start <= end and at most `max_answer_len` tokens, and the best
start + end score over all windows of an example wins. SQuAD 2.0 scores "no answer" at [CLS]:
null = min over windows of start[CLS] + end[CLS]; the answer is "" when null - best span > a
threshold, tuned on the evaluated split as the official v2.0 script does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import Batch, pad_batch
from bertzoo.config import FinetuneConfig
from bertzoo.data.text.hf_datasets import check_columns, is_spec, iter_rows, open_dataset
from bertzoo.errors import ConfigError, DataError
from bertzoo.metrics.squad import squad_evaluate
from bertzoo.models.heads import SpanHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.tasks.base import EvalResult, FeatureDataset, Task, TaskModel, batched_logits

__all__ = ["QAModel", "QATask", "feature_offsets", "postprocess_predictions", "read_squad", "read_squad_dataset"]

log = logging.getLogger(__name__)

# Logit given to padding so it never wins a softmax or an argmax (finite: keeps sums finite in fp32).
PAD_LOGIT = -1e4


def read_squad(path: str | Path) -> tuple[list[dict[str, Any]], bool]:
    """Examples of a SQuAD 1.1 or 2.0 file and whether it is 2.0 (a `version` of v2.x, or any
    `is_impossible` key). Each example: id, title, question, context, answers ([{text,
    answer_start}]; [] when unanswerable) and is_impossible."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"SQuAD file not found: {path}; check the path (see docs/qa.md for the official files)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # also ints over 4300 digits, deep nesting
        reason = exc if isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError)) else type(exc).__name__
        raise DataError(f"{path} is not valid UTF-8 JSON ({reason}); download the SQuAD file again") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(f"{path} has no 'data' list at the top level; is it a SQuAD JSON file?")
    version_2 = str(data.get("version", "")).lstrip("v").startswith("2")
    examples: list[dict[str, Any]] = []
    seen: set[str] = set()
    for a, article in enumerate(data["data"]):
        try:
            title = str(article.get("title", ""))
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                if not isinstance(context, str):
                    raise TypeError("context is not a string")
                for qa in paragraph["qas"]:
                    qid = str(qa["id"])
                    if qid in seen:
                        raise DataError(f"{path}: question id {qid} appears twice; SQuAD ids must be unique")
                    seen.add(qid)
                    version_2 = version_2 or "is_impossible" in qa
                    impossible = bool(qa.get("is_impossible", False))
                    answers = [] if impossible else [_answer(x, qid, path) for x in qa.get("answers", [])]
                    examples.append(
                        {
                            "id": qid,
                            "title": title,
                            "question": str(qa["question"]),
                            "context": context,
                            "answers": answers,
                            "is_impossible": impossible,
                        }
                    )
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(
                f"{path}: article {a} is not in SQuAD format ({type(exc).__name__}: {exc}); expected "
                "data[].paragraphs[].{context, qas[].{id, question, answers[].{text, answer_start}}}"
            ) from None
    if not examples:
        raise DataError(f"{path} holds no questions; check the file")
    return examples, version_2


SQUAD_COLUMNS = ("id", "question", "context", "answers")  # the Hub's squad / squad_v2 layout


def read_squad_dataset(source: str, split: str) -> tuple[list[dict[str, Any]], bool]:
    """`read_squad` for the Hub's layout (`squad`, `squad_v2`: one row per question, `answers` as {text: [...],
    answer_start: [...]}): an `hf-dataset:` spec or a parquet / arrow file, one split of it. It is SQuAD 2.0 when
    a question has no answer."""
    fix = "QA reads the Hub's SQuAD layout: id, question, context, answers {text, answer_start}"
    ds = open_dataset(source, split=split)
    check_columns(ds, SQUAD_COLUMNS, source, fix)
    examples: list[dict[str, Any]] = []
    for row in iter_rows(ds, source):
        missing = [c for c in SQUAD_COLUMNS if c not in row]
        if missing:
            raise DataError(f"{source}: no column {missing[0]!r} (columns: {', '.join(row)}); {fix}")
        qid, answers = str(row["id"]), row["answers"]
        if not isinstance(answers, dict) or not isinstance(answers.get("text"), list):
            raise DataError(f"{source}: question {qid} has answers {str(answers)[:40]}; {fix}")
        starts = answers.get("answer_start") or []
        pairs = [{"text": t, "answer_start": a} for t, a in zip(answers["text"], starts, strict=False)]
        examples.append(
            {
                "id": qid,
                "title": str(row.get("title", "")),
                "question": str(row["question"]),
                "context": str(row["context"]),
                "answers": [_answer(x, qid, Path(source)) for x in pairs],
                "is_impossible": not pairs,
            }
        )
    if not examples:
        raise DataError(f"{source} holds no questions; check the dataset and split")
    if len({e["id"] for e in examples}) < len(examples):
        raise DataError(f"{source}: a question id appears twice; SQuAD ids must be unique")
    return examples, any(e["is_impossible"] for e in examples)


def _answer(answer: Any, qid: str, path: Path) -> dict[str, Any]:
    if not isinstance(answer, dict) or "text" not in answer or "answer_start" not in answer:
        raise DataError(f"{path}: question {qid} has an answer without 'text' and 'answer_start'; fix the file")
    start = answer["answer_start"]
    # A character offset: an int, or what converted files sometimes hold instead ("12", 12.0); never a
    # bool, a fraction or anything else that int() would quietly truncate or turn into a traceback.
    if isinstance(start, str):
        with contextlib.suppress(ValueError):
            start = int(start)
    elif isinstance(start, float) and start.is_integer():
        start = int(start)
    if isinstance(start, bool) or not isinstance(start, int):
        shown = json.dumps(start, ensure_ascii=False, default=str)[:40]
        raise DataError(f"{path}: question {qid} has answer_start {shown}; it must be a character offset (an integer)")
    return {"text": str(answer["text"]), "answer_start": start}


def feature_offsets(feature: dict[str, Any]) -> list[tuple[int, int] | None]:
    """Per token of a feature: (char start, char end) in the example's context, or None for
    question and special tokens."""
    out: list[tuple[int, int] | None] = [None] * len(feature["input_ids"])
    start = int(feature["context_start"])
    for i, (a, b) in enumerate(feature["context_offsets"]):
        out[start + i] = (int(a), int(b))
    return out


def _answer_tokens(example: dict[str, Any], offsets: np.ndarray) -> tuple[int, int] | None:
    """Context token span (inclusive) of the first answer whose text matches the context at
    answer_start and covers at least one token; None when no answer does."""
    context = example["context"]
    for answer in example["answers"]:
        char_start = answer["answer_start"]
        char_end = char_start + len(answer["text"])
        if char_start < 0 or context[char_start:char_end] != answer["text"] or not offsets.size:
            continue
        first = int(np.searchsorted(offsets[:, 1], char_start, side="right"))  # first token ending after start
        last = int(np.searchsorted(offsets[:, 0], char_end, side="left")) - 1  # last token starting before end
        if first <= last:
            return first, last
    return None


class QAModel(TaskModel):
    """Encoder + `SpanHead`; loss = (CE(start) + CE(end)) / 2 over the non-padding tokens."""

    # A span's start is scored before the model has read the span: the GPT paper has no span task either.
    causal_refusal = (
        "extractive QA needs every context token to see the words after it, which a left-to-right (GPT) "
        "model's tokens cannot; fine-tune a bidirectional model (BERT, RoBERTa, ...) or use task: seq2seq"
    )

    def __init__(
        self, encoder: nn.Module, feature_layers: int = 0, feature_mix: str = "weighted", dropout: float = 0.1
    ) -> None:
        super().__init__(encoder, feature_layers, feature_mix)
        self.dropout = nn.Dropout(dropout)
        self.head = SpanHead(self.feature_dim)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        seq, _ = self.encode(batch)
        logits = self.head(self.dropout(seq)).float()  # (batch, seq, 2)
        if batch.attention_mask is not None:
            logits = logits.masked_fill(~batch.attention_mask.bool()[..., None], PAD_LOGIT)
        starts, ends = batch.extra.get("start_positions"), batch.extra.get("end_positions")
        if starts is None or ends is None:
            return ObjectiveOutput(loss=None, logits=logits)
        start_logits, end_logits = logits.unbind(-1)  # (batch, seq) each
        loss = (F.cross_entropy(start_logits, starts) + F.cross_entropy(end_logits, ends)) / 2
        n = torch.tensor(starts.numel(), device=logits.device)
        with torch.no_grad():
            exact = (start_logits.argmax(-1) == starts) & (end_logits.argmax(-1) == ends)
            metrics = {"loss": loss.detach(), "span_acc": exact.float().mean()}
        return ObjectiveOutput(loss=loss, metrics=metrics, counts={"loss": n, "span_acc": n}, logits=logits)


def postprocess_predictions(
    examples: Sequence[dict[str, Any]],
    features: FeatureDataset,
    all_logits: Sequence[np.ndarray],
    *,
    n_best: int = 20,
    max_answer_len: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
) -> list[dict[str, Any]]:
    """One prediction per example from per-feature logits (seq, 2), all windows merged.

    Returns dicts with id, answer, score (best start + end logit; None when no span is possible)
    and best_span (its text). With `version_2` also null_score (min over windows of the [CLS]
    start + end), score_diff (null_score - score), no_answer_prob (sigmoid of score_diff), and the
    answer is "" when score_diff > null_threshold.
    """
    if n_best < 1 or max_answer_len < 1:
        raise ConfigError(f"data.n_best={n_best} and data.max_answer_len={max_answer_len} must both be at least 1")
    by_example: dict[int, list[int]] = defaultdict(list)
    for f, e in enumerate(features.example_ids):
        by_example[int(e)].append(f)
    out = []
    for e, example in enumerate(examples):
        best_score, best_text = -math.inf, ""
        null_score = math.inf
        for f in by_example.get(e, []):
            feature = features.features[f]
            logits = np.asarray(all_logits[f], dtype=np.float64)[: len(feature["input_ids"])]
            start, end = logits[:, 0], logits[:, 1]
            null_score = min(null_score, float(start[0] + end[0]))
            # Candidates come from the context tokens only: a span can never reach into the question,
            # the special tokens or the padding, however high their logits.
            first = int(feature["context_start"])
            offsets = feature["context_offsets"]
            if not len(offsets):
                continue
            ctx_start, ctx_end = start[first : first + len(offsets)], end[first : first + len(offsets)]
            s = np.argsort(-ctx_start, kind="stable")[:n_best]
            t = np.argsort(-ctx_end, kind="stable")[:n_best]
            scores = ctx_start[s][:, None] + ctx_end[t][None, :]  # (n_best, n_best)
            length = t[None, :] - s[:, None] + 1
            scores[(length < 1) | (length > max_answer_len)] = -math.inf
            i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
            if scores[i, j] > best_score:
                best_score = float(scores[i, j])
                a, b = int(s[i]), int(t[j])
                best_text = example["context"][int(offsets[a][0]) : int(offsets[b][1])]
        pred: dict[str, Any] = {
            "id": example["id"],
            "answer": best_text,
            "score": best_score if math.isfinite(best_score) else None,
            "best_span": best_text,
        }
        if version_2:
            null = null_score if math.isfinite(null_score) else 0.0
            diff = null - best_score if math.isfinite(best_score) else math.inf
            pred["null_score"] = null
            pred["score_diff"] = diff if math.isfinite(diff) else None
            pred["no_answer_prob"] = 1.0 if not math.isfinite(diff) else float(1.0 / (1.0 + math.exp(-max(-50, diff))))
            if not math.isfinite(diff) or diff > null_threshold:
                pred["answer"] = ""
        out.append(pred)
    return out


class QATask(Task):
    """Extractive QA on SQuAD-format JSON (`data.train` / `data.dev` / `data.test`)."""

    name = "qa"
    default_metric = "f1"

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        super().__init__(cfg, tokenizer)
        self.version_2: bool = False
        # Null-score threshold used by `predict`; `evaluate` on SQuAD 2.0 replaces it with the tuned one.
        self.null_threshold: float = 0.0
        self.mismatched_answers: dict[str, list[str]] = {}  # split -> ids whose answer text is not at answer_start

    # -- data -----------------------------------------------------------------------------------

    def load(self, split: str) -> list[dict[str, Any]]:
        d = self.cfg.data
        if d.dataset:
            raise DataError(
                f"data.dataset={d.dataset!r}: QA has no built-in dataset; set data.train/data.dev to SQuAD JSON "
                "files or hf-dataset:rajpurkar/squad"
            )
        if d.format not in ("auto", "squad"):
            raise ConfigError(f"data.format={d.format!r} cannot be read by the qa task; use 'squad' (or 'auto')")
        path = {"train": d.train, "dev": d.dev, "test": d.test}.get(split)
        if path is None:
            raise ValueError(f"split must be train, dev or test, got {split!r}")
        if not path:
            raise DataError(
                f"data.{split} is not set; point it at a SQuAD JSON file (dev-v1.1.json) or hf-dataset:rajpurkar/squad"
            )
        if is_spec(path) or Path(path).suffix in (".parquet", ".arrow"):
            examples, version_2 = read_squad_dataset(path, split)
        else:
            examples, version_2 = read_squad(path)
        self.version_2 = self.version_2 or version_2
        return examples

    def _check_lengths(self) -> None:
        d = self.cfg.data
        window = d.max_seq_len - d.max_query_len - 3
        if window < 1:
            raise ConfigError(
                f"data.max_seq_len={d.max_seq_len} leaves no room for context after data.max_query_len="
                f"{d.max_query_len} and 3 special tokens; raise max_seq_len or lower max_query_len"
            )
        if not 0 <= d.doc_stride < window:
            raise ConfigError(
                f"data.doc_stride={d.doc_stride} (the overlap between context windows) must be in [0, {window}) "
                f"with max_seq_len={d.max_seq_len} and max_query_len={d.max_query_len}; e.g. max_seq_len 384, "
                "max_query_len 64, doc_stride 128"
            )

    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        """Windows of every example; labels on examples with answers (or is_impossible): the answer's
        token span when it lies wholly inside the window, else [CLS] (index 0) for start and end."""
        self._check_lengths()
        d = self.cfg.data
        tk = self.tokenizer
        backend = tk.backend
        for i, ex in enumerate(examples):
            if not isinstance(ex.get("question"), str) or not isinstance(ex.get("context"), str):
                raise DataError(f"example {ex.get('id', i)} needs string 'question' and 'context' fields")
        questions = backend.encode_batch([ex["question"] for ex in examples], add_special_tokens=False)
        # Many questions share a paragraph: encode each context once and share its arrays (views).
        contexts = list(dict.fromkeys(ex["context"] for ex in examples))
        encoded = backend.encode_batch(contexts, add_special_tokens=False)
        by_context = {
            c: (np.asarray(e.ids, dtype=np.int32), np.asarray(e.offsets, dtype=np.int32).reshape(-1, 2))
            for c, e in zip(contexts, encoded, strict=True)
        }
        cls = np.array([tk.cls_id], dtype=np.int32)
        sep = np.array([tk.sep_id], dtype=np.int32)
        features: list[dict[str, Any]] = []
        lengths: list[int] = []
        example_ids: list[int] = []
        mismatched: list[str] = []
        for e, (ex, q) in enumerate(zip(examples, questions, strict=True)):
            q_ids = np.asarray(q.ids[: d.max_query_len], dtype=np.int32)
            c_ids, c_offsets = by_context[ex["context"]]
            labelled = bool(ex.get("is_impossible")) or bool(ex.get("answers"))
            span = None
            if labelled and not ex.get("is_impossible"):
                span = _answer_tokens(ex, c_offsets)
                if span is None:
                    mismatched.append(str(ex.get("id", e)))
                    if split == "train":
                        continue  # a wrong label teaches the wrong span; other splits score gold texts
            elif split == "train" and not labelled:
                raise DataError(
                    f"train example {ex.get('id', e)} has no answers and is not marked is_impossible; "
                    "fix the file (unanswerable questions need SQuAD 2.0's is_impossible: true)"
                )
            prefix = len(q_ids) + 2  # [CLS] question [SEP]
            window = d.max_seq_len - len(q_ids) - 3
            step = window - d.doc_stride
            n = len(c_ids)
            ws = 0
            while True:
                we = min(ws + window, n)
                ids = np.concatenate([cls, q_ids, sep, c_ids[ws:we], sep])
                types = np.zeros(len(ids), dtype=np.int8)
                types[prefix:] = 1
                feature: dict[str, Any] = {
                    "input_ids": ids,
                    "token_type_ids": types,
                    "context_start": prefix,
                    "context_offsets": c_offsets[ws:we],
                    "window_start": ws,
                    "example_id": str(ex.get("id", e)),
                }
                if labelled:
                    if span is not None and ws <= span[0] and span[1] < we:
                        feature["start_positions"] = prefix + span[0] - ws
                        feature["end_positions"] = prefix + span[1] - ws
                    else:  # unanswerable, or the answer is not wholly inside this window
                        feature["start_positions"] = feature["end_positions"] = 0
                features.append(feature)
                lengths.append(len(ids))
                example_ids.append(e)
                if we >= n:
                    break
                ws += step
        if mismatched:
            self.mismatched_answers[split] = mismatched
            log.warning(
                "%d %s example(s) have an answer text that does not match the context at answer_start%s (first: %s)",
                len(mismatched),
                split,
                "; skipped" if split == "train" else "",
                ", ".join(mismatched[:5]),
            )
        if split == "train" and not features:
            raise DataError("no usable training examples: every answer mismatches its context; check data.train")
        return FeatureDataset(features, lengths, example_ids)

    def collate(self, features: list[dict[str, Any]]) -> Batch:
        if not features:
            raise DataError("cannot collate an empty list of QA features")
        ids, lengths = pad_batch([f["input_ids"] for f in features], self.tokenizer.pad_id, 8)
        types, _ = pad_batch([f["token_type_ids"] for f in features], 0, 8)
        mask = np.arange(ids.shape[1])[None, :] < lengths[:, None]
        batch = Batch(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask.astype(np.int64)),
            token_type_ids=torch.from_numpy(types),
            example_index=torch.tensor([int(f.get("index", i)) for i, f in enumerate(features)], dtype=torch.long),
        )
        if all("start_positions" in f for f in features):
            batch.extra["start_positions"] = torch.tensor([int(f["start_positions"]) for f in features])
            batch.extra["end_positions"] = torch.tensor([int(f["end_positions"]) for f in features])
        return batch

    # -- model ----------------------------------------------------------------------------------

    def build(self, encoder: nn.Module) -> nn.Module:
        t = self.cfg.technique
        model = QAModel(encoder, t.feature_layers, t.feature_mix, t.head_dropout)
        model.head_config = self.head_config()
        return model

    def head_config(self) -> dict[str, Any]:
        return {**super().head_config(), "version_2": self.version_2, "null_threshold": self.null_threshold}

    def apply_head_config(self, config: dict[str, Any]) -> None:
        """Restore SQuAD 2.0 mode and the tuned threshold from a saved model's `task` config."""
        self.version_2 = bool(config.get("version_2", self.version_2))
        self.null_threshold = float(config.get("null_threshold", self.null_threshold))

    # -- evaluation -----------------------------------------------------------------------------

    def _logits(self, model: nn.Module, features: FeatureDataset) -> list[np.ndarray]:
        train = self.cfg.train
        return batched_logits(model, features, self.collate, train.eval_batch_size or train.batch_size)

    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        """EM/F1 as the official script (threshold 0.0 for SQuAD 2.0), plus best_exact/best_f1 and
        their thresholds tuned on this split; `null_threshold` is the F1-best one."""
        logits = self._logits(model, features)
        version_2 = self.version_2 or any(ex.get("is_impossible") for ex in examples)
        d = self.cfg.data
        preds = postprocess_predictions(
            examples, features, logits, n_best=d.n_best, max_answer_len=d.max_answer_len, version_2=version_2
        )
        if version_2:
            spans = {p["id"]: p["best_span"] for p in preds}
            diffs = {p["id"]: (p["score_diff"] if p["score_diff"] is not None else math.inf) for p in preds}
            scores = squad_evaluate(examples, spans, na_probs=diffs, na_threshold=0.0)
            self.null_threshold = float(scores["best_f1_thresh"])
            scores["null_threshold"] = self.null_threshold
            config = getattr(model, "head_config", None)
            if isinstance(config, dict):  # saved with the model, so predict() after loading uses it
                config["null_threshold"] = self.null_threshold
        else:
            scores = squad_evaluate(examples, {p["id"]: p["answer"] for p in preds})
        metrics = {k: float(v) for k, v in scores.items()}
        loss = _span_loss(features, logits)
        if loss is not None:
            metrics["loss"] = loss
        for p, ex in zip(preds, examples, strict=True):
            p["gold"] = [a["text"] for a in ex["answers"]]
        report = {
            "version_2": version_2,
            "mismatched_answers": {split: len(ids) for split, ids in self.mismatched_answers.items()},
        }
        return EvalResult(metrics=metrics, predictions=preds, report=report)

    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """{id, answer, score} per example (plus no_answer_prob for SQuAD 2.0 models); examples need
        question and context, id defaults to the position."""
        raw = [
            {"id": str(ex.get("id", i)), "question": ex.get("question"), "context": ex.get("context"), "answers": []}
            for i, ex in enumerate(examples)
        ]
        features = self.featurize(raw, "predict")
        logits = self._logits(model, features)
        d = self.cfg.data
        preds = postprocess_predictions(
            raw,
            features,
            logits,
            n_best=d.n_best,
            max_answer_len=d.max_answer_len,
            version_2=self.version_2,
            null_threshold=self.null_threshold,
        )
        keys = ("id", "answer", "score", "no_answer_prob") if self.version_2 else ("id", "answer", "score")
        return [{k: p[k] for k in keys} for p in preds]


def _span_loss(features: FeatureDataset, logits: Sequence[np.ndarray]) -> float | None:
    """Mean (CE(start) + CE(end)) / 2 over labelled features, as in training (None without labels)."""
    total, count = 0.0, 0
    for feature, lg in zip(features.features, logits, strict=True):
        if "start_positions" not in feature:
            return None
        lg = np.asarray(lg, dtype=np.float64)[: len(feature["input_ids"])]
        peak = lg.max(axis=0)
        log_z = np.log(np.exp(lg - peak).sum(axis=0)) + peak  # (2,)
        gold = lg[feature["start_positions"], 0] + lg[feature["end_positions"], 1]
        total += float(log_z.sum() - gold) / 2
        count += 1
    return total / count if count else None
