"""Every model family bertzoo knows, in one explicit table."""

from __future__ import annotations

from types import ModuleType

from bertzoo.errors import ConfigError
from bertzoo.variants import albert, bert, electra, ernie, roberta, spanbert

VARIANTS: dict[str, ModuleType] = {
    "bert": bert,
    "electra": electra,
    "roberta": roberta,
    "albert": albert,
    "spanbert": spanbert,
    "ernie": ernie,
}


def get_variant(name: str) -> ModuleType:
    """The variant module by name, with the list of known names on a typo."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown variant {name!r}; choose one of: {', '.join(VARIANTS)}") from None


def preset_names() -> list[str]:
    """All presets of all variants."""
    return [name for module in VARIANTS.values() for name in module.PRESETS]
