"""Bidirectional language modelling (ELMo): the forward LM predicts each next token, the backward LM
each previous one, both through the same softmax; the loss is the mean of the two.

Like `clm`, the targets are the inputs themselves: the objective reads `input_ids` and `attention_mask`
only (a masked-LM collator's `labels` are not read).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.models.elmo import Elmo, ElmoOutput
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import masked_lm_loss


def bilm_targets(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(forward, backward) targets, each (batch, seq): position t's forward target is input_ids[t + 1],
    its backward target input_ids[t - 1]; IGNORE_INDEX where either position is padding or off the end.

    Checking the predicting position too matters for the backward LM: in a right-padded row the first
    padding position's "previous token" is real, but its state is not one the model should learn from."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    ignore = torch.full_like(input_ids[:, :1], IGNORE_INDEX)  # (batch, 1)
    off_end = torch.zeros_like(real[:, :1])  # (batch, 1) False: no token beyond either end
    forward = torch.cat([input_ids[:, 1:], ignore], dim=1)
    forward_real = real & torch.cat([real[:, 1:], off_end], dim=1)
    backward = torch.cat([ignore, input_ids[:, :-1]], dim=1)
    backward_real = real & torch.cat([off_end, real[:, :-1]], dim=1)
    return forward.masked_fill(~forward_real, IGNORE_INDEX), backward.masked_fill(~backward_real, IGNORE_INDEX)


class BidirectionalLM(nn.Module):
    """loss = (mean forward next-token cross-entropy + mean backward previous-token cross-entropy) / 2."""

    predicts_next_token = True  # its held-out baseline is the next-token unigram (bertzoo.train.pretrain)

    def __init__(self, elmo: Elmo) -> None:
        super().__init__()
        # Named like every pretraining module's backbone, so a checkpoint's weights sit under `encoder.`.
        self.encoder = elmo

    @property
    def config(self):
        return self.encoder.config

    def encode(self, batch: Batch) -> ElmoOutput:
        """The biLM pass over the batch."""
        return self.encoder(batch.input_ids, batch.attention_mask)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over (host-side, before the forward): see ObjectiveOutput."""
        forward, backward = bilm_targets(batch.input_ids, batch.attention_mask)
        return {"fwd": int((forward != IGNORE_INDEX).sum()), "bwd": int((backward != IGNORE_INDEX).sum())}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        out = self.encode(batch)
        forward, backward = bilm_targets(batch.input_ids, batch.attention_mask)  # (batch, seq) each

        def head(hidden: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
            # The vocabulary projection runs on the predicting positions only; padding never reaches it.
            return self.encoder.softmax(hidden[selected])  # (num_targets, vocab)

        _, fwd_loss, metrics, counts = masked_lm_loss(out.forward_states, forward, head, "fwd")
        _, bwd_loss, bwd_metrics, bwd_counts = masked_lm_loss(out.backward_states, backward, head, "bwd")
        metrics.update(bwd_metrics)
        counts.update(bwd_counts)
        for name in ("fwd", "bwd"):
            # exp of this batch's mean loss; over a whole set, take exp of the mean loss instead.
            metrics[f"{name}_ppl"] = torch.exp(metrics[f"{name}_loss"])
            counts[f"{name}_ppl"] = counts[f"{name}_loss"]
        loss = 0.5 * (fwd_loss + bwd_loss)
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.tensor(1, device=loss.device)
        return ObjectiveOutput(
            loss=loss, metrics=metrics, counts=counts, terms={"fwd": (fwd_loss, 0.5), "bwd": (bwd_loss, 0.5)}
        )

    def checkpoint_fields(self) -> dict[str, Any]:
        """What config.json needs beyond the ModelConfig to rebuild this module (`save_pretrained`)."""
        return {"objective": self.objective_name}

    @property
    def objective_name(self) -> str:
        return "bilm"
