"""Every config shipped under configs/ loads with its command's loader (no unknown key, no bad value) and
names a model the library can build: a typo in a shipped recipe fails here, not in a user's first run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertzoo.config import load_distill_config, load_finetune_config, load_pretrain_config
from bertzoo.variants import get_variant

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _shipped(kind: str) -> list[Path]:
    return sorted((CONFIGS / kind).glob("*.yaml"))


def test_every_config_directory_is_covered():
    assert {p.name for p in CONFIGS.iterdir() if p.is_dir()} == {"pretrain", "finetune", "distill"}
    assert len(_shipped("pretrain")) >= 10


@pytest.mark.parametrize("path", _shipped("pretrain"), ids=lambda p: p.stem)
def test_pretrain_configs_load_and_build(path):
    cfg = load_pretrain_config(path)
    variant = get_variant(cfg.variant)
    config = variant.model_config(cfg.model)
    assert config.num_layers >= 1 and config.hidden_size % config.num_heads == 0
    assert not cfg.objective or cfg.objective in variant.objectives


@pytest.mark.parametrize("path", _shipped("finetune"), ids=lambda p: p.stem)
def test_finetune_configs_load(path):
    cfg = load_finetune_config(path)
    assert cfg.train.output_dir.startswith("runs/")
    assert bool(cfg.model) != bool(cfg.model_config)


@pytest.mark.parametrize("path", _shipped("distill"), ids=lambda p: p.stem)
def test_distill_configs_load(path):
    cfg = load_distill_config(path)
    assert cfg.method in ("distilbert", "tinybert") and cfg.stage in ("general", "task")
    assert cfg.train.output_dir.startswith("runs/")
