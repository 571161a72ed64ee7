"""ERNIE (Tsinghua)'s pretraining: BERT's masked LM (+ NSP) and the denoising entity auto-encoder (dEA).

dEA predicts, at every position aligned with an entity, which entity it is: p(e | w_i) is a softmax over the
candidate entities, the distinct entities of the batch (as in the paper's code), of
transform(w_i) . e, where transform is dense + activation + LayerNorm down to entity_size and e the frozen
TransE vectors of the input table. The collator (`bertzoo.data.pretraining.collate_entities`) corrupts the entity input
(some alignments replaced by another entity, some hidden); the labels are always the true entities.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.models.encoder import init_weights
from bertzoo.models.ernie_thu import ErnieThu, KnowledgeOutput
from bertzoo.nn import activation
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import MaskedLM

__all__ = ["EntityHead", "KnowledgeLM", "dea_loss"]


class EntityHead(nn.Module):
    """dense (hidden -> entity_size) + activation + LayerNorm: a token state as a query over entity vectors."""

    def __init__(self, hidden_size: int, entity_size: int, act: str = "gelu", layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, entity_size)
        self.act = activation(act)
        self.norm = nn.LayerNorm(entity_size, eps=layer_norm_eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(hidden)))


def dea_loss(
    hidden: torch.Tensor, labels: torch.Tensor, head: nn.Module, table: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(mean cross-entropy, metrics, counts) of dEA: for each position with a label (entity_labels !=
    IGNORE_INDEX), logits head(h_i) . table[c] over the candidates c = the distinct labels of the batch."""
    selected = labels != IGNORE_INDEX  # (batch, seq)
    targets = labels[selected]  # (n,)
    queries = head(hidden[selected])  # (n, entity_size)
    n = torch.tensor(targets.numel(), device=hidden.device)
    if targets.numel() == 0:  # the head stays in the graph, so backward() (and DDP) see its parameters
        loss = queries.sum() * 0.0
        acc = loss.detach()
    else:
        candidates, target = torch.unique(targets, return_inverse=True)  # (k,), (n,) indices into candidates
        logits = (queries @ table[candidates].to(queries.dtype).t()).float()  # (n, k)
        loss = F.cross_entropy(logits, target)
        with torch.no_grad():
            acc = (logits.argmax(-1) == target).float().mean()
    metrics = {"dea_loss": loss.detach(), "dea_acc": acc}
    return loss, metrics, {"dea_loss": n, "dea_acc": n}


class KnowledgeLM(MaskedLM):
    """loss = masked LM (+ NSP) + dEA on an `ErnieThu` encoder. Batches carry `extra["entity_ids"]` (the
    corrupted entity input, -1 = none) and `extra["entity_labels"]` (true entities, IGNORE_INDEX elsewhere); a
    batch without entity labels has no dEA term. dEA needs the encoder's entity table (num_entities > 0).
    `dea=False` is the paper's "w/o dEA" ablation: entities fused, never predicted (no dEA head)."""

    def __init__(self, encoder: ErnieThu, *, sentence_task: str | None = None, dea: bool = True) -> None:
        super().__init__(encoder, sentence_task=sentence_task)
        c = encoder.config
        self.dea_head: EntityHead | None = None
        if dea:
            self.dea_head = EntityHead(c.hidden_size, c.entity_size, c.hidden_act, c.layer_norm_eps)
            self.dea_head.apply(lambda m: init_weights(m, c.initializer_range))

    def encode(self, batch: Batch) -> KnowledgeOutput:
        task = batch.extra.get("task_type_ids") if self.encoder.embeddings.task_type is not None else None
        return self.encoder(
            batch.input_ids,
            batch.attention_mask,
            batch.token_type_ids,
            entity_ids=batch.extra.get("entity_ids"),
            task_type_ids=task,
            pool=self.nsp_head is not None,
        )

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        counts = super().loss_counts(batch)
        labels = batch.extra.get("entity_labels")
        if labels is not None and self.dea_head is not None:
            counts["dea"] = int((labels != IGNORE_INDEX).sum())
        return counts

    def forward(self, batch: Batch) -> ObjectiveOutput:
        out = self.encode(batch)
        result = self.losses(out, batch)
        labels = batch.extra.get("entity_labels")
        if labels is None or self.dea_head is None:
            return result
        if self.encoder.entity_embeddings is None:
            raise ValueError("the batch has entity labels but the model no entity table (model.num_entities=0)")
        table = self.encoder.entity_embeddings.weight
        loss, metrics, counts = dea_loss(out.last_hidden_state, labels.to(table.device), self.dea_head, table)
        result.loss = result.loss + loss
        result.terms["dea"] = (loss, 1.0)
        result.metrics.update(metrics)
        result.counts.update(counts)
        result.metrics["loss"] = result.loss.detach()
        return result

    @property
    def objective_name(self) -> str:
        # MaskedLM.checkpoint_fields saves it as config.json's `objective`.
        name = "mlm" if self.sentence_task is None else f"mlm+{self.sentence_task}"
        return name + "+dea" if self.dea_head is not None else name
