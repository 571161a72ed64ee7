"""Data parallelism as the training loop sees it: the objective runs alone, wrapped in DDP, or sharded
with FSDP; gradients are all-reduced only on a step's last micro-batch; and for saving, the full
weights and optimizer state are brought back to the main rank (the single-process checkpoint layout
for every world size, see `fsdp`)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch import nn

import bertzoo.engine.fsdp as fsdp
from bertzoo.config import TrainConfig
from bertzoo.engine.distributed import DistInfo
from bertzoo.engine.optim import build_optimizer, build_scheduler
from bertzoo.errors import CheckpointError


class Parallel:
    """How `objective` is spread over the job's processes (`mode`: train.distributed, ddp or fsdp).

    With FSDP the objective must still be on the CPU when it is created: only its shards go to
    `device`, and the main rank keeps an unsharded CPU copy to gather weights into for saving.
    """

    def __init__(self, objective: nn.Module, mode: str, dist: DistInfo, device: torch.device) -> None:
        self.objective = objective
        self.dist = dist
        self.device = device
        self.fsdp = mode == "fsdp" and dist.world_size > 1
        self.ddp: nn.parallel.DistributedDataParallel | None = None
        self._shadow: nn.Module | None = None  # FSDP: an unsharded CPU copy on the main rank, for saving

    def wrap(self) -> nn.Module:
        """The module to run forward/backward on: DDP around the objective, or the objective itself
        (single process, or FSDP after `shard`)."""
        if self.dist.world_size > 1 and not self.fsdp:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = nn.parallel.DistributedDataParallel(self.objective, device_ids=ids)
            return self.ddp
        return self.objective

    def shard(
        self, optimizer: torch.optim.Optimizer, scheduler: Any, cfg: TrainConfig, groups: list[dict[str, Any]] | None
    ) -> tuple[torch.optim.Optimizer, Any]:
        """FSDP: shard the objective in place and return optimizer and scheduler rebuilt over the new
        parameters, carrying over whatever state they hold (a resumed run restores into the unsharded
        model). `groups` are the caller's parameter groups, if any, by the unsharded parameters."""
        names = {id(p): n for n, p in self.objective.named_parameters(remove_duplicate=False)}
        opt_state, sched_state = optimizer.state_dict(), scheduler.state_dict()
        self._shadow = copy.deepcopy(self.objective) if self.dist.is_main else None
        fsdp.shard_model(self.objective, self.device, self.dist.world_size)
        if groups is not None:
            groups = fsdp.remap_groups(groups, names, self.objective)
        optimizer = build_optimizer(self.objective, cfg, groups=groups)
        # Scheduler first: building it resets the groups' lr, which the loaded state then restores.
        scheduler = build_scheduler(optimizer, cfg, cfg.max_steps)
        fsdp.load_full_optimizer_state(optimizer, opt_state)
        scheduler.load_state_dict(sched_state)
        return optimizer, scheduler

    def grad_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Context for one micro-batch's backward: only the last micro-batch of a step all-reduces
        gradients; the others accumulate locally."""
        if self.fsdp:
            self.objective.set_requires_gradient_sync(last)
        if self.ddp is not None and not last:
            return self.ddp.no_sync()
        return contextlib.nullcontext()

    def full_norm(self, norm: torch.Tensor) -> torch.Tensor:
        """The gradient norm over every shard (FSDP gives a DTensor; a collective there)."""
        return fsdp.full_tensor(norm) if self.fsdp else norm

    def full_model(self) -> nn.Module | None:
        """The whole model for saving: the objective itself, or under FSDP the main rank's CPU copy
        with the unsharded weights gathered into it (a collective; None on the other ranks)."""
        if not self.fsdp:
            return self.objective
        state = fsdp.full_model_state(self.objective)
        if not self.dist.is_main:
            return None
        assert self._shadow is not None
        missing, unexpected = self._shadow.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise CheckpointError(f"FSDP state gathering lost tensors: {sorted(missing) + sorted(unexpected)}")
        return self._shadow

    def full_optimizer(self, optimizer: torch.optim.Optimizer) -> Any:
        """The optimizer to save: itself, or under FSDP a view of its gathered full state (a collective;
        only the main rank keeps the tensors)."""
        if not self.fsdp:
            return optimizer
        return fsdp.StateView(fsdp.full_optimizer_state(optimizer, keep=self.dist.is_main))
