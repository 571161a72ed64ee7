"""Sentence embeddings (task: embedding): a bi-encoder fine-tuned contrastively, as sentence-transformers does.

Each text is encoded alone ([CLS] text [SEP]) and pooled into one vector: the mean over real tokens (auto on a
bidirectional encoder), the [CLS] state, or the last token (auto on a left-to-right one). Training data is one
of three layouts (`bertzoo.data.tasks.pairs`):

* pairs or triplets: multiple-negatives ranking (`embedding.loss: mnrl`): each query picks its positive among
  every document of the batch, hard negatives included;
* scored pairs: CoSENT (`embedding.loss: cosent`): the cosines are ordered as the gold scores.

Evaluation follows the split's layout. Retrieval: every distinct query searches all the split's documents
(positives and negatives), and recall@1/5/10, MRR@10 and nDCG@10 are reported (`ndcg_at_10` picks the best
model); a query's relevant documents are all the positives given with it. Scored pairs: Pearson and Spearman
of cosine against score (`spearman` picks).

Queries are truncated to `data.max_query_len` tokens, documents and scored texts to `data.max_seq_len`. The
saved model records its pooling and normalisation, which `bertzoo embed`, `serve` and the sentence-transformers
export read back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import Batch
from bertzoo.config import EmbeddingConfig, FinetuneConfig, TechniqueConfig
from bertzoo.data.tasks.pairs import check_layout
from bertzoo.errors import ConfigError, DataError
from bertzoo.metrics.classification import pearson, spearman
from bertzoo.metrics.retrieval import rank_documents, retrieval_metrics
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.contrastive import cosent_loss, multiple_negatives_ranking_loss
from bertzoo.tasks.base import EvalResult, FeatureDataset, Task, TaskModel, batched_logits, pool_states
from bertzoo.tasks.common import PAD_MULTIPLE, attention_from_lengths, eval_batch_size, example_index, load_split

__all__ = ["EmbeddingModel", "EmbeddingTask", "embedding_pooling", "retrieval_corpus"]

SIDES = ("query", "positive", "negative")
RETRIEVAL_METRIC, STS_METRIC = "ndcg_at_10", "spearman"


def embedding_pooling(pooling: str, encoder: nn.Module) -> str:
    """`technique.pooling` for a sentence vector: auto is the mean over real tokens (sentence-transformers'
    default) on a bidirectional encoder, the last token on a left-to-right one (only it has seen the text)."""
    if pooling == "auto":
        return "last" if getattr(encoder.config, "causal", False) else "mean"
    if pooling == "cls" and getattr(encoder.config, "causal", False):
        raise ConfigError("technique.pooling=cls on a left-to-right model reads a token that has seen only itself")
    return pooling


def retrieval_corpus(examples: list[dict[str, Any]]) -> tuple[list[str], list[str], list[set[int]]]:
    """(distinct queries, distinct documents: every positive and negative, relevant document indices per query):
    a query's relevant documents are all the positives given with it."""
    queries = list(dict.fromkeys(ex["query"] for ex in examples))
    documents = list(dict.fromkeys(d for ex in examples for d in (ex["positive"], ex.get("negative")) if d))
    doc_index = {d: i for i, d in enumerate(documents)}
    relevant: dict[str, set[int]] = {q: set() for q in queries}
    for ex in examples:
        relevant[ex["query"]].add(doc_index[ex["positive"]])
    return queries, documents, [relevant[q] for q in queries]


class EmbeddingModel(TaskModel):
    """An encoder that pools each text into one vector; no head, so every trained weight is the encoder's."""

    def __init__(self, encoder: nn.Module, technique: TechniqueConfig, embedding: EmbeddingConfig, loss: str) -> None:
        pooling = embedding_pooling(technique.pooling, encoder)
        super().__init__(encoder, 0, "weighted", pooling, 0.0)
        self.normalize = embedding.normalize
        self.scale = float(embedding.scale)
        self.symmetric = embedding.symmetric
        self.gather = embedding.gather
        self.loss = loss
        pooler = getattr(encoder, "pooler", None)
        if pooler is not None:  # never read: frozen, so no process waits for its gradients (DDP)
            pooler.requires_grad_(False)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(batch, hidden) sentence vectors of (batch, seq) token ids."""
        extra = {"pool": False} if self.poolable else {}  # the sentence vector never reads a pooler
        seq = self.encoder(ids, mask, **extra).last_hidden_state  # (batch, seq, hidden)
        vectors = pool_states(seq, mask, self.pooling)
        return F.normalize(vectors, dim=-1) if self.normalize else vectors

    def forward(self, batch: Batch) -> ObjectiveOutput:
        queries = self.embed(batch.input_ids, batch.attention_mask)
        if "positive_ids" not in batch.extra:  # texts alone: their vectors are the output
            return ObjectiveOutput(loss=None, logits=queries)
        positives = self.embed(batch.extra["positive_ids"], batch.extra["positive_mask"])
        one = torch.ones((), device=queries.device)
        if self.loss == "cosent":
            if batch.labels is None:
                raise DataError("embedding.loss=cosent needs a score on every pair")
            loss = cosent_loss(queries, positives, batch.labels.float(), scale=self.scale)
            return ObjectiveOutput(loss=loss, metrics={"loss": loss.detach()}, counts={"loss": one}, logits=queries)
        negatives = None
        if "negative_ids" in batch.extra:
            negatives = self.embed(batch.extra["negative_ids"], batch.extra["negative_mask"])
        loss, accuracy = multiple_negatives_ranking_loss(
            queries,
            positives,
            negatives,
            scale=self.scale,
            symmetric=self.symmetric,
            gather=self.gather and self.training,
        )
        n = torch.tensor(queries.size(0), device=queries.device)
        metrics = {"loss": loss.detach(), "acc": accuracy}
        return ObjectiveOutput(loss=loss, metrics=metrics, counts={"loss": one, "acc": n}, logits=queries)


class EmbeddingTask(Task):
    """Contrastive fine-tuning of sentence vectors; see the module doc."""

    name = "embedding"
    default_metric = RETRIEVAL_METRIC

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        super().__init__(cfg, tokenizer)
        e = cfg.embedding
        if e.scale <= 0:
            raise ConfigError(f"embedding.scale must be > 0 (it is 1 / temperature), got {e.scale}")
        self.loss = "" if e.loss == "auto" else e.loss  # auto: fixed by the training split's layout

    def head_config(self) -> dict[str, Any]:
        e = self.cfg.embedding
        return {**super().head_config(), "normalize": e.normalize, "scale": e.scale, "loss": self.loss or e.loss}

    def apply_head_config(self, head: dict[str, Any]) -> None:
        """A saved model's settings (bertzoo.loading): its loss and normalisation, as it was trained."""
        self.loss = str(head.get("loss", self.loss) or "mnrl")
        if "normalize" in head:
            self.cfg.embedding.normalize = bool(head["normalize"])

    def load(self, split: str) -> list[dict[str, Any]]:
        examples = load_split(self.cfg, split, "pairs")
        if not examples:
            return examples
        layout = check_layout(examples)
        if split in ("train", "dev"):  # dev, read after train, decides what picks the best model
            self.default_metric = STS_METRIC if layout == "scored" else RETRIEVAL_METRIC
        if split == "train":
            wanted = "cosent" if layout == "scored" else "mnrl"
            if self.loss and self.loss != wanted:
                fix = "scored pairs train with cosent" if layout == "scored" else "pairs and triplets train with mnrl"
                raise ConfigError(f"embedding.loss={self.loss} does not fit {layout} data; {fix} (or use auto)")
            self.loss = wanted
        return examples

    def _encode(self, texts: list[str], max_len: int) -> list[np.ndarray]:
        t = self.tokenizer
        if max_len < 3:
            raise ConfigError(f"data.max_seq_len / data.max_query_len must be >= 3, got {max_len}")
        body = t.encode_batch(list(texts))
        return [np.asarray([t.cls_id, *ids[: max_len - 2], t.sep_id], dtype=np.int32) for ids in body]

    def _query_len(self, scored: bool) -> int:
        # A scored pair's texts are alike (both sentences); a query is short beside its document.
        return self.cfg.data.max_seq_len if scored else self.cfg.data.max_query_len

    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        if not examples:
            raise DataError(f"the {split} split is empty; check the data")
        scored = "score" in examples[0]
        encoded = {"query": self._encode([ex["query"] for ex in examples], self._query_len(scored))}
        for side in ("positive", "negative"):
            if side in examples[0]:
                encoded[side] = self._encode([ex[side] for ex in examples], self.cfg.data.max_seq_len)
        features = []
        for i, ex in enumerate(examples):
            f: dict[str, Any] = {side: ids[i] for side, ids in encoded.items()}
            if scored:
                f["score"] = np.float32(ex["score"])
            features.append(f)
        lengths = [max(len(f[side]) for side in encoded) for f in features]
        return FeatureDataset(features, lengths, range(len(examples)))

    def _pad(self, rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = np.asarray([len(r) for r in rows])
        width = -(-int(lengths.max()) // PAD_MULTIPLE) * PAD_MULTIPLE
        ids = np.full((len(rows), width), self.tokenizer.pad_id, dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
        return torch.from_numpy(ids), attention_from_lengths(lengths, width)

    def collate(self, features: list[dict[str, Any]]) -> Batch:
        ids, mask = self._pad([f["query"] for f in features])
        extra = {}
        for side in ("positive", "negative"):
            if side in features[0]:
                extra[f"{side}_ids"], extra[f"{side}_mask"] = self._pad([f[side] for f in features])
        labels = torch.tensor([float(f["score"]) for f in features]) if "score" in features[0] else None
        return Batch(
            input_ids=ids, attention_mask=mask, labels=labels, example_index=example_index(features), extra=extra
        )

    def build(self, encoder: nn.Module) -> EmbeddingModel:
        model = EmbeddingModel(encoder, self.cfg.technique, self.cfg.embedding, self.loss or "mnrl")
        model.head_config = {**self.head_config(), "pooling": model.pooling}
        return model

    def vectors(self, model: nn.Module, texts: list[str], max_len: int) -> np.ndarray:
        """(texts, hidden) float32 vectors, computed in length-sorted batches."""
        features = [{"query": ids} for ids in self._encode(texts, max_len)]
        dataset = FeatureDataset(features, [len(f["query"]) for f in features], range(len(features)))
        rows = batched_logits(model, dataset, self.collate, eval_batch_size(self.cfg))
        return np.stack(rows).astype(np.float32)

    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        layout = check_layout(examples)
        if layout == "scored":
            a = _unit(self.vectors(model, [ex["query"] for ex in examples], self._query_len(True)))
            b = _unit(self.vectors(model, [ex["positive"] for ex in examples], self.cfg.data.max_seq_len))
            cosine = (a * b).sum(-1)
            gold = np.asarray([ex["score"] for ex in examples], dtype=np.float64)
            metrics = {"pearson": pearson(gold, cosine), "spearman": spearman(gold, cosine)}
            predictions = [{"cosine": float(c), "gold": float(g)} for c, g in zip(cosine, gold, strict=True)]
            return EvalResult(metrics=metrics, predictions=predictions, report={"n_pairs": len(examples)})
        queries, documents, relevant = retrieval_corpus(examples)
        q = _unit(self.vectors(model, queries, self._query_len(False)))
        d = _unit(self.vectors(model, documents, self.cfg.data.max_seq_len))
        scores = q @ d.T  # (queries, documents) cosines
        metrics = retrieval_metrics(scores, relevant)
        top = rank_documents(scores, 10)
        predictions = [
            {"query": x, "top10": [int(j) for j in row], "relevant": sorted(r)}
            for x, row, r in zip(queries, top, relevant, strict=True)
        ]
        report = {"n_queries": len(queries), "n_documents": len(documents)}
        return EvalResult(metrics=metrics, predictions=predictions, report=report)

    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        texts = []
        for ex in examples:
            text = ex.get("text", ex.get("query"))
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"{ex.get('source', 'an example')}: prediction input needs a non-empty 'text' string")
            texts.append(text)
        if not texts:
            return []
        vectors = self.vectors(model, texts, self.cfg.data.max_seq_len)
        return [{"embedding": [float(x) for x in v]} for v in vectors]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(min=1e-12)
