"""Permutation language modelling (XLNet): predict some tokens of a sequence, each from the tokens before
it in a random factorisation order, through the query stream.

The collator (`bertzoo.data.pretraining.collate_plm`) draws the order and the targets and states them as the model's
inputs: `perm_mask` (batch, seq, seq), 1 = "may not attend", `target_mapping` (batch, num_predict, seq) and
`labels` (batch, num_predict), IGNORE_INDEX on rows that pad num_predict. The two tensors travel in
`batch.extra`. The loss is the mean cross-entropy of the query stream's predictions, through an LM head tied
to the word table with its own bias (transformers' XLNetLMHeadModel `lm_loss`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.models.encoder import init_weights
from bertzoo.models.heads import LMHead
from bertzoo.models.xlnet import XLNet, XLNetOutput
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import lm_head_loss

__all__ = ["PermutationLM", "targets_from_labels"]


def targets_from_labels(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(perm_mask, target_mapping, labels) of a batch labelled per position, (batch, seq) with IGNORE_INDEX
    elsewhere (a masked-LM collator's): every labelled token is a target that no position may read, so each
    is predicted from the others alone, none from another target or itself."""
    targets = labels != IGNORE_INDEX  # (batch, seq)
    count = targets.sum(-1)  # (batch,)
    num_predict = max(1, int(count.max()))
    slot = torch.arange(num_predict, device=labels.device)[None, :] < count[:, None]  # (batch, num_predict)
    positions = targets.long().argsort(dim=-1, descending=True, stable=True)[:, :num_predict]  # targets first
    mapping = nn.functional.one_hot(positions, labels.size(1)).float() * slot[..., None]
    compact = labels.gather(1, positions).masked_fill(~slot, IGNORE_INDEX)
    perm_mask = targets[:, None, :].expand(-1, labels.size(1), -1).float()
    return perm_mask, mapping, compact


class PermutationLM(nn.Module):
    """loss = mean cross-entropy of the query stream at the targets of `target_mapping`."""

    def __init__(self, encoder: XLNet) -> None:
        super().__init__()
        c = encoder.config
        self.encoder = encoder
        tied = encoder.word_embeddings.weight if c.tie_word_embeddings else None
        self.lm_head = LMHead(c.hidden_size, c.vocab_size, tied_weight=tied, bias=True)
        if tied is None:
            init_weights(self.lm_head.decoder, c.initializer_range)
            nn.init.zeros_(self.lm_head.decoder.bias)

    @property
    def config(self):
        return self.encoder.config

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.encoder.word_embeddings

    def logits(self, input_ids: torch.Tensor, **inputs: Any) -> tuple[torch.Tensor, XLNetOutput]:
        """(logits, model output), as transformers' XLNetLMHeadModel: logits (batch, num_predict, vocab) of the
        query stream with a `target_mapping`, else (batch, seq, vocab) of the content stream. `inputs`: XLNet's."""
        out = self.encoder(input_ids, **inputs)
        hidden = out.query_hidden_state if out.query_hidden_state is not None else out.last_hidden_state
        return self.lm_head(hidden), out

    def inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(perm_mask, target_mapping, labels) of a batch: the permutation-LM collator's, or for a batch
        labelled per position, `targets_from_labels`."""
        if "target_mapping" in batch.extra:
            return batch.extra["perm_mask"], batch.extra["target_mapping"], batch.labels
        return targets_from_labels(batch.labels)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over (host-side, before the forward): see ObjectiveOutput."""
        return {"plm": int((batch.labels != IGNORE_INDEX).sum())}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        perm_mask, target_mapping, labels = self.inputs(batch)
        out = self.encoder(
            batch.input_ids,
            batch.attention_mask,
            batch.token_type_ids,
            perm_mask=perm_mask,
            target_mapping=target_mapping,
            top_content=False,  # the loss reads the query stream alone
        )
        hidden = out.query_hidden_state  # (batch, num_predict, hidden)
        loss, metrics, counts = lm_head_loss(hidden, labels, self.lm_head, "plm")
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.tensor(1, device=hidden.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms={"plm": (loss, 1.0)})

    def checkpoint_fields(self) -> dict[str, Any]:
        """What config.json needs beyond the ModelConfig to rebuild this module (`save_pretrained`)."""
        return {"objective": "plm"}
