"""`bertzoo embed MODEL --input FILE --output VECS.npy`: a sentence vector per text, in input order."""

from __future__ import annotations

import argparse
import sys

from bertzoo.cli.common import int_range, positive_int


def add_parser(sub) -> None:
    em = sub.add_parser("embed", help="sentence vectors of texts (JSONL or one per line) as a .npy array")
    em.add_argument("model", help="model directory (bertzoo, fine-tuned or Hugging Face), builtin:NAME or hf:ID")
    em.add_argument("--input", "-i", required=True, help="JSONL file (one object per line) or text, one per line")
    em.add_argument("--output", "-o", required=True, help=".npy file to write: float32, texts x hidden size")
    em.add_argument("--field", default="text", help="JSONL field holding the text")
    em.add_argument(
        "--pooling",
        choices=["auto", "mean", "cls", "last", "pooler"],
        default="auto",
        help="auto: what the model was fine-tuned for (task: embedding), else the mean over real tokens "
        "(sentence-transformers' default); or the [CLS] state, the last real token, BERT's pooler",
    )
    em.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="scale every vector to unit length (cosine = dot); default: as the model was fine-tuned, else off",
    )
    em.add_argument("--batch-size", type=positive_int, default=64, help="texts per batch (sorted by length)")
    em.add_argument("--max-length", type=int_range(3), default=128, help="tokens per text, [CLS] and [SEP] included")
    em.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    em.add_argument("--int8", action="store_true", help="int8 linear layers (dynamic quantization; CPU only)")
    em.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.train.embed import embed_file

    count, width = embed_file(
        args.model,
        args.input,
        args.output,
        field=args.field,
        batch_size=args.batch_size,
        max_length=args.max_length,
        pooling=args.pooling,
        normalize=args.normalize,
        device=args.device,
        int8=args.int8,
    )
    print(f"wrote {count} vector(s) of {width} -> {args.output}", file=sys.stderr)
    return 0
