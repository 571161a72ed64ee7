"""ALBERT (Lan et al. 2019, "A Lite BERT"): BERT with far fewer parameters and a better sentence task.

* Factorized embeddings: tokens are embedded at a small width E (128) and projected to the hidden
  width H, so the vocabulary table costs V*E + E*H instead of V*H (`ModelConfig.embedding_size`).
* Cross-layer parameter sharing: one layer applied L times (`share="all"`, ALBERT's default), or
  only the attention or only the feed-forward sublayers shared (`share="attention"` / `"ffn"`, the
  paper's ablations).
* Sentence-order prediction (SOP): two consecutive segments of one document, in order or swapped
  (`bertzoo.data.examples.SopDataset`), classified from the pooled [CLS] vector by the same
  sentence-pair head and loss as BERT's NSP (`MaskedLM(sentence_task="sop")`).
* gelu_new (tanh-approximated GELU) and no dropout (ALBERT v2).

Hugging Face's ALBERT groups layers: `num_hidden_groups` groups of `inner_group_num` layers each;
share="all" is 1 group of 1 layer and share="none" is L groups of 1 layer. Attention-only or
FFN-only sharing has no Hugging Face counterpart and does not export.
"""

from __future__ import annotations

from typing import Any

import torch

from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.convert import fuse_qkv, normalise_hf_keys, split_qkv
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.model import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.bert import _HF_ACT, _OUR_ACT

# Paper Table 1 (E = 128, feed-forward 4H, heads H/64, all parameters shared), plus two small ones
# for CPUs sized like BERT-tiny / BERT-mini. Published sizes: base 12M, large 18M, xlarge 60M,
# xxlarge 235M (the paper's xxlarge figure is above what its own config gives: 223M; see the tests).
PRESETS: dict[str, dict[str, Any]] = {
    "albert-tiny": {
        "num_layers": 2,
        "hidden_size": 128,
        "num_heads": 2,
        "intermediate_size": 512,
        "embedding_size": 64,
    },
    "albert-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "albert-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "albert-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
    "albert-xlarge": {"num_layers": 24, "hidden_size": 2048, "num_heads": 32, "intermediate_size": 8192},
    "albert-xxlarge": {"num_layers": 12, "hidden_size": 4096, "num_heads": 64, "intermediate_size": 16384},
}
DEFAULTS: dict[str, Any] = {
    "vocab_size": 30000,
    "embedding_size": 128,
    "share": "all",
    "hidden_act": "gelu_tanh",  # Hugging Face's gelu_new
    "dropout": 0.0,  # ALBERT v2 (v1 used 0.1)
    "attention_dropout": 0.0,
    "layer_norm_eps": 1e-12,
    "type_vocab_size": 2,
    "max_position": 512,
}

OBJECTIVES = ("mlm+sop", "mlm")
DEFAULT_OBJECTIVE = "mlm+sop"
HF_MODEL_TYPE = "albert"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="albert", family="ALBERT", defaults=DEFAULTS)


def build(config: ModelConfig, objective: str = "mlm+sop") -> MaskedLM:
    """The pretraining module: encoder + MLM head (+ SOP head on the pooled [CLS] vector)."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for ALBERT; choose one of: {', '.join(OBJECTIVES)}"
        )
    return MaskedLM(Encoder(config), sentence_task="sop" if objective == "mlm+sop" else None)


def examples(cfg: PretrainConfig, corpus, tokenizer):
    """SOP pairs for mlm+sop (the only format that gives SOP labels); any single-segment or
    pair format for plain mlm (DOC-SENTENCES by default)."""
    from bertzoo.data.examples import pretraining_dataset

    sop = (cfg.objective or DEFAULT_OBJECTIVE) == "mlm+sop"
    fmt = cfg.data.input_format or ("sentence_order" if sop else "doc_sentences")
    if sop and fmt != "sentence_order":
        raise ConfigError(
            f"objective mlm+sop needs data.input_format=sentence_order (got {fmt!r}); "
            "set it, or use objective mlm for other formats"
        )
    return pretraining_dataset(fmt, corpus, tokenizer, cfg.data, seed=cfg.train.seed)


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> MaskedLM:
    """The module a checkpoint's weights load into (`bertzoo.hub.load_pretraining`): with a sentence
    head it is SOP (a Hugging Face AlbertForPreTraining's `sop_classifier`), never NSP."""
    objective = raw.get("objective") or ("mlm+sop" if "nsp_head.classifier.weight" in state else "mlm")
    return build(config, objective)


# --- Hugging Face interop ------------------------------------------------------------------

# (Hugging Face AlbertModel key, bertzoo Encoder key); `{g}` is a layer group (= our layer index).
ALBERT_EMBEDDING_KEYS: list[tuple[str, str]] = [
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
    ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
    ("encoder.embedding_hidden_mapping_in.weight", "embeddings.project.weight"),
    ("encoder.embedding_hidden_mapping_in.bias", "embeddings.project.bias"),
    ("pooler.weight", "pooler.dense.weight"),
    ("pooler.bias", "pooler.dense.bias"),
]
_LAYER = "encoder.albert_layer_groups.{g}.albert_layers.0."
ALBERT_LAYER_KEYS: list[tuple[str, str]] = [
    ("attention.dense.weight", "attention.out.weight"),
    ("attention.dense.bias", "attention.out.bias"),
    ("attention.LayerNorm.weight", "attention_residual.norm.weight"),
    ("attention.LayerNorm.bias", "attention_residual.norm.bias"),
    ("ffn.weight", "ffn.up.weight"),
    ("ffn.bias", "ffn.up.bias"),
    ("ffn_output.weight", "ffn.down.weight"),
    ("ffn_output.bias", "ffn.down.bias"),
    ("full_layer_layer_norm.weight", "ffn_residual.norm.weight"),
    ("full_layer_layer_norm.bias", "ffn_residual.norm.bias"),
]
# (Hugging Face AlbertForPreTraining head key, bertzoo MaskedLM key).
ALBERT_HEAD_KEYS: list[tuple[str, str]] = [
    ("predictions.dense.weight", "mlm_head.dense.weight"),
    ("predictions.dense.bias", "mlm_head.dense.bias"),
    ("predictions.LayerNorm.weight", "mlm_head.norm.weight"),
    ("predictions.LayerNorm.bias", "mlm_head.norm.bias"),
    ("predictions.bias", "mlm_head.decoder.bias"),
    ("sop_classifier.classifier.weight", "nsp_head.classifier.weight"),
    ("sop_classifier.classifier.bias", "nsp_head.classifier.bias"),
]
_QKV = ("query", "key", "value")
_ARCHITECTURES = {
    "BertModel": "AlbertModel",
    "BertForPreTraining": "AlbertForPreTraining",
    "BertForMaskedLM": "AlbertForMaskedLM",
    "BertForSequenceClassification": "AlbertForSequenceClassification",
    "BertForTokenClassification": "AlbertForTokenClassification",
    "BertForQuestionAnswering": "AlbertForQuestionAnswering",
    "BertForMultipleChoice": "AlbertForMultipleChoice",
}


def _groups(config: ModelConfig) -> int:
    """Stored layers: Hugging Face's num_hidden_groups (one layer per group)."""
    return 1 if config.share == "all" else config.num_layers


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face AlbertConfig dict."""
    act = raw.get("hidden_act", "gelu_new")
    if act not in _HF_ACT:
        raise CheckpointError(f"activation {act!r} in the Hugging Face config is not supported")
    pe = raw.get("position_embedding_type", "absolute")
    if pe != "absolute":
        raise CheckpointError(f"position_embedding_type={pe!r} is not supported; only 'absolute' positions convert")
    layers = raw["num_hidden_layers"]
    groups, inner = raw.get("num_hidden_groups", 1), raw.get("inner_group_num", 1)
    if inner != 1 or groups not in (1, layers):
        raise CheckpointError(
            f"ALBERT with num_hidden_groups={groups} and inner_group_num={inner} cannot be converted; bertzoo "
            "reads one shared layer (1 group of 1) or unshared layers (num_hidden_layers groups of 1)"
        )
    embedding, hidden = raw.get("embedding_size", 128), raw["hidden_size"]
    if embedding == hidden:
        raise CheckpointError(
            "this ALBERT has embedding_size == hidden_size but still a projection between them, which bertzoo's "
            "embeddings leave out when the widths are equal; it cannot be converted"
        )
    return ModelConfig(
        variant="albert",
        vocab_size=raw["vocab_size"],
        hidden_size=hidden,
        embedding_size=embedding,
        num_layers=layers,
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position=raw.get("max_position_embeddings", 512),
        type_vocab_size=raw.get("type_vocab_size", 2),
        share="all" if groups == 1 else "none",
        hidden_act=_HF_ACT[act],
        dropout=raw.get("hidden_dropout_prob", 0.0),
        attention_dropout=raw.get("attention_probs_dropout_prob", 0.0),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        initializer_range=raw.get("initializer_range", 0.02),
        pad_token_id=raw.get("pad_token_id", 0) or 0,
        tie_word_embeddings=raw.get("tie_word_embeddings", True),
    )


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face AlbertConfig dict for an exported bertzoo model."""
    if config.share in ("attention", "ffn"):
        raise CheckpointError(
            f"share={config.share!r} (only the {config.share} sublayers shared across layers) has no Hugging Face "
            "ALBERT counterpart, which shares whole layers; keep the bertzoo format (save_pretrained) for this model"
        )
    if config.norm != "post" or config.position != "learned" or config.position_offset:
        raise CheckpointError(
            "only post-norm ALBERT encoders with learned positions from 0 export to the Hugging Face 'albert' "
            "architecture"
        )
    if not config.embedding_size or config.embedding_size == config.hidden_size:
        raise CheckpointError(
            "Hugging Face ALBERT always projects embeddings to the hidden width; this model has no projection "
            "(embedding_size unset or equal to hidden_size), so it cannot export as 'albert'"
        )
    archs = []
    for name in architectures or ["BertModel"]:
        if name not in _ARCHITECTURES:
            raise CheckpointError(f"{name} has no ALBERT counterpart; keep the bertzoo format for this model")
        archs.append(_ARCHITECTURES[name])
    return {
        "model_type": "albert",
        "architectures": archs,
        "vocab_size": config.vocab_size,
        "embedding_size": config.embedding_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_hidden_groups": _groups(config),
        "inner_group_num": 1,
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


def _pairs(config: ModelConfig) -> list[tuple[str, str]]:
    """Every (HF key, bertzoo key) pair of the encoder except the fused query/key/value."""
    pairs = [(hf, f"encoder.{ours}") for hf, ours in ALBERT_EMBEDDING_KEYS]
    for g in range(_groups(config)):
        pairs += [(_LAYER.format(g=g) + hf, f"encoder.stack.layers.{g}.{ours}") for hf, ours in ALBERT_LAYER_KEYS]
    return pairs


def state_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF ALBERT tensors -> bertzoo keys (`encoder.` backbone, `mlm_head.`, `nsp_head.` for SOP).
    Returns (state, unused HF keys). Sets `config.pooler` to whether the checkpoint has one
    (AlbertForMaskedLM has none)."""
    src = normalise_hf_keys(state, prefix="albert.")
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for hf, ours in [*_pairs(config), *ALBERT_HEAD_KEYS]:
        if hf in src:
            out[ours] = src[hf]
            used.add(hf)
    for g in range(_groups(config)):
        for part in ("weight", "bias"):
            names = [f"{_LAYER.format(g=g)}attention.{n}.{part}" for n in _QKV]
            fused = fuse_qkv(src, names)
            if fused is not None:
                out[f"encoder.stack.layers.{g}.attention.qkv.{part}"] = fused
                used.update(names)
    if not config.tie_word_embeddings and "predictions.decoder.weight" in src:
        out["mlm_head.decoder.weight"] = src["predictions.decoder.weight"]
        used.add("predictions.decoder.weight")
    config.pooler = "encoder.pooler.dense.weight" in out
    ignorable = {
        "predictions.decoder.weight",
        "predictions.decoder.bias",
        "embeddings.position_ids",
        "embeddings.token_type_ids",
    }
    unused = sorted(k for k in src if k not in used and k not in ignorable)
    return out, unused


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys -> HF ALBERT keys. An empty prefix gives AlbertModel names; any other (the
    exporter passes BERT's "bert.") gives the heads models' `albert.` names."""
    if config.share in ("attention", "ffn"):
        config_to_hf(config)  # raises the explanation
    base = "albert." if prefix else ""
    out: dict[str, torch.Tensor] = {}
    for hf, ours in _pairs(config):
        if ours in state:
            out[base + hf] = state[ours]
    h = config.hidden_size
    for g in range(_groups(config)):
        for part in ("weight", "bias"):
            fused = state.get(f"encoder.stack.layers.{g}.attention.qkv.{part}")
            if fused is None:
                continue
            for n, t in zip(_QKV, split_qkv(fused, h), strict=True):
                out[f"{base}{_LAYER.format(g=g)}attention.{n}.{part}"] = t
    for hf, ours in ALBERT_HEAD_KEYS:
        if ours in state:
            out[hf] = state[ours]
    if not config.tie_word_embeddings and "mlm_head.decoder.weight" in state:
        out["predictions.decoder.weight"] = state["mlm_head.decoder.weight"]
    return {k: v.contiguous() for k, v in out.items()}
