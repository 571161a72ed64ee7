"""Training: the loop, optimizer and schedules, resumable sampling, crash-safe checkpoints, metrics."""

from bertzoo.errors import CheckpointError
from bertzoo.io import write_atomic
from bertzoo.train.checkpoint import load_checkpoint, save_checkpoint
from bertzoo.train.loop import Trainer
from bertzoo.train.manifest import find_latest_checkpoint, verify_checkpoint
from bertzoo.train.metrics import MetricsWriter, RunningAverage, plot_metrics
from bertzoo.train.optim import build_optimizer, build_scheduler, param_groups
from bertzoo.train.sampler import ResumableBatchSampler
from bertzoo.train.weights import NonFiniteModelError

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
