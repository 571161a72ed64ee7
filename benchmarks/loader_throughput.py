"""The pretraining data loader alone: does it keep up with the model?

Builds WordPiece shards from the built-in English Wikipedia (train split), then, in one process:

1. bertzoo's masking collator vs transformers' `DataCollatorForLanguageModeling` (15% MLM, 80/10/10)
   on the same NSP examples, batch 32, each fed its own pipeline's form (transformers: torch tensors, as a
   `with_format("torch")` dataset gives them): collation tokens/s for each and the ratio;
2. bertzoo's whole loader (memory-mapped shards -> examples -> collator through a `DataLoader`,
   no workers) for BERT (NSP pairs, token masking), SpanBERT (span masking over whole words) and
   RoBERTa (FULL-SENTENCES packing): tokens/s;
3. a BERT-mini training step on those batches, at --precision (auto, the default: bf16 only where
   the CPU runs it natively and faster, else fp32; see `bertzoo.precision`): tokens/s, so the
   loader's headroom (loader tokens/s over model tokens/s, single process) is printed beside it.

Last line: JSON.

    python benchmarks/loader_throughput.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from bertzoo.config import load_pretrain_config
from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.engine.sampler import ResumableBatchSampler
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.train.pretrain import build_pretraining

FAMILIES = {
    "bert": {"variant": "bert", "model.preset": "bert-mini"},
    "spanbert": {"variant": "spanbert", "model.preset": "spanbert-mini"},
    "roberta": {"variant": "roberta", "model.preset": "roberta-mini", "data.input_format": "full_sentences"},
}


def build(shards: Path, family: str, batch: int):
    overrides = {**FAMILIES[family], "data.shards": str(shards), "data.max_seq_len": 128, "train.batch_size": batch}
    cfg = load_pretrain_config(None, overrides)
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    return objective, dataset, collator, tokenizer


def loader_tokens_per_s(dataset, collator, batch: int, n_batches: int) -> tuple[float, list]:
    """Tokens/s of the whole loader (index sampling, example building from the memory map, masking)."""
    sampler = ResumableBatchSampler(len(dataset), batch, seed=0)
    sampler.set_epoch(0)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collator, num_workers=0)
    batches, tokens = [], 0
    t = time.perf_counter()
    for b in loader:
        batches.append(b)
        tokens += b.num_tokens
        if len(batches) == n_batches:
            break
    return tokens / (time.perf_counter() - t), batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=6000, help="Wikipedia documents to prepare")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--model-steps", type=int, default=5)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto", help="the model step's")
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    args = ap.parse_args()
    if args.quick:
        args.docs, args.batches, args.model_steps = 1500, 60, 2
    precision = resolve_precision(args.precision, torch.device("cpu"))  # the model step runs on the CPU
    amp = autocast_dtype(precision)
    import transformers
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    work = Path(tempfile.mkdtemp(prefix="bertzoo-loader-"))
    docs = list(read_documents(["builtin:wiki-en"]))[: args.docs]
    tok = train_wordpiece(docs, 8000)
    shards = work / "shards"
    prepare_shards(docs, tok, shards, progress=False)
    tok.save(work / "tok")

    # 1. Collation alone, same examples on both sides.
    objective, dataset, collator, _ = build(shards, "bert", args.batch)
    dataset.set_epoch(0)
    examples = [dataset[i] for i in range(min(len(dataset), args.batches * args.batch))]
    groups = [examples[i : i + args.batch] for i in range(0, len(examples) - args.batch + 1, args.batch)]
    hf_tok = BertTokenizerFast.from_pretrained(work / "tok")
    hf_collator = DataCollatorForLanguageModeling(hf_tok, mlm=True, mlm_probability=0.15, return_tensors="pt")
    # Each collator gets its examples in its own pipeline's form: ours numpy rows (from the memory map),
    # transformers' torch tensors, what its Trainer's DataLoader hands it from `dataset.with_format("torch")`.
    hf_groups = [
        [{k: torch.from_numpy(np.asarray(e[k])) for k in ("input_ids", "token_type_ids")} for e in g] for g in groups
    ]
    n_tokens = sum(len(e["input_ids"]) for g in groups for e in g)
    timings = {}
    for name, fn, data in (("bertzoo", collator, groups), ("transformers", hf_collator, hf_groups)):
        fn(data[0])  # warm-up
        t = time.perf_counter()
        for g in data:
            fn(g)
        timings[name] = n_tokens / (time.perf_counter() - t)
    collate_ratio = timings["bertzoo"] / timings["transformers"]
    print(
        f"collation, {len(groups)} batches of {args.batch} NSP examples (transformers {transformers.__version__}): "
        f"bertzoo {timings['bertzoo']:,.0f} tok/s  transformers {timings['transformers']:,.0f} tok/s  "
        f"ratio {collate_ratio:.1f}x"
    )

    # 2. The whole loader, per family.
    loaders = {}
    for family in FAMILIES:
        _, ds, coll, _ = (objective, dataset, collator, None) if family == "bert" else build(shards, family, args.batch)
        rate, batches = loader_tokens_per_s(ds, coll, args.batch, args.batches)
        loaders[family] = rate
        if family == "bert":
            bert_batches = batches
        print(f"loader [{family}]: {rate:,.0f} tok/s over {len(batches)} batches")

    # 3. The model it feeds: BERT-mini, a training step at the resolved precision on the same batches.
    opt = torch.optim.AdamW(objective.parameters(), lr=1e-4, foreach=True)
    objective.train()
    model_tokens, model_time = 0, 0.0
    for i in range(args.model_steps + 1):
        b = bert_batches[i % len(bert_batches)]
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=amp) if amp is not None else contextlib.nullcontext():
            loss = objective(b).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step is a warm-up
            model_time += time.perf_counter() - t
            model_tokens += b.num_tokens
    model_rate = model_tokens / model_time
    headroom = loaders["bert"] / model_rate
    print(
        f"BERT-mini {precision} training step (--precision {args.precision}, CPU {cpu_capability()}): "
        f"{model_rate:,.0f} tok/s -> the single-process BERT loader is "
        f"{headroom:.0f}x faster than the model consumes (threads {torch.get_num_threads()}, docs "
        f"{len(docs)}, {np.mean([len(e['input_ids']) for e in examples]):.0f} tokens per example)"
    )
    print(
        json.dumps(
            {
                "ratio": round(collate_ratio, 2),  # headline: MLM collation speed over transformers'
                "bertzoo_collate_tokens_per_s": round(timings["bertzoo"]),
                "transformers_collate_tokens_per_s": round(timings["transformers"]),
                "collate_ratio": round(collate_ratio, 2),
                **{f"loader_{k}_tokens_per_s": round(v) for k, v in loaders.items()},
                "model_tokens_per_s": round(model_rate),
                "loader_headroom": round(headroom, 1),
                "precision": precision,
                "cpu_capability": cpu_capability(),
            }
        )
    )


if __name__ == "__main__":
    main()
