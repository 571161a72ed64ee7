"""The training loop shared by pretraining, fine-tuning and distillation.

One explicit loop, no hidden hooks: each iteration runs one optimizer step, then logs, evaluates,
checkpoints and decides whether to stop. Everything needed to continue bit-for-bit (weights,
optimizer, scheduler, RNG states, data position) goes into each checkpoint. The `Trainer` here only
orchestrates; each idea has its own file under `bertzoo/train/`:

    step         one optimizer step: micro-batches, count-weighted loss, clipping, non-finite skips
    feed         micro-batches epoch after epoch, and the data position a checkpoint records
    parallel     DDP / FSDP: wrapping, gradient sync, gathering full state for saving
    compilation  train.compile, falling back to eager only when compilation itself fails
    evaluation   eval metrics, best model and early stopping
    progress     the progress bar and log lines
    trackers     train.report_to: TensorBoard, MLflow, W&B get the metrics, run config and summary
    signals      Ctrl-C / SIGTERM: finish the step, save, stop
    resume       which checkpoint to continue from and what the loop reads back
    checkpoint   save/load (with manifest, rng_state, weights)
    devices      train.device and the checks of a TrainConfig
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import bertzoo.engine.distributed as distributed
from bertzoo.batch import Batch
from bertzoo.config import TrainConfig, resolve_batching, to_plain
from bertzoo.engine.checkpoint import load_checkpoint, save_checkpoint
from bertzoo.engine.compilation import CompiledModel
from bertzoo.engine.devices import resolve_device, validate
from bertzoo.engine.evaluation import BEST_DIR, BestTracker, EvalFn, run_eval
from bertzoo.engine.feed import BatchFeed
from bertzoo.engine.logs import MetricsWriter, RunningAverage, plot_metrics
from bertzoo.engine.optim import BudgetClock, build_optimizer, build_scheduler
from bertzoo.engine.parallel import Parallel
from bertzoo.engine.progress import ProgressBar, TokenRate, log_line, say
from bertzoo.engine.resume import RESUME_HINT, read_progress, resolve_resume, restore_streams
from bertzoo.engine.rng_state import capture_rng_state
from bertzoo.engine.sampler import LengthBucketSampler, ResumableBatchSampler, examples_per_epoch
from bertzoo.engine.signals import stop_on_signals
from bertzoo.engine.step import OptimizerStep, SkipCounter
from bertzoo.engine.trackers import TrackedWriter, Trackers
from bertzoo.engine.weights import check_finite, save_model_files
from bertzoo.errors import ConfigError
from bertzoo.io import write_atomic, write_dir_atomic
from bertzoo.precision import cpu_capability, resolve_precision

Callback = Callable[["Trainer", int], None]


class Trainer:
    """Trains `objective` on `train_dataset` as configured by `cfg`; call `train()`.

    `save_extra(dir)` writes additional files (tokenizer) next to the weights in every checkpoint and
    in `final/`. `eval_fn(objective) -> {name: value}` runs every `cfg.eval_every` steps and at the
    end (and before the first step with `eval_at_start`); it runs with the training RNG state forked, so
    evaluating never changes the training run.
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
        eval_at_start: bool = False,
    ) -> None:
        self._setup_run(cfg, num_workers)
        cfg = self.cfg

        # FSDP: the model stays on the CPU until it is sharded; only its shards go to the device.
        self.parallel = Parallel(objective, cfg.distributed, self.dist, self.device)
        self.objective = objective if self.parallel.fsdp else objective.to(self.device)
        self.save_extra = save_extra
        self.run_config = run_config
        self.eval_fn = eval_fn
        self.eval_at_start = eval_at_start
        self.callbacks = list(callbacks)
        self.epoch_callbacks = list(epoch_callbacks)
        self.progress = progress
        self.output_dir = Path(cfg.output_dir)

        self.sampler = self._make_sampler(train_dataset, drop_last)
        if cfg.epochs is not None:
            # A copy: the caller's config keeps meaning "epochs", this run's means "steps".
            steps = max(1, math.ceil(cfg.epochs * self.sampler.batches_per_epoch() / cfg.grad_accum))
            cfg = self.cfg = dataclasses.replace(cfg, max_steps=steps)
        self.feed = BatchFeed(
            train_dataset,
            self.sampler,
            collate_fn,
            num_workers=num_workers,
            pin_memory=self.device.type == "cuda",
            seed=cfg.seed,
            rank=self.dist.rank,
        )

        self._build_optimization(param_groups)
        self.best = self._make_best_tracker(metric_for_best, eval_fn)
        self._init_progress()
        self.trackers = Trackers(cfg, run_config, enabled=self.is_main)  # a tracker that cannot start fails here

    # --------------------------------------------------------------------------------------- setup

    def _setup_run(self, cfg: TrainConfig, num_workers: int) -> None:
        """Resolve batching, device and precision for this machine, check the config, join the process group."""
        self.dist = distributed.dist_info()
        cfg = self.cfg = resolve_batching(cfg, self.dist.world_size)
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        validate(cfg, self.device)
        if num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
        # auto -> bf16 or fp32 from the hardware; the run's config records what was used.
        cfg = self.cfg = dataclasses.replace(cfg, precision=resolve_precision(cfg.precision, self.device))
        self.dist = distributed.init_distributed(self.device)
        self.is_main = self.dist.is_main
        if cfg.threads:
            torch.set_num_threads(cfg.threads)

    def _make_sampler(self, train_dataset: Any, drop_last: bool) -> ResumableBatchSampler:
        """The resumable batch sampler of this rank: length-bucketed when `train.bucket_by_length`, else shuffled."""
        cfg = self.cfg
        lengths = getattr(train_dataset, "lengths", None)
        if cfg.bucket_by_length and lengths is None:
            raise ConfigError(
                f"train.bucket_by_length needs a dataset with per-example lengths, and "
                f"{type(train_dataset).__name__} has none; set train.bucket_by_length false"
            )
        # A multi-task mixture trains each epoch on the examples its rates pick (data/tasks/mixture.py), not on all.
        selection = getattr(train_dataset, "selection", None)
        if cfg.bucket_by_length:
            return LengthBucketSampler(
                lengths,
                cfg.batch_size,
                seed=cfg.seed,
                drop_last=drop_last,
                rank=self.dist.rank,
                world_size=self.dist.world_size,
                selection=selection,
            )
        return ResumableBatchSampler(
            examples_per_epoch(train_dataset),
            cfg.batch_size,
            seed=cfg.seed,
            shuffle=True,
            drop_last=drop_last,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
            selection=selection,
        )

    def _build_optimization(self, param_groups: list[dict[str, Any]] | None) -> None:
        """Build the optimizer, its schedule (with the budget clock), the loss scaler and the list of parameters."""
        cfg = self.cfg
        self._groups_arg = param_groups
        self.optimizer = build_optimizer(self.objective, cfg, groups=param_groups)
        self.budget = BudgetClock()  # read by a time-clocked schedule; kept current by _budget_spent
        self.scheduler = build_scheduler(self.optimizer, cfg, cfg.max_steps, clock=self.budget)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.precision == "fp16")
        # Every parameter, frozen or not: gradual unfreezing turns some on later, and clipping skips
        # those without a gradient anyway.
        self._params = list({id(p): p for p in self.objective.parameters()}.values())

    def _make_best_tracker(self, metric_for_best: str | None, eval_fn: EvalFn | None) -> BestTracker:
        """The tracker of the best evaluation and early stopping; early stopping needs evaluations."""
        cfg = self.cfg
        best = BestTracker(
            cfg.metric_for_best or metric_for_best or "", cfg.greater_is_better, cfg.early_stopping_patience
        )
        if cfg.early_stopping_patience and eval_fn is None:
            raise ConfigError(
                "train.early_stopping_patience needs evaluations on a dev set; provide dev data "
                "or set train.early_stopping_patience 0"
            )
        return best

    def _init_progress(self) -> None:
        """Start the progress counters (saved in every checkpoint) and this session's bookkeeping at zero."""
        self.step = 0
        self.tokens_seen = 0
        self.elapsed_before = 0.0  # seconds spent in earlier sessions of this run
        self.skips = SkipCounter()

        self._stop_reason: str | None = None
        self._last_saved_step: int | None = None
        self._last_checkpoint: Path | None = None
        self._last_logged_step: int | None = None
        self._last_eval_step: int | None = None
        self._epoch_announced: int | None = None
        self._final_metrics: dict[str, float] = {}
        self._bar: ProgressBar | None = None
        self._session_start = time.monotonic()
        self._rate = TokenRate()
        self._last_lr = self.cfg.lr
        self._last_loss = float("nan")

    def _seed(self) -> None:
        # Different ranks get different dropout masks; rank 0 matches a single-process run.
        seed = self.cfg.seed + self.dist.rank
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)

    def hardware(self) -> dict[str, Any]:
        """The device, the precision `auto` resolved to and the CPU kind, recorded beside every figure."""
        return {"device": str(self.device), "precision": self.cfg.precision, "cpu_capability": cpu_capability()}

    def _restore(self, path: Path) -> None:
        state = load_checkpoint(
            path, self.objective, self.optimizer, self.scheduler, scaler=self.scaler, restore_rng=False
        )
        saved = read_progress(state, path)
        restore_streams(path, self.dist.rank, self.cfg.seed, saved.step)
        self.sampler.load_state_dict(saved.sampler)
        self.feed.sync_with_sampler()
        self.step = saved.step
        self.tokens_seen = saved.tokens_seen
        self.elapsed_before = saved.elapsed_seconds
        self.skips.total = saved.skipped_steps
        self.best.best = saved.best_metric
        self.best.evals_without_improvement = saved.evals_without_improvement
        self._last_saved_step = self.step
        self._last_checkpoint = path
        self._last_logged_step = self.step
        self._last_eval_step = self.step
        self._say(f"resumed from {path} at step {self.step} (epoch {self.sampler.epoch})")

    def _prepare(self) -> OptimizerStep:
        """Activation checkpointing, sharding or DDP, torch.compile: the step runner for this session."""
        if self.cfg.activation_checkpointing:
            from bertzoo.nn import enable_activation_checkpointing

            enable_activation_checkpointing(self.objective)
        if self.parallel.fsdp:
            self.optimizer, self.scheduler = self.parallel.shard(
                self.optimizer, self.scheduler, self.cfg, self._groups_arg
            )
            self._params = list({id(p): p for p in self.objective.parameters()}.values())
        model = CompiledModel(self.parallel.wrap(), enabled=self.cfg.compile)
        return OptimizerStep(
            self.cfg,
            self.device,
            self.objective,
            model,
            self.parallel,
            self.optimizer,
            self.scheduler,
            self.scaler,
            self._params,
        )

    # ---------------------------------------------------------------------------------------- step

    def _train_step(self, stepper: OptimizerStep, batches: Iterator[Batch], interval: RunningAverage) -> None:
        # An objective with a schedule of its own (SpanBERT's sbo_start) is told how far training is, on the
        # learning rate's clock; from the step, so a resumed run repeats it exactly.
        set_progress = getattr(self.objective, "set_progress", None)
        if set_progress is not None:
            share = self.step / self.cfg.max_steps
            set_progress(max(self.budget.fraction, share) if self.cfg.clock == "time" else share)
        result = stepper.step(batches)
        if result.skipped is None:
            interval.merge(result.metrics)
            self.skips.applied()
        else:
            self._say(self.skips.skipped(self.step + 1, result.skipped))
            self.skips.check_diverged(self.step + 1)
        self.step += 1
        tokens = result.tokens * self.dist.world_size  # DDP: rank 0's count stands for every rank
        self.tokens_seen += tokens
        self._rate.add(tokens)
        self._last_lr = result.lr
        self._last_loss = result.loss

    # -------------------------------------------------------------------------------- log/eval/save

    def _say(self, message: str) -> None:
        if self.is_main:
            say(message)

    def _elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self._session_start)

    def _budget_spent(self) -> bool:
        """Update the budget clock; True once `train.max_minutes` is used up.

        On the time clock (`TrainConfig.clock`) the budget is the whole run's (time before a resume counts), since the
        schedule ends with it; otherwise it is each session's. Ranks average their clocks so that every
        rank's learning rate is the same.
        """
        cfg = self.cfg
        if cfg.max_minutes is None:
            return False
        by_time = cfg.clock == "time"
        spent = self._elapsed() if by_time else time.monotonic() - self._session_start
        if by_time and self.dist.world_size > 1:
            total = distributed.all_reduce_sum(torch.tensor([spent], dtype=torch.float64, device=self.device))
            spent = float(total.item()) / self.dist.world_size
        fraction = spent / (cfg.max_minutes * 60)
        self.budget.fraction = min(1.0, fraction)
        return fraction >= 1.0

    def _log(self, interval: RunningAverage, writer: MetricsWriter) -> None:
        means = interval.compute(reduce=self.dist.world_size > 1)
        interval.reset()
        rate = self._rate.read()
        row: dict[str, Any] = {
            "step": self.step,
            "epoch": self.feed.epoch,
            **means,
            "lr": self._last_lr,
            "tokens_per_s": rate,
            "elapsed_s": self._elapsed(),
            "skipped_steps": self.skips.total,
        }
        self._final_metrics.update(means)
        self._last_logged_step = self.step
        writer.write(row)
        self._say(log_line(self.step, self.cfg.max_steps, means, self._last_lr, rate, self._elapsed()))
        if self._bar is not None:
            self._bar.show_accuracy(means)

    def _evaluate(self, writer: MetricsWriter) -> None:
        if self.eval_fn is None:
            return
        row = run_eval(self.eval_fn, self.objective, self.device)
        self._last_eval_step = self.step
        self._final_metrics.update(row)
        writer.write({"step": self.step, **row})
        self._say(f"eval step {self.step} | " + " | ".join(f"{k} {v:.4f}" for k, v in row.items()))
        improved = self.best.improves(row, self.step)
        if improved and self.best.save_best:
            self._write_model_dir(BEST_DIR)
        self.best.count(improved)
        if self.best.should_stop:
            self._stop_reason = self._stop_reason or "early_stopping"
            self._say(self.best.stop_message())

    def trainer_state(self) -> dict[str, Any]:
        """What `trainer_state.json` records (besides what the optimizer/RNG files hold)."""
        return {
            "step": self.step,
            "epoch": self.feed.epoch,
            "sampler": self.feed.position(),
            "tokens_seen": self.tokens_seen,
            "elapsed_seconds": self._elapsed(),
            "skipped_steps": self.skips.total,
            **self.hardware(),
            "best_metric": self.best.best,
            "evals_without_improvement": self.best.evals_without_improvement,
            "max_steps": self.cfg.max_steps,
            "batch_size": self.cfg.batch_size,
            "grad_accum": self.cfg.grad_accum,
            "world_size": self.dist.world_size,
            "metrics": self._final_metrics,
        }

    def _save(self) -> None:
        if self._last_saved_step == self.step:
            return
        # Every rank's RNG streams (dropout), so a resumed DDP/FSDP run continues exactly on every rank.
        rng_states = distributed.all_gather_objects(capture_rng_state()) if self.dist.world_size > 1 else None
        # Every rank takes part in gathering (FSDP); the main rank writes what it gathered.
        model = self.parallel.full_model()
        optimizer = self.parallel.full_optimizer(self.optimizer)
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
        model = self.parallel.full_model()
        if not self.is_main or model is None:
            return None

        def writer(directory: Path) -> None:
            check_finite(model)
            save_model_files(model, directory)
            if self.save_extra is not None:
                self.save_extra(directory)
            if name == BEST_DIR and self.best.best is not None:
                (directory / "best_metric.json").write_text(json.dumps(self.best.best, indent=2) + "\n")

        return write_dir_atomic(self.output_dir / name, writer)

    def _announce_epoch(self) -> None:
        epoch = self.feed.epoch_ahead()
        if epoch != self._epoch_announced:
            self._epoch_announced = epoch
            for callback in self.epoch_callbacks:
                callback(self, epoch)

    def _request_stop(self, signal_name: str) -> None:
        self._stop_reason = signal_name
        self._say(
            f"received {signal_name}: finishing the current step, then saving a checkpoint "
            "(send it again to abort without saving)"
        )

    # ----------------------------------------------------------------------------------------- train

    def train(self, resume: str | None = None) -> dict[str, Any]:
        """Run (or continue) training; returns a summary.

        `resume`: None starts fresh, "auto" continues from the newest complete checkpoint in
        `output_dir` (fresh if none), or a path to a checkpoint directory. The summary holds `steps`,
        `completed`, `stop_reason`, `final_metrics`, `tokens_per_s`, `skipped_steps`,
        `last_checkpoint` and `final_dir`.
        """
        run_config = self._write_run_config()
        self._seed()
        self._stop_reason = None
        writer = self._resume_or_start(resume)
        session_tokens_start, start_step = self.tokens_seen, self.step
        with self.trackers.session(run_config, self.step) as tracking:  # closed on the way out unless held
            stepper, batches, interval = self._start_session()
            self._run_steps(stepper, batches, interval, writer)
            completed, ended = self._completion()
            final_dir = self._finish(completed, writer)
            return tracking.ended(self._summary(completed, ended, final_dir, start_step, session_tokens_start))

    def _write_run_config(self) -> dict[str, Any]:
        """`run_config.json`'s dict, with what `auto` became on this machine; written into `output_dir` (main rank)."""
        plain = dict(self.run_config) if self.run_config is not None else {"train": to_plain(self.cfg)}
        plain["resolved"] = self.hardware()  # what `auto` became on this machine
        if self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.output_dir / "run_config.json", json.dumps(plain, indent=2, default=str) + "\n")
        return plain

    def _resume_or_start(self, resume: str | None) -> MetricsWriter:
        """Restore the checkpoint `resume` names (if any); the metrics log, cut back to match."""
        path = resolve_resume(resume, self.output_dir, cleanup=self.is_main, say=self._say)
        if path is not None:
            self._restore(path)
        writer = TrackedWriter(self.output_dir, self.trackers, enabled=self.is_main)  # metrics.jsonl and trackers
        if path is not None:
            writer.truncate_after(self.step)  # steps after the checkpoint are about to be redone
        else:
            writer.reset()  # a fresh run: curves of an earlier attempt would mix with this one
        return writer

    def _start_session(self) -> tuple[OptimizerStep, Iterator[Batch], RunningAverage]:
        """Prepare this session's step runner, batches and clocks; notes a resumed run that had already ended."""
        self.objective.train()
        self.optimizer.zero_grad(set_to_none=True)
        stepper = self._prepare()
        interval = RunningAverage()
        self._session_start = time.monotonic()
        self._rate.restart()
        self._last_lr = max(g["lr"] for g in self.optimizer.param_groups)
        self._last_loss = float("nan")
        batches = iter(self.feed)
        self._epoch_announced = None
        self._announce_epoch()
        if self.best.should_stop:
            self._stop_reason = "early_stopping"  # a resumed run that had already stopped early
        elif self.cfg.clock == "time" and self._budget_spent():
            self._stop_reason = "max_minutes"  # a resumed run whose schedule had already ended
        return stepper, batches, interval

    def _run_steps(
        self, stepper: OptimizerStep, batches: Iterator[Batch], interval: RunningAverage, writer: MetricsWriter
    ) -> None:
        """Train until max_steps or a stop, logging, evaluating and checkpointing on the way; then save."""
        cfg = self.cfg
        bar = self._bar = ProgressBar(cfg.max_steps, self.step, enabled=self.is_main and self.progress)
        try:
            with stop_on_signals(self._request_stop, stopping=lambda: self._stop_reason is not None):
                if self.eval_at_start and self.step == 0:
                    self._evaluate(writer)  # the starting point, measured before any step (a checkpoint's gap)
                # (A signal's stop is honoured after the step under way, in the loop body.)
                while self.step < cfg.max_steps and self._stop_reason not in ("early_stopping", "max_minutes"):
                    self._train_step(stepper, batches, interval)
                    bar.step_done(self._last_loss, self._last_lr)
                    if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                        self._log(interval, writer)
                    if cfg.eval_every and self.step % cfg.eval_every == 0:
                        self._evaluate(writer)
                    if cfg.save_every and self.step % cfg.save_every == 0:
                        self._save()
                    if self._budget_spent() and self._stop_reason is None:
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
            bar.close()
            self._bar = None

    def _completion(self) -> tuple[bool, bool]:
        """(whether the run is complete, whether early stopping or a spent time-clocked schedule ended it)."""
        early = self._stop_reason == "early_stopping"
        # A time-clocked schedule has ended with its budget: the run is complete, as at max_steps.
        timed_out = self.cfg.clock == "time" and self._stop_reason == "max_minutes"
        completed = self.step >= self.cfg.max_steps or early or timed_out
        return completed, early or timed_out

    def _finish(self, completed: bool, writer: MetricsWriter) -> Path | None:
        """Write the final model (when the run is over), say how to continue one that is not, draw the metrics."""
        final_dir = None
        # A run that used up its time budget is finished as far as the user is concerned: its model
        # goes to final/ like a completed run's (a later --resume auto continues and rewrites it).
        budget_spent = self._stop_reason == "max_minutes"
        if completed or budget_spent:
            final_dir = self._write_model_dir("final")
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
        return final_dir

    def _summary(
        self, completed: bool, ended: bool, final_dir: Path | None, start_step: int, session_tokens_start: int
    ) -> dict[str, Any]:
        """What `train()` returns: steps, completion, metrics, throughput, and where the model went."""
        session = time.monotonic() - self._session_start
        return {
            "steps": self.step,
            "steps_this_session": self.step - start_step,
            "completed": completed,
            # Early stopping and a time-clocked budget end a run completely, and still say why.
            "stop_reason": self._stop_reason if ended or not completed else None,
            "final_metrics": dict(self._final_metrics),
            "tokens_seen": self.tokens_seen,
            "tokens_per_s": (self.tokens_seen - session_tokens_start) / max(session, 1e-9),
            "elapsed_s": self._elapsed(),
            "skipped_steps": self.skips.total,
            **self.hardware(),
            "best_metric": self.best.best,
            "last_checkpoint": str(self._last_checkpoint) if self._last_checkpoint is not None else None,
            "final_dir": str(final_dir) if final_dir is not None else None,
        }
