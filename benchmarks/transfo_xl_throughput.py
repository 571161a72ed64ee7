"""A Transformer-XL training step with memory: bertzoo's TransfoXL + RecurrentLM against transformers 4.57's
TransfoXLLMHeadModel, same weights, same blocks.

transformers removed Transformer-XL in 5.0, and its last line (4.57) cannot share an environment with 5.x, so this
benchmark runs in the separate one that `make tfxl-env` builds:

    PYTHONPATH=. .venv-tfxl/bin/python benchmarks/transfo_xl_throughput.py --quick

(with a transformers that has no Transformer-XL it stops with one line saying so).

A transfo-xl-mini (4 layers, 256 wide, 4 heads of 64, 8k vocabulary, dropout off) is built in bertzoo and its
weights copied into a TransfoXLLMHeadModel (bertzoo.variants.transfo_xl: config_to_hf, state_dict_to_hf), in the
one layout both hold: a plain softmax over the whole vocabulary tied to the word table (no adaptive-softmax
cutoffs, div_val 1, d_embed = d_model), post-norm, untied per-layer biases, no same_length, no clamping. Each side
reads blocks of --length tokens in segments of --segment tokens, each segment attending to the detached memory of
the previous one (mem_len = segment); the loss is the mean next-token cross-entropy over the whole block, a
segment's last token predicting the next segment's first (bertzoo's RecurrentLM objective). transformers' own
`labels` loss stops at each segment's end, so the reference takes the log-probabilities TransfoXLLMHeadModel
returns and scores the same targets. transformers starts from mem_len zero vectors of memory when given none, and
bertzoo's objective from no memory (a block's first segment sees only itself); the reference is given an empty
memory at the start of each block, so both do the same work. transformers 4.57's Transformer-XL calls
`tensor.type_as(dtype=...)`, which torch rejects; that call is read as `.to(dtype)` for the run (as the parity test
tests/interop/test_transfo_xl_hf.py does).

Before any timing, the fp32 loss of the first block must agree to 1e-4 (the run stops otherwise). Then each step is
forward + backward + AdamW (`training_adamw`: each side's usual kernel, the same settings) under the same autocast,
the sides alternating which runs first (`alternate`). Prints tokens/s of both and the ratio, then
(benchmarks/flops.py) each side's counted FLOPs per step (on the warm-up step), GFLOP/s and MFU against the peak
matmul rate measured in the same run at the same precision, the MFU of a plain GEMM of the step's largest shape
(batch x segment, hidden, intermediate) and whether the goal is met. --precision auto resolves to bf16 only where
the device runs it natively and faster (`bertzoo.precision`), else fp32. --device cpu (default) or cuda. Last line:
JSON with `ratio` (bertzoo's tokens/s over transformers').
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

if str(Path(__file__).parent) not in sys.path:  # run from anywhere; flops.py and timing.py lie beside it
    sys.path.insert(0, str(Path(__file__).parent))
from flops import counted_flops, utilisation_from  # noqa: E402
from profiling import add_profile_arg, profile_sides  # noqa: E402
from timing import alternate, autocast, device_arg, resolve_device, training_adamw  # noqa: E402

from bertzoo.batch import Batch  # noqa: E402
from bertzoo.models.transfo_xl import TransfoXL  # noqa: E402
from bertzoo.objectives.recurrent_lm import RecurrentLM  # noqa: E402
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision  # noqa: E402
from bertzoo.variants.transfo_xl import config_to_hf, model_config, state_dict_to_hf  # noqa: E402

NEEDS_TFXL = (
    "transformers {} has no Transformer-XL (removed in 5.0): run this benchmark under transformers 4.57, "
    "`make tfxl-env`, then PYTHONPATH=. .venv-tfxl/bin/python benchmarks/transfo_xl_throughput.py"
)


def accept_type_as_dtype() -> None:
    """4.57's Transformer-XL calls `tensor.type_as(dtype=...)`, which torch rejects; read it as `.to(dtype)`, the
    evident intent, and leave every other call of type_as as it was."""
    type_as = torch.Tensor.type_as

    def patched(self: torch.Tensor, other: torch.Tensor | None = None, dtype: torch.dtype | None = None):
        return self.to(dtype) if other is None else type_as(self, other)

    torch.Tensor.type_as = patched


class Reference(nn.Module):
    """RecurrentLM's loss over a block read in segments with memory, written with TransfoXLLMHeadModel."""

    def __init__(self, model: nn.Module, segment: int) -> None:
        super().__init__()
        self.model, self.segment = model, segment

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        c = self.model.config
        weight = self.model.transformer.word_emb.emb_layers[0].weight
        # An empty memory, not None (which transformers fills with mem_len zero vectors): the block's first segment
        # attends to itself only, as in bertzoo's objective.
        mems = [weight.new_zeros(0, ids.size(0), c.d_model) for _ in range(c.n_layer)]
        scores = []
        for segment in ids.split(self.segment, dim=1):
            out = self.model(input_ids=segment, mems=mems)
            mems = out.mems
            scores.append(out.prediction_scores)  # log-probabilities over the vocabulary
        logp = torch.cat(scores, dim=1)[:, :-1]
        return F.nll_loss(logp.flatten(0, 1), ids[:, 1:].flatten())


def both_sides(args: argparse.Namespace, transformers) -> tuple[RecurrentLM, Reference]:
    """bertzoo's objective and the reference holding the same weights (exits when they do not map one to one)."""
    torch.manual_seed(0)
    spec = {"preset": args.preset, "vocab_size": args.vocab, "mem_len": args.segment}
    model = TransfoXL(model_config({**spec, "dropout": 0.0, "attention_dropout": 0.0}))
    hf = transformers.TransfoXLLMHeadModel(transformers.TransfoXLConfig(**config_to_hf(model.config)))
    missing, unexpected = hf.load_state_dict(state_dict_to_hf(model), strict=False)
    if unexpected or set(missing) - {"transformer.pos_emb.inv_freq"}:
        sys.exit(f"the weights do not map one to one: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    if hf.crit.out_layers[0].weight is not hf.transformer.word_emb.emb_layers[0].weight:
        sys.exit("transformers' output layer is not tied to its word table: the two models would differ")
    return RecurrentLM(model, segment_len=args.segment, memory=True), Reference(hf, args.segment)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="transfo-xl-mini")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=256, help="block length in tokens")
    ap.add_argument("--segment", type=int, default=64, help="segment length (= mem_len)")
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
    try:
        import transformers
    except ImportError:
        sys.exit(NEEDS_TFXL.format("(none installed)"))
    if not hasattr(transformers, "TransfoXLLMHeadModel"):
        sys.exit(NEEDS_TFXL.format(transformers.__version__))
    transformers.utils.logging.set_verbosity_error()  # its deprecation notice would interleave with the report
    accept_type_as_dtype()
    device = resolve_device(args.device)

    ours, ref = both_sides(args, transformers)
    ours.to(device).train(), ref.to(device).train()
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, args.vocab, (args.steps + 1, args.batch, args.length), generator=g).to(device)

    # Same weights, same numbers: the fp32 loss of one block, before anything is timed or trained.
    with torch.no_grad():
        check = {
            "bertzoo": float(ours(Batch(data[0], torch.ones_like(data[0]))).loss),
            "transformers": float(ref(data[0])),
        }
    loss_diff = abs(check["bertzoo"] - check["transformers"])
    print(
        f"loss check (fp32): bertzoo {check['bertzoo']:.6f}  transformers {check['transformers']:.6f}  "
        f"|diff| {loss_diff:.1e}"
    )
    if loss_diff > 1e-4:
        sys.exit(f"the two models disagree (loss |diff| {loss_diff:.1e} > 1e-4): the comparison would be meaningless")

    precision = resolve_precision(args.precision, device)
    amp = autocast_dtype(precision)
    opt = training_adamw(ours, ref, lr=1e-4)

    def step_ours(ids: torch.Tensor) -> None:
        with autocast(device, amp):
            loss = ours(Batch(ids, torch.ones_like(ids))).loss
        loss.backward()
        opt["bertzoo"].step()
        opt["bertzoo"].zero_grad(set_to_none=True)

    def step_hf(ids: torch.Tensor) -> None:
        with autocast(device, amp):
            loss = ref(ids)
        loss.backward()
        opt["transformers"].step()
        opt["transformers"].zero_grad(set_to_none=True)

    # Warm-up: one step of each, its FLOPs counted.
    flops = {
        "bertzoo": counted_flops(lambda: step_ours(data[0]), device, amp),
        "transformers": counted_flops(lambda: step_hf(data[0]), device, amp),
    }
    times = alternate(
        {
            "bertzoo": lambda: [step_ours(ids) for ids in data[1:]],
            "transformers": lambda: [step_hf(ids) for ids in data[1:]],
        },
        args.repeats,
        device,
    )
    tokens = args.steps * args.batch * args.length
    tps = {k: tokens / min(v) for k, v in times.items()}
    ratio = tps["bertzoo"] / tps["transformers"]
    cfg = ours.config
    print(
        f"{args.preset} (vocab {args.vocab}) training step, batch {args.batch} x {args.length} in segments of "
        f"{args.segment} with memory (mem_len {args.segment}), on {device}, precision {precision}, "
        f"CPU {cpu_capability()}, threads {torch.get_num_threads()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    print(
        f"bertzoo {tps['bertzoo']:,.0f} tokens/s  transformers {tps['transformers']:,.0f} tokens/s  ratio {ratio:.2f}x"
    )
    usage = utilisation_from(
        flops,
        {k: min(v) / args.steps for k, v in times.items()},
        largest_gemm=(args.batch * args.segment, cfg.hidden_size, cfg.intermediate_size),
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
                "transformers": transformers.__version__,
                "loss_diff": loss_diff,
                "bertzoo_tokens_per_s": round(tps["bertzoo"], 1),
                "transformers_tokens_per_s": round(tps["transformers"], 1),
                **usage,
                "ratio": round(ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
