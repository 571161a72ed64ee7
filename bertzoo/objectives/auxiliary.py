"""Masked LM plus auxiliary tasks that need no outside labels: ERNIE 2.0's word-aware and structure-aware tasks
(Sun et al. 2020, §4.2), each a head and a loss beside the masked-LM head.

| task | level | what its head predicts |
| --- | --- | --- |
| `capitalization` | token | does this word start with a capital letter (2 classes, at each word's first token) |
| `token_document` | token | does this word also occur in another segment of its document (2 classes) |
| `sentence_reorder` | sequence | which permutation shuffled the 1..m segments of the input (sum k!, k = 1..m classes) |
| `sentence_distance` | sequence | are the two segments adjacent, in one document but apart, or from two documents (3) |

Token tasks read the top hidden state of each labelled token through their own transform; sequence tasks read the
pooled [CLS] vector. Labels ride in `batch.extra["<task>_labels"]` ((batch, seq) for a token task, (batch,) for a
sequence task; IGNORE_INDEX where an example is not the task's), built by
`bertzoo.data.pretraining.collate_tasks`. The semantic-aware tasks (discourse relation, IR relevance) need labelled
or search-log data and are not here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder, EncoderOutput, init_weights
from bertzoo.models.heads import SentencePairHead, TokenTaskHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import MaskedLM

__all__ = ["AUX_TASKS", "AuxTask", "MultiTaskLM", "reorder_classes", "task_labels"]


@dataclass(frozen=True)
class AuxTask:
    """One auxiliary task: its level (a label per token or per example) and its number of classes (0: set by
    `reorder_segments`)."""

    level: Literal["token", "sequence"]
    num_labels: int


AUX_TASKS: dict[str, AuxTask] = {
    "capitalization": AuxTask("token", 2),
    "token_document": AuxTask("token", 2),
    "sentence_reorder": AuxTask("sequence", 0),
    "sentence_distance": AuxTask("sequence", 3),
}
MAX_REORDER_SEGMENTS = 5  # 153 classes; the paper's m is small, and k! grows fast


def reorder_classes(segments: int) -> int:
    """The classes of sentence reordering into 1..`segments` segments: sum of k! (1, 3, 9, 33, 153)."""
    return sum(math.factorial(k) for k in range(1, segments + 1))


def task_labels(name: str, reorder_segments: int = 3) -> int:
    """The number of classes of auxiliary task `name`."""
    if name not in AUX_TASKS:
        raise ConfigError(f"unknown ERNIE 2.0 task {name!r}; choose one of: {', '.join(AUX_TASKS)}")
    if not 1 <= reorder_segments <= MAX_REORDER_SEGMENTS:
        raise ConfigError(f"reorder_segments must be within 1..{MAX_REORDER_SEGMENTS}, got {reorder_segments}")
    return AUX_TASKS[name].num_labels or reorder_classes(reorder_segments)


class MultiTaskLM(MaskedLM):
    """Masked LM on every example plus one loss per auxiliary task over the examples assigned to it.

    loss = masked-LM mean + sum over tasks of the task's mean cross-entropy over its items (tokens or examples) in
    the step; each is a term with its own item count (`loss_counts`), so accumulation and data parallelism give
    the one-big-batch gradient. Metrics: `<task>_loss` and `<task>_acc`, logged for every task in every batch
    (count 0 where a batch has none of its examples), beside `mlm_loss` / `mlm_acc`.
    """

    def __init__(self, encoder: Encoder, tasks: Sequence[str], *, reorder_segments: int = 3) -> None:
        super().__init__(encoder, sentence_task=None)
        c = encoder.config
        self.aux_tasks = tuple(dict.fromkeys(tasks))
        if not self.aux_tasks:
            raise ConfigError("MultiTaskLM needs at least one auxiliary task; use MaskedLM for masked LM alone")
        self.reorder_segments = int(reorder_segments)
        heads: dict[str, nn.Module] = {}
        for name in self.aux_tasks:
            n = task_labels(name, self.reorder_segments)
            if AUX_TASKS[name].level == "token":
                heads[name] = TokenTaskHead(c.hidden_size, n, act=c.hidden_act, layer_norm_eps=c.layer_norm_eps)
            else:
                heads[name] = SentencePairHead(c.hidden_size, n)
        self.task_heads = nn.ModuleDict(heads)
        self.task_heads.apply(lambda m: init_weights(m, c.initializer_range))
        self.pools = any(AUX_TASKS[n].level == "sequence" for n in self.aux_tasks)
        if self.pools:
            if encoder.pooler is None:
                raise ConfigError(
                    "sentence_reorder and sentence_distance read the pooled [CLS] vector; set model.pooler true"
                )
            encoder.pooler.requires_grad_(True)  # MaskedLM froze it: here a sentence task trains it

    def encode(self, batch: Batch) -> EncoderOutput:
        """The encoder pass with task ids, pooled when a sequence-level task reads [CLS]."""
        task = batch.extra.get("task_type_ids") if self.encoder.embeddings.task_type is not None else None
        return self.encoder(
            batch.input_ids, batch.attention_mask, batch.token_type_ids, task_type_ids=task, pool=self.pools
        )

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        counts = super().loss_counts(batch)
        for name in self.aux_tasks:
            labels = batch.extra.get(f"{name}_labels")
            counts[name] = 0 if labels is None else int((labels != IGNORE_INDEX).sum())
        return counts

    def losses(self, out: EncoderOutput, batch: Batch) -> ObjectiveOutput:
        result = super().losses(out, batch)
        loss = result.loss
        for name in self.aux_tasks:
            labels = batch.extra.get(f"{name}_labels")
            if AUX_TASKS[name].level == "token":
                task_loss, metrics, counts = self._token_task(name, out.last_hidden_state, labels)
            else:
                task_loss, metrics, counts = self._sequence_task(name, out.pooler_output, labels)
            loss = loss + task_loss
            result.terms[name] = (task_loss, 1.0)
            result.metrics.update(metrics)
            result.counts.update(counts)
        result.loss = loss
        result.metrics["loss"] = loss.detach()
        return result

    def _token_task(
        self, name: str, hidden: torch.Tensor, labels: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        if labels is None:
            labels = torch.full(hidden.shape[:2], IGNORE_INDEX, dtype=torch.long, device=hidden.device)
        selected = labels != IGNORE_INDEX  # (batch, seq)
        # The head runs on the labelled rows only; with none it still runs (on zero rows), so every head is in the
        # graph of every step and DDP finds no parameter without a gradient.
        logits = self.task_heads[name](hidden[selected]).float()  # (n, labels)
        return _classification(name, logits, labels[selected])

    def _sequence_task(
        self, name: str, pooled: torch.Tensor, labels: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        if labels is None:
            labels = torch.full(pooled.shape[:1], IGNORE_INDEX, dtype=torch.long, device=pooled.device)
        selected = labels != IGNORE_INDEX  # (batch,)
        logits = self.task_heads[name](pooled[selected]).float()  # (n, labels)
        return _classification(name, logits, labels[selected])

    def checkpoint_fields(self) -> dict[str, Any]:
        """Besides the objective: the tasks and the reordering's segments, which size the heads."""
        return {
            **super().checkpoint_fields(),
            "aux_tasks": list(self.aux_tasks),
            "reorder_segments": self.reorder_segments,
        }


def _classification(
    name: str, logits: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(mean cross-entropy, `{name}_loss` / `{name}_acc`, their counts) of `logits` (n, labels) against `targets`."""
    n = targets.numel()
    if n:
        loss = F.cross_entropy(logits, targets)
        with torch.no_grad():
            acc = (logits.argmax(-1) == targets).float().mean()
    else:  # zero, not NaN: a metric weighted by a count of 0 must add nothing to the running average
        loss = logits.sum() * 0.0
        acc = loss.detach()
    count = torch.tensor(n, device=logits.device)
    return loss, {f"{name}_loss": loss.detach(), f"{name}_acc": acc}, {f"{name}_loss": count, f"{name}_acc": count}
