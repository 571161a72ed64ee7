"""What int8 costs in accuracy: all-MiniLM-L6-v2 fine-tuned on wiki-topics and chinese-sentiment (one recipe, a fixed
subset of the training examples, each fine-tuning seed), then each model scored on dev in fp32 and with its linear
layers dynamically quantized (`bertzoo evaluate --int8`), with the time of each dev pass.

Prints one JSON line per (task, seed), writes --out/results.json and --out/results.md, and ends with one JSON line:
per task the mean dev accuracy in fp32 and int8, the mean loss in points and the mean speed ratio of the dev pass.
Finished fine-tuning runs under --out are reused.

    python scripts/studies/int8_accuracy.py                 # about 10 minutes on a 2-core CPU
    python scripts/studies/int8_accuracy.py --quick         # a smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from bertzoo.config import load_finetune_config
from bertzoo.precision import cpu_capability
from bertzoo.train.evaluate import evaluate_model
from bertzoo.train.finetune import finetune

# One recipe per task, MiniLM's (configs/finetune/wiki-topics-minilm.yaml; the continued-pretraining study's for the
# reviews): dev scores compare the two precisions of the same model, so the recipe only needs to be reasonable.
TASKS = {
    "wiki-topics": {"train.lr": 1e-4, "data.max_seq_len": 128},
    "chinese-sentiment": {"train.lr": 2e-4, "data.max_seq_len": 64, "technique.pooling": "mean"},
}


def finetuned(task: str, seed: int, out: Path, examples: int, epochs: float, model: str) -> Path:
    """The model of one fine-tuning run (reused when it finished)."""
    run = out / f"{task}-seed{seed}"
    if (run / "model" / "config.json").is_file():
        return run / "model"
    overrides = {
        "task": "classification",
        "model": model,
        "data.dataset": f"builtin:{task}",
        "data.max_train_examples": examples,
        "train.output_dir": str(run),
        "train.seed": seed,
        "train.epochs": epochs,
        "train.batch_size": 32,
        "train.eval_batch_size": 128,
        "train.bucket_by_length": True,
        "train.save_every": 0,
        "train.log_every": 50,
        **TASKS[task],
    }
    finetune(load_finetune_config(None, overrides))
    return run / "model"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--examples", type=int, default=1000, help="training examples per task (a fixed subset)")
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--out", type=Path, default=Path("runs/int8_accuracy"))
    ap.add_argument("--quick", action="store_true", help="one seed, 64 examples, one epoch")
    ap.add_argument(
        "--zh-model",
        default="builtin:all-minilm-l6-v2",
        help="the model fine-tuned on chinese-sentiment; the release reads most Chinese as [UNK], so pass the MiniLM "
        "taken to Chinese by scripts/studies/domain_adapt.py (runs/domain_adapt/zh/c-300steps-seed0/final)",
    )
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.examples, args.epochs = args.seeds[:1], 64, 1
    rows = []
    for task in args.tasks:
        for seed in args.seeds:
            base = args.zh_model if task == "chinese-sentiment" else "builtin:all-minilm-l6-v2"
            model = finetuned(task, seed, args.out, args.examples, args.epochs, base)
            row = {"task": task, "seed": seed}
            for name, int8 in (("fp32", False), ("int8", True)):
                started = time.perf_counter()
                result, _ = evaluate_model(model, split="dev", device="cpu", int8=int8)
                row[f"{name}_accuracy"] = result.metrics["accuracy"]
                row[f"{name}_seconds"] = round(time.perf_counter() - started, 2)
            row["loss_points"] = 100 * (row["fp32_accuracy"] - row["int8_accuracy"])
            row["speed_ratio"] = row["fp32_seconds"] / row["int8_seconds"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {
        task: {
            key: round(statistics.fmean(r[key] for r in rows if r["task"] == task), 4)
            for key in ("fp32_accuracy", "int8_accuracy", "loss_points", "speed_ratio")
        }
        for task in args.tasks
    }
    meta = {"cpu": cpu_capability(), "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"runs": rows, "summary": summary, **meta}, indent=2) + "\n")
    lines = ["| task | seed | fp32 dev accuracy | int8 dev accuracy | points lost | dev pass fp32 / int8 (s) |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    lines += [
        f"| {r['task']} | {r['seed']} | {r['fp32_accuracy']:.4f} | {r['int8_accuracy']:.4f} | "
        f"{r['loss_points']:+.2f} | {r['fp32_seconds']} / {r['int8_seconds']} |"
        for r in rows
    ]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print(json.dumps({"summary": summary, **meta}))


if __name__ == "__main__":
    main()
