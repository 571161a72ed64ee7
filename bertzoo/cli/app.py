"""`bertzoo COMMAND ...` (also `python -m bertzoo`): the parser of every command and the one place that turns
expected failures into one line and exit code 2 (`--debug` shows the traceback instead)."""

from __future__ import annotations

import argparse
import os
import sys

import bertzoo.cli.attention as attention
import bertzoo.cli.convert as convert
import bertzoo.cli.distill as distill
import bertzoo.cli.embed as embed
import bertzoo.cli.evaluate as evaluate
import bertzoo.cli.export as export
import bertzoo.cli.finetune as finetune
import bertzoo.cli.generate as generate
import bertzoo.cli.info as info
import bertzoo.cli.kg_embed as kg_embed
import bertzoo.cli.predict as predict
import bertzoo.cli.prepare as prepare
import bertzoo.cli.pretrain as pretrain
import bertzoo.cli.push as push
import bertzoo.cli.serve as serve
import bertzoo.cli.suite as suite
import bertzoo.cli.tokenizer as tokenizer
from bertzoo.cli.common import EXIT_USAGE, Parser, UsageError, split_overrides
from bertzoo.errors import BertzooError, is_disk_full, room_problem

# Every command, in the order `bertzoo --help` lists them: each module adds its parser (`add_parser`) and runs
# it (`run(args)`, set as the parser's default).
COMMANDS = (
    tokenizer,
    prepare,
    pretrain,
    finetune,
    distill,
    evaluate,
    suite,
    predict,
    generate,
    embed,
    serve,
    export,
    convert,
    push,
    attention,
    kg_embed,
    info,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="bertzoo", description="The BERT family in one codebase.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for expected errors")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def os_error_message(exc: OSError) -> str:
    """One line for an OSError that reached the CLI (a write or read the library did not wrap)."""
    where = f" {exc.filename}" if exc.filename else ""
    if is_disk_full(exc):
        return (
            f"{room_problem(exc)} while writing{where}; free space and run the command again (pretrain: with "
            "--resume auto)"
        )
    return f"{exc.strerror or exc}:{where or ' (no file name)'}; check the path, free space and permissions"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    rest, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    try:
        args, extra = parser.parse_known_args(rest)
    except UsageError as exc:  # no traceback to show even with --debug: the command line is the problem
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args.overrides = overrides + extra
    args.argv = argv
    try:
        if args.overrides and not getattr(args, "takes_overrides", False):
            parser.error(f"unrecognized arguments: {' '.join(args.overrides)}")
        return args.run(args)
    except BertzooError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)  # one line: BertzooError keeps its message on one line
        return EXIT_USAGE
    except OSError as exc:  # disk full, permissions, I/O errors: the environment, not a bug in bertzoo
        if args.debug:
            raise
        print("error: " + " ".join(os_error_message(exc).split()), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """Console-script entry point."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    sys.exit(main())


if __name__ == "__main__":
    entry()
