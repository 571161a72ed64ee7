"""Does ERNIE 2.0's continual multi-task pretraining help? An ERNIE 1.0 model continued with the word- and
structure-aware tasks, against the same model continued with its masking alone, at equal steps.

1. Shards: built-in English Wikipedia (train split; wiki-topics' dev articles are the dev split, never seen in
   pretraining) with a *cased* 8k WordPiece (capitalization prediction needs case; the shards keep ids only).
2. Base: ERNIE-mini (configs/pretrain/ernie-mini.yaml's recipe) pretrained with ERNIE 1.0's English schedule (token
   masking, whole-word masking from half-way; there is no English phrase or entity lexicon) for --base-steps, or
   the model given with --init (prepared with the same tokenizer: --shards names its shards).
3. Continued from the base for --steps with each pretraining seed (`train.seed`), two arms that differ only in the
   tasks (both with a 6-row task embedding, so the architecture is one):
   - `ernie2`: `objective_args.tasks`: token and whole-word masking from the start, then capitalization,
     token-document relation, sentence reordering and sentence distance introduced one after another (at 0.2,
     0.4, 0.6, 0.8 of training) and replayed once introduced; masked LM stays on every example;
   - `ernie1`: the same two masking tasks alone.
4. Every continued model, and the base itself, fine-tuned on wiki-topics (2,000 examples by default) with one
   recipe (benchmarks/objectives_small.py's `finetune_dev`) for each fine-tuning seed.

Prints one JSON line per fine-tuning run, writes --out/results.md (the table), --out/ernie2_continual.png (dev
accuracy per arm, mean ± sd; needs matplotlib) and --out/results.json, and ends with one JSON line: dev accuracy per
arm (mean, sd, values) and `gain`, ernie2 minus ernie1 paired by (pretraining seed, fine-tuning seed). Finished
runs under --out are reused.

    python scripts/studies/ernie2_continual.py                      # about 50 min on a 2-core CPU
    python scripts/studies/ernie2_continual.py --quick              # a smoke test: a couple of minutes
    python scripts/studies/ernie2_continual.py --init runs/my-ernie1/final --shards runs/my-shards
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.precision import cpu_capability

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from objectives_small import add_finetune_args, finetune_dev, finetune_tag  # noqa: E402
from recipe_study import pretrain_once  # noqa: E402

CONFIG = "configs/pretrain/ernie-mini.yaml"
VOCAB = 8192
MASKING = [{"strategy": "token", "start": 0.0}, {"strategy": "whole_word", "start": 0.0}]
# Introduced one after another, each replayed once introduced (its task id is its place in the list).
AUX = ["capitalization", "token_document", "sentence_reorder", "sentence_distance"]
ARMS: dict[str, list[dict[str, Any]]] = {
    "ernie2": MASKING + [{"task": task, "start": 0.2 * (i + 1)} for i, task in enumerate(AUX)],
    "ernie1": MASKING,
}
TASK_ROWS = len(ARMS["ernie2"])  # the task embedding of both arms: one architecture
# ERNIE 1.0's English schedule (benchmarks/objectives_small.py's "ERNIE-style"): no English phrase or entity lexicon.
BASE_STAGES = [{"strategy": "token", "start": 0.0}, {"strategy": "whole_word", "start": 0.5}]
# --quick: a smaller model, corpus and budget; every stage still runs.
QUICK_MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-steps", type=int, default=600, help="ERNIE 1.0 pretraining steps of the base")
    ap.add_argument("--steps", type=int, default=600, help="continued pretraining steps of each arm")
    ap.add_argument("--init", default="", help="an ERNIE 1.0 model to continue instead of pretraining the base")
    ap.add_argument("--shards", default="", help="the shards --init was prepared for (cased WordPiece)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=5e-4, help="peak learning rate of the continued runs")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="continued pretraining seeds")
    ap.add_argument("--ft-seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    add_finetune_args(ap, lr=1e-3, examples=2000, length=64)
    ap.add_argument("--docs", type=int, default=0, help="use the first N train documents only (0 = all)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: tiny model, corpus and budget")
    ap.add_argument("--out", default="runs/ernie2_continual")
    args = ap.parse_args(argv)
    if args.quick:
        args.base_steps, args.steps, args.batch_size, args.seq_len = 6, 6, 8, 64
        args.seeds, args.ft_seeds = args.seeds[:1], args.ft_seeds[:1]
        args.ft_examples, args.ft_epochs, args.ft_len = 200, 1.0, 32
        args.docs = args.docs or 300
        args.out = args.out if args.out != "runs/ernie2_continual" else "runs/ernie2_continual-quick"
    if bool(args.init) != bool(args.shards):
        ap.error("--init and --shards go together: the model and the shards prepared with its tokenizer")
    if min(args.base_steps, args.steps) < 1:
        ap.error("--base-steps and --steps must be positive")
    return args


def cased_shards(out: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """Train and dev shards of built-in English Wikipedia with a cased WordPiece (made once under --out)."""
    vocab = 2000 if args.quick else VOCAB
    train, dev = (
        out / f"shards-cased-{vocab}-{args.docs or 'all'}",
        out / f"shards-cased-{vocab}-{args.docs or 'all'}-dev",
    )
    if not (train / "meta.json").is_file():
        docs = list(read_documents(["builtin:wiki-en:train"]))
        docs = docs[: args.docs] if args.docs else docs
        tok = train_wordpiece(docs, vocab, lowercase=False)
        prepare_shards(docs, tok, train, progress=False, overwrite=True, source="builtin:wiki-en:train")
    if not (dev / "meta.json").is_file():
        docs = list(read_documents(["builtin:wiki-en:dev"]))
        docs = docs[: max(50, args.docs // 4)] if args.docs else docs
        tok = Tokenizer.load(train / "tokenizer")
        prepare_shards(docs, tok, dev, progress=False, overwrite=True, source="builtin:wiki-en:dev")
    return train, dev


def common_overrides(args: argparse.Namespace, shards: Path, dev: Path) -> dict[str, Any]:
    """What every pretraining run here shares: shards, English boundaries (WordPiece words), batch, length."""
    out: dict[str, Any] = {
        "data.shards": str(shards),
        "data.eval_shards": str(dev),
        "data.lexicon": "",  # no English lexicon: WordPiece words
        "data.max_seq_len": args.seq_len,
        "train.batch_size": args.batch_size,
        "train.grad_accum": 1,
    }
    if args.quick:
        out.update({f"model.{k}": v for k, v in QUICK_MODEL.items()})
    return out


def base_model(args: argparse.Namespace, out: Path, common: dict[str, Any]) -> str:
    """The ERNIE 1.0 model both arms continue: --init, or ERNIE-mini pretrained here for --base-steps."""
    if args.init:
        return args.init
    overrides = {**common, "objective_args": {"stages": BASE_STAGES}, "train.seed": 0}
    summary = pretrain_once(
        CONFIG, out / "base" / "pretrain", args.base_steps, overrides, evals=2, threads=args.threads
    )
    return summary["final_dir"]


def continued(arm: str, seed: int, base: str, args: argparse.Namespace, out: Path, common: dict[str, Any]) -> dict:
    """One arm continued from `base` for --steps with pretraining seed `seed` (reused when finished)."""
    overrides = {
        **common,
        "init": base,
        "model.task_type_vocab_size": TASK_ROWS,
        "objective_args": {"tasks": ARMS[arm]},
        "train.seed": seed,
        "train.lr": args.lr,
    }
    run = out / f"{arm}-seed{seed}" / "pretrain"
    return pretrain_once(CONFIG, run, args.steps, overrides, evals=2, threads=args.threads, log_every=10)


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def gain(rows: dict[str, dict[str, float]], a: str, b: str) -> tuple[float, float] | None:
    """Mean ± sd of arm `a` minus arm `b` over the (pretraining seed, fine-tuning seed) pairs both have."""
    pairs = sorted(set(rows.get(a, {})) & set(rows.get(b, {})))
    return mean_sd([rows[a][k] - rows[b][k] for k in pairs]) if pairs else None


def table(rows: dict[str, dict[str, float]], meta: dict[str, Any]) -> str:
    """The Markdown table of dev accuracy per arm (mean ± sd over its runs) and the paired gains."""
    lines = [
        f"wiki-topics dev accuracy after continued pretraining ({meta['steps']} steps from an ERNIE 1.0 base of "
        f"{meta['base']}; {meta['ft_examples']} fine-tuning examples; {meta['cpu']} CPU, {meta['date']})",
        "",
        "| arm | dev accuracy | runs |",
        "| --- | ---: | ---: |",
    ]
    for arm, values in rows.items():
        m, sd = mean_sd(list(values.values()))
        lines.append(f"| {arm} | {m:.4f} ± {sd:.4f} | {len(values)} |")
    for a, b in (("ernie2", "ernie1"), ("ernie2", "base"), ("ernie1", "base")):
        g = gain(rows, a, b)
        if g is not None:
            lines.append(f"\n{a} − {b}: {g[0]:+.4f} ± {g[1]:.4f} (paired over seeds)")
    return "\n".join(lines) + "\n"


def plot(rows: dict[str, dict[str, float]], path: Path) -> Path | None:
    """Dev accuracy per arm, mean ± sd, each run a dot; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'bertzoo[plot]'): no picture", flush=True)
        return None
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    for x, values in enumerate(rows.values()):
        m, sd = mean_sd(list(values.values()))
        ax.bar(x, m, yerr=sd, capsize=4, color=("tab:blue", "tab:grey", "tab:olive")[x % 3], alpha=0.8)
        ax.scatter([x] * len(values), list(values.values()), color="black", s=10, zorder=3)
    ax.set_xticks(range(len(rows)), list(rows))
    low = min(v for values in rows.values() for v in values.values())
    ax.set_ylim(max(0.0, low - 0.05), None)
    ax.set_ylabel("wiki-topics dev accuracy")
    ax.set_title("ERNIE 2.0 tasks vs ERNIE 1.0 masking, continued", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(rows: dict[str, dict[str, float]], meta: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write results.md, the picture and results.json; the summary of the last line."""
    out.mkdir(parents=True, exist_ok=True)
    text = table(rows, meta)
    (out / "results.md").write_text(text)
    print("\n" + text, flush=True)
    picture = plot(rows, out / "ernie2_continual.png")
    arms = {}
    for arm, values in rows.items():
        m, sd = mean_sd(list(values.values()))
        arms[arm] = {"mean": round(m, 4), "sd": round(sd, 4), "values": values}
    g = gain(rows, "ernie2", "ernie1")
    result = {
        "dev_accuracy": arms,
        "gain": None if g is None else {"mean": round(g[0], 4), "sd": round(g[1], 4)},
        "picture": str(picture) if picture else None,
        **meta,
    }
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    if args.shards:
        shards, dev = Path(args.shards), Path(args.shards)
    else:
        shards, dev = cased_shards(out, args)
    common = common_overrides(args, shards, dev)
    base = base_model(args, out, common)
    models = {("base", seed): base for seed in args.seeds[:1]}  # the base itself, once: it has no seed of its own
    pretrain = {}
    for seed in args.seeds:
        for arm in ARMS:
            summary = continued(arm, seed, base, args, out, common)
            models[(arm, seed)] = summary["final_dir"]
            pretrain[f"{arm}-seed{seed}"] = {k: summary.get(k) for k in ("steps", "tokens_per_s", "final_metrics")}
    tag = finetune_tag(args)
    rows: dict[str, dict[str, float]] = {"ernie2": {}, "ernie1": {}, "base": {}}
    for (arm, seed), model in models.items():
        for ft_seed in args.ft_seeds:
            name = "base" if arm == "base" else f"{arm}-seed{seed}"
            result = finetune_dev({"model": model}, out / name / f"ft-{tag}-{ft_seed}", ft_seed, args)
            rows[arm][f"{seed}/{ft_seed}"] = result["dev_accuracy"]
            print(json.dumps({"arm": arm, "seed": seed, "ft_seed": ft_seed, **result}), flush=True)
    meta = {
        "steps": args.steps,
        "base": args.init or f"{args.base_steps} steps",
        "ft_examples": args.ft_examples or "all",
        "cpu": cpu_capability(),
        "date": time.strftime("%Y-%m-%d"),
        "pretrain": pretrain,
        "wall_s": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(report(rows, meta, out)))


if __name__ == "__main__":
    main()
