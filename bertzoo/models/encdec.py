"""An encoder-decoder Transformer (T5; later MASS) from the shared parts: the `Encoder` of `bertzoo.models.encoder`
reads the source, a `Decoder` stack of cross-attention layers reads the target left to right, and both
look tokens up in one word table (the encoder's embeddings). Heads and losses live in
`bertzoo.objectives.seq2seq_lm`; decoding one token at a time in `bertzoo.models.generation`.

Keys of a saved model: `encoder.*` exactly as an `Encoder`'s (so T5's encoder alone is an `Encoder`),
`decoder.stack.layers.{j}.*` with `cross.q`/`cross.kv` beside the self-attention, `decoder.final_norm`,
`decoder.relative_bias` (T5). Output names follow transformers' `Seq2SeqModelOutput`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import ModelConfig
from bertzoo.errors import BertzooError, ConfigError
from bertzoo.models.encoder import Encoder, EncoderOutput, init_weights, make_layer, relative_bias
from bertzoo.nn import TransformerStack, build_norm, causal_attention_mask, to_attention_mask
from bertzoo.nn.kv_cache import KVCache

__all__ = ["Decoder", "DecoderOutput", "EncoderDecoder", "EncoderDecoderConfig", "Seq2SeqOutput", "shift_right"]


@dataclass
class EncoderDecoderConfig(ModelConfig):
    """`ModelConfig` plus the decoder of an encoder-decoder (T5, MASS). With no decoder layers it describes the
    encoder alone (T5EncoderModel)."""

    num_decoder_layers: int = 0  # layers of the decoder stack; 0 = no decoder (the encoder alone)
    decoder_start_token_id: int | None = None  # the decoder's first input (T5: 0, its pad id)
    # Multiply the decoder's output by hidden_size ** -0.5 before the LM head (T5 v1.0, whose head is tied).
    scale_decoder_outputs: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_decoder_layers < 0:
            raise ConfigError(f"model.num_decoder_layers must be >= 0 (0 = no decoder), got {self.num_decoder_layers}")
        if self.num_decoder_layers:
            if self.causal:
                raise ConfigError("model.causal=true with num_decoder_layers: an encoder-decoder's encoder is two-way")
            if self.decoder_start_token_id is None:
                raise ConfigError("model.num_decoder_layers is set but decoder_start_token_id is not; T5 starts with 0")
        start = self.decoder_start_token_id
        if start is not None and not 0 <= start < self.vocab_size:
            raise ConfigError(f"model.decoder_start_token_id={start} is outside the vocabulary of {self.vocab_size}")

    @property
    def is_encoder_decoder(self) -> bool:
        return self.num_decoder_layers > 0


@dataclass
class DecoderOutput:
    last_hidden_state: torch.Tensor  # (batch, target, hidden)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + every layer (the last one normed)
    attentions: tuple[torch.Tensor, ...] | None = None  # (batch, heads, target, target) per layer
    cross_attentions: tuple[torch.Tensor, ...] | None = None  # (batch, heads, target, source) per layer


@dataclass
class Seq2SeqOutput:
    """transformers' Seq2SeqModelOutput names (and `logits` of Seq2SeqLMOutput, set by an LM objective)."""

    last_hidden_state: torch.Tensor  # the decoder's (batch, target, hidden)
    encoder_last_hidden_state: torch.Tensor  # (batch, source, hidden)
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    logits: torch.Tensor | None = None  # (batch, target, vocab)


class Decoder(nn.Module):
    """`num_decoder_layers` layers of causal self-attention, cross-attention to the encoder's states and
    feed-forward, with the encoder's layer options, its own relative position bias (unidirectional
    buckets) and final norm. It owns no embeddings: the caller passes embedded tokens."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.stack = TransformerStack(lambda: make_layer(c, cross_attention=True), c.num_decoder_layers, c.share)
        self.final_norm = build_norm(c.norm_kind, c.hidden_size, c.layer_norm_eps) if c.norm == "pre" else None
        self.final_dropout = nn.Dropout(c.dropout) if c.inner_dropout and self.final_norm is not None else None
        self.relative_bias = relative_bias(c, bidirectional=False)

    def forward(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor | None,
        context: torch.Tensor | None,
        context_mask: torch.Tensor | None,
        *,
        cache: KVCache | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
    ) -> DecoderOutput:
        """x: (batch, target, hidden) embedded target tokens; attention_mask: (batch, past + target) padding
        of the target or None; context: the encoder's (batch, source, hidden), None once `cache` holds its
        keys and values; context_mask: bool, broadcastable to (batch, heads, target, source)."""
        seq = x.size(1)
        past = cache.length if cache is not None else 0
        mask = to_attention_mask(attention_mask)
        if mask is not None or seq > 1:
            mask = causal_attention_mask(mask, seq, x.device, past)  # (batch|1, 1, target, past + target)
        extra = {} if self.relative_bias is None else {"bias": self.relative_bias(seq, past=past)}
        cross: list[torch.Tensor] | None = [] if output_attentions else None
        x, hidden_states, attentions = self.stack(
            x,
            mask,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            cache=cache,
            cross_attentions=cross,
            context=context,
            context_mask=context_mask,
            **extra,
        )
        if self.final_norm is not None:
            x = self.final_norm(x)
            if self.final_dropout is not None:
                x = self.final_dropout(x)
            if hidden_states is not None:
                hidden_states[-1] = x
        return DecoderOutput(
            x,
            tuple(hidden_states) if hidden_states is not None else None,
            tuple(attentions) if attentions is not None else None,
            tuple(cross) if cross is not None else None,
        )


class EncoderDecoder(nn.Module):
    """Encoder + decoder over one word table. `forward` (= `seq2seq`) runs both; `encode` and `decode`
    run one side (decoding reuses one encoding for every step)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not config.is_encoder_decoder:
            raise ConfigError("an encoder-decoder needs model.num_decoder_layers > 0")
        if config.pooler:
            raise ConfigError("an encoder-decoder reads no pooled vector; set model.pooler=false")
        if config.embedding_size and config.embedding_size != config.hidden_size:
            raise ConfigError("an encoder-decoder's LM head reads the word table's width; unset model.embedding_size")
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.decoder.apply(lambda m: init_weights(m, config.initializer_range))

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.word

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        *,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
    ) -> EncoderOutput:
        """The source side: input_ids (batch, source), attention_mask (batch, source) 1 = real token."""
        return self.encoder(
            input_ids,
            attention_mask,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            pool=False,
        )

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_position_ids: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
    ) -> DecoderOutput:
        """The target side over encoded states. `attention_mask` is the source's padding (batch, source);
        `decoder_attention_mask` the target's (batch, past + target; None: every position real).
        `decoder_position_ids` are absolute target positions for a model with a position table (MASS;
        default 0, 1, ... after the cached ones); T5's positions are relative and ignore them.
        `cache` (incremental decoding): decoder_input_ids are the positions after the cached ones; the
        first call projects the encoder states for cross-attention, later ones may pass None for them."""
        seq = decoder_input_ids.size(1)
        past = cache.length if cache is not None else 0
        embeddings = self.encoder.embeddings
        if decoder_position_ids is None and embeddings.position is not None:
            if past + seq > embeddings.max_position:
                raise BertzooError(
                    f"target length {past + seq} exceeds the model's position table ({embeddings.max_position}); "
                    "shorten the targets or lower max_new_tokens"
                )
            start = past + self.config.position_offset
            decoder_position_ids = torch.arange(start, start + seq, device=decoder_input_ids.device)[None]
        x = embeddings(decoder_input_ids, None, decoder_position_ids)  # (batch, target, hidden)
        context_mask = to_attention_mask(attention_mask)  # (batch, 1, 1, source)
        return self.decoder(
            x,
            decoder_attention_mask,
            encoder_hidden_states,
            context_mask,
            cache=cache,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
        )

    def seq2seq(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_position_ids: torch.Tensor | None = None,
        *,
        encoder_outputs: EncoderOutput | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
    ) -> Seq2SeqOutput:
        """Encode the source (unless `encoder_outputs` are given) and decode the whole target at once
        (teacher forcing). `decoder_input_ids` are required: an LM objective makes them from its labels."""
        if decoder_input_ids is None:
            raise ValueError("decoder_input_ids are required (the labels shifted right, see shift_right)")
        flags = {"output_hidden_states": output_hidden_states, "output_attentions": output_attentions}
        enc = encoder_outputs if encoder_outputs is not None else self.encode(input_ids, attention_mask, **flags)
        dec = self.decode(
            decoder_input_ids,
            enc.last_hidden_state,
            attention_mask,
            decoder_attention_mask,
            decoder_position_ids,
            **flags,
        )
        return Seq2SeqOutput(
            last_hidden_state=dec.last_hidden_state,
            encoder_last_hidden_state=enc.last_hidden_state,
            encoder_hidden_states=enc.hidden_states,
            encoder_attentions=enc.attentions,
            decoder_hidden_states=dec.hidden_states,
            decoder_attentions=dec.attentions,
            cross_attentions=dec.cross_attentions,
        )

    def forward(self, *args, **kwargs) -> Seq2SeqOutput:
        return self.seq2seq(*args, **kwargs)

    def num_parameters(self) -> int:
        """Distinct trainable parameters (shared ones counted once)."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    # `save_pretrained` comes from bertzoo.loading, like the other models'.


def shift_right(labels: torch.Tensor, start_token_id: int, pad_token_id: int) -> torch.Tensor:
    """Decoder inputs from targets (transformers' `_shift_right`): start token first, each target moved one
    position right, IGNORE_INDEX (-100) replaced by the pad id."""
    shifted = labels.new_full(labels.shape, start_token_id)
    shifted[..., 1:] = labels[..., :-1]
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)
