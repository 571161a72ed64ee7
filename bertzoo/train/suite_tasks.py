"""The benchmark suites' tasks, one row each: where a task's examples come from, how it is fine-tuned (its
recipe) and how it is scored (its published metrics). `SUITES` is the one table `bertzoo suite` reads.

A task's score is the mean of its metrics, and a suite's aggregate the mean of its tasks' scores: the GLUE
leaderboard's rule (MRPC: F1 and accuracy averaged, STS-B: Pearson and Spearman, MNLI: matched and mismatched).

Recipes:

* GLUE: BERT's (Devlin et al. 2019, section 4.1): batch 32, 3 epochs, sequences of 128 tokens, warmup over the
  first 10% of steps, and the learning rate picked on dev from {2e-5, 3e-5, 5e-5} for each seed;
* CLUE: the BERT-base baselines of CLUE's repository (baselines/README.md), one learning rate each, as published;
* builtin: bertzoo's own recipes (one per task, the same for every model), those of the continued-pretraining
  study (scripts/studies/domain_adapt.py).

A task that is not fine-tuned (an embedding or retrieval task scored on sentence vectors) is one more row whose
`run` scores a model itself; `bertzoo.train.suite` calls it instead of fine-tuning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertzoo.data.tasks.builtin import BUILTIN_TASKS, load_builtin_task
from bertzoo.data.tasks.clue import CLUE_TASKS, read_clue
from bertzoo.data.tasks.glue import GLUE_TASKS, read_glue
from bertzoo.errors import ConfigError

__all__ = ["SUITES", "Metric", "Recipe", "Suite", "SuiteTask", "get_suite", "select_tasks"]

Reader = Callable[[Path | None, str], list[dict[str, Any]]]  # (data directory or None, split) -> examples


@dataclass(frozen=True)
class Recipe:
    """How a task is fine-tuned. Every rate of `lrs` is run for each seed and the one with the best dev score is
    kept for that seed (the papers' practice); one rate means no search."""

    lrs: tuple[float, ...]
    epochs: float
    batch_size: int
    max_seq_len: int
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    # Further fine-tuning settings as dotted overrides, e.g. {"technique.pooling": "mean"}.
    options: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # where the recipe comes from


@dataclass(frozen=True)
class Metric:
    """One published metric of a task: its name in reports, what is read from an evaluation (a key of
    `bertzoo.train.suite.MEASURES`) and which evaluated split it is read from."""

    name: str
    measure: str
    split: str = "dev"


@dataclass(frozen=True)
class SuiteTask:
    """A task of a suite: its examples, how it is fine-tuned and scored."""

    name: str
    read: Reader
    # Split of the suite -> the reader's split: "train", the scored "dev", and any further dev set (MNLI's); empty
    # for a task whose `run` reads its own data.
    splits: dict[str, str]
    metrics: tuple[Metric, ...]
    recipe: Recipe
    task: str = "classification"  # bertzoo's fine-tuning task
    problem: str = "single_label"  # classification: single_label or regression
    labels: Callable[[], tuple[str, ...]] = tuple  # the fixed label order (empty for regression)
    pair: bool = False  # examples carry a "text_pair"
    # Scores a model without fine-tuning (an embedding task): (task, job) -> {metric: value}; None: fine-tune.
    run: Callable[..., dict[str, float]] | None = None


@dataclass(frozen=True)
class Suite:
    """A benchmark: its tasks and whether it reads a directory of official files (`--data`)."""

    name: str
    title: str
    tasks: tuple[SuiteTask, ...]
    needs_data: bool
    data_help: str = ""


_DEV = {"train": "train", "dev": "dev"}
ACCURACY = (Metric("accuracy", "accuracy"),)
PAIR_F1 = (Metric("f1", "positive_f1"), Metric("accuracy", "accuracy"))

GLUE_RECIPE = Recipe(
    lrs=(2e-5, 3e-5, 5e-5),
    epochs=3,
    batch_size=32,
    max_seq_len=128,
    source="BERT (Devlin et al. 2019), section 4.1: batch 32, 3 epochs, best learning rate on dev",
)


def _glue(name: str, metrics: tuple[Metric, ...], **kw: Any) -> SuiteTask:
    spec = GLUE_TASKS[name]
    return SuiteTask(
        name=name,
        read=lambda root, split: read_glue(root, name, split),
        splits=kw.pop("splits", _DEV),
        metrics=metrics,
        recipe=GLUE_RECIPE,
        problem="single_label" if spec.labels else "regression",
        labels=lambda: spec.labels,
        pair=bool(spec.pair),
        **kw,
    )


GLUE = Suite(
    name="glue",
    title="GLUE",
    needs_data=True,
    data_help="the folder the GLUE download script writes (CoLA/, SST-2/, MRPC/, ...)",
    tasks=(
        _glue("CoLA", (Metric("mcc", "mcc"),)),
        _glue("SST-2", ACCURACY),
        _glue("MRPC", PAIR_F1),
        _glue("QQP", PAIR_F1),
        _glue("STS-B", (Metric("pearson", "pearson"), Metric("spearman", "spearman"))),
        _glue(
            "MNLI",
            (Metric("matched_accuracy", "accuracy"), Metric("mismatched_accuracy", "accuracy", "dev_mismatched")),
            splits={"train": "train", "dev": "dev_matched", "dev_mismatched": "dev_mismatched"},
        ),
        _glue("QNLI", ACCURACY),
        _glue("RTE", ACCURACY),
        _glue("WNLI", ACCURACY),
    ),
)


def _clue_recipe(lr: float, epochs: float, batch: int, length: int = 128) -> Recipe:
    return Recipe(lrs=(lr,), epochs=epochs, batch_size=batch, max_seq_len=length, source="CLUE's BERT-base baseline")


def _clue(name: str, recipe: Recipe) -> SuiteTask:
    spec = CLUE_TASKS[name]
    return SuiteTask(
        name=name,
        read=lambda root, split: read_clue(root, name, split),
        splits=_DEV,
        metrics=ACCURACY,
        recipe=recipe,
        labels=lambda: spec.labels,
        pair=spec.pair,
    )


CLUE = Suite(
    name="clue",
    title="CLUE classification",
    needs_data=True,
    data_help="the folder holding CLUE's task folders (afqmc/, tnews/, ..., each with train.json, dev.json, test.json)",
    tasks=(
        _clue("AFQMC", _clue_recipe(2e-5, 3, 16)),
        _clue("TNEWS", _clue_recipe(2e-5, 3, 16)),
        _clue("IFLYTEK", _clue_recipe(2e-5, 3, 32)),
        _clue("CMNLI", _clue_recipe(2e-5, 3, 32)),
        _clue("OCNLI", _clue_recipe(2e-5, 3, 32)),
        _clue("WSC", _clue_recipe(2e-5, 50, 8)),
        _clue("CSL", _clue_recipe(1e-5, 5, 4, 256)),
    ),
)


def _builtin(name: str, metrics: tuple[Metric, ...], recipe: Recipe) -> SuiteTask:
    spec = BUILTIN_TASKS[name]
    return SuiteTask(
        name=name,
        read=lambda root, split: load_builtin_task(name, split),
        splits=_DEV,
        metrics=metrics,
        recipe=recipe,
        task=spec.task,
        labels=lambda: tuple(spec.labels()),
    )


# The continued-pretraining study's recipes (scripts/studies/domain_adapt.py), each with a second, 5x higher rate:
# the suite compares models of different sizes (BERT-mini's own fine-tuning uses 1e-3, MiniLM's 1e-4), and one
# rate would favour the model it was tuned for.
_STUDY = "bertzoo's continued-pretraining study (scripts/studies/domain_adapt.py), with a 5x higher rate"
BUILTIN = Suite(
    name="builtin",
    title="bertzoo's built-in tasks",
    needs_data=False,
    tasks=(
        _builtin(
            "wiki-topics", ACCURACY, Recipe(lrs=(1e-4, 5e-4), epochs=5, batch_size=32, max_seq_len=128, source=_STUDY)
        ),
        _builtin(
            "chinese-sentiment",
            ACCURACY,
            Recipe(
                lrs=(2e-4, 1e-3),
                epochs=2,
                batch_size=32,
                max_seq_len=64,
                options={"technique.pooling": "mean"},
                source=_STUDY,
            ),
        ),
        _builtin(
            "peoples-daily-ner",
            (Metric("f1", "f1"),),  # entity-level F1 (conlleval's rules)
            Recipe(lrs=(2e-4, 1e-3), epochs=3, batch_size=32, max_seq_len=128, source=_STUDY),
        ),
    ),
)

SUITES: dict[str, Suite] = {s.name: s for s in (GLUE, CLUE, BUILTIN)}


def get_suite(name: str) -> Suite:
    """The suite called `name`; ConfigError listing them otherwise."""
    suite = SUITES.get(name.lower())
    if suite is None:
        raise ConfigError(f"unknown suite {name!r}; choose one of: {', '.join(SUITES)}")
    return suite


def select_tasks(suite: Suite, names: list[str] | None) -> tuple[SuiteTask, ...]:
    """The suite's tasks named in `names` (case-insensitive; None or empty: all), in the suite's order."""
    if not names:
        return suite.tasks
    known = {t.name.lower(): t for t in suite.tasks}
    unknown = [n for n in names if n.lower() not in known]
    if unknown:
        raise ConfigError(
            f"{suite.name} has no task {unknown[0]!r}; its tasks: {', '.join(t.name for t in suite.tasks)}"
        )
    wanted = {n.lower() for n in names}
    return tuple(t for t in suite.tasks if t.name.lower() in wanted)
