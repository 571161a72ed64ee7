"""Full fine-tuning against LoRA and bottleneck adapters: all-MiniLM-L6-v2 fine-tuned on wiki-topics, and on
chinese-sentiment the MiniLM taken to Chinese by the continued-pretraining study (--zh-model: the release reads
most Chinese characters as [UNK] and learns nothing there), with each method (the same subset of training
examples, the same number of steps, each seed), scored on dev.

Every run trains for the same steps and is scored once at its end (no best-checkpoint selection, no evaluation
during training, so the step time is the training step's alone). Per (task, method): dev accuracy mean ± sd over
the seeds, trainable and total parameters, and seconds per training step (from the run's metrics.jsonl, between
its first and last logged steps). Prints one JSON line per run, writes --out/results.json and --out/results.md.
Finished runs under --out are reused.

    python scripts/studies/lora_study.py                                             # the full study
    python scripts/studies/lora_study.py --max-train-examples 64 --epochs 1 --seeds 0   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bertzoo.config import load_finetune_config
from bertzoo.precision import cpu_capability
from bertzoo.train.finetune import finetune

# The int8 study's recipe per task (configs/finetune/wiki-topics-minilm.yaml's length; mean pooling and 64 tokens
# for the reviews). Its learning rates are full fine-tuning's.
TASKS = {
    "wiki-topics": {"data.max_seq_len": 128},
    "chinese-sentiment": {"data.max_seq_len": 64, "technique.pooling": "mean"},
}
# What each method changes, and its learning rate per task: full fine-tuning as the int8 study (MiniLM's
# 1e-4, the reviews 2e-4); LoRA and adapters start from an update of zero and train few parameters, so they take
# a learning rate ten times larger (1e-3, the usual choice for both).
METHODS: dict[str, dict[str, Any]] = {
    "full": {},
    "lora": {"technique.lora.r": 8, "technique.lora.alpha": 16, "technique.lora.dropout": 0.0},
    "adapters": {"technique.adapter_size": 64},
}
LR = {
    "full": {"wiki-topics": 1e-4, "chinese-sentiment": 2e-4},
    "lora": {"wiki-topics": 1e-3, "chinese-sentiment": 1e-3},
    "adapters": {"wiki-topics": 1e-3, "chinese-sentiment": 1e-3},
}


def run_dir(out: Path, task: str, method: str, seed: int, lr: float | None = None) -> Path:
    """A run's directory; a learning rate other than the table's is part of its name."""
    rate = "" if lr is None or lr == LR[method][task] else f"-lr{lr:g}"
    return out / f"{task}-{method}{rate}-seed{seed}"


def run(task: str, method: str, seed: int, out: Path, examples: int, epochs: float, lr: float, model: str) -> Path:
    """One fine-tuning run (reused when it finished); its output directory."""
    directory = run_dir(out, task, method, seed, lr)
    if (directory / "report.json").is_file() and (directory / "model" / "config.json").is_file():
        return directory
    overrides = {
        "task": "classification",
        "model": model,
        "data.dataset": f"builtin:{task}",
        "data.max_train_examples": examples,
        "train.output_dir": str(directory),
        "train.seed": seed,
        "train.epochs": epochs,
        "train.batch_size": 32,
        "train.eval_batch_size": 128,
        "train.lr": lr,
        "train.warmup_ratio": 0.1,
        "train.weight_decay": 0.01,
        "train.bucket_by_length": True,
        "train.eval_every": 10**9,  # scored once, at the end: the same steps for every method
        "train.save_every": 0,
        "train.log_every": 1,  # every step: the step time is read from these rows
        **TASKS[task],
        **METHODS[method],
    }
    finetune(load_finetune_config(None, overrides))
    return directory


def seconds_per_step(directory: Path) -> float | None:
    """Training seconds per step between the first and the last logged training steps (no evaluation between)."""
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if "elapsed_s" in r and "lr" in r]
    if len(train) < 2 or train[-1]["step"] == train[0]["step"]:
        return None
    return (train[-1]["elapsed_s"] - train[0]["elapsed_s"]) / (train[-1]["step"] - train[0]["step"])


def result(task: str, method: str, seed: int, directory: Path) -> dict[str, Any]:
    report = json.loads((directory / "report.json").read_text())
    step_s = seconds_per_step(directory)
    return {
        "task": task,
        "method": method,
        "seed": seed,
        "dev_accuracy": report["dev"]["metrics"]["accuracy"],
        "trainable": report["trainable_parameters"]["trainable"],
        "total": report["trainable_parameters"]["total"],
        "steps": report["steps"],
        "seconds_per_step": round(step_s, 3) if step_s is not None else None,
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, method): mean and sd (over seeds) of dev accuracy, parameters, mean seconds per step."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for method in dict.fromkeys(r["method"] for r in rows):
            runs = [r for r in rows if r["task"] == task and r["method"] == method]
            if not runs:
                continue
            acc = [r["dev_accuracy"] for r in runs]
            times = [r["seconds_per_step"] for r in runs if r["seconds_per_step"] is not None]
            out.append(
                {
                    "task": task,
                    "method": method,
                    "seeds": [r["seed"] for r in runs],
                    "dev_accuracy": acc,
                    "mean": round(statistics.fmean(acc), 4),
                    "sd": round(statistics.stdev(acc), 4) if len(acc) > 1 else None,
                    "trainable": runs[0]["trainable"],
                    "total": runs[0]["total"],
                    "steps": runs[0]["steps"],
                    "seconds_per_step": round(statistics.fmean(times), 3) if times else None,
                }
            )
    return out


def table(summary: list[dict[str, Any]]) -> str:
    lines = [
        "| task | method | dev accuracy (per seed) | mean ± sd | trainable parameters | steps | s / step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary:
        sd = f" ± {s['sd']:.4f}" if s["sd"] is not None else ""
        share = 100 * s["trainable"] / s["total"]
        step = f"{s['seconds_per_step']:.3f}" if s["seconds_per_step"] is not None else "-"
        lines.append(
            f"| {s['task']} | {s['method']} | {', '.join(f'{a:.4f}' for a in s['dev_accuracy'])} | "
            f"{s['mean']:.4f}{sd} | {s['trainable']:,} of {s['total']:,} ({share:.2f}%) | {s['steps']} | {step} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--max-train-examples", type=int, default=1000, help="training examples per task (a fixed subset)")
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--out", type=Path, default=Path("runs/lora_study"))
    ap.add_argument("--peft-lr", type=float, default=None, help="LoRA's and the adapters' learning rate (default 1e-3)")
    ap.add_argument(
        "--full-lr", type=float, default=None, help="full fine-tuning's learning rate (default: the table's)"
    )
    ap.add_argument(
        "--zh-model",
        default="runs/domain_adapt/zh/c-300steps-seed0/final",
        help="the model fine-tuned on chinese-sentiment (scripts/studies/domain_adapt.py writes this one)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for task in args.tasks:
        for method in args.methods:
            for seed in args.seeds:
                lr = LR[method][task]
                if method == "full" and args.full_lr:
                    lr = args.full_lr
                elif method != "full" and args.peft_lr:
                    lr = args.peft_lr
                model = args.zh_model if task == "chinese-sentiment" else "builtin:all-minilm-l6-v2"
                directory = run(task, method, seed, args.out, args.max_train_examples, args.epochs, lr, model)
                row = {**result(task, method, seed, directory), "lr": lr, "model": model}
                print(json.dumps(row), flush=True)
                rows.append(row)
    summary = summarise(rows)
    meta = {
        "max_train_examples": args.max_train_examples,
        "epochs": args.epochs,
        "cpu": cpu_capability(),
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"runs": rows, "summary": summary, **meta}, indent=2) + "\n")
    (args.out / "results.md").write_text(table(summary))
    print(json.dumps({"summary": summary, **meta}))


if __name__ == "__main__":
    main()
