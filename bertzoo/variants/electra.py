"""ELECTRA (Clark et al. 2020): a BERT-architecture discriminator trained on replaced-token detection
against a smaller MLM generator; factorized embeddings (width E) shared by both models.

Objectives: "electra" (default; generator + discriminator, see bertzoo.objectives.electra) and "mlm"
(the model trained as a masked LM alone, Hugging Face's ElectraForMaskedLM layout). `objective_args`
for "electra":

    generator_size        fraction of the discriminator's width (default: the preset's, else 0.25);
                          heads keep the discriminator's head size, the FFN scales with the width
    generator             ModelConfig overrides for the generator, e.g. {num_layers: 6}
    rtd_weight            lambda in loss = mlm + lambda * rtd (default 50)
    sample_temperature    the generator's samples are drawn from softmax(logits / T) (default 1, the paper's)
    rtd_prior             start the RTD logit at the log-odds of this replaced share (e.g. 0.15) instead of 0
                          (null, Google's); an initialisation only, not saved
    embedding_sharing     shared (default, the paper's: one word table) | disentangled (DeBERTaV3's gradient-
                          disentangled sharing: RTD never moves the generator's table; stage joint only)
    stage                 joint (default) | generator | discriminator
    generator_checkpoint  stage discriminator: the stage-generator run's checkpoint to sample from

Data: single segments without NSP (data.nsp is ignored); masking comes from data.masking, which for
ELECTRA is 15% of tokens, 85% of them [MASK] and 15% kept (replace_random 0), as in Google's code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
import bertzoo.variants.bert as bert
from bertzoo.batch import Batch
from bertzoo.config import ModelConfig, check_objective_args, from_dict, is_number, preset_config, saved_fields
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.electra import SAMPLE_UNIFORM, Discriminator, Electra, make_generator
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.family import Family

# The discriminator's sizes, from the paper's Table 6 (small also from Google's configure_pretraining.py,
# embedding_size 128). electra-mini is a 4-layer small for CPU demos. ELECTRA has no pooler.
PRESETS: dict[str, dict[str, Any]] = {
    "electra-mini": {
        "num_layers": 4,
        "hidden_size": 256,
        "num_heads": 4,
        "intermediate_size": 1024,
        "embedding_size": 128,
    },
    "electra-small": {
        "num_layers": 12,
        "hidden_size": 256,
        "num_heads": 4,
        "intermediate_size": 1024,
        "embedding_size": 128,
    },
    "electra-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "electra-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}
# Generator width as a fraction of the discriminator's (Table 6: small 1/4, base 1/3, large 1/4).
GENERATOR_SIZE = {"electra-mini": 0.25, "electra-small": 0.25, "electra-base": 1 / 3, "electra-large": 0.25}

DEFAULTS: dict[str, Any] = {"pooler": False}  # the discriminator reads every token; no sentence vector
OBJECTIVES = ("electra", "mlm")
DEFAULT_OBJECTIVE = "electra"
OBJECTIVE_ARGS = (
    "generator_size",
    "generator",
    "rtd_weight",
    "stage",
    "generator_checkpoint",
    "sample_temperature",
    "rtd_prior",
    "embedding_sharing",
)
SAMPLE_STREAM = "electra-sample"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """The discriminator's ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="electra", family="ELECTRA", defaults=DEFAULTS)


def default_generator_size(config: ModelConfig) -> float:
    """The paper's generator fraction for a discriminator shaped like one of the presets, else 1/4."""
    shape = (config.num_layers, config.hidden_size, config.num_heads, config.intermediate_size)
    for name, p in PRESETS.items():
        if shape == (p["num_layers"], p["hidden_size"], p["num_heads"], p["intermediate_size"]):
            return GENERATOR_SIZE[name]
    return 0.25


def generator_config(
    config: ModelConfig, generator_size: float = 0.25, overrides: dict[str, Any] | None = None
) -> ModelConfig:
    """The generator's ModelConfig: the discriminator's, with width * `generator_size`, the same head
    size (Google's code: hidden // 64 heads, 64 being the head size of every ELECTRA preset), the FFN
    scaled likewise, and the embedding width E kept (the embeddings are shared)."""
    if not is_number(generator_size) or not 0 < generator_size <= 1:
        raise ConfigError(f"objective_args.generator_size must be in (0, 1], got {generator_size!r}")
    hidden = max(1, round(config.hidden_size * generator_size))
    heads = max(1, hidden // config.head_dim)
    while hidden % heads:
        heads -= 1
    width = config.embedding_size or config.hidden_size
    fields = {
        **config.to_dict(),
        "hidden_size": hidden,
        "num_heads": heads,
        "intermediate_size": max(1, round(config.intermediate_size * hidden / config.hidden_size)),
        "embedding_size": width if width != hidden else None,
        "pooler": False,
    }
    fields.update(overrides or {})
    return from_dict(ModelConfig, fields, "objective_args.generator")


def build(config: ModelConfig, objective: str = "electra", **args: Any) -> nn.Module:
    """The pretraining module: `Electra` (generator + discriminator) or, for "mlm", a masked LM."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for ELECTRA; choose one of: {', '.join(OBJECTIVES)}"
        )
    check_objective_args(args, OBJECTIVE_ARGS, "ELECTRA")
    if objective == "mlm":
        if args:
            raise ConfigError(f"objective_args ({', '.join(args)}) apply to objective electra, not mlm; remove them")
        return make_generator(Encoder(config))
    prior = args.get("rtd_prior")
    model = _electra(config, args)
    if prior is not None:
        model.discriminator.start_at_prior(prior)
    return model


def _electra(config: ModelConfig, args: dict[str, Any]) -> Electra:
    """Generator + discriminator for `args`' stage (the second stage loads the first stage's generator)."""
    stage = args.get("stage", "joint")
    rtd_weight = args.get("rtd_weight", 50.0)
    if not is_number(rtd_weight):
        raise ConfigError(f"objective_args.rtd_weight must be a number, got {rtd_weight!r}")
    temperature = args.get("sample_temperature", 1.0)
    overrides = args.get("generator") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"objective_args.generator must be a mapping of model fields, got {overrides!r}")
    checkpoint = args.get("generator_checkpoint") or ""
    if stage != "discriminator":
        if checkpoint:
            raise ConfigError("objective_args.generator_checkpoint is read by stage discriminator only; remove it")
        size = args.get("generator_size")
        gen_cfg = generator_config(config, default_generator_size(config) if size is None else size, overrides)
        return Electra(
            config,
            gen_cfg,
            rtd_weight=rtd_weight,
            stage=stage,
            sample_temperature=temperature,
            embedding_sharing=args.get("embedding_sharing", "shared"),
        )
    # Two-stage ELECTRA, second stage: the generator (and its config) come from the first stage's run.
    if not checkpoint:
        raise ConfigError(
            "objective_args.stage=discriminator needs objective_args.generator_checkpoint: the directory of a run "
            "trained with stage generator (e.g. runs/electra-gen/final)"
        )
    generator = load_generator(checkpoint)
    if generator.config.vocab_size != config.vocab_size:
        raise ConfigError(
            f"the generator in {checkpoint} has a vocabulary of {generator.config.vocab_size}, the discriminator "
            f"{config.vocab_size}; use the same tokenizer for both stages"
        )
    model = Electra(
        config,
        generator.config,
        rtd_weight=rtd_weight,
        stage="discriminator",
        sample_temperature=temperature,
        embedding_sharing=args.get("embedding_sharing", "shared"),
    )
    io.load_into(model.generator, generator.state_dict(), source=str(checkpoint))
    model.init_discriminator_from_generator()
    return model


def _electra_only(model_type: Any) -> HFFamily:
    if model_type != HF.model_type:
        raise CheckpointError(f"a Hugging Face {model_type!r} checkpoint is not an ELECTRA generator")
    return HF


def load_generator(path: str | Path) -> MaskedLM:
    """The generator of an ELECTRA checkpoint, or a masked-LM checkpoint (bertzoo or Hugging Face
    ElectraForMaskedLM) used as one. (Read here, with the IO layer, rather than through
    bertzoo.loading: the variant sits below the loader, and an ELECTRA directory is all it reads.)"""
    directory = Path(path)
    if not directory.is_dir():
        raise CheckpointError(f"generator checkpoint not found: {path}; pass the directory of the stage-generator run")
    raw, config, state, _ = io.read_checkpoint(directory, _electra_only, lambda variant: ModelConfig)
    model = pretraining_model(raw, config, state)
    io.load_into(model, state, source=str(directory))
    generator = model.generator if isinstance(model, Electra) else model
    if not isinstance(generator, MaskedLM):
        raise ConfigError(f"{path} holds no masked-LM generator (found {type(model).__name__})")
    return generator


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a pretraining checkpoint's weights go into; bertzoo.loading.load_pretraining
    calls this for ELECTRA checkpoints: a joint checkpoint, a discriminator or a generator."""
    if raw.get("objective") == "electra" or any(k.startswith("discriminator.") for k in state):
        gen = raw.get("generator")
        if not isinstance(gen, dict):
            raise CheckpointError("the ELECTRA checkpoint's config.json lacks the generator's config ('generator')")
        gen_cfg = from_dict(ModelConfig, saved_fields(ModelConfig, gen))
        return Electra(
            config,
            gen_cfg,
            rtd_weight=raw.get("rtd_weight", 50.0),
            stage=raw.get("stage", "joint"),
            sample_temperature=raw.get("sample_temperature", 1.0),
            embedding_sharing=raw.get("embedding_sharing", "shared"),
        )
    if any(k.startswith("rtd_head.") for k in state):
        return Discriminator(Encoder(config))
    return make_generator(Encoder(config))


# --- data ------------------------------------------------------------------------------------


def examples(cfg, corpus, tokenizer, *, world_size: int = 1):
    """Single segments ([CLS] sentences [SEP]): BERT's recipe without its sentence-pair task."""
    return bert.examples(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, nsp=False)), corpus, tokenizer)


class ElectraCollator:
    """The masking collator, plus one uniform per position for the generator's sampling, keyed by
    (seed, epoch, example index, position): samples repeat exactly on resume, whatever the batching."""

    def __init__(self, base, seed: int) -> None:
        self.base = base
        self.seed = int(seed)

    def __call__(self, examples: list[dict[str, Any]]) -> Batch:
        import bertzoo.data.rng as rng  # lazily: the data pipeline is heavy to import

        batch = self.base(examples)
        index = batch.example_index.numpy()[:, None]
        epoch = np.fromiter((int(e.get("epoch", 0)) for e in examples), dtype=np.int64, count=len(examples))[:, None]
        pos = np.arange(batch.input_ids.size(1))[None, :]
        u = rng.uniform(self.seed, epoch, index, pos, SAMPLE_STREAM)  # (batch, seq) float64
        batch.extra[SAMPLE_UNIFORM] = torch.from_numpy(u.astype(np.float32))
        return batch


def collator(cfg, tokenizer) -> ElectraCollator:
    """BERT's masking collator (strategy and rates from data.masking) with ELECTRA's sampling noise."""
    from bertzoo.data.pretraining.collate_mlm import PretrainingCollator

    base = PretrainingCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        selector=cfg.data.masking.strategy,
    )
    return ElectraCollator(base, cfg.train.seed)


# --- Hugging Face interop ------------------------------------------------------------------

# (Hugging Face ElectraModel key, bertzoo Encoder key): BERT's layers, no pooler, plus the E -> hidden
# projection that HF keeps outside its embeddings module.
ELECTRA_ENCODER_KEYS: tuple[tuple[str, str], ...] = tuple(
    (hf, ours) for hf, ours in bert.BERT_ENCODER_KEYS if not hf.startswith("pooler.")
) + (
    ("embeddings_project.weight", "embeddings.project.weight"),
    ("embeddings_project.bias", "embeddings.project.bias"),
)

# (Hugging Face head key, bertzoo key): ElectraForPreTraining and ElectraForMaskedLM.
ELECTRA_HEAD_KEYS: tuple[tuple[str, str], ...] = (
    ("discriminator_predictions.dense.weight", "rtd_head.dense.weight"),
    ("discriminator_predictions.dense.bias", "rtd_head.dense.bias"),
    ("discriminator_predictions.dense_prediction.weight", "rtd_head.prediction.weight"),
    ("discriminator_predictions.dense_prediction.bias", "rtd_head.prediction.bias"),
    ("generator_predictions.dense.weight", "mlm_head.dense.weight"),
    ("generator_predictions.dense.bias", "mlm_head.dense.bias"),
    ("generator_predictions.LayerNorm.weight", "mlm_head.norm.weight"),
    ("generator_predictions.LayerNorm.bias", "mlm_head.norm.bias"),
    ("generator_lm_head.bias", "mlm_head.decoder.bias"),
)


def _embedding_width(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The factorized embedding width E (none when it equals the hidden size); ELECTRA has no pooler."""
    hidden = fields["hidden_size"]
    width = hf_keys.hf_value(raw, "embedding_size", "size", hidden)
    return {"embedding_size": width if width != hidden else None, "pooler": False}


HF = HFFamily(
    model_type="electra",
    variant="electra",
    base="electra.",
    encoder_keys=ELECTRA_ENCODER_KEYS,
    qkv=bert.BERT_QKV,
    head_keys=ELECTRA_HEAD_KEYS,
    untied_decoder="generator_lm_head.weight",
    tied_copies=frozenset({"generator_lm_head.weight"}),
    read_fields=_embedding_width,
    architectures={
        "BertModel": "ElectraModel",
        "BertForMaskedLM": "ElectraForMaskedLM",
        "BertForPreTraining": "ElectraForPreTraining",
        "BertForTokenClassification": "ElectraForTokenClassification",
        "BertForQuestionAnswering": "ElectraForQuestionAnswering",
    },
    refused={
        "BertForSequenceClassification": "ElectraForSequenceClassification has its own head (dense + gelu + "
        "out_proj on [CLS]), not the pooler + linear classifier this model has",
        "BertForMultipleChoice": "ElectraForMultipleChoice reads a sequence summary, not the pooler + linear "
        "classifier this model has",
    },
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face ElectraConfig dict; BERT class names (from the generic exporter) become ELECTRA's."""
    hf_keys.check_exportable(config, "electra", factorized=None)
    if config.pooler:
        raise CheckpointError("Hugging Face ELECTRA has no pooler; build the model with pooler=False")
    return hf_keys.config_to_hf(
        config,
        HF,
        architectures,
        embedding_size=config.embedding_size or config.hidden_size,
        tie_word_embeddings=bool(config.tie_word_embeddings),
    )


def write_hf(module: nn.Module, directory: str | Path) -> Path:
    """Write a Hugging Face ELECTRA directory: ElectraForPreTraining for a Discriminator,
    ElectraForMaskedLM for a generator (MaskedLM), ElectraModel for an Encoder."""
    if isinstance(module, Encoder):
        state, prefix, arch = {f"encoder.{k}": v for k, v in module.state_dict().items()}, "", "BertModel"
    elif isinstance(module, Discriminator):
        state, prefix, arch = module.state_dict(), "bert.", "BertForPreTraining"
    elif isinstance(module, MaskedLM) and module.nsp_head is None:
        state, prefix, arch = module.state_dict(), "bert.", "BertForMaskedLM"
    else:
        raise CheckpointError(f"{type(module).__name__} has no Hugging Face ELECTRA counterpart")
    hf_config = config_to_hf(module.config, [arch])
    hf_state = hf_keys.state_to_hf(state, module.config, HF, prefix=prefix)
    return io.write_model_dir(directory, hf_state, hf_config)


def export_hf(module: nn.Module, directory: str | Path) -> Path | None:
    """The exporter's hook for ELECTRA's own modules: the discriminator as ElectraForPreTraining; the
    joint objective as that in `directory` plus the generator as ElectraForMaskedLM in
    `directory/generator` (transformers has no joint class). None: the generic exporter's module."""
    if isinstance(module, Electra):
        write_hf(module.discriminator, directory)
        write_hf(module.generator, Path(directory) / "generator")
        return Path(directory)
    if isinstance(module, Discriminator):
        return write_hf(module, directory)
    return None


FAMILY = Family(
    name="electra",
    title="ELECTRA",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    defaults=DEFAULTS,
    pretraining_classes=(Electra,),
    pretraining_model=pretraining_model,
    collator=collator,
    export_hf=export_hf,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
