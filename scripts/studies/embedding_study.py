"""What contrastive fine-tuning buys on the built-in wiki-retrieval task (a Wikipedia short description must find its
article's lead section among all the split's leads), scored on the test split with recall@1/5/10, MRR@10, nDCG@10.

Three comparisons, each fine-tuning run with the same recipe (multiple-negatives ranking, cosine x 20, mean pooling,
batch 32, lr 2e-5, 10% warmup then linear decay, weight decay 0.01, AdamW eps 1e-8, clipping at 1.0, the same fixed
subset of training pairs, one epoch), for every seed:

1. all-MiniLM-L6-v2 as shipped against after bertzoo's fine-tuning (`task: embedding`);
2. the same fine-tuning run by sentence-transformers' own trainer (SentenceTransformerTrainer with
   MultipleNegativesRankingLoss, random batches as bertzoo's here, the same precision), as the anchor: score and
   seconds per optimizer step (steps after the first 5, evaluation and loading excluded, both sides in this process);
3. bertzoo's BERT-mini pretrained (--mini) against the same architecture and tokenizer from random init, both
   fine-tuned the same way; each seed runs every rate of --mini-lrs and keeps the one with the best dev nDCG@10
   (a small model takes higher rates than MiniLM, and the two starts need not share the best one).

Prints one JSON line per run, writes --out/results.json and --out/results.md, and ends with one JSON line of means.
Finished runs under --out are reused.

    python scripts/studies/embedding_study.py                 # about 40 minutes on a 2-core CPU
    python scripts/studies/embedding_study.py --quick         # a smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertzoo.config import load_finetune_config
from bertzoo.data.tasks.builtin import load_builtin_task
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder, resolve
from bertzoo.metrics.retrieval import retrieval_metrics
from bertzoo.precision import cpu_capability, resolve_precision
from bertzoo.tasks.embedding import retrieval_corpus
from bertzoo.train.embed import encode
from bertzoo.train.finetune import finetune, training_subset
from bertzoo.train.suite import start_overrides

MINILM = "builtin:all-minilm-l6-v2"
RECIPE = {"batch": 32, "lr": 2e-5, "warmup": 0.1, "weight_decay": 0.01, "query_len": 32, "doc_len": 128}
METRICS = ("recall_at_1", "recall_at_5", "recall_at_10", "mrr_at_10", "ndcg_at_10")


def score(vectors_of, split: str) -> dict[str, float]:
    """Retrieval metrics of `vectors_of(texts, max_length)` (unit vectors) on a wiki-retrieval split: each distinct
    description searches all the split's leads; every lead given with it is relevant."""
    queries, documents, relevant = retrieval_corpus(load_builtin_task("wiki-retrieval", split))
    q = vectors_of(queries, RECIPE["query_len"])
    d = vectors_of(documents, RECIPE["doc_len"])
    return retrieval_metrics(q @ d.T, relevant)


def bertzoo_vectors(model: str):
    directory = resolve(model)
    encoder, tokenizer = load_encoder(directory).eval(), Tokenizer.load(directory)

    def vectors(texts: list[str], max_length: int) -> np.ndarray:
        return encode(encoder, tokenizer, texts, max_length=max_length, pooling="mean", normalize=True, batch_size=128)

    return vectors


def step_seconds(log: list[tuple[int, float]]) -> float:
    """Seconds per optimizer step from (step, elapsed) pairs, leaving out the first 5 steps (warm-up of the
    allocator and threads)."""
    kept = [(s, t) for s, t in log if s > min(5, len(log) - 2)]
    (s0, t0), (s1, t1) = kept[0], kept[-1]
    return (t1 - t0) / (s1 - s0)


def bertzoo_run(model: str, seed: int, run: Path, examples: int, lr: float) -> dict[str, Any]:
    if not (run / "model" / "config.json").is_file():
        overrides = {
            "task": "embedding",
            **start_overrides(model),
            "data.dataset": "builtin:wiki-retrieval",
            "data.max_train_examples": examples,
            "data.max_query_len": RECIPE["query_len"],
            "data.max_seq_len": RECIPE["doc_len"],
            "embedding.loss": "mnrl",
            "train.output_dir": str(run),
            "train.seed": seed,
            "train.epochs": 1,
            "train.batch_size": RECIPE["batch"],
            "train.eval_batch_size": 128,
            "train.lr": lr,
            "train.warmup_ratio": RECIPE["warmup"],
            "train.weight_decay": RECIPE["weight_decay"],
            "train.adam_eps": 1e-8,
            "train.save_every": 0,
            "train.log_every": 1,
            "train.metric_for_best": "ndcg_at_10",
        }
        finetune(load_finetune_config(None, overrides))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    log = [(r["step"], r["elapsed_s"]) for r in rows if "loss" in r and "elapsed_s" in r]
    precision = json.loads((run / "run_config.json").read_text()).get("resolved", {}).get("precision")
    dev = json.loads((run / "report.json").read_text())["dev"]["metrics"]["ndcg_at_10"]
    return {
        "step_s": step_seconds(log),
        "steps": log[-1][0],
        "precision": precision,
        "dev_ndcg_at_10": dev,
        "model": str(run / "model"),
    }


def st_run(seed: int, run: Path, examples: int, bf16: bool) -> dict[str, Any]:
    """The same fine-tuning with sentence-transformers' trainer; the trained model is saved under run/model."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    done = run / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    train = training_subset(load_builtin_task("wiki-retrieval", "train"), examples)
    data = Dataset.from_dict({"anchor": [x["query"] for x in train], "positive": [x["positive"] for x in train]})
    model = SentenceTransformer(str(resolve(MINILM)), device="cpu")
    model.max_seq_length = RECIPE["doc_len"]
    log: list[tuple[int, float]] = []
    start = time.monotonic()

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            log.append((state.global_step, time.monotonic() - start))

    args = SentenceTransformerTrainingArguments(
        output_dir=str(run / "trainer"),
        num_train_epochs=1,
        per_device_train_batch_size=RECIPE["batch"],
        learning_rate=RECIPE["lr"],
        warmup_ratio=RECIPE["warmup"],
        weight_decay=RECIPE["weight_decay"],
        max_grad_norm=1.0,
        seed=seed,
        bf16=bf16,
        use_cpu=True,
        save_strategy="no",
        report_to="none",
        logging_steps=50,
        dataloader_drop_last=False,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, loss=MultipleNegativesRankingLoss(model), callbacks=[Clock()]
    )
    trainer.train()
    model.save(str(run / "model"))

    def vectors(texts: list[str], max_length: int) -> np.ndarray:
        model.max_seq_length = max_length
        return model.encode(texts, batch_size=128, normalize_embeddings=True, convert_to_numpy=True)

    result = {"step_s": step_seconds(log), "steps": log[-1][0], "precision": "bf16" if bf16 else "fp32"}
    result["test"] = score(vectors, "test")
    done.write_text(json.dumps(result))
    return result


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * sd:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/embedding_study")
    ap.add_argument("--examples", type=int, default=4000, help="training pairs (a fixed subset)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument(
        "--mini", default="runs/emb_mini/pretrain4k/final", help="a pretrained bertzoo BERT-mini ('' = skip)"
    )
    ap.add_argument("--mini-lrs", type=float, nargs="+", default=[2e-4, 1e-3])
    ap.add_argument("--arms", nargs="+", default=["minilm", "mini"], choices=["minilm", "mini"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="64 pairs, one seed: a smoke test")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        args.examples, args.seeds = 96, args.seeds[:1]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bf16 = resolve_precision("auto", torch.device("cpu")) == "bf16"
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    if "minilm" in args.arms:
        shipped = out / "shipped.json"
        if not shipped.is_file():
            shipped.write_text(json.dumps(score(bertzoo_vectors(MINILM), "test")))
        record({"arm": "minilm-shipped", "seed": None, "test": json.loads(shipped.read_text())})
    arms = [("minilm-bertzoo", MINILM, [RECIPE["lr"]])] if "minilm" in args.arms else []
    if args.mini and "mini" in args.arms:
        arms += [("mini-pretrained", args.mini, args.mini_lrs), ("mini-random", f"random:{args.mini}", args.mini_lrs)]
    for seed in args.seeds:
        for arm, model, lrs in arms:
            runs = {}
            for lr in lrs:
                run = out / (f"{arm}-seed{seed}" if len(lrs) == 1 else f"{arm}-lr{lr:g}-seed{seed}")
                runs[lr] = bertzoo_run(model, seed, run, args.examples, lr)
            best = max(runs, key=lambda lr: runs[lr]["dev_ndcg_at_10"])  # chosen on dev, reported on test
            result = {**runs[best], "lr": best}
            result["test"] = score(bertzoo_vectors(result.pop("model")), "test")
            record({"arm": arm, "seed": seed, **result})
        if "minilm" in args.arms:
            st = st_run(seed, out / f"st-seed{seed}", args.examples, bf16)
            record({"arm": "minilm-sentence-transformers", "seed": seed, **st})

    names = list(dict.fromkeys(r["arm"] for r in rows))
    summary: dict[str, Any] = {"cpu_capability": cpu_capability(), "examples": args.examples, "seeds": args.seeds}
    lines = [
        f"wiki-retrieval test, {args.examples} training pairs, 1 epoch, seeds {args.seeds}; CPU {cpu_capability()}",
        "",
        "| arm | " + " | ".join(METRICS) + " | s / step |",
        "| --- | " + " | ".join("---" for _ in METRICS) + " | --- |",
    ]
    for name in names:
        group = [r for r in rows if r["arm"] == name]
        cells = [mean_sd([r["test"][m] for r in group]) for m in METRICS]
        steps = [r["step_s"] for r in group if "step_s" in r]
        speed = f"{statistics.mean(steps):.3f}" if steps else ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {speed} |")
        summary[name] = {m: statistics.mean(r["test"][m] for r in group) for m in METRICS}
        if steps:
            summary[name]["step_s"] = statistics.mean(steps)
    (out / "results.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
