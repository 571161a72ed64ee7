"""The architecture of a model: `ModelConfig`, the JSON `config.json` of every saved model.

Every family shares these fields; a family with more (an encoder-decoder's decoder, Transformer-XL's
memory, ELMo's character CNN, ERNIE-THU's entity stream) subclasses `ModelConfig` beside its model.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from bertzoo.config.parse import from_dict, read_json
from bertzoo.errors import ConfigError

Norm = Literal["post", "pre"]
Position = Literal["learned", "sinusoidal", "none"]
Share = Literal["none", "all", "attention", "ffn"]
Activation = Literal["gelu", "gelu_tanh", "relu"]
NormKind = Literal["layernorm", "rms"]

C = TypeVar("C", bound="ModelConfig")


@dataclass
class ModelConfig:
    """Architecture of a Transformer encoder (BERT and its family) or, with `causal`, of a
    decoder-only stack (GPT): the fields the shared parts (`bertzoo.nn`) and the `Encoder` read.

    A family whose model needs more has its own subclass beside its model (`bertzoo.models`:
    `EncoderDecoderConfig`, `TransfoXLConfig`, `XLNetConfig`, `ElmoConfig`, `ErnieThuConfig`), named
    by its recipe's `Family.config_class`; this class does not grow with the families.

    Names match Hugging Face's `BertConfig` where the concept is the same, so users can read one
    as the other; `to_hf` / `from_hf` in `bertzoo.interop.convert` translate the rest.
    """

    variant: str = "bert"  # the family (bertzoo.variants.VARIANTS), like Hugging Face's model_type
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2
    task_type_vocab_size: int = 0  # ERNIE 2.0 task embedding rows (0 = no task embedding)
    # Factorized embeddings (ALBERT): None means the embedding width equals hidden_size.
    embedding_size: int | None = None
    hidden_act: Activation = "gelu"
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    norm: Norm = "post"
    position: Position = "learned"
    share: Share = "none"
    # The word table's padding row (zero at init, no gradient); None: every id is a real token (GPT).
    pad_token_id: int | None = 0
    # Offset added to position ids (RoBERTa checkpoints start at pad_token_id + 1).
    position_offset: int = 0
    pooler: bool = True
    # The pooler's activation: tanh (BERT's pooler) or relu (DistilBERT's pre_classifier, which
    # transformers' DistilBertForSequenceClassification runs between the [CLS] state and the classifier).
    pooler_act: Literal["tanh", "relu"] = "tanh"
    tie_word_embeddings: bool = True
    # Decoder-only (GPT): each position attends to itself and the positions before it.
    causal: bool = False
    # LayerNorm over the summed embeddings (BERT); GPT feeds the sum straight into the first layer.
    embedding_norm: bool = True
    # --- layer options (the defaults are BERT's; T5 sets them) ---
    norm_kind: NormKind = "layernorm"  # rms: scale-only RMS normalisation, computed in float32 (T5)
    linear_bias: bool = True  # False: no bias in any linear of the layers (T5)
    ffn_gated: bool = False  # feed-forward act(up(x)) * gate(x): GEGLU, T5 v1.1's gated-gelu
    # Dropout also after the feed-forward's activation and after a stack's final norm (T5's placement).
    inner_dropout: bool = False
    attention_head_size: int | None = None  # width of one head; None = hidden_size / num_heads (T5's d_kv)
    attention_scale: float | None = None  # multiplies q.k; None = 1 / sqrt(head width); T5: 1.0
    # Relative position bias of each stack (T5): this many buckets of key - query distance (0 = none),
    # logarithmic up to relative_max_distance.
    relative_buckets: int = 0
    relative_max_distance: int = 128
    # Unpadded execution (docs/performance.md): a batch's real tokens run packed through every layer.
    # auto: when a batch has enough padding to gain (bidirectional stacks with absolute positions); true: whenever
    # a batch has padding; false: always the padded path.
    unpad: bool | Literal["auto"] = "auto"
    # How packed tokens attend (bertzoo.nn.unpad): auto (nested on CUDA; on the CPU split for inference, padded for
    # training), split, nested, padded.
    unpad_attention: Literal["auto", "split", "nested", "padded"] = "auto"

    def __post_init__(self) -> None:
        # Sizes first: a zero num_heads would otherwise fail the divisibility check with a ZeroDivisionError.
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.attention_head_size is not None and self.attention_head_size <= 0:
            raise ConfigError(f"model.attention_head_size must be positive or null, got {self.attention_head_size}")
        if self.attention_head_size is None and self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads={self.num_heads}; "
                "choose sizes where hidden_size % num_heads == 0 (or set model.attention_head_size)"
            )
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.norm_kind not in get_args(NormKind):
            raise ConfigError(f"model.norm_kind={self.norm_kind!r} is not allowed; choose one of: layernorm, rms")
        if self.attention_scale is not None and not self.attention_scale > 0:
            raise ConfigError(f"model.attention_scale must be positive or null (1/sqrt(d)), got {self.attention_scale}")
        if self.unpad not in (True, False, "auto"):
            raise ConfigError(f"model.unpad must be auto, true or false, got {self.unpad!r}")
        if self.unpad_attention not in ("auto", "split", "nested", "padded"):
            raise ConfigError(
                f"model.unpad_attention={self.unpad_attention!r} is not allowed; "
                "choose one of: auto, split, nested, padded"
            )
        if self.relative_buckets < 0 or 0 < self.relative_buckets < 4:
            raise ConfigError(f"model.relative_buckets must be 0 (none) or at least 4, got {self.relative_buckets}")
        if self.relative_buckets and self.relative_max_distance <= self.relative_buckets // 2:
            raise ConfigError(
                f"model.relative_max_distance={self.relative_max_distance} must exceed relative_buckets / 2 = "
                f"{self.relative_buckets // 2} (the exact buckets; the logarithmic ones reach max_distance)"
            )

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.attention_head_size or self.hidden_size // self.num_heads

    @property
    def is_encoder_decoder(self) -> bool:
        """Whether the model has a decoder stack beside its encoder (`EncoderDecoderConfig` with decoder layers)."""
        return False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        """Write as JSON (the `config.json` of a saved model)."""
        Path(path).write_text(json.dumps({"bertzoo_version": FORMAT_VERSION, **self.to_dict()}, indent=2) + "\n")

    @classmethod
    def load(cls: type[C], path: str | Path) -> C:
        """Read a `config.json` written by `save` (this class's fields; `saved_fields` says which keys count)."""
        return from_dict(cls, saved_fields(cls, read_json(path)), "model")


# The version `save` writes. Version 1 wrote every family's fields into one flat ModelConfig; version 2 writes
# the fields of the model's own config class. Both read the same (`saved_fields`).
FORMAT_VERSION = 2

# What a version-1 config.json held for the fields that now belong to one family's config class, at the value a
# model of any other family had: such a key loads as absent; any other value is a contradiction.
LEGACY_FIELDS: dict[str, Any] = {
    "num_decoder_layers": 0,
    "decoder_start_token_id": None,
    "scale_decoder_outputs": False,
    "mem_len": 0,
    "reuse_len": 0,
    "clamp_len": 0,
    "same_length": False,
    "char_filters": [],
    "max_chars": 50,
    "char_embedding_size": 16,
    "highway_layers": 0,
    "lstm_size": 0,
    "knowledge_layers": 0,
    "entity_size": 100,
    "entity_heads": 4,
    "num_entities": 0,
}


def saved_fields(cls: type[ModelConfig], raw: dict[str, Any]) -> dict[str, Any]:
    """The keys of a saved `config.json` that config class `cls` takes. Keys that are no field of any config
    (the task or objective sections beside it, `bertzoo_version`) are not the model's; a version-1 file's field of
    another family (`LEGACY_FIELDS`) is dropped at its neutral value and a ConfigError at any other."""
    names = {f.name for f in dataclasses.fields(cls)}
    for key, neutral in LEGACY_FIELDS.items():
        if key in raw and key not in names and raw[key] != neutral:
            raise ConfigError(
                f"model.{key}={raw[key]!r}: a variant {raw.get('variant', 'bert')!r} model has no {key}; remove it "
                "from config.json (or set the variant whose model has it)"
            )
    return {k: v for k, v in raw.items() if k in names}


def preset_config(
    spec: dict[str, Any],
    presets: dict[str, dict[str, Any]],
    *,
    variant: str,
    family: str,
    defaults: dict[str, Any] | None = None,
    cls: type[C] = ModelConfig,
) -> C:
    """A variant's config (`cls`) from `{"preset": name, **overrides}`: the family's defaults, then the
    preset's sizes, then the overrides; `variant` is always the family's own name."""
    spec = dict(spec)
    preset = spec.pop("preset", None)
    base: dict[str, Any] = dict(defaults or {})
    if preset is not None:
        if preset not in presets:
            raise ConfigError(f"model.preset={preset!r} is not a {family} preset; choose one of: {', '.join(presets)}")
        base.update(presets[preset])
    base.update(spec)
    base["variant"] = variant
    return from_dict(cls, base, "model")
