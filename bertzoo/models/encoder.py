"""The encoder backbone: embeddings + Transformer stack + optional pooler. Heads live elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bertzoo.config import ModelConfig
from bertzoo.errors import BertzooError
from bertzoo.nn import (
    Embeddings,
    LearnedPositions,
    RelativePositionBias,
    TransformerLayer,
    TransformerStack,
    build_norm,
    causal_attention_mask,
    to_attention_mask,
)
from bertzoo.nn.kv_cache import KVCache
from bertzoo.nn.masks import CAUSAL, document_mask, document_positions, drop_full
from bertzoo.nn.unpad import Packing, tracing

# `unpad: auto` packs a batch when at least this share of its positions is padding: below it, gathering and
# scattering cost about what the skipped padding saves (benchmarks/finetune_throughput.py, docs/performance.md).
AUTO_UNPAD_PADDING = 0.2


@dataclass
class EncoderOutput:
    """Same field names as Hugging Face's BaseModelOutputWithPooling."""

    last_hidden_state: torch.Tensor  # (batch, seq, hidden)
    pooler_output: torch.Tensor | None = None  # (batch, hidden): tanh(W [CLS])
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + every layer
    attentions: tuple[torch.Tensor, ...] | None = None  # (batch, heads, seq, seq) per layer


class Pooler(nn.Module):
    """act(Linear(h_[CLS])): the sentence vector BERT's NSP and classifiers read (tanh), or DistilBERT's
    classifier (its pre_classifier, relu)."""

    def __init__(self, hidden_size: int, act: str = "tanh") -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = torch.tanh if act == "tanh" else torch.relu

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(hidden[:, 0]))


class Encoder(nn.Module):
    """A bidirectional Transformer encoder (BERT, RoBERTa, ALBERT, ELECTRA discriminator, ...), or with
    `config.causal` the same stack as a left-to-right decoder-only model (GPT): one mask, no new stack.
    With T5's options (`norm_kind="rms"`, `relative_buckets`, no biases, ...) it is T5's encoder, the
    first half of `bertzoo.models.encdec.EncoderDecoder`.

    `from_pretrained` / `save_pretrained` come from bertzoo.loading (imported with the package)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embeddings = Embeddings(
            c.vocab_size,
            c.hidden_size,
            embedding_size=c.embedding_size,
            max_position=c.max_position,
            type_vocab_size=c.type_vocab_size,
            task_type_vocab_size=c.task_type_vocab_size,
            position=c.position,
            position_offset=c.position_offset,
            pad_token_id=c.pad_token_id,
            dropout=c.dropout,
            layer_norm_eps=c.layer_norm_eps,
            norm=c.embedding_norm,
        )

        self.stack = TransformerStack(lambda: make_layer(c), c.num_layers, c.share)
        # Pre-norm stacks leave the residual stream unnormalised: one final LayerNorm fixes that.
        self.final_norm = build_norm(c.norm_kind, c.hidden_size, c.layer_norm_eps) if c.norm == "pre" else None
        self.final_dropout = nn.Dropout(c.dropout) if c.inner_dropout and self.final_norm is not None else None
        # T5's relative position bias, one table for the whole stack (None: positions are absolute or absent).
        self.relative_bias = relative_bias(c, bidirectional=not c.causal)
        self.pooler = Pooler(c.hidden_size, c.pooler_act) if c.pooler else None
        self.apply(lambda m: init_weights(m, c.initializer_range))

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.embeddings.word

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        *,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
        top_queries: int | None = None,
        task_type_ids: torch.Tensor | None = None,
        pool: bool = True,
        cache: KVCache | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """input_ids: (batch, seq). attention_mask: (batch, seq) padding mask, or a 3-D/4-D boolean
        mask (True = may attend) for custom attention patterns; a causal model also hides each query's
        later positions. `top_queries=n`: the last layer runs for the first n positions only and
        `last_hidden_state` has n positions (a [CLS] classifier passes 1 and skips most of the top
        layer; the pooler is unchanged). `output_attentions=True` returns each layer's attention
        probabilities, `"scores"` its scores before the softmax (unmasked: TinyBERT's targets).
        `task_type_ids`: ERNIE 2.0's
        task of each token, for models with a task embedding. `pool=False` skips the pooler (its
        output is None): an objective that never reads it must not run it, or DDP finds parameters
        without gradients.

        `cache` (a `bertzoo.nn.KVCache`, incremental decoding, see bertzoo.models.generation): input_ids are the
        positions after the cached ones; attention_mask then covers cached + new positions, and
        position ids default to continuing from the cache.

        `document_ids` (batch, seq): several documents packed into each row (contiguous, any ids); a token attends
        only to its own document's tokens and positions restart at each document."""
        seq = input_ids.size(1)
        past = cache.length if cache is not None else 0
        if position_ids is None and past + seq > self.embeddings.max_position:
            raise BertzooError(
                f"sequence length {past + seq} exceeds the model's position table ({self.embeddings.max_position}); "
                "lower data.max_seq_len or use a model with a larger max_position"
            )
        if position_ids is None and past:
            position_ids = torch.arange(past, past + seq, device=input_ids.device)[None] + self.config.position_offset
        mask = drop_full(to_attention_mask(attention_mask))  # (batch, 1, 1|seq, past + seq) bool, None: no padding
        if document_ids is not None:
            if position_ids is None:
                position_ids = document_positions(document_ids) + self.config.position_offset
            if attention_mask is None:
                attention_mask = torch.ones_like(input_ids)
        if (mask is not None or document_ids is not None) and self._unpads(
            attention_mask, cache, output_attentions, documents=document_ids is not None
        ):
            packing = Packing.from_mask(attention_mask, self.config.unpad_attention, document_ids)
            return self._unpadded(
                packing, input_ids, token_type_ids, position_ids, task_type_ids, output_hidden_states, top_queries, pool
            )
        x = self.embeddings(input_ids, token_type_ids, position_ids, task_type_ids)  # (batch, seq, hidden)
        if document_ids is not None:
            mask = document_mask(document_ids, attention_mask)  # (batch, 1, seq, seq): block-diagonal
        if self.config.causal and mask is None and past == 0 and top_queries is None:
            mask = CAUSAL  # SDPA's is_causal: no mask tensor, its fused kernels
        elif self.config.causal and (mask is not None or seq > 1):
            # (One new query with no padding sees every cached key: no mask at all, SDPA's fastest path.)
            mask = causal_attention_mask(mask, seq, input_ids.device, past)  # (batch|1, 1, seq, past + seq)
        extra = {} if self.relative_bias is None else {"bias": self.relative_bias(seq, past=past)}
        x, hidden_states, attentions = self.stack(
            x,
            mask,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            top_queries=None if cache is not None else top_queries,
            cache=cache,
            **extra,
        )
        if self.final_norm is not None:
            x = self.final_norm(x)
            if self.final_dropout is not None:
                x = self.final_dropout(x)
            if hidden_states is not None:
                # Every position, also when top_queries cut x to the first ones.
                hidden_states[-1] = x if x.size(1) == hidden_states[-1].size(1) else self.final_norm(hidden_states[-1])
        pooled = self.pooler(x) if self.pooler is not None and pool else None
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )

    def _unpads(
        self,
        attention_mask: torch.Tensor | None,
        cache: KVCache | None,
        output_attentions: bool | str,
        *,
        documents: bool = False,
    ) -> bool:
        """Whether this batch runs unpadded: a 2-D padding mask with padding in it, a bidirectional stack with
        absolute positions (relative terms and causal decoding keep the padded path), no attention maps asked
        for, and not under tracing or compilation."""
        c = self.config
        if (
            c.unpad is False
            or attention_mask is None
            or attention_mask.dim() != 2
            or attention_mask.is_floating_point()
        ):
            return False
        if c.causal or self.relative_bias is not None or cache is not None or output_attentions or tracing():
            return False
        if c.unpad == "auto" and not documents:  # packed documents: the padded path needs a (seq, seq) mask
            padding = 1.0 - float(attention_mask.bool().float().mean())
            return padding >= AUTO_UNPAD_PADDING
        return True

    def _unpadded(
        self,
        packing: Packing,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        task_type_ids: torch.Tensor | None,
        output_hidden_states: bool,
        top_queries: int | None,
        pool: bool,
    ) -> EncoderOutput:
        """The forward pass over the batch's real tokens only, packed into (tokens, hidden); the outputs are
        scattered back to (batch, seq, hidden), zeros at the padding."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.size(1), device=input_ids.device)[None] + self.config.position_offset
        position_ids = position_ids.expand_as(input_ids)

        def pack(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else packing.pack(t.expand_as(input_ids))[None]  # (1, tokens)

        ids = (pack(input_ids), pack(token_type_ids), pack(position_ids), pack(task_type_ids))
        x = self.embeddings(*ids)[0]  # (tokens, hidden)
        # [CLS]-only top layer (top_queries=1): the packed stack returns each sequence's first token, (batch, hidden).
        # Rows must start with a real token ([CLS] at position 0, right padding) and hold one sequence each.
        first = top_queries == 1 and not output_hidden_states and len(packing.lengths) == packing.batch
        first = first and min(packing.lengths) > 0 and packing.starts_rows()
        x, hidden_states, _ = self.stack(
            x, packing, output_hidden_states=output_hidden_states, top_queries=1 if first else None
        )
        if self.final_norm is not None:
            x = self.final_norm(x)
            if self.final_dropout is not None:
                x = self.final_dropout(x)
            if hidden_states is not None:
                hidden_states[-1] = x
        if first and x.size(0) == packing.batch:
            last = x[:, None]  # (batch, 1, hidden)
        else:
            last = packing.unpack(x)
        pooled = self.pooler(last) if self.pooler is not None and pool else None
        return EncoderOutput(
            last_hidden_state=last if top_queries is None else last[:, :top_queries],
            pooler_output=pooled,
            hidden_states=tuple(packing.unpack(h) for h in hidden_states) if hidden_states is not None else None,
        )

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Distinct trainable parameters (shared ones counted once)."""
        params = {id(p): p for p in self.parameters()}
        if exclude_embeddings:
            for p in self.embeddings.parameters():
                params.pop(id(p), None)
        return sum(p.numel() for p in params.values())

    # `Encoder.from_pretrained(path)` and `save_pretrained(directory)` (config.json + model.safetensors,
    # keys without prefix) are attached by bertzoo.loading: files are a layer above the model, so
    # the model does not import them (docs/architecture.md, "Layers").


def make_layer(
    c: ModelConfig, *, cross_attention: bool = False, layer_class: Callable[..., TransformerLayer] = TransformerLayer
) -> TransformerLayer:
    """One layer of the stack `c` describes (a decoder layer of an encoder-decoder with `cross_attention`);
    `layer_class`: a TransformerLayer subclass taking the same arguments (ERNIE-THU's knowledge layer)."""
    return layer_class(
        c.hidden_size,
        c.num_heads,
        c.intermediate_size,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        act=c.hidden_act,
        norm=c.norm,
        layer_norm_eps=c.layer_norm_eps,
        cross_attention=cross_attention,
        bias=c.linear_bias,
        norm_kind=c.norm_kind,
        gated=c.ffn_gated,
        head_dim=c.attention_head_size,
        attention_scale=c.attention_scale,
        ffn_dropout=c.dropout if c.inner_dropout else 0.0,
    )


def relative_bias(c: ModelConfig, *, bidirectional: bool) -> RelativePositionBias | None:
    """The relative position bias of one stack, or None when `c` has none."""
    if not c.relative_buckets:
        return None
    return RelativePositionBias(c.relative_buckets, c.relative_max_distance, c.num_heads, bidirectional=bidirectional)


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm, zero padding row."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, (LearnedPositions, RelativePositionBias)):
        nn.init.normal_(module.weight, std=std)
