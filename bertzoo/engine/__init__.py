"""The training engine every recipe runs on: one loop (`loop.Trainer`) over a resumable sampler (`sampler`,
`feed`), one optimizer step with gradient accumulation under the run's precision (`step`, `optim`), data
parallelism or sharding under torchrun (`distributed`, `parallel`, `fsdp`), crash-safe checkpoints and exact
resume (`checkpoint`, `manifest`, `resume`, `rng_state`, `signals`, `weights`), evaluation during training
(`evaluation`), and what a person watching sees (`progress`, `logs`, and the experiment trackers: `trackers`). It
knows no family and no task: the recipes in `bertzoo.train` hand it a module, a dataset and a collator.
"""

from bertzoo.engine.checkpoint import load_checkpoint, save_checkpoint
from bertzoo.engine.logs import MetricsWriter, RunningAverage, plot_metrics
from bertzoo.engine.loop import Trainer
from bertzoo.engine.manifest import find_latest_checkpoint, verify_checkpoint
from bertzoo.engine.optim import build_optimizer, build_scheduler, param_groups
from bertzoo.engine.sampler import ResumableBatchSampler
from bertzoo.engine.weights import NonFiniteModelError

__all__ = [
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
]
