"""Masked LM plus a document-level contrastive term: the two halves of each text, encoded without
seeing each other, must pick each other out of the batch (in-batch InfoNCE on their mean-pooled vectors,
as in DeCLUTR and SimCSE).

Why: at a CPU budget masked LM mostly learns function words and word pieces, which a topic classifier
does not need (docs/pretraining.md). Telling which half belongs to which text needs what the two halves
share, their vocabulary and subject, in the same mean-pooled vector that fine-tuning reads.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from bertzoo.batch import Batch
from bertzoo.models.encoder import Encoder
from bertzoo.nn.masks import halves_mask, masked_mean
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import MaskedLM


def in_batch_info_nce(a: torch.Tensor, b: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric InfoNCE of paired rows (batch, dim): row i of `a` and of `b` are positives, every other row
    of the other side a negative. Returns (loss, accuracy of picking the positive)."""
    a, b = F.normalize(a.float(), dim=-1), F.normalize(b.float(), dim=-1)
    logits = a @ b.T / temperature  # (batch, batch) cosine similarities
    target = torch.arange(a.size(0), device=a.device)
    loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    with torch.no_grad():
        acc = ((logits.argmax(-1) == target).float().mean() + (logits.argmax(0) == target).float().mean()) / 2
    return loss, acc


class HalvesContrastMLM(MaskedLM):
    """loss = MLM + `weight` x InfoNCE between the halves of each row (objective `mlm+contrast`).

    Each row attends within its halves only (`bertzoo.nn.masks.halves_mask`), so masked-LM context is the
    token's own half. No parameters beyond MaskedLM's: the checkpoint is a plain masked LM, and fine-tuning
    reads the encoder with full attention. Negatives are the other rows of the micro-batch on this process.
    """

    def __init__(self, encoder: Encoder, *, weight: float = 1.0, temperature: float = 0.05) -> None:
        super().__init__(encoder, sentence_task=None)
        self.weight = weight
        self.temperature = temperature

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        return {**super().loss_counts(batch), "contrast": int(batch.input_ids.size(0))}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        pattern, half = halves_mask(batch.attention_mask)
        # MaskedLM.encode attends by `attention_pattern` (UniLM's route); the batch itself is left as it was.
        out = self.encode(dataclasses.replace(batch, extra={**batch.extra, "attention_pattern": pattern}))
        result = self.losses(out, batch)
        hidden = out.last_hidden_state  # (batch, seq, hidden)
        a, b = masked_mean(hidden, half == 0), masked_mean(hidden, half == 1)  # (batch, hidden) each
        loss, acc = in_batch_info_nce(a, b, self.temperature)
        result.loss = result.loss + self.weight * loss
        result.terms["contrast"] = (loss, self.weight)
        rows = torch.tensor(a.size(0), device=hidden.device)
        result.metrics.update({"contrast_loss": loss.detach(), "contrast_acc": acc, "loss": result.loss.detach()})
        result.counts.update({"contrast_loss": rows, "contrast_acc": rows})
        return result

    @property
    def objective_name(self) -> str:
        return "mlm+contrast"
