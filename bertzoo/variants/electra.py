"""ELECTRA (Clark et al. 2020): a BERT-architecture discriminator trained on replaced-token detection
against a smaller MLM generator; factorized embeddings (width E) shared by both models.

Objectives: "electra" (default; generator + discriminator, see bertzoo.objectives.electra) and "mlm"
(the model trained as a masked LM alone, Hugging Face's ElectraForMaskedLM layout). `objective_args`
for "electra":

    generator_size        fraction of the discriminator's width (default: the preset's, else 0.25);
                          heads keep the discriminator's head size, the FFN scales with the width
    generator             ModelConfig overrides for the generator, e.g. {num_layers: 6}
    rtd_weight            lambda in loss = mlm + lambda * rtd (default 50)
    stage                 joint (default) | generator | discriminator
    generator_checkpoint  stage discriminator: the stage-generator run's checkpoint to sample from

Data: single segments without NSP (data.nsp is ignored); masking comes from data.masking, which for
ELECTRA is 15% of tokens, 85% of them [MASK] and 15% kept (replace_random 0), as in Google's code.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.batch import Batch
from bertzoo.config import ModelConfig, from_dict, preset_config
from bertzoo.convert import expand, fuse_qkv, normalise_hf_keys, split_qkv
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.model import Encoder
from bertzoo.objectives.electra import SAMPLE_UNIFORM, Discriminator, Electra, make_generator
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.bert import BERT_ENCODER_KEYS

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

OBJECTIVES = ("electra", "mlm")
DEFAULT_OBJECTIVE = "electra"
HF_MODEL_TYPE = "electra"
OBJECTIVE_ARGS = ("generator_size", "generator", "rtd_weight", "stage", "generator_checkpoint")
SAMPLE_STREAM = "electra-sample"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """The discriminator's ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="electra", family="ELECTRA", defaults={"pooler": False})


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
    if isinstance(generator_size, bool) or not isinstance(generator_size, (int, float)) or not 0 < generator_size <= 1:
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
    unknown = sorted(set(args) - set(OBJECTIVE_ARGS))
    if unknown:
        raise ConfigError(f"unknown objective_args key {unknown[0]}; ELECTRA accepts: {', '.join(OBJECTIVE_ARGS)}")
    if objective == "mlm":
        if args:
            raise ConfigError(f"objective_args ({', '.join(args)}) apply to objective electra, not mlm; remove them")
        return make_generator(Encoder(config))
    stage = args.get("stage", "joint")
    rtd_weight = args.get("rtd_weight", 50.0)
    if isinstance(rtd_weight, bool) or not isinstance(rtd_weight, (int, float)):
        raise ConfigError(f"objective_args.rtd_weight must be a number, got {rtd_weight!r}")
    overrides = args.get("generator") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"objective_args.generator must be a mapping of model fields, got {overrides!r}")
    checkpoint = args.get("generator_checkpoint") or ""
    if stage != "discriminator":
        if checkpoint:
            raise ConfigError("objective_args.generator_checkpoint is read by stage discriminator only; remove it")
        size = args.get("generator_size")
        gen_cfg = generator_config(config, default_generator_size(config) if size is None else size, overrides)
        return Electra(config, gen_cfg, rtd_weight=rtd_weight, stage=stage)
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
    model = Electra(config, generator.config, rtd_weight=rtd_weight, stage="discriminator")
    from bertzoo.hub import load_into

    load_into(model.generator, generator.state_dict(), source=str(checkpoint))
    model.init_discriminator_from_generator()
    return model


def load_generator(path: str | Path) -> MaskedLM:
    """The generator of an ELECTRA checkpoint, or a masked-LM checkpoint (bertzoo or Hugging Face
    ElectraForMaskedLM) used as one."""
    from bertzoo.hub import load_pretraining

    model = load_pretraining(path)
    generator = model.generator if isinstance(model, Electra) else model
    if not isinstance(generator, MaskedLM):
        raise ConfigError(f"{path} holds no masked-LM generator (found {type(model).__name__})")
    return generator


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a pretraining checkpoint's weights go into; bertzoo.hub.load_pretraining
    calls this for ELECTRA checkpoints: a joint checkpoint, a discriminator or a generator."""
    if raw.get("objective") == "electra" or any(k.startswith("discriminator.") for k in state):
        gen = raw.get("generator")
        if not isinstance(gen, dict):
            raise CheckpointError("the ELECTRA checkpoint's config.json lacks the generator's config ('generator')")
        gen_cfg = from_dict(ModelConfig, {k: v for k, v in gen.items() if k in ModelConfig.__dataclass_fields__})
        return Electra(config, gen_cfg, rtd_weight=raw.get("rtd_weight", 50.0), stage=raw.get("stage", "joint"))
    if any(k.startswith("rtd_head.") for k in state):
        return Discriminator(Encoder(config))
    return make_generator(Encoder(config))


# --- data ------------------------------------------------------------------------------------


def examples(cfg, corpus, tokenizer):
    """Single segments ([CLS] sentences [SEP]): ELECTRA has no sentence-pair task."""
    from bertzoo.train.pretrain import _examples

    return _examples(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, nsp=False)), corpus, tokenizer)


class ElectraCollator:
    """The masking collator, plus one uniform per position for the generator's sampling, keyed by
    (seed, epoch, example index, position): samples repeat exactly on resume, whatever the batching."""

    def __init__(self, base, seed: int) -> None:
        self.base = base
        self.seed = int(seed)

    def __call__(self, examples: list[dict[str, Any]]) -> Batch:
        from bertzoo.data import rng  # lazily: the data pipeline is heavy to import

        batch = self.base(examples)
        index = batch.example_index.numpy()[:, None]
        epoch = np.fromiter((int(e.get("epoch", 0)) for e in examples), dtype=np.int64, count=len(examples))[:, None]
        pos = np.arange(batch.input_ids.size(1))[None, :]
        u = rng.uniform(self.seed, epoch, index, pos, SAMPLE_STREAM)  # (batch, seq) float64
        batch.extra[SAMPLE_UNIFORM] = torch.from_numpy(u.astype(np.float32))
        return batch


def collator(cfg, tokenizer) -> ElectraCollator:
    """BERT's masking collator (strategy and rates from data.masking) with ELECTRA's sampling noise."""
    from bertzoo.data.collate import PretrainingCollator

    base = PretrainingCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        selector=cfg.data.masking.strategy,
    )
    return ElectraCollator(base, cfg.train.seed)


# --- Hugging Face interop ------------------------------------------------------------------

_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_OUR_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}

# (Hugging Face ElectraModel key, bertzoo Encoder key): BERT's layers, no pooler, plus the E -> hidden
# projection that HF keeps outside its embeddings module.
ELECTRA_ENCODER_KEYS: list[tuple[str, str]] = [
    (hf, ours) for hf, ours in BERT_ENCODER_KEYS if not hf.startswith("pooler.")
] + [
    ("embeddings_project.weight", "embeddings.project.weight"),
    ("embeddings_project.bias", "embeddings.project.bias"),
]

# (Hugging Face head key, bertzoo key): ElectraForPreTraining and ElectraForMaskedLM.
ELECTRA_HEAD_KEYS: list[tuple[str, str]] = [
    ("discriminator_predictions.dense.weight", "rtd_head.dense.weight"),
    ("discriminator_predictions.dense.bias", "rtd_head.dense.bias"),
    ("discriminator_predictions.dense_prediction.weight", "rtd_head.prediction.weight"),
    ("discriminator_predictions.dense_prediction.bias", "rtd_head.prediction.bias"),
    ("generator_predictions.dense.weight", "mlm_head.dense.weight"),
    ("generator_predictions.dense.bias", "mlm_head.dense.bias"),
    ("generator_predictions.LayerNorm.weight", "mlm_head.norm.weight"),
    ("generator_predictions.LayerNorm.bias", "mlm_head.norm.bias"),
    ("generator_lm_head.bias", "mlm_head.decoder.bias"),
]
_UNTIED_DECODER = ("generator_lm_head.weight", "mlm_head.decoder.weight")
_QKV = ("query", "key", "value")
_ARCH = {
    "BertModel": "ElectraModel",
    "BertForMaskedLM": "ElectraForMaskedLM",
    "BertForPreTraining": "ElectraForPreTraining",
}


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face ElectraConfig dict."""
    act = raw.get("hidden_act", "gelu")
    if act not in _HF_ACT:
        raise CheckpointError(f"activation {act!r} in the Hugging Face config is not supported")
    pe = raw.get("position_embedding_type", "absolute")
    if pe != "absolute":
        raise CheckpointError(f"position_embedding_type={pe!r} is not supported; only 'absolute' positions convert")
    hidden = raw["hidden_size"]
    width = raw.get("embedding_size") or hidden
    return ModelConfig(
        variant="electra",
        vocab_size=raw["vocab_size"],
        hidden_size=hidden,
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position=raw.get("max_position_embeddings", 512),
        type_vocab_size=raw.get("type_vocab_size", 2),
        embedding_size=width if width != hidden else None,
        hidden_act=_HF_ACT[act],
        dropout=raw.get("hidden_dropout_prob", 0.1),
        attention_dropout=raw.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        initializer_range=raw.get("initializer_range", 0.02),
        pad_token_id=raw.get("pad_token_id", 0) or 0,
        pooler=False,
        tie_word_embeddings=raw.get("tie_word_embeddings", True),
    )


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face ElectraConfig dict; BERT class names (from the generic exporter) become ELECTRA's."""
    if config.norm != "post" or config.position != "learned" or config.share != "none" or config.position_offset:
        raise CheckpointError(
            "only post-norm encoders with learned positions from 0 and no layer sharing export to the "
            "Hugging Face 'electra' architecture"
        )
    if config.pooler:
        raise CheckpointError("Hugging Face ELECTRA has no pooler; build the model with pooler=False")
    archs = [_ARCH.get(a, a.replace("Bert", "Electra", 1)) for a in architectures or ["ElectraModel"]]
    return {
        "model_type": "electra",
        "architectures": archs,
        "vocab_size": config.vocab_size,
        "embedding_size": config.embedding_size or config.hidden_size,
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
        "tie_word_embeddings": bool(config.tie_word_embeddings),
    }


def state_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF ELECTRA tensors -> bertzoo keys: `encoder.*`, plus `rtd_head.*` (ElectraForPreTraining) or
    `mlm_head.*` (ElectraForMaskedLM). Returns (state, unused HF keys)."""
    src = normalise_hf_keys(state, prefix="electra.")
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for hf, ours in expand(ELECTRA_ENCODER_KEYS, config.num_layers):
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
    heads = ELECTRA_HEAD_KEYS + ([] if config.tie_word_embeddings else [_UNTIED_DECODER])
    for hf, ours in heads:
        if hf in src:
            out[ours] = src[hf]
            used.add(hf)
    # A tied decoder weight is a copy of the word embeddings; the buffers are recomputed.
    ignorable = {"generator_lm_head.weight", "embeddings.position_ids", "embeddings.token_type_ids"}
    unused = sorted(k for k in src if k not in used and k not in ignorable)
    return out, unused


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys (`encoder.` for the backbone) -> HF ELECTRA keys. prefix "" gives ElectraModel names;
    any other prefix (the generic exporter passes "bert.") gives the heads models' `electra.` names."""
    base = "electra." if prefix else ""
    out: dict[str, torch.Tensor] = {}
    for hf, ours in expand(ELECTRA_ENCODER_KEYS, config.num_layers):
        if f"encoder.{ours}" in state:
            out[base + hf] = state[f"encoder.{ours}"]
    for i in range(config.num_layers):
        for part in ("weight", "bias"):
            fused = state.get(f"encoder.stack.layers.{i}.attention.qkv.{part}")
            if fused is not None:
                for n, t in zip(_QKV, split_qkv(fused, config.hidden_size), strict=True):
                    out[f"{base}encoder.layer.{i}.attention.self.{n}.{part}"] = t
    heads = ELECTRA_HEAD_KEYS + ([] if config.tie_word_embeddings else [_UNTIED_DECODER])
    for hf, ours in heads:
        if ours in state:
            out[hf] = state[ours]
    return {k: v.contiguous() for k, v in out.items()}


def write_hf(module: nn.Module, directory: str | Path) -> str:
    """Write a Hugging Face ELECTRA directory: ElectraForPreTraining for a Discriminator,
    ElectraForMaskedLM for a generator (MaskedLM), ElectraModel for an Encoder."""
    from safetensors.torch import save_file

    from bertzoo.hub import CONFIG, WEIGHTS, _replace_atomically

    if isinstance(module, Encoder):
        config, state, prefix, arch = (
            module.config,
            {f"encoder.{k}": v for k, v in module.state_dict().items()},
            "",
            "ElectraModel",
        )
    elif isinstance(module, Discriminator):
        config, state, prefix, arch = module.config, module.state_dict(), "electra.", "ElectraForPreTraining"
    elif isinstance(module, MaskedLM) and module.nsp_head is None:
        config, state, prefix, arch = module.config, module.state_dict(), "electra.", "ElectraForMaskedLM"
    else:
        raise CheckpointError(f"{type(module).__name__} has no Hugging Face ELECTRA counterpart")
    hf_state = state_to_hf(state, config, prefix=prefix)
    hf_config = config_to_hf(config, [arch])
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _replace_atomically(lambda p: save_file(hf_state, p, metadata={"format": "pt"}), directory / WEIGHTS)
    _replace_atomically(lambda p: Path(p).write_text(json.dumps(hf_config, indent=2) + "\n"), directory / CONFIG)
    return str(directory)
