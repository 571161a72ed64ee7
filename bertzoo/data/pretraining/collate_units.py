"""Unit-level masking for whole words, spans, phrases and entities, and ERNIE's masking schedules.

* `UnitMaskingCollator`: like `PretrainingCollator`, plus per-token unit flags (from the example's
  `unit_flags`, or WordPiece `##` continuations when an example has none), a masking strategy per
  example, the span boundaries SpanBERT's objective reads (`batch.extra["span_start"/"span_end"]`)
  and ERNIE 2.0's task ids (`batch.extra["task_type_ids"]`).
* `UnitDataset`: wraps `NspDataset`, attaches the flags of each example's tokens (from the shards'
  sidecar, `bertzoo.data.tokens.unit_sidecar`) and, with a `Schedule`, the strategy and task of the example.
* `Schedule`: ERNIE 1.0's multi-stage masking (basic -> phrase -> entity by fractions of training)
  and ERNIE 2.0's sequential multi-task continual pretraining (a task, once introduced, stays in
  the mix: earlier tasks are replayed while new ones are added). A task is a masking strategy or an
  auxiliary task (`bertzoo.objectives.auxiliary`: capitalization, sentence reordering, ...), whose
  inputs and labels `bertzoo.data.pretraining.collate_tasks` builds; its examples are masked too.

The stage of an example is derived from where the example falls in training, never from state
that a resumed run would lack: the sampler's order depends only on (seed, epoch), so the position
of example i in epoch e (hence its micro-batch and optimizer step) is a pure function of (e, i).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import bertzoo.data.rng as rng
from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.masking import SELECTORS, UNIT_STRATEGIES, mask_tokens
from bertzoo.data.rng import epoch_permutation
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.data.tokens.unit_flags import ALL_STARTS, LEVEL_FLAGS, vocab_tables, wordpiece_flags
from bertzoo.data.tokens.unit_sidecar import UnitFlags
from bertzoo.errors import ConfigError, DataError
from bertzoo.objectives.auxiliary import AUX_TASKS

__all__ = ["Schedule", "Stage", "UnitDataset", "UnitMaskingCollator", "batch_unit_flags", "continuation_table"]

STREAM_TASK = "ernie/task"
STREAM_MASKING = "ernie/task-masking"  # which masking an auxiliary task's example gets


@dataclass(frozen=True)
class Stage:
    """A masking strategy (and task id) that becomes active at a fraction `start` of training; with `task`, an
    auxiliary task whose examples are masked by `strategy`, or when that is "" by one of the masking stages then
    active (`Schedule.masking`)."""

    strategy: str
    start: float = 0.0
    task_id: int = 0
    name: str = ""
    task: str = ""


class Schedule:
    """Which strategy/task an example uses, given how far training has progressed (0..1).

    Without `replay` (ERNIE 1.0) the latest started stage is used alone. With `replay` (ERNIE 2.0)
    every started stage is active and each example draws one uniformly, keyed by (seed, epoch,
    index): a new task joins the earlier ones instead of replacing them.
    """

    def __init__(self, stages: Sequence[Stage], *, replay: bool = False) -> None:
        if not stages:
            raise ConfigError("a masking schedule needs at least one stage")
        stages = sorted(stages, key=lambda s: s.start)
        if stages[0].start != 0.0:
            raise ConfigError(f"the first stage must start at 0, got {stages[0].start}")
        for s in stages:
            if s.task and s.task not in AUX_TASKS:
                raise ConfigError(
                    f"unknown ERNIE 2.0 task {s.task!r}; choose one of: {', '.join(AUX_TASKS)} "
                    f"(masking strategies go under strategy: {', '.join(SELECTORS)})"
                )
            if s.task and not replay:
                raise ConfigError(f"task {s.task!r} belongs in objective_args.tasks (ERNIE 2.0), not in stages")
            if (s.strategy or not s.task) and s.strategy not in SELECTORS:
                raise ConfigError(f"unknown masking strategy {s.strategy!r}; choose one of: {', '.join(SELECTORS)}")
            if not 0.0 <= s.start < 1.0:
                raise ConfigError(f"stage start must be in [0, 1), got {s.start}")
        self.stages = list(stages)
        self.replay = replay

    @classmethod
    def from_spec(cls, spec: Sequence[Any], *, replay: bool = False) -> Schedule:
        """From config: a list of `{strategy, start[, task_id, name]}` or `{task, start[, strategy, task_id,
        name]}` mappings (task ids default to the position in the list when `replay`, else 0)."""
        stages = []
        for i, item in enumerate(spec):
            if isinstance(item, str):
                item = {"task" if item in AUX_TASKS else "strategy": item, "start": i / len(spec)}
            if not isinstance(item, dict) or not ("strategy" in item or "task" in item):
                raise ConfigError(f"schedule entry {i} must be a mapping with a strategy or a task, got {item!r}")
            unknown = set(item) - {"strategy", "task", "start", "task_id", "name"}
            if unknown:
                raise ConfigError(
                    f"schedule entry {i} has unknown keys {sorted(unknown)}; use strategy or task, start, task_id, name"
                )
            stages.append(
                Stage(
                    strategy=str(item.get("strategy", "")),
                    start=float(item.get("start", i / len(spec))),
                    task_id=int(item.get("task_id", i if replay else 0)),
                    name=str(item.get("name", item.get("task") or item["strategy"])),
                    task=str(item.get("task", "")),
                )
            )
        return cls(stages, replay=replay)

    @property
    def tasks(self) -> tuple[str, ...]:
        """The auxiliary tasks of the schedule, in order of first appearance."""
        return tuple(dict.fromkeys(s.task for s in self.stages if s.task))

    def active(self, progress: float) -> list[Stage]:
        """The stages started at `progress` (a fraction of training)."""
        return [s for s in self.stages if s.start <= progress] or self.stages[:1]

    def pick(self, progress: float, u: float) -> Stage:
        """The stage of one example; `u` in [0, 1) chooses among replayed tasks."""
        active = self.active(progress)
        if not self.replay:
            return active[-1]
        return active[min(int(u * len(active)), len(active) - 1)]

    def masking(self, progress: float, u: float) -> str:
        """The masking strategy of an auxiliary task's example that names none: one of the masking stages active
        at `progress`, chosen by `u` in [0, 1) (knowledge masking stays on every example); "" when none is
        active (the collator's own strategy then)."""
        active = [s.strategy for s in self.active(progress) if not s.task]
        return active[min(int(u * len(active)), len(active) - 1)] if active else ""


class UnitDataset:
    """`NspDataset` examples plus their unit flags and, with a schedule, their stage.

    `steps` describes the training run (`seed`, `batch_size` x `world_size` x `grad_accum` examples
    per optimizer step, `max_steps`): it turns (epoch, index) into the optimizer step the example is
    trained in, exactly as `ResumableBatchSampler` (shuffled, drop_last) orders examples.
    """

    def __init__(
        self,
        inner: Any,
        flags: UnitFlags | None = None,
        *,
        schedule: Schedule | None = None,
        seed: int = 0,
        global_batch: int = 1,
        grad_accum: int = 1,
        max_steps: int = 1,
        epochs: float | None = None,
    ) -> None:
        self.inner = inner
        self.flags = flags
        self.schedule = schedule
        self.seed = int(seed)
        self.global_batch = max(1, int(global_batch))
        self.grad_accum = max(1, int(grad_accum))
        self.batches_per_epoch = max(1, len(inner) // self.global_batch)
        if epochs is not None:  # the Trainer turns train.epochs into max_steps the same way
            max_steps = max(1, math.ceil(epochs * self.batches_per_epoch / self.grad_accum))
        self.max_steps = max(1, int(max_steps))
        self.epoch = -1
        self._position: np.ndarray | None = None
        self.set_epoch(getattr(inner, "epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; also recompute where each example falls in its order."""
        epoch = int(epoch)
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)
        if epoch != self.epoch and self.schedule is not None:
            perm = epoch_permutation(len(self.inner), self.seed, epoch, shuffle=True)
            position = np.empty_like(perm)
            position[perm] = np.arange(len(perm), dtype=perm.dtype)
            self._position = position
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.inner)

    def step_of(self, index: int) -> int:
        """The optimizer step (0-based) in which example `index` of the current epoch is trained."""
        if self._position is None:
            return 0
        batch = self.epoch * self.batches_per_epoch + int(self._position[index]) // self.global_batch
        return batch // self.grad_accum

    def progress_of(self, index: int) -> float:
        """Fraction of training done when example `index` of the current epoch is trained."""
        return min(1.0, self.step_of(index) / self.max_steps)

    def _example_flags(self, i: int, n: int) -> np.ndarray | None:
        plan = getattr(self.inner, "plan", None)
        if self.flags is None or plan is None:
            return None
        # Special tokens: no flags (they are units of their own anyway).
        out = plan.layout(i, n, self.flags.range, 0, np.uint8)
        # A truncated segment starts a unit at every level.
        sa, ea = (int(x) for x in plan.a[i])
        out[1] |= ALL_STARTS if ea > sa else 0
        sb, eb = (int(x) for x in plan.b[i])
        if eb > sb:
            out[2 + ea - sa] |= ALL_STARTS
        return out

    def stage_of(self, index: int) -> tuple[Stage, str] | None:
        """(stage, masking strategy) of example `index` of the current epoch, keyed by (seed, epoch, index); None
        without a schedule. The strategy is "" for an auxiliary task when no masking stage is active."""
        if self.schedule is None:
            return None
        progress = self.progress_of(index)
        stage = self.schedule.pick(progress, float(rng.uniform(self.seed, self.epoch, index, 0, STREAM_TASK)))
        strategy = stage.strategy
        if not strategy:
            strategy = self.schedule.masking(
                progress, float(rng.uniform(self.seed, self.epoch, index, 0, STREAM_MASKING))
            )
        return stage, strategy

    def __getitem__(self, i: int) -> dict[str, Any]:
        example = self.inner[i]
        flags = self._example_flags(int(i), len(example["input_ids"]))
        if flags is not None:
            example["unit_flags"] = flags
        picked = self.stage_of(int(i))
        if picked is not None:
            stage, strategy = picked
            if strategy:
                example["strategy"] = strategy
            example["task_type_id"] = stage.task_id
            if stage.task:
                example["aux_task"] = stage.task
        return example

    def __getattr__(self, name: str) -> Any:
        # Everything else (plan, epoch_examples, ...) is the wrapped dataset's.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def continuation_table(
    tokenizer: Tokenizer | SpecialIds, vocab_size: int, continuation: np.ndarray | None = None
) -> np.ndarray:
    """The bool table of `##` continuation pieces over the vocabulary (all False without a vocabulary, so that
    every token is a word), checked against `vocab_size`."""
    if continuation is None:
        if isinstance(tokenizer, Tokenizer):
            continuation, _ = vocab_tables(tokenizer)
        else:
            continuation = np.zeros(vocab_size, dtype=bool)
    if len(continuation) != vocab_size:
        raise ConfigError(f"continuation table has {len(continuation)} entries, the vocabulary {vocab_size}")
    return np.asarray(continuation, dtype=bool)


def batch_unit_flags(
    examples: Sequence[dict[str, Any]],
    ids: np.ndarray,
    lengths: np.ndarray,
    index: np.ndarray,
    continuation: np.ndarray,
) -> np.ndarray:
    """(batch, seq) uint8 unit flags: each example's own `unit_flags` (from the shards' sidecar), else the
    WordPiece words of its ids."""
    flags = wordpiece_flags(ids, continuation)
    for row, e in enumerate(examples):
        f = e.get("unit_flags")
        if f is not None:
            if len(f) != lengths[row]:
                raise DataError(f"example {index[row]}: unit_flags has {len(f)} entries for {lengths[row]} tokens")
            flags[row, : len(f)] = f
    return flags


class UnitMaskingCollator(PretrainingCollator):
    """A `PretrainingCollator` that masks whole units: words, spans, phrases or entities.

    The strategy of an example is its `strategy` key (set by `UnitDataset` from a schedule), else
    `strategy`. Unit starts come from the example's `unit_flags`; examples without them get WordPiece
    words (`##` continues a word) at every level. Rows are masked per strategy with the same keyed
    randomness as `PretrainingCollator`, so with strategy "token" the two produce identical batches.
    With `span_targets`, span strategies also fill `batch.extra["span_start"]` / `["span_end"]`:
    the first and last position of the span (or unit) of every masked token, -1 elsewhere.
    """

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        masking: MaskingConfig,
        seed: int,
        *,
        pad_to_multiple_of: int = 8,
        vocab_size: int | None = None,
        strategy: str = "whole_word",
        continuation: np.ndarray | None = None,
        span_targets: bool = False,
    ) -> None:
        super().__init__(
            tokenizer, masking, seed, pad_to_multiple_of=pad_to_multiple_of, vocab_size=vocab_size, selector=strategy
        )
        if strategy not in SELECTORS:
            raise ConfigError(f"unknown masking strategy {strategy!r}; choose one of: {', '.join(SELECTORS)}")
        self.strategy = strategy
        self.continuation = continuation_table(tokenizer, self.vocab_size, continuation)
        self.span_targets = span_targets

    def __call__(self, examples: Sequence[dict[str, Any]]) -> Batch:
        rows = self.inputs(examples)
        ids, lengths, index = rows.ids, rows.lengths, rows.index
        strategies = np.array([str(e.get("strategy", self.strategy)) for e in examples])
        flags = None
        if any(s in UNIT_STRATEGIES for s in strategies):
            flags = batch_unit_flags(examples, ids, lengths, index, self.continuation)
        masked = ids.copy()
        labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
        span_start = np.full(ids.shape, -1, dtype=np.int64) if self.span_targets else None
        span_end = np.full(ids.shape, -1, dtype=np.int64) if self.span_targets else None
        for strategy in dict.fromkeys(strategies.tolist()):
            sub = np.flatnonzero(strategies == strategy)
            if strategy not in SELECTORS:
                raise ConfigError(f"unknown masking strategy {strategy!r}; choose one of: {', '.join(SELECTORS)}")
            starts = None
            if strategy in UNIT_STRATEGIES:
                starts = (flags[sub] & LEVEL_FLAGS[strategy]) != 0
            out, lab, sel = mask_tokens(
                ids[sub],
                rows.special_mask[sub],
                seed=self.seed,
                epoch=rows.epoch[sub],
                index=index[sub],
                config=self.masking,
                mask_id=self.special.mask,
                replacement_ids=self.replacement_ids,
                selector=strategy,
                starts=starts,
                return_selection=True,
            )
            masked[sub] = out
            labels[sub] = lab
            if span_start is not None:
                span_start[sub] = np.where(sel.selected, sel.groups, -1)
                span_end[sub] = np.where(sel.selected, sel.ends, -1)
        batch = self.assemble(examples, rows, masked, labels)
        if span_start is not None:
            batch.extra["span_start"] = torch.from_numpy(span_start)
            batch.extra["span_end"] = torch.from_numpy(span_end)
        if any("task_type_id" in e for e in examples):
            task = np.fromiter((int(e.get("task_type_id", 0)) for e in examples), dtype=np.int64, count=len(examples))
            batch.extra["task_type_ids"] = torch.from_numpy(np.where(rows.attention, task[:, None], 0))
        return batch
