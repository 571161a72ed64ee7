"""Fine-tuning tasks; `TASKS` lists them all (filled in as tasks land)."""

from bertzoo.tasks.base import EvalResult, FeatureDataset, ScalarMix, Task, TaskModel, batched_logits
from bertzoo.tasks.classification import ClassificationTask
from bertzoo.tasks.multiple_choice import MultipleChoiceTask
from bertzoo.tasks.qa import QATask
from bertzoo.tasks.token_classification import TokenClassificationTask

TASKS: dict[str, type[Task]] = {
    "classification": ClassificationTask,
    "token_classification": TokenClassificationTask,
    "multiple_choice": MultipleChoiceTask,
    "qa": QATask,
}

__all__ = [
    "TASKS",
    "ClassificationTask",
    "EvalResult",
    "FeatureDataset",
    "MultipleChoiceTask",
    "QATask",
    "ScalarMix",
    "Task",
    "TaskModel",
    "TokenClassificationTask",
    "batched_logits",
]
