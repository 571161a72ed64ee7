"""SpanBERT's objective: masked LM on span-masked input plus the span boundary objective (SBO).

loss = MLM cross-entropy + sbo_weight x SBO cross-entropy, both averaged over the masked tokens (sbo_weight 1
in the paper). With `sbo_start` > 0 the SBO term joins only at that fraction of training (before it, weight 0):
at a CPU budget SBO's gradient into the encoder holds masked LM on the unigram plateau (docs/families.md), and
it does no harm once masked LM has left it. The MLM part is
`MaskedLM`'s own (`MaskedLM.mlm_loss`); the SBO part runs the same loss with `SpanBoundaryHead`.
Single-sequence training: no NSP head.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.models.encoder import Encoder, init_weights
from bertzoo.models.heads import SpanBoundaryHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import MaskedLM

__all__ = ["SpanBoundaryLM", "label_runs"]


def label_runs(selected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last position of the run of consecutive selected positions each position is in
    (batch, seq) -> two (batch, seq) int64 tensors; used when a batch carries no span boundaries."""
    b, n = selected.shape
    pos = torch.arange(n, device=selected.device).expand(b, n)
    prev = torch.zeros_like(selected)
    prev[:, 1:] = selected[:, :-1]
    nxt = torch.zeros_like(selected)
    nxt[:, :-1] = selected[:, 1:]
    run_start = torch.where(selected & ~prev, pos, torch.zeros_like(pos)).cummax(dim=1).values
    ends = torch.where(selected & ~nxt, pos, torch.full_like(pos, n))
    run_end = ends.flip(1).cummin(dim=1).values.flip(1)
    return run_start, run_end


class SpanBoundaryLM(MaskedLM):
    """Encoder + MLM head + span boundary head (`objective` "mlm+sbo"; "mlm" leaves SBO out).

    The collator's `batch.extra["span_start"/"span_end"]` give each masked token its span; a batch
    without them (e.g. token masking) uses runs of consecutive masked tokens as spans.
    """

    def __init__(
        self,
        encoder: Encoder,
        *,
        sbo: bool = True,
        sbo_max_positions: int = 32,
        sbo_weight: float = 1.0,
        sbo_start: float = 0.0,
    ) -> None:
        super().__init__(encoder, sentence_task=None)
        self.sbo_weight = sbo_weight
        self.sbo_start = sbo_start
        self.sbo_active = sbo_start <= 0.0  # set by the trainer through set_progress
        c = encoder.config
        self.sbo_head = (
            SpanBoundaryHead(
                c.hidden_size,
                c.vocab_size,
                max_positions=sbo_max_positions,
                embedding_size=c.embedding_size,
                act=c.hidden_act,
                layer_norm_eps=c.layer_norm_eps,
                tied_weight=encoder.word_embeddings.weight if c.tie_word_embeddings else None,
            )
            if sbo
            else None
        )
        if self.sbo_head is not None:
            h = self.sbo_head
            # Not the decoder: when tied, its weight is the word embedding table.
            for m in (h.position, h.dense1, h.norm1, h.dense2, h.norm2):
                init_weights(m, c.initializer_range)
            if not c.tie_word_embeddings:
                init_weights(h.decoder, c.initializer_range)
            torch.nn.init.zeros_(h.decoder.bias)

    def set_progress(self, fraction: float) -> None:
        """The trainer's hook: SBO counts from `sbo_start` (a fraction of training) on."""
        self.sbo_active = fraction >= self.sbo_start

    @property
    def objective_name(self) -> str:
        return "mlm+sbo" if self.sbo_head is not None else "mlm"

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over: the masked tokens, for MLM and SBO alike."""
        n = int((batch.labels != IGNORE_INDEX).sum()) if batch.labels is not None else 0
        return {"mlm": n, "sbo": n} if self.sbo_head is not None else {"mlm": n}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        out = self.encode(batch)
        hidden = out.last_hidden_state  # (batch, seq, hidden)
        loss, metrics, counts = self.mlm_loss(hidden, batch.labels)
        terms = {"mlm": (loss, 1.0)}
        if self.sbo_head is not None:
            start, end = batch.extra.get("span_start"), batch.extra.get("span_end")
            if start is None or end is None:
                start, end = label_runs(batch.labels != IGNORE_INDEX)
            head = partial(self.sbo_head, span_start=start, span_end=end)
            sbo_loss, sbo_metrics, sbo_counts = self.mlm_loss(hidden, batch.labels, head=head, name="sbo")
            # Before sbo_start the term is still computed, times 0: every parameter keeps a gradient (DDP).
            weight = self.sbo_weight if self.sbo_active else 0.0
            loss = loss + weight * sbo_loss
            terms["sbo"] = (sbo_loss, weight)
            metrics.update(sbo_metrics)
            counts.update(sbo_counts)
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.tensor(1, device=hidden.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms=terms)

    def checkpoint_fields(self) -> dict[str, Any]:
        """config.json fields beyond the ModelConfig: the objective and the SBO position table size."""
        fields: dict[str, Any] = {"objective": self.objective_name}
        if self.sbo_head is not None:
            fields["sbo_max_positions"] = self.sbo_head.position.num_embeddings
        return fields
