"""`bertzoo pretrain CONFIG`: pretrain a model of any family from a YAML config (configs/pretrain/)."""

from __future__ import annotations

import argparse
import json

from bertzoo.cli.common import add_run_parser, parse_overrides, stopped_exit, tell_how_to_continue


def add_parser(sub) -> None:
    p = add_run_parser(
        sub,
        "pretrain",
        help="pretrain a model from a YAML config",
        epilog=(
            "--train.lr 5e-4 --model.preset bert-tiny; continue a checkpoint with --init MODEL "
            "(a directory, hf:ORG/NAME, builtin:NAME)"
        ),
        configs="pretrain",
        resume_help="'auto' (newest complete checkpoint) or a checkpoint path",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.config import load_pretrain_config
    from bertzoo.train.pretrain import pretrain

    cfg = load_pretrain_config(args.config, parse_overrides(args.overrides))
    summary = pretrain(cfg, resume=args.resume)
    print(json.dumps(summary, indent=2, default=str))
    if not summary.get("completed", True):  # stopped by SIGINT/SIGTERM or max_minutes, with a checkpoint
        tell_how_to_continue(args)
    return stopped_exit(summary.get("stop_reason"))
