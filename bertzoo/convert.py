"""Hugging Face <-> bertzoo checkpoints.

Each variant module (`bertzoo/variants/*.py`) holds its own key-name map and config translation
(`HF_MODEL_TYPE`, `config_from_hf`, `config_to_hf`, `state_from_hf`, `state_to_hf`); this module
dispatches to the right one and holds the shared helpers: layer-indexed key maps and the split
and concatenation of our fused query/key/value projection.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import torch

from bertzoo.config import ModelConfig
from bertzoo.errors import CheckpointError


def is_hf_config(raw: dict[str, Any]) -> bool:
    """A Hugging Face config.json has `model_type`; ours has `bertzoo_version`."""
    return "model_type" in raw and "bertzoo_version" not in raw


def expand(pairs: list[tuple[str, str]], num_layers: int) -> list[tuple[str, str]]:
    """Instantiate `{i}` layer placeholders in (hf_key, our_key) pairs."""
    out = []
    for hf, ours in pairs:
        if "{i}" in hf:
            out.extend((hf.format(i=i), ours.format(i=i)) for i in range(num_layers))
        else:
            out.append((hf, ours))
    return out


def fuse_qkv(src: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor | None:
    """Concatenate separate query/key/value tensors (in that order) into our fused projection."""
    if all(n in src for n in names):
        return torch.cat([src[n] for n in names], dim=0)
    return None


def split_qkv(fused: torch.Tensor, hidden: int) -> list[torch.Tensor]:
    """Our fused (3*hidden, ...) projection back into query, key, value."""
    return [fused[j * hidden : (j + 1) * hidden].clone() for j in range(3)]


def normalise_hf_keys(state: dict[str, torch.Tensor], prefix: str = "bert.") -> dict[str, torch.Tensor]:
    """Strip the base-model prefix and map TF-era names (LayerNorm gamma/beta) to today's."""
    out = {}
    for key, value in state.items():
        if key.startswith(prefix):
            key = key[len(prefix) :]
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        out[key] = value
    return out


_normalise_hf_keys = normalise_hf_keys  # older name, kept for callers


def _variant_for_hf(model_type: str | None) -> ModuleType:
    from bertzoo.variants import VARIANTS

    for module in VARIANTS.values():
        if getattr(module, "HF_MODEL_TYPE", None) == model_type:
            return module
    known = sorted(m.HF_MODEL_TYPE for m in VARIANTS.values() if getattr(m, "HF_MODEL_TYPE", None))
    raise CheckpointError(f"Hugging Face model_type {model_type!r} is not supported; supported: {', '.join(known)}")


def _variant(config: ModelConfig) -> ModuleType:
    from bertzoo.variants import get_variant

    module = get_variant(config.variant)
    if not hasattr(module, "state_to_hf"):
        raise CheckpointError(f"variant {config.variant!r} has no Hugging Face counterpart to convert to or from")
    return module


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face config dict (dispatches on `model_type`)."""
    return _variant_for_hf(raw.get("model_type")).config_from_hf(raw)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face config dict for an exported bertzoo model."""
    return _variant(config).config_to_hf(config, architectures)


def state_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF tensors -> bertzoo keys (`encoder.` prefix for the backbone, heads by objective).
    Returns (state, HF keys that were not used)."""
    return _variant(config).state_from_hf(state, config)


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys -> HF keys; `prefix` is the base-model prefix ("bert." for heads models, "" for the base)."""
    return _variant(config).state_to_hf(state, config, prefix=prefix)
