"""BERT (Devlin et al. 2018): post-norm encoder, learned positions, MLM + NSP pretraining."""

from __future__ import annotations

from typing import Any

from bertzoo.config import ModelConfig, from_dict
from bertzoo.errors import ConfigError
from bertzoo.model import Encoder
from bertzoo.objectives.mlm import MaskedLM

# Sizes from the BERT paper (base, large) and Turc et al. 2019, "Well-Read Students Learn Better"
# (tiny .. medium). The intermediate size is always 4x hidden and heads have 64 dims.
PRESETS: dict[str, dict[str, Any]] = {
    "bert-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "bert-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "bert-small": {"num_layers": 4, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "bert-medium": {"num_layers": 8, "hidden_size": 512, "num_heads": 8, "intermediate_size": 2048},
    "bert-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "bert-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}

OBJECTIVES = ("mlm+nsp", "mlm")


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    spec = dict(spec)
    preset = spec.pop("preset", None)
    base: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"model.preset={preset!r} is not a BERT preset; choose one of: {', '.join(PRESETS)}")
        base = dict(PRESETS[preset])
    base.update(spec)
    return from_dict(ModelConfig, base, "model")


def build(config: ModelConfig, objective: str = "mlm+nsp") -> MaskedLM:
    """The pretraining module: encoder + MLM head (+ NSP head)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for BERT; choose one of: {', '.join(OBJECTIVES)}")
    return MaskedLM(Encoder(config), sentence_task="nsp" if objective == "mlm+nsp" else None)
