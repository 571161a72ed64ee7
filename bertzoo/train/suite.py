"""`bertzoo suite NAME MODEL [MODEL ...]`: fine-tune and score models on every task of a benchmark suite
(`bertzoo.train.suite_tasks.SUITES`: GLUE and CLUE from their official files, bertzoo's built-in tasks).

For each model, task, seed and learning rate of the task's grid, one fine-tuning run (`bertzoo.train.finetune`)
trains on the task's train split and scores the final model once on dev; the best rate on dev is kept for each
seed (the papers' practice), and each task reports the median of its seeds with their spread. The dev split is
given to the fine-tuning run as its evaluation split (`data.test`), so it never chooses a checkpoint: only the
learning rate is chosen on it. Further dev sets (MNLI's mismatched) are scored with the same final model.

Everything goes under `--out`: the tasks' examples as JSONL (`data/`), the runs (`runs/MODEL/TASK/...`, each with
its `scores.json`; a run is reused when its settings and data are unchanged, and an interrupted one continues from
its checkpoint), and the report (`suite.json`, `suite.md`, `suite.html`, written after every task). A MODEL is a
model directory, `builtin:NAME` or `hf:ORG/NAME`; `random:MODEL` is the same architecture and tokenizer from
random weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertzoo.config import load_finetune_config, to_plain
from bertzoo.errors import ConfigError
from bertzoo.io import write_atomic, write_json
from bertzoo.loading import read_config
from bertzoo.loading import resolve as resolve_model_path
from bertzoo.metrics.classification import confusion_mcc
from bertzoo.train.suite_report import write_reports
from bertzoo.train.suite_tasks import Suite, SuiteTask, get_suite, select_tasks

__all__ = ["MEASURES", "RANDOM_PREFIX", "Job", "SuiteOptions", "SuiteStopped", "run_suite", "start_overrides"]

RANDOM_PREFIX = "random:"
SCORES = "scores.json"
# What a run keeps once scored (the weights are large: a suite has many runs); --keep-models keeps everything.
KEPT = {SCORES, "report.json", "summary.json", "metrics.jsonl", "run_config.json"}


class SuiteStopped(Exception):
    """A fine-tuning run was stopped (a signal) before its end; the suite stops too."""

    def __init__(self, stop_reason: str | None) -> None:
        super().__init__(stop_reason or "stopped")
        self.stop_reason = stop_reason


def _positive_f1(evaluation: dict[str, Any]) -> float:
    """F1 of the positive class "1" (MRPC's and QQP's F1), from the per-label table of the evaluation."""
    return float(evaluation["report"]["per_label"]["1"]["f1"])


# How each metric is read from a fine-tuning evaluation ({"metrics", "report"} as report.json holds it).
MEASURES: dict[str, Callable[[dict[str, Any]], float]] = {
    "accuracy": lambda e: float(e["metrics"]["accuracy"]),
    "mcc": lambda e: confusion_mcc(e["report"]["confusion_matrix"]),
    "positive_f1": _positive_f1,
    "pearson": lambda e: float(e["metrics"]["pearson"]),
    "spearman": lambda e: float(e["metrics"]["spearman"]),
    "f1": lambda e: float(e["metrics"]["f1"]),  # token classification: entity-level F1
}


@dataclasses.dataclass
class SuiteOptions:
    """How much of a suite runs and how: seeds, task subset and the budget overrides for small machines."""

    seeds: int = 1  # seeds 0 .. seeds-1
    tasks: list[str] | None = None  # None: every task
    max_train_examples: int | None = None  # a fixed subset of each train split
    epochs: float | None = None  # replaces every recipe's epochs
    max_steps: int | None = None  # replaces epochs: this many optimizer steps
    lrs: tuple[float, ...] | None = None  # replaces every recipe's learning-rate grid
    threads: int | None = None
    device: str = "auto"
    keep_models: bool = False

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ConfigError(f"--seeds must be at least 1, got {self.seeds}")
        if self.epochs is not None and self.max_steps is not None:
            raise ConfigError("--epochs and --max-steps both set the length of training; give one of them")
        if self.epochs is not None and not self.epochs > 0:
            raise ConfigError(f"--epochs must be > 0, got {self.epochs}")
        if self.lrs is not None and (not self.lrs or any(not lr > 0 for lr in self.lrs)):
            raise ConfigError(f"--lrs must be learning rates > 0, got {list(self.lrs)}")


@dataclasses.dataclass(frozen=True)
class Job:
    """One run: a model fine-tuned on a task with one learning rate and seed, in `run_dir`."""

    model: str
    task: SuiteTask
    files: dict[str, str]  # split of the suite -> materialized JSONL file
    lr: float
    seed: int
    settings: dict[str, Any]  # the resolved recipe and budget (recorded in scores.json)
    run_dir: Path
    options: SuiteOptions


def start_overrides(model: str) -> dict[str, Any]:
    """Fine-tuning config keys for a model spec: `model` for a pretrained one; for `random:MODEL` the same
    architecture (its config.json) and tokenizer, random weights."""
    if not model.startswith(RANDOM_PREFIX):
        read_config(resolve_model_path(model))  # a missing or damaged model is one line now, not after some runs
        return {"model": model}
    base = model[len(RANDOM_PREFIX) :]
    if not base:
        raise ConfigError("random: names no model; write random:MODEL, e.g. random:builtin:all-minilm-l6-v2")
    path = resolve_model_path(base)
    _, config, _ = read_config(path)
    return {"model": "", "model_config": to_plain(config), "tokenizer": str(path)}


def _slug(text: str, length: int = 48) -> str:
    """A directory name for `text`: its safe characters, then a short hash so different texts never collide."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:length] or "x"
    return f"{safe}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:6]}"


def model_identity(model: str) -> list[tuple[str, int, int]]:
    """(name, size, modification time) of the files of a model's directory: a model written anew under the same
    path gets new runs instead of the old one's scores."""
    path = resolve_model_path(model.removeprefix(RANDOM_PREFIX))
    return sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in path.iterdir() if f.is_file())


def materialize(task: SuiteTask, data: Path | None, out: Path) -> tuple[dict[str, str], str]:
    """Read every split of `task` (official files or built-in data) into JSONL files under `out`, as bertzoo's
    fine-tuning reads them; returns (split -> path, a hash of their contents)."""
    out.mkdir(parents=True, exist_ok=True)
    files, digest = {}, hashlib.sha1()
    prefix = f"{data}/" if data is not None else None
    for split, source in task.splits.items():
        examples = task.read(data, source)
        if prefix:  # where an example came from, relative to the data directory (which may move)
            for ex in examples:
                if isinstance(ex.get("source"), str) and ex["source"].startswith(prefix):
                    ex["source"] = ex["source"][len(prefix) :]
        text = "".join(json.dumps(ex, ensure_ascii=False) + "\n" for ex in examples)
        path = out / f"{split}.jsonl"
        write_atomic(path, text)
        digest.update(split.encode() + b"\0" + text.encode("utf-8"))
        files[split] = str(path)
    return files, digest.hexdigest()


def job_settings(task: SuiteTask, options: SuiteOptions) -> dict[str, Any]:
    """The recipe of `task` with the budget overrides applied: what a run records and is keyed by."""
    r = task.recipe
    return {
        "lrs": list(options.lrs or r.lrs),
        "epochs": None if options.max_steps else (options.epochs or r.epochs),
        "max_steps": options.max_steps,
        "batch_size": r.batch_size,
        "max_seq_len": r.max_seq_len,
        "warmup_ratio": r.warmup_ratio,
        "weight_decay": r.weight_decay,
        "options": dict(r.options),
        "max_train_examples": options.max_train_examples,
    }


def finetune_overrides(job: Job) -> dict[str, Any]:
    """The fine-tuning config of a job, as dotted overrides of `FinetuneConfig`."""
    s, task = job.settings, job.task
    tokens = task.task == "token_classification"
    overrides: dict[str, Any] = {
        "task": task.task,
        **start_overrides(job.model),
        "data.train": job.files["train"],
        # The scored dev split is the run's evaluation split: scored once by the final model, never used to
        # choose a checkpoint.
        "data.test": job.files["dev"],
        "data.format": "jsonl",
        "data.text_column": "tokens" if tokens else "text",
        "data.text_pair_column": "text_pair" if task.pair else "",
        "data.label_column": "labels" if tokens else "label",
        "data.labels": list(task.labels()),
        "data.max_seq_len": s["max_seq_len"],
        "data.max_train_examples": s["max_train_examples"],
        "train.output_dir": str(job.run_dir),
        "train.seed": job.seed,
        "train.lr": job.lr,
        "train.batch_size": s["batch_size"],
        "train.eval_batch_size": max(64, s["batch_size"]),
        "train.epochs": s["epochs"],
        "train.warmup_ratio": s["warmup_ratio"],
        "train.weight_decay": s["weight_decay"],
        "train.bucket_by_length": True,
        "train.save_every": 1000,  # long runs (GLUE's large tasks) can be continued after an interruption
        "train.keep_last": 1,
        "train.log_every": 50,
        "train.device": job.options.device,
        "train.threads": job.options.threads,
        **s["options"],
    }
    if task.task == "classification":
        overrides["problem"] = task.problem
    if s["max_steps"]:
        overrides["train.max_steps"] = s["max_steps"]
    return overrides


def finetune_job(job: Job) -> dict[str, float]:
    """Fine-tune one job and read its metrics: dev from the run's report, further dev sets (MNLI's mismatched)
    scored with the run's final model."""
    from bertzoo.train.evaluate import evaluate_model
    from bertzoo.train.finetune import MODEL_DIR, REPORT, finetune

    cfg = load_finetune_config(None, finetune_overrides(job))
    resume = "auto" if (job.run_dir / "checkpoints").is_dir() else None
    summary = finetune(cfg, resume=resume)
    if not summary.get("completed", True) and summary.get("stop_reason") != "max_minutes":
        raise SuiteStopped(summary.get("stop_reason"))
    report = json.loads((job.run_dir / REPORT).read_text(encoding="utf-8"))
    evaluations = {"dev": report["test"]}  # the dev split, given to the run as its evaluation split
    for metric in job.task.metrics:
        if metric.split not in evaluations:
            path = job.files[metric.split]
            result, _ = evaluate_model(job.run_dir / MODEL_DIR, data=path, device=job.options.device)
            evaluations[metric.split] = {"metrics": result.metrics, "report": result.report}
    return {m.name: MEASURES[m.measure](evaluations[m.split]) for m in job.task.metrics}


def _prune(run_dir: Path) -> None:
    """Drop a scored run's weights (checkpoints, best/, model/, final/) and pictures; keep its records."""
    for path in run_dir.iterdir():
        if path.name in KEPT:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def run_job(job: Job, say: Callable[[str], None]) -> dict[str, Any]:
    """{"metrics", "score", "seconds"} of one job: read from its scores.json when it already ran with the same
    settings, else run (the task's own `run`, or fine-tuning) and recorded."""
    done = job.run_dir / SCORES
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    job.run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    metrics = job.task.run(job.task, job) if job.task.run is not None else finetune_job(job)
    scored = {
        "model": job.model,
        "task": job.task.name,
        "lr": job.lr,
        "seed": job.seed,
        "metrics": metrics,
        "score": statistics.fmean(metrics.values()),
        "seconds": round(time.monotonic() - started, 1),
        "settings": job.settings,
    }
    write_json(done, scored)
    if not job.options.keep_models:
        _prune(job.run_dir)
    say(f"{job.task.name} lr={job.lr:g} seed={job.seed}: score {scored['score']:.4f} ({scored['seconds']:.0f} s)")
    return scored


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max and sample standard deviation (0 for one value) of per-seed scores."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def task_result(task: SuiteTask, runs: dict[int, list[dict[str, Any]]], settings: dict[str, Any]) -> dict[str, Any]:
    """A task's result over seeds: for each seed the run of the best learning rate on dev, then the median and
    spread of the seeds' scores and the median of each metric."""
    seeds = []
    for seed, grid in sorted(runs.items()):
        best = max(grid, key=lambda r: r["score"])  # ties: the first (smallest) rate of the grid
        grid_scores = {f"{r['lr']:g}": r["score"] for r in grid}
        seeds.append({"seed": seed, "lr": best["lr"], "score": best["score"], "metrics": best["metrics"]})
        seeds[-1]["grid"] = grid_scores
    return {
        "metrics": [m.name for m in task.metrics],
        "score": spread([s["score"] for s in seeds]),
        "metric_medians": {m.name: statistics.median(s["metrics"][m.name] for s in seeds) for m in task.metrics},
        "seeds": seeds,
        "recipe": {**settings, "source": task.recipe.source},
        "seconds": round(sum(r["seconds"] for grid in runs.values() for r in grid), 1),
    }


def aggregate(tasks: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The suite's score: the mean over tasks of each task's median score, and its range over seeds (the mean over
    tasks of each seed's score)."""
    if not tasks:
        return None
    n_seeds = min(len(t["seeds"]) for t in tasks.values())
    per_seed = [statistics.fmean(t["seeds"][i]["score"] for t in tasks.values()) for i in range(n_seeds)]
    return {
        "score": statistics.fmean(t["score"]["median"] for t in tasks.values()),
        "min": min(per_seed),
        "max": max(per_seed),
        "tasks": len(tasks),
    }


def comparison(models: list[dict[str, Any]], task_names: list[str]) -> dict[str, Any] | None:
    """Models side by side: each task's median score per model and each model's difference from the first."""
    if len(models) < 2:
        return None
    base = models[0]
    rows = []
    for name in [*task_names, "aggregate"]:
        scores = {}
        for m in models:
            if name == "aggregate":
                scores[m["model"]] = (m.get("aggregate") or {}).get("score")
            else:
                scores[m["model"]] = m["tasks"][name]["score"]["median"] if name in m["tasks"] else None
        first = scores[base["model"]]
        delta = {
            m["model"]: (scores[m["model"]] - first if first is not None and scores[m["model"]] is not None else None)
            for m in models[1:]
        }
        rows.append({"task": name, "scores": scores, "delta": delta})
    return {"baseline": base["model"], "rows": rows}


def _check_inputs(suite: Suite, data: Path | None, models: list[str]) -> None:
    if not models:
        raise ConfigError("name at least one MODEL to score (a model directory, builtin:NAME or random:MODEL)")
    if suite.needs_data and data is None:
        raise ConfigError(f"the {suite.name} suite reads its official files: pass --data DIR, {suite.data_help}")
    if not suite.needs_data and data is not None:
        raise ConfigError(f"the {suite.name} suite reads no files; drop --data")
    if len(set(models)) != len(models):
        raise ConfigError("a MODEL is named twice; name each model once")
    for model in models:
        start_overrides(model)


def run_suite(
    name: str,
    models: list[str],
    out: str | Path,
    data: str | Path | None = None,
    options: SuiteOptions | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune and score every model on every (selected) task of suite `name`; write the reports into `out` and
    return the suite's result (what suite.json holds). `say` gets one line per run (default: stderr)."""
    from bertzoo.precision import cpu_capability

    options = options or SuiteOptions()
    say = say or (lambda line: print(f"[suite] {line}", file=sys.stderr, flush=True))
    suite = get_suite(name)
    tasks = select_tasks(suite, options.tasks)
    data = Path(data) if data is not None else None
    out = Path(out)
    _check_inputs(suite, data, models)
    # Every task's files are read (and checked) before the first run.
    prepared = {t.name: materialize(t, data, out / "data" / t.name) for t in tasks}
    identities = {m: model_identity(m) for m in models}
    result: dict[str, Any] = {
        "suite": suite.name,
        "title": suite.title,
        "data": str(data) if data is not None else None,
        "seeds": list(range(options.seeds)),
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k not in ("tasks", "keep_models")},
        "tasks": [t.name for t in tasks],
        "cpu_capability": cpu_capability(),
        "models": [{"model": m, "tasks": {}, "aggregate": None} for m in models],
        "comparison": None,
    }
    total = len(models) * sum(options.seeds * len(job_settings(t, options)["lrs"]) for t in tasks)
    count = 0
    for entry in result["models"]:
        model = entry["model"]
        for task in tasks:
            files, data_hash = prepared[task.name]
            settings = job_settings(task, options)
            # Runs are keyed by everything they depend on: a changed recipe, budget or data gets new runs. The
            # grid is not part of the key (a run's rate is in its name), so a wider grid reuses the rates run.
            keyed = {k: v for k, v in settings.items() if k != "lrs"}
            key = json.dumps(
                {"model": model, "files": identities[model], "settings": keyed, "data": data_hash}, sort_keys=True
            )
            tag = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
            base = out / "runs" / _slug(model) / task.name
            runs: dict[int, list[dict[str, Any]]] = {}
            for seed in range(options.seeds):
                for lr in settings["lrs"]:
                    count += 1
                    run_dir = base / f"lr{lr:g}-seed{seed}-{tag}"
                    say(f"{count}/{total} {model} {task.name} lr={lr:g} seed={seed} -> {run_dir}")
                    job = Job(model, task, files, lr, seed, settings, run_dir, options)
                    runs.setdefault(seed, []).append(run_job(job, say))
            entry["tasks"][task.name] = task_result(task, runs, settings)
            entry["aggregate"] = aggregate(entry["tasks"])
            result["comparison"] = comparison(result["models"], [t.name for t in tasks])
            write_reports(result, out)  # after every task: an interrupted suite still has its report so far
    return result
