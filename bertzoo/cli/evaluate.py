"""`bertzoo evaluate MODEL`: score a fine-tuned model on its dev/test split or on a labelled file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bertzoo.cli.common import positive_int


def add_parser(sub) -> None:
    ev = sub.add_parser("evaluate", help="score a fine-tuned model on its dev/test split or a labelled file")
    ev.add_argument("model", help="fine-tuned model directory (OUTPUT_DIR/model of `bertzoo finetune`)")
    where = ev.add_mutually_exclusive_group()
    where.add_argument("--split", choices=["dev", "test"], default=None, help="a split of the model's own data")
    where.add_argument("--data", default=None, help="a labelled file in the training data's format")
    ev.add_argument("--out", "-o", default=None, help="write the report (metrics + tables) as JSON here")
    ev.add_argument("--batch-size", type=positive_int, default=None, help="examples per inference batch")
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    ev.add_argument("--int8", action="store_true", help="int8 linear layers (dynamic quantization; CPU only)")
    ev.set_defaults(run=run)


def print_report(metrics: dict[str, float], report: dict[str, Any]) -> None:
    """The metrics one per line, then the per-label (or per-entity-type) table when the task has one."""
    from bertzoo.metrics.classification import format_table

    for key, value in metrics.items():
        print(f"{key:>22}: {value:.4f}" if isinstance(value, float) else f"{key:>22}: {value}")
    table = report.get("per_label") or report.get("per_type")
    if isinstance(table, dict) and table:
        print()
        print(format_table(table))


def run(args: argparse.Namespace) -> int:
    from bertzoo.io import write_atomic
    from bertzoo.train.evaluate import evaluate_model

    result, cfg = evaluate_model(
        args.model, split=args.split, data=args.data, batch_size=args.batch_size, device=args.device, int8=args.int8
    )
    print_report(result.metrics, result.report)
    if args.out:
        payload = {
            "model": args.model,
            "task": cfg.task,
            "data": args.data or args.split or "test",
            "metrics": result.metrics,
            "report": result.report,
        }
        write_atomic(args.out, json.dumps(payload, indent=2, default=str) + "\n")
        print(f"report -> {args.out}", file=sys.stderr)
    return 0
