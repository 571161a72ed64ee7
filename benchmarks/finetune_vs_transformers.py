"""Fine-tuning all-MiniLM-L6-v2 on wiki-topics: bertzoo vs a plain transformers loop, same recipe.

Both start from the same checkpoint with the same freshly initialised pooler and classifier (ours,
copied into the transformers model), see the same training and test examples truncated to the same
length (the token ids are checked to be identical), and train for the same epochs with the same
batch size, AdamW settings (lr, betas, eps, weight decay with the usual bias/LayerNorm exclusions),
linear warmup/decay schedule and gradient clipping, in one process.

* bertzoo: `ClassificationTask` features and the `Trainer` with length-bucketed batches
  (`train.bucket_by_length`); the classifier's top layer runs for [CLS] only.
* transformers: `AutoModelForSequenceClassification` + `BertTokenizerFast`, batches grouped by length as its
  Trainer's `group_by_length=True` makes them (`LengthGroupedSampler`, reseeded each epoch as the Trainer does) and
  padded to their longest member (dynamic padding, as `DataCollatorWithPadding`), in a plain PyTorch loop.

The two runs advance in lockstep, one optimizer step each in turn (the transformers step runs from
a callback of our Trainer, with its own RNG stream), so load from other processes on the machine
hits both alike. Each side's time is the wall time of its own steps, data loading and collation
included; bertzoo's end-of-run checkpoint and plot are reported separately. Prints both test
accuracies, both training times and the ratio; the last line is JSON.

    python benchmarks/finetune_vs_transformers.py --quick          # a subset, one epoch (about a minute on 2 CPU cores)
    python benchmarks/finetune_vs_transformers.py                   # the full recipe: 8k examples, 3 epochs
    python benchmarks/finetune_vs_transformers.py --precision bf16

--precision auto (the default) resolves to bf16 only where the device runs it natively and faster
(`bertzoo.precision`), else fp32; both sides run at the resolved precision.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import shutil
import tempfile
import time

import torch
from timing import autocast, sync, transformers_trainer_kernel

from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision


def subset(examples: list[dict], n: int | None, seed: int) -> list[dict]:
    if n is None or n >= len(examples):
        return examples
    return random.Random(seed).sample(examples, n)


class RngStream:
    """A private torch RNG stream: `with stream:` swaps it in and out of the global generators."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        with torch.random.fork_rng(devices=[device] if self.cuda else []):
            torch.manual_seed(seed)
            self.state = torch.get_rng_state()
            self.cuda_state = torch.cuda.get_rng_state(device) if self.cuda else None
        self.device = device

    def __enter__(self) -> None:
        self.saved = torch.get_rng_state()
        torch.set_rng_state(self.state)
        if self.cuda:
            self.saved_cuda = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(self.cuda_state, self.device)

    def __exit__(self, *exc) -> None:
        self.state = torch.get_rng_state()
        torch.set_rng_state(self.saved)
        if self.cuda:
            self.cuda_state = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(self.saved_cuda, self.device)


class TransformersRun:
    """The reference: transformers' model and tokenizer in a plain PyTorch loop, one step per call."""

    def __init__(self, cfg, labels: list[str], init: dict[str, torch.Tensor], train_ex, device) -> None:
        import transformers
        from transformers import AutoModelForSequenceClassification, BertTokenizerFast

        from bertzoo.engine.optim import lr_factor, warmup_steps_for
        from bertzoo.train.finetune import resolve_model_path

        path = resolve_model_path(cfg.model)
        self.tok = BertTokenizerFast.from_pretrained(path)
        transformers.logging.set_verbosity_error()  # "some weights were newly initialised" is expected here
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=len(labels), attn_implementation="sdpa"
        ).to(device)
        with torch.no_grad():  # the same starting point: our pooler and classifier initialisation
            self.model.bert.pooler.dense.weight.copy_(init["encoder.pooler.dense.weight"])
            self.model.bert.pooler.dense.bias.copy_(init["encoder.pooler.dense.bias"])
            self.model.classifier.weight.copy_(init["head.classifier.weight"])
            self.model.classifier.bias.copy_(init["head.classifier.bias"])
        self.index = {label: i for i, label in enumerate(labels)}
        self.max_len = cfg.data.max_seq_len
        enc = self.tok([e["text"] for e in train_ex], truncation=True, max_length=self.max_len)
        self.train_ids = enc["input_ids"]
        self.train = [(ids, self.index[e["label"]]) for ids, e in zip(enc["input_ids"], train_ex, strict=True)]
        t = self.t = cfg.train
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if p.ndim <= 1 or name.endswith("bias") or "LayerNorm" in name else decay).append(p)
        impl = transformers_trainer_kernel()  # what its Trainer would build
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=t.lr,
            betas=(t.adam_beta1, t.adam_beta2),
            eps=t.adam_eps,
            **impl,
        )
        self.per_epoch = math.ceil(len(self.train) / t.batch_size)
        self.total = t.max_steps if t.epochs is None else math.ceil(self.per_epoch * t.epochs)
        warmup = warmup_steps_for(t, self.total)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: lr_factor(s, schedule="linear", warmup=warmup, total=self.total)
        )
        self.device = device
        self.stream = RngStream(t.seed + 1, device)
        self.order: list[int] = []
        self.steps = 0
        self.padded = self.real = 0
        self.model.train()

    def collate(self, items):
        width = max(len(ids) for ids, _ in items)
        ids = torch.full((len(items), width), self.tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, (x, _) in enumerate(items):
            ids[i, : len(x)] = torch.tensor(x)
            mask[i, : len(x)] = 1
        return ids, mask, torch.tensor([y for _, y in items])

    def step(self) -> None:
        if self.steps % self.per_epoch == 0:  # an epoch's order: transformers' own length grouping
            from transformers.trainer_pt_utils import LengthGroupedSampler

            epoch = self.steps // self.per_epoch
            generator = torch.Generator().manual_seed(self.t.seed + epoch)
            lengths = [len(ids) for ids, _ in self.train]
            self.order = list(LengthGroupedSampler(self.t.batch_size, lengths=lengths, generator=generator))
        start = (self.steps % self.per_epoch) * self.t.batch_size
        items = [self.train[i] for i in self.order[start : start + self.t.batch_size]]
        with self.stream:
            ids, mask, y = self.collate(items)
            self.padded += ids.numel()
            self.real += int(mask.sum())
            ids, mask, y = ids.to(self.device), mask.to(self.device), y.to(self.device)
            with autocast(self.device, autocast_dtype(self.t.precision)):
                out = self.model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=y)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.clip_norm, foreach=True)
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad(set_to_none=True)
        self.steps += 1

    def accuracy(self, test_ex) -> float:
        self.model.eval()
        enc = self.tok([e["text"] for e in test_ex], truncation=True, max_length=self.max_len)
        gold = torch.tensor([self.index[e["label"]] for e in test_ex])
        correct = 0
        with torch.inference_mode():
            for start in range(0, len(gold), 128):
                ids, mask, _ = self.collate([(x, 0) for x in enc["input_ids"][start : start + 128]])
                with autocast(self.device, autocast_dtype(self.t.precision)):
                    logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                correct += int((logits.argmax(-1).cpu() == gold[start : start + 128]).sum())
        return correct / len(gold)


def parser(description: str) -> argparse.ArgumentParser:
    """The recipe's options (shared with finetune_throughput.py)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="192 training / 192 test examples, one epoch")
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--train-limit", type=int, default=None, help="use this many training examples (random subset)")
    ap.add_argument("--test-limit", type=int, default=None)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None)
    return ap


def lockstep(args: argparse.Namespace, *, max_steps: int | None = None, evaluate: bool = True) -> dict:
    """Run both sides in lockstep (`max_steps` steps, or `args.epochs`); return the measurements."""
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    from bertzoo.config import FinetuneConfig, TaskDataConfig, TrainConfig
    from bertzoo.data.tasks.builtin import load_builtin_task
    from bertzoo.engine.loop import Trainer
    from bertzoo.hub import load_encoder
    from bertzoo.tasks.classification import ClassificationTask
    from bertzoo.train.finetune import build_model, load_tokenizer, resolve_model_path

    device = torch.device(args.device)
    precision = resolve_precision(args.precision, device)  # once, for both sides
    cfg = FinetuneConfig(
        task="classification",
        model="builtin:all-minilm-l6-v2",
        data=TaskDataConfig(dataset="builtin:wiki-topics", max_seq_len=args.max_len),
        train=TrainConfig(
            output_dir=tempfile.mkdtemp(prefix="bertzoo-bench-"),
            seed=args.seed,
            epochs=None if max_steps else args.epochs,
            max_steps=max_steps or 1,
            batch_size=args.batch,
            lr=args.lr,
            warmup_ratio=0.1,
            weight_decay=0.01,
            bucket_by_length=True,
            precision=precision,
            device=str(device),
            log_every=10**9,
            save_every=0,
            keep_last=1,
        ),
    )
    train_ex = subset(load_builtin_task("wiki-topics", "train"), args.train_limit, args.seed)
    test_ex = subset(load_builtin_task("wiki-topics", "test"), args.test_limit, args.seed + 1)
    length = f"{max_steps} steps" if max_steps else f"{args.epochs:g} epoch(s)"
    print(
        f"all-MiniLM-L6-v2 on wiki-topics: {len(train_ex)} train / {len(test_ex)} test examples, "
        f"{length}, batch {args.batch}, lr {args.lr}, max length {args.max_len}, "
        f"precision {precision} (--precision {args.precision}) on {device}, CPU {cpu_capability()} "
        f"(torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads)",
        flush=True,
    )

    # bertzoo: the task's features and model, our Trainer.
    task = ClassificationTask(cfg, load_tokenizer(cfg))  # labels: the built-in dataset's 12 topics
    train_ds, test_ds = task.featurize(train_ex, "train"), task.featurize(test_ex, "test")
    model = build_model(task, load_encoder(resolve_model_path(cfg.model)), cfg)
    init = {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("encoder.stack")}
    theirs = TransformersRun(cfg, task.label_names(), init, train_ex, device)
    same_ids = all(list(f["input_ids"]) == ids for f, ids in zip(train_ds.features, theirs.train_ids, strict=True))

    seconds = {"bertzoo": 0.0, "transformers": 0.0}
    mark: list[float] = []

    def started(trainer: Trainer, epoch: int) -> None:
        if not mark:
            sync(device)
            mark.append(time.perf_counter())

    def lockstep(trainer: Trainer, step: int) -> None:
        sync(device)
        now = time.perf_counter()
        seconds["bertzoo"] += now - mark[-1]
        theirs.step()
        sync(device)
        mark.append(time.perf_counter())
        seconds["transformers"] += mark[-1] - now

    trainer = Trainer(
        model,
        train_ds,
        task.collate,
        cfg.train,
        progress=False,
        drop_last=False,
        callbacks=[lockstep],
        epoch_callbacks=[started],
    )
    assert trainer.cfg.max_steps == theirs.total, (trainer.cfg.max_steps, theirs.total)
    t0 = time.perf_counter()
    summary = trainer.train()
    end_of_run = time.perf_counter() - mark[-1]  # final checkpoint, final/ directory, metrics plot
    total = time.perf_counter() - t0
    shutil.rmtree(cfg.train.output_dir, ignore_errors=True)  # checkpoints of a benchmark are not kept
    ours_acc = task.evaluate(model, test_ex, test_ds).metrics["accuracy"] if evaluate else float("nan")
    theirs_acc = theirs.accuracy(test_ex) if evaluate else float("nan")

    sampler = copy.copy(trainer.sampler)
    sampler.set_epoch(0)
    lengths = train_ds.lengths
    ours_pad = sum(len(b) * -(-int(lengths[b].max()) // 8) * 8 for b in sampler) / int(lengths.sum()) - 1
    theirs_pad = theirs.padded / theirs.real - 1
    ratio = seconds["transformers"] / seconds["bertzoo"]
    diff = 100 * (ours_acc - theirs_acc)
    return {
        "summary": summary, "seconds": seconds, "end_of_run": end_of_run, "total": total,
        "ours_acc": ours_acc, "theirs_acc": theirs_acc, "ours_pad": ours_pad, "theirs_pad": theirs_pad,
        "ratio": ratio, "diff": diff, "same_ids": same_ids, "device": device, "precision": precision,
        "train_examples": len(train_ex), "test_examples": len(test_ex),
        "encoder_config": model.encoder.config, "lengths": lengths,
        "model": model, "task": task, "train_ds": train_ds,
    }  # fmt: skip


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    if args.quick:
        args.epochs = 1
        args.train_limit = args.train_limit or 192
        args.test_limit = args.test_limit or 192
    r = lockstep(args)
    seconds, end_of_run, ours_acc, theirs_acc = r["seconds"], r["end_of_run"], r["ours_acc"], r["theirs_acc"]
    ratio, diff, ours_pad, theirs_pad, same_ids = r["ratio"], r["diff"], r["ours_pad"], r["theirs_pad"], r["same_ids"]
    print(f"bertzoo:      test accuracy {ours_acc:.4f}  train {seconds['bertzoo']:.1f} s (+{end_of_run:.1f} s saving)")
    print(f"transformers: test accuracy {theirs_acc:.4f}  train {seconds['transformers']:.1f} s")
    print(
        f"speedup {ratio:.2f}x (padding {100 * ours_pad:.1f}% vs {100 * theirs_pad:.1f}%), "
        f"accuracy difference {diff:+.2f} points, identical token ids: {same_ids}"
    )
    result = {
        "benchmark": "finetune_vs_transformers",
        "quick": args.quick,
        "device": str(r["device"]),
        "precision": r["precision"],
        "cpu_capability": cpu_capability(),
        "threads": torch.get_num_threads(),
        "train_examples": r["train_examples"],
        "test_examples": r["test_examples"],
        "epochs": args.epochs,
        "batch_size": args.batch,
        "lr": args.lr,
        "max_len": args.max_len,
        "steps": r["summary"]["steps"],
        "bertzoo_accuracy": round(ours_acc, 4),
        "transformers_accuracy": round(theirs_acc, 4),
        "accuracy_diff_points": round(diff, 2),
        "bertzoo_train_s": round(seconds["bertzoo"], 2),
        "transformers_train_s": round(seconds["transformers"], 2),
        "ratio": round(ratio, 3),  # headline: bertzoo's training speed over transformers'
        "bertzoo_end_of_run_s": round(end_of_run, 2),
        "bertzoo_padding": round(ours_pad, 4),
        "transformers_padding": round(theirs_pad, 4),
        "identical_token_ids": same_ids,
        "total_s": round(r["total"], 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
