"""An ELECTRA pretraining step (replaced-token detection): bertzoo's Electra objective against the same step
written with transformers' ElectraForMaskedLM (generator) and ElectraForPreTraining (discriminator).

An ELECTRA-mini (discriminator 4 layers, 256 wide, embeddings 128 wide; generator a quarter as wide; 8k
vocabulary; dropout off) is built in bertzoo and exported (bertzoo.hub.export_hf: ElectraForPreTraining, and
ElectraForMaskedLM in its generator/ folder), so both sides start from identical weights. The reference shares the
embedding block the way ELECTRA users wire the two transformers models (the discriminator's embeddings module in
the generator, the generator's output layer tied to its word table), and its step is the paper's: the generator's
masked-LM loss, its samples at the masked positions in place of the [MASK]s, the discriminator's replaced-token
BCE over every real token (ElectraForPreTraining's own loss), loss = MLM + 50 x RTD; no gradient through the
samples. Both sides draw each sample by inverting the softmax's CDF at the same per-position uniform (one
softmax over the vocabulary per masked position, the cost of a multinomial draw), so they see the same
replacements.

Batches: rows of 3/4 to full length ([CLS] text [SEP], right padding), 15% of the real tokens selected, 85% of
those [MASK] and 15% kept (ELECTRA's masking). Before any timing, the fp32 loss of the first batch must agree to
1e-4 on both sides, the whole loss (MLM + 50 x RTD) since the samples agree; the generator's MLM part is printed
beside it. Then each step is forward + backward + AdamW (`training_adamw`: each side's usual kernel, the same
settings) under the same autocast, the sides alternating which runs first (`alternate`). bertzoo runs the
generator's vocabulary projection on the masked positions only, transformers' ElectraForMaskedLM on every
position, so bertzoo's step counts fewer FLOPs.

Prints tokens/s (real tokens) of both and the ratio, then (benchmarks/flops.py) each side's counted FLOPs per step
(on the warm-up step), GFLOP/s and MFU against the peak matmul rate measured in the same run at the same
precision, the MFU of a plain GEMM of the step's largest shape (tokens, discriminator hidden, intermediate) and
whether the goal is met. --precision auto resolves to bf16 only where the device runs it natively and faster
(`bertzoo.precision`), else fp32. --device cpu (default) or cuda. Last line: JSON with `ratio` (bertzoo's tokens/s
over transformers').

    python benchmarks/electra_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

if str(Path(__file__).parent) not in sys.path:  # run from anywhere; flops.py and timing.py lie beside it
    sys.path.insert(0, str(Path(__file__).parent))
from flops import counted_flops, utilisation_from  # noqa: E402
from profiling import add_profile_arg, profile_sides  # noqa: E402
from timing import alternate, autocast, device_arg, resolve_device, training_adamw  # noqa: E402

from bertzoo.batch import IGNORE_INDEX, Batch  # noqa: E402
from bertzoo.hub import export_hf  # noqa: E402
from bertzoo.objectives.electra import SAMPLE_UNIFORM  # noqa: E402
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision  # noqa: E402
from bertzoo.variants import electra  # noqa: E402

PAD, CLS, SEP, MASK = 0, 2, 3, 4
FIRST_ORDINARY = 5  # ids below are special tokens


def batches(n: int, batch: int, seq: int, vocab: int, device: torch.device, seed: int = 0) -> list[Batch]:
    """Masked batches as ELECTRA's collator makes them, with the per-position sampling uniforms; fixed seed."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(seq * 3 // 4, seq + 1, (batch,), generator=g)
        real = torch.arange(seq)[None] < lengths[:, None]
        original = torch.randint(FIRST_ORDINARY, vocab, (batch, seq), generator=g)
        original[:, 0] = CLS
        original[torch.arange(batch), lengths - 1] = SEP
        original[~real] = PAD
        selected = (torch.rand(batch, seq, generator=g) < 0.15) & (original >= FIRST_ORDINARY)
        kept = torch.rand(batch, seq, generator=g) < 0.15
        masked = Batch(
            input_ids=torch.where(selected & ~kept, torch.full_like(original, MASK), original),
            attention_mask=real.long(),
            token_type_ids=torch.zeros_like(original),
            labels=torch.where(selected, original, torch.full_like(original, IGNORE_INDEX)),
            extra={SAMPLE_UNIFORM: torch.rand(batch, seq, generator=g)},
        )
        out.append(masked.to(device))
    return out


@torch.no_grad()
def sample(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token per row of `logits` (n, vocab), softmax at temperature 1, by inverting its CDF at `uniform` (n,)."""
    cdf = torch.softmax(logits.float(), dim=-1).cumsum(-1)
    u = (uniform * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=logits.size(-1) - 1)


class Reference(nn.Module):
    """ELECTRA's pretraining loss written with transformers' generator and discriminator classes."""

    def __init__(self, generator: nn.Module, discriminator: nn.Module, rtd_weight: float) -> None:
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        # One embedding block for both, the output layer tied to the shared word table.
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        self.rtd_weight = rtd_weight

    def losses(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(generator MLM loss, discriminator RTD loss) of a masked batch."""
        gen = self.generator(
            input_ids=b.input_ids, attention_mask=b.attention_mask, token_type_ids=b.token_type_ids, labels=b.labels
        )
        selected = b.labels != IGNORE_INDEX
        with torch.no_grad():
            original = torch.where(selected, b.labels, b.input_ids)
            fake = original.clone()
            fake[selected] = sample(gen.logits[selected], b.extra[SAMPLE_UNIFORM][selected])
        disc = self.discriminator(
            input_ids=fake,
            attention_mask=b.attention_mask,
            token_type_ids=b.token_type_ids,
            labels=(fake != original).long(),
        )
        return gen.loss, disc.loss

    def forward(self, b: Batch) -> torch.Tensor:
        mlm, rtd = self.losses(b)
        return mlm + self.rtd_weight * rtd


def first_losses(ours: nn.Module, ref: Reference, b: Batch) -> dict[str, tuple[float, float]]:
    """(whole loss, generator MLM loss) of each side on `b`, in fp32, without gradients."""
    with torch.no_grad():
        out = ours(b)
        mlm, rtd = ref.losses(b)
    return {
        "bertzoo": (float(out.loss), float(out.metrics["mlm_loss"])),
        "transformers": (float(mlm + ref.rtd_weight * rtd), float(mlm)),
    }


def both_sides(args: argparse.Namespace, transformers) -> tuple[nn.Module, Reference]:
    """bertzoo's Electra objective and the reference built from its exported weights."""
    torch.manual_seed(0)
    spec = {"preset": args.preset, "vocab_size": args.vocab, "dropout": 0.0, "attention_dropout": 0.0}
    ours = electra.build(electra.model_config(spec))
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, tmp)
        disc = transformers.ElectraForPreTraining.from_pretrained(tmp, attn_implementation="sdpa")
        gen = transformers.ElectraForMaskedLM.from_pretrained(Path(tmp) / "generator", attn_implementation="sdpa")
    return ours, Reference(gen, disc, ours.rtd_weight)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="electra-mini")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per repetition")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    add_profile_arg(ap)
    args = ap.parse_args()
    if args.quick:
        args.batch, args.steps, args.repeats = 8, 3, 2
    return args


def main() -> None:
    args = parse_args()
    device = resolve_device(args.device)
    try:
        import transformers
    except ImportError:
        sys.exit("needs transformers: pip install 'bertzoo[hf]'")
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" would interleave with the report

    ours, ref = both_sides(args, transformers)
    ours.to(device).train(), ref.to(device).train()
    data = batches(args.steps + 1, args.batch, args.seq, args.vocab, device)

    # Same weights, same samples, same numbers: the fp32 loss of one batch, before anything is timed or trained.
    check = first_losses(ours, ref, data[0])
    loss_diff = abs(check["bertzoo"][0] - check["transformers"][0])
    print(
        f"loss check (fp32): bertzoo {check['bertzoo'][0]:.6f} (MLM {check['bertzoo'][1]:.6f})  transformers "
        f"{check['transformers'][0]:.6f} (MLM {check['transformers'][1]:.6f})  |diff| {loss_diff:.1e}"
    )
    if loss_diff > 1e-4:
        sys.exit(f"the two sides disagree (loss |diff| {loss_diff:.1e} > 1e-4): the comparison would be meaningless")

    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)
    opt = training_adamw(ours, ref, lr=1e-4)

    def step_ours(b: Batch) -> None:
        with autocast(device, amp):
            loss = ours(b).loss
        loss.backward()
        opt["bertzoo"].step()
        opt["bertzoo"].zero_grad(set_to_none=True)

    def step_hf(b: Batch) -> None:
        with autocast(device, amp):
            loss = ref(b)
        loss.backward()
        opt["transformers"].step()
        opt["transformers"].zero_grad(set_to_none=True)

    # Warm-up: one step of each, its FLOPs counted.
    flops = {
        "bertzoo": counted_flops(lambda: step_ours(data[0]), device, amp),
        "transformers": counted_flops(lambda: step_hf(data[0]), device, amp),
    }
    tokens = sum(int(b.attention_mask.sum()) for b in data[1:])
    times = alternate(
        {
            "bertzoo": lambda: [step_ours(b) for b in data[1:]],
            "transformers": lambda: [step_hf(b) for b in data[1:]],
        },
        args.repeats,
        device,
    )
    tps = {k: tokens / min(v) for k, v in times.items()}
    ratio = tps["bertzoo"] / tps["transformers"]
    cfg = ours.config
    print(
        f"{args.preset} (vocab {args.vocab}, generator {ours.generator_config.hidden_size} wide) training step, "
        f"batch {args.batch} x {args.seq} (3/4 to full length), on {device}, precision {precision}, "
        f"CPU {cpu_capability()}, threads {torch.get_num_threads()}, transformers {transformers.__version__}"
    )
    print(
        f"bertzoo {tps['bertzoo']:,.0f} tokens/s  transformers {tps['transformers']:,.0f} tokens/s  ratio {ratio:.2f}x"
    )
    usage = utilisation_from(
        flops,
        {k: min(v) / (len(data) - 1) for k, v in times.items()},
        largest_gemm=(args.batch * args.seq, cfg.hidden_size, cfg.intermediate_size),
        device=device,
        amp=amp,
    )
    if args.profile:  # where each side's step spends its time
        usage.update(
            profile_sides(
                {"bertzoo": lambda: step_ours(data[0]), "transformers": lambda: step_hf(data[0])}, device, amp
            )
        )
    print(
        json.dumps(
            {
                "preset": args.preset,
                "device": str(device),
                "precision": precision,
                "cpu_capability": cpu_capability(),
                "loss_diff": loss_diff,
                "mlm_loss_diff": abs(check["bertzoo"][1] - check["transformers"][1]),
                "bertzoo_tokens_per_s": round(tps["bertzoo"], 1),
                "transformers_tokens_per_s": round(tps["transformers"], 1),
                **usage,
                "ratio": round(ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
