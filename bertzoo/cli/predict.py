"""`bertzoo predict MODEL`: batch inference with a fine-tuned model, JSONL in, JSONL out."""

from __future__ import annotations

import argparse
import sys

from bertzoo.cli.common import positive_int


def add_parser(sub) -> None:
    pr = sub.add_parser("predict", help="batch inference: JSONL in, JSONL out")
    pr.add_argument("model", help="fine-tuned model directory (OUTPUT_DIR/model of `bertzoo finetune`)")
    pr.add_argument("--input", "-i", required=True, help="JSONL file, one input object per line")
    pr.add_argument("--output", "-o", required=True, help="JSONL file to write, one prediction per line")
    pr.add_argument("--batch-size", type=positive_int, default=64, help="examples per inference batch")
    pr.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    pr.add_argument("--int8", action="store_true", help="int8 linear layers (dynamic quantization; CPU only)")
    pr.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.train.evaluate import predict_file

    n = predict_file(
        args.model, args.input, args.output, batch_size=args.batch_size, device=args.device, int8=args.int8
    )
    print(f"wrote {n} prediction(s) -> {args.output}", file=sys.stderr)
    return 0
