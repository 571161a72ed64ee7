"""BERT (Devlin et al. 2018): post-norm encoder, learned positions, MLM + NSP pretraining."""

from __future__ import annotations

from typing import Any

import torch

from bertzoo.config import ModelConfig, preset_config
from bertzoo.convert import expand, fuse_qkv, normalise_hf_keys, split_qkv
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.model import Encoder
from bertzoo.objectives.mlm import MaskedLM

# Sizes from the BERT paper (base, large) and Turc et al. 2019, "Well-Read Students Learn Better"
# (tiny .. medium). The intermediate size is always 4x hidden and heads have 64 dims.
PRESETS: dict[str, dict[str, Any]] = {
    "bert-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "bert-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "bert-small": {"num_layers": 4, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "bert-medium": {"num_layers": 8, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "bert-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "bert-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}

OBJECTIVES = ("mlm+nsp", "mlm")
DEFAULT_OBJECTIVE = "mlm+nsp"
HF_MODEL_TYPE = "bert"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="bert", family="BERT")


def build(config: ModelConfig, objective: str = "mlm+nsp") -> MaskedLM:
    """The pretraining module: encoder + MLM head (+ NSP head)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for BERT; choose one of: {', '.join(OBJECTIVES)}")
    return MaskedLM(Encoder(config), sentence_task="nsp" if objective == "mlm+nsp" else None)


# --- Hugging Face interop ------------------------------------------------------------------

_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_OUR_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}

# (Hugging Face BertModel key, bertzoo Encoder key). `{i}` is a layer index.
BERT_ENCODER_KEYS: list[tuple[str, str]] = [
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
    ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
    ("encoder.layer.{i}.attention.output.dense.weight", "stack.layers.{i}.attention.out.weight"),
    ("encoder.layer.{i}.attention.output.dense.bias", "stack.layers.{i}.attention.out.bias"),
    ("encoder.layer.{i}.attention.output.LayerNorm.weight", "stack.layers.{i}.attention_residual.norm.weight"),
    ("encoder.layer.{i}.attention.output.LayerNorm.bias", "stack.layers.{i}.attention_residual.norm.bias"),
    ("encoder.layer.{i}.intermediate.dense.weight", "stack.layers.{i}.ffn.up.weight"),
    ("encoder.layer.{i}.intermediate.dense.bias", "stack.layers.{i}.ffn.up.bias"),
    ("encoder.layer.{i}.output.dense.weight", "stack.layers.{i}.ffn.down.weight"),
    ("encoder.layer.{i}.output.dense.bias", "stack.layers.{i}.ffn.down.bias"),
    ("encoder.layer.{i}.output.LayerNorm.weight", "stack.layers.{i}.ffn_residual.norm.weight"),
    ("encoder.layer.{i}.output.LayerNorm.bias", "stack.layers.{i}.ffn_residual.norm.bias"),
    ("pooler.dense.weight", "pooler.dense.weight"),
    ("pooler.dense.bias", "pooler.dense.bias"),
]

# (Hugging Face BertForPreTraining head key, bertzoo MaskedLM key).
BERT_HEAD_KEYS: list[tuple[str, str]] = [
    ("cls.predictions.transform.dense.weight", "mlm_head.dense.weight"),
    ("cls.predictions.transform.dense.bias", "mlm_head.dense.bias"),
    ("cls.predictions.transform.LayerNorm.weight", "mlm_head.norm.weight"),
    ("cls.predictions.transform.LayerNorm.bias", "mlm_head.norm.bias"),
    ("cls.predictions.bias", "mlm_head.decoder.bias"),
    ("cls.seq_relationship.weight", "nsp_head.classifier.weight"),
    ("cls.seq_relationship.bias", "nsp_head.classifier.bias"),
]

_QKV = ("query", "key", "value")


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face BertConfig dict."""
    act = raw.get("hidden_act", "gelu")
    if act not in _HF_ACT:
        raise CheckpointError(f"activation {act!r} in the Hugging Face config is not supported")
    pe = raw.get("position_embedding_type", "absolute")
    if pe != "absolute":
        raise CheckpointError(f"position_embedding_type={pe!r} is not supported; only 'absolute' positions convert")
    return ModelConfig(
        variant="bert",
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position=raw.get("max_position_embeddings", 512),
        type_vocab_size=raw.get("type_vocab_size", 2),
        hidden_act=_HF_ACT[act],
        dropout=raw.get("hidden_dropout_prob", 0.1),
        attention_dropout=raw.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        initializer_range=raw.get("initializer_range", 0.02),
        pad_token_id=raw.get("pad_token_id", 0) or 0,
    )


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face BertConfig dict for an exported bertzoo model."""
    if config.norm != "post" or config.position != "learned" or config.share != "none" or config.embedding_size:
        raise CheckpointError(
            "only plain BERT encoders (post-norm, learned positions, no sharing, no factorized embeddings) "
            "export to the Hugging Face 'bert' architecture"
        )
    return {
        "model_type": "bert",
        "architectures": architectures or ["BertModel"],
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "max_position_embeddings": config.max_position,
        "type_vocab_size": config.type_vocab_size,
        "hidden_act": _OUR_ACT[config.hidden_act],
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "layer_norm_eps": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
    }


def state_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF BERT tensors -> bertzoo keys. Encoder keys get the prefix `encoder.`; pretraining heads map
    to `mlm_head.`/`nsp_head.`. Returns (state, unused HF keys)."""
    src = normalise_hf_keys(state)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for hf, ours in expand(BERT_ENCODER_KEYS, config.num_layers):
        if hf in src:
            out[f"encoder.{ours}"] = src[hf]
            used.add(hf)
    for i in range(config.num_layers):
        for part in ("weight", "bias"):
            names = [f"encoder.layer.{i}.attention.self.{n}.{part}" for n in _QKV]
            fused = fuse_qkv(src, names)
            if fused is not None:
                out[f"encoder.stack.layers.{i}.attention.qkv.{part}"] = fused
                used.update(names)
    for hf, ours in BERT_HEAD_KEYS:
        if hf in src:
            out[ours] = src[hf]
            used.add(hf)
    # The decoder weight is tied to the word embeddings; its copy in HF files is redundant.
    ignorable = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "embeddings.position_ids"}
    unused = sorted(k for k in src if k not in used and k not in ignorable)
    return out, unused


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys (with `encoder.` prefix for the backbone) -> HF BERT keys.

    prefix="bert." gives BertForPreTraining / BertForMaskedLM names; "" gives BertModel names.
    """
    out: dict[str, torch.Tensor] = {}
    for hf, ours in expand(BERT_ENCODER_KEYS, config.num_layers):
        if f"encoder.{ours}" in state:
            out[prefix + hf] = state[f"encoder.{ours}"]
    h = config.hidden_size
    for i in range(config.num_layers):
        for part in ("weight", "bias"):
            fused = state.get(f"encoder.stack.layers.{i}.attention.qkv.{part}")
            if fused is None:
                continue
            for n, t in zip(_QKV, split_qkv(fused, h), strict=True):
                out[f"{prefix}encoder.layer.{i}.attention.self.{n}.{part}"] = t
    for hf, ours in BERT_HEAD_KEYS:
        if ours in state:
            out[hf] = state[ours]
    # The decoder weight (tied to the word embeddings) and decoder.bias (an alias of
    # cls.predictions.bias) are not written: transformers re-ties both on load.
    return {k: v.contiguous() for k, v in out.items()}
