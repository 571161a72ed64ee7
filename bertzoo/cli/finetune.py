"""`bertzoo finetune CONFIG`: fine-tune a model on a task from a YAML config (configs/finetune/)."""

from __future__ import annotations

import argparse
import json

from bertzoo.cli.common import add_run_parser, parse_overrides, stopped_exit, tell_how_to_continue


def add_parser(sub) -> None:
    p = add_run_parser(
        sub,
        "finetune",
        help="fine-tune a model on a task from a YAML config",
        epilog="--train.lr 3e-5 --data.max_seq_len 256",
        configs="finetune",
        resume_help="'auto' (newest complete checkpoint) or a checkpoint path",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.config import load_finetune_config
    from bertzoo.train.finetune import finetune

    cfg = load_finetune_config(args.config, parse_overrides(args.overrides))
    summary = finetune(cfg, resume=args.resume)
    print(json.dumps(summary, indent=2, default=str))
    if not summary.get("completed", True):
        tell_how_to_continue(args)
    return stopped_exit(summary.get("stop_reason"))
