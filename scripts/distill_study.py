"""Distillation study on wiki-topics: does each distilled student beat the same student trained without
the teacher, and how close does it come to the teacher? (docs/distillation.md)

Steps, each skipped when its output already exists (so the study can be stopped and run again):

1. the teacher: all-MiniLM-L6-v2 fine-tuned on wiki-topics (configs/finetune/wiki-topics-minilm.yaml);
2. general distillation of MiniLM into 3 of its layers (DistilBERT init; its MLM head proposes TinyBERT's
   augmentation) and into a random 4 x 312 TinyBERT (configs/distill/*-general-minilm.yaml);
3. per seed, four task runs on the same fine-tuning data:
   - distilbert:        3 layers from the teacher, soft targets (T = 2) + gold labels;
   - distilbert-nokd:   the same student and schedule, gold labels only (no teacher);
   - tinybert:          the general-distilled 4 x 312, intermediate then prediction on augmented data;
   - tinybert-nokd:     the same general-distilled student, gold labels only, no augmentation;
4. inference speed of each student against the teacher (benchmarks/distill_throughput.py).

Prints a table and, last, one JSON line. Usage:
    python scripts/distill_study.py --seeds 0 1 --out runs/distill-study
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from bertzoo.cli import main as cli  # noqa: E402


def run(args: list[str]) -> None:
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    code = cli(args)
    if code != 0:
        sys.exit(code)


def done(directory: Path) -> bool:
    return (directory / "model" / "model.safetensors").is_file() and (directory / "report.json").is_file()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/distill-study")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--teacher-len", type=int, default=64, help="max_seq_len of the teacher and every student")
    p.add_argument("--teacher-epochs", type=float, default=2)
    p.add_argument("--general-steps", type=int, default=320, help="steps of each general distillation")
    p.add_argument("--general-minutes", type=float, default=15, help="each general distillation's time cap")
    p.add_argument("--epochs", type=float, default=3, help="task epochs of the DistilBERT students")
    p.add_argument("--copies", type=int, default=2, help="TinyBERT augmentation: copies per training example")
    p.add_argument("--inter-epochs", type=float, default=1, help="TinyBERT task stage: intermediate epochs")
    p.add_argument("--max-train", type=int, default=None, help="training examples (default: all 8,003)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    length = ["--data.max_seq_len", str(args.teacher_len)]

    teacher_run = out / "teacher"
    teacher = teacher_run / "model"
    if not (teacher / "model.safetensors").is_file():
        run(["finetune", "configs/finetune/wiki-topics-minilm.yaml", "--train.output_dir", str(teacher_run),
             *length, "--train.epochs", str(args.teacher_epochs)])  # fmt: skip
    for shards, split in (("shards-minilm", "builtin:wiki-en"), ("dev-shards-minilm", "builtin:wiki-en:dev")):
        if not (out / shards / "meta.json").is_file():
            run(["prepare", "-i", split, "--tokenizer", "builtin:all-minilm-l6-v2", "--out", str(out / shards)])
    general = {}
    for name in ("distilbert", "tinybert"):
        general[name] = out / f"{name}-general"
        if not done(general[name]):
            run(["distill", f"configs/distill/{name}-general-minilm.yaml", "--train.output_dir", str(general[name]),
                 "--data.shards", str(out / "shards-minilm"), "--data.eval_shards", str(out / "dev-shards-minilm"),
                 "--train.max_steps", str(args.general_steps), "--train.max_minutes", str(args.general_minutes),
                 "--train.eval_every", str(max(1, args.general_steps // 4))])  # fmt: skip

    subset = ["--data.max_train_examples", str(args.max_train)] if args.max_train else []
    common = ["--teacher", str(teacher), *subset]
    runs: dict[str, list[Path]] = {k: [] for k in ("distilbert", "distilbert-nokd", "tinybert", "tinybert-nokd")}
    tinybert_phases = [
        {
            "name": "intermediate",
            "loss": {"attn": 1.0, "hidden": 1.0},
            "train": {"epochs": args.inter_epochs, "lr": 5e-4},
        },
        {"name": "prediction", "loss": {"ce": 1.0}, "train": {"epochs": args.epochs, "lr": 3e-4}},
    ]
    for seed in args.seeds:
        s = ["--train.seed", str(seed)]
        plans = {
            "distilbert": ["configs/distill/distilbert-wiki-topics.yaml", "--train.epochs", str(args.epochs)],
            "distilbert-nokd": ["configs/distill/distilbert-wiki-topics.yaml", "--train.epochs", str(args.epochs),
                                "--phases", json.dumps([{"name": "finetune", "loss": {"hard": 1.0}}])],
            "tinybert": ["configs/distill/tinybert-wiki-topics.yaml",
                         "--student.model", str(general["tinybert"] / "model"),
                         "--augment.model", str(general["distilbert"] / "model"), "--augment.copies", str(args.copies),
                         "--augment.seed", str(seed), "--phases", json.dumps(tinybert_phases)],
            "tinybert-nokd": ["configs/distill/tinybert-wiki-topics.yaml", "--student.model",
                              str(general["tinybert"] / "model"), "--augment.copies", "0",
                              "--phases", json.dumps([{"name": "finetune", "loss": {"hard": 1.0},
                                                       "train": {"epochs": args.epochs, "lr": 3e-4}}])],
        }  # fmt: skip
        for name, plan in plans.items():
            directory = out / f"{name}-seed{seed}"
            if not done(directory):
                run(["distill", *plan, *common, *s, "--train.output_dir", str(directory)])
            runs[name].append(directory)

    def test_acc(directory: Path, who: str) -> float:
        return json.loads((directory / "report.json").read_text())[f"{who}_test"]["accuracy"]

    teacher_acc = test_acc(runs["distilbert"][0], "teacher")
    result: dict = {"teacher_test_accuracy": teacher_acc, "seeds": args.seeds, "students": {}}
    print(f"\nteacher (all-MiniLM-L6-v2 fine-tuned): test accuracy {teacher_acc:.4f}")
    print(f"{'student':<18} {'test acc (mean ± sd)':>22} {'% of teacher':>13}  per seed")
    for name, dirs in runs.items():
        accs = [test_acc(d, "student") for d in dirs]
        mean = statistics.mean(accs)
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        result["students"][name] = {"test_accuracy": mean, "test_accuracy_sd": sd, "per_seed": accs,
                                    "of_teacher": mean / teacher_acc}  # fmt: skip
        print(f"{name:<18} {mean:>14.4f} ± {sd:.4f} {100 * mean / teacher_acc:>12.1f}%  {accs}")
    for kind in ("distilbert", "tinybert"):
        gap = result["students"][kind]["test_accuracy"] - result["students"][f"{kind}-nokd"]["test_accuracy"]
        result[f"{kind}_distillation_gain"] = gap
        print(f"{kind}: distillation gain over the same student without a teacher: {gap:+.4f}")

    bench = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "distill_throughput.py"), "--teacher", str(teacher),
         "--students", str(runs["distilbert"][0] / "model"), str(runs["tinybert"][0] / "model"),
         "--seq-len", str(args.teacher_len)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    print(bench.stdout[-3000:])
    if bench.returncode == 0:
        result["speed"] = json.loads(bench.stdout.strip().splitlines()[-1])
    else:
        print(bench.stderr[-2000:], file=sys.stderr)
    (out / "study.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
