"""Sequence classification: single texts or text pairs, with one label (cross-entropy), several
labels (sigmoid + BCE, threshold 0.5) or a real-valued score (MSE, as STS-B).

Pairs are encoded as [CLS] A [SEP] B [SEP] (segment ids 0 for A, 1 for B) and truncated
longest-first to `data.max_seq_len`. The head reads `TaskModel.encode`'s sentence vector (the
pooler output, or [CLS] of a feature mix).

A left-to-right model (GPT, `config.causal`) is fine-tuned as the GPT paper does it: the same input is
GPT's transformation (start [CLS], delimiter [SEP], the final [SEP] as the extract token), the head
reads the extract token's state (`technique.pooling` auto = last) through a bias-free linear layer
(`h W_y`), an entailment pair is premise [SEP] hypothesis, and a similarity pair (regression, or
`technique.pair_orders=both`) is encoded in both orders with the two extract states added before the head.
Training adds `technique.lm_weight` x the next-token LM loss over the inputs (TaskModel).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import Batch
from bertzoo.config import FinetuneConfig, TechniqueConfig
from bertzoo.errors import ConfigError, DataError
from bertzoo.metrics.classification import (
    accuracy,
    confusion_matrix,
    format_table,
    multilabel_metrics,
    precision_recall_f1,
    regression_metrics,
)
from bertzoo.models.heads import ClassificationHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.tasks.base import EvalResult, FeatureDataset, Task, TaskModel, batched_logits
from bertzoo.tasks.common import (
    attention_from_lengths,
    builtin_spec,
    encode_pair_orders,
    encode_pairs,
    eval_batch_size,
    example_index,
    labels_present,
    load_split,
    log_softmax,
    pad_2d,
    sigmoid,
    softmax,
)

__all__ = ["ClassificationModel", "ClassificationTask"]

LABEL_TYPES = {"single_label": "single", "multi_label": "multi", "regression": "float"}
DEFAULT_METRICS = {"single_label": "accuracy", "multi_label": "micro_f1", "regression": "pearson"}
THRESHOLD = 0.5  # multi-label: a label is predicted when its sigmoid probability exceeds this


class ClassificationModel(TaskModel):
    """Encoder + `ClassificationHead` on the sentence vector; the loss depends on `problem`.

    input_ids of (batch, orders, seq) are a pair in both orders: their sentence vectors are added."""

    reads_sequence = False  # the head reads the sentence vector only (cls pooling: top layer skips other tokens)

    def __init__(self, encoder: nn.Module, num_labels: int, problem: str, technique: TechniqueConfig) -> None:
        super().__init__(
            encoder, technique.feature_layers, technique.feature_mix, technique.pooling, technique.lm_weight
        )
        self.problem = problem
        self.num_labels = num_labels
        self.head = ClassificationHead(
            self.feature_dim,
            1 if problem == "regression" else num_labels,
            technique.head_dropout,
            bias=not self.causal,  # GPT's h W_y, as transformers' GPT2ForSequenceClassification (exportable)
        )

    def forward(self, batch: Batch) -> ObjectiveOutput:
        features = self.features(batch)
        sentence = features.sentence
        if batch.input_ids.dim() == 3:  # (batch, orders, seq): GPT's similarity adds the orders' states
            sentence = sentence.view(*batch.input_ids.shape[:2], -1).sum(1)
        logits = self.head(sentence)  # (batch, num_labels) or (batch, 1)
        if self.problem == "regression":
            logits = logits.squeeze(-1)  # (batch,)
        labels = batch.labels
        if labels is None:
            return ObjectiveOutput(loss=None, logits=logits)
        n = torch.tensor(labels.size(0), device=logits.device)
        scores = logits.float()  # losses in fp32 under autocast
        if self.problem == "regression":
            loss = F.mse_loss(scores, labels.float())
            metrics: dict[str, torch.Tensor] = {}
        elif self.problem == "multi_label":
            loss = F.binary_cross_entropy_with_logits(scores, labels.float())
            exact = ((scores > 0) == (labels > 0.5)).all(-1).float().mean()
            metrics = {"exact_match": exact.detach()}
        else:
            loss = F.cross_entropy(scores, labels)
            metrics = {"acc": (scores.argmax(-1) == labels).float().mean().detach()}
        counts = {k: n for k in metrics}
        loss = self.with_lm(loss, metrics, counts, features.lm)
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.ones((), device=logits.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, logits=logits)


class ClassificationTask(Task):
    """Text (pair) classification and regression; see the module doc.

    Labels are fixed, in this order of preference, by `data.labels`, a built-in dataset's label
    set, or the sorted labels of the train split; a dev/test label outside them is a DataError.
    """

    name = "classification"

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        super().__init__(cfg, tokenizer)
        self.problem = cfg.problem
        if self.problem not in LABEL_TYPES:
            raise ConfigError(f"problem={self.problem!r} is not allowed; choose one of: {', '.join(LABEL_TYPES)}")
        self.default_metric = DEFAULT_METRICS[self.problem]
        spec = builtin_spec(cfg)
        if spec is not None and self.problem != "single_label":
            raise ConfigError(f"{cfg.data.dataset} is a single-label dataset; set problem: single_label")
        self._labels: list[str] | None = None
        self.both_orders: bool | None = None  # fixed by build() (auto needs to know whether the model is causal)
        self._pairs: bool | None = None  # whether the train split holds text pairs (set by load)
        if self.problem != "regression":
            if cfg.data.labels:
                self._labels = [str(x) for x in cfg.data.labels]
                if len(set(self._labels)) != len(self._labels):
                    raise ConfigError("data.labels lists a label twice; give each label once")
            elif spec is not None:
                self._labels = spec.labels()

    # -- labels ---------------------------------------------------------------------------------

    def label_names(self) -> list[str]:
        if self.problem == "regression":
            return []
        self._ensure_labels()
        return list(self._labels or [])

    def head_config(self) -> dict[str, Any]:
        t = self.cfg.technique
        return {
            **super().head_config(),
            "problem": self.problem,
            "feature_layers": t.feature_layers,
            "feature_mix": t.feature_mix,
            "pooling": t.pooling,
        }

    def _resolve_orders(self, causal: bool) -> bool:
        """Whether pairs are encoded in both orders: `technique.pair_orders`, auto = both for similarity
        scores (regression) of text pairs on a causal model, the GPT paper's similarity input."""
        orders = self.cfg.technique.pair_orders
        if orders == "auto":
            return causal and self.problem == "regression" and self._pairs is not False
        return orders == "both"

    def _ensure_labels(self) -> None:
        if self._labels is None and self.problem != "regression":
            self.load("train")

    def _fix_labels(self, examples: list[dict[str, Any]]) -> None:
        seen: set[str] = set()
        for ex in examples:
            if "label" in ex:
                seen.update(ex["label"] if self.problem == "multi_label" else [ex["label"]])
        if not seen:
            raise DataError(
                f"the train split has no labels (column {self.cfg.data.label_column!r}); set data.label_column"
            )
        self._labels = sorted(seen)

    def _check_labels(self, examples: list[dict[str, Any]], split: str) -> None:
        if not labels_present(examples, "label", "label"):
            where = examples[0].get("source", split) if examples else split
            raise DataError(
                f"{where}: the {split} split has no labels (column {self.cfg.data.label_column!r}); "
                "set data.label_column (for unlabelled data use `bertzoo predict`)"
            )
        if self.problem == "regression":
            return
        known = set(self._labels or [])
        for ex in examples:
            if "label" not in ex:
                continue
            for label in ex["label"] if self.problem == "multi_label" else [ex["label"]]:
                if label not in known:
                    raise DataError(
                        f"{ex.get('source', split)}: label {label!r} is not among the {len(known)} known labels "
                        f"({', '.join(sorted(known)[:10])}{', ...' if len(known) > 10 else ''}); fix the data "
                        "or list every label in data.labels"
                    )

    # -- data -----------------------------------------------------------------------------------

    def load(self, split: str) -> list[dict[str, Any]]:
        examples = load_split(self.cfg, split, "text", LABEL_TYPES[self.problem])  # type: ignore[arg-type]
        if split == "train" and examples:
            self._pairs = "text_pair" in examples[0] or bool(self.cfg.data.text_pair_column)
        if split == "train" and self._labels is None and self.problem != "regression":
            self._fix_labels(examples)
        elif self._labels is None:
            self._ensure_labels()
        self._check_labels(examples, split)
        return examples

    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        if not examples:
            raise DataError(f"the {split} split is empty; check the data")
        pair = "text_pair" in examples[0] or bool(self.cfg.data.text_pair_column)
        if pair and not all("text_pair" in e for e in examples):
            missing = next(e for e in examples if "text_pair" not in e)
            raise DataError(f"{missing.get('source', split)}: no text_pair while the task uses text pairs")
        both = self.both_orders if self.both_orders is not None else self.cfg.technique.pair_orders == "both"
        if both and not pair and self.cfg.technique.pair_orders == "both":
            raise ConfigError(
                "technique.pair_orders=both needs text pairs (data.text_pair_column); single texts have one order"
            )
        texts = [e["text"] for e in examples]
        swapped: list[tuple[np.ndarray, np.ndarray]] | None = None
        if both and pair:
            orders = encode_pair_orders(
                self.tokenizer, texts, [e["text_pair"] for e in examples], self.cfg.data.max_seq_len
            )
            encoded, swapped = [o[0] for o in orders], [o[1] for o in orders]
        else:
            encoded = encode_pairs(
                self.tokenizer, texts, [e["text_pair"] for e in examples] if pair else None, self.cfg.data.max_seq_len
            )
        labelled = labels_present(examples, "label", "label")
        if labelled and self.problem != "regression":
            self._ensure_labels()
        index = {label: i for i, label in enumerate(self._labels or [])}
        features = []
        for i, (ex, (ids, types)) in enumerate(zip(examples, encoded, strict=True)):
            f: dict[str, Any] = {"input_ids": ids, "token_type_ids": types}
            if swapped is not None:
                f["swapped_input_ids"], f["swapped_token_type_ids"] = swapped[i]
            if labelled:
                f["label"] = self._encode_label(ex, index, split)
            features.append(f)
        return FeatureDataset(features, [len(ids) for ids, _ in encoded], range(len(examples)))

    def _encode_label(self, ex: dict[str, Any], index: dict[str, int], split: str) -> Any:
        label = ex["label"]
        if self.problem == "regression":
            return np.float32(label)
        try:
            if self.problem == "multi_label":
                vec = np.zeros(len(index), dtype=np.float32)
                vec[[index[x] for x in label]] = 1.0
                return vec
            return np.int64(index[label])
        except KeyError as exc:
            raise DataError(
                f"{ex.get('source', split)}: label {exc.args[0]!r} is not a known label; fix the data or data.labels"
            ) from None

    def collate(self, features: list[dict[str, Any]]) -> Batch:
        """(batch, seq) tensors, or (batch, 2, seq) for pairs in both orders (padded to one width)."""
        orders = 2 if "swapped_input_ids" in features[0] else 1
        prefixes = ("", "swapped_")[:orders]
        ids, lengths = pad_2d([f[f"{p}input_ids"] for p in prefixes for f in features], self.tokenizer.pad_id)
        types, _ = pad_2d([f[f"{p}token_type_ids"] for p in prefixes for f in features], 0)
        mask = attention_from_lengths(lengths, ids.size(1))
        if orders == 2:  # rows are all first orders, then all second orders -> (batch, orders, seq)
            ids, types, mask = (
                t.view(orders, len(features), -1).transpose(0, 1).contiguous() for t in (ids, types, mask)
            )
        labels = None
        if "label" in features[0]:
            stacked = np.stack([f["label"] for f in features])
            labels = torch.from_numpy(stacked.astype(np.int64 if self.problem == "single_label" else np.float32))
        return Batch(
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=types,
            labels=labels,
            example_index=example_index(features),
        )

    # -- model ----------------------------------------------------------------------------------

    def build(self, encoder: nn.Module) -> ClassificationModel:
        n = 1 if self.problem == "regression" else len(self.label_names())
        model = ClassificationModel(encoder, n, self.problem, self.cfg.technique)
        self.both_orders = self._resolve_orders(model.causal)
        # The resolved choices, so a saved model (and its export) says what it computes.
        model.head_config = {
            **self.head_config(),
            "pooling": model.pooling,
            "pair_orders": "both" if self.both_orders else "one",
        }
        if model.causal:  # the extract token is the last non-pad id: Hugging Face's GPT classifiers need the id
            model.head_config["pad_token_id"] = int(self.tokenizer.pad_id)
        return model

    # -- evaluation and prediction ----------------------------------------------------------------

    def _logits(self, model: nn.Module, features: FeatureDataset) -> np.ndarray:
        return np.stack(batched_logits(model, features, self.collate, eval_batch_size(self.cfg))).astype(np.float64)

    def _prediction(self, row: np.ndarray) -> dict[str, Any]:
        labels = self._labels or []
        if self.problem == "regression":
            return {"score": float(row)}
        if self.problem == "multi_label":
            probs = sigmoid(row)
            return {
                "labels": [label for label, p in zip(labels, probs, strict=True) if p > THRESHOLD],
                "probabilities": {label: float(p) for label, p in zip(labels, probs, strict=True)},
            }
        probs = softmax(row)
        return {
            "label": labels[int(row.argmax())],
            "probabilities": {label: float(p) for label, p in zip(labels, probs, strict=True)},
        }

    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        if not labels_present(examples, "label", "label"):
            raise DataError("evaluation needs labelled examples; use predict for unlabelled data")
        logits = self._logits(model, features)
        predictions = [{**self._prediction(row), "gold": ex["label"]} for row, ex in zip(logits, examples, strict=True)]
        labels = self._labels or []
        report: dict[str, Any] = {}
        if self.problem == "regression":
            gold = np.array([float(e["label"]) for e in examples])
            metrics = regression_metrics(gold, logits)
            metrics["loss"] = metrics["mse"]
        elif self.problem == "multi_label":
            gold_sets = [e["label"] for e in examples]
            pred_sets = [p["labels"] for p in predictions]
            m = multilabel_metrics(gold_sets, pred_sets, labels)
            targets = np.stack([f["label"] for f in features.features]).astype(np.float64)
            # BCE with logits, the stable form: max(x, 0) - x*y + log(1 + exp(-|x|))
            bce = np.maximum(logits, 0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))
            metrics = {k: m[k] for k in ("micro_f1", "macro_f1", "micro_precision", "micro_recall", "exact_match")}
            metrics["loss"] = float(bce.mean())
            report = {"labels": labels, "per_label": m["per_label"], "table": format_table(m["per_label"])}
        else:
            gold = [e["label"] for e in examples]
            pred = [p["label"] for p in predictions]
            m = precision_recall_f1(gold, pred, labels)
            targets = np.array([f["label"] for f in features.features])
            nll = -log_softmax(logits)[np.arange(len(targets)), targets]
            metrics = {
                "accuracy": accuracy(gold, pred),
                "macro_f1": m["macro_f1"],
                "micro_f1": m["micro_f1"],
                "weighted_f1": m["weighted_f1"],
                "loss": float(nll.mean()),
            }
            report = {
                "labels": labels,
                "per_label": m["per_label"],
                "table": format_table(m["per_label"]),
                "confusion_matrix": confusion_matrix(gold, pred, labels).tolist(),
            }
        return EvalResult(metrics={k: float(v) for k, v in metrics.items()}, predictions=predictions, report=report)

    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        unlabelled = [{k: v for k, v in e.items() if k != "label"} for e in examples]
        if not unlabelled:
            return []
        for e in unlabelled:
            where = e.get("source", "an example")
            if not isinstance(e.get("text"), str):
                raise DataError(f"{where}: prediction input needs a 'text' string")
            if "text_pair" in e and not isinstance(e["text_pair"], str):  # the tokenizer would raise TypeError
                kind = type(e["text_pair"]).__name__
                raise DataError(f"{where}: 'text_pair' is {kind}; give the second text as a string")
        self._ensure_labels()
        logits = self._logits(model, self.featurize(unlabelled, "predict"))
        return [self._prediction(row) for row in logits]
