"""XLNet permutation-LM training step: bertzoo's PermutationLM against transformers' XLNetLMHeadModel, same
weights, same batches; plus a Transformer-XL segment step with memory (bertzoo alone).

XLNet: an XLNet-mini (4 layers, 256 wide, 4 heads, 8k vocabulary, dropout off) is built in bertzoo and exported
to an XLNetLMHeadModel (bertzoo.hub.export_hf), so both start from identical weights. Batches of full-length
blocks ([CLS] text [SEP]) come from bertzoo's PermutationLMCollator (spans of 1-5 tokens, about 1 in 6
predicted, perm_mask + target_mapping of a random factorisation order) and are fed to both: the two streams,
partial prediction, LM head on the targets only. Before any timing, the fp32 loss of the first batch must agree
to 1e-4 (the run stops otherwise). Then each step is forward + backward + AdamW, one step of each side in turn
(the order alternates from step to step, so load from other processes hits both alike); after warm-up, the
median step time of each side gives steps/s and tokens/s (every token of the block is an input). The headline
`ratio` is bertzoo's tokens/s over transformers'. Beside it (benchmarks/flops.py): each side's counted FLOPs per
step (on the first warm-up step), GFLOP/s and MFU against the peak matmul rate measured in the same run at the same
precision, the MFU of a plain GEMM of the step's largest shape (batch x length, hidden, intermediate) and whether
the goal is met.

Transformer-XL (transformers 5 has none, so bertzoo alone here; benchmarks/transfo_xl_throughput.py compares it
with transformers 4.57's TransfoXLLMHeadModel under .venv-tfxl): a transfo-xl-mini (8k vocabulary) RecurrentLM
reads blocks of --xl-length tokens in segments of --segment tokens, each attending to the detached memory of the
previous one (mem_len = segment), and the same model with memory=False (each segment on its own): the
difference is the cost of the memory. Steps of the two alternate as above.

Full run: XLNet batch 16 x 128, Transformer-XL batch 16 x 256 in segments of 64, 10 timed steps after 2
warm-up; --quick: batch 8 for both, 4 timed steps after 1 warm-up (under a minute). --threads sets
torch's thread count. --precision auto resolves to bf16 only where the device runs it natively and faster
(`bertzoo.precision`), else fp32; both sides run under the same autocast. --device cpu (default) or cuda. Last
line: JSON with `ratio`.

    python benchmarks/xlnet_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

if str(Path(__file__).parent) not in sys.path:  # tests load this file by path; timing.py lies beside it
    sys.path.insert(0, str(Path(__file__).parent))
from flops import counted_flops, utilisation_from  # noqa: E402
from profiling import add_profile_arg, profile_sides  # noqa: E402
from timing import autocast, device_arg, resolve_device, sync, training_adamw  # noqa: E402

from bertzoo.batch import Batch  # noqa: E402
from bertzoo.data.pretraining.collate_plm import PermutationLMCollator  # noqa: E402
from bertzoo.data.tokens.tokenizer import SpecialIds  # noqa: E402
from bertzoo.engine.optim import adamw  # noqa: E402
from bertzoo.hub import export_hf  # noqa: E402
from bertzoo.models.transfo_xl import TransfoXL  # noqa: E402
from bertzoo.objectives.recurrent_lm import RecurrentLM  # noqa: E402
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision  # noqa: E402
from bertzoo.variants import transfo_xl, xlnet  # noqa: E402

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
FIRST_ORDINARY = 5  # ids below are the special tokens above


def blocks(n: int, batch: int, length: int, vocab: int, seed: int = 0) -> list[list[dict]]:
    """n lists of `batch` examples: full-length blocks [CLS] text [SEP] of random ordinary ids, each with the
    distinct `index` that keys its permutation (XLNet's pretraining packs running text the same way)."""
    r = np.random.default_rng(seed)
    out = []
    for i in range(n):
        rows = []
        for j in range(batch):
            body = r.integers(FIRST_ORDINARY, vocab, length - 2).tolist()
            rows.append({"input_ids": [SPECIAL.cls, *body, SPECIAL.sep], "index": i * batch + j})
        out.append(rows)
    return out


def warm_then_interleave(
    fns: dict[str, Callable[[int], object]],
    warmup: int,
    steps: int,
    device: torch.device,
    count: Callable[[Callable[[], object]], float] | None = None,
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds of each timed step of each side, and the FLOPs `count` finds in each side's first warm-up step
    (none without `count`). fn(i) runs step i (its batch i): first `warmup` untimed steps of each, then one step
    of each in turn, the order alternating from step to step (load hits both alike); each timing is synchronised
    with the device."""
    flops: dict[str, float] = {}
    for i in range(warmup):
        for name, fn in fns.items():
            if i == 0 and count is not None:
                flops[name] = count(partial(fn, 0))
            else:
                fn(i)
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for i in range(warmup, warmup + steps):
        for name, fn in order[:: 1 if i % 2 == 0 else -1]:
            sync(device)
            t = time.perf_counter()
            fn(i)
            sync(device)
            times[name].append(time.perf_counter() - t)
    return times, flops


def xlnet_row(args: argparse.Namespace, transformers, device: torch.device, amp: torch.dtype | None) -> dict:
    """The XLNet training step of both sides: the fp32 loss check, then the interleaved timing."""
    torch.manual_seed(0)
    spec = {"preset": args.preset, "vocab_size": args.vocab, "dropout": 0.0, "attention_dropout": 0.0}
    ours = xlnet.build(xlnet.model_config(spec))
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, tmp)
        ref = transformers.XLNetLMHeadModel.from_pretrained(tmp)
    ours.to(device).train(), ref.to(device).train()
    collate = PermutationLMCollator(SPECIAL, vocab_size=args.vocab, seed=0, pad_to_multiple_of=1)
    rows = blocks(args.warmup + args.steps, args.batch, args.length, args.vocab)
    data = [collate(r).to(device) for r in rows]

    def hf_loss(b: Batch) -> torch.Tensor:
        return ref(
            input_ids=b.input_ids,
            attention_mask=b.attention_mask,
            token_type_ids=b.token_type_ids,
            perm_mask=b.extra["perm_mask"],
            target_mapping=b.extra["target_mapping"],
            labels=b.labels,
        ).loss

    # Same weights, same numbers: the fp32 loss of one batch, before anything is timed or trained.
    with torch.no_grad():
        check = {"bertzoo": float(ours(data[0]).loss), "transformers": float(hf_loss(data[0]))}
    loss_diff = abs(check["bertzoo"] - check["transformers"])
    loss_ok = loss_diff <= 1e-4
    print(
        f"loss check (fp32): bertzoo {check['bertzoo']:.6f}  transformers {check['transformers']:.6f}  "
        f"|diff| {loss_diff:.1e}  {'ok' if loss_ok else 'FAILED'}"
    )
    if not loss_ok:
        sys.exit(f"the two models disagree (loss |diff| {loss_diff:.1e} > 1e-4): the comparison would be meaningless")

    opt = training_adamw(ours, ref, lr=1e-4)

    def step(name: str, loss_of: Callable[[Batch], torch.Tensor]) -> Callable[[int], None]:
        def run(i: int) -> None:
            with autocast(device, amp):
                loss = loss_of(data[i])
            loss.backward()
            opt[name].step()
            opt[name].zero_grad(set_to_none=True)

        return run

    steps = {"bertzoo": step("bertzoo", lambda b: ours(b).loss), "transformers": step("transformers", hf_loss)}
    times, flops = warm_then_interleave(
        steps, args.warmup, args.steps, device, lambda fn: counted_flops(fn, device, amp)
    )
    median = {k: statistics.median(v) for k, v in times.items()}
    cfg = ours.config
    shares = profile_sides({k: lambda fn=fn: fn(0) for k, fn in steps.items()}, device, amp) if args.profile else {}
    return {
        "flops": flops,
        "seconds_per_step": median,
        "largest_gemm": (args.batch * args.length, cfg.hidden_size, cfg.intermediate_size),
        "loss_diff": loss_diff,
        "loss_check": loss_ok,
        "targets_per_row": statistics.mean(int((b.labels >= 0).sum()) for b in data) / args.batch,
        "steps_per_s": {k: 1 / v for k, v in median.items()},
        "tokens_per_s": {k: args.batch * args.length / v for k, v in median.items()},
        "profile": shares,
    }


def transfo_xl_row(args: argparse.Namespace, device: torch.device, amp: torch.dtype | None) -> dict[str, float]:
    """Tokens/s of a Transformer-XL training step over blocks read in segments, with memory and without."""
    torch.manual_seed(0)
    spec = {"preset": args.xl_preset, "vocab_size": args.vocab, "mem_len": args.segment}
    model = TransfoXL(transfo_xl.model_config({**spec, "dropout": 0.0, "attention_dropout": 0.0})).to(device).train()
    lm = {
        "memory": RecurrentLM(model, segment_len=args.segment, memory=True),
        "no_memory": RecurrentLM(model, segment_len=args.segment, memory=False),
    }
    opt = adamw(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    shape = (args.warmup + args.steps, args.xl_batch, args.xl_length)
    ids = torch.randint(FIRST_ORDINARY, args.vocab, shape, generator=g).to(device)
    data = [Batch(block, torch.ones_like(block)) for block in ids]

    def step(name: str) -> Callable[[int], None]:
        def run(i: int) -> None:
            with autocast(device, amp):
                loss = lm[name](data[i]).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return run

    times, _ = warm_then_interleave({name: step(name) for name in lm}, args.warmup, args.steps, device)
    return {k: args.xl_batch * args.xl_length / statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="xlnet-mini")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=128, help="XLNet block length in tokens")
    ap.add_argument("--steps", type=int, default=10, help="timed steps of each side (after --warmup)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps of each side first (>= 1: FLOPs counted)")
    ap.add_argument("--xl-preset", default="transfo-xl-mini")
    ap.add_argument("--xl-batch", type=int, default=16)
    ap.add_argument("--xl-length", type=int, default=256, help="Transformer-XL block length in tokens")
    ap.add_argument("--segment", type=int, default=64, help="Transformer-XL segment length (= mem_len)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    add_profile_arg(ap)
    args = ap.parse_args(argv)
    if args.warmup < 1:
        ap.error("--warmup must be at least 1: the FLOPs are counted on the first warm-up step")
    if args.quick:
        args.batch, args.steps, args.warmup = 8, 4, 1
        args.xl_batch, args.xl_length = 8, 256
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    try:
        import transformers
    except ImportError:
        sys.exit("needs transformers: pip install 'bertzoo[hf]'")
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" would interleave with the report
    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)

    x = xlnet_row(args, transformers, device, amp)
    sps, tps = x["steps_per_s"], x["tokens_per_s"]
    ratio = tps["bertzoo"] / tps["transformers"]
    print(
        f"{args.preset} (vocab {args.vocab}) on {device}, precision {precision}, CPU {cpu_capability()}, "
        f"threads {torch.get_num_threads()}, torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(
        f"XLNet training step (two streams, partial prediction), batch {args.batch} x {args.length}, "
        f"{x['targets_per_row']:.1f} targets per row, median of {args.steps} steps after {args.warmup} warm-up:"
    )
    print(
        f"  bertzoo {sps['bertzoo']:.2f} steps/s {tps['bertzoo']:,.0f} tokens/s  transformers "
        f"{sps['transformers']:.2f} steps/s {tps['transformers']:,.0f} tokens/s  ratio {ratio:.2f}x"
    )
    usage = utilisation_from(x["flops"], x["seconds_per_step"], largest_gemm=x["largest_gemm"], device=device, amp=amp)
    usage.update(x["profile"])

    xl_tps = transfo_xl_row(args, device, amp)
    print(
        f"Transformer-XL training step ({args.xl_preset}), batch {args.xl_batch} x {args.xl_length} in segments of "
        f"{args.segment}, mem_len {args.segment} (bertzoo alone; transformers 5 has no Transformer-XL, "
        "benchmarks/transfo_xl_throughput.py compares with 4.57's):"
    )
    print(
        f"  with memory {xl_tps['memory']:,.0f} tokens/s  without memory {xl_tps['no_memory']:,.0f} tokens/s  "
        f"(memory costs {xl_tps['no_memory'] / xl_tps['memory']:.2f}x)"
    )

    result = {
        "preset": args.preset,
        "batch": args.batch,
        "length": args.length,
        "device": str(device),
        "precision": precision,
        "cpu_capability": cpu_capability(),
        "threads": torch.get_num_threads(),
        "loss_diff": x["loss_diff"],
        "loss_check": x["loss_check"],
        "bertzoo_steps_per_s": round(sps["bertzoo"], 3),
        "transformers_steps_per_s": round(sps["transformers"], 3),
        "bertzoo_tokens_per_s": round(tps["bertzoo"], 1),
        "transformers_tokens_per_s": round(tps["transformers"], 1),
        **usage,
        "transfo_xl_memory_tokens_per_s": round(xl_tps["memory"], 1),
        "transfo_xl_no_memory_tokens_per_s": round(xl_tps["no_memory"], 1),
        "ratio": round(ratio, 3),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
