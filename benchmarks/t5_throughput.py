"""T5: bertzoo's EncoderDecoderLM against transformers' T5ForConditionalGeneration, same weights, same inputs.

A T5 (v1.0 layout: ReLU feed-forward, tied head; dropout off) is built in bertzoo and exported to a
T5ForConditionalGeneration (bertzoo.variants.t5.export_hf), so both start from identical weights. Before any
timing, the loss of one batch is computed by both in fp32 and must agree to 1e-4. Then, side by side in one
process (repetitions alternate which side runs first):

* training step: forward + backward + AdamW on the same batches of sources and targets of 3/4 to full
  length (right padding, labels -100 at padding); tokens/s counts real source + target tokens;
* greedy generation with the KV cache: both decode `--new` tokens for the same sources (no stop token, so
  both produce exactly that many); tokens/s counts generated tokens, and the tokens are compared.

For the training step it also prints (benchmarks/flops.py) each side's counted FLOPs per step, GFLOP/s and MFU
against the peak matmul rate measured in the same run at the same precision, the MFU of a plain GEMM of the step's
largest shape (batch x source length, d_model, d_ff) and whether the goal is met; the FLOPs are counted on the
warm-up step.

The full run is t5-small's shape (6 + 6 layers, 512 wide, 8 heads, 32,128-piece vocabulary); --quick a
t5-mini (4 + 4 layers, 256 wide) with an 8k vocabulary and shorter sequences. --precision auto resolves to
bf16 only where the device runs it natively and faster (`bertzoo.precision`), else fp32; both sides run
under the same autocast. --device cpu (default) or cuda. The headline `ratio` is bertzoo's training
tokens/s over transformers'. Last line: JSON with `ratio` and the training step's FLOP figures.

    python benchmarks/t5_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

import torch
from flops import counted_flops, utilisation_from
from profiling import add_profile_arg, profile_sides
from timing import alternate, autocast, device_arg, resolve_device, training_adamw

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision
from bertzoo.variants import t5


def batches(
    n: int, batch: int, source: int, target: int, vocab: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(input_ids, attention_mask, labels): rows of 3/4 to full length, the rest padding (id 0 in the
    source, IGNORE_INDEX in the labels), fixed seed. Ids start at 2: 0 is T5's pad/start, 1 its `</s>`."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(2, vocab, (batch, source), generator=g)
        lengths = torch.randint(source * 3 // 4, source + 1, (batch,), generator=g)
        mask = (torch.arange(source)[None] < lengths[:, None]).long()
        labels = torch.randint(2, vocab, (batch, target), generator=g)
        target_lengths = torch.randint(target * 3 // 4, target + 1, (batch,), generator=g)
        labels = labels.masked_fill(torch.arange(target)[None] >= target_lengths[:, None], IGNORE_INDEX)
        out.append((ids.masked_fill(mask == 0, 0).to(device), mask.to(device), labels.to(device)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="t5-small")
    ap.add_argument("--vocab", type=int, default=32128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--source", type=int, default=128, help="source length in tokens")
    ap.add_argument("--target", type=int, default=32, help="target length in tokens (training)")
    ap.add_argument("--steps", type=int, default=6, help="timed training steps per repetition")
    ap.add_argument("--gen-batch", type=int, default=8, help="sources per generation call")
    ap.add_argument("--new", type=int, default=32, help="greedy tokens generated per source")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    add_profile_arg(ap)
    args = ap.parse_args()
    if args.quick:
        args.preset, args.vocab, args.batch, args.source, args.target = "t5-mini", 8192, 4, 64, 32
        args.steps, args.gen_batch, args.new, args.repeats = 6, 4, 16, 3  # enough repetitions for a 2-core VM's spread
    device = resolve_device(args.device)
    try:
        import transformers
    except ImportError:
        sys.exit("needs transformers: pip install 'bertzoo[hf]'")

    torch.manual_seed(0)
    spec = {"preset": args.preset, "vocab_size": args.vocab, "dropout": 0.0, "attention_dropout": 0.0}
    ours = t5.build(t5.model_config(spec))
    with tempfile.TemporaryDirectory() as tmp:
        t5.export_hf(ours, tmp)
        ref = transformers.T5ForConditionalGeneration.from_pretrained(tmp, attn_implementation="sdpa")
    ours.to(device).train(), ref.to(device).train()
    data = batches(args.steps + 1, args.batch, args.source, args.target, args.vocab, device)
    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)

    # Same weights, same numbers: the fp32 loss of one batch, before anything is timed or trained.
    ids, mask, labels = data[0]
    with torch.no_grad():
        check = {
            "bertzoo": float(ours(Batch(ids, mask, labels=labels)).loss),
            "transformers": float(ref(input_ids=ids, attention_mask=mask, labels=labels).loss),
        }
    loss_diff = abs(check["bertzoo"] - check["transformers"])
    print(
        f"loss check (fp32): bertzoo {check['bertzoo']:.6f}  transformers {check['transformers']:.6f}  "
        f"|diff| {loss_diff:.1e}"
    )
    if loss_diff > 1e-4:
        sys.exit(f"the two models disagree (loss |diff| {loss_diff:.1e} > 1e-4): the comparison would be meaningless")

    opt = training_adamw(ours, ref, lr=1e-4)

    def step_ours(ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> None:
        with autocast(device, amp):
            loss = ours(Batch(ids, mask, labels=labels)).loss
        loss.backward()
        opt["bertzoo"].step()
        opt["bertzoo"].zero_grad(set_to_none=True)

    def step_hf(ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> None:
        with autocast(device, amp):
            loss = ref(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt["transformers"].step()
        opt["transformers"].zero_grad(set_to_none=True)

    # Warm-up: one step of each, its FLOPs counted.
    flops = {
        "bertzoo": counted_flops(lambda: step_ours(*data[0]), device, amp),
        "transformers": counted_flops(lambda: step_hf(*data[0]), device, amp),
    }
    train_tokens = sum(int(m.sum()) + int((y != IGNORE_INDEX).sum()) for _, m, y in data[1:])
    train_times = alternate(
        {
            "bertzoo": lambda: [step_ours(*b) for b in data[1:]],
            "transformers": lambda: [step_hf(*b) for b in data[1:]],
        },
        args.repeats,
        device,
    )
    train_tps = {k: train_tokens / min(v) for k, v in train_times.items()}
    ratio = train_tps["bertzoo"] / train_tps["transformers"]
    cpu = cpu_capability()
    print(
        f"{args.preset} (vocab {args.vocab}) on {device}, precision {precision}, CPU {cpu}, "
        f"threads {torch.get_num_threads()}, torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(
        f"training step, batch {args.batch} x source {args.source} + target {args.target} (3/4 to full length): "
        f"bertzoo {train_tps['bertzoo']:,.0f} tokens/s  transformers {train_tps['transformers']:,.0f} tokens/s  "
        f"ratio {ratio:.2f}x"
    )
    cfg = ours.config
    usage = utilisation_from(
        flops,
        {k: min(v) / (len(data) - 1) for k, v in train_times.items()},
        largest_gemm=(args.batch * max(args.source, args.target), cfg.hidden_size, cfg.intermediate_size),
        device=device,
        amp=amp,
    )
    if args.profile:  # where each side's step spends its time
        usage.update(
            profile_sides(
                {"bertzoo": lambda: step_ours(*data[0]), "transformers": lambda: step_hf(*data[0])}, device, amp
            )
        )

    # Generation: eval mode, the first batch's sources (their padding included).
    ours.eval(), ref.eval()
    sources, source_mask = data[0][0][: args.gen_batch], data[0][1][: args.gen_batch]
    generated: dict[str, torch.Tensor] = {}

    def run_ours() -> None:
        with autocast(device, amp):
            generated["bertzoo"] = ours.generate(sources, source_mask, max_new_tokens=args.new).sequences

    def run_hf() -> None:
        with torch.inference_mode(), autocast(device, amp):
            out = ref.generate(
                input_ids=sources,
                attention_mask=source_mask,
                max_new_tokens=args.new,
                min_new_tokens=args.new,
                do_sample=False,
                num_beams=1,
                pad_token_id=0,
                eos_token_id=None,
            )
        generated["transformers"] = out[:, 1:]  # transformers' rows begin with the decoder start token

    run_ours(), run_hf()  # warm-up
    gen_times = alternate({"bertzoo": run_ours, "transformers": run_hf}, args.repeats + 1, device)
    identical = torch.equal(generated["bertzoo"].cpu(), generated["transformers"].cpu())

    gen_tps = {k: sources.size(0) * args.new / min(v) for k, v in gen_times.items()}
    gen_ratio = gen_tps["bertzoo"] / gen_tps["transformers"]
    print(
        f"greedy generation with KV cache, batch {sources.size(0)}, {args.new} new tokens: "
        f"bertzoo {gen_tps['bertzoo']:,.0f} tokens/s  transformers {gen_tps['transformers']:,.0f} tokens/s  "
        f"ratio {gen_ratio:.2f}x  identical tokens: {identical}"
    )
    print(
        json.dumps(
            {
                "preset": args.preset,
                "device": str(device),
                "precision": precision,
                "cpu_capability": cpu,
                "loss_diff": loss_diff,
                "bertzoo_train_tokens_per_s": round(train_tps["bertzoo"], 1),
                "transformers_train_tokens_per_s": round(train_tps["transformers"], 1),
                "bertzoo_generate_tokens_per_s": round(gen_tps["bertzoo"], 1),
                "transformers_generate_tokens_per_s": round(gen_tps["transformers"], 1),
                "generate_ratio": round(gen_ratio, 3),
                "identical_tokens": identical,
                **usage,
                "ratio": round(ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
