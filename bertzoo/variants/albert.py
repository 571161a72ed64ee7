"""ALBERT (Lan et al. 2019, "A Lite BERT"): BERT with far fewer parameters and a better sentence task.

* Factorized embeddings: tokens are embedded at a small width E (128) and projected to the hidden
  width H, so the vocabulary table costs V*E + E*H instead of V*H (`ModelConfig.embedding_size`).
* Cross-layer parameter sharing: one layer applied L times (`share="all"`, ALBERT's default), or
  only the attention or only the feed-forward sublayers shared (`share="attention"` / `"ffn"`, the
  paper's ablations).
* Sentence-order prediction (SOP): two consecutive segments of one document, in order or swapped
  (`bertzoo.data.pretraining.examples.SopDataset`), classified from the pooled [CLS] vector by the same
  sentence-pair head and loss as BERT's NSP (`MaskedLM(sentence_task="sop")`).
* gelu_new (tanh-approximated GELU) and no dropout (ALBERT v2).

Hugging Face's ALBERT groups layers: `num_hidden_groups` groups of `inner_group_num` layers each;
share="all" is 1 group of 1 layer and share="none" is L groups of 1 layer. Attention-only or
FFN-only sharing has no Hugging Face counterpart and does not export.
"""

from __future__ import annotations

from typing import Any

import torch

import bertzoo.interop.hf_keys as hf_keys
from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.family import Family

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


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """SOP pairs for mlm+sop (the only format that gives SOP labels); any single-segment or
    pair format for plain mlm (DOC-SENTENCES by default)."""
    from bertzoo.data.pretraining.examples import pretraining_dataset

    sop = (cfg.objective or DEFAULT_OBJECTIVE) == "mlm+sop"
    fmt = cfg.data.input_format or ("sentence_order" if sop else "doc_sentences")
    if sop and fmt != "sentence_order":
        raise ConfigError(
            f"objective mlm+sop needs data.input_format=sentence_order (got {fmt!r}); "
            "set it, or use objective mlm for other formats"
        )
    return pretraining_dataset(fmt, corpus, tokenizer, cfg.data, seed=cfg.train.seed)


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> MaskedLM:
    """The module a checkpoint's weights load into (`bertzoo.loading.load_pretraining`): with a sentence
    head it is SOP (a Hugging Face AlbertForPreTraining's `sop_classifier`), never NSP."""
    objective = raw.get("objective") or ("mlm+sop" if "nsp_head.classifier.weight" in state else "mlm")
    return build(config, objective)


# --- Hugging Face interop ------------------------------------------------------------------

# (Hugging Face AlbertModel key, bertzoo Encoder key); `{i}` is a layer group (= our stored layer).
_LAYER = "encoder.albert_layer_groups.{i}.albert_layers.0."
ALBERT_ENCODER_KEYS: tuple[tuple[str, str], ...] = (
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
    ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
    ("encoder.embedding_hidden_mapping_in.weight", "embeddings.project.weight"),
    ("encoder.embedding_hidden_mapping_in.bias", "embeddings.project.bias"),
    ("pooler.weight", "pooler.dense.weight"),
    ("pooler.bias", "pooler.dense.bias"),
) + tuple(
    (_LAYER + hf, "stack.layers.{i}." + ours)
    for hf, ours in (
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
    )
)
# (Hugging Face AlbertForPreTraining head key, bertzoo MaskedLM key).
ALBERT_HEAD_KEYS: tuple[tuple[str, str], ...] = (
    ("predictions.dense.weight", "mlm_head.dense.weight"),
    ("predictions.dense.bias", "mlm_head.dense.bias"),
    ("predictions.LayerNorm.weight", "mlm_head.norm.weight"),
    ("predictions.LayerNorm.bias", "mlm_head.norm.bias"),
    ("predictions.bias", "mlm_head.decoder.bias"),
    ("sop_classifier.classifier.weight", "nsp_head.classifier.weight"),
    ("sop_classifier.classifier.bias", "nsp_head.classifier.bias"),
)


def _groups_and_embeddings(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """Layer groups -> `share`, and the factorized embedding width."""
    layers = fields["num_layers"]
    groups = hf_keys.hf_value(raw, "num_hidden_groups", "size", 1)
    inner = hf_keys.hf_value(raw, "inner_group_num", "size", 1)
    if inner != 1 or groups not in (1, layers):
        raise CheckpointError(
            f"ALBERT with num_hidden_groups={groups} and inner_group_num={inner} cannot be converted; bertzoo "
            "reads one shared layer (1 group of 1) or unshared layers (num_hidden_layers groups of 1)"
        )
    embedding = hf_keys.hf_value(raw, "embedding_size", "size", 128)
    if embedding == fields["hidden_size"]:
        raise CheckpointError(
            "this ALBERT has embedding_size == hidden_size but still a projection between them, which bertzoo's "
            "embeddings leave out when the widths are equal; it cannot be converted"
        )
    return {"embedding_size": embedding, "share": "all" if groups == 1 else "none"}


HF = HFFamily(
    model_type="albert",
    variant="albert",
    base="albert.",
    encoder_keys=ALBERT_ENCODER_KEYS,
    qkv=_LAYER + "attention.{n}.{part}",
    head_keys=ALBERT_HEAD_KEYS,
    untied_decoder="predictions.decoder.weight",
    tied_copies=frozenset({"predictions.decoder.weight", "predictions.decoder.bias"}),
    config_defaults={"hidden_act": "gelu_new", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    read_fields=_groups_and_embeddings,
    architectures={name: name.replace("Bert", "Albert", 1) for name in hf_keys.BERT_CLASSES},
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face AlbertConfig dict: whole-layer sharing is one group of one layer, none is
    num_hidden_layers groups; attention- or FFN-only sharing has no counterpart."""
    hf_keys.check_exportable(config, "albert", shares=("none", "all"), factorized=True)
    return hf_keys.config_to_hf(
        config,
        HF,
        architectures,
        embedding_size=config.embedding_size,
        num_hidden_groups=hf_keys.stored_layers(config),
        inner_group_num=1,
    )


FAMILY = Family(
    name="albert",
    title="ALBERT",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    defaults=DEFAULTS,
    pretraining_model=pretraining_model,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
