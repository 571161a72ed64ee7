"""Pretraining objectives compared at equal budget: BERT, RoBERTa, ALBERT, SpanBERT, ERNIE-style, ELECTRA.

Each family's mini model (4 layers, 256 hidden; ALBERT shares its layers, ELECTRA adds a 1/4-width
generator) pretrains on the same corpus (the train split of built-in English Wikipedia) with the
same number of sequences (steps x batch x max length) and the same wall-clock cap, using its own
tokenizer kind (WordPiece; byte-level BPE for RoBERTa; Unigram for ALBERT), all trained here with
the same vocabulary size. Each is then fine-tuned with one recipe on `wiki-topics` (12 classes) and
scored on the dev split. The ERNIE-style model is ERNIE 1.0's masking schedule on English:
token-level, then whole-word masking (there is no English phrase/entity lexicon in the package).

Pretraining and fine-tuning results already under --out are reused (so a second invocation with
`--ft-pooling mean` only fine-tunes again, reading the mean of the last layer instead of [CLS]).
Writes results.json / results.md under --out and, with --docs, the table into docs/variants.md
between the results markers of that pooling. Last line: JSON.

    python benchmarks/objectives_small.py --quick          # two families, a few steps: a smoke run
    python benchmarks/objectives_small.py --steps 1000 --minutes 10 --docs   # ~80 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bertzoo.config import load_finetune_config, load_pretrain_config
from bertzoo.data.corpus import read_documents
from bertzoo.data.shards import prepare_shards
from bertzoo.data.tokenizer import train_bpe, train_unigram, train_wordpiece
from bertzoo.train.finetune import finetune
from bertzoo.train.pretrain import pretrain

FAMILIES: dict[str, dict[str, Any]] = {
    "bert": {"tokenizer": "wordpiece", "overrides": {"variant": "bert", "model.preset": "bert-mini"}},
    "roberta": {"tokenizer": "bpe", "overrides": {"variant": "roberta", "model.preset": "roberta-mini",
                                                 "data.input_format": "full_sentences", "train.adam_beta2": 0.98}},
    "albert": {"tokenizer": "unigram", "overrides": {"variant": "albert", "model.preset": "albert-mini",
                                                    "data.input_format": "sentence_order"}},
    "spanbert": {"tokenizer": "wordpiece", "overrides": {"variant": "spanbert", "model.preset": "spanbert-mini"}},
    "ernie": {"tokenizer": "wordpiece", "overrides": {
        "variant": "ernie", "model.preset": "ernie-mini",
        "objective_args": {"stages": [{"strategy": "token", "start": 0.0}, {"strategy": "whole_word", "start": 0.5}]},
    }},
    "electra": {"tokenizer": "wordpiece", "overrides": {"variant": "electra", "model.preset": "electra-mini"}},
}  # fmt: skip

TRAINERS = {"wordpiece": train_wordpiece, "bpe": train_bpe, "unigram": train_unigram}


def markers(pooling: str) -> tuple[str, str]:
    """Where the table for one fine-tuning pooling goes in docs/variants.md."""
    name = "results" if pooling == "cls" else f"results-{pooling}"
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def main_loss(metrics: dict[str, float]) -> tuple[str, float]:
    """The objective's own training loss as logged at the end (MLM part where there is one)."""
    for key in ("mlm_loss", "loss"):
        if key in metrics:
            return key, float(metrics[key])
    return "loss", float("nan")


def run_family(name: str, spec: dict[str, Any], shards: Path, out: Path, args) -> dict[str, Any]:
    pre_dir = out / name / "pretrain"
    overrides = {
        **spec["overrides"],
        "data.shards": str(shards),
        "data.max_seq_len": 128,
        "train.output_dir": str(pre_dir),
        "train.batch_size": 32,
        "train.max_steps": args.steps,
        "train.max_minutes": args.minutes,
        "train.lr": 1e-3,
        "train.warmup_ratio": 0.05,
        "train.precision": args.precision,
        "train.log_every": max(1, args.steps // 10),
        "train.save_every": args.steps,
        "train.keep_last": 1,
        "train.seed": 0,
        "train.threads": args.threads,
    }
    done = pre_dir / "summary.json"
    if done.is_file():  # pretrained by an earlier invocation (e.g. one interrupted later): reuse it
        summary = json.loads(done.read_text())
        pre_seconds = float(summary["elapsed_s"])
    else:
        t = time.perf_counter()
        summary = pretrain(load_pretrain_config(None, overrides))
        pre_seconds = time.perf_counter() - t
    # A run stopped by the wall-clock cap has no final/ directory: its last checkpoint is the model.
    model_dir = summary.get("final_dir") or summary["last_checkpoint"]
    loss_name, loss = main_loss(summary.get("final_metrics") or {})
    ft_dir = out / name / ("finetune" if args.ft_pooling == "cls" else f"finetune-{args.ft_pooling}")
    ft = {
        "task": "classification",
        "model": str(model_dir),
        "data.dataset": "builtin:wiki-topics",
        "data.max_seq_len": 128,
        "train.output_dir": str(ft_dir),
        "train.epochs": args.ft_epochs or None,  # epochs, when set, decide the number of steps
        "train.batch_size": 32,
        "train.eval_batch_size": 128,
        "train.lr": args.ft_lr,
        "train.warmup_ratio": 0.1,
        "train.bucket_by_length": True,
        "train.precision": args.precision,
        "train.log_every": 50,
        "train.save_every": 100000,
        "train.seed": 0,
        "train.threads": args.threads,
        "technique.pooling": args.ft_pooling,
    }
    if args.ft_limit:
        ft["train.max_steps"] = args.ft_limit
    if (ft_dir / "summary.json").is_file():
        result = json.loads((ft_dir / "summary.json").read_text())
        ft_seconds = float(result["elapsed_s"])
    else:
        t = time.perf_counter()
        result = finetune(load_finetune_config(None, ft))
        ft_seconds = time.perf_counter() - t
    dev = result.get("dev") or {}
    from bertzoo.hub import load_encoder

    params = load_encoder(model_dir).num_parameters()
    row = {
        "family": name,
        "encoder_params": params,
        "pretrain_steps": summary["steps"],
        "pretrain_tokens": summary["tokens_seen"],
        "pretrain_tokens_per_s": round(summary["tokens_seen"] / max(pre_seconds, 1e-9), 1),
        "pretrain_seconds": round(pre_seconds, 1),
        "pretrain_loss_name": loss_name,
        "pretrain_loss": round(loss, 4),
        "dev_accuracy": round(float(dev.get("accuracy", float("nan"))), 4),
        "finetune_seconds": round(ft_seconds, 1),
        "stop_reason": summary.get("stop_reason"),
    }
    if result.get("test"):
        row["test_accuracy"] = round(float(result["test"].get("accuracy", float("nan"))), 4)
    print(json.dumps(row), flush=True)
    return row


def table(rows: list[dict[str, Any]], args) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on the 2-core CPU: {args.steps} steps x 32 sequences x 128 tokens "
        f"(cap {args.minutes} min), {args.precision}, vocabulary {args.vocab}; fine-tuning {args.ft_epochs} "
        f"epoch(s) on wiki-topics, lr {args.ft_lr:g}, batch 32, sentence vector: "
        f"{'pooled [CLS]' if args.ft_pooling == 'cls' else 'mean of the last layer'}.",
        "",
        "| family | encoder params | pretrain tokens | tokens/s | steps | pretraining loss | dev accuracy | "
        "test accuracy |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['encoder_params'] / 1e6:.2f}M | {r['pretrain_tokens']:,} | "
            f"{r['pretrain_tokens_per_s']:,.0f} | {r['pretrain_steps']} | {r['pretrain_loss_name']} "
            f"{r['pretrain_loss']:.3f} | {r['dev_accuracy']:.3f} | {r.get('test_accuracy', float('nan')):.3f} |"
        )
    return "\n".join(lines)


def write_docs(path: Path, text: str, pooling: str) -> None:
    start, end = markers(pooling)
    doc = path.read_text() if path.is_file() else f"# Variants\n\n{start}\n{end}\n"
    if start not in doc:
        doc += f"\n{start}\n{end}\n"
    head, rest = doc.split(start, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--minutes", type=float, default=3.0, help="wall-clock cap per pretraining run")
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--ft-epochs", type=float, default=2.0)
    ap.add_argument("--ft-lr", type=float, default=5e-4, help="fine-tuning peak learning rate")
    ap.add_argument("--ft-limit", type=int, default=0, help="cap fine-tuning steps when --ft-epochs is 0 (0 = no cap)")
    ap.add_argument("--ft-pooling", default="cls", choices=["cls", "mean"], help="sentence vector for fine-tuning")
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    ap.add_argument("--out", default="runs/objectives_small")
    ap.add_argument("--docs", action="store_true", help="write the table into docs/variants.md")
    ap.add_argument("--quick", action="store_true", help="bert and electra, a few steps: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.families, args.steps, args.minutes, args.vocab = ["bert", "electra"], 10, 1.0, 4000
        args.ft_epochs, args.ft_limit = 0, 10
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = list(read_documents(["builtin:wiki-en"]))
    shard_dirs: dict[str, Path] = {}
    for kind in sorted({FAMILIES[f]["tokenizer"] for f in args.families}):
        shards = out / f"shards-{kind}-{args.vocab}"
        if not (shards / "meta.json").is_file():
            tok = TRAINERS[kind](docs, args.vocab)
            prepare_shards(docs, tok, shards, progress=False, overwrite=True, source="builtin:wiki-en")
        shard_dirs[kind] = shards
    rows = []
    for name in args.families:
        rows.append(run_family(name, FAMILIES[name], shard_dirs[FAMILIES[name]["tokenizer"]], out, args))
    text = table(rows, args)
    suffix = "" if args.ft_pooling == "cls" else f"-{args.ft_pooling}"
    (out / f"results{suffix}.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / f"results{suffix}.md").write_text(text + "\n")
    print(text)
    if args.docs:
        write_docs(Path("docs/variants.md"), text, args.ft_pooling)
    print(
        json.dumps(
            {r["family"]: {"dev_accuracy": r["dev_accuracy"], "tokens_per_s": r["pretrain_tokens_per_s"]} for r in rows}
        )
    )


if __name__ == "__main__":
    main()
