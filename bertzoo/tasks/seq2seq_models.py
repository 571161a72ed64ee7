"""The task models of sequence-to-sequence fine-tuning (`bertzoo.tasks.seq2seq`): `Seq2SeqModel`, a single
stack with a token-prediction head (GPT's tied next-token head, or the masked-LM head of a bidirectional
encoder that reads UniLM's sequence-to-sequence mask), and `EncoderDecoderTaskModel`, an `EncoderDecoderLM`
(T5, MASS) as it is. Both give the decoding that `bertzoo.models.generation` steps through.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.data.pretraining.collate_unilm import PER_LM_SEGMENT_IDS, PER_LM_TYPE_VOCAB
from bertzoo.models.encoder import init_weights
from bertzoo.models.generation import CausalDecoding, EncoderDecoderDecoding, Generates, MaskPredictDecoding
from bertzoo.models.heads import LMHead, MaskedLMHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.clm import causal_lm_loss
from bertzoo.objectives.mlm import masked_lm_loss
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.tasks.base import TaskModel

__all__ = ["EncoderDecoderTaskModel", "Seq2SeqModel", "segment_ids"]


def segment_ids(type_vocab_size: int) -> tuple[int, int]:
    """(source, target) segment ids: UniLM's seq2seq pair (4, 5) on a model with its six segment rows, so
    fine-tuning reads what pretraining wrote; BERT's (0, 1) otherwise; (0, 0) without a second row."""
    if type_vocab_size >= PER_LM_TYPE_VOCAB:
        source, target = PER_LM_SEGMENT_IDS[-1]
        return int(source), int(target)
    return (0, 1) if type_vocab_size >= 2 else (0, 0)


class Seq2SeqModel(Generates, TaskModel):
    """An encoder with a token-prediction head: the tied next-token `LMHead` on a causal model, the
    masked-LM head on a bidirectional one. `decoding()` gives what `bertzoo.models.generation` steps through."""

    def __init__(self, encoder: nn.Module, lm_weight: float, mask_token_id: int) -> None:
        super().__init__(encoder)
        c = encoder.config
        self.segments = segment_ids(c.type_vocab_size)
        self.causal = bool(c.causal)
        # The masked-LM head was trained with the encoder; the fine-tuning runner copies it from a
        # pretraining checkpoint (a causal model's head is the tied word table: nothing to copy).
        self.pretrained_head_prefix = None if self.causal else "mlm_head."
        self.lm_weight = lm_weight
        self.mask_token_id = mask_token_id
        tied = encoder.word_embeddings.weight if c.tie_word_embeddings else None
        if self.causal:
            self.head: nn.Module = LMHead(c.hidden_size, c.vocab_size, tied_weight=tied)
        else:
            self.head = MaskedLMHead(
                c.hidden_size,
                c.vocab_size,
                embedding_size=c.embedding_size,
                act=c.hidden_act,
                layer_norm_eps=c.layer_norm_eps,
                tied_weight=tied,
            )
            for m in (self.head.dense, self.head.norm):
                m.apply(lambda mod: init_weights(mod, c.initializer_range))
        if tied is None:
            init_weights(self.head.decoder, c.initializer_range)
        if encoder.pooler is not None:
            encoder.pooler.requires_grad_(False)  # nothing reads it; DDP must not wait for its gradients

    def decoding(self) -> CausalDecoding | MaskPredictDecoding:
        """The model side of `bertzoo.models.generation.generate` (and of `generate()`, from `Generates`)."""
        if self.causal:
            return CausalDecoding(self.encoder, self.head)
        source, target = self.segments
        return MaskPredictDecoding(self.encoder, self.head, self.mask_token_id, target, source)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        if batch.labels is None:
            return ObjectiveOutput(loss=None)
        if self.causal:
            hidden = self.encoder(batch.input_ids, batch.attention_mask, pool=False).last_hidden_state
            loss, metrics, counts = causal_lm_loss(hidden, batch.labels, self.head, "target")
            terms = {"target": (loss, 1.0)}
            source = batch.extra.get("source_labels")
            if self.lm_weight > 0 and source is not None:
                aux, m, c = causal_lm_loss(hidden, source, self.head, "source")
                metrics.update(m)
                counts.update(c)
                loss = loss + self.lm_weight * aux
                terms["source"] = (aux, self.lm_weight)
        else:
            pattern = batch.extra["attention_pattern"]  # (batch, seq, seq): UniLM's seq2seq mask
            hidden = self.encoder(batch.input_ids, pattern, batch.token_type_ids, pool=False).last_hidden_state
            _, loss, metrics, counts = masked_lm_loss(hidden, batch.labels, self.head, "target")
            terms = {"target": (loss, 1.0)}
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.ones((), device=loss.device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms=terms)


def _as_target(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The LM's `lm_loss` / `lm_acc` under the seq2seq task's names, `target_loss` / `target_acc`."""
    return {("target" + k[2:] if k.startswith("lm_") else k): v for k, v in values.items()}


class EncoderDecoderTaskModel(Generates, TaskModel):
    """An `EncoderDecoderLM` (T5, MASS) as the seq2seq task model: its loss is the LM's cross-entropy over
    the labelled target tokens (logged as `target_loss` / `target_acc`, as the single-stack models do),
    and it decodes with `EncoderDecoderDecoding`.

    Its modules are the LM's own under the LM's names (`encoder.`, `decoder.`, `lm_head.`), so a fine-tuned
    model's weights load as an EncoderDecoderLM too (`bertzoo.loading.load_encoder_decoder`), and
    `.encoder` is the `Encoder` that techniques and attention views look for."""

    pretrained_head_prefix = None  # the LM head comes with the model

    def __init__(self, lm: EncoderDecoderLM) -> None:
        # Not TaskModel.__init__: it sets up what a head over an encoder reads (feature layers, pooling,
        # GPT's auxiliary LM head), none of which exists here.
        nn.Module.__init__(self)
        self.encoder = lm.encoder
        self.decoder = lm.decoder
        self.lm_head = lm.lm_head
        self.causal = False
        self.head_config: dict[str, Any] = {}
        # The LM itself stays outside the module tree (its parameters are those above, registered once);
        # its methods run the model.
        object.__setattr__(self, "lm", lm)

    def train(self, mode: bool = True) -> EncoderDecoderTaskModel:
        super().train(mode)
        self.lm.training = mode  # its modules are ours; decoding reads and restores the LM's own flag
        return self

    def decoding(self) -> EncoderDecoderDecoding:
        """The model side of `bertzoo.models.generation.generate` (and of `generate()`, from `Generates`)."""
        return self.lm.decoding()

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items the loss averages over (host-side, before the forward): the labelled target tokens."""
        return {"target": int((batch.labels != IGNORE_INDEX).sum())}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        if batch.labels is None:
            return ObjectiveOutput(loss=None)
        out = self.lm(batch)  # decoder input: the labels shifted right after the start token
        metrics, counts = _as_target(out.metrics), _as_target(out.counts)
        return ObjectiveOutput(loss=out.loss, metrics=metrics, counts=counts, terms={"target": out.terms["lm"]})
