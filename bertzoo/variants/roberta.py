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

import bertzoo.interop.hf_keys as hf_keys
from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.bert import BERT_ENCODER_KEYS, BERT_QKV
from bertzoo.variants.family import Family

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
# The first is the default: the paper's final recipe (DOC-SENTENCES is marginally better).
INPUT_FORMATS = ("full_sentences", "doc_sentences")


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


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """FULL-SENTENCES (default) or DOC-SENTENCES examples; `data.tokens_per_batch` > 0 groups them
    into token-budget batches (see bertzoo.data.pretraining.token_batches)."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "RoBERTa")


# --- Hugging Face interop: BERT's encoder keys under `roberta.`, its own LM head ------------------

# (Hugging Face RobertaForMaskedLM head key, bertzoo MaskedLM key).
ROBERTA_HEAD_KEYS: tuple[tuple[str, str], ...] = (
    ("lm_head.dense.weight", "mlm_head.dense.weight"),
    ("lm_head.dense.bias", "mlm_head.dense.bias"),
    ("lm_head.layer_norm.weight", "mlm_head.norm.weight"),
    ("lm_head.layer_norm.bias", "mlm_head.norm.bias"),
    ("lm_head.bias", "mlm_head.decoder.bias"),
)


def _positions(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """Hugging Face's table counts the rows 0..pad that real tokens never use; ours does not."""
    pad, table = fields["pad_token_id"], fields["max_position"]
    if table <= pad + 1:
        raise CheckpointError(f"max_position_embeddings={table} leaves no position after pad_token_id={pad}")
    return {"max_position": table - pad - 1, "position_offset": pad + 1}


HF = HFFamily(
    model_type="roberta",
    variant="roberta",
    base="roberta.",
    encoder_keys=BERT_ENCODER_KEYS,
    qkv=BERT_QKV,
    head_keys=ROBERTA_HEAD_KEYS,
    untied_decoder="lm_head.decoder.weight",
    tied_copies=frozenset({"lm_head.decoder.weight", "lm_head.decoder.bias"}),
    config_defaults={
        "pad_token_id": 1,
        "max_position_embeddings": 514,
        "type_vocab_size": 1,
        "layer_norm_eps": 1e-5,
    },
    read_fields=_positions,
    architectures={
        "BertModel": "RobertaModel",
        "BertForMaskedLM": "RobertaForMaskedLM",
        "BertForTokenClassification": "RobertaForTokenClassification",
        "BertForQuestionAnswering": "RobertaForQuestionAnswering",
        "BertForMultipleChoice": "RobertaForMultipleChoice",
    },
    refused={
        "BertForSequenceClassification": "RobertaForSequenceClassification has its own head (dense + tanh + "
        "out_proj on <s>), not the pooler + linear classifier this model has",
    },
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face RobertaConfig dict for an exported bertzoo model."""
    pad = config.pad_token_id
    hf_keys.check_exportable(config, "roberta", offset=pad + 1, offset_name=f"pad_token_id + 1 = {pad + 1}")
    return hf_keys.config_to_hf(config, HF, architectures)


FAMILY = Family(
    name="roberta",
    title="RoBERTa",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    defaults=DEFAULTS,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
