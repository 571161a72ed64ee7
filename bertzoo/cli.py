"""Command line: `bertzoo SUBCOMMAND ...` (also `python -m bertzoo`).

Expected failures (bad paths, bad config, bad data) print one line and exit with code 2; `--debug`
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from bertzoo.errors import BertzooError, ConfigError

EXIT_USAGE = 2


def _add_corpus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        "-i",
        action="append",
        required=True,
        help="text/JSONL file, directory, or builtin corpus (builtin:wiki-en); repeatable",
    )
    p.add_argument("--format", default="auto", choices=["auto", "text", "jsonl"], help="input format")
    p.add_argument("--text-field", default="text", help="JSONL field holding the text")
    p.add_argument(
        "--doc-per",
        default="block",
        choices=["block", "file", "line"],
        help="plain text: a document per blank-line-separated block, per file or per line",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertzoo", description="The BERT family in one codebase.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for expected errors")
    sub = parser.add_subparsers(dest="command", required=True)

    tok = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="tok_command", required=True)
    tt = tok.add_parser("train", help="train a WordPiece vocabulary on a corpus")
    _add_corpus_args(tt)
    tt.add_argument("--out", "-o", required=True, help="output directory (vocab.txt, tokenizer.json)")
    tt.add_argument("--vocab-size", type=int, default=30000)
    tt.add_argument("--min-frequency", type=int, default=2)
    tt.add_argument("--cased", action="store_true", help="keep case (default: lower-case)")
    tt.add_argument(
        "--strip-accents",
        choices=["auto", "yes", "no"],
        default="auto",
        help="auto strips accents when lower-casing, as BERT does",
    )
    tt.add_argument("--limit-docs", type=int, default=None, help="train on the first N documents only")

    prep = sub.add_parser("prepare", help="tokenize a corpus once into memory-mapped shards")
    _add_corpus_args(prep)
    prep.add_argument("--tokenizer", "-t", required=True, help="tokenizer directory (or a model directory)")
    prep.add_argument("--out", "-o", required=True, help="output shard directory")
    prep.add_argument("--shard-tokens", type=int, default=1 << 24, help="tokens per shard file")
    prep.add_argument("--overwrite", action="store_true", help="replace an existing shard directory")

    pre = sub.add_parser(
        "pretrain",
        help="pretrain a model from a YAML config",
        epilog="Any config value can be overridden: --train.lr 5e-4 --model.preset bert-tiny",
    )
    pre.add_argument("config", nargs="?", default=None, help="YAML file (see configs/pretrain/)")
    pre.add_argument("--resume", default=None, help="'auto' (newest complete checkpoint) or a checkpoint path")

    info = sub.add_parser("info", help="describe a model, checkpoint, run, shard or tokenizer directory")
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="print JSON")
    return parser


def parse_overrides(extra: list[str]) -> dict[str, Any]:
    """`--train.lr 5e-4 --data.nsp=false` -> {"train.lr": 5e-4, "data.nsp": False}."""
    from bertzoo.config import parse_scalar

    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--") or "." not in arg.split("=", 1)[0]:
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


def _strip_accents(choice: str) -> bool | None:
    return {"auto": None, "yes": True, "no": False}[choice]


def cmd_tokenizer_train(args: argparse.Namespace) -> int:
    import itertools

    from bertzoo.data.corpus import ReadStats, read_documents
    from bertzoo.data.tokenizer import train_wordpiece

    stats = ReadStats()
    docs = read_documents(args.input, fmt=args.format, text_field=args.text_field, doc_per=args.doc_per, stats=stats)
    if args.limit_docs:
        docs = itertools.islice(docs, args.limit_docs)
    tok = train_wordpiece(
        docs,
        args.vocab_size,
        lowercase=not args.cased,
        strip_accents=_strip_accents(args.strip_accents),
        min_frequency=args.min_frequency,
    )
    out = tok.save(args.out)
    _report_stats(stats)
    print(f"trained WordPiece vocabulary of {tok.vocab_size} tokens on {stats.documents} documents -> {out}")
    return 0


def _report_stats(stats) -> None:
    if getattr(stats, "bad_utf8_lines", 0):
        print(
            f"warning: {stats.bad_utf8_lines} line(s) had invalid UTF-8 (replaced); first at {stats.first_bad_utf8}",
            file=sys.stderr,
        )


def cmd_prepare(args: argparse.Namespace) -> int:
    from bertzoo.data.corpus import ReadStats, read_documents
    from bertzoo.data.shards import prepare_shards
    from bertzoo.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(args.tokenizer)
    stats = ReadStats()
    docs = read_documents(args.input, fmt=args.format, text_field=args.text_field, doc_per=args.doc_per, stats=stats)
    info = prepare_shards(
        docs, tokenizer, args.out, shard_tokens=args.shard_tokens, overwrite=args.overwrite, stats=stats
    )
    _report_stats(stats)
    print(
        f"wrote {info.num_tokens:,} tokens, {info.num_sentences:,} sentences, {info.num_docs:,} documents "
        f"in {info.num_shards} shard(s) -> {args.out}"
    )
    return 0


def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> int:
    from bertzoo.config import load_pretrain_config
    from bertzoo.train.pretrain import pretrain

    cfg = load_pretrain_config(args.config, parse_overrides(extra))
    summary = pretrain(cfg, resume=args.resume)
    print(json.dumps(summary, indent=2, default=str))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from bertzoo.info import describe

    info = describe(args.path)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        for key, value in info.items():
            print(f"{key:>22}: {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        if extra and args.command != "pretrain":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "tokenizer":
            return cmd_tokenizer_train(args)
        if args.command == "prepare":
            return cmd_prepare(args)
        if args.command == "pretrain":
            return cmd_pretrain(args, extra)
        if args.command == "info":
            return cmd_info(args)
        parser.error(f"unknown command {args.command}")
    except BertzooError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def entry() -> None:
    """Console-script entry point."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    sys.exit(main())


if __name__ == "__main__":
    entry()
