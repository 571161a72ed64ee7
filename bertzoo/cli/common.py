"""What every command shares: the one-line argument errors, argument types, dotted config overrides, and how
a training command ends (its exit code and the line that continues it)."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from bertzoo.errors import ConfigError

EXIT_USAGE = 2


class UsageError(ConfigError):
    """A command line argparse rejects (unknown option, missing or malformed value)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `error` raises UsageError, which `main` prints like every other
    expected error, instead of printing the usage block and exiting (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; see {self.prog} --help")

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extra = super().parse_known_args(args, namespace)
        # argparse (3.11/3.12) strips a value of "--" (`--limit-docs=--`) and stores [] without calling
        # `type`; an integer option must hold an int (or its default None) before any command sees it.
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            if getattr(action.type, "integer_option", False) and value is not None and not isinstance(value, int):
                self.error(f"argument {'/'.join(action.option_strings)}: expected an integer")
        return namespace, extra


def int_range(low: int, high: int = sys.maxsize) -> Callable[[str], int]:
    """An argparse `type` for integers in [low, high]; anything else is a one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also int() of more than 4300 digits
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise argparse.ArgumentTypeError(f"expected an integer, got {shown!r}") from None
        if not low <= value <= high:
            shown = str(value) if len(text) <= 40 else f"a {len(text)}-digit number"
            bound = f">= {low}" if high == sys.maxsize else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {shown}")
        return value

    parse.__name__ = f"int_range({low}, {high})"  # argparse names the type in some messages
    parse.integer_option = True  # type: ignore[attr-defined]  # checked again after parsing (Parser)
    return parse


positive_int = int_range(1)
non_negative_int = int_range(0)


def non_negative_float(text: str) -> float:
    """An argparse `type` for a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text[:40]}")
    return value


def positive_float(text: str) -> float:
    """An argparse `type` for a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text[:40]}")
    return value


def add_corpus_args(
    p: argparse.ArgumentParser, *, names: tuple[str, ...] = ("--input", "-i"), example: str = "builtin:wiki-en"
) -> None:
    """The corpus options of `tokenizer train`, `tokenizer extend` and `prepare`: the input (under `names`, read as
    `args.input`) and how it is read."""
    p.add_argument(
        *names,
        dest="input",
        action="append",
        required=True,
        help=f"text/JSONL/CSV/parquet/arrow file, directory, builtin corpus ({example}) or "
        "hf-dataset:NAME_OR_PATH[:config][:split] (a Hugging Face dataset); repeatable",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "text", "jsonl", "csv", "parquet", "arrow"],
        help="input format (auto: from the file extension)",
    )
    p.add_argument("--text-field", default="text", help="JSONL field or dataset column holding the text")
    p.add_argument(
        "--doc-per",
        default="block",
        choices=["block", "file", "line"],
        help="plain text: a document per blank-line-separated block, per file or per line",
    )


def report_stats(stats) -> None:
    """Warn about what reading a corpus had to repair."""
    if getattr(stats, "bad_utf8_lines", 0):
        print(
            f"warning: {stats.bad_utf8_lines} line(s) had invalid UTF-8 (replaced); first at {stats.first_bad_utf8}",
            file=sys.stderr,
        )


def model_or_path(spec: str) -> str:
    """A `builtin:NAME` / `hf:ID` model's local directory (its tokenizer), any other spec as given."""
    from bertzoo.loading import BUILTIN_PREFIX, HUB_PREFIX, resolve

    return str(resolve(spec)) if spec.startswith((BUILTIN_PREFIX, HUB_PREFIX)) else spec


def parse_overrides(extra: list[str]) -> dict[str, Any]:
    """`--train.lr 5e-4 --data.nsp=false` -> {"train.lr": 5e-4, "data.nsp": False}."""
    from bertzoo.config import parse_scalar

    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unrecognised argument {arg!r}; overrides look like --train.lr 5e-4")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(extra):
                raise ConfigError(f"override {arg} needs a value, e.g. {arg} 5e-4")
            key, value = arg[2:], extra[i + 1]
            i += 2
        out[key] = parse_scalar(value)
    return out


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate config overrides (`--train.lr 5e-4`, `--data.nsp=false`, and for pretrain/finetune
    the top-level keys such as `--model DIR`) from the other arguments.

    Done before argparse sees the line: otherwise an override's value (`bert-tiny` in
    `pretrain --model.preset bert-tiny`) would be taken for the optional CONFIG argument.
    """
    from bertzoo.config import DistillConfig, FinetuneConfig, PretrainConfig

    command = next((a for a in argv if not a.startswith("-")), None)
    top = {"pretrain": PretrainConfig, "finetune": FinetuneConfig, "distill": DistillConfig}.get(command)
    top_keys = {f.name for f in dataclasses.fields(top)} if top else set()
    rest: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        key = arg.split("=", 1)[0][2:] if arg.startswith("--") else ""
        if key and ("." in key or key in top_keys):
            take = 1 if "=" in arg or i + 1 >= len(argv) else 2
            overrides.extend(argv[i : i + take])
            i += take
        else:
            rest.append(arg)
            i += 1
    return rest, overrides


def add_run_parser(sub, name: str, help: str, epilog: str, configs: str, resume_help: str) -> argparse.ArgumentParser:
    """The parser of a command that runs a YAML config (pretrain, finetune, distill): CONFIG, --resume, overrides."""
    p = sub.add_parser(name, help=help, epilog=f"Any config value can be overridden: {epilog}")
    p.add_argument("config", nargs="?", default=None, help=f"YAML file (see configs/{configs}/)")
    p.add_argument("--resume", default=None, help=resume_help)
    p.set_defaults(takes_overrides=True)
    return p


def stopped_exit(stop_reason: str | None) -> int:
    """The exit code of a run that returned: 0, or 128 + the signal's number when a signal stopped it (shell
    convention: 143 for SIGTERM, 130 for SIGINT). The run left a checkpoint either way, but a script or a
    scheduler that started it must be able to tell that it did not finish (a time cap is a finish)."""
    number = getattr(signal, stop_reason, None) if stop_reason and stop_reason.startswith("SIG") else None
    return 128 + int(number) if number is not None else 0


def resume_command(argv: list[str] | None) -> str:
    """The command line that continues a run: the same arguments with `--resume auto`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--resume":
            i += 2
            continue
        if not argv[i].startswith("--resume="):
            kept.append(argv[i])
        i += 1
    return shlex.join(["bertzoo", *kept, "--resume", "auto"])


def tell_how_to_continue(args: argparse.Namespace) -> None:
    """Print the command that resumes a run that stopped before its end."""
    print(f"to continue this run: {resume_command(getattr(args, 'argv', None))}", file=sys.stderr)
