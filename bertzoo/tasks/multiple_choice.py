"""Multiple choice (SWAG): each (context, ending) pair is encoded as [CLS] context [SEP] ending
[SEP]; a `ClassificationHead(dim, 1)` scores every pair from its sentence vector, and a softmax
over an example's choices (cross-entropy against the gold ending) trains it, as in the BERT paper.

Examples may have different numbers of endings: a batch pads to its largest choice count, and
the padded choices get the lowest score so they never win or take probability.

A left-to-right model (GPT) reads each choice's extract token (the final [SEP]: `technique.pooling`
auto = last) with a bias-free score `h W_y`, and training adds `technique.lm_weight` x the next-token
LM loss over the real choices' tokens, as the GPT paper fine-tunes multiple choice.
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
from bertzoo.metrics.classification import accuracy
from bertzoo.models.heads import ClassificationHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.tasks.base import EvalResult, FeatureDataset, Task, TaskModel, batched_logits
from bertzoo.tasks.common import (
    PAD_MULTIPLE,
    encode_pairs,
    eval_batch_size,
    example_index,
    labels_present,
    load_split,
    log_softmax,
    softmax,
)

__all__ = ["MultipleChoiceModel", "MultipleChoiceTask"]


class MultipleChoiceModel(TaskModel):
    """Encoder + one score per (context, ending) pair; input_ids are (batch, choices, seq)."""

    reads_sequence = False  # the head reads the sentence vector only (cls pooling: top layer skips other tokens)

    def __init__(self, encoder: nn.Module, technique: TechniqueConfig) -> None:
        super().__init__(
            encoder, technique.feature_layers, technique.feature_mix, technique.pooling, technique.lm_weight
        )
        # A bias adds the same to every choice (the softmax ignores it); GPT's score is h W_y.
        self.head = ClassificationHead(self.feature_dim, 1, technique.head_dropout, bias=not self.causal)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        n_examples, n_choices = batch.input_ids.shape[:2]
        choice_mask = batch.extra.get("choice_mask")
        features = self.features(batch, rows=choice_mask)  # padded choices stay out of the LM loss
        logits = self.head(features.sentence).view(n_examples, n_choices)  # sentence: (batch * choices, dim)
        if choice_mask is not None:
            logits = logits.masked_fill(~choice_mask.bool(), torch.finfo(logits.dtype).min)
        labels = batch.labels
        if labels is None:
            return ObjectiveOutput(loss=None, logits=logits)
        scores = logits.float()
        loss = F.cross_entropy(scores, labels)
        acc = (scores.argmax(-1) == labels).float().mean()
        metrics = {"acc": acc.detach()}
        counts = {"acc": torch.tensor(n_examples, device=logits.device)}
        loss = self.with_lm(loss, metrics, counts, features.lm)
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.ones((), device=logits.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, logits=logits)


class MultipleChoiceTask(Task):
    """SWAG-style multiple choice; labels are ending indices, so there is no label vocabulary."""

    name = "multiple_choice"
    default_metric = "accuracy"

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        super().__init__(cfg, tokenizer)
        if cfg.data.dataset:
            raise ConfigError(
                f"data.dataset={cfg.data.dataset!r}: there is no built-in multiple-choice dataset; "
                "set data.train/dev/test to SWAG CSV or JSONL files"
            )

    def head_config(self) -> dict[str, Any]:
        t = self.cfg.technique
        return {**super().head_config(), "feature_layers": t.feature_layers, "feature_mix": t.feature_mix}

    def load(self, split: str) -> list[dict[str, Any]]:
        examples = load_split(self.cfg, split, "choices")
        if not labels_present(examples, "label", "label"):
            raise DataError(
                f"{examples[0].get('source', split)}: the {split} split has no labels; give a label column "
                "(for unlabelled data use `bertzoo predict`)"
            )
        return examples

    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        if not examples:
            raise DataError(f"the {split} split is empty; check the data")
        contexts = [ex["context"] for ex in examples for _ in ex["endings"]]
        endings = [e for ex in examples for e in ex["endings"]]
        encoded = encode_pairs(self.tokenizer, contexts, endings, self.cfg.data.max_seq_len)
        labelled = labels_present(examples, "label", "label")
        features, lengths = [], []
        pos = 0
        for ex in examples:
            pairs = encoded[pos : pos + len(ex["endings"])]
            pos += len(ex["endings"])
            f: dict[str, Any] = {"input_ids": [ids for ids, _ in pairs], "token_type_ids": [t for _, t in pairs]}
            if labelled:
                f["label"] = np.int64(ex["label"])
            features.append(f)
            lengths.append(max(len(ids) for ids, _ in pairs))
        return FeatureDataset(features, lengths, range(len(examples)))

    def collate(self, features: list[dict[str, Any]]) -> Batch:
        n_choices = max(len(f["input_ids"]) for f in features)
        longest = max(len(ids) for f in features for ids in f["input_ids"])
        width = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
        ids = np.full((len(features), n_choices, width), self.tokenizer.pad_id, dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        choice_mask = np.zeros((len(features), n_choices), dtype=bool)
        for b, f in enumerate(features):
            for c in range(n_choices):
                if c < len(f["input_ids"]):
                    seq = f["input_ids"][c]
                    ids[b, c, : len(seq)] = seq
                    types[b, c, : len(seq)] = f["token_type_ids"][c]
                    mask[b, c, : len(seq)] = 1
                    choice_mask[b, c] = True
                else:
                    # A padded choice is a real (empty) input: an all-masked row would make attention NaN.
                    ids[b, c, :2] = (self.tokenizer.cls_id, self.tokenizer.sep_id)
                    mask[b, c, :2] = 1
        labels = None
        if "label" in features[0]:
            labels = torch.tensor([int(f["label"]) for f in features], dtype=torch.int64)
        return Batch(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            token_type_ids=torch.from_numpy(types),
            labels=labels,
            example_index=example_index(features),
            extra={"choice_mask": torch.from_numpy(choice_mask)},
        )

    def build(self, encoder: nn.Module) -> MultipleChoiceModel:
        model = MultipleChoiceModel(encoder, self.cfg.technique)
        model.head_config = self.head_config()
        return model

    def _scores(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> list[np.ndarray]:
        logits = batched_logits(model, features, self.collate, eval_batch_size(self.cfg))
        # Trim the padded choices of each example's batch.
        return [
            np.asarray(row, dtype=np.float64)[: len(ex["endings"])] for row, ex in zip(logits, examples, strict=True)
        ]

    @staticmethod
    def _prediction(ex: dict[str, Any], row: np.ndarray) -> dict[str, Any]:
        choice = int(row.argmax())
        return {"label": choice, "ending": ex["endings"][choice], "probabilities": [float(p) for p in softmax(row)]}

    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        if not labels_present(examples, "label", "label"):
            raise DataError("evaluation needs labelled examples; use predict for unlabelled data")
        scores = self._scores(model, examples, features)
        predictions = [
            {**self._prediction(ex, row), "gold": ex["label"]} for ex, row in zip(examples, scores, strict=True)
        ]
        gold = [ex["label"] for ex in examples]
        nll = [-log_softmax(row)[g] for row, g in zip(scores, gold, strict=True)]
        metrics = {"accuracy": accuracy(gold, [p["label"] for p in predictions]), "loss": float(np.mean(nll))}
        return EvalResult(metrics=metrics, predictions=predictions, report={"n_examples": len(examples)})

    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        inputs = []
        for ex in examples:
            if not isinstance(ex.get("context"), str) or not isinstance(ex.get("endings"), list) or not ex["endings"]:
                raise DataError(f"{ex.get('source', 'an example')}: prediction input needs 'context' and 'endings'")
            inputs.append({"context": ex["context"], "endings": [str(e) for e in ex["endings"]]})
        if not inputs:
            return []
        features = self.featurize(inputs, "predict")
        return [
            self._prediction(ex, row) for ex, row in zip(inputs, self._scores(model, inputs, features), strict=True)
        ]
