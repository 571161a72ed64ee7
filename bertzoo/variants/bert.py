"""BERT (Devlin et al. 2018): post-norm encoder, learned positions, MLM + NSP pretraining."""

from __future__ import annotations

from typing import Any

import bertzoo.interop.hf_keys as hf_keys
from bertzoo.config import ModelConfig, PretrainConfig, check_objective_args, preset_config
from bertzoo.errors import ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.doc_contrast import HalvesContrastMLM
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.family import Family

# Sizes from the BERT paper (base, large) and Turc et al. 2019, "Well-Read Students Learn Better"
# (tiny .. medium), where the intermediate size is 4x hidden and heads have 64 dims.
PRESETS: dict[str, dict[str, Any]] = {
    "bert-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "bert-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "bert-small": {"num_layers": 4, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "bert-medium": {"num_layers": 8, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "bert-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "bert-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
    # TinyBERT's students (Jiao et al. 2020): 4 layers of 312 with 12 heads (26 dims each, so that each
    # head has a teacher head to learn from) and a 1200-wide FFN; TinyBERT-6 has BERT-base's shape, 6 deep.
    "tinybert-4l-312": {"num_layers": 4, "hidden_size": 312, "num_heads": 12, "intermediate_size": 1200},
    "tinybert-6l-768": {"num_layers": 6, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    # The shape of all-MiniLM-L6-v2 (Wang et al. 2020, MiniLM L6-H384): a teacher to distil from on a CPU.
    "minilm-l6-h384": {"num_layers": 6, "hidden_size": 384, "num_heads": 12, "intermediate_size": 1536},
}

OBJECTIVES = ("mlm+nsp", "mlm", "mlm+contrast")
DEFAULT_OBJECTIVE = "mlm+nsp"
CONTRAST_ARGS = ("contrast_weight", "temperature")


def _objective_of(cfg: PretrainConfig) -> str:
    """BERT's objective when a run names none: masked LM + NSP, or masked LM alone without sentence pairs."""
    return "mlm+nsp" if cfg.data.nsp else "mlm"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="bert", family="BERT")


def build(config: ModelConfig, objective: str = "mlm+nsp", **args: Any) -> MaskedLM:
    """The pretraining module: encoder + MLM head (+ NSP head, or + the halves' contrastive term, whose
    `objective_args` are `contrast_weight` (default 1) and `temperature` (default 0.05))."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for BERT; choose one of: {', '.join(OBJECTIVES)}")
    check_objective_args(args, CONTRAST_ARGS if objective == "mlm+contrast" else (), f"BERT's objective {objective}")
    if objective == "mlm+contrast":
        weight, temperature = args.get("contrast_weight", 1.0), args.get("temperature", 0.05)
        for name, value in (("contrast_weight", weight), ("temperature", temperature)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"objective_args.{name} must be a positive number, got {value!r}")
        return HalvesContrastMLM(Encoder(config), weight=float(weight), temperature=float(temperature))
    return MaskedLM(Encoder(config), sentence_task="nsp" if objective == "mlm+nsp" else None)


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """BERT's data recipe: NSP segment pairs, or single segments when data.nsp is false. Also the
    recipe of variants without their own (`bertzoo.train.pretrain`). `world_size` (processes of the
    run) is part of every recipe's signature; only recipes whose examples depend on the optimizer
    step (ERNIE's masking stages) read it."""
    from bertzoo.data.pretraining.examples import NspDataset

    if cfg.objective == "mlm+contrast" and cfg.data.nsp:
        raise ConfigError("objective mlm+contrast contrasts the two halves of one text; set data.nsp false")
    return NspDataset(
        corpus,
        tokenizer,
        max_seq_len=cfg.data.max_seq_len,
        seed=cfg.train.seed,
        short_seq_prob=cfg.data.short_seq_prob,
        nsp_random_prob=cfg.data.nsp_random_prob,
        nsp=cfg.data.nsp,
    )


# --- Hugging Face interop: BertModel / BertForPreTraining / BertForMaskedLM / BertFor<Task> ----------

# (Hugging Face BertModel key, bertzoo Encoder key). `{i}` is a layer index.
BERT_ENCODER_KEYS: tuple[tuple[str, str], ...] = (
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
)
BERT_QKV = "encoder.layer.{i}.attention.self.{n}.{part}"

# (Hugging Face BertForPreTraining head key, bertzoo MaskedLM key).
BERT_HEAD_KEYS: tuple[tuple[str, str], ...] = (
    ("cls.predictions.transform.dense.weight", "mlm_head.dense.weight"),
    ("cls.predictions.transform.dense.bias", "mlm_head.dense.bias"),
    ("cls.predictions.transform.LayerNorm.weight", "mlm_head.norm.weight"),
    ("cls.predictions.transform.LayerNorm.bias", "mlm_head.norm.bias"),
    ("cls.predictions.bias", "mlm_head.decoder.bias"),
    ("cls.seq_relationship.weight", "nsp_head.classifier.weight"),
    ("cls.seq_relationship.bias", "nsp_head.classifier.bias"),
)

HF = HFFamily(
    model_type="bert",
    variant="bert",
    base="bert.",
    encoder_keys=BERT_ENCODER_KEYS,
    qkv=BERT_QKV,
    head_keys=BERT_HEAD_KEYS,
    untied_decoder="cls.predictions.decoder.weight",
    # The decoder weight is the word table and decoder.bias is cls.predictions.bias.
    tied_copies=frozenset({"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}),
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face BertConfig dict for an exported bertzoo model."""
    hf_keys.check_exportable(config, "bert")
    return hf_keys.config_to_hf(config, HF, architectures)


FAMILY = Family(
    name="bert",
    title="BERT",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    objective_of=_objective_of,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
