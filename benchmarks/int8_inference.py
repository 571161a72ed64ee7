"""int8 sentence embeddings on the CPU: all-MiniLM-L6-v2 with its linear layers dynamically quantized
(`bertzoo.interop.int8`, `embed --int8`) against the same model in fp32, on the same mixed-length Wikipedia
sentences, both through `bertzoo.train.embed.encode` (length-sorted batches, mean pooling, unit length). Prints
sentences/s of each side, the model FLOPs of the work (real tokens), each side's rate as a share of an fp32 matmul
peak measured in the same run (int8 matmuls can exceed it: the share says how the step compares with fp32 work, not
with int8 hardware), `ratio` = int8 speed / fp32 speed, and the cosine between the two sides' vectors. Last line:
JSON.

    python benchmarks/int8_inference.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from inference_throughput import minilm_dir, useful_flops, wiki_sentences  # noqa: E402
from pretrain_throughput import peak_matmul_flops  # noqa: E402
from timing import alternate  # noqa: E402

from bertzoo.data.tokens.tokenizer import Tokenizer  # noqa: E402
from bertzoo.hub import load_encoder  # noqa: E402
from bertzoo.interop.int8 import quantize_int8  # noqa: E402
from bertzoo.precision import cpu_capability  # noqa: E402
from bertzoo.train.embed import encode  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    args = ap.parse_args()
    if args.quick:
        args.sentences, args.repeats = 512, 2
    device = torch.device("cpu")
    path = minilm_dir()
    texts = wiki_sentences(args.sentences)
    tok = Tokenizer.load(path)
    models = {"fp32": load_encoder(path).eval()}
    models["int8"] = quantize_int8(models["fp32"])
    vectors: dict[str, np.ndarray] = {}

    def side(name: str):
        def run() -> None:
            vectors[name] = encode(
                models[name], tok, texts, batch_size=args.batch, max_length=args.max_length, normalize=True
            )  # precision fp32 on both sides: quantized linears take fp32 activations

        return run

    fns = {name: side(name) for name in models}
    for fn in fns.values():
        fn()  # warm-up
    times = alternate(fns, args.repeats, device)
    lengths = np.array([min(len(x) + 2, args.max_length) for x in tok.encode_batch(texts)])
    flops = useful_flops(models["fp32"].config, lengths)
    peak = peak_matmul_flops(torch.float32, device)
    sps = {k: len(texts) / min(v) for k, v in times.items()}
    share = {k: flops / min(v) / peak for k, v in times.items()}
    ratio = sps["int8"] / sps["fp32"]
    a, b = vectors["int8"], vectors["fp32"]
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    print(
        f"MiniLM-L6 on {len(texts)} Wikipedia sentences (mean {lengths.mean():.0f} tokens), batch {args.batch}, "
        f"CPU {cpu_capability()}, threads {torch.get_num_threads()}"
    )
    print(f"model FLOPs of the work: {flops / 1e9:,.1f} GFLOP; fp32 matmul peak {peak / 1e9:,.0f} GFLOP/s")
    for name in models:
        print(f"{name:>5}: {sps[name]:,.0f} sentences/s, MFU (of the fp32 peak) {share[name]:.1%}")
    print(f"ratio {ratio:.2f}x  cosine min {cosine.min():.4f} mean {cosine.mean():.4f}")
    print(
        json.dumps(
            {
                "cpu_capability": cpu_capability(),
                "threads": torch.get_num_threads(),
                "fp32_sentences_per_s": round(sps["fp32"], 1),
                "int8_sentences_per_s": round(sps["int8"], 1),
                "ratio": round(ratio, 3),
                "model_gflop": round(flops / 1e9, 3),
                "fp32_mfu": round(share["fp32"], 4),
                "int8_mfu_of_fp32_peak": round(share["int8"], 4),
                "peak_gflops": round(peak / 1e9, 1),
                "min_cosine": round(float(cosine.min()), 5),
                "mean_cosine": round(float(cosine.mean()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
