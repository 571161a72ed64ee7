"""Training: the loop, optimizer and schedules, resumable sampling, crash-safe checkpoints, metrics."""

from bertzoo.engine.checkpoint import load_checkpoint, save_checkpoint
from bertzoo.engine.logs import MetricsWriter, RunningAverage, plot_metrics
from bertzoo.engine.loop import Trainer
from bertzoo.engine.manifest import find_latest_checkpoint, verify_checkpoint
from bertzoo.engine.optim import build_optimizer, build_scheduler, param_groups
from bertzoo.engine.sampler import ResumableBatchSampler
from bertzoo.engine.weights import NonFiniteModelError
from bertzoo.errors import CheckpointError
from bertzoo.io import write_atomic

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
