"""From a released checkpoint to a domain: all-MiniLM-L6-v2 fine-tuned as it is, continued on the domain's text,
extended with the domain's vocabulary and continued, against bertzoo's BERT-mini pretrained from scratch.

Arms, each fine-tuned with one recipe per task (fine-tuning seeds `--ft-seeds`; pretraining seeds `--seeds`):

- `a`, MiniLM as released: fine-tuned directly;
- `b`, continued: masked LM on the domain's unlabelled text for `--minutes` of this machine's time
  (configs/pretrain/continue-minilm.yaml: the checkpoint's own tokenizer, a fresh masked-LM head tied to the word
  table, lr 2e-4), then fine-tuned;
- `c`, extended and continued (Chinese): `bertzoo tokenizer extend` adds `--add` tokens of the Chinese text to
  MiniLM's vocabulary (the characters it maps to [UNK] first; MiniLM's uncased WordPiece holds only 244 CJK
  characters), then the same continued pretraining on the same text and minutes, then fine-tuned;
- `d`, BERT-mini from scratch: an 8k WordPiece trained on the same text, configs/pretrain/bert-mini.yaml (the
  shipped CPU recipe) for the same minutes, then fine-tuned.

Domains and tasks:

- `zh`: the train splits of People's Daily 1998 and of the Chinese reviews (so every Chinese arm continues on both
  tasks' unlabelled training text, and `b` and `c` differ only in the vocabulary); tasks `chinese-sentiment`
  (accuracy) and `peoples-daily-ner` (entity F1), `--zh-examples` labelled examples each;
- `en`: the train split of built-in English Wikipedia (wiki-topics' dev articles are never seen); task
  `wiki-topics` with `--en-examples` (500) labelled examples; arms `a` and `b` (and `d` with `--en-scratch`).

Budgets are pretraining steps of 32 sequences of `--seq-len` tokens (`--steps`), the same for every arm, so every
arm reads the same number of tokens (BERT-mini, the smaller model, then spends less CPU time; the wall time of each
run is in `results.json`); `--minutes` sets wall-clock budgets instead (`train.max_minutes`), the same CPU time for
every arm on a quiet machine. Several values give a curve over budget.
Writes `table.md`, `domain_adapt.png` and `results.json` under `--out` and ends with one JSON line. Every stage is
reused when its output exists, so an interrupted study continues.

    python scripts/studies/domain_adapt.py --steps 300 --seq-len 64 --zh-examples 1000 --seeds 0 1 --ft-seeds 0 1
    python scripts/studies/domain_adapt.py --quick     # a smoke run of a few minutes
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from bertzoo.cli import main as cli
from bertzoo.config import load_finetune_config, load_pretrain_config
from bertzoo.precision import cpu_capability
from bertzoo.train.finetune import finetune
from bertzoo.train.pretrain import pretrain

MINILM = "builtin:all-minilm-l6-v2"
CONTINUE = "configs/pretrain/continue-minilm.yaml"
SCRATCH = "configs/pretrain/bert-mini.yaml"
DOMAINS: dict[str, dict[str, Any]] = {
    "zh": {
        "train": ["builtin:peoples-daily:train", "builtin:chinese-sentiment:train"],
        "dev": ["builtin:peoples-daily:dev", "builtin:chinese-sentiment:dev"],
        "tasks": ["chinese-sentiment", "peoples-daily-ner"],
        "arms": ["a", "b", "c", "d"],
        "limit_alphabet": 6000,  # WordPiece keeps this many characters: Chinese needs thousands
    },
    "en": {
        "train": ["builtin:wiki-en:train"],
        "dev": ["builtin:wiki-en:dev"],
        "tasks": ["wiki-topics"],
        "arms": ["a", "b"],
        "limit_alphabet": 1000,
    },
}
# One fine-tuning recipe per task, the same for every arm: (config, overrides, the dev metric it reports).
TASKS: dict[str, tuple[str, dict[str, Any], str]] = {
    "chinese-sentiment": (
        "configs/finetune/chinese-sentiment-zh-minilm.yaml",
        {"data.max_seq_len": 64, "train.epochs": 2, "train.lr": 2e-4, "technique.pooling": "mean"},
        "accuracy",
    ),
    "peoples-daily-ner": (
        "configs/finetune/peoples-daily-ner.yaml",
        {"data.max_seq_len": 128, "train.epochs": 3, "train.lr": 2e-4, "train.early_stopping_patience": 0},
        "f1",
    ),
    "wiki-topics": (
        "configs/finetune/wiki-topics-minilm.yaml",
        {"data.max_seq_len": 128, "train.epochs": 5, "train.lr": 1e-4, "train.early_stopping_patience": 0},
        "accuracy",
    ),
}
ARM_NAMES = {
    "a": "MiniLM as released",
    "b": "MiniLM continued",
    "c": "MiniLM extended + continued",
    "d": "BERT-mini from scratch",
}


def run_cli(args: list[str]) -> None:
    """One `bertzoo` command, echoed; the study stops if it fails."""
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    if cli(args) != 0:
        sys.exit(f"bertzoo {args[0]} failed")


def inputs(corpora: list[str]) -> list[str]:
    return [flag for corpus in corpora for flag in ("--input", corpus)]


def shards(out: Path, name: str, tokenizer: str, corpora: list[str]) -> Path:
    """Shards of `corpora` made with `tokenizer` (reused when there)."""
    directory = out / name
    if not (directory / "meta.json").is_file():
        run_cli(["prepare", *inputs(corpora), "--tokenizer", tokenizer, "--out", str(directory), "--overwrite"])
    return directory


def extended(out: Path, domain: dict[str, Any], add: int) -> Path:
    """MiniLM with `add` tokens of the domain's text added to its vocabulary (`bertzoo tokenizer extend`)."""
    directory = out / f"minilm-extended-{add}"
    if not (directory / "config.json").is_file():
        run_cli(["tokenizer", "extend", MINILM, *inputs(domain["train"]), "--add", str(add), "--out", str(directory)])
    return directory


def own_tokenizer(out: Path, domain: dict[str, Any], vocab: int) -> Path:
    """An 8k WordPiece trained on the domain's text: BERT-mini's own vocabulary."""
    directory = out / f"wordpiece-{vocab}"
    if not (directory / "tokenizer.json").is_file():
        limit = str(domain["limit_alphabet"])
        cmd = ["tokenizer", "train", *inputs(domain["train"]), "--out", str(directory), "--vocab-size", str(vocab)]
        run_cli([*cmd, "--limit-alphabet", limit])
    return directory


def pretrained(config: str, run_dir: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """Pretrain `config` into `run_dir` (reused when it finished there); its summary."""
    done = run_dir / "summary.json"
    if not done.is_file():
        pretrain(load_pretrain_config(config, {**overrides, "train.output_dir": str(run_dir)}))
    return json.loads(done.read_text())


def fine_tuned(task: str, model: str, out: Path, seed: int, examples: int, threads: int | None) -> float:
    """Fine-tune `model` on `task` with the task's recipe (reused when done); the dev metric."""
    config, recipe, metric = TASKS[task]
    report = out / "report.json"
    if not report.is_file():
        overrides = {
            **recipe,
            "model": model,
            "train.output_dir": str(out),
            "train.seed": seed,
            "train.save_every": 100000,
            "train.threads": threads,
            "data.max_train_examples": examples,
        }
        finetune(load_finetune_config(config, overrides))
    return float(json.loads(report.read_text())["dev"]["metrics"][metric])


def budget_of(amount: float, args) -> tuple[dict[str, Any], str]:
    """The pretraining overrides of one budget (steps, or minutes with --minutes) and its name in run paths."""
    if args.minutes:  # the clock ends the run, and the schedule follows it
        return {"train.max_minutes": amount, "train.max_steps": 100000}, f"{amount:g}min"
    return {"train.max_steps": int(amount), "train.max_minutes": None}, f"{int(amount)}steps"


def pretraining_arms(domain_name: str, amount: float, seed: int, args) -> dict[str, tuple[str, dict[str, Any]]]:
    """The model directory each pretrained arm fine-tunes from (after pretraining it), and its summary."""
    domain = DOMAINS[domain_name]
    out = args.out / domain_name
    limit, tag = budget_of(amount, args)
    budget = {
        **limit,
        "train.seed": seed,
        "data.max_seq_len": args.seq_len,
        "train.eval_every": 100000,  # held-out evaluation at the start (continued arms) and at the end
        "train.threads": args.threads,
    }
    arms = {}
    wanted = [a for a in domain["arms"] if a != "a"] + (["d"] if domain_name == "en" and args.en_scratch else [])
    for arm in [a for a in wanted if a in args.arms]:
        run_dir = out / f"{arm}-{tag}-seed{seed}"
        if arm in ("b", "c"):
            init = MINILM if arm == "b" else str(extended(out, domain, args.add))
            name = "minilm" if arm == "b" else f"extended-{args.add}"
            data = {
                "init": init,
                "data.shards": str(shards(out, f"shards-{name}", init, domain["train"])),
                "data.eval_shards": str(shards(out, f"dev-shards-{name}", init, domain["dev"])),
            }
            summary = pretrained(CONTINUE, run_dir, {**budget, **data})
        else:
            tok = str(own_tokenizer(out, domain, args.vocab))
            data = {
                "data.shards": str(shards(out, "shards-own", tok, domain["train"])),
                "data.eval_shards": str(shards(out, "dev-shards-own", tok, domain["dev"])),
            }
            summary = pretrained(SCRATCH, run_dir, {**budget, **data})
        arms[arm] = (str(run_dir / "final"), summary)
    return arms


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def table(results: dict[str, Any]) -> str:
    """The markdown table: one row per (task, arm, budget), dev metric per seed pair, mean ± sd, steps reached."""
    lines = [
        "| task | arm | budget | pretraining steps | dev metric per (pretraining, fine-tuning) seed | mean ± sd |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for row in results["rows"]:
        m, s = mean_sd(row["scores"])
        scores = ", ".join(f"{v:.3f}" for v in row["scores"])
        steps = ", ".join(str(n) for n in row["steps"]) or "—"
        minutes = row["budget"] or "—"
        name = f"{row['arm']}: {ARM_NAMES[row['arm']]}"
        task = f"{row['task']} ({row['metric']})"
        lines.append(f"| {task} | {name} | {minutes} | {steps} | {scores} | {m:.3f} ± {s:.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> Path | None:
    """Each task's dev metric against the pretraining budget, one line per arm (the released model flat)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'bertzoo[plot]'): no picture", flush=True)
        return None
    tasks = list(dict.fromkeys(row["task"] for row in results["rows"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        rows = [r for r in results["rows"] if r["task"] == task]
        for arm in ARM_NAMES:
            points = sorted((r["amount"], *mean_sd(r["scores"])) for r in rows if r["arm"] == arm)
            if not points:
                continue
            if arm == "a":
                ax.axhline(points[0][1], color="grey", linestyle="--", label=ARM_NAMES[arm])
                continue
            xs, ys, sds = zip(*points, strict=True)
            color = {"b": "C0", "c": "C1", "d": "C2"}[arm]  # one colour per arm across the panels
            ax.errorbar(xs, ys, yerr=sds, marker="o", capsize=3, color=color, label=f"{arm}: {ARM_NAMES[arm]}")
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("pretraining " + ("minutes" if results["unit"] == "min" else "steps of 32 sequences"))
        ax.set_ylabel(rows[0]["metric"])
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", default=["zh", "en"], choices=list(DOMAINS))
    ap.add_argument("--steps", nargs="+", type=int, default=[300], help="pretraining budgets (a curve if several)")
    ap.add_argument("--minutes", nargs="+", type=float, default=None, help="wall-clock budgets instead of --steps")
    ap.add_argument("--arms", nargs="+", default=list(ARM_NAMES), choices=list(ARM_NAMES), help="run these arms")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="pretraining seeds")
    ap.add_argument("--ft-seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    ap.add_argument("--seq-len", type=int, default=128, help="pretraining sequence length (every arm)")
    ap.add_argument("--add", type=int, default=3000, help="tokens added to MiniLM's vocabulary (arm c)")
    ap.add_argument("--vocab", type=int, default=8192, help="BERT-mini's own WordPiece size (arm d)")
    ap.add_argument("--zh-examples", type=int, default=2000, help="labelled examples per Chinese task")
    ap.add_argument("--en-examples", type=int, default=500, help="labelled wiki-topics examples")
    ap.add_argument("--en-scratch", action="store_true", help="arm d for English too")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    ap.add_argument("--out", type=Path, default=Path("runs/domain_adapt"))
    ap.add_argument("--quick", action="store_true", help="a smoke run: tiny budgets, one seed, few examples")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.minutes, args.seeds, args.ft_seeds = [4], None, [0], [0]
        args.add, args.zh_examples, args.en_examples = 500, 64, 64
    budgets = args.minutes or args.steps
    unit = "min" if args.minutes else "steps"
    results: dict[str, Any] = {"rows": [], "unit": unit, "cpu": cpu_capability()}
    results["args"] = {k: str(v) for k, v in vars(args).items()}
    for domain_name in args.domains:
        domain = DOMAINS[domain_name]
        examples = args.zh_examples if domain_name == "zh" else args.en_examples
        runs = {(m, s): pretraining_arms(domain_name, m, s, args) for m in budgets for s in args.seeds}
        for task in domain["tasks"]:
            metric = TASKS[task][2]
            ft_out = args.out / domain_name / f"ft-{task}-{examples}"
            if "a" in args.arms:
                released = [
                    fine_tuned(task, MINILM, ft_out / f"a-ft{f}", f, examples, args.threads) for f in args.ft_seeds
                ]
                row = {"task": task, "metric": metric, "arm": "a", "budget": "", "amount": 0}
                results["rows"].append({**row, "steps": [], "seconds": [], "scores": released})
            for amount in budgets:
                tag = budget_of(amount, args)[1]
                for arm in sorted({a for s in args.seeds for a in runs[(amount, s)]}):
                    scores, steps, seconds = [], [], []
                    for seed in args.seeds:
                        model, summary = runs[(amount, seed)][arm]
                        steps.append(int(summary.get("steps", 0)))
                        seconds.append(round(float(summary.get("elapsed_s", 0.0)), 1))
                        for f in args.ft_seeds:
                            run = ft_out / f"{arm}-{tag}-seed{seed}-ft{f}"
                            scores.append(fine_tuned(task, model, run, f, examples, args.threads))
                    row = {"task": task, "metric": metric, "arm": arm, "budget": tag, "amount": amount}
                    results["rows"].append({**row, "steps": steps, "seconds": seconds, "scores": scores})
                    print(json.dumps(results["rows"][-1]), flush=True)
    gains = {}
    for row in results["rows"]:
        base = next((r for r in results["rows"] if r["task"] == row["task"] and r["arm"] == "a"), None)
        if base and row["arm"] != "a":
            key = f"{row['task']}:{row['arm']}-{row['budget']}_over_a"
            gains[key] = round(mean_sd(row["scores"])[0] - mean_sd(base["scores"])[0], 4)
    results["gains"] = gains
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table(results))
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    picture = plot(results, args.out / "domain_adapt.png")
    print(table(results))
    print(json.dumps({"gains": gains, "picture": str(picture) if picture else None, "cpu": results["cpu"]}))
    return results


if __name__ == "__main__":
    main()
