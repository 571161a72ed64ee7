"""Distillation study: does each distilled student beat the same student trained without the teacher, and
how close does it come to the teacher? (docs/distillation.md)

Steps, each skipped when its output already exists (so the study can be stopped and run again):

1. the teacher,
   - `--task wiki-topics`: all-MiniLM-L6-v2 fine-tuned on wiki-topics (configs/finetune/wiki-topics-minilm.yaml);
   - `--task chinese-sentiment`: a Chinese BERT of MiniLM's shape pretrained by bertzoo on People's Daily and
     the train reviews (a WordPiece tokenizer, shards, configs/pretrain/bert-zh-minilm.yaml for
     `--pretrain-minutes`), fine-tuned on chinese-sentiment (configs/finetune/chinese-sentiment-zh-minilm.yaml);
2. general distillation into a random 4 x 312 TinyBERT (configs/distill/tinybert-general-minilm.yaml with the
   teacher's shards) and, on wiki-topics, of MiniLM into 3 of its layers (DistilBERT init), whose MLM head
   proposes the augmentations (MiniLM has none; the Chinese teacher's own pretrained MLM does it); each only
   when one of `--arms` reads it;
3. per seed, one task run per arm (`--arms`; by default the first four) on the same fine-tuning data:
   - distilbert:        3 layers from the teacher, soft targets (T = 2) + gold labels;
   - distilbert-nokd:   the same student and schedule, gold labels only (no teacher);
   - tinybert:          the general-distilled 4 x 312, intermediate then prediction on augmented data;
   - tinybert-nokd:     the same general-distilled student, gold labels only, no augmentation;
   - distilbert-aug:    3 layers from the teacher, soft targets + gold labels on the training set and `--copies`
                        augmented copies of each example, for `--aug-epochs` (by default as many steps as
                        `distilbert`);
   - distilbert-aug-nokd: the same augmented data and steps, gold labels only (each copy keeps its example's
                        label): what the augmentation alone is worth, so the gap to distilbert-aug is the teacher's;
4. inference speed of each student against the teacher (benchmarks/distill_throughput.py).

Prints a table and, last, one JSON line. Usage:
    python scripts/studies/distill_study.py --seeds 0 1 --out runs/distill-study
    python scripts/studies/distill_study.py --task chinese-sentiment --seeds 0 1 --out runs/distill-study-zh
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from bertzoo.cli import main as cli  # noqa: E402

ARMS = ("distilbert", "distilbert-nokd", "tinybert", "tinybert-nokd", "distilbert-aug", "distilbert-aug-nokd")
DEFAULT_ARMS = ARMS[:4]  # the two methods, each with and without its teacher


def run(args: list[str]) -> None:
    """One bertzoo command; a training step continues its own checkpoints when the study is run again after a
    stop (a stopped step exits non-zero, which ends the study)."""
    if args[0] in ("pretrain", "finetune", "distill"):
        args = [*args, "--resume", "auto"]
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    code = cli(args)
    if code != 0:
        sys.exit(code)


def done(directory: Path) -> bool:
    return (directory / "model" / "model.safetensors").is_file() and (directory / "report.json").is_file()


def wiki_teacher(args: argparse.Namespace, out: Path) -> tuple[Path, dict[str, Path], Path]:
    """MiniLM fine-tuned on wiki-topics; DistilBERT and TinyBERT general students; the augmenting MLM."""
    teacher_run = out / "teacher"
    if not (teacher_run / "model" / "model.safetensors").is_file():
        run(["finetune", "configs/finetune/wiki-topics-minilm.yaml", "--train.output_dir", str(teacher_run),
             "--data.max_seq_len", str(args.teacher_len), "--train.epochs", str(args.teacher_epochs)])  # fmt: skip
    for shards, split in (("shards-minilm", "builtin:wiki-en"), ("dev-shards-minilm", "builtin:wiki-en:dev")):
        if not (out / shards / "meta.json").is_file():
            run(["prepare", "-i", split, "--tokenizer", "builtin:all-minilm-l6-v2", "--out", str(out / shards)])
    # the DistilBERT general student is built for its MLM head, which proposes the augmentations
    names = tuple(n for n in ("distilbert", "tinybert") if n in needs(args.arms))
    general = general_students(args, out, names, [])
    return teacher_run / "model", general, general_dir(out, "distilbert") / "model"


def chinese_teacher(args: argparse.Namespace, out: Path) -> tuple[Path, dict[str, Path], Path]:
    """A Chinese 6 x 384 BERT pretrained and fine-tuned by bertzoo; a TinyBERT general student; its own MLM."""
    corpus = ["-i", "builtin:peoples-daily", "-i", "builtin:chinese-sentiment:train"]
    tok = out / "tokenizer"
    if not (tok / "tokenizer.json").is_file():
        # every CJK character is its own word to BERT's pre-tokenizer, so the alphabet must hold them all
        # (the default 1,000 left 7.2% of the tokens [UNK])
        run(["tokenizer", "train", *corpus, "--vocab-size", "8000", "--limit-alphabet", "6000", "--out", str(tok)])
    for shards, inputs in (("shards", corpus), ("dev-shards", ["-i", "builtin:chinese-sentiment:dev"])):
        if not (out / shards / "meta.json").is_file():
            run(["prepare", *inputs, "--tokenizer", str(tok), "--out", str(out / shards)])
    pretrained = out / "pretrain" / "final"
    if not (pretrained / "model.safetensors").is_file():
        run(["pretrain", "configs/pretrain/bert-zh-minilm.yaml", "--train.output_dir", str(out / "pretrain"),
             "--data.shards", str(out / "shards"), "--data.eval_shards", str(out / "dev-shards"),
             "--train.max_steps", str(args.pretrain_steps),
             "--train.max_minutes", str(args.pretrain_minutes), "--train.schedule_clock", "steps"])  # fmt: skip
    teacher_run = out / "teacher"
    if not (teacher_run / "model" / "model.safetensors").is_file():
        run(["finetune", "configs/finetune/chinese-sentiment-zh-minilm.yaml", "--model", str(pretrained),
             "--train.output_dir", str(teacher_run), "--data.max_seq_len", str(args.teacher_len),
             "--train.epochs", str(args.teacher_epochs)])  # fmt: skip
    general = general_students(
        args, out, ("tinybert",) if "tinybert" in needs(args.arms) else (), ["--teacher", str(pretrained)]
    )
    return teacher_run / "model", general, pretrained


def needs(arms: list[str]) -> set[str]:
    """Which general students the arms need: TinyBERT's for its arms, DistilBERT's as the augmenting MLM."""
    tiny = any(a.startswith("tinybert") for a in arms)
    augmented = "tinybert" in arms or any(a.startswith("distilbert-aug") for a in arms)
    return ({"tinybert"} if tiny else set()) | ({"distilbert"} if augmented else set())


def general_dir(out: Path, name: str) -> Path:
    """Where the study keeps the general distillation of method `name`."""
    return out / f"{name}-general"


def general_students(args: argparse.Namespace, out: Path, names: tuple[str, ...], extra: list[str]) -> dict[str, Path]:
    """General distillation of each method in `names` on `out`'s shards (configs/distill/*-general-minilm.yaml)."""
    shards = "shards-minilm" if (out / "shards-minilm").is_dir() else "shards"
    general = {}
    for name in names:
        general[name] = general_dir(out, name)
        if not done(general[name]):
            run(["distill", f"configs/distill/{name}-general-minilm.yaml", "--train.output_dir", str(general[name]),
                 "--data.shards", str(out / shards), "--data.eval_shards", str(out / f"dev-{shards}"), *extra,
                 "--train.max_steps", str(args.general_steps), "--train.max_minutes", str(args.general_minutes),
                 "--train.schedule_clock", "steps",
                 "--train.eval_every", str(max(1, args.general_steps // 4))])  # fmt: skip
    return general


def speed(teacher: Path, students: list[str], seq_len: int) -> dict:
    """`{"speed": ...}`: benchmarks/distill_throughput.py on the trained students (empty when it fails)."""
    bench = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "distill_throughput.py"), "--teacher", str(teacher),
         "--students", *students, "--seq-len", str(seq_len)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    print(bench.stdout[-3000:])
    if bench.returncode != 0:
        print(bench.stderr[-2000:], file=sys.stderr)
        return {}
    return {"speed": json.loads(bench.stdout.strip().splitlines()[-1])}


def max_train(args: argparse.Namespace) -> list[str]:
    return ["--data.max_train_examples", str(args.max_train)] if args.max_train else []


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=["wiki-topics", "chinese-sentiment"], default="wiki-topics")
    p.add_argument("--out", default="runs/distill-study")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--teacher-len", type=int, default=64, help="max_seq_len of the teacher and every student")
    p.add_argument("--teacher-epochs", type=float, default=2)
    p.add_argument("--pretrain-minutes", type=float, default=15, help="chinese-sentiment: pretraining cap")
    p.add_argument("--pretrain-steps", type=int, default=500, help="chinese-sentiment: pretraining steps")
    p.add_argument("--general-steps", type=int, default=320, help="steps of each general distillation")
    p.add_argument("--general-minutes", type=float, default=15, help="each general distillation's time cap")
    p.add_argument("--epochs", type=float, default=3, help="task epochs of the DistilBERT students")
    p.add_argument("--copies", type=int, default=2, help="augmentation: copies per training example")
    p.add_argument(
        "--aug-epochs",
        type=float,
        default=None,
        help="epochs of the distilbert-aug arms (default: --epochs / (copies + 1), the steps of distilbert)",
    )
    p.add_argument("--inter-epochs", type=float, default=1, help="TinyBERT task stage: intermediate epochs")
    p.add_argument("--max-train", type=int, default=None, help="students' training examples (default: all)")
    p.add_argument(
        "--arms",
        nargs="+",
        default=list(DEFAULT_ARMS),
        choices=list(ARMS),
        help="students to train (default: " + ", ".join(DEFAULT_ARMS) + ")",
    )
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build = wiki_teacher if args.task == "wiki-topics" else chinese_teacher
    teacher, general, augmenter = build(args, out)

    common = ["--teacher", str(teacher), *max_train(args)]
    runs: dict[str, list[Path]] = {k: [] for k in args.arms}
    tinybert_phases = [
        {
            "name": "intermediate",
            "loss": {"attn": 1.0, "hidden": 1.0},
            "train": {"epochs": args.inter_epochs, "lr": 5e-4},
        },
        {"name": "prediction", "loss": {"ce": 1.0}, "train": {"epochs": args.epochs, "lr": 3e-4}},
    ]
    tiny = str(general["tinybert"] / "model") if "tinybert" in general else ""  # built only for its arms
    aug_epochs = args.aug_epochs if args.aug_epochs is not None else args.epochs / (args.copies + 1)
    hard_only = json.dumps([{"name": "finetune", "loss": {"hard": 1.0}}])
    for seed in args.seeds:
        s = ["--train.seed", str(seed)]
        # Every augmented arm of a seed reads the same copies, made once (bertzoo.train.augment_cache).
        augment = ["--augment.model", str(augmenter), "--augment.copies", str(args.copies), "--augment.seed",
                   str(seed), "--augment.cache", str(out / f"augmented-seed{seed}")]  # fmt: skip
        augmented = ["configs/distill/distilbert-wiki-topics.yaml", "--train.epochs", str(aug_epochs), *augment]
        plans = {
            "distilbert": ["configs/distill/distilbert-wiki-topics.yaml", "--train.epochs", str(args.epochs)],
            "distilbert-nokd": ["configs/distill/distilbert-wiki-topics.yaml", "--train.epochs", str(args.epochs),
                                "--phases", hard_only],
            "distilbert-aug": augmented,
            "distilbert-aug-nokd": [*augmented, "--phases", hard_only],
            "tinybert": ["configs/distill/tinybert-wiki-topics.yaml",
                         "--student.model", tiny, *augment, "--phases", json.dumps(tinybert_phases)],
            "tinybert-nokd": ["configs/distill/tinybert-wiki-topics.yaml", "--student.model",
                              tiny, "--augment.copies", "0",
                              "--phases", json.dumps([{"name": "finetune", "loss": {"hard": 1.0},
                                                       "train": {"epochs": args.epochs, "lr": 3e-4}}])],
        }  # fmt: skip
        for name in args.arms:
            plan = plans[name]
            directory = out / f"{name}-seed{seed}"
            if not done(directory):
                run(["distill", *plan, *common, *s, "--train.output_dir", str(directory)])
            runs[name].append(directory)

    def test_acc(directory: Path, who: str) -> float:
        return json.loads((directory / "report.json").read_text())[f"{who}_test"]["accuracy"]

    teacher_acc = test_acc(next(iter(runs.values()))[0], "teacher")  # every run's report scores its teacher
    result: dict = {"task": args.task, "teacher_test_accuracy": teacher_acc, "seeds": args.seeds, "students": {}}
    print(f"\nteacher ({teacher}): test accuracy {teacher_acc:.4f}")
    print(f"{'student':<18} {'test acc (mean ± sd)':>22} {'% of teacher':>13}  per seed")
    for name, dirs in runs.items():
        accs = [test_acc(d, "student") for d in dirs]
        mean = statistics.mean(accs)
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        result["students"][name] = {"test_accuracy": mean, "test_accuracy_sd": sd, "per_seed": accs,
                                    "of_teacher": mean / teacher_acc}  # fmt: skip
        print(f"{name:<18} {mean:>14.4f} ± {sd:.4f} {100 * mean / teacher_acc:>12.1f}%  {accs}")
    for kind in ("distilbert", "tinybert", "distilbert-aug"):
        if kind in runs and f"{kind}-nokd" in runs:
            gap = result["students"][kind]["test_accuracy"] - result["students"][f"{kind}-nokd"]["test_accuracy"]
            result[f"{kind}_distillation_gain"] = gap
            print(f"{kind}: distillation gain over the same student without a teacher: {gap:+.4f}")

    # the benchmark's headline ratio is its first student's: the 3-layer one when it was trained
    students = [str(runs[k][0] / "model") for k in ("distilbert", "tinybert") if k in runs]
    if students:
        result.update(speed(teacher, students, args.teacher_len))
    (out / "study.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
