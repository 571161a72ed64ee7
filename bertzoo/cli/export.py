"""`bertzoo export MODEL OUT --onnx [--int8]`: a model's encoder as ONNX, verified against PyTorch with onnxruntime;
`bertzoo export MODEL OUT --sentence-transformers`: a sentence-transformers directory, verified by loading it."""

from __future__ import annotations

import argparse

from bertzoo.cli.common import int_range


def add_parser(sub) -> None:
    ex = sub.add_parser(
        "export", help="export a model's encoder to ONNX or sentence-transformers, verified against bertzoo"
    )
    ex.add_argument("model", help="bertzoo or Hugging Face model directory, builtin:NAME or hf:ID")
    ex.add_argument("out", help="output .onnx file (--onnx) or directory (--sentence-transformers)")
    fmt = ex.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--onnx", action="store_true", help="an ONNX graph of the encoder")
    fmt.add_argument(
        "--sentence-transformers",
        action="store_true",
        help="a directory that sentence_transformers.SentenceTransformer loads (Hugging Face model + pooling)",
    )
    ex.add_argument("--no-verify", action="store_true", help="skip the comparison with bertzoo's own outputs")
    ex.add_argument(
        "--int8", action="store_true", help="quantize the weights to int8 (onnxruntime's dynamic quantization)"
    )
    ex.add_argument(
        "--pooling",
        choices=["auto", "mean", "cls", "last"],
        default="auto",
        help="sentence-transformers: auto = as the model was fine-tuned (task: embedding), else mean",
    )
    ex.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sentence-transformers: unit vectors; default as the model was fine-tuned, else off",
    )
    ex.add_argument(
        "--max-length", type=int_range(3), default=None, help="sentence-transformers: tokens per text (default 512)"
    )
    ex.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.errors import ConfigError

    if args.sentence_transformers:
        if args.int8:
            raise ConfigError("--int8 applies to --onnx only; export with --sentence-transformers alone")
        from bertzoo.train.embed import export_sentence_transformers

        info = export_sentence_transformers(
            args.model,
            args.out,
            pooling=args.pooling,
            normalize=args.normalize,
            max_length=args.max_length,
            verify=not args.no_verify,
        )
        check = info.get("verify_skipped", "not verified")
        if "max_abs_diff" in info:
            check = f"loaded by sentence-transformers (max |diff| {info['max_abs_diff']:.1e})"
        print(f"wrote {info['path']} ({info['pooling']} pooling, normalize={info['normalize']}); {check}")
        return 0
    from bertzoo.hub import load_encoder
    from bertzoo.interop.onnx import export_onnx

    if args.int8:
        from bertzoo.interop.int8 import export_onnx_int8

        info = export_onnx_int8(load_encoder(args.model), args.out)
        print(
            f"wrote {info['path']} ({info['bytes'] / 1e6:.1f} MB, fp32 {info['fp32_bytes'] / 1e6:.1f} MB); token "
            f"vectors' cosine with PyTorch fp32 {info['int8_cosine']:.4f}"
        )
        return 0
    info = export_onnx(load_encoder(args.model), args.out, verify=not args.no_verify)
    check = (
        f"verified with onnxruntime (max |diff| {info['max_abs_diff']:.1e})"
        if info.get("verified")
        else (info.get("verify_skipped", "not verified"))
    )
    print(f"wrote {info['path']} ({info['bytes'] / 1e6:.1f} MB); {check}")
    return 0
