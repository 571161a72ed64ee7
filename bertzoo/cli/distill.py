"""`bertzoo distill CONFIG`: distil a teacher into a smaller student (DistilBERT, TinyBERT; configs/distill/)."""

from __future__ import annotations

import argparse
import json

from bertzoo.cli.common import add_run_parser, parse_overrides, stopped_exit, tell_how_to_continue


def add_parser(sub) -> None:
    p = add_run_parser(
        sub,
        "distill",
        help="distil a teacher into a smaller student (DistilBERT, TinyBERT) from a YAML config",
        epilog="--train.lr 1e-4 --student.num_layers 3",
        configs="distill",
        resume_help="'auto' (newest complete checkpoint of each phase) or a path",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.config import load_distill_config
    from bertzoo.train.distill import distill

    cfg = load_distill_config(args.config, parse_overrides(args.overrides))
    report = distill(cfg, resume=args.resume)
    print(json.dumps(report, indent=2, default=str))
    if "model_dir" not in report:
        tell_how_to_continue(args)
    phases = report.get("phases", {}).values()
    return stopped_exit(next((p.get("stop_reason") for p in phases if not p.get("completed", True)), None))
