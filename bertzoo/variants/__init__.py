"""Every model family bertzoo knows, in one explicit table of typed `Family` records (`bertzoo.variants.family`).

Each family is one recipe file here (its presets, its pretraining module, its data recipe, its Hugging Face
names) ending with `FAMILY = Family(...)`; everything else reaches a family through `get_variant(name)`.
"""

from __future__ import annotations

from typing import Any

import bertzoo.variants.albert as albert
import bertzoo.variants.bert as bert
import bertzoo.variants.distilbert as distilbert
import bertzoo.variants.electra as electra
import bertzoo.variants.elmo as elmo
import bertzoo.variants.ernie as ernie
import bertzoo.variants.ernie_thu as ernie_thu
import bertzoo.variants.gpt as gpt
import bertzoo.variants.mass as mass
import bertzoo.variants.roberta as roberta
import bertzoo.variants.spanbert as spanbert
import bertzoo.variants.t5 as t5
import bertzoo.variants.transfo_xl as transfo_xl
import bertzoo.variants.unilm as unilm
import bertzoo.variants.xlnet as xlnet
from bertzoo.config import ModelConfig
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.variants.family import Family

__all__ = [
    "VARIANTS",
    "Family",
    "config_class",
    "get_variant",
    "hf_families",
    "hf_family",
    "hf_family_of",
    "hf_variant",
    "model_config_of",
    "prepare_task",
    "preset_names",
    "scratch_config",
]

VARIANTS: dict[str, Family] = {
    family.name: family
    for family in (
        bert.FAMILY,
        electra.FAMILY,
        roberta.FAMILY,
        albert.FAMILY,
        spanbert.FAMILY,
        ernie.FAMILY,
        gpt.FAMILY,
        unilm.FAMILY,
        distilbert.FAMILY,
        t5.FAMILY,
        mass.FAMILY,
        xlnet.FAMILY,
        transfo_xl.FAMILY,
        elmo.FAMILY,
        ernie_thu.FAMILY,
    )
}


def get_variant(name: str) -> Family:
    """The family by name, with the list of known names on a typo."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown variant {name!r}; choose one of: {', '.join(VARIANTS)}") from None


def config_class(variant: Any) -> type[ModelConfig]:
    """The config class a saved model of `variant` loads as (ModelConfig for a name no family has: the check of
    the name itself is the model's, so a damaged config.json fails where its weights are read)."""
    family = VARIANTS.get(variant) if isinstance(variant, str) else None
    return family.config_class if family is not None else ModelConfig


def prepare_task(task: Any, backbone: Any, tokenizer: Any) -> bool:
    """Give a task on `backbone` what its family needs (`Family.prepare_task`: ERNIE-THU links the task's text to
    its entity list); whether anything changed."""
    family = get_variant(backbone.config.variant)
    return family.prepare_task(task, backbone, tokenizer) if family.prepare_task is not None else False


def scratch_config(variant: Family, spec: dict[str, Any], tokenizer: Any) -> ModelConfig:
    """The config a from-scratch model of `variant` gets from `spec` (a preset and fields) and the run's
    `tokenizer`: what the family takes from the vocabulary (`model_defaults`: T5's decoder start and unpadded
    word table, MASS's mask), then its size and padding id, each only where `spec` does not set it. Pretraining,
    fine-tuning from random init and a random distillation student all build their model through here."""
    spec = dict(spec)
    for key, value in variant.model_defaults(tokenizer).items():
        spec.setdefault(key, value)
    spec.setdefault("vocab_size", tokenizer.vocab_size)
    spec.setdefault("pad_token_id", tokenizer.pad_id)
    return variant.model_config(spec)


def model_config_of(model_config: dict[str, Any], tokenizer: Any) -> tuple[Family, ModelConfig]:
    """The family and `scratch_config` of a `model_config` mapping ({variant (default bert), preset, ...})."""
    spec = dict(model_config)
    variant = get_variant(spec.pop("variant", "bert"))
    return variant, scratch_config(variant, spec, tokenizer)


def preset_names() -> list[str]:
    """All presets of all families."""
    return [name for family in VARIANTS.values() for name in family.presets]


def hf_families() -> dict[str, HFFamily]:
    """Hugging Face model_type -> the architecture that imports it (a family imports the ones named for it;
    SpanBERT exports as BERT and BERT imports it)."""
    return {f.model_type: f for name, family in VARIANTS.items() for f in family.hf if f.variant == name}


def hf_family(model_type: Any) -> HFFamily:
    """The family of a Hugging Face config's `model_type`, or CheckpointError listing the supported ones."""
    families = hf_families()
    if isinstance(model_type, str) and model_type in families:
        return families[model_type]
    raise CheckpointError(
        f"Hugging Face model_type {model_type!r} is not supported; supported: {', '.join(sorted(families))}"
    )


def hf_variant(config_variant: str) -> Family:
    """The family exporting a model of `config_variant` to Hugging Face (it must have Hugging Face names)."""
    family = get_variant(config_variant)
    if not family.hf:
        raise CheckpointError(f"variant {config_variant!r} has no Hugging Face counterpart to convert to or from")
    return family


def hf_family_of(config: ModelConfig) -> HFFamily:
    """The Hugging Face architecture a model of `config` converts to (GPT: picked by its layout)."""
    return hf_variant(config.variant).hf_family(config)
