"""Where a run trains and whether its training settings make sense there, checked before anything is
built: `resolve_device` turns `train.device` into a device, `validate` rejects impossible values."""

from __future__ import annotations

import torch

from bertzoo.config import TrainConfig
from bertzoo.errors import ConfigError


def resolve_device(spec: str, local_rank: int = 0) -> torch.device:
    """`auto` -> this rank's CUDA device if available, else CPU; validates explicit devices."""
    if spec == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise ConfigError(f"train.device={spec!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"train.device={spec} but CUDA is not available; use train.device=cpu or auto")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def validate(cfg: TrainConfig, device: torch.device) -> None:
    """Raise ConfigError naming the first `train.*` value the loop cannot run with on `device`."""
    for name in ("batch_size", "grad_accum", "max_steps", "log_every"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"train.{name} must be >= 1, got {getattr(cfg, name)}")
    for name in ("save_every", "keep_last", "eval_every"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"train.{name} must be >= 0 (0 turns it off), got {getattr(cfg, name)}")
    if cfg.clip_norm is not None and cfg.clip_norm <= 0:
        raise ConfigError(f"train.clip_norm must be positive or null (no clipping), got {cfg.clip_norm}")
    if cfg.max_minutes is not None and cfg.max_minutes <= 0:
        raise ConfigError(f"train.max_minutes must be positive or null, got {cfg.max_minutes}")
    if cfg.precision == "fp16" and device.type != "cuda":
        raise ConfigError(f"train.precision=fp16 needs a CUDA device, got {device}; use train.precision=bf16 on CPU")
    if cfg.threads is not None and cfg.threads < 1:
        raise ConfigError(f"train.threads must be >= 1 or null, got {cfg.threads}")
    if cfg.epochs is not None and cfg.epochs <= 0:
        raise ConfigError(f"train.epochs must be positive or null (then train.max_steps counts), got {cfg.epochs}")
    if cfg.eval_batch_size is not None and cfg.eval_batch_size < 1:
        raise ConfigError(f"train.eval_batch_size must be >= 1 or null (= batch_size), got {cfg.eval_batch_size}")
    if cfg.early_stopping_patience < 0:
        raise ConfigError(f"train.early_stopping_patience must be >= 0 (0 = off), got {cfg.early_stopping_patience}")
