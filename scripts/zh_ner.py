"""A small Chinese BERT trained by bertzoo, then fine-tuned for NER on People's Daily 1998.

1. Corpus: the raw text of the `peoples-daily-ner` TRAIN split (dev/test sentences never seen) plus
   the deduplicated `chinese-sentiment` reviews, one document per line group.
2. Tokenizer: WordPiece (CJK characters are split into single characters by the normalizer).
3. Pretraining: BERT-mini, MLM + NSP, for --minutes on the CPU.
4. Fine-tuning: token classification (BIO over PER/LOC/ORG) with the recipe below; entity-level
   precision/recall/F1 (seqeval-style exact span and type) on dev and test.

    python scripts/zh_ner.py --minutes 6 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from bertzoo.cli import main as cli
from bertzoo.data.builtin import load_builtin_task
from bertzoo.data.corpus import read_documents


def run(args: list[str]) -> None:
    print(f"\n$ bertzoo {shlex.join(args)}", flush=True)
    if cli(args) != 0:
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/zh")
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=None, help="default: what fits in --minutes at ~1.5 steps/s")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--vocab-size", type=int, default=8000)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    if not corpus.is_file():
        lines = ["".join(ex["tokens"]) for ex in load_builtin_task("peoples-daily-ner", "train")]
        reviews = list(read_documents(["builtin:chinese-sentiment"]))
        # Consecutive sentences of a line stay together: documents of ~8 sentences for NSP.
        docs = ["\n".join(lines[i : i + 8]) for i in range(0, len(lines), 8)] + reviews
        corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    tok, shards, pre = out / "tokenizer", out / "shards", out / "pretrain"
    if not (tok / "tokenizer.json").is_file():
        run(["tokenizer", "train", "--input", str(corpus), "--out", str(tok), "--vocab-size", str(args.vocab_size)])
    if not (shards / "meta.json").is_file():
        run(["prepare", "--input", str(corpus), "--tokenizer", str(tok), "--out", str(shards)])
    steps = args.steps or max(50, round(args.minutes * 60 * 1.5))
    if not (pre / "final" / "model.safetensors").is_file():
        run([
            "pretrain", "configs/pretrain/bert-mini.yaml", "--data.shards", str(shards),
            "--train.output_dir", str(pre), "--train.max_minutes", str(args.minutes),
            "--train.max_steps", str(steps), *(["--resume", "auto"] if (pre / "checkpoints").is_dir() else []),
        ])  # fmt: skip
    ner = out / "ner"
    run([
        "finetune", "configs/finetune/peoples-daily-ner-bert-mini-zh.yaml", "--model", str(pre / "final"),
        "--train.output_dir", str(ner), f"--train.epochs={args.epochs}",
    ])  # fmt: skip
    report = json.loads((ner / "report.json").read_text())
    for split in ("dev", "test"):
        m = report.get(split, {}).get("metrics", {})
        print(
            f"{split}: entity precision {m.get('precision', 0):.3f} recall {m.get('recall', 0):.3f} "
            f"F1 {m.get('f1', 0):.3f}"
        )


if __name__ == "__main__":
    main()
