"""A tiny encoder with a classification head and a topical toy dataset for the fine-tuning technique tests."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertzoo.batch import Batch
from bertzoo.config import ModelConfig
from bertzoo.models.encoder import Encoder
from bertzoo.models.heads import ClassificationHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.tasks.base import FeatureDataset, TaskModel

VOCAB, LAYERS = 40, 3


def tiny_encoder(seed: int = 0, **kw) -> Encoder:
    torch.manual_seed(seed)
    cfg = dict(
        vocab_size=VOCAB,
        hidden_size=16,
        num_layers=LAYERS,
        num_heads=2,
        intermediate_size=32,
        max_position=32,
        dropout=0.0,
        attention_dropout=0.0,
    )
    cfg.update(kw)
    return Encoder(ModelConfig(**cfg))


class TinyClassifier(TaskModel):
    """A minimal task model: [CLS] features (pooler or layer mix) -> linear, cross-entropy loss."""

    def __init__(
        self,
        encoder: Encoder,
        num_labels: int = 3,
        feature_layers: int = 0,
        feature_mix: str = "weighted",
        mean_pool: bool = False,
    ):
        super().__init__(encoder, feature_layers, feature_mix)
        self.mean_pool = mean_pool  # average the token features instead of reading [CLS]
        self.head = ClassificationHead(self.feature_dim, num_labels, dropout=0.0)
        self.head_config = {"task": "tiny", "labels": [str(i) for i in range(num_labels)]}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        seq, cls = self.encode(batch)
        if self.mean_pool:
            m = batch.attention_mask[..., None].to(seq.dtype)
            cls = (seq * m).sum(1) / m.sum(1)
        logits = self.head(cls).float()
        labels = batch.extra.get("label")
        if labels is None:
            return ObjectiveOutput(loss=None, logits=logits)
        loss = F.cross_entropy(logits, labels)
        acc = (logits.argmax(-1) == labels).float().mean()
        return ObjectiveOutput(loss=loss, metrics={"loss": loss.detach(), "acc": acc.detach()}, logits=logits)


def toy_data(n: int = 96, seed: int = 0, topical: bool = False) -> FeatureDataset:
    """Label = which of three marker tokens (5, 6, 7) the sequence holds; lengths 4..12. `topical`:
    every token comes from the label's own range of 10 ids instead (visible even to a random encoder)."""
    rng = np.random.default_rng(seed)
    feats, lengths = [], []
    for _ in range(n):
        length = int(rng.integers(4, 13))
        label = int(rng.integers(0, 3))
        if topical:
            ids = rng.integers(10 + 10 * label, 20 + 10 * label, size=length)
        else:
            ids = rng.integers(10, VOCAB, size=length)
            ids[int(rng.integers(1, length))] = 5 + label
        ids[0] = 2
        feats.append({"input_ids": ids.astype(np.int64), "label": label})
        lengths.append(length)
    return FeatureDataset(feats, lengths, list(range(n)))


def collate(features: list[dict]) -> Batch:
    width = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, f in enumerate(features):
        ids[i, : len(f["input_ids"])] = torch.from_numpy(f["input_ids"])
        mask[i, : len(f["input_ids"])] = 1
    return Batch(input_ids=ids, attention_mask=mask, extra={"label": torch.tensor([f["label"] for f in features])})
