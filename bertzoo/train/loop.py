"""The training loop shared by pretraining, fine-tuning and distillation.

One explicit loop, no hidden hooks: draw `grad_accum` micro-batches, forward/backward each under
autocast, clip, check for non-finite values, step the optimizer and scheduler, then log, evaluate,
checkpoint. Everything needed to continue bit-for-bit (weights, optimizer, scheduler, RNG states,
data position) goes into each checkpoint; see `bertzoo.train.checkpoint` for the layout.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from bertzoo.batch import Batch
from bertzoo.config import TrainConfig, resolve_batching, to_plain
from bertzoo.errors import BertzooError, CheckpointError, ConfigError
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.train import distributed, fsdp
from bertzoo.train.checkpoint import (
    capture_rng_state,
    check_finite,
    find_latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_rank_rng,
    save_checkpoint,
    save_model_files,
    unwrap,
    write_atomic,
    write_dir_atomic,
)
from bertzoo.train.metrics import MetricsWriter, RunningAverage, plot_metrics
from bertzoo.train.optim import build_optimizer, build_scheduler
from bertzoo.train.sampler import LengthBucketSampler, ResumableBatchSampler

MAX_CONSECUTIVE_SKIPS = 10
RESUME_HINT = "--resume auto"

Callback = Callable[["Trainer", int], None]
EvalFn = Callable[[nn.Module], Mapping[str, float]]
BEST_DIR = "best"


def eval_metric_key(name: str) -> str:
    """`accuracy` or `eval_accuracy` -> `eval_accuracy` (the name eval metrics are logged under)."""
    return name if name.startswith("eval") else f"eval_{name}"


def lower_is_better(name: str) -> bool:
    """Direction inferred from a metric's name: losses, perplexities and error rates go down."""
    low = name.lower()
    return any(word in low for word in ("loss", "ppl", "perplexity", "error", "wer"))


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


def _validate(cfg: TrainConfig, device: torch.device) -> None:
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


def _ignore_stop_signals(worker_id: int) -> None:
    """DataLoader worker init: leave SIGINT/SIGTERM to the main process.

    Ctrl-C reaches the whole process group; a worker dying of it would crash the loop before it can
    finish the step and checkpoint. Workers still exit with the main process (DataLoader watchdog).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _fmt_duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _fmt_rate(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


class Trainer:
    """Trains `objective` on `train_dataset` as configured by `cfg`; call `train()`.

    `save_extra(dir)` writes additional files (tokenizer) next to the weights in every checkpoint and
    in `final/`. `eval_fn(objective) -> {name: value}` runs every `cfg.eval_every` steps and at the
    end; it runs with the training RNG state forked, so evaluating never changes the training run.
    `callbacks` are called as `cb(trainer, step)` after each optimizer step. `num_workers` > 0 loads
    data in worker processes (started afresh each epoch so `dataset.set_epoch` reaches them).

    Fine-tuning additions: `param_groups` (e.g. layer-wise learning-rate decay) replace the default
    AdamW groups; `epoch_callbacks` are called as `cb(trainer, epoch)` with the epoch about to be
    trained, at the start of `train()` (also when resuming) and whenever an epoch ends (gradual
    unfreezing); `metric_for_best` (overridden by `cfg.metric_for_best`) picks the best evaluation,
    whose model goes to `output_dir/best/`, and drives early stopping (`cfg.early_stopping_patience`).
    `cfg.epochs` sets max_steps from the batches per epoch; `cfg.bucket_by_length` batches similar
    lengths together when the dataset has `lengths`; `drop_last=False` keeps an epoch's short last batch.
    """

    def __init__(
        self,
        objective: nn.Module,
        train_dataset: Any,
        collate_fn: Callable[[list[dict[str, Any]]], Batch],
        cfg: TrainConfig,
        *,
        save_extra: Callable[[Path], None] | None = None,
        run_config: dict[str, Any] | None = None,
        eval_fn: EvalFn | None = None,
        callbacks: Sequence[Callback] = (),
        num_workers: int = 0,
        progress: bool = True,
        param_groups: list[dict[str, Any]] | None = None,
        epoch_callbacks: Sequence[Callback] = (),
        metric_for_best: str | None = None,
        drop_last: bool = True,
    ) -> None:
        self.dist = distributed.dist_info()
        cfg = self.cfg = resolve_batching(cfg, self.dist.world_size)
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        _validate(cfg, self.device)
        if num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
        # auto -> bf16 or fp32 from the hardware; the run's config records what was used.
        cfg = self.cfg = dataclasses.replace(cfg, precision=resolve_precision(cfg.precision, self.device))
        self.dist = distributed.init_distributed(self.device)
        self.is_main = self.dist.is_main
        if cfg.threads:
            torch.set_num_threads(cfg.threads)

        # FSDP: the model stays on the CPU until it is sharded; only its shards go to the device.
        self.fsdp = cfg.distributed == "fsdp" and self.dist.world_size > 1
        self.objective = objective if self.fsdp else objective.to(self.device)
        self.train_dataset = train_dataset
        self.collate_fn = collate_fn
        self.save_extra = save_extra
        self.run_config = run_config
        self.eval_fn = eval_fn
        self.callbacks = list(callbacks)
        self.num_workers = num_workers
        self.progress = progress
        self.output_dir = Path(cfg.output_dir)

        self.epoch_callbacks = list(epoch_callbacks)
        lengths = getattr(train_dataset, "lengths", None)
        if cfg.bucket_by_length and lengths is None:
            raise ConfigError(
                f"train.bucket_by_length needs a dataset with per-example lengths, and "
                f"{type(train_dataset).__name__} has none; set train.bucket_by_length false"
            )
        if cfg.bucket_by_length:
            self.sampler: ResumableBatchSampler = LengthBucketSampler(
                lengths,
                cfg.batch_size,
                seed=cfg.seed,
                drop_last=drop_last,
                rank=self.dist.rank,
                world_size=self.dist.world_size,
            )
        else:
            self.sampler = ResumableBatchSampler(
                len(train_dataset),
                cfg.batch_size,
                seed=cfg.seed,
                shuffle=True,
                drop_last=drop_last,
                rank=self.dist.rank,
                world_size=self.dist.world_size,
            )
        if cfg.epochs is not None:
            # A copy: the caller's config keeps meaning "epochs", this run's means "steps".
            steps = max(1, math.ceil(cfg.epochs * self.sampler.batches_per_epoch() / cfg.grad_accum))
            cfg = self.cfg = dataclasses.replace(cfg, max_steps=steps)

        self._groups_arg = param_groups
        self.optimizer = build_optimizer(self.objective, cfg, groups=param_groups)
        self.scheduler = build_scheduler(self.optimizer, cfg, cfg.max_steps)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.precision == "fp16")
        # Every parameter, frozen or not: gradual unfreezing turns some on later, and clipping skips
        # those without a gradient anyway.
        self._params = list({id(p): p for p in self.objective.parameters()}.values())

        name = cfg.metric_for_best or metric_for_best or ""
        self.metric_for_best = eval_metric_key(name) if name else ""
        if cfg.greater_is_better is not None:
            self.greater_is_better = cfg.greater_is_better
        else:
            self.greater_is_better = not lower_is_better(self.metric_for_best or "loss")
        self.save_best = bool(self.metric_for_best) or cfg.early_stopping_patience > 0
        if cfg.early_stopping_patience and eval_fn is None:
            raise ConfigError(
                "train.early_stopping_patience needs evaluations on a dev set; provide dev data "
                "or set train.early_stopping_patience 0"
            )

        # Progress, saved in every checkpoint.
        self.step = 0
        self.tokens_seen = 0
        self.elapsed_before = 0.0  # seconds spent in earlier sessions of this run
        self.skipped_steps = 0
        self.best_metric: dict[str, Any] | None = None
        self.evals_without_improvement = 0
        self._data_epoch = 0
        self._data_offset = 0

        self._consecutive_skips = 0
        self._stop_reason: str | None = None
        self._last_saved_step: int | None = None
        self._last_checkpoint: Path | None = None
        self._last_logged_step: int | None = None
        self._last_eval_step: int | None = None
        self._epoch_announced: int | None = None
        self._final_metrics: dict[str, float] = {}
        self._ddp: nn.parallel.DistributedDataParallel | None = None
        self._shadow: nn.Module | None = None  # FSDP: an unsharded CPU copy on the main rank, for saving
        self._compile_unverified = False
        self._bar: Any = None
        self._session_start = time.monotonic()
        self._interval_start = self._session_start
        self._interval_tokens = 0
        self._last_lr = cfg.lr
        self._last_loss = float("nan")
        self._bar_acc = ""

    # --------------------------------------------------------------------------------------- setup

    def _seed(self) -> None:
        # Different ranks get different dropout masks; rank 0 matches a single-process run.
        seed = self.cfg.seed + self.dist.rank
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)

    def hardware(self) -> dict[str, Any]:
        """The device, the precision `auto` resolved to and the CPU kind, recorded beside every figure."""
        return {"device": str(self.device), "precision": self.cfg.precision, "cpu_capability": cpu_capability()}

    def _resolve_resume(self, resume: str | None) -> Path | None:
        if resume is None:
            if list_checkpoints(self.output_dir):
                # Starting over would mix two runs' checkpoints; --resume auto would later pick the old one.
                raise ConfigError(
                    f"{self.output_dir} already holds checkpoints of a run; continue it with {RESUME_HINT}, "
                    "or choose another train.output_dir (or delete that one) to start fresh"
                )
            return None
        if resume == "auto":
            path = find_latest_checkpoint(self.output_dir, verify_hash=True, cleanup=self.is_main)
            if path is None:
                self._say(f"no complete checkpoint in {self.output_dir / 'checkpoints'}; starting fresh")
            return path
        path = Path(resume)
        if not path.is_dir():
            raise CheckpointError(f"checkpoint {path} does not exist; pass a checkpoint directory or {RESUME_HINT}")
        return path

    def _restore(self, path: Path) -> None:
        state = load_checkpoint(
            path, self.objective, self.optimizer, self.scheduler, scaler=self.scaler, restore_rng=False
        )
        if not restore_rank_rng(path, self.dist.rank):
            # Written by a run with fewer processes: this rank had no streams of its own. Derive them
            # deterministically (same resume, same run); the continuation is exact for the ranks it held.
            torch.manual_seed(self.cfg.seed + 1_000_003 * self.dist.rank + int(state.get("step", 0)))
        try:
            self.step = int(state["step"])
            self.sampler.load_state_dict(state["sampler"])
            self.tokens_seen = int(state.get("tokens_seen", 0))
            self.elapsed_before = float(state.get("elapsed_seconds", 0.0))
            self.skipped_steps = int(state.get("skipped_steps", 0))
            self.best_metric = state.get("best_metric")
            self.evals_without_improvement = int(state.get("evals_without_improvement", 0))
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}/trainer_state.json is incomplete; use another checkpoint") from None
        self._data_epoch, self._data_offset = self.sampler.epoch, self.sampler.offset
        self._last_saved_step = self.step
        self._last_checkpoint = path
        self._last_logged_step = self.step
        self._last_eval_step = self.step
        self._say(f"resumed from {path} at step {self.step} (epoch {self.sampler.epoch})")

    def _prepare_model(self) -> nn.Module:
        model: nn.Module = self.objective
        if self.cfg.activation_checkpointing:
            from bertzoo.nn import enable_activation_checkpointing

            enable_activation_checkpointing(model)
        if self.fsdp:
            self._shard()
        elif self.dist.world_size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self._ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids)
            model = self._ddp
        if self.cfg.compile:
            try:
                model = torch.compile(model)
                self._compile_unverified = True  # compilation really happens at the first forward
            except Exception as exc:  # compile support varies by platform; eager always works
                warnings.warn(f"torch.compile failed ({exc}); training without it", stacklevel=2)
        return model

    def _shard(self) -> None:
        """Shard the model (FSDP2) and rebuild optimizer and scheduler over the new parameters,
        carrying over whatever state they hold (a resumed run restores into the unsharded model)."""
        names = {id(p): n for n, p in self.objective.named_parameters(remove_duplicate=False)}
        opt_state, sched_state = self.optimizer.state_dict(), self.scheduler.state_dict()
        self._shadow = copy.deepcopy(self.objective) if self.is_main else None
        fsdp.shard_model(self.objective, self.device, self.dist.world_size)
        groups = None
        if self._groups_arg is not None:
            groups = fsdp.remap_groups(self._groups_arg, names, self.objective)
        self.optimizer = build_optimizer(self.objective, self.cfg, groups=groups)
        # Scheduler first: building it resets the groups' lr, which the loaded state then restores.
        self.scheduler = build_scheduler(self.optimizer, self.cfg, self.cfg.max_steps)
        fsdp.load_full_optimizer_state(self.optimizer, opt_state)
        self.scheduler.load_state_dict(sched_state)
        self._params = list({id(p): p for p in self.objective.parameters()}.values())

    def _gather(self) -> nn.Module | None:
        """FSDP: the unsharded weights copied into the main rank's CPU copy (collective; None elsewhere)."""
        state = fsdp.full_model_state(self.objective)
        if not self.is_main:
            return None
        assert self._shadow is not None
        missing, unexpected = self._shadow.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise CheckpointError(f"FSDP state gathering lost tensors: {sorted(missing) + sorted(unexpected)}")
        return self._shadow

    def _autocast(self) -> contextlib.AbstractContextManager:
        dtype = autocast_dtype(self.cfg.precision)
        return contextlib.nullcontext() if dtype is None else torch.autocast(self.device.type, dtype=dtype)

    # ---------------------------------------------------------------------------------------- data

    def _loader_generator(self, epoch: int) -> torch.Generator:
        # The DataLoader draws its worker base seed from this generator; with none it would draw from the
        # global RNG, and a resumed run (which creates its loader at a different moment) would diverge.
        g = torch.Generator()
        g.manual_seed((self.cfg.seed * 1_000_003 + self.dist.rank * 7919 + epoch) % 2**63)
        return g

    def _batches(self) -> Iterator[Batch]:
        """Micro-batches forever, epoch after epoch, from the sampler's current position."""
        empty_epochs = 0
        while True:
            if self.sampler.exhausted:
                self.sampler.set_epoch(self.sampler.epoch + 1)
            epoch = self.sampler.epoch
            if hasattr(self.train_dataset, "set_epoch"):
                self.train_dataset.set_epoch(epoch)
            self._data_epoch, self._data_offset = epoch, self.sampler.offset
            loader = DataLoader(
                self.train_dataset,
                batch_sampler=self.sampler,
                collate_fn=self.collate_fn,
                num_workers=self.num_workers,
                pin_memory=self.device.type == "cuda",
                generator=self._loader_generator(epoch),
                worker_init_fn=_ignore_stop_signals if self.num_workers else None,
            )
            produced = 0
            for batch in loader:
                produced += 1
                # Position of what the loop has consumed; the sampler itself may run ahead (prefetch).
                self._data_offset = min(self.sampler.num_examples, self._data_offset + self.sampler.global_batch_size)
                yield batch
            empty_epochs = empty_epochs + 1 if produced == 0 else 0
            if empty_epochs > 1:
                raise ConfigError("the data loader produced no batches; check the dataset and train.batch_size")

    # ---------------------------------------------------------------------------------------- step

    def _forward(self, model: nn.Module, batch: Batch) -> tuple[nn.Module, Any]:
        try:
            with self._autocast():
                out = model(batch)
        except Exception as exc:
            if not self._compile_unverified:
                raise
            warnings.warn(
                f"torch.compile failed at the first step ({type(exc).__name__}: {exc}); training without it",
                stacklevel=2,
            )
            self._compile_unverified = False
            model = self._ddp if self._ddp is not None else self.objective
            with self._autocast():
                out = model(batch)
        return model, out

    def _step_counts(self, micro: list[Batch]) -> tuple[list[dict[str, int] | None], dict[str, int] | None]:
        """Per-micro-batch item counts of each loss term and their totals over the whole step (all ranks);
        Nones for an objective without `loss_counts`."""
        counter = getattr(unwrap(self.objective), "loss_counts", None)
        if counter is None:
            return [None] * len(micro), None
        local = [counter(b) for b in micro]
        names = sorted({k for c in local for k in c})
        totals = torch.tensor([sum(c.get(k, 0) for c in local) for k in names], dtype=torch.int64)
        if self.dist.world_size > 1:  # one small collective per step; every rank has the same term names
            totals = totals.to(self.device)
            distributed.all_reduce_sum(totals)
        return local, dict(zip(names, totals.tolist(), strict=True))

    def _scaled_loss(self, out: Any, counts: dict[str, int] | None, totals: dict[str, int] | None) -> torch.Tensor:
        """What this micro-batch back-propagates: its share of the step's loss.

        With per-term counts, each term's mean is weighted by this batch's share of the term's items in
        the whole step (x world size, as DDP/FSDP average gradients over ranks): the gradient equals that
        of the mean over every item of the global batch. Otherwise the batch mean / grad_accum.
        """
        if counts is None or totals is None or not out.terms:
            return out.loss.float() / self.cfg.grad_accum
        world = self.dist.world_size
        loss = out.loss.float() * 0.0  # keeps the graph when a term has no items anywhere
        for name, (mean, weight) in out.terms.items():
            if name not in counts:
                raise BertzooError(f"the objective's loss_counts() has no count for its loss term {name!r}")
            if totals.get(name, 0) > 0:
                loss = loss + weight * mean.float() * (counts[name] * world / totals[name])
        return loss

    def _train_step(self, model: nn.Module, batches: Iterator[Batch], interval: RunningAverage) -> nn.Module:
        cfg = self.cfg
        step_avg = RunningAverage()
        loss_sum = torch.zeros((), device=self.device)
        micro = [next(batches) for _ in range(cfg.grad_accum)]
        tokens = sum(b.num_tokens for b in micro)  # counted on the host copies: no device sync
        counts, totals = self._step_counts(micro)
        non_blocking = self.device.type == "cuda"
        for i, batch in enumerate(micro):
            batch = batch.to(self.device, non_blocking=non_blocking)
            last = i == len(micro) - 1
            # Only the last micro-batch all-reduces gradients; the others accumulate locally.
            sync = self._ddp.no_sync() if self._ddp is not None and not last else contextlib.nullcontext()
            if self.fsdp:
                self.objective.set_requires_gradient_sync(last)
            with sync:
                model, out = self._forward(model, batch)
                loss = self._scaled_loss(out, counts[i], totals)
                self.scaler.scale(loss).backward()
            loss_sum += loss.detach()
            step_avg.update({k: v for k, v in out.metrics.items() if k != "loss"}, out.counts)
        # The step's loss: summed shares (the mean over the global batch once averaged over ranks).
        step_avg.update({"loss": loss_sum})
        self._compile_unverified = False

        if self.scaler.is_enabled():
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self._params if p.grad is not None]
        if cfg.clip_norm is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.clip_norm, foreach=True)
        elif grads:
            grad_norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        else:
            grad_norm = torch.zeros((), device=self.device)
        if self.fsdp:
            grad_norm = fsdp.full_tensor(grad_norm)  # a DTensor over the shards
        # The one host sync per optimizer step: deciding whether to apply the update needs the values.
        loss_val, norm_val = torch.stack([loss_sum.float(), grad_norm.float().to(self.device)]).tolist()
        bad_loss = not math.isfinite(loss_val)
        # fp16 overflow is routine: GradScaler skips that update itself and lowers the scale.
        bad_grad = not math.isfinite(norm_val) and not self.scaler.is_enabled()
        bad = (
            distributed.any_rank(bad_loss or bad_grad, self.device)
            if self.dist.world_size > 1
            else (bad_loss or bad_grad)
        )
        lr_used = max(g["lr"] for g in self.optimizer.param_groups)  # layer-wise decay: the top layers' lr
        if not bad:
            if self.scaler.is_enabled():
                self.scaler.step(self.optimizer)
            else:
                self.optimizer.step()
            interval.merge(step_avg)
            if math.isfinite(norm_val):
                interval.update({"grad_norm": grad_norm.detach().float()})
            self._consecutive_skips = 0
        else:
            self.skipped_steps += 1
            self._consecutive_skips += 1
            what = f"loss {loss_val}" if bad_loss else f"gradient norm {norm_val}"
            self._say(
                f"step {self.step + 1}: non-finite {what}; update skipped "
                f"({self._consecutive_skips} in a row, {self.skipped_steps} in total)"
            )
            if self._consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
                raise BertzooError(
                    f"training diverged: {self._consecutive_skips} consecutive steps had a non-finite loss "
                    f"or gradient (last at step {self.step + 1}); lower train.lr, set train.clip_norm or use "
                    f"precision bf16/fp32, then restart from the last checkpoint with {RESUME_HINT}"
                )
        if self.scaler.is_enabled():
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        # A skipped step still counts: the run keeps its configured length and learning-rate schedule.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)`")
            self.scheduler.step()
        self.step += 1
        self.tokens_seen += tokens * self.dist.world_size  # DDP: rank 0's count stands for every rank
        self._interval_tokens += tokens * self.dist.world_size
        self._last_lr = lr_used
        self._last_loss = loss_val
        return model

    # -------------------------------------------------------------------------------- log/eval/save

    def _say(self, message: str) -> None:
        if self.is_main:
            tqdm.write(message, file=sys.stderr)

    def _elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self._session_start)

    def _log(self, interval: RunningAverage, writer: MetricsWriter) -> None:
        means = interval.compute(reduce=self.dist.world_size > 1)
        interval.reset()
        now = time.monotonic()
        rate = self._interval_tokens / max(1e-9, now - self._interval_start)
        self._interval_tokens, self._interval_start = 0, now
        row: dict[str, Any] = {
            "step": self.step,
            "epoch": self._data_epoch,
            **means,
            "lr": self._last_lr,
            "tokens_per_s": rate,
            "elapsed_s": self._elapsed(),
            "skipped_steps": self.skipped_steps,
        }
        self._final_metrics.update(means)
        self._last_logged_step = self.step
        writer.write(row)
        parts = [f"step {self.step}/{self.cfg.max_steps}"]
        parts += [f"{k} {v:.4f}" for k, v in means.items() if k != "grad_norm"]
        parts += [f"lr {self._last_lr:.2e}", f"{_fmt_rate(rate)} tok/s", _fmt_duration(self._elapsed())]
        self._say(" | ".join(parts))
        acc = next((k for k in means if "acc" in k), None)
        self._bar_acc = f" {acc} {means[acc]:.3f}" if acc else ""

    def _evaluate(self, writer: MetricsWriter) -> None:
        if self.eval_fn is None:
            return
        # Fork every RNG so evaluation (dropout off, but maybe shuffling) leaves training untouched.
        py_state, np_state = random.getstate(), np.random.get_state()
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        was_training = self.objective.training
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                self.objective.eval()
                results = dict(self.eval_fn(self.objective))
        finally:
            self.objective.train(was_training)
            random.setstate(py_state)
            np.random.set_state(np_state)
        row = {eval_metric_key(k): float(v) for k, v in results.items()}
        self._last_eval_step = self.step
        self._final_metrics.update(row)
        writer.write({"step": self.step, **row})
        self._say(f"eval step {self.step} | " + " | ".join(f"{k} {v:.4f}" for k, v in row.items()))
        improved = self._update_best(row)
        if improved and self.save_best:
            self._write_model_dir(BEST_DIR)
        patience = self.cfg.early_stopping_patience
        if patience:
            self.evals_without_improvement = 0 if improved else self.evals_without_improvement + 1
            if self.evals_without_improvement >= patience:
                self._stop_reason = self._stop_reason or "early_stopping"
                self._say(
                    f"early stopping: no better {self.best_metric['name'] if self.best_metric else 'metric'} "
                    f"in {patience} evaluation(s); best at step {self.best_metric and self.best_metric['step']}"
                )

    def _update_best(self, row: dict[str, float]) -> bool:
        """Record `row` as the best evaluation if it improves the tracked metric; True if it did."""
        if self.metric_for_best:
            key = self.metric_for_best
            if key not in row:
                raise ConfigError(
                    f"train.metric_for_best={key} is not among the evaluation metrics ({', '.join(row)}); "
                    "choose one of them"
                )
        else:
            key = next((k for k in row if "loss" in k), None)  # default: the first eval loss, lower is better
            if key is None:
                return False
        value = row[key]
        if not math.isfinite(value):
            return False
        greater = self.greater_is_better if self.metric_for_best else False
        best = self.best_metric
        if best is not None and best.get("name") == key:
            if not (value > best["value"] if greater else value < best["value"]):
                return False
        self.best_metric = {"name": key, "value": value, "step": self.step}
        return True

    def trainer_state(self) -> dict[str, Any]:
        """What `trainer_state.json` records (besides what the optimizer/RNG files hold)."""
        return {
            "step": self.step,
            "epoch": self._data_epoch,
            "sampler": {
                "seed": self.sampler.seed,
                "epoch": self._data_epoch,
                "offset": self._data_offset,
                "num_examples": self.sampler.num_examples,
            },
            "tokens_seen": self.tokens_seen,
            "elapsed_seconds": self._elapsed(),
            "skipped_steps": self.skipped_steps,
            **self.hardware(),
            "best_metric": self.best_metric,
            "evals_without_improvement": self.evals_without_improvement,
            "max_steps": self.cfg.max_steps,
            "batch_size": self.cfg.batch_size,
            "grad_accum": self.cfg.grad_accum,
            "world_size": self.dist.world_size,
            "metrics": self._final_metrics,
        }

    def _save(self) -> None:
        if self._last_saved_step == self.step:
            return
        model: nn.Module | None = self.objective
        optimizer: Any = self.optimizer
        # Every rank's RNG streams (dropout), so a resumed DDP/FSDP run continues exactly on every rank.
        rng_states = distributed.all_gather_objects(capture_rng_state()) if self.dist.world_size > 1 else None
        if self.fsdp:  # every rank takes part in gathering; the main rank writes what it gathered
            model = self._gather()
            optimizer = fsdp.StateView(fsdp.full_optimizer_state(self.optimizer, keep=self.is_main))
        if self.is_main:
            assert model is not None
            self._last_checkpoint = save_checkpoint(
                self.output_dir,
                self.step,
                model,
                optimizer,
                self.scheduler,
                self.trainer_state(),
                self.save_extra,
                keep_last=self.cfg.keep_last or None,
                scaler=self.scaler,
                rng_states=rng_states,
            )
        distributed.barrier()
        self._last_saved_step = self.step

    def _write_model_dir(self, name: str) -> Path | None:
        """Weights + config (+ extra files) in `output_dir/name`, replaced atomically (main rank only)."""
        model = self._gather() if self.fsdp else self.objective
        if not self.is_main or model is None:
            return None

        def writer(directory: Path) -> None:
            check_finite(model)
            save_model_files(model, directory)
            if self.save_extra is not None:
                self.save_extra(directory)
            if name == BEST_DIR and self.best_metric is not None:
                (directory / "best_metric.json").write_text(json.dumps(self.best_metric, indent=2) + "\n")

        return write_dir_atomic(self.output_dir / name, writer)

    def _write_final(self) -> Path | None:
        return self._write_model_dir("final")

    def _epoch_ahead(self) -> int:
        """The epoch the next batch comes from (the current one, or the next when it is used up)."""
        end = min(self.sampler.num_examples, self.sampler.batches_per_epoch() * self.sampler.global_batch_size)
        return self._data_epoch + (1 if self._data_offset >= end else 0)

    def _announce_epoch(self) -> None:
        epoch = self._epoch_ahead()
        if epoch != self._epoch_announced:
            self._epoch_announced = epoch
            for callback in self.epoch_callbacks:
                callback(self, epoch)

    # --------------------------------------------------------------------------------------- signals

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._stop_reason is not None:
            raise KeyboardInterrupt(f"second {name}: stopping without a checkpoint")
        self._stop_reason = name
        self._say(
            f"received {name}: finishing the current step, then saving a checkpoint "
            "(send it again to abort without saving)"
        )

    @contextlib.contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be installed from the main thread
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # ----------------------------------------------------------------------------------------- train

    def train(self, resume: str | None = None) -> dict[str, Any]:
        """Run (or continue) training; returns a summary.

        `resume`: None starts fresh, "auto" continues from the newest complete checkpoint in
        `output_dir` (fresh if none), or a path to a checkpoint directory. The summary holds `steps`,
        `completed`, `stop_reason`, `final_metrics`, `tokens_per_s`, `skipped_steps`,
        `last_checkpoint` and `final_dir`.
        """
        cfg = self.cfg
        if self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            plain = dict(self.run_config) if self.run_config is not None else {"train": to_plain(cfg)}
            plain["resolved"] = self.hardware()  # what `auto` became on this machine
            write_atomic(self.output_dir / "run_config.json", json.dumps(plain, indent=2, default=str) + "\n")
        self._seed()
        self._stop_reason = None
        path = self._resolve_resume(resume)
        if path is not None:
            self._restore(path)
        writer = MetricsWriter(self.output_dir, enabled=self.is_main)
        if path is not None:
            writer.truncate_after(self.step)  # steps after the checkpoint are about to be redone
        else:
            writer.reset()  # a fresh run: curves of an earlier attempt would mix with this one

        self.objective.train()
        self.optimizer.zero_grad(set_to_none=True)
        model = self._prepare_model()
        interval = RunningAverage()
        self._session_start = time.monotonic()
        self._interval_start = self._session_start
        self._interval_tokens = 0
        self._last_lr = max(g["lr"] for g in self.optimizer.param_groups)
        self._last_loss = float("nan")
        self._bar_acc = ""
        session_tokens_start = self.tokens_seen
        start_step = self.step
        batches = self._batches()
        self._epoch_announced = None
        self._announce_epoch()
        patience = cfg.early_stopping_patience
        if patience and self.evals_without_improvement >= patience:
            self._stop_reason = "early_stopping"  # a resumed run that had already stopped early

        self._bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            desc="train",
            dynamic_ncols=True,
            disable=not (self.is_main and self.progress),
            file=sys.stderr,
        )
        try:
            with self._signal_handlers():
                while self.step < cfg.max_steps and self._stop_reason != "early_stopping":
                    model = self._train_step(model, batches, interval)
                    # The step loss is on the host already (finiteness check); accuracy comes per log event.
                    self._bar.set_postfix_str(
                        f"loss {self._last_loss:.4f}{self._bar_acc} lr {self._last_lr:.2e}", refresh=False
                    )
                    self._bar.update(1)
                    if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                        self._log(interval, writer)
                    if cfg.eval_every and self.step % cfg.eval_every == 0:
                        self._evaluate(writer)
                    if cfg.save_every and self.step % cfg.save_every == 0:
                        self._save()
                    if self._stop_reason is None and cfg.max_minutes is not None:
                        if time.monotonic() - self._session_start >= cfg.max_minutes * 60:
                            self._stop_reason = "max_minutes"
                    stop = self._stop_reason is not None
                    if self.dist.world_size > 1 and distributed.any_rank(stop, self.device):
                        stop = True
                        self._stop_reason = self._stop_reason or "stop requested on another rank"
                    if stop:
                        break
                    for callback in self.callbacks:
                        callback(self, self.step)
                    self._announce_epoch()
                if interval and self._last_logged_step != self.step:
                    self._log(interval, writer)
                ended = self.step >= cfg.max_steps or self._stop_reason == "max_minutes"
                if ended and self.eval_fn is not None and self._last_eval_step != self.step:
                    self._evaluate(writer)  # before the last save, so its best_metric is in the checkpoint
                self._save()
        finally:
            self._bar.close()
            self._bar = None
        early = self._stop_reason == "early_stopping"
        completed = self.step >= cfg.max_steps or early
        final_dir = None
        # A run that used up its time budget is finished as far as the user is concerned: its model
        # goes to final/ like a completed run's (a later --resume auto continues and rewrites it).
        budget_spent = self._stop_reason == "max_minutes"
        if completed or budget_spent:
            final_dir = self._write_final()
            distributed.barrier()
        if not completed:
            kept = f"model in {final_dir}; " if final_dir is not None else ""
            self._say(
                f"stopped at step {self.step} ({self._stop_reason}); {kept}checkpoint saved to "
                f"{self._last_checkpoint}; continue with {RESUME_HINT}"
            )
        if self.is_main and writer.jsonl_path.is_file():
            try:
                plot_metrics(writer.jsonl_path, self.output_dir / "metrics.png")
            except Exception as exc:  # a plot must never fail a finished training run
                warnings.warn(f"could not draw {self.output_dir / 'metrics.png'} ({exc})", stacklevel=2)
        session = time.monotonic() - self._session_start
        return {
            "steps": self.step,
            "steps_this_session": self.step - start_step,
            "completed": completed,
            "stop_reason": "early_stopping" if early else (None if completed else self._stop_reason),
            "final_metrics": dict(self._final_metrics),
            "tokens_seen": self.tokens_seen,
            "tokens_per_s": (self.tokens_seen - session_tokens_start) / max(session, 1e-9),
            "elapsed_s": self._elapsed(),
            "skipped_steps": self.skipped_steps,
            **self.hardware(),
            "best_metric": self.best_metric,
            "last_checkpoint": str(self._last_checkpoint) if self._last_checkpoint is not None else None,
            "final_dir": str(final_dir) if final_dir is not None else None,
        }
