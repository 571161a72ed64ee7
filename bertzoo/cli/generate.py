"""`bertzoo generate MODEL`: text from a seq2seq fine-tuned model or a left-to-right LM, JSONL in, JSONL out."""

from __future__ import annotations

import argparse
import sys

from bertzoo.cli.common import parse_overrides, positive_int
from bertzoo.errors import ConfigError


def add_parser(sub) -> None:
    gn = sub.add_parser(
        "generate",
        help="generate text: a seq2seq fine-tuned model or a left-to-right LM (GPT), JSONL in, JSONL out",
        epilog="Decoding settings: --generation.max_new_tokens 40 --generation.num_beams 4 "
        "--generation.do_sample true --generation.top_p 0.9",
    )
    gn.add_argument("model", help="a seq2seq fine-tuned model directory or a GPT checkpoint / Hugging Face GPT-2")
    gn.add_argument("--input", "-i", required=True, help="JSONL file: 'text' (seq2seq source) or 'prompt' per line")
    gn.add_argument("--output", "-o", required=True, help="JSONL file to write, one {'prediction': ...} per line")
    gn.add_argument("--batch-size", type=positive_int, default=16, help="prompts decoded together")
    gn.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    gn.set_defaults(run=run, takes_overrides=True)


def run(args: argparse.Namespace) -> int:
    from bertzoo.train.generate import generate_file

    settings = {}
    for key, value in parse_overrides(args.overrides).items():
        section, _, name = key.partition(".")
        if section != "generation" or not name or "." in name:
            raise ConfigError(f"unknown option --{key}; decoding settings look like --generation.max_new_tokens 40")
        settings[name] = value
    n = generate_file(
        args.model, args.input, args.output, generation=settings, batch_size=args.batch_size, device=args.device
    )
    print(f"wrote {n} generation(s) -> {args.output}", file=sys.stderr)
    return 0
