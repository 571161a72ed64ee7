"""Greedy generation: bertzoo's cached decoder against transformers' `generate()`, same weights, same prompts.

A GPT-mini (GPT-2 layout: 4 layers, 256 wide, a 8k vocabulary) with random weights is built in bertzoo,
exported to a GPT2LMHeadModel (bertzoo.hub.export_hf), and both continue the same batch of prompts by
`--new` greedy tokens (no stop token, so both produce exactly that many). Repetitions alternate which
side runs first. The tokens must be identical; the headline is bertzoo's tokens/s over transformers'.
--precision auto resolves to bf16 only where the device runs it natively and faster (`bertzoo.precision`),
else fp32; both sides run under the same autocast. --device cpu (default) or cuda. Last line: JSON with `ratio`
and `identical_tokens`.

    python benchmarks/generate_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

import torch
from timing import alternate, autocast, device_arg, resolve_device

from bertzoo.hub import export_hf
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.variants import gpt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=32, help="prompt length in tokens")
    ap.add_argument("--new", type=int, default=64, help="new tokens per prompt")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--preset", default="gpt-mini")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 3
    device = resolve_device(args.device)
    try:
        import transformers
    except ImportError:
        sys.exit("needs transformers: pip install 'bertzoo[hf]'")

    torch.manual_seed(0)
    ours = gpt.build(gpt.model_config({"preset": args.preset, "vocab_size": args.vocab, "max_position": 256})).eval()
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, tmp)
        ref = transformers.GPT2LMHeadModel.from_pretrained(tmp).eval()
    ours.to(device), ref.to(device)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, args.vocab, (args.batch, args.prompt), generator=g).to(device)
    mask = torch.ones_like(prompts)
    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)

    results: dict[str, torch.Tensor] = {}

    def run_ours() -> None:
        with autocast(device, amp):
            results["bertzoo"] = ours.generate(prompts, mask, max_new_tokens=args.new).sequences

    def run_hf() -> None:
        with torch.inference_mode(), autocast(device, amp):
            out = ref.generate(
                prompts,
                attention_mask=mask,
                max_new_tokens=args.new,
                min_new_tokens=args.new,
                do_sample=False,
                num_beams=1,
                pad_token_id=0,
                eos_token_id=None,
            )
        results["transformers"] = out[:, args.prompt :]

    run_ours(), run_hf()  # warm-up
    times = alternate({"bertzoo": run_ours, "transformers": run_hf}, args.repeats, device)
    identical = torch.equal(results["bertzoo"].cpu(), results["transformers"].cpu())
    tokens = args.batch * args.new
    tps = {k: tokens / min(v) for k, v in times.items()}
    ratio = tps["bertzoo"] / tps["transformers"]
    print(
        f"{args.preset} (vocab {args.vocab}), batch {args.batch} x prompt {args.prompt}, {args.new} greedy tokens, "
        f"on {device}, precision {precision}, CPU {cpu_capability()}, threads {torch.get_num_threads()}, "
        f"transformers {transformers.__version__}"
    )
    print(
        f"bertzoo {tps['bertzoo']:,.0f} tokens/s  transformers {tps['transformers']:,.0f} tokens/s  "
        f"ratio {ratio:.2f}x  identical tokens: {identical}"
    )
    print(
        json.dumps(
            {
                "device": str(device),
                "precision": precision,
                "cpu_capability": cpu_capability(),
                "bertzoo_tokens_per_s": round(tps["bertzoo"], 1),
                "transformers_tokens_per_s": round(tps["transformers"], 1),
                "ratio": round(ratio, 3),
                "identical_tokens": identical,
            }
        )
    )


if __name__ == "__main__":
    main()
