"""Fine-tuning all-MiniLM-L6-v2 on wiki-topics: bertzoo vs a plain transformers loop, same recipe.

Both start from the same checkpoint with the same freshly initialised pooler and classifier (ours,
copied into the transformers model), see the same training and test examples truncated to the same
length, and train for the same epochs with the same batch size, AdamW settings (lr, betas, eps,
weight decay with the usual bias/LayerNorm exclusions), linear warmup/decay schedule and gradient
clipping, in one process.

* bertzoo: `ClassificationTask` features, the `Trainer` with length-bucketed batches
  (`train.bucket_by_length`), no checkpoints during the run (one at the end, as always).
* transformers: `AutoModelForSequenceClassification` + `BertTokenizerFast`, random batches padded
  to their longest member (dynamic padding, as `DataCollatorWithPadding`), a plain PyTorch loop.

Prints both test accuracies, both training wall times and the ratio; the last line is JSON.

    python benchmarks/finetune_vs_transformers.py --quick          # < 1 minute on a laptop CPU
    python benchmarks/finetune_vs_transformers.py                   # the full recipe (3 epochs)
    python benchmarks/finetune_vs_transformers.py --precision bf16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import tempfile
import time
from pathlib import Path

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def subset(examples: list[dict], n: int | None, seed: int) -> list[dict]:
    if n is None or n >= len(examples):
        return examples
    return random.Random(seed).sample(examples, n)


def run_bertzoo(args, cfg, tokenizer, train_ex, test_ex, device) -> dict:
    from bertzoo.hub import load_encoder
    from bertzoo.tasks.classification import ClassificationTask
    from bertzoo.train.finetune import build_model, resolve_model_path
    from bertzoo.train.loop import Trainer

    task = ClassificationTask(cfg, tokenizer)  # the label set comes from the built-in dataset
    train_ds = task.featurize(train_ex, "train")
    test_ds = task.featurize(test_ex, "test")
    model = build_model(task, load_encoder(resolve_model_path(cfg.model)), cfg)
    init = {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("encoder.stack")}
    trainer = Trainer(model, train_ds, task.collate, cfg.train, progress=False, drop_last=False)
    sync(device)
    t0 = time.perf_counter()
    summary = trainer.train()
    sync(device)
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    result = task.evaluate(model, test_ex, test_ds)
    padded = sum(len(b) * int(train_ds.lengths[b].max()) for b in _fresh(trainer.sampler))  # epoch 0's batches
    return {
        "accuracy": result.metrics["accuracy"],
        "train_s": seconds,
        "eval_s": time.perf_counter() - t1,
        "steps": summary["steps"],
        "labels": task.label_names(),
        "init": init,
        "padding": padded / int(train_ds.lengths.sum()) - 1,
        "train_ids": [f["input_ids"] for f in train_ds.features],
    }


def _fresh(sampler):
    """A copy of the sampler at the start of epoch 0 (to measure padding without touching the run)."""
    import copy

    s = copy.copy(sampler)
    s.set_epoch(0)
    return s


def run_transformers(args, cfg, labels, init, train_ex, test_ex, device) -> dict:
    import transformers
    from transformers import AutoModelForSequenceClassification, BertTokenizerFast

    from bertzoo.train.finetune import resolve_model_path
    from bertzoo.train.optim import lr_factor, warmup_steps_for

    path = resolve_model_path(cfg.model)
    tok = BertTokenizerFast.from_pretrained(path)
    transformers.logging.set_verbosity_error()  # "some weights were newly initialised" is expected here
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=len(labels), attn_implementation="sdpa"
    ).to(device)
    # The same starting point: our pooler and classifier initialisation.
    with torch.no_grad():
        model.bert.pooler.dense.weight.copy_(init["encoder.pooler.dense.weight"])
        model.bert.pooler.dense.bias.copy_(init["encoder.pooler.dense.bias"])
        model.classifier.weight.copy_(init["head.classifier.weight"])
        model.classifier.bias.copy_(init["head.classifier.bias"])
    index = {label: i for i, label in enumerate(labels)}
    enc = tok([e["text"] for e in train_ex], truncation=True, max_length=cfg.data.max_seq_len)
    train = [(ids, index[e["label"]]) for ids, e in zip(enc["input_ids"], train_ex, strict=True)]
    t = cfg.train
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    impl = {"fused": True} if device.type == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=t.lr,
        betas=(t.adam_beta1, t.adam_beta2),
        eps=t.adam_eps,
        **impl,
    )
    per_epoch = math.ceil(len(train) / t.batch_size)
    total = per_epoch * int(t.epochs)
    warmup = warmup_steps_for(t, total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, schedule="linear", warmup=warmup, total=total)
    )
    pad = tok.pad_token_id

    def collate(items):
        width = max(len(ids) for ids, _ in items)
        ids = torch.full((len(items), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, (x, _) in enumerate(items):
            ids[i, : len(x)] = torch.tensor(x)
            mask[i, : len(x)] = 1
        return ids, mask, torch.tensor([y for _, y in items])

    torch.manual_seed(t.seed)
    model.train()
    rng = random.Random(t.seed)
    sync(device)
    t0 = time.perf_counter()
    padded = 0
    for _ in range(int(t.epochs)):
        order = list(range(len(train)))
        rng.shuffle(order)
        for start in range(0, len(order), t.batch_size):
            ids, mask, y = collate([train[i] for i in order[start : start + t.batch_size]])
            padded += ids.numel()
            ids, mask, y = ids.to(device), mask.to(device), y.to(device)
            with autocast(device, t.precision):
                out = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=y)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm, foreach=True)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    sync(device)
    seconds = time.perf_counter() - t0
    real = sum(len(ids) for ids, _ in train) * int(t.epochs)

    t1 = time.perf_counter()
    model.eval()
    test_enc = tok([e["text"] for e in test_ex], truncation=True, max_length=cfg.data.max_seq_len)
    gold = [index[e["label"]] for e in test_ex]
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(gold), 128):
            items = [(x, 0) for x in test_enc["input_ids"][start : start + 128]]
            ids, mask, _ = collate(items)
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            correct += int((logits.argmax(-1).cpu() == torch.tensor(gold[start : start + 128])).sum())
    return {
        "accuracy": correct / len(gold),
        "train_s": seconds,
        "eval_s": time.perf_counter() - t1,
        "steps": total,
        "padding": padded / real - 1,
        "train_ids": enc["input_ids"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset and one epoch: under a minute on a CPU")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--train-limit", type=int, default=None, help="use this many training examples")
    ap.add_argument("--test-limit", type=int, default=None)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.quick:
        args.epochs = 1
        args.train_limit = args.train_limit or 640
        args.test_limit = args.test_limit or 320
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    from bertzoo.config import FinetuneConfig, TaskDataConfig, TrainConfig
    from bertzoo.data.builtin import load_builtin_task
    from bertzoo.train.finetune import load_tokenizer

    device = torch.device(args.device)
    out_dir = Path(tempfile.mkdtemp(prefix="bertzoo-bench-"))
    cfg = FinetuneConfig(
        task="classification",
        model="builtin:all-minilm-l6-v2",
        data=TaskDataConfig(dataset="builtin:wiki-topics", max_seq_len=args.max_len),
        train=TrainConfig(
            output_dir=str(out_dir),
            seed=args.seed,
            epochs=args.epochs,
            batch_size=args.batch,
            lr=args.lr,
            warmup_ratio=0.1,
            weight_decay=0.01,
            bucket_by_length=True,
            precision=args.precision,
            device=str(device),
            log_every=10**9,
            save_every=0,
            keep_last=1,
        ),
    )
    train_ex = subset(load_builtin_task("wiki-topics", "train"), args.train_limit, args.seed)
    test_ex = subset(load_builtin_task("wiki-topics", "test"), args.test_limit, args.seed + 1)
    tokenizer = load_tokenizer(cfg)
    print(
        f"all-MiniLM-L6-v2 on wiki-topics: {len(train_ex)} train / {len(test_ex)} test examples, "
        f"{args.epochs} epoch(s), batch {args.batch}, lr {args.lr}, max length {args.max_len}, {args.precision} "
        f"on {device} (torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads)",
        flush=True,
    )
    ours = run_bertzoo(args, cfg, tokenizer, train_ex, test_ex, device)
    print(f"bertzoo:      test accuracy {ours['accuracy']:.4f}  train {ours['train_s']:.1f} s", flush=True)
    theirs = run_transformers(args, cfg, ours["labels"], ours["init"], train_ex, test_ex, device)
    print(f"transformers: test accuracy {theirs['accuracy']:.4f}  train {theirs['train_s']:.1f} s", flush=True)
    same_ids = all(list(a) == list(b) for a, b in zip(ours.pop("train_ids"), theirs.pop("train_ids"), strict=True))
    ratio = theirs["train_s"] / ours["train_s"]
    diff = 100 * (ours["accuracy"] - theirs["accuracy"])
    print(
        f"speedup {ratio:.2f}x (bertzoo padding {100 * ours['padding']:.1f}% vs {100 * theirs['padding']:.1f}%), "
        f"accuracy difference {diff:+.2f} points, identical token ids: {same_ids}"
    )
    result = {
        "benchmark": "finetune_vs_transformers",
        "quick": args.quick,
        "device": str(device),
        "precision": args.precision,
        "threads": torch.get_num_threads(),
        "train_examples": len(train_ex),
        "test_examples": len(test_ex),
        "epochs": args.epochs,
        "batch_size": args.batch,
        "lr": args.lr,
        "max_len": args.max_len,
        "bertzoo_accuracy": round(ours["accuracy"], 4),
        "transformers_accuracy": round(theirs["accuracy"], 4),
        "accuracy_diff_points": round(diff, 2),
        "bertzoo_train_s": round(ours["train_s"], 2),
        "transformers_train_s": round(theirs["train_s"], 2),
        "speedup": round(ratio, 3),
        "bertzoo_padding": round(ours["padding"], 4),
        "transformers_padding": round(theirs["padding"], 4),
        "steps": ours["steps"],
        "identical_token_ids": same_ids,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
