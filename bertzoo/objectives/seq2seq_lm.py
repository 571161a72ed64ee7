"""Sequence-to-sequence language modelling: an encoder-decoder predicts every target token from the source
and the target tokens before it (T5's span corruption, prefix LM and deshuffling, MASS; fine-tuning).

The batch holds the source in `input_ids` / `attention_mask` and the targets in `labels` (IGNORE_INDEX
where nothing is predicted); `batch.extra` may hold `decoder_input_ids` (default: the labels shifted
right after `decoder_start_token_id`, IGNORE_INDEX -> pad), `decoder_attention_mask` (default: every
decoder position is real, the causal mask alone) and `decoder_position_ids` (absolute target positions
for a model with a position table: MASS; T5's positions are relative and ignore them).
"""

from __future__ import annotations

from typing import Any

import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import ModelConfig
from bertzoo.models.encdec import EncoderDecoder, Seq2SeqOutput, shift_right
from bertzoo.models.encoder import init_weights
from bertzoo.models.generation import EncoderDecoderDecoding, Generates
from bertzoo.models.heads import LMHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import lm_head_loss

__all__ = ["EncoderDecoderLM"]


class EncoderDecoderLM(Generates, EncoderDecoder):
    """An `EncoderDecoder` with a next-token head on the decoder: loss = mean cross-entropy over the
    labelled target tokens. The head is tied to the word table (`tie_word_embeddings`, T5 v1.0) or its
    own matrix (T5 v1.1); with `scale_decoder_outputs` the decoder's states are multiplied by
    hidden_size ** -0.5 before it (T5 v1.0, whose tied head would otherwise see states of the
    embeddings' scale). `generate()` decodes through `bertzoo.models.generation.EncoderDecoderDecoding`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        c = config
        tied = self.word_embeddings.weight if c.tie_word_embeddings else None
        self.lm_head = LMHead(c.hidden_size, c.vocab_size, tied_weight=tied)
        if tied is None:
            init_weights(self.lm_head.decoder, c.initializer_range)
        self.output_scale = c.hidden_size**-0.5 if c.scale_decoder_outputs else None

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., hidden) decoder states -> (..., vocab) next-token logits."""
        if self.output_scale is not None:
            hidden = hidden * self.output_scale
        return self.lm_head(hidden)

    def decoder_inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(decoder_input_ids, decoder_attention_mask, decoder_position_ids) of a batch (module docstring)."""
        ids = batch.extra.get("decoder_input_ids")
        if ids is None:
            if batch.labels is None:
                raise ValueError("an encoder-decoder batch needs labels or batch.extra['decoder_input_ids']")
            c = self.config
            pad = c.pad_token_id if c.pad_token_id is not None else c.decoder_start_token_id
            ids = shift_right(batch.labels, c.decoder_start_token_id, pad)
        return ids, batch.extra.get("decoder_attention_mask"), batch.extra.get("decoder_position_ids")

    def seq2seq(self, *args: Any, **kwargs: Any) -> Seq2SeqOutput:
        """`EncoderDecoder.seq2seq` with the LM logits of every target position (`logits`)."""
        out = super().seq2seq(*args, **kwargs)
        out.logits = self.lm_logits(out.last_hidden_state)
        return out

    def decoding(self) -> EncoderDecoderDecoding:
        """The model side of `bertzoo.models.generation.generate` (and of `generate()`, from `Generates`)."""
        return EncoderDecoderDecoding(self, self.lm_logits)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over (host-side, before the forward): the labelled target tokens."""
        return {"lm": int((batch.labels != IGNORE_INDEX).sum())}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        ids, mask, positions = self.decoder_inputs(batch)
        hidden = EncoderDecoder.seq2seq(self, batch.input_ids, batch.attention_mask, ids, mask, positions)
        hidden = hidden.last_hidden_state  # (batch, target, hidden)
        if batch.labels is None:  # prediction: logits of every target position, no loss
            return ObjectiveOutput(loss=None, logits=self.lm_logits(hidden))
        # The vocabulary projection runs on the labelled positions only (padding never reaches the head).
        loss, metrics, counts = lm_head_loss(hidden, batch.labels, self.lm_head, "lm", scale=self.output_scale)
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.tensor(1, device=hidden.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms={"lm": (loss, 1.0)})

    def checkpoint_fields(self) -> dict[str, Any]:
        """What config.json needs beyond the ModelConfig to rebuild this module (`save_pretrained`)."""
        return {"objective": self.objective_name}

    @property
    def objective_name(self) -> str:
        return "seq2seq_lm"
