"""Contrastive fine-tuning steps of all-MiniLM-L6-v2 on wiki-retrieval pairs: bertzoo's `task: embedding` against
sentence-transformers, side by side in one process on the same batches.

Each step takes 32 (description, lead section) pairs, encodes both sides, computes the multiple-negatives ranking
loss (cosine x 20, in-batch negatives), backpropagates, clips at 1.0 and takes an AdamW step.

* bertzoo: `EmbeddingTask` features (tokenized once) collated per step, `EmbeddingModel`, bertzoo's AdamW;
* sentence-transformers: what its trainer runs per step: the collator tokenizing both columns with the model's
  tokenizer, `MultipleNegativesRankingLoss(model)`, and the trainer's default AdamW kernel.

The token ids of both sides are checked to be identical, and so is the loss of the same weights on the same batch
(without dropout, fp32, at 1e-4).
Steps alternate between the sides, so load from elsewhere on the machine hits both alike. Prints the model FLOPs
per step, the MFU against a matmul peak measured here, and `ratio` = bertzoo steps/s over sentence-transformers';
the last line is JSON.

    python benchmarks/embedding_finetune_throughput.py --quick    # about a minute on 2 CPU cores
    python benchmarks/embedding_finetune_throughput.py --steps 40
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from flops import counted_flops, utilisation_from
from timing import alternate, autocast, device_arg, resolve_device, training_adamw

from bertzoo.config import FinetuneConfig, TaskDataConfig
from bertzoo.data.tasks.builtin import load_builtin_task
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder, resolve
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.tasks.embedding import EmbeddingTask

MINILM = "builtin:all-minilm-l6-v2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="6 timed steps a side")
    ap.add_argument("--steps", type=int, default=20, help="timed steps a side")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--query-len", type=int, default=32)
    ap.add_argument("--doc-len", type=int, default=128)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--threads", type=int, default=None)
    device_arg(ap)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    steps = 6 if args.quick else args.steps
    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)

    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    transformers.logging.set_verbosity_error()
    path = resolve(MINILM)
    cfg = FinetuneConfig(task="embedding", data=TaskDataConfig(max_seq_len=args.doc_len, max_query_len=args.query_len))
    task = EmbeddingTask(cfg, Tokenizer.load(path))
    task.loss = "mnrl"
    ours = task.build(load_encoder(path)).to(device).train()
    theirs = SentenceTransformer(str(path), device=str(device)).train()
    theirs.max_seq_length = args.doc_len
    loss_fn = MultipleNegativesRankingLoss(theirs, scale=20.0)

    pairs = load_builtin_task("wiki-retrieval", "train")[: args.batch * (steps + 2)]
    batches = [pairs[i : i + args.batch] for i in range(0, len(pairs), args.batch)]
    features = [task.featurize(b, "train") for b in batches]

    def st_inputs(batch):
        # What the trainer's collator does per step: tokenize each column (a query is far shorter than its limit).
        q = theirs.preprocess([x["query"] for x in batch])
        d = theirs.preprocess([x["positive"] for x in batch])
        return [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in side.items()} for side in (q, d)]

    # The same token ids on both sides (bertzoo pads to a multiple of 8: compare the real tokens).
    probe = task.collate([features[0][i] for i in range(len(batches[0]))])
    q, d = st_inputs(batches[0])
    for ours_ids, ours_mask, side in (
        (probe.input_ids, probe.attention_mask, q),
        (probe.extra["positive_ids"], probe.extra["positive_mask"], d),
    ):
        for row, (a, m) in enumerate(zip(ours_ids, ours_mask, strict=True)):
            b = side["input_ids"][row][side["attention_mask"][row].bool()]
            assert torch.equal(a[m.bool()].cpu(), b.cpu()), "the two tokenizers disagree"

    optimizers = training_adamw(ours, theirs, lr=2e-5, weight_decay=0.01, eps=1e-8)
    position = {"bertzoo": 0, "sentence-transformers": 0}
    losses: dict[str, list[float]] = {"bertzoo": [], "sentence-transformers": []}

    def step_ours() -> None:
        i = position["bertzoo"] % len(features)
        position["bertzoo"] += 1
        batch = task.collate([features[i][j] for j in range(len(features[i]))]).to(device)
        with autocast(device, amp):
            loss = ours(batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ours.parameters(), 1.0, foreach=True)
        optimizers["bertzoo"].step()
        optimizers["bertzoo"].zero_grad(set_to_none=True)
        losses["bertzoo"].append(loss.detach().item())

    def step_theirs() -> None:
        i = position["sentence-transformers"] % len(batches)
        position["sentence-transformers"] += 1
        inputs = st_inputs(batches[i])
        with autocast(device, amp):
            loss = loss_fn(inputs, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0, foreach=True)
        optimizers["transformers"].step()
        optimizers["transformers"].zero_grad(set_to_none=True)
        losses["sentence-transformers"].append(loss.detach().item())

    # Without dropout, in fp32, the same weights give the same loss on the same batch.
    ours.eval(), theirs.eval()
    with torch.no_grad():
        first = {
            "bertzoo": ours(probe.to(device)).loss.item(),
            "sentence-transformers": loss_fn(st_inputs(batches[0]), None).item(),
        }
    assert abs(first["bertzoo"] - first["sentence-transformers"]) < 1e-4, first
    ours.train(), theirs.train()
    sides = {"bertzoo": step_ours, "sentence-transformers": step_theirs}
    flops = {name: counted_flops(fn, device, amp) for name, fn in sides.items()}  # each side's first step
    times = alternate(sides, steps, device)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    tokens = int(probe.attention_mask.sum() + probe.extra["positive_mask"].sum())
    print(
        f"MiniLM-L6 contrastive step, {args.batch} pairs (query <= {args.query_len}, document <= {args.doc_len} "
        f"tokens, {tokens} real tokens in the first batch), {precision}, {device}, CPU {cpu_capability()}, "
        f"{torch.get_num_threads()} threads"
    )
    for name, s in seconds.items():
        print(f"{name:>22}: {s * 1000:,.0f} ms/step (median of {steps}), loss before training {first[name]:.5f}")
    hidden = ours.config.hidden_size
    util = utilisation_from(
        flops,
        seconds,
        largest_gemm=(args.batch * args.doc_len, hidden, ours.config.intermediate_size),
        device=device,
        amp=amp,
    )
    print(f"ratio (bertzoo steps/s over sentence-transformers'): {util['ratio']:.2f}x")
    result = {
        "benchmark": "embedding_finetune_throughput",
        "precision": precision,
        "cpu_capability": cpu_capability(),
        "threads": torch.get_num_threads(),
        "ms_per_step": {k: round(v * 1000, 1) for k, v in seconds.items()},
        "first_loss": first,
        **util,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
