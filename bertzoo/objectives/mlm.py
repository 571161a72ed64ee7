"""Masked-LM pretraining, optionally with a sentence-pair task (NSP for BERT, SOP for ALBERT)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.models.encoder import Encoder, EncoderOutput, init_weights
from bertzoo.models.heads import LMHead, MaskedLMHead, SentencePairHead
from bertzoo.objectives.base import ObjectiveOutput


def masked_lm_loss(
    hidden: torch.Tensor,
    labels: torch.Tensor,
    head: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    name: str = "mlm",
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(logits, loss, metrics, counts) of a masked-LM head: logits (num_masked, vocab) of
    `head(hidden, selected)` at the labelled positions, their mean cross-entropy, and `{name}_loss` /
    `{name}_acc` with the number of positions each averages over. The one MLM loss: BERT's, SpanBERT's
    boundary objective and ELECTRA's generator (which also samples from the logits) all use it."""
    selected = labels != IGNORE_INDEX  # (batch, seq) bool
    targets = labels[selected]  # (num_masked,)
    logits = head(hidden, selected).float()  # (num_masked, vocab)
    if targets.numel() > 0:
        loss = F.cross_entropy(logits, targets)
    else:  # a batch with nothing masked still has a graph, so backward() works everywhere
        loss = hidden.sum() * 0.0
    with torch.no_grad():
        acc = (logits.argmax(-1) == targets).float().mean() if targets.numel() else loss.detach() * 0
    return logits, loss, *_lm_metrics(loss, acc, targets.numel(), name)


def lm_head_loss(
    hidden: torch.Tensor, labels: torch.Tensor, head: LMHead, name: str, *, scale: float | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """`masked_lm_loss` without its logits, for a plain projection head (`LMHead`): the projection and the
    cross-entropy run fused, chunk by chunk (bertzoo.nn.linear_ce), so the (targets, vocab) logits are never
    held. `scale` multiplies the hidden states first (T5's tied head)."""
    selected = labels != IGNORE_INDEX
    targets = labels[selected]
    if targets.numel() == 0:  # still a graph, so backward() works everywhere
        loss = hidden.sum() * 0.0
        return loss, *_lm_metrics(loss, loss.detach() * 0, 0, name)
    rows = hidden[selected]
    loss, correct = head(rows * scale if scale is not None else rows, targets)
    return loss, *_lm_metrics(loss, correct.float() / targets.numel(), targets.numel(), name)


def _lm_metrics(
    loss: torch.Tensor, acc: torch.Tensor, n: int, name: str
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """`{name}_loss` / `{name}_acc` and the number of targets each averages over."""
    count = torch.tensor(n, device=loss.device)
    return {f"{name}_loss": loss.detach(), f"{name}_acc": acc}, {f"{name}_loss": count, f"{name}_acc": count}


class MaskedLM(nn.Module):
    """loss = mean MLM cross-entropy over masked tokens (+ mean sentence-pair cross-entropy).

    The MLM head runs on masked positions only; that is the single largest saving over computing
    vocabulary logits for every token.
    """

    def __init__(self, encoder: Encoder, *, sentence_task: str | None = "nsp") -> None:
        super().__init__()
        c = encoder.config
        if sentence_task is not None and encoder.pooler is None:
            raise ValueError(
                f"the {sentence_task} task reads the pooled [CLS] vector; build the encoder with pooler=True"
            )
        self.encoder = encoder
        self.sentence_task = sentence_task
        self.mlm_head = MaskedLMHead(
            c.hidden_size,
            c.vocab_size,
            embedding_size=c.embedding_size,
            act=c.hidden_act,
            layer_norm_eps=c.layer_norm_eps,
            tied_weight=encoder.word_embeddings.weight if c.tie_word_embeddings else None,
        )
        self.nsp_head = SentencePairHead(c.hidden_size) if sentence_task is not None else None
        std = c.initializer_range
        for m in (self.mlm_head.dense, self.mlm_head.norm, self.nsp_head):
            if m is not None:
                m.apply(lambda mod: init_weights(mod, std))
        if not c.tie_word_embeddings:  # a tied decoder already holds the embedding table
            init_weights(self.mlm_head.decoder, std)
        nn.init.zeros_(self.mlm_head.decoder.bias)
        if self.nsp_head is None and encoder.pooler is not None:
            # Kept for fine-tuning, but nothing reads it here: frozen (and skipped in `encode`) so DDP
            # does not wait for gradients that never come. A model loaded for fine-tuning trains it.
            encoder.pooler.requires_grad_(False)

    @property
    def config(self):
        return self.encoder.config

    def encode(self, batch: Batch) -> EncoderOutput:
        """The encoder pass (ERNIE 2.0's task ids ride in `batch.extra["task_type_ids"]`).

        A batch with `batch.extra["attention_pattern"]` ((batch, seq, seq) bool, True = may attend,
        padding included: UniLM's per-example LM masks) attends by it; `attention_mask` stays the
        (batch, seq) padding mask that token counts read."""
        task = batch.extra.get("task_type_ids") if self.encoder.embeddings.task_type is not None else None
        pattern = batch.extra.get("attention_pattern")
        # Packed documents kept apart (data.document_boundaries); only passed when present, so encoders without
        # the argument (ERNIE-THU's) are called as before.
        docs = batch.extra.get("document_ids")
        # The pooler only feeds the sentence-pair head; MLM-only objectives leave it out of the graph.
        return self.encoder(
            batch.input_ids,
            batch.attention_mask if pattern is None else pattern,
            batch.token_type_ids,
            task_type_ids=task,
            pool=self.nsp_head is not None,
            **({} if docs is None else {"document_ids": docs}),
        )

    def mlm_loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        head: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        name: str = "mlm",
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Mean cross-entropy of `head(hidden, selected)` (default: the MLM head) over the labelled
        positions, with `{name}_loss` / `{name}_acc` metrics and their counts (SpanBERT's boundary
        objective reuses it with its own head)."""
        _, loss, metrics, counts = masked_lm_loss(hidden, labels, self.mlm_head if head is None else head, name)
        return loss, metrics, counts

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over (host-side, before the forward): see ObjectiveOutput."""
        counts = {"mlm": int((batch.labels != IGNORE_INDEX).sum())} if batch.labels is not None else {}
        if self.nsp_head is not None and batch.next_sentence_label is not None:
            counts[self.sentence_task] = int(batch.next_sentence_label.numel())
        return counts

    def forward(self, batch: Batch) -> ObjectiveOutput:
        return self.losses(self.encode(batch), batch)

    def losses(self, out: EncoderOutput, batch: Batch) -> ObjectiveOutput:
        """The masked-LM (+ sentence-pair) terms of an encoder pass `out` over `batch` (a subclass adding a
        term of its own, ERNIE-THU's dEA, reads the same pass)."""
        hidden = out.last_hidden_state  # (batch, seq, hidden)
        mlm_loss, metrics, counts = self.mlm_loss(hidden, batch.labels)
        loss = mlm_loss
        terms = {"mlm": (mlm_loss, 1.0)}
        if self.nsp_head is not None and batch.next_sentence_label is not None:
            name = self.sentence_task
            nsp_logits = self.nsp_head(out.pooler_output).float()  # (batch, 2)
            nsp_loss = F.cross_entropy(nsp_logits, batch.next_sentence_label)
            loss = loss + nsp_loss
            terms[name] = (nsp_loss, 1.0)
            n = torch.tensor(nsp_logits.size(0), device=hidden.device)
            with torch.no_grad():
                metrics[f"{name}_loss"] = nsp_loss.detach()
                metrics[f"{name}_acc"] = (nsp_logits.argmax(-1) == batch.next_sentence_label).float().mean()
            counts[f"{name}_loss"] = n
            counts[f"{name}_acc"] = n
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.tensor(1, device=hidden.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms=terms)

    def checkpoint_fields(self) -> dict[str, Any]:
        """What config.json needs beyond the ModelConfig to rebuild this module (`save_pretrained`,
        attached by bertzoo.loading, writes them with `encoder.`, `mlm_head.`, `nsp_head.` weights)."""
        return {"objective": self.objective_name}

    @property
    def objective_name(self) -> str:
        return "mlm" if self.sentence_task is None else f"mlm+{self.sentence_task}"
