"""Evaluation during training: running the caller's `eval_fn` without disturbing the training run,
naming its metrics, and choosing the best model (`best/`) and when to stop early from them."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.errors import ConfigError

EvalFn = Callable[[nn.Module], Mapping[str, float]]
BEST_DIR = "best"  # output_dir/best: the model of the best evaluation so far


def eval_metric_key(name: str) -> str:
    """`accuracy` or `eval_accuracy` -> `eval_accuracy` (the name eval metrics are logged under)."""
    return name if name.startswith("eval") else f"eval_{name}"


def lower_is_better(name: str) -> bool:
    """Direction inferred from a metric's name: losses, perplexities and error rates go down."""
    low = name.lower()
    return any(word in low for word in ("loss", "ppl", "perplexity", "error", "wer"))


def run_eval(eval_fn: EvalFn, objective: nn.Module, device: torch.device) -> dict[str, float]:
    """`eval_fn(objective)` in eval mode without gradients, its metrics named `eval_*`.

    Every RNG is forked around it, so evaluating (dropout off, but maybe shuffling) never changes
    what training draws next; the objective's train/eval mode is put back too.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    devices = [device.index or 0] if device.type == "cuda" else []
    was_training = objective.training
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            objective.eval()
            results = dict(eval_fn(objective))
    finally:
        objective.train(was_training)
        random.setstate(py_state)
        np.random.set_state(np_state)
    return {eval_metric_key(k): float(v) for k, v in results.items()}


class BestTracker:
    """The best evaluation so far and the count of evaluations since it improved.

    `metric_for_best` (any name; `eval_` is added) picks the metric and `greater_is_better` its
    direction (default: from the name). Without a metric the first eval loss is tracked, lower
    being better, and `best/` is written only when `patience` > 0 asks for early stopping.
    Both `best` and `evals_without_improvement` are saved in every checkpoint.
    """

    def __init__(self, metric_for_best: str, greater_is_better: bool | None, patience: int) -> None:
        self.metric = eval_metric_key(metric_for_best) if metric_for_best else ""
        if greater_is_better is not None:
            self.greater_is_better = greater_is_better
        else:
            self.greater_is_better = not lower_is_better(self.metric or "loss")
        self.patience = patience
        self.save_best = bool(self.metric) or patience > 0
        self.best: dict[str, Any] | None = None  # {"name", "value", "step"}
        self.evals_without_improvement = 0

    def improves(self, row: Mapping[str, float], step: int) -> bool:
        """Record `row` as the best evaluation if it improves the tracked metric; True if it did."""
        if self.metric:
            key = self.metric
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
        greater = self.greater_is_better if self.metric else False
        best = self.best
        if best is not None and best.get("name") == key:
            if not (value > best["value"] if greater else value < best["value"]):
                return False
        self.best = {"name": key, "value": value, "step": step}
        return True

    def count(self, improved: bool) -> None:
        """Advance the early-stopping count after an evaluation (only when early stopping is on)."""
        if self.patience:
            self.evals_without_improvement = 0 if improved else self.evals_without_improvement + 1

    @property
    def should_stop(self) -> bool:
        """Early stopping's patience is used up."""
        return bool(self.patience) and self.evals_without_improvement >= self.patience

    def stop_message(self) -> str:
        """Why the run stops early, for the log."""
        best = self.best
        return (
            f"early stopping: no better {best['name'] if best else 'metric'} "
            f"in {self.patience} evaluation(s); best at step {best and best['step']}"
        )
