"""Pretraining step throughput: bertzoo MaskedLM vs transformers BertForPreTraining.

Both models get the same configuration, the same initial weights (copied through our converter),
the same batches (full-length sentence pairs, 15% of tokens selected) and the same AdamW settings, in one
process, alternating step by step so that machine noise hits both alike. Each step is forward + backward + AdamW
of the masked-LM and next-sentence losses. Prints, per precision, tokens/s for each side and the ratio, then
(benchmarks/flops.py) each side's counted FLOPs per step, GFLOP/s and MFU against the peak matmul rate measured
in the same run at that precision, the MFU of a plain GEMM of the step's largest shape (tokens x hidden x
intermediate) and whether the goal is met. bertzoo runs its vocabulary projection on the selected tokens only,
transformers on every token, so bertzoo's step counts fewer FLOPs. The last line is JSON: each figure prefixed
by its precision (`fp32_ratio`, `bf16_bertzoo_mfu`, ...) and the headline `ratio` (bertzoo's tokens/s over
transformers' at the first precision measured).

    python benchmarks/pretrain_throughput.py --quick
    python benchmarks/pretrain_throughput.py --preset bert-base --precision bf16
    python benchmarks/pretrain_throughput.py --preset bert-base --batch 256 --seq 128 --accum 8 --compile  # GPU sizes
    python benchmarks/pretrain_throughput.py --preset bert-base --batch 64 --seq 512 --accum 4 --compile

--precision auto (the default) measures bf16 only where the hardware runs it natively and faster
(`bertzoo.precision`), else fp32; the output names the precision used and the CPU kind.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from flops import counted_flops, utilisation_from
from profiling import add_profile_arg, profile_sides
from timing import autocast, device_arg, peak_memory_gib, resolve_device, sync, training_adamw

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.interop.convert import config_to_hf, state_to_hf
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.variants.bert import model_config


def make_batches(n: int, batch: int, seq: int, vocab: int, seed: int = 0) -> list[Batch]:
    """Full-length NSP-style examples with 15% of tokens selected, as the collator produces."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        ids[:, 0] = 2
        ids[:, -1] = 3
        sel = torch.rand(batch, seq, generator=g) < 0.15
        sel[:, 0] = sel[:, -1] = False
        labels = torch.where(sel, ids, torch.full_like(ids, IGNORE_INDEX))
        tt = torch.zeros_like(ids)
        tt[:, seq // 2 :] = 1
        out.append(
            Batch(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                token_type_ids=tt,
                labels=labels,
                next_sentence_label=torch.randint(0, 2, (batch,), generator=g),
            )
        )
    return out


def peak_matmul_flops(dtype: torch.dtype, device: torch.device | str, n: int = 2048, reps: int = 10) -> float:
    """Measured matmul FLOP/s of an n x n product on `device` at `dtype` (the peak the fine-tuning and inference
    benchmarks read their MFU against; the training steps here use benchmarks/flops.py)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="bert-mini")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32, help="sequences per optimizer step (over --accum micro-batches)")
    ap.add_argument(
        "--accum",
        type=int,
        default=1,
        help="gradient accumulation: each step runs --batch / --accum sequences at a time",
    )
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16", "both"], default="auto")
    device_arg(ap, default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true", help="both sides under torch.compile (compiled in the warm-up)")
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    add_profile_arg(ap)
    args = ap.parse_args()
    if args.accum < 1 or args.batch % args.accum:
        sys.exit(f"--batch {args.batch} must be a positive multiple of --accum {args.accum}")
    if args.quick:  # a smoke run: transformers' fp32 BERT-mini step alone takes ~5 s on 2 cores
        args.steps = 3
    device = resolve_device(args.device)
    import transformers
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    cfg = model_config({"preset": args.preset, "dropout": 0.1})
    ours = MaskedLM(Encoder(cfg)).to(device)
    hf = BertForPreTraining(BertConfig(**config_to_hf(cfg), attn_implementation="sdpa")).to(device)
    hf_state = state_to_hf({k: v for k, v in ours.state_dict().items()}, cfg, prefix="bert.")
    hf.load_state_dict(hf_state, strict=False)
    ours.train()
    hf.train()
    # The modules called in the steps: compiled wrappers share the parameters the optimizers update.
    run_ours, run_hf = (torch.compile(ours), torch.compile(hf)) if args.compile else (ours, hf)
    opts = training_adamw(ours, hf, lr=1e-4, weight_decay=0.01, eps=1e-6)
    opt_ours, opt_hf = opts["bertzoo"], opts["transformers"]
    # Each step: --accum micro-batches of --batch / --accum sequences, one optimizer step.
    micro = [b.to(device) for b in make_batches(4 * args.accum, args.batch // args.accum, args.seq, cfg.vocab_size)]
    batches = [micro[i : i + args.accum] for i in range(0, len(micro), args.accum)]

    # `model`: the module called (the FLOP count runs the eager one: the same products, no compiler in the way).
    def step_ours(group: list[Batch], model: torch.nn.Module = run_ours) -> None:
        for b in group:
            (model(b).loss / len(group)).backward()
        opt_ours.step()
        opt_ours.zero_grad(set_to_none=True)

    def step_hf(group: list[Batch], model: torch.nn.Module = run_hf) -> None:
        for b in group:
            out = model(
                input_ids=b.input_ids,
                attention_mask=b.attention_mask,
                token_type_ids=b.token_type_ids,
                labels=b.labels,
                next_sentence_label=b.next_sentence_label,
            )
            (out.loss / len(group)).backward()
        opt_hf.step()
        opt_hf.zero_grad(set_to_none=True)

    # One step of each side on the first batch, through the eager modules: what the FLOP count runs.
    eager = {"bertzoo": lambda: step_ours(batches[0], ours), "transformers": lambda: step_hf(batches[0], hf)}
    specs = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    precisions = [resolve_precision(p, device) for p in specs]
    tokens = args.batch * args.seq
    results: dict[str, float | bool] = {}
    print(
        f"{args.preset} seq {args.seq} batch {args.batch} ({args.accum} x {args.batch // args.accum}) on {device}, "
        f"torch {torch.__version__}, "
        f"transformers {transformers.__version__}, threads {torch.get_num_threads()}"
    )
    print(
        f"precision {'+'.join(precisions)} (--precision {args.precision}), CPU {cpu_capability()}, "
        f"torch.compile {'on' if args.compile else 'off'}"
    )
    for prec in precisions:
        amp = autocast_dtype(prec)  # bertzoo and transformers run under the same autocast
        times = {"bertzoo": 0.0, "transformers": 0.0}
        fns = {"bertzoo": step_ours, "transformers": step_hf}
        if args.compile:  # warm-up: every batch shape compiled before timing
            for fn in fns.values():
                for b in batches:
                    with autocast(device, amp):
                        fn(b)
        else:  # warm-up: one step of each, its FLOPs counted
            flops = {name: counted_flops(fn, device, amp) for name, fn in eager.items()}
        for i in range(args.steps):
            b = batches[i % len(batches)]
            for name in ("bertzoo", "transformers") if i % 2 == 0 else ("transformers", "bertzoo"):
                sync(device)
                t = time.perf_counter()
                with autocast(device, amp):
                    fns[name](b)
                sync(device)
                times[name] += time.perf_counter() - t
        tps = {k: tokens * args.steps / v for k, v in times.items()}
        ratio = tps["bertzoo"] / tps["transformers"]
        print(
            f"[{prec}] bertzoo {tps['bertzoo']:,.0f} tok/s  transformers {tps['transformers']:,.0f} tok/s  "
            f"ratio {ratio:.2f}x"
        )
        if args.compile:  # counted outside the compiler, after the timing
            flops = {name: counted_flops(fn, device, amp) for name, fn in eager.items()}
        usage = utilisation_from(
            flops,
            {k: v / args.steps for k, v in times.items()},
            largest_gemm=(tokens // args.accum, cfg.hidden_size, cfg.intermediate_size),
            device=device,
            amp=amp,
        )
        results[f"{prec}_bertzoo_tokens_per_s"] = round(tps["bertzoo"], 1)
        results[f"{prec}_transformers_tokens_per_s"] = round(tps["transformers"], 1)
        results.update({f"{prec}_{k}": v for k, v in usage.items()})
        results[f"{prec}_ratio"] = round(ratio, 3)
        for name, fn in fns.items():  # one more step of each side, its peak memory measured alone
            with autocast(device, amp):
                peak = peak_memory_gib(lambda fn=fn: fn(batches[0]), device)
            if peak is not None:
                results[f"{prec}_{name}_peak_memory_gib"] = round(peak, 2)
                print(f"[{prec}] {name} peak memory {peak:.2f} GiB")
        if args.profile:  # where each side's step spends its time
            shares = profile_sides({name: lambda fn=fn: fn(batches[0]) for name, fn in fns.items()}, device, amp)
            results.update({f"{prec}_{k}": v for k, v in shares.items()})
    print(
        json.dumps(
            {
                # headline: tokens/s over transformers' at the first precision measured
                "ratio": results[f"{precisions[0]}_ratio"],
                "preset": args.preset,
                "device": str(device),
                "precision": "+".join(precisions),
                "compile": args.compile,
                "batch": args.batch,
                "accum": args.accum,
                "seq": args.seq,
                "cpu_capability": cpu_capability(),
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
