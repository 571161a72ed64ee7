"""SpanBERT (Joshi et al. 2019): BERT's encoder, span masking and the span boundary objective.

* Masking: contiguous spans of whole words, lengths from a geometric distribution (p =
  `data.masking.span_p` = 0.2, truncated at `data.masking.max_span` = 10 words; mean 3.8), until
  15% of the tokens are selected; one 80/10/10 decision per span (`bertzoo.data.pretraining.masking.select_spans`).
  `data.masking.strategy` left at "token" means span masking here; set whole_word, phrase, entity or
  span explicitly to change it (the paper's ablations).
* Objective "mlm+sbo" (default): MLM plus the span boundary objective; "mlm" drops SBO.
* Data: single contiguous segments of up to `data.max_seq_len` tokens, no NSP.

The architecture is BERT's, so Hugging Face export/import goes through BERT's key map (SpanBERT's
released checkpoints are `bert` models); the SBO head has no Hugging Face counterpart and is left
out of an export.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import bertzoo.variants.bert as bert
from bertzoo.config import ModelConfig, PretrainConfig, is_number, preset_config
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.span import SpanBoundaryLM
from bertzoo.variants.family import Family

# BERT's sizes: the paper trains base and large; the small ones are for experiments on a laptop.
PRESETS: dict[str, dict[str, Any]] = {
    "spanbert-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "spanbert-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "spanbert-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "spanbert-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}

OBJECTIVES = ("mlm+sbo", "mlm")
DEFAULT_OBJECTIVE = "mlm+sbo"
DEFAULT_STRATEGY = "span"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="spanbert", family="SpanBERT")


def build(
    config: ModelConfig,
    objective: str = DEFAULT_OBJECTIVE,
    sbo_max_positions: int = 32,
    sbo_weight: float = 1.0,
    sbo_start: float = 0.0,
) -> SpanBoundaryLM:
    """The pretraining module: encoder + MLM head (+ span boundary head). `sbo_max_positions` is the
    size of the SBO's relative-position table (spans are at most 10 words; longer offsets clamp);
    `sbo_weight` multiplies the SBO term of the loss, which counts from `sbo_start` (a fraction of
    training) on."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for SpanBERT; choose one of: {', '.join(OBJECTIVES)}"
        )
    if sbo_max_positions < 1:
        raise ConfigError(f"objective_args.sbo_max_positions must be >= 1, got {sbo_max_positions}")
    if not is_number(sbo_weight) or not 0 <= sbo_weight < float("inf"):
        raise ConfigError(f"objective_args.sbo_weight must be a number >= 0, got {sbo_weight!r}")
    if not is_number(sbo_start) or not 0 <= sbo_start < 1:
        raise ConfigError(f"objective_args.sbo_start must be a fraction of training in [0, 1), got {sbo_start!r}")
    return SpanBoundaryLM(
        Encoder(config),
        sbo=objective == "mlm+sbo",
        sbo_max_positions=sbo_max_positions,
        sbo_weight=float(sbo_weight),
        sbo_start=float(sbo_start),
    )


def masking_strategy(cfg: PretrainConfig) -> str:
    """Span masking unless another unit strategy is configured explicitly."""
    strategy = cfg.data.masking.strategy
    return DEFAULT_STRATEGY if strategy == "token" else strategy


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Single contiguous segments (no NSP); with the shards' unit flags when they have a sidecar
    (`bertzoo.data.tokens.unit_sidecar`: Chinese words), else WordPiece words are derived in the collator."""
    from bertzoo.data.pretraining.collate_units import UnitDataset
    from bertzoo.data.tokens.unit_sidecar import load_unit_flags

    dataset = bert.examples(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, nsp=False)), corpus, tokenizer)
    flags = load_unit_flags(corpus)
    return UnitDataset(dataset, flags, seed=cfg.train.seed) if flags is not None else dataset


def collator(cfg: PretrainConfig, tokenizer):
    """Span masking over whole words, with the span boundaries the SBO reads."""
    from bertzoo.data.pretraining.collate_units import UnitMaskingCollator

    return UnitMaskingCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        strategy=masking_strategy(cfg),
        span_targets=True,
    )


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> SpanBoundaryLM:
    """The (unloaded) pretraining module a checkpoint's config and tensors describe; the hook
    `bertzoo.loading.load_pretraining` calls for variants whose module is not plain `MaskedLM`."""
    objective = raw.get("objective") or ("mlm+sbo" if any(k.startswith("sbo_head.") for k in state) else "mlm")
    positions = state.get("sbo_head.position.weight")
    size = int(raw.get("sbo_max_positions", positions.shape[0] if positions is not None else 32))
    return build(config, objective=objective, sbo_max_positions=size)


# --- Hugging Face interop: the BERT architecture ---------------------------------------------

# SpanBERT's released checkpoints are `bert` models, so a Hugging Face import is a BERT (this family
# is not `HF.variant`); an export writes BERT's keys, and the span boundary head, which has no
# Hugging Face counterpart, is left out because BERT's key map does not name it.
HF = bert.HF
config_to_hf = bert.config_to_hf


FAMILY = Family(
    name="spanbert",
    title="SpanBERT",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    pretraining_classes=(SpanBoundaryLM,),
    pretraining_model=pretraining_model,
    collator=collator,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
