"""Fine-tuning tasks; `TASKS` lists them all (filled in as tasks land)."""

from bertzoo.tasks.base import EvalResult, FeatureDataset, ScalarMix, Task, TaskModel, batched_logits

TASKS: dict[str, type[Task]] = {}

__all__ = ["TASKS", "EvalResult", "FeatureDataset", "ScalarMix", "Task", "TaskModel", "batched_logits"]
