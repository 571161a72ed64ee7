"""Every model family bertzoo knows, in one explicit table.

A variant module has presets, `model_config(spec)`, `build(config, objective, **objective_args)`,
and optionally:

* `examples(cfg, corpus, tokenizer, *, world_size=1)` and `collator(cfg, tokenizer)`: its data
  recipe (default: BERT's, `bert.examples`);
* `pretraining_model(raw_config, config, state)`: the empty module a pretraining checkpoint loads
  into, when it is not a plain `MaskedLM`;
* `HF` (a `bertzoo.interop.hf_keys.HFFamily`) and `config_to_hf(config, architectures)`: its Hugging Face
  names as data, and the checks of what the Hugging Face class can hold. A family imports the
  Hugging Face `model_type` of its `HF` when `HF.variant` is its own name (SpanBERT exports as BERT).
  A variant with several Hugging Face architectures (GPT: openai-gpt and gpt2) lists them as
  `HF_FAMILIES` and picks one for a config with `hf_family_for(config)`;
* `export_hf(module, directory)`: writes its own modules that the generic exporter cannot (ELECTRA's);
* `encoder_model(config)`: the empty backbone an encoder directory loads into, when it is not an `Encoder`
  (XLNet's two-stream stack, ELMo's biLSTM);
* `use_tokenizer(module, tokenizer)`: fills in what a freshly built module (a pretraining module, or a
  backbone fine-tuned from random init) takes from the run's tokenizer rather than from its config (ELMo's
  character table, spelled from the vocabulary);
* `check_finetune(cfg)`: ConfigError for what the fine-tuning tasks cannot do on the family's backbone (ELMo).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from bertzoo.config import ModelConfig
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.variants import (
    albert,
    bert,
    distilbert,
    electra,
    elmo,
    ernie,
    ernie_thu,
    gpt,
    mass,
    roberta,
    spanbert,
    t5,
    transfo_xl,
    unilm,
    xlnet,
)

VARIANTS: dict[str, ModuleType] = {
    "bert": bert,
    "electra": electra,
    "roberta": roberta,
    "albert": albert,
    "spanbert": spanbert,
    "ernie": ernie,
    "gpt": gpt,
    "unilm": unilm,
    "distilbert": distilbert,
    "t5": t5,
    "mass": mass,
    "xlnet": xlnet,
    "transfo-xl": transfo_xl,
    "elmo": elmo,
    "ernie-thu": ernie_thu,
}


def get_variant(name: str) -> ModuleType:
    """The variant module by name, with the list of known names on a typo."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown variant {name!r}; choose one of: {', '.join(VARIANTS)}") from None


def scratch_config(variant: ModuleType, spec: dict[str, Any], tokenizer: Any) -> ModelConfig:
    """The `ModelConfig` a from-scratch model of `variant` gets from `spec` (a preset and fields) and the run's
    `tokenizer`: what the variant takes from the vocabulary (`model_defaults`: T5's decoder start and unpadded word
    table, MASS's mask), then its size and padding id, each only where `spec` does not set it. Pretraining,
    fine-tuning from random init and a random distillation student all build their model through here."""
    spec = dict(spec)
    for key, value in getattr(variant, "model_defaults", lambda t: {})(tokenizer).items():
        spec.setdefault(key, value)
    spec.setdefault("vocab_size", tokenizer.vocab_size)
    spec.setdefault("pad_token_id", tokenizer.pad_id)
    return variant.model_config(spec)


def model_config_of(model_config: dict[str, Any], tokenizer: Any) -> tuple[ModuleType, ModelConfig]:
    """The variant and `scratch_config` of a `model_config` mapping ({variant (default bert), preset, ...})."""
    spec = dict(model_config)
    variant = get_variant(spec.pop("variant", "bert"))
    return variant, scratch_config(variant, spec, tokenizer)


def preset_names() -> list[str]:
    """All presets of all variants."""
    return [name for module in VARIANTS.values() for name in module.PRESETS]


def _families(module: ModuleType) -> tuple[HFFamily, ...]:
    """A variant's Hugging Face families: its `HF_FAMILIES`, else its `HF` (none without either)."""
    if getattr(module, "HF_FAMILIES", None):
        return tuple(module.HF_FAMILIES)
    return (module.HF,) if getattr(module, "HF", None) is not None else ()


def hf_families() -> dict[str, HFFamily]:
    """Hugging Face model_type -> the family that imports it."""
    return {f.model_type: f for name, m in VARIANTS.items() for f in _families(m) if f.variant == name}


def hf_family(model_type: Any) -> HFFamily:
    """The family of a Hugging Face config's `model_type`, or CheckpointError listing the supported ones."""
    families = hf_families()
    if isinstance(model_type, str) and model_type in families:
        return families[model_type]
    raise CheckpointError(
        f"Hugging Face model_type {model_type!r} is not supported; supported: {', '.join(sorted(families))}"
    )


def hf_variant(config_variant: str) -> ModuleType:
    """The variant module exporting a model of `config_variant` to Hugging Face (it must have `HF`)."""
    module = get_variant(config_variant)
    if not _families(module):
        raise CheckpointError(f"variant {config_variant!r} has no Hugging Face counterpart to convert to or from")
    return module


def hf_family_of(config: ModelConfig) -> HFFamily:
    """The Hugging Face family a model of `config` converts to: its variant's `HF`, or the one its
    `hf_family_for(config)` picks (GPT: by the layout)."""
    module = hf_variant(config.variant)
    pick = getattr(module, "hf_family_for", None)
    return pick(config) if pick is not None else module.HF
