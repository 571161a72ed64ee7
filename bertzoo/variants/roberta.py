"""RoBERTa (Liu et al. 2019, "A Robustly Optimized BERT Pretraining Approach"): BERT's encoder,
trained differently: no NSP, dynamic masking, FULL-SENTENCES (or DOC-SENTENCES) inputs of up to
512 tokens, large batches (Adam beta2 0.98), a 50k byte-level BPE vocabulary.

Architecturally the differences from BERT are small and all in the config: one segment embedding
(type_vocab_size 1), LayerNorm eps 1e-5, no pooler in the pretraining model, and learned positions
that start at pad_token_id + 1 (Hugging Face's RobertaEmbeddings numbers real tokens from there;
its table has max_position + pad + 1 rows), which is `ModelConfig.position_offset`.
"""

from __future__ import annotations

from typing import Any

import torch

from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.convert import expand, fuse_qkv, normalise_hf_keys, split_qkv
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.model import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.bert import _HF_ACT, _OUR_ACT, BERT_ENCODER_KEYS

# base and large are the paper's; the smaller ones reuse BERT's compact sizes (Turc et al. 2019).
PRESETS: dict[str, dict[str, Any]] = {
    "roberta-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "roberta-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "roberta-small": {"num_layers": 4, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "roberta-medium": {"num_layers": 8, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "roberta-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "roberta-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}
# What every RoBERTa shares (the released checkpoints' config); vocab and pad come from the
# tokenizer when pretraining (50265 and <pad> = 1 for the original GPT-2 BPE vocabulary).
DEFAULTS: dict[str, Any] = {
    "vocab_size": 50265,
    "pad_token_id": 1,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "max_position": 512,
    "pooler": False,  # RobertaForMaskedLM has none; fine-tuning may add one
}

OBJECTIVES = ("mlm",)
DEFAULT_OBJECTIVE = "mlm"
INPUT_FORMATS = ("full_sentences", "doc_sentences")
DEFAULT_INPUT_FORMAT = "full_sentences"  # the paper's final recipe (DOC-SENTENCES is marginally better)
HF_MODEL_TYPE = "roberta"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields). `position_offset`
    defaults to pad_token_id + 1, as in RoBERTa checkpoints."""
    config = preset_config(spec, PRESETS, variant="roberta", family="RoBERTa", defaults=DEFAULTS)
    if "position_offset" not in spec:
        config.position_offset = config.pad_token_id + 1
    return config


def build(config: ModelConfig, objective: str = "mlm") -> MaskedLM:
    """The pretraining module: encoder + MLM head (no sentence-pair task)."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for RoBERTa (it drops NSP); "
            f"choose one of: {', '.join(OBJECTIVES)}"
        )
    return MaskedLM(Encoder(config), sentence_task=None)


def examples(cfg: PretrainConfig, corpus, tokenizer):
    """FULL-SENTENCES (default) or DOC-SENTENCES examples; `data.tokens_per_batch` > 0 groups them
    into token-budget batches (see bertzoo.data.token_batches)."""
    from bertzoo.data.examples import pretraining_dataset

    fmt = cfg.data.input_format or DEFAULT_INPUT_FORMAT
    if fmt not in INPUT_FORMATS:
        raise ConfigError(
            f"data.input_format={fmt!r} is not a RoBERTa input format (it has no sentence-pair task); "
            f"choose one of: {', '.join(INPUT_FORMATS)}"
        )
    return pretraining_dataset(fmt, corpus, tokenizer, cfg.data, seed=cfg.train.seed)


# --- Hugging Face interop ------------------------------------------------------------------

# (Hugging Face RobertaForMaskedLM head key, bertzoo MaskedLM key).
ROBERTA_HEAD_KEYS: list[tuple[str, str]] = [
    ("lm_head.dense.weight", "mlm_head.dense.weight"),
    ("lm_head.dense.bias", "mlm_head.dense.bias"),
    ("lm_head.layer_norm.weight", "mlm_head.norm.weight"),
    ("lm_head.layer_norm.bias", "mlm_head.norm.bias"),
    ("lm_head.bias", "mlm_head.decoder.bias"),
]
_QKV = ("query", "key", "value")
# Hugging Face class for each class name bertzoo's exporter asks for (it speaks BERT's names).
_ARCHITECTURES = {
    "BertModel": "RobertaModel",
    "BertForMaskedLM": "RobertaForMaskedLM",
    "BertForTokenClassification": "RobertaForTokenClassification",
    "BertForQuestionAnswering": "RobertaForQuestionAnswering",
    "BertForMultipleChoice": "RobertaForMultipleChoice",
}


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face RobertaConfig dict."""
    act = raw.get("hidden_act", "gelu")
    if act not in _HF_ACT:
        raise CheckpointError(f"activation {act!r} in the Hugging Face config is not supported")
    pe = raw.get("position_embedding_type", "absolute")
    if pe != "absolute":
        raise CheckpointError(f"position_embedding_type={pe!r} is not supported; only 'absolute' positions convert")
    pad = raw.get("pad_token_id", 1)
    pad = 1 if pad is None else int(pad)
    table = raw.get("max_position_embeddings", 514)
    if table <= pad + 1:
        raise CheckpointError(f"max_position_embeddings={table} leaves no position after pad_token_id={pad}")
    return ModelConfig(
        variant="roberta",
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position=table - pad - 1,  # rows 0..pad are never used by real tokens
        type_vocab_size=raw.get("type_vocab_size", 1),
        hidden_act=_HF_ACT[act],
        dropout=raw.get("hidden_dropout_prob", 0.1),
        attention_dropout=raw.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-5),
        initializer_range=raw.get("initializer_range", 0.02),
        pad_token_id=pad,
        position_offset=pad + 1,
        tie_word_embeddings=raw.get("tie_word_embeddings", True),
    )


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face RobertaConfig dict for an exported bertzoo model."""
    if config.norm != "post" or config.position != "learned" or config.share != "none" or config.embedding_size:
        raise CheckpointError(
            "only plain RoBERTa encoders (post-norm, learned positions, no sharing, no factorized embeddings) "
            "export to the Hugging Face 'roberta' architecture"
        )
    if config.position_offset != config.pad_token_id + 1:
        raise CheckpointError(
            f"Hugging Face RoBERTa numbers positions from pad_token_id + 1 = {config.pad_token_id + 1}, but this "
            f"model uses position_offset={config.position_offset}; it cannot export to the 'roberta' architecture"
        )
    archs = []
    for name in architectures or ["BertModel"]:
        if name == "BertForSequenceClassification":
            raise CheckpointError(
                "RobertaForSequenceClassification has its own head (dense + tanh + out_proj on <s>), not the "
                "pooler + linear classifier this model has; keep the bertzoo format for this model"
            )
        if name not in _ARCHITECTURES:
            raise CheckpointError(f"{name} has no RoBERTa counterpart; keep the bertzoo format for this model")
        archs.append(_ARCHITECTURES[name])
    return {
        "model_type": "roberta",
        "architectures": archs,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "max_position_embeddings": config.max_position + config.position_offset,
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
    """HF RoBERTa tensors -> bertzoo keys (`encoder.` backbone, `mlm_head.`). Returns (state, unused
    HF keys). Sets `config.pooler` to whether the checkpoint has one (RobertaModel does,
    RobertaForMaskedLM does not), so the encoder built from `config` matches the weights."""
    src = normalise_hf_keys(state, prefix="roberta.")
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
    for hf, ours in ROBERTA_HEAD_KEYS:
        if hf in src:
            out[ours] = src[hf]
            used.add(hf)
    if not config.tie_word_embeddings and "lm_head.decoder.weight" in src:
        out["mlm_head.decoder.weight"] = src["lm_head.decoder.weight"]
        used.add("lm_head.decoder.weight")
    config.pooler = "encoder.pooler.dense.weight" in out
    # The decoder weight is tied to the word embeddings and decoder.bias is lm_head.bias.
    ignorable = {
        "lm_head.decoder.weight",
        "lm_head.decoder.bias",
        "embeddings.position_ids",
        "embeddings.token_type_ids",
    }
    unused = sorted(k for k in src if k not in used and k not in ignorable)
    return out, unused


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys -> HF RoBERTa keys. An empty prefix gives RobertaModel names; any other (the
    exporter passes BERT's "bert.") gives the heads models' `roberta.` names."""
    base = "roberta." if prefix else ""
    out: dict[str, torch.Tensor] = {}
    for hf, ours in expand(BERT_ENCODER_KEYS, config.num_layers):
        if f"encoder.{ours}" in state:
            out[base + hf] = state[f"encoder.{ours}"]
    h = config.hidden_size
    for i in range(config.num_layers):
        for part in ("weight", "bias"):
            fused = state.get(f"encoder.stack.layers.{i}.attention.qkv.{part}")
            if fused is None:
                continue
            for n, t in zip(_QKV, split_qkv(fused, h), strict=True):
                out[f"{base}encoder.layer.{i}.attention.self.{n}.{part}"] = t
    for hf, ours in ROBERTA_HEAD_KEYS:
        if ours in state:
            out[hf] = state[ours]
    if not config.tie_word_embeddings and "mlm_head.decoder.weight" in state:
        out["lm_head.decoder.weight"] = state["mlm_head.decoder.weight"]
    return {k: v.contiguous() for k, v in out.items()}
