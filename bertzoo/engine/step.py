"""One optimizer step: draw `grad_accum` micro-batches, forward/backward each under autocast with its
share of the step's loss, clip, check for non-finite values on every rank, then step (or skip) the
optimizer and step the scheduler.

Loss normalisation: an objective that declares its loss terms and their item counts
(`ObjectiveOutput.terms`, `loss_counts(batch)`) gets each term weighted by this micro-batch's share of
the term's items in the whole step over all ranks, so accumulation and data parallelism give exactly
the one-big-batch gradient (docs/scaling.md); other objectives use the mean of micro-batch means.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

import bertzoo.engine.distributed as distributed
from bertzoo.batch import Batch
from bertzoo.config import TrainConfig
from bertzoo.engine.compilation import CompiledModel
from bertzoo.engine.logs import RunningAverage
from bertzoo.engine.parallel import Parallel
from bertzoo.engine.resume import RESUME_HINT
from bertzoo.engine.weights import unwrap
from bertzoo.errors import BertzooError
from bertzoo.precision import autocast

MAX_CONSECUTIVE_SKIPS = 10


def step_counts(
    objective: nn.Module, micro: list[Batch], world_size: int, device: torch.device
) -> tuple[list[dict[str, int] | None], dict[str, int] | None]:
    """Per-micro-batch item counts of each loss term and their totals over the whole step (all ranks);
    Nones for an objective without `loss_counts`."""
    counter = getattr(unwrap(objective), "loss_counts", None)
    if counter is None:
        return [None] * len(micro), None
    local = [counter(b) for b in micro]
    names = sorted({k for c in local for k in c})
    totals = torch.tensor([sum(c.get(k, 0) for c in local) for k in names], dtype=torch.int64)
    if world_size > 1:  # one small collective per step; every rank has the same term names
        totals = totals.to(device)
        distributed.all_reduce_sum(totals)
    return local, dict(zip(names, totals.tolist(), strict=True))


def scaled_loss(
    out: Any, counts: dict[str, int] | None, totals: dict[str, int] | None, grad_accum: int, world_size: int
) -> torch.Tensor:
    """What a micro-batch back-propagates: its share of the step's loss.

    With per-term counts, each term's mean is weighted by this batch's share of the term's items in
    the whole step (x world size, as DDP/FSDP average gradients over ranks): the gradient equals that
    of the mean over every item of the global batch. Otherwise the batch mean / grad_accum.
    """
    if counts is None or totals is None or not out.terms:
        return out.loss.float() / grad_accum
    loss = out.loss.float() * 0.0  # keeps the graph when a term has no items anywhere
    for name, (mean, weight) in out.terms.items():
        if name not in counts:
            raise BertzooError(f"the objective's loss_counts() has no count for its loss term {name!r}")
        if totals.get(name, 0) > 0:
            loss = loss + weight * mean.float() * (counts[name] * world_size / totals[name])
    return loss


@dataclasses.dataclass
class StepResult:
    """What one optimizer step did."""

    loss: float  # the step's loss (summed shares: the global-batch mean once averaged over ranks)
    lr: float  # the largest group's learning rate used (layer-wise decay: the top layers')
    tokens: int  # tokens in this rank's micro-batches
    metrics: RunningAverage  # the step's metrics (and gradient norm), to merge into the log interval
    skipped: str | None = None  # why the update was skipped ("loss nan"), None when it was applied


class SkipCounter:
    """Steps whose update was skipped for a non-finite loss or gradient: `total` is saved with the run;
    too many in a row means training diverged."""

    def __init__(self) -> None:
        self.total = 0
        self.consecutive = 0

    def applied(self) -> None:
        """A step's update went through."""
        self.consecutive = 0

    def skipped(self, step: int, what: str) -> str:
        """Count a skipped `step` (`what` was non-finite); the message to log."""
        self.total += 1
        self.consecutive += 1
        return f"step {step}: non-finite {what}; update skipped ({self.consecutive} in a row, {self.total} in total)"

    def check_diverged(self, step: int) -> None:
        """Raise BertzooError once too many steps in a row were skipped: training diverged."""
        if self.consecutive >= MAX_CONSECUTIVE_SKIPS:
            raise BertzooError(
                f"training diverged: {self.consecutive} consecutive steps had a non-finite loss "
                f"or gradient (last at step {step}); lower train.lr, set train.clip_norm or use "
                f"precision bf16/fp32, then restart from the last checkpoint with {RESUME_HINT}"
            )


class OptimizerStep:
    """Runs optimizer steps for one training session; `step(batches)` does one."""

    def __init__(
        self,
        cfg: TrainConfig,
        device: torch.device,
        objective: nn.Module,
        model: CompiledModel,
        parallel: Parallel,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        scaler: torch.amp.GradScaler,
        params: list[nn.Parameter],
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.objective = objective
        self.model = model
        self.parallel = parallel
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = scaler
        self.params = params  # every parameter, frozen or not: gradual unfreezing turns some on later
        self.world_size = parallel.dist.world_size

    def step(self, batches: Iterator[Batch]) -> StepResult:
        """Draw the step's micro-batches, accumulate their gradients and apply (or skip) the update."""
        cfg = self.cfg
        step_avg = RunningAverage()
        loss_sum = torch.zeros((), device=self.device)
        micro = [next(batches) for _ in range(cfg.grad_accum)]
        tokens = sum(b.num_tokens for b in micro)  # counted on the host copies: no device sync
        counts, totals = step_counts(self.objective, micro, self.world_size, self.device)
        non_blocking = self.device.type == "cuda"
        for i, batch in enumerate(micro):
            batch = batch.to(self.device, non_blocking=non_blocking)
            with self.parallel.grad_sync(last=i == len(micro) - 1):
                with autocast(cfg.precision, self.device):
                    out = self.model(batch)
                loss = scaled_loss(out, counts[i], totals, cfg.grad_accum, self.world_size)
                self.scaler.scale(loss).backward()
            loss_sum += loss.detach()
            step_avg.update({k: v for k, v in out.metrics.items() if k != "loss"}, out.counts)
        # The step's loss: summed shares (the mean over the global batch once averaged over ranks).
        step_avg.update({"loss": loss_sum})
        self.model.verified()

        if self.scaler.is_enabled():
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        if cfg.clip_norm is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.clip_norm, foreach=True)
        elif grads:
            grad_norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        else:
            grad_norm = torch.zeros((), device=self.device)
        grad_norm = self.parallel.full_norm(grad_norm)
        # The one host sync per optimizer step: deciding whether to apply the update needs the values.
        loss_val, norm_val = torch.stack([loss_sum.float(), grad_norm.float().to(self.device)]).tolist()
        bad_loss = not math.isfinite(loss_val)
        # fp16 overflow is routine: GradScaler skips that update itself and lowers the scale.
        bad_grad = not math.isfinite(norm_val) and not self.scaler.is_enabled()
        bad = bad_loss or bad_grad
        if self.world_size > 1:
            bad = distributed.any_rank(bad, self.device)
        lr_used = max(g["lr"] for g in self.optimizer.param_groups)
        skipped = None
        if not bad:
            if self.scaler.is_enabled():
                self.scaler.step(self.optimizer)
            else:
                self.optimizer.step()
            if math.isfinite(norm_val):
                step_avg.update({"grad_norm": grad_norm.detach().float()})
        else:
            skipped = f"loss {loss_val}" if bad_loss else f"gradient norm {norm_val}"
        if self.scaler.is_enabled():
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        # A skipped step still counts: the run keeps its configured length and learning-rate schedule.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)`")
            self.scheduler.step()
        return StepResult(loss=loss_val, lr=lr_used, tokens=tokens, metrics=step_avg, skipped=skipped)
