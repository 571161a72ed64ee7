"""Training: the loop, optimizer and schedules, resumable sampling, crash-safe checkpoints, metrics."""

from bertzoo.train.checkpoint import (
    CheckpointError,
    NonFiniteModelError,
    find_latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
    write_atomic,
)
from bertzoo.train.loop import Trainer
from bertzoo.train.metrics import MetricsWriter, RunningAverage, plot_metrics
from bertzoo.train.optim import build_optimizer, build_scheduler, param_groups
from bertzoo.train.sampler import ResumableBatchSampler

__all__ = [
    "CheckpointError",
    "MetricsWriter",
    "NonFiniteModelError",
    "ResumableBatchSampler",
    "RunningAverage",
    "Trainer",
    "build_optimizer",
    "build_scheduler",
    "find_latest_checkpoint",
    "load_checkpoint",
    "param_groups",
    "plot_metrics",
    "save_checkpoint",
    "verify_checkpoint",
    "write_atomic",
]
