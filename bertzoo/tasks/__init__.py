"""Fine-tuning tasks; `TASKS` lists them all (filled in as tasks land)."""

from __future__ import annotations

from torch import nn

from bertzoo.config import FinetuneConfig
from bertzoo.errors import ConfigError
from bertzoo.tasks.base import (
    EvalResult,
    FeatureDataset,
    ScalarMix,
    Task,
    TaskModel,
    batched_logits,
    output_width,
    poolable,
    resolve_pooling,
)
from bertzoo.tasks.classification import ClassificationTask
from bertzoo.tasks.embedding import EmbeddingTask
from bertzoo.tasks.multiple_choice import MultipleChoiceTask
from bertzoo.tasks.qa import QATask
from bertzoo.tasks.seq2seq import Seq2SeqTask
from bertzoo.tasks.token_classification import TokenClassificationTask

TASKS: dict[str, type[Task]] = {
    "classification": ClassificationTask,
    "token_classification": TokenClassificationTask,
    "multiple_choice": MultipleChoiceTask,
    "qa": QATask,
    "seq2seq": Seq2SeqTask,
    "embedding": EmbeddingTask,
}

# Tasks whose head reads the pooled [CLS] vector alone (BERT's classifiers): an encoder saved without
# a pooler gets a fresh one, as transformers' AutoModelForSequenceClassification does, and the top
# layer runs for [CLS] only (TaskModel.reads_sequence).
POOLED_TASKS = ("classification", "multiple_choice")


def get_task(cfg: FinetuneConfig, tokenizer) -> Task:
    """An instance of `TASKS[cfg.task]`."""
    if cfg.task not in TASKS:
        available = ", ".join(TASKS) or "none yet"
        raise ConfigError(f"task {cfg.task!r} is not available in this bertzoo; available: {available}")
    if cfg.task != Seq2SeqTask.name:
        # Text-to-text options: another task would silently train without them.
        for key in ("source_prefix", "mixture"):
            if getattr(cfg.data, key):
                raise ConfigError(f"data.{key} applies to task: seq2seq (text-to-text) only; remove it")
    return TASKS[cfg.task](cfg, tokenizer)


def mark_sentence_only(model: nn.Module, task: str) -> None:
    """Pooled-vector tasks skip the top layer's work on tokens other than [CLS], unless the model
    class states otherwise (ours do; this covers task models registered by users)."""
    if task in POOLED_TASKS and "reads_sequence" not in type(model).__dict__:
        model.reads_sequence = False


__all__ = [
    "POOLED_TASKS",
    "TASKS",
    "ClassificationTask",
    "EmbeddingTask",
    "EvalResult",
    "FeatureDataset",
    "MultipleChoiceTask",
    "QATask",
    "Seq2SeqTask",
    "ScalarMix",
    "Task",
    "TaskModel",
    "TokenClassificationTask",
    "batched_logits",
    "get_task",
    "mark_sentence_only",
    "output_width",
    "poolable",
    "resolve_pooling",
]
