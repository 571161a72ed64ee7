"""`bertzoo suite NAME MODEL [MODEL ...]`: fine-tune and score models on every task of a benchmark suite (glue,
clue, builtin) and write suite.json, suite.md and suite.html (docs/suites.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertzoo.cli.common import positive_float, positive_int, stopped_exit


def add_parser(sub) -> None:
    p = sub.add_parser(
        "suite",
        help="fine-tune and score models on a benchmark suite (glue, clue, builtin)",
        epilog="e.g. bertzoo suite builtin runs/mini/final random:runs/mini/final --seeds 3 --out runs/suite/builtin",
    )
    p.add_argument("name", help="the suite: glue, clue or builtin")
    p.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="model directory (bertzoo or Hugging Face), builtin:NAME, hf:ID, or random:MODEL (the same "
        "architecture and tokenizer from random weights); several are compared side by side",
    )
    p.add_argument("--data", default=None, help="glue / clue: the directory of the suite's official files")
    p.add_argument("--out", default=None, help="where the runs and reports go (default: runs/suite/NAME)")
    p.add_argument("--seeds", type=positive_int, default=1, help="fine-tuning seeds 0..N-1 per task (default 1)")
    p.add_argument("--tasks", nargs="+", default=None, help="run only these tasks of the suite")
    p.add_argument("--max-train-examples", type=positive_int, default=None, help="a fixed subset of each train split")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=positive_float, default=None, help="replace every recipe's epochs")
    length.add_argument("--max-steps", type=positive_int, default=None, help="train this many steps instead")
    p.add_argument(
        "--lrs", nargs="+", type=positive_float, default=None, help="replace every recipe's learning-rate grid"
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads per run (default: torch's)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--keep-models", action="store_true", help="keep every run's fine-tuned model (large)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.train.suite import SuiteOptions, SuiteStopped, run_suite
    from bertzoo.train.suite_report import markdown

    options = SuiteOptions(
        seeds=args.seeds,
        tasks=args.tasks,
        max_train_examples=args.max_train_examples,
        epochs=args.epochs,
        max_steps=args.max_steps,
        lrs=tuple(args.lrs) if args.lrs else None,
        threads=args.threads,
        device=args.device,
        keep_models=args.keep_models,
    )
    out = Path(args.out) if args.out else Path("runs") / "suite" / args.name.lower()
    try:
        result = run_suite(args.name, args.models, out, data=args.data, options=options)
    except SuiteStopped as stop:
        print(f"stopped ({stop.stop_reason}); run the same command again to continue", file=sys.stderr)
        return stopped_exit(stop.stop_reason) or 1
    print(markdown(result))
    print(f"reports: {out / 'suite.json'}, {out / 'suite.md'}, {out / 'suite.html'}", file=sys.stderr)
    return 0
