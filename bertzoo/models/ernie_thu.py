"""ERNIE from Tsinghua (Zhang et al. 2019, "ERNIE: Enhanced Language Representation with Informative
Entities"): BERT's encoder whose top `knowledge_layers` layers also read knowledge-graph entity vectors.

The bottom num_layers - M layers (the T-encoder) are ordinary `TransformerLayer`s. Each of the top M
(the K-encoder's aggregators, `KnowledgeLayer`) runs

* the token self-attention of a BERT layer, with its residual and LayerNorm: w~ = LN(w + MH-ATT(w));
* an entity self-attention over the entity stream (width `entity_size`, `entity_heads` heads, residual and
  LayerNorm) in which only positions holding an entity are keys: e~ = LN(e + MH-ATT(e));
* the fusion feed-forward: h = GELU(W_t w~ + W_e e~ + b) at a position aligned with an entity,
  h = GELU(W_t w~ + b) elsewhere; tokens out LN(w~ + W_ot h + b_t), entities out LN(e~ + W_oe h + b_e) at
  the aligned positions (zero elsewhere).

W_t, W_ot, the attention and the norms are a BERT layer's modules under a BERT layer's names (the layer is
a TransformerLayer subclass), and W_e has no bias: with no entity aligned anywhere a knowledge layer
computes exactly a BERT layer, so a BERT checkpoint loads into the token stream and ERNIE-THU without
entities is that BERT. The entity input is a frozen table (num_entities, entity_size) of TransE vectors,
saved with the weights so a checkpoint is self-contained; `entity_ids` holds a row per token, the entity
at the first token of each mention and -1 (no entity) elsewhere, as in the paper's code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertzoo.config import ModelConfig
from bertzoo.errors import BertzooError, CheckpointError, ConfigError
from bertzoo.models.encoder import Encoder, EncoderOutput, init_weights, make_layer
from bertzoo.nn import Residual, SelfAttention, TransformerLayer, to_attention_mask
from bertzoo.nn.layer import LayerOutput

__all__ = ["ErnieThu", "ErnieThuConfig", "KnowledgeLayer", "KnowledgeOutput", "NO_ENTITY"]

NO_ENTITY = -1


@dataclass
class ErnieThuConfig(ModelConfig):
    """`ModelConfig` for ERNIE from Tsinghua: the top `knowledge_layers` of the `num_layers` layers are
    aggregators that fuse knowledge-graph entity vectors (the K-encoder); the layers below them are plain BERT
    layers (the T-encoder)."""

    knowledge_layers: int = 0
    entity_size: int = 100  # width of the entity stream: the TransE vectors' dimension
    entity_heads: int = 4  # heads of the entity self-attention
    num_entities: int = 0  # rows of the frozen entity table, saved with the weights (0 = no table)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.knowledge_layers <= self.num_layers:
            raise ConfigError(
                f"model.knowledge_layers={self.knowledge_layers} must be in [0, num_layers={self.num_layers}]: "
                "the knowledge layers are the top ones of the stack"
            )
        if self.entity_size <= 0 or self.entity_heads <= 0 or self.num_entities < 0:
            raise ConfigError(
                f"model.entity_size and model.entity_heads must be positive and num_entities >= 0, got "
                f"{self.entity_size}, {self.entity_heads} and {self.num_entities}"
            )
        if self.entity_size % self.entity_heads:
            raise ConfigError(
                f"model.entity_size={self.entity_size} is not divisible by model.entity_heads={self.entity_heads}; "
                "choose entity_heads dividing the entity vectors' width (4 for 100)"
            )
        if self.knowledge_layers:
            unsupported = [
                what
                for what, bad in (
                    (f"norm={self.norm!r}", self.norm != "post"),
                    (f"norm_kind={self.norm_kind!r}", self.norm_kind != "layernorm"),
                    (f"share={self.share!r}", self.share != "none"),
                    ("causal attention", self.causal),
                    ("a gated feed-forward", self.ffn_gated),
                    ("relative position buckets", self.relative_buckets > 0),
                )
                if bad
            ]
            if unsupported:
                raise ConfigError(
                    f"model.knowledge_layers={self.knowledge_layers} needs BERT's post-norm encoder layers, but the "
                    f"model has {', '.join(unsupported)}; use ERNIE-THU's presets"
                )


@dataclass
class KnowledgeOutput(EncoderOutput):
    """An EncoderOutput plus the top entity stream (batch, seq, entity_size), zero where no entity is aligned
    (None for a model without knowledge layers)."""

    entity_hidden_state: torch.Tensor | None = None


class KnowledgeLayer(TransformerLayer):
    """A K-encoder aggregator: a post-norm BERT layer whose feed-forward also reads the entity stream."""

    def __init__(self, *args, entity_size: int, entity_heads: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        intermediate = self.ffn.up.out_features
        dropout = kwargs.get("dropout", 0.1)
        eps = kwargs.get("layer_norm_eps", 1e-12)
        self.entity_attention = SelfAttention(entity_size, entity_heads, kwargs.get("attention_dropout", 0.1))
        self.entity_attention_residual = Residual(entity_size, "post", dropout, eps)
        self.entity_up = nn.Linear(entity_size, intermediate, bias=False)  # W_e: b is the token side's
        self.entity_down = nn.Linear(intermediate, entity_size)  # W_oe
        self.entity_residual = Residual(entity_size, "post", dropout, eps)

    def fuse(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        entity: torch.Tensor,
        aligned: torch.Tensor,
        entity_mask: torch.Tensor,
        need_weights: bool | str = False,
    ) -> tuple[LayerOutput, torch.Tensor]:
        """x: (batch, seq, hidden) tokens; entity: (batch, seq, entity_size), zero where not aligned;
        aligned: (batch, seq, 1) bool; entity_mask: (batch, 1, 1, seq) bool, the entity attention's keys.
        Returns the tokens' LayerOutput and the new entity stream (zero where not aligned)."""
        r = self.attention_residual
        y, probs = self.attention(x, mask, need_weights=need_weights)
        w = r.outer(x, y)  # (batch, seq, hidden)
        ey, _ = self.entity_attention(entity, entity_mask)
        e = self.entity_attention_residual.outer(entity, ey)  # (batch, seq, entity_size)
        # where, not a product: a row without entities has NaN-free but meaningless entity states there.
        h = self.ffn.up(w) + torch.where(aligned, self.entity_up(e), 0.0)  # (batch, seq, intermediate)
        h = self.ffn.act(h)
        if self.ffn.dropout is not None:
            h = self.ffn.dropout(h)
        tokens = self.ffn_residual.outer(w, self.ffn.down(h))
        entities = torch.where(aligned, self.entity_residual.outer(e, self.entity_down(h)), 0.0)
        return LayerOutput(tokens, probs), entities


class ErnieThu(Encoder):
    """ERNIE (Tsinghua): an Encoder whose top `config.knowledge_layers` layers are `KnowledgeLayer`s, with the
    frozen entity table `entity_embeddings` ((num_entities, entity_size), None when num_entities is 0).

    forward takes `entity_ids` (batch, seq) int64 beside the Encoder's arguments (-1 = no entity; None = none
    anywhere) and returns a `KnowledgeOutput`. Its keys are an Encoder's plus the entity modules, so an Encoder
    state dict loads into it with only those missing.

    `entity_list` is the kg-embed `entities.json` the table's rows follow (ids in row order and the graph's
    name): the lexicon fine-tuning links task text with. It is side data (`side_data`), saved beside the
    weights by `save_pretrained` and given back by loading, so a model directory links on its own."""

    SIDE_DATA = ("entities",)

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        c = config
        knowledge = functools.partial(KnowledgeLayer, entity_size=c.entity_size, entity_heads=c.entity_heads)
        for i in range(c.num_layers - c.knowledge_layers, c.num_layers):
            layer = make_layer(c, layer_class=knowledge)
            layer.apply(lambda m: init_weights(m, c.initializer_range))
            self.stack.layers[i] = layer
        self.entity_embeddings: nn.Embedding | None = None
        if c.num_entities:
            self.entity_embeddings = nn.Embedding(c.num_entities, c.entity_size)
            init_weights(self.entity_embeddings, c.initializer_range)
            self.entity_embeddings.requires_grad_(False)  # TransE's vectors stay as they are
        self.side_data: dict[str, Any] = {}

    @property
    def entity_list(self) -> dict[str, Any] | None:
        """The entity list (a kg-embed `entities.json` object) of the table, None when unknown."""
        return self.side_data.get("entities")

    def set_side_data(self, kind: str, obj: Any) -> None:
        """Take the entity list (`kind` "entities"): a dict whose `entities` list has a row per table row."""
        if kind != "entities":
            raise CheckpointError(f"ERNIE-THU keeps no side data of kind {kind!r}")
        entities = obj.get("entities") if isinstance(obj, dict) else None
        if not isinstance(entities, list):
            raise CheckpointError("the entity list has no 'entities' list; copy a `bertzoo kg-embed` entities.json")
        if len(entities) != self.config.num_entities:
            raise CheckpointError(
                f"the entity list names {len(entities)} entities but the model's table has "
                f"{self.config.num_entities}; use the entities.json of the kg-embed directory the model was "
                "pretrained with"
            )
        self.side_data["entities"] = obj

    def set_entity_table(self, table: torch.Tensor) -> None:
        """Copy a (num_entities, entity_size) table of entity vectors into the frozen input table."""
        want = (self.config.num_entities, self.config.entity_size)
        if self.entity_embeddings is None or tuple(table.shape) != want:
            raise BertzooError(f"the entity table is {tuple(table.shape)}, the model's config says {want}")
        with torch.no_grad():
            self.entity_embeddings.weight.copy_(table)

    def entity_inputs(
        self, entity_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(entity vectors (batch, seq, entity_size), aligned (batch, seq, 1), entity keys (batch, 1, 1, seq))."""
        b, s = x.shape[:2]
        if entity_ids is None:
            ids = torch.full((b, s), NO_ENTITY, dtype=torch.long, device=x.device)
        else:
            ids = entity_ids.to(x.device).long()
            if tuple(ids.shape) != (b, s):
                raise BertzooError(f"entity_ids has shape {tuple(ids.shape)}, the input ids ({b}, {s})")
        aligned = ids >= 0
        if attention_mask is not None and attention_mask.dim() == 2:
            aligned = aligned & attention_mask.to(x.device).bool()
        table = self.entity_embeddings
        if table is None:
            if bool(aligned.any()):
                raise BertzooError("entity_ids name entities but the model has no entity table (num_entities=0)")
            entity = x.new_zeros(b, s, self.config.entity_size)
        else:
            top = int(ids.max()) if ids.numel() else -1
            if top >= table.num_embeddings:
                raise BertzooError(
                    f"entity id {top} is outside the model's entity table of {table.num_embeddings}; the entity "
                    "links were made with another knowledge graph"
                )
            entity = torch.where(aligned[..., None], table(ids.clamp(min=0)), 0.0).to(x.dtype)
        # Keys: the positions that hold an entity. A row with none attends everywhere (its result is discarded
        # by `aligned`), so the softmax never sees an empty row.
        keys = aligned | ~aligned.any(dim=-1, keepdim=True)
        return entity, aligned[..., None], keys[:, None, None, :]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        *,
        entity_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool | str = False,
        top_queries: int | None = None,
        task_type_ids: torch.Tensor | None = None,
        pool: bool = True,
        cache=None,
    ) -> KnowledgeOutput:
        """As `Encoder.forward`, plus `entity_ids` (batch, seq). `top_queries=n` computes every position and
        keeps the first n (the entity stream needs them all); `cache` (incremental decoding) is refused."""
        if cache is not None:
            raise BertzooError("ERNIE-THU is a bidirectional encoder; it does not decode incrementally")
        seq = input_ids.size(1)
        if position_ids is None and seq > self.embeddings.max_position:
            raise BertzooError(
                f"sequence length {seq} exceeds the model's position table ({self.embeddings.max_position}); "
                "lower data.max_seq_len or use a model with a larger max_position"
            )
        x = self.embeddings(input_ids, token_type_ids, position_ids, task_type_ids)  # (batch, seq, hidden)
        mask = to_attention_mask(attention_mask)
        knowledge = self.config.knowledge_layers > 0
        entity = aligned = entity_mask = None
        if knowledge:
            entity, aligned, entity_mask = self.entity_inputs(entity_ids, attention_mask, x)
        elif entity_ids is not None and bool((entity_ids >= 0).any()):
            raise BertzooError("entity_ids were given to a model without knowledge layers (knowledge_layers=0)")
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        recompute = self.stack.gradient_checkpointing and self.training and not output_attentions
        for layer in self.stack.layers:
            if isinstance(layer, KnowledgeLayer):
                args = (x, mask, entity, aligned, entity_mask)
                if recompute:
                    out, entity = checkpoint(layer.fuse, *args, use_reentrant=False)
                else:
                    out, entity = layer.fuse(*args, need_weights=output_attentions)
            elif recompute:
                out = checkpoint(layer, x, mask, use_reentrant=False)
            else:
                out = layer(x, mask, need_weights=output_attentions)
            x = out.hidden
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(out.attention)
        pooled = self.pooler(x) if self.pooler is not None and pool else None
        if top_queries is not None:
            x = x[:, :top_queries]
        return KnowledgeOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
            entity_hidden_state=entity,
        )

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Distinct trainable parameters: the frozen entity table is not counted."""
        params = {id(p): p for p in self.parameters() if p.requires_grad}
        if exclude_embeddings:
            for p in self.embeddings.parameters():
                params.pop(id(p), None)
        return sum(p.numel() for p in params.values())
