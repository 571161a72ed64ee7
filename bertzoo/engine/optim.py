"""AdamW with BERT's weight-decay exclusions, and the learning-rate schedules."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from bertzoo.config import TrainConfig
from bertzoo.engine.distributed import is_main
from bertzoo.engine.progress import say
from bertzoo.errors import ConfigError
from bertzoo.nn.param_groups import decay_split

SCHEDULES = ("linear", "constant", "cosine", "wsd")
CLOCKS = ("auto", "steps", "time")
# A time-clocked schedule is the step schedule over this many virtual steps of the budget: fine enough that
# the learning rate moves smoothly, and it reuses one definition of each schedule's shape.
_TIME_RESOLUTION = 100_000


@dataclass
class BudgetClock:
    """The share of `train.max_minutes` spent so far, set by the trainer before each step and read by a
    time-clocked schedule (`train.schedule_clock: time`)."""

    fraction: float = 0.0


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Split trainable parameters into a decayed and a non-decayed group.

    Biases, normalisation weights and every other 1-D parameter get no decay; matrices, including the
    word embeddings, are decayed as in BERT (`bertzoo.nn.param_groups.decay_split`). A parameter shared by
    several modules (tied embeddings) appears once. Each group carries `param_names` for inspection;
    empty groups are left out.
    """
    decay: dict[str, Any] = {"params": [], "weight_decay": weight_decay, "param_names": []}
    no_decay: dict[str, Any] = {"params": [], "weight_decay": 0.0, "param_names": []}
    for name, p, decayed in decay_split(model):
        group = decay if decayed else no_decay
        group["params"].append(p)
        group["param_names"].append(name)
    return [g for g in (decay, no_decay) if g["params"]]


def build_optimizer(
    model: nn.Module, cfg: TrainConfig, groups: list[dict[str, Any]] | None = None
) -> torch.optim.AdamW:
    """AdamW over `groups` (default `param_groups(model, cfg.weight_decay)`; groups may set their own
    `lr`, e.g. layer-wise decay), built by `adamw`."""
    if groups is None:
        groups = param_groups(model, cfg.weight_decay)
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise ConfigError("the model has no trainable parameters; check requires_grad / frozen layers")
    if cfg.lr <= 0:
        raise ConfigError(f"train.lr must be positive, got {cfg.lr}")
    return adamw(
        groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay
    )


def adamw(params: Iterable[Any], **settings: Any) -> torch.optim.AdamW:
    """torch's AdamW over `params` (tensors or groups) with `settings`, on the fused kernel where it fits
    (`fused_adamw_fits`) and the torch build has it, else foreach."""
    params = list(params)
    tensors = [t for g in params for t in (g["params"] if isinstance(g, dict) else [g])]
    if fused_adamw_fits(tensors):
        try:
            return torch.optim.AdamW(params, fused=True, **settings)
        except RuntimeError:  # a torch without the fused kernel for this device
            pass
    return torch.optim.AdamW(params, foreach=True, **settings)


def fused_adamw_fits(params: list[torch.Tensor]) -> bool:
    """Whether AdamW's fused kernel (one pass over each parameter) serves `params`: plain floating-point
    tensors all on CUDA or all on the CPU; sharded (DTensor) parameters on the CPU keep foreach. The CPU gains
    most (docs/performance.md, "The optimizer step")."""
    devices = {p.device.type for p in params}
    if not params or not all(p.is_floating_point() for p in params):
        return False
    if devices == {"cuda"}:
        return True
    return devices == {"cpu"} and all(type(p) in (torch.Tensor, nn.Parameter) for p in params)


def warmup_steps_for(cfg: TrainConfig, total_steps: int) -> int:
    """Warmup length: `warmup_steps` if set, else `warmup_ratio * total_steps` rounded up."""
    if cfg.warmup_steps < 0 or not 0.0 <= cfg.warmup_ratio <= 1.0:
        raise ConfigError(
            f"train.warmup_steps must be >= 0 and train.warmup_ratio in [0, 1], got "
            f"{cfg.warmup_steps} and {cfg.warmup_ratio}"
        )
    if cfg.warmup_steps > 0:
        return cfg.warmup_steps
    return math.ceil(cfg.warmup_ratio * total_steps)


def lr_factor(step: int, *, schedule: str, warmup: int, total: int, decay_ratio: float = 0.2) -> float:
    """Multiplier of the peak learning rate used by optimizer step `step` (0-based).

    Warmup is linear from 0 (the convention of BERT and Hugging Face's schedulers, so curves are
    comparable); afterwards "linear" decays to 0 at `total`, "cosine" follows half a cosine to 0
    and "constant" stays at 1. "wsd" (warmup-stable-decay) holds the peak and decays linearly to 0
    over the last `decay_ratio` of all steps, so a run can be stopped early at full rate and resumed
    into its decay. A one-cycle (triangular) schedule is "linear" with `warmup_ratio: 0.5`.
    """
    if step < warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "wsd":
        decay_start = max(warmup, total - math.ceil(decay_ratio * total))
        if step < decay_start:
            return 1.0
        return max(0.0, 1.0 - (step - decay_start) / max(1, total - decay_start))
    progress = (step - warmup) / max(1, total - warmup)
    progress = min(1.0, max(0.0, progress))
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ConfigError(f"train.schedule={schedule!r} is not allowed; choose one of: {', '.join(SCHEDULES)}")


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int, clock: BudgetClock | None = None
) -> LambdaLR:
    """LambdaLR with linear warmup then `cfg.schedule` ("linear", "constant", "cosine" or "wsd").

    When the schedule follows the clock (`cfg.clock == "time"`: `schedule_clock: time`, or `auto` with a time
    budget) it runs over the time budget or the steps, whichever is further along: warmup is `warmup_ratio` of
    the run and the decay ends when the first cap does, whatever the step rate (cramming's budget-based
    schedule). `clock` carries the spent share of the budget.
    """
    if total_steps < 1:
        raise ConfigError(f"total training steps must be >= 1, got {total_steps}; raise train.max_steps")
    if cfg.schedule not in SCHEDULES:
        raise ConfigError(f"train.schedule={cfg.schedule!r} is not allowed; choose one of: {', '.join(SCHEDULES)}")
    schedule = cfg.schedule
    decay = cfg.decay_ratio
    if not 0.0 < decay <= 1.0:
        raise ConfigError(f"train.decay_ratio must be in (0, 1], got {decay}")
    check_time_clock(cfg)
    note = clock_note(cfg)
    if note and is_main():
        say(note)
    by_time = cfg.clock == "time"
    if by_time and clock is None:
        raise ValueError("a time-clocked schedule needs the trainer's BudgetClock")
    budget = clock if by_time else None  # None: the schedule counts optimizer steps
    total = _TIME_RESOLUTION if by_time else total_steps
    warmup = warmup_steps_for(cfg, total)

    # A closure (not a callable object) keeps the scheduler's state_dict free of custom objects, so it
    # round-trips through torch.load(weights_only=True).
    def factor(step: int) -> float:
        if budget is None:
            position = step
        else:  # the share done is the budget's or the steps', whichever is larger: either cap ends the schedule
            position = min(total, round(max(budget.fraction, step / total_steps) * total))
        return lr_factor(position, schedule=schedule, warmup=warmup, total=total, decay_ratio=decay)

    return LambdaLR(optimizer, factor)


def clock_note(cfg: TrainConfig) -> str | None:
    """One line for a run whose time budget may stop it before its step schedule ends (a time cap with warmup
    in steps keeps the step clock): the learning rate would not have decayed when the budget runs out."""
    if cfg.max_minutes is None or cfg.clock == "time":
        return None
    return (
        f"note: the learning-rate schedule counts train.max_steps={cfg.max_steps}; if train.max_minutes="
        f"{cfg.max_minutes:g} stops the run first, the rate will not have decayed (train.warmup_ratio instead of "
        "warmup_steps lets it follow the time budget)"
    )


def check_time_clock(cfg: TrainConfig) -> None:
    """Refuse, in one line, a `schedule_clock` the schedule cannot follow."""
    if cfg.schedule_clock not in CLOCKS:
        raise ConfigError(
            f"train.schedule_clock={cfg.schedule_clock!r} is not allowed; choose one of: {', '.join(CLOCKS)}"
        )
    if cfg.clock != "time":
        return
    if cfg.max_minutes is None:
        raise ConfigError("train.schedule_clock: time follows the time budget; set train.max_minutes")
    if cfg.warmup_steps > 0:
        raise ConfigError(
            "train.schedule_clock: time measures warmup as a share of the budget; set train.warmup_ratio "
            f"instead of train.warmup_steps ({cfg.warmup_steps})"
        )
