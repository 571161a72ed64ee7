"""`bertzoo export MODEL OUT --onnx [--int8]`: a model's encoder as ONNX, verified against PyTorch with onnxruntime."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    ex = sub.add_parser("export", help="export a model's encoder to ONNX, verified against PyTorch")
    ex.add_argument("model", help="bertzoo or Hugging Face model directory")
    ex.add_argument("out", help="output .onnx file")
    ex.add_argument("--onnx", action="store_true", required=True, help="the format (ONNX is the only one)")
    ex.add_argument("--no-verify", action="store_true", help="skip the onnxruntime comparison")
    ex.add_argument(
        "--int8", action="store_true", help="quantize the weights to int8 (onnxruntime's dynamic quantization)"
    )
    ex.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
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
