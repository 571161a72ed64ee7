"""Causal (left-to-right) language modelling: every real token is predicted from the ones before it (GPT).

The targets are the inputs themselves, so the objective reads `input_ids` and `attention_mask` only;
`batch.labels` is not read, because a masked-LM collator puts its own targets there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.models.encoder import Encoder, EncoderOutput, init_weights
from bertzoo.models.generation import CausalDecoding, Generates
from bertzoo.models.heads import LMHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import lm_head_loss, masked_lm_loss


def lm_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(batch, seq) targets in Hugging Face's convention: the tokens themselves, IGNORE_INDEX at padding.
    Position t of the labels is what position t - 1 predicts (`causal_lm_loss` does the shift)."""
    if attention_mask is None:
        return input_ids
    return input_ids.masked_fill(~attention_mask.bool(), IGNORE_INDEX)


def causal_lm_loss(
    hidden: torch.Tensor,
    labels: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    name: str = "lm",
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(loss, metrics, counts): position t predicts labels[:, t + 1]; the mean cross-entropy over the targets
    that are not IGNORE_INDEX, with `{name}_loss` / `{name}_acc` and their counts.

    It is the masked-LM loss on shifted tensors, so the vocabulary projection runs on the predicting
    positions only (padding never reaches the head) and the metrics mean the same as BERT's; a plain
    projection head (`LMHead`) computes it fused with the projection (`lm_head_loss`)."""
    hidden, labels = hidden[:, :-1], labels[:, 1:]
    if isinstance(head, LMHead):
        return lm_head_loss(hidden, labels, head, name)
    return masked_lm_loss(hidden, labels, lambda h, selected: head(h[selected]), name)[1:]


def next_token_counts(batch: Batch) -> dict[str, int]:
    """`loss_counts` of a next-token objective: the real targets (every real token after the first)."""
    return {"lm": int((lm_labels(batch.input_ids, batch.attention_mask)[:, 1:] != IGNORE_INDEX).sum())}


def next_token_output(
    hidden: torch.Tensor, batch: Batch, head: Callable[[torch.Tensor], torch.Tensor]
) -> ObjectiveOutput:
    """The ObjectiveOutput of a next-token objective from its top-layer states (batch, seq, hidden) and head."""
    loss, metrics, counts = causal_lm_loss(hidden, lm_labels(batch.input_ids, batch.attention_mask), head)
    metrics["loss"] = loss.detach()
    counts["loss"] = torch.tensor(1, device=hidden.device)
    return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms={"lm": (loss, 1.0)})


def perplexity(mean_loss: float | torch.Tensor) -> float:
    """exp(mean next-token cross-entropy in nats). Take it of a loss averaged over all tokens: the mean
    of per-batch perplexities is not the perplexity of the whole set (so it is no logged metric)."""
    return float(torch.exp(torch.as_tensor(mean_loss, dtype=torch.float64).detach().cpu()))


class CausalLM(Generates, nn.Module):
    """loss = mean next-token cross-entropy over the real tokens of a causal (decoder-only) encoder."""

    predicts_next_token = True  # its held-out baseline is the next-token unigram (bertzoo.train.pretrain)

    def __init__(self, encoder: Encoder) -> None:
        super().__init__()
        c = encoder.config
        if not c.causal:
            raise ValueError("a causal LM needs a model whose attention looks left only; build it with causal=True")
        if c.embedding_size and c.embedding_size != c.hidden_size:
            raise ValueError("a causal LM head reads hidden states of the word table's width; unset embedding_size")
        self.encoder = encoder
        self.lm_head = LMHead(
            c.hidden_size, c.vocab_size, tied_weight=encoder.word_embeddings.weight if c.tie_word_embeddings else None
        )
        if not c.tie_word_embeddings:  # a tied decoder already holds the (initialised) embedding table
            init_weights(self.lm_head.decoder, c.initializer_range)
        if encoder.pooler is not None:
            # Nothing here reads it: frozen so DDP does not wait for gradients that never come.
            encoder.pooler.requires_grad_(False)

    @property
    def config(self):
        return self.encoder.config

    def encode(self, batch: Batch) -> EncoderOutput:
        """The decoder pass over the batch (no segments, no pooler)."""
        return self.encoder(batch.input_ids, batch.attention_mask, pool=False)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, seq, vocab) next-token logits at every position (Hugging Face's LM-head output)."""
        return self.lm_head(self.encoder(input_ids, attention_mask, pool=False).last_hidden_state)

    def decoding(self) -> CausalDecoding:
        """The model side of `bertzoo.models.generation.generate` (and of `generate()`, from `Generates`)."""
        return CausalDecoding(self.encoder, self.lm_head)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over (host-side, before the forward): see ObjectiveOutput."""
        return next_token_counts(batch)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        return next_token_output(self.encode(batch).last_hidden_state, batch, self.lm_head)

    def checkpoint_fields(self) -> dict[str, Any]:
        """What config.json needs beyond the ModelConfig to rebuild this module (`save_pretrained`)."""
        return {"objective": self.objective_name}

    @property
    def objective_name(self) -> str:
        return "clm"
