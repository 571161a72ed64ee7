"""ERNIE 2.0's continual multi-task batches: masking-strategy tasks and auxiliary tasks under one replayed schedule.

* `TaskDataset`: `UnitDataset` whose schedule may name auxiliary tasks (`bertzoo.objectives.auxiliary`); an example
  assigned one is rebuilt for it by `TaskExamples` (`bertzoo.data.pretraining.task_examples`), keyed by (seed,
  epoch, index) like the assignment itself, so a resumed run sees the same examples.
* `TaskCollator`: `UnitMaskingCollator` (every example is masked: ERNIE's knowledge masking stays on) plus each
  task's labels in `batch.extra["<task>_labels"]`: (batch, seq) for a token task, (batch,) for a sequence task,
  IGNORE_INDEX in the rows of other tasks. Every task has its entry in every batch, so every batch logs the same
  metric names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig
from bertzoo.data.pretraining.collate_units import UnitDataset, UnitMaskingCollator
from bertzoo.data.pretraining.task_examples import TaskExamples
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError
from bertzoo.objectives.auxiliary import AUX_TASKS

__all__ = ["TaskCollator", "TaskDataset"]


class TaskDataset(UnitDataset):
    """`UnitDataset` whose examples assigned an auxiliary task carry that task's input and labels (`aux_task`,
    and `task_labels` per token or `task_label` per example). Takes `UnitDataset`'s arguments plus `builder`."""

    def __init__(self, inner: Any, flags: Any = None, *, builder: TaskExamples, **kwargs: Any) -> None:
        if getattr(inner, "plan", None) is None:
            raise ConfigError(
                "ERNIE 2.0's auxiliary tasks read single-segment examples (objective mlm, data.nsp false)"
            )
        self.builder = builder  # before UnitDataset's __init__, whose set_epoch hands it the plan
        super().__init__(inner, flags, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.builder.set_plan(self.inner.plan)

    def __getitem__(self, i: int) -> dict[str, Any]:
        example = super().__getitem__(i)
        task = example.get("aux_task")
        if not task:
            return example
        flags = self.flags.range if self.flags is not None else None
        return self.builder.build(task, example, int(i), self.epoch, flags)


class TaskCollator(UnitMaskingCollator):
    """Unit masking of every example, plus the labels of `tasks` (see the module doc)."""

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        masking: MaskingConfig,
        seed: int,
        *,
        tasks: Sequence[str],
        pad_to_multiple_of: int = 8,
        vocab_size: int | None = None,
        strategy: str = "whole_word",
    ) -> None:
        super().__init__(
            tokenizer, masking, seed, pad_to_multiple_of=pad_to_multiple_of, vocab_size=vocab_size, strategy=strategy
        )
        unknown = [t for t in tasks if t not in AUX_TASKS]
        if unknown:
            raise ConfigError(f"unknown ERNIE 2.0 task {unknown[0]!r}; choose one of: {', '.join(AUX_TASKS)}")
        self.tasks = tuple(dict.fromkeys(tasks))

    def __call__(self, examples: Sequence[dict[str, Any]]) -> Batch:
        batch = super().__call__(examples)
        rows, seq = batch.input_ids.shape
        for name in self.tasks:
            mine = [r for r, e in enumerate(examples) if e.get("aux_task") == name]
            if AUX_TASKS[name].level == "token":
                labels = np.full((rows, seq), IGNORE_INDEX, dtype=np.int64)
                for r in mine:
                    own = examples[r]["task_labels"]
                    labels[r, : len(own)] = own
            else:
                labels = np.full(rows, IGNORE_INDEX, dtype=np.int64)
                labels[mine] = [int(examples[r]["task_label"]) for r in mine]
            batch.extra[f"{name}_labels"] = torch.from_numpy(labels)
        return batch
