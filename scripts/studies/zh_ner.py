"""A small Chinese BERT trained by bertzoo, then fine-tuned for NER on People's Daily 1998.

1. Corpus: the raw text of the `peoples-daily-ner` TRAIN split (dev/test sentences never seen) plus
   the deduplicated `chinese-sentiment` reviews, one document per line group.
2. Tokenizer: WordPiece (CJK characters are split into single characters by the normalizer).
3. Pretraining: BERT-mini, MLM + NSP, for --minutes on the CPU.
4. Fine-tuning: token classification (BIO over PER/LOC/ORG) with the recipe of
   configs/finetune/peoples-daily-ner-bert-mini-zh.yaml; entity-level precision/recall/F1
   (seqeval-style exact span and type) on dev and test.
5. With --scratch: the same fine-tuning from random weights (same architecture and tokenizer), to
   see what the pretraining is worth.

    python scripts/studies/zh_ner.py --minutes 6 --epochs 3 --scratch
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from bertzoo.cli import main as cli
from bertzoo.config import load_finetune_config
from bertzoo.data.tasks.builtin import load_builtin_task
from bertzoo.data.text.corpus import read_documents
from bertzoo.train.finetune import finetune


def run(args: list[str]) -> None:
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    if cli(args) != 0:
        sys.exit(1)


def prepare_text(out: Path, vocab_size: int, reviews: bool = True) -> Path:
    """Steps 1-2 under `out` (each reused when there): corpus.txt, a WordPiece tokenizer of `vocab_size`
    trained on it and its shards, whose directory is returned. `reviews`: add the sentiment reviews."""
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    if not corpus.is_file():
        lines = ["".join(ex["tokens"]) for ex in load_builtin_task("peoples-daily-ner", "train")]
        # Consecutive sentences of a line stay together: documents of ~8 sentences for NSP.
        docs = ["\n".join(lines[i : i + 8]) for i in range(0, len(lines), 8)]
        docs += list(read_documents(["builtin:chinese-sentiment"])) if reviews else []
        corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    tok, shards = out / "tokenizer", out / "shards"
    if not (tok / "tokenizer.json").is_file():
        run(["tokenizer", "train", "--input", str(corpus), "--out", str(tok), "--vocab-size", str(vocab_size)])
    if not (shards / "meta.json").is_file():
        run(["prepare", "--input", str(corpus), "--tokenizer", str(tok), "--out", str(shards)])
    return shards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/zh")
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=None, help="default: what fits in --minutes at ~1.5 steps/s")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--scratch", action="store_true", help="also fine-tune the same architecture from random init")
    args = ap.parse_args()
    out = Path(args.out)
    shards, pre = prepare_text(out, args.vocab_size), out / "pretrain"
    steps = args.steps or max(50, round(args.minutes * 60 * 1.5))
    if not (pre / "summary.json").is_file():  # written when a pretraining session ends (done or capped)
        run([
            "pretrain", "configs/pretrain/bert-mini.yaml", "--data.shards", str(shards),
            "--train.output_dir", str(pre), "--train.max_minutes", str(args.minutes), "--train.schedule_clock", "steps",
            "--train.max_steps", str(steps), *(["--resume", "auto"] if (pre / "checkpoints").is_dir() else []),
        ])  # fmt: skip
    # Stopped by --minutes before --steps: no final/ directory, the last checkpoint is the model.
    summary = json.loads((pre / "summary.json").read_text())
    model_dir = summary.get("final_dir") or summary["last_checkpoint"]
    config = "configs/finetune/peoples-daily-ner-bert-mini-zh.yaml"
    inits = {"pretrained": {"model": str(model_dir)}}
    if args.scratch:
        inits["scratch"] = {"model": "", "model_config": {"preset": "bert-mini"}, "tokenizer": str(model_dir)}
    scores = {}
    for name, init in inits.items():
        ner = out / f"ner-{name}-{args.epochs:g}ep"
        print(f"\n== fine-tuning ({name}) -> {ner}", flush=True)
        overrides = {**init, "train.output_dir": str(ner), "train.epochs": args.epochs}
        summary = finetune(load_finetune_config(config, overrides))
        scores[name] = {split: {k: round(summary[split][k], 4) for k in ("precision", "recall", "f1")}
                        for split in ("dev", "test") if split in summary}  # fmt: skip
    print(json.dumps(scores, indent=2))


if __name__ == "__main__":
    main()
