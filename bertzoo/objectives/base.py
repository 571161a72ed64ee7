"""What every objective returns: a scalar loss to minimise plus detached metrics to log."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ObjectiveOutput:
    """Result of one objective forward pass.

    `metrics` holds detached scalar tensors (e.g. `mlm_loss`, `mlm_acc`, `nsp_acc`); they stay on
    the device so logging does not force a synchronisation every step. `counts` holds how many
    items each metric averages over, so metrics can be combined correctly across micro-batches.

    `terms` (optional) splits `loss` into `{name: (mean over this batch's items, weight)}`, with
    `loss == sum(weight * mean)`. An objective that also has `loss_counts(batch) -> {name: items}`
    (computed on the host batch) lets the trainer weight each term by its share of the items in
    the whole optimizer step, over micro-batches and processes: the gradient is then exactly that
    of one big batch, whatever the accumulation and world size.
    """

    loss: torch.Tensor | None  # None when the batch has no labels (prediction)
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None
    terms: dict[str, tuple[torch.Tensor, float]] = field(default_factory=dict)
