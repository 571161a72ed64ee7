"""`bertzoo convert --from F --to T SRC DST`: a model directory between the bertzoo and Hugging Face formats."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    cv = sub.add_parser("convert", help="convert a model directory between bertzoo and Hugging Face formats")
    cv.add_argument("--from", dest="src_format", required=True, choices=["hf", "bertzoo"])
    cv.add_argument("--to", dest="dst_format", required=True, choices=["hf", "bertzoo"])
    cv.add_argument("src", help="source model directory")
    cv.add_argument("dst", help="output directory (new or empty)")
    cv.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.hub import convert_directory

    info = convert_directory(args.src, args.dst, args.src_format, args.dst_format)
    arch = f" ({info['architecture']})" if args.dst_format == "hf" else ""
    print(f"converted the {info['kind']} model {info['from']} -> {info['to']}{arch}")
    return 0
