"""A GPT causal-LM training step: bertzoo against transformers' GPT2LMHeadModel, same weights, same batches.

A GPT-mini (GPT-2 layout: 4 layers, 256 wide, 8k vocabulary, dropout off) is built in bertzoo and exported
to a GPT2LMHeadModel (bertzoo.hub.export_hf), so both start from identical weights. Each side runs
forward + backward + AdamW on the same batches of real-length rows (right padding, labels -100 at padding),
under the same autocast; repetitions alternate which side runs first, and the first losses must agree.
--precision auto resolves to bf16 only where the device runs it natively and faster (`bertzoo.precision`), else
fp32. --device cpu (default) or cuda. Prints tokens/s (real tokens) for both and the ratio, and each side's FLOPs per
step, GFLOP/s and MFU (benchmarks/flops.py). Last line: JSON with `ratio`.

    python benchmarks/gpt_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

import torch
from flops import utilisation
from profiling import add_profile_arg, profile_sides
from timing import alternate, autocast, device_arg, resolve_device, training_adamw

from bertzoo.batch import Batch
from bertzoo.hub import export_hf
from bertzoo.objectives.clm import lm_labels
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.variants import gpt


def batches(n: int, batch: int, seq: int, vocab: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids, attention_mask) on `device` with rows of 3/4 to full length, the rest padding, fixed seed."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        lengths = torch.randint(seq * 3 // 4, seq + 1, (batch,), generator=g)
        mask = (torch.arange(seq)[None] < lengths[:, None]).long()
        out.append((ids.masked_fill(mask == 0, 0).to(device), mask.to(device)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--preset", default="gpt-mini")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per repetition")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    add_profile_arg(ap)
    args = ap.parse_args()
    if args.quick:
        args.steps, args.repeats = 4, 2
    device = resolve_device(args.device)
    try:
        import transformers
    except ImportError:
        sys.exit("needs transformers: pip install 'bertzoo[hf]'")

    torch.manual_seed(0)
    spec = {"preset": args.preset, "vocab_size": args.vocab, "dropout": 0.0, "attention_dropout": 0.0}
    ours = gpt.build(gpt.model_config(spec))
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, tmp)
        ref = transformers.GPT2LMHeadModel.from_pretrained(tmp, attn_implementation="sdpa")
    ours.to(device).train(), ref.to(device).train()
    data = batches(args.steps + 1, args.batch, args.seq, args.vocab, device)
    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)
    opt = training_adamw(ours, ref, lr=1e-4)

    # Each step returns its loss as a tensor: reading it as a number would wait for the GPU at every step.
    def step_ours(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with autocast(device, amp):
            loss = ours(Batch(input_ids=ids, attention_mask=mask)).loss
        loss.backward()
        opt["bertzoo"].step()
        opt["bertzoo"].zero_grad(set_to_none=True)
        return loss.detach()

    def step_hf(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with autocast(device, amp):
            loss = ref(input_ids=ids, attention_mask=mask, labels=lm_labels(ids, mask)).loss
        loss.backward()
        opt["transformers"].step()
        opt["transformers"].zero_grad(set_to_none=True)
        return loss.detach()

    # Warm-up, from the same weights.
    first = {"bertzoo": float(step_ours(*data[0])), "transformers": float(step_hf(*data[0]))}
    tokens = sum(int(m.sum()) for _, m in data[1:])
    times = alternate(
        {
            "bertzoo": lambda: [step_ours(*b) for b in data[1:]],
            "transformers": lambda: [step_hf(*b) for b in data[1:]],
        },
        args.repeats,
        device,
    )
    tps = {k: tokens / min(v) for k, v in times.items()}
    ratio = tps["bertzoo"] / tps["transformers"]
    print(
        f"{args.preset} (vocab {args.vocab}) training step, batch {args.batch} x {args.seq} (3/4 to full length), "
        f"on {device}, precision {precision}, CPU {cpu_capability()}, threads {torch.get_num_threads()}, "
        f"transformers {transformers.__version__}"
    )
    print(
        f"bertzoo {tps['bertzoo']:,.0f} tokens/s  transformers {tps['transformers']:,.0f} tokens/s  "
        f"ratio {ratio:.2f}x  first loss {first['bertzoo']:.5f} vs {first['transformers']:.5f}"
    )
    cfg = ours.config
    usage = utilisation(
        {"bertzoo": lambda: step_ours(*data[0]), "transformers": lambda: step_hf(*data[0])},
        {k: min(v) / (len(data) - 1) for k, v in times.items()},
        largest_gemm=(args.batch * args.seq, cfg.hidden_size, cfg.intermediate_size),
        device=device,
        amp=amp,
    )
    if args.profile:  # where each side's step spends its time
        usage.update(
            profile_sides(
                {"bertzoo": lambda: step_ours(*data[0]), "transformers": lambda: step_hf(*data[0])}, device, amp
            )
        )
    print(
        json.dumps(
            {
                "device": str(device),
                "precision": precision,
                "cpu_capability": cpu_capability(),
                "bertzoo_tokens_per_s": round(tps["bertzoo"], 1),
                "transformers_tokens_per_s": round(tps["transformers"], 1),
                **usage,
                "ratio": round(ratio, 3),
                "first_loss_diff": abs(first["bertzoo"] - first["transformers"]),
            }
        )
    )


if __name__ == "__main__":
    main()
