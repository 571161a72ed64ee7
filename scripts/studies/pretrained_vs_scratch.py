"""Does bertzoo's pretraining help? BERT-mini on wiki-topics, pretrained vs random init, same recipe.

The pretrained model is the one `make demo` writes (runs/demo/pretrain/final: 10 CPU minutes on the
train split of built-in English Wikipedia, whose dev/test articles are exactly wiki-topics' dev/test
articles, so nothing evaluated here was seen in pretraining). The scratch model has the same
architecture and tokenizer with random weights. Both fine-tune with the same recipe and seed.

    python scripts/studies/pretrained_vs_scratch.py --epochs 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertzoo.config import load_finetune_config
from bertzoo.train.finetune import finetune


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pretrained", default="runs/demo/pretrain/final")
    ap.add_argument("--out", default="runs/pretrained-vs-scratch")
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    recipe = {
        "task": "classification",
        "data.dataset": "builtin:wiki-topics",
        "data.max_seq_len": 128,
        "train.epochs": args.epochs,
        "train.batch_size": 32,
        "train.eval_batch_size": 128,
        "train.lr": 5e-4,
        "train.warmup_ratio": 0.1,
        "train.bucket_by_length": True,
        "train.precision": "auto",
        "train.log_every": 50,
        "train.save_every": 100000,
        "train.seed": 42,
        "train.threads": args.threads,
    }
    runs = {
        "pretrained": {"model": args.pretrained},
        "scratch": {"model_config": {"preset": "bert-mini"}, "tokenizer": args.pretrained},
    }
    results = {}
    for name, init in runs.items():
        cfg = load_finetune_config(None, {**recipe, **init, "train.output_dir": str(Path(args.out) / name)})
        summary = finetune(cfg)
        results[name] = {split: summary[split]["accuracy"] for split in ("dev", "test") if split in summary}
        results[name]["macro_f1_test"] = summary.get("test", {}).get("macro_f1")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
