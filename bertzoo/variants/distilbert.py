"""DistilBERT (Sanh et al. 2019, "DistilBERT, a distilled version of BERT: smaller, faster, cheaper and
lighter"): the student of a BERT teacher, half as deep (6 layers of BERT-base's width), initialised from
every other teacher layer and trained with a soft-target, masked-LM and cosine loss
(`bertzoo.objectives.distill`, `bertzoo distill`); pretrained on its own it is a masked LM (`MaskedLM`).

Architecturally it is BERT's post-norm encoder without the token-type embeddings (type_vocab_size 0)
and without a pooler, LayerNorm eps fixed at 1e-12, learned positions. Its sequence classifier reads
relu(pre_classifier([CLS])): our encoder's pooler with `pooler_act="relu"`, which fine-tuning adds
(`bertzoo.train.finetune.add_pooler`), then the usual dropout + linear head.

Hugging Face: `distilbert` (DistilBertModel, DistilBertForMaskedLM, DistilBertFor<Task>); the base model's
keys are `embeddings.*` and `transformer.layer.{i}.*` with separate q_lin/k_lin/v_lin projections,
`pre_classifier` is our pooler's dense layer, the MLM head is vocab_transform / vocab_layer_norm /
vocab_projector. A config with sinusoidal_pos_embds=true imports exactly as learned positions: its
checkpoint stores the table, and transformers 5.x trains it like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import REQUIRED, HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.nn.adapter import has_adapters
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.family import Family

# distilbert-base is the paper's student (66M parameters with the 30,522-token uncased vocabulary);
# distilbert-mini a CPU-sized one, BERT-mini's width three layers deep.
PRESETS: dict[str, dict[str, Any]] = {
    "distilbert-mini": {"num_layers": 3, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "distilbert-base": {"num_layers": 6, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
}
# What every DistilBERT shares. The pooler is off (DistilBertModel has none); when fine-tuning adds one
# it is the relu pre_classifier of DistilBertForSequenceClassification.
DEFAULTS: dict[str, Any] = {
    "type_vocab_size": 0,
    "pooler": False,
    "pooler_act": "relu",
    "layer_norm_eps": 1e-12,  # transformers hard-codes it
}
LAYER_NORM_EPS = 1e-12

OBJECTIVES = ("mlm",)
DEFAULT_OBJECTIVE = "mlm"
# DistilBERT dropped NSP and trained on running text (RoBERTa's recipe); the first is the default.
INPUT_FORMATS = ("full_sentences", "doc_sentences")


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="distilbert", family="DistilBERT", defaults=DEFAULTS)


def build(config: ModelConfig, objective: str = "mlm", **args: Any) -> MaskedLM:
    """The pretraining module: encoder + MLM head (no sentence-pair task, no pooler)."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for DistilBERT (it has no sentence-pair task); "
            f"choose one of: {', '.join(OBJECTIVES)}, or distil it from a teacher with `bertzoo distill`"
        )
    if args:
        raise ConfigError(f"DistilBERT takes no objective_args (got {', '.join(sorted(args))}); remove them")
    return MaskedLM(Encoder(config), sentence_task=None)


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """FULL-SENTENCES (default) or DOC-SENTENCES examples: one segment of running text, no pairs."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "DistilBERT")


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a DistilBERT pretraining checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return MaskedLM(Encoder(config), sentence_task=None)


# --- Hugging Face interop: DistilBertModel / DistilBertForMaskedLM / DistilBertFor<Task> -------------

# (Hugging Face DistilBertModel key, bertzoo Encoder key). `{i}` is a layer index.
DISTILBERT_ENCODER_KEYS: tuple[tuple[str, str], ...] = (
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
    ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
) + tuple(
    (f"transformer.layer.{{i}}.{hf}.{part}", f"stack.layers.{{i}}.{ours}.{part}")
    for hf, ours in (
        ("attention.out_lin", "attention.out"),
        ("sa_layer_norm", "attention_residual.norm"),
        ("ffn.lin1", "ffn.up"),
        ("ffn.lin2", "ffn.down"),
        ("output_layer_norm", "ffn_residual.norm"),
    )
    for part in ("weight", "bias")
)
# (Hugging Face head key, bertzoo key): DistilBertForMaskedLM's head, and the pre_classifier of the
# sequence classifier and multiple choice classes, which is our encoder's (relu) pooler. Both sit beside
# `distilbert.`, not inside it.
DISTILBERT_HEAD_KEYS: tuple[tuple[str, str], ...] = (
    ("vocab_transform.weight", "mlm_head.dense.weight"),
    ("vocab_transform.bias", "mlm_head.dense.bias"),
    ("vocab_layer_norm.weight", "mlm_head.norm.weight"),
    ("vocab_layer_norm.bias", "mlm_head.norm.bias"),
    ("vocab_projector.bias", "mlm_head.decoder.bias"),
    ("pre_classifier.weight", "encoder.pooler.dense.weight"),
    ("pre_classifier.bias", "encoder.pooler.dense.bias"),
)

# Hugging Face DistilBertConfig key -> (ModelConfig field, kind, default), as hf_keys.HF_CONFIG_FIELDS for
# BERT. seq_classif_dropout and qa_dropout are the task heads' (technique.head_dropout), not the model's.
DISTILBERT_CONFIG_FIELDS: dict[str, tuple[str, str, Any]] = {
    "vocab_size": ("vocab_size", "size", REQUIRED),
    "dim": ("hidden_size", "size", REQUIRED),
    "n_layers": ("num_layers", "size", REQUIRED),
    "n_heads": ("num_heads", "size", REQUIRED),
    "hidden_dim": ("intermediate_size", "size", REQUIRED),
    "max_position_embeddings": ("max_position", "size", 512),
    "activation": ("hidden_act", "activation", "gelu"),
    "dropout": ("dropout", "probability", 0.1),
    "attention_dropout": ("attention_dropout", "probability", 0.1),
    "initializer_range": ("initializer_range", "non-negative", 0.02),
    "pad_token_id": ("pad_token_id", "count", 0),
    "tie_word_embeddings": ("tie_word_embeddings", "bool", True),
}


def _fixed_fields(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """What DistilBertConfig does not state because the architecture fixes it."""
    # A sinusoidal table is still a stored parameter (transformers 5.x trains it): the checkpoint's table,
    # looked up by position, is exactly a learned table. Read the flag only to validate its type.
    hf_keys.hf_value(raw, "sinusoidal_pos_embds", "bool", False)
    return {
        "type_vocab_size": 0,
        "layer_norm_eps": LAYER_NORM_EPS,
        "position": "learned",
        "pooler_act": "relu",  # pre_classifier, when the checkpoint has one (state_from_hf sets `pooler`)
    }


HF = HFFamily(
    model_type="distilbert",
    variant="distilbert",
    base="distilbert.",
    encoder_keys=DISTILBERT_ENCODER_KEYS,
    qkv="transformer.layer.{i}.attention.{n}.{part}",
    qkv_names=("q_lin", "k_lin", "v_lin"),
    head_keys=DISTILBERT_HEAD_KEYS,
    untied_decoder="vocab_projector.weight",
    tied_copies=frozenset({"vocab_projector.weight"}),
    read_fields=_fixed_fields,
    architectures={
        "BertModel": "DistilBertModel",
        "BertForMaskedLM": "DistilBertForMaskedLM",
        "BertForSequenceClassification": "DistilBertForSequenceClassification",
        "BertForTokenClassification": "DistilBertForTokenClassification",
        "BertForQuestionAnswering": "DistilBertForQuestionAnswering",
        "BertForMultipleChoice": "DistilBertForMultipleChoice",
    },
    refused={
        "BertForPreTraining": "DistilBERT has no next-sentence head (its pretraining class is DistilBertForMaskedLM)",
    },
    config_fields=DISTILBERT_CONFIG_FIELDS,
)
# The classes whose head reads pre_classifier (our pooler), by the BERT name the generic exporter asks for.
POOLED_CLASSES = ("BertForSequenceClassification", "BertForMultipleChoice")


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face DistilBertConfig dict; CheckpointError listing what DistilBERT cannot hold.
    BERT class names from the generic exporter become DistilBERT's."""
    archs = list(architectures or ["BertModel"])
    problems = []
    for name, want in (
        ("causal", False),
        ("embedding_norm", True),
        ("norm", "post"),
        ("position", "learned"),
        ("share", "none"),
        ("type_vocab_size", 0),
        ("task_type_vocab_size", 0),
        ("position_offset", 0),
        ("layer_norm_eps", LAYER_NORM_EPS),
    ):
        if getattr(config, name) != want:
            problems.append(f"{name}={getattr(config, name)!r} (it has {want!r})")
    if config.embedding_size and config.embedding_size != config.hidden_size:
        problems.append(f"factorized embeddings (embedding_size={config.embedding_size})")
    if any(a in POOLED_CLASSES for a in archs) and config.pooler and config.pooler_act != "relu":
        problems.append(f"a {config.pooler_act} pooler (its pre_classifier is relu)")
    if problems:
        raise CheckpointError(
            f"cannot export to the Hugging Face 'distilbert' architecture: the model has {'; '.join(problems)}; "
            "keep the bertzoo format (save_pretrained) for this model"
        )
    return {
        "model_type": HF.model_type,
        "architectures": [hf_keys.hf_architecture(HF, a) for a in archs],
        "vocab_size": config.vocab_size,
        "dim": config.hidden_size,
        "n_layers": config.num_layers,
        "n_heads": config.num_heads,
        "hidden_dim": config.intermediate_size,
        "max_position_embeddings": config.max_position,
        "sinusoidal_pos_embds": False,
        "activation": hf_keys.OUR_ACTIVATIONS[config.hidden_act],
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        # The task heads' dropout is ours at the model's rate (Hugging Face's defaults are 0.2 and 0.1).
        "seq_classif_dropout": config.dropout,
        "qa_dropout": config.dropout,
        "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": bool(config.tie_word_embeddings),
    }


def export_hf(module: nn.Module, directory: str | Path) -> Path | None:
    """The exporter's hook: a MaskedLM as DistilBertForMaskedLM, an Encoder as DistilBertModel. Neither
    class has a pooler, so an encoder's (a fine-tuned relu pre_classifier) is left out: it exports only
    with its classifier, as DistilBertForSequenceClassification (the generic task exporter).
    None: not one of these modules (the generic exporter reports it)."""
    if isinstance(module, MaskedLM):
        state, prefix, arch = module.state_dict(), "distilbert.", "BertForMaskedLM"
        extra = sorted({k.split(".")[0] for k in state if not k.startswith(("encoder.", "mlm_head."))})
        if extra:
            raise CheckpointError(
                f"the model has heads besides the masked-LM one ({', '.join(extra)}), which Hugging Face "
                "DistilBertForMaskedLM has no place for; save it with save_pretrained (bertzoo format) instead"
            )
    elif isinstance(module, Encoder):
        state, prefix, arch = {f"encoder.{k}": v for k, v in module.state_dict().items()}, "", "BertModel"
    else:
        return None
    if has_adapters(module):
        raise CheckpointError(
            "the model has adapters, which the Hugging Face DistilBERT architecture has no place for; "
            "save it with save_pretrained (bertzoo format) instead"
        )
    config = module.config
    hf_config = config_to_hf(config, [arch])
    state = {k: v for k, v in state.items() if not k.startswith("encoder.pooler.")}
    hf_state = hf_keys.state_to_hf(state, config, HF, prefix=prefix)
    return io.write_model_dir(directory, hf_state, hf_config)


FAMILY = Family(
    name="distilbert",
    title="DistilBERT",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    defaults=DEFAULTS,
    pretraining_model=pretraining_model,
    export_hf=export_hf,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
