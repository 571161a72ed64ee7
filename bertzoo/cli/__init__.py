"""Command line: `bertzoo SUBCOMMAND ...` (also `python -m bertzoo`).

Expected failures (bad paths, bad config, bad data) print one line and exit with code 2; `--debug`
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from bertzoo.errors import BertzooError, ConfigError, is_disk_full

EXIT_USAGE = 2


class UsageError(ConfigError):
    """A command line argparse rejects (unknown option, missing or malformed value)."""


class _Parser(argparse.ArgumentParser):
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
    parse.integer_option = True  # type: ignore[attr-defined]  # checked again after parsing (_Parser)
    return parse


positive_int = int_range(1)
non_negative_int = int_range(0)


def positive_float(text: str) -> float:
    """An argparse `type` for a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text[:40]}")
    return value


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
    from bertzoo.data.tokens.tokenizer import LIMIT_ALPHABET, MAX_VOCAB_SIZE

    parser = _Parser(prog="bertzoo", description="The BERT family in one codebase.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for expected errors")
    sub = parser.add_subparsers(dest="command", required=True)

    tok = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="tok_command", required=True)
    tt = tok.add_parser("train", help="train a WordPiece, byte-level BPE or Unigram vocabulary on a corpus")
    _add_corpus_args(tt)
    tt.add_argument("--out", "-o", required=True, help="output directory (tokenizer.json, tokenizer_config.json, ...)")
    tt.add_argument(
        "--model",
        choices=["wordpiece", "bpe", "unigram"],
        default="wordpiece",
        help="wordpiece (BERT), bpe (byte-level, RoBERTa; always cased), unigram (SentencePiece-style, ALBERT)",
    )
    tt.add_argument(
        "--vocab-size",
        type=int_range(1, MAX_VOCAB_SIZE),
        default=None,
        help="default: 50000 for bpe, 30000 otherwise",
    )
    tt.add_argument(
        "--min-frequency", type=non_negative_int, default=2, help="wordpiece, bpe: ignore pairs seen fewer times"
    )
    tt.add_argument(
        "--limit-alphabet",
        type=positive_int,
        default=LIMIT_ALPHABET,
        help="wordpiece: most distinct characters kept (others become [UNK]); raise it for Chinese or Japanese text",
    )
    tt.add_argument("--cased", action="store_true", help="keep case (default: lower-case)")
    tt.add_argument(
        "--strip-accents",
        choices=["auto", "yes", "no"],
        default="auto",
        help="auto strips accents when lower-casing, as BERT does",
    )
    tt.add_argument("--limit-docs", type=positive_int, default=None, help="train on the first N documents only")

    prep = sub.add_parser("prepare", help="tokenize a corpus once into memory-mapped shards")
    _add_corpus_args(prep)
    prep.add_argument(
        "--tokenizer", "-t", required=True, help="tokenizer directory (or a model directory, builtin:NAME, hf:ID)"
    )
    prep.add_argument("--out", "-o", required=True, help="output shard directory")
    prep.add_argument("--shard-tokens", type=positive_int, default=1 << 24, help="tokens per shard file")
    prep.add_argument("--overwrite", action="store_true", help="replace an existing shard directory")
    prep.add_argument(
        "--clean",
        choices=["none", "c4"],
        default="none",
        help="c4: apply C4's web-text cleaning rules and deduplication before tokenizing (bertzoo.data.text.clean)",
    )

    pre = sub.add_parser(
        "pretrain",
        help="pretrain a model from a YAML config",
        epilog="Any config value can be overridden: --train.lr 5e-4 --model.preset bert-tiny",
    )
    pre.add_argument("config", nargs="?", default=None, help="YAML file (see configs/pretrain/)")
    pre.add_argument("--resume", default=None, help="'auto' (newest complete checkpoint) or a checkpoint path")

    ft = sub.add_parser(
        "finetune",
        help="fine-tune a model on a task from a YAML config",
        epilog="Any config value can be overridden: --train.lr 3e-5 --data.max_seq_len 256",
    )
    ft.add_argument("config", nargs="?", default=None, help="YAML file (see configs/finetune/)")
    ft.add_argument("--resume", default=None, help="'auto' (newest complete checkpoint) or a checkpoint path")

    di = sub.add_parser(
        "distill",
        help="distil a teacher into a smaller student (DistilBERT, TinyBERT) from a YAML config",
        epilog="Any config value can be overridden: --train.lr 1e-4 --student.num_layers 3",
    )
    di.add_argument("config", nargs="?", default=None, help="YAML file (see configs/distill/)")
    di.add_argument("--resume", default=None, help="'auto' (newest complete checkpoint of each phase) or a path")

    ev = sub.add_parser("evaluate", help="score a fine-tuned model on its dev/test split or a labelled file")
    ev.add_argument("model", help="fine-tuned model directory (OUTPUT_DIR/model of `bertzoo finetune`)")
    where = ev.add_mutually_exclusive_group()
    where.add_argument("--split", choices=["dev", "test"], default=None, help="a split of the model's own data")
    where.add_argument("--data", default=None, help="a labelled file in the training data's format")
    ev.add_argument("--out", "-o", default=None, help="write the report (metrics + tables) as JSON here")
    ev.add_argument("--batch-size", type=positive_int, default=None, help="examples per inference batch")
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")

    pr = sub.add_parser("predict", help="batch inference: JSONL in, JSONL out")
    pr.add_argument("model", help="fine-tuned model directory (OUTPUT_DIR/model of `bertzoo finetune`)")
    pr.add_argument("--input", "-i", required=True, help="JSONL file, one input object per line")
    pr.add_argument("--output", "-o", required=True, help="JSONL file to write, one prediction per line")
    pr.add_argument("--batch-size", type=positive_int, default=64, help="examples per inference batch")
    pr.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")

    gn = sub.add_parser(
        "generate",
        help="generate text: a seq2seq fine-tuned model or a left-to-right LM (GPT), JSONL in, JSONL out",
        epilog="Decoding settings: --generation.max_new_tokens 40 --generation.num_beams 4 "
        "--generation.do_sample true --generation.top_p 0.9",
    )
    gn.add_argument("model", help="a seq2seq fine-tuned model directory or a GPT checkpoint / Hugging Face GPT-2")
    gn.add_argument("--input", "-i", required=True, help="JSONL file: 'text' (seq2seq source) or 'prompt' per line")
    gn.add_argument("--output", "-o", required=True, help="JSONL file to write, one {'prediction': ...} per line")
    gn.add_argument("--batch-size", type=positive_int, default=16, help="prompts decoded together")
    gn.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")

    ex = sub.add_parser("export", help="export a model's encoder to ONNX, verified against PyTorch")
    ex.add_argument("model", help="bertzoo or Hugging Face model directory")
    ex.add_argument("out", help="output .onnx file")
    ex.add_argument("--onnx", action="store_true", required=True, help="the format (ONNX is the only one)")
    ex.add_argument("--no-verify", action="store_true", help="skip the onnxruntime comparison")

    cv = sub.add_parser("convert", help="convert a model directory between bertzoo and Hugging Face formats")
    cv.add_argument("--from", dest="src_format", required=True, choices=["hf", "bertzoo"])
    cv.add_argument("--to", dest="dst_format", required=True, choices=["hf", "bertzoo"])
    cv.add_argument("src", help="source model directory")
    cv.add_argument("dst", help="output directory (new or empty)")

    at = sub.add_parser(
        "attention",
        help="look at a model's attention: an offline HTML page (head view, model view) and PNG heat maps",
    )
    at.add_argument("model", help="model directory (bertzoo, fine-tuned or Hugging Face), builtin:NAME or hf:ID")
    at.add_argument("--text", required=True, help="the text to run the model on")
    at.add_argument("--pair", default=None, help="a second segment: [CLS] text [SEP] pair [SEP]")
    at.add_argument("--target", default=None, help="an encoder-decoder's (T5's) decoder text; --text is its source")
    at.add_argument("--out", "-o", default=None, help="write the HTML page here (e.g. view.html)")
    at.add_argument("--png", default=None, help="write PNG heat maps: a .png file or a directory (needs matplotlib)")
    at.add_argument("--layer", type=non_negative_int, default=None, help="layer (from 0): one heat map with --head")
    at.add_argument("--head", type=non_negative_int, default=None, help="head (from 0): one heat map with --layer")
    at.add_argument(
        "--order",
        type=position_list,
        default=None,
        metavar="POS,POS,...",
        help="XLNet: the query stream's factorisation order, every token position once (default: left to right)",
    )
    at.add_argument("--device", default="cpu", help="cpu, auto, cuda, cuda:N")

    kg = sub.add_parser(
        "kg-embed",
        help="train TransE entity embeddings on a knowledge graph (ERNIE's entity vectors); see docs/knowledge.md",
    )
    kg.add_argument(
        "--kg", required=True, help="wordnet, nations, kinships, umls, or a head<TAB>relation<TAB>tail file"
    )
    kg.add_argument(
        "--out", "-o", required=True, help="output directory (entity_embeddings.safetensors, entities.json)"
    )
    kg.add_argument("--dim", type=positive_int, default=100, help="embedding width")
    kg.add_argument("--epochs", type=positive_int, default=500, help="most epochs (early stopping on valid MRR)")
    kg.add_argument("--lr", type=positive_float, default=0.01, help="learning rate")
    kg.add_argument("--margin", type=positive_float, default=1.0, help="margin of the ranking loss")
    kg.add_argument("--norm", type=int, choices=[1, 2], default=2, help="distance: L1 or L2")
    kg.add_argument("--batch-size", type=positive_int, default=1024, help="triples per step")
    kg.add_argument("--seed", type=non_negative_int, default=0, help="initialisation, sampling and the split")
    kg.add_argument("--corruption", choices=["bern", "unif"], default="bern", help="which side negatives replace")
    kg.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="adam (sparse) or Bordes' sgd")
    kg.add_argument("--eval-every", type=positive_int, default=10, help="epochs between valid evaluations")
    kg.add_argument("--patience", type=positive_int, default=3, help="evaluations without improvement to stop")
    kg.add_argument("--valid-limit", type=positive_int, default=2000, help="valid triples scored (seeded sample)")
    kg.add_argument("--max-minutes", type=positive_float, default=None, help="stop training after this long")
    kg.add_argument("--nouns-only", action="store_true", help="wordnet: noun synsets only")
    kg.add_argument("--wordnet-dir", default=None, help="WordNet 3.0 dict directory (default /usr/share/wordnet)")

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


def _strip_accents(choice: str) -> bool | None:
    return {"auto": None, "yes": True, "no": False}[choice]


def cmd_tokenizer_train(args: argparse.Namespace) -> int:
    import itertools

    from bertzoo.data.text.corpus import ReadStats, read_documents
    from bertzoo.data.tokens.tokenizer import train_bpe, train_unigram, train_wordpiece

    stats = ReadStats()
    docs = read_documents(args.input, fmt=args.format, text_field=args.text_field, doc_per=args.doc_per, stats=stats)
    if args.limit_docs is not None:
        docs = itertools.islice(docs, args.limit_docs)
    model = getattr(args, "model", "wordpiece")
    vocab_size = args.vocab_size if args.vocab_size is not None else (50000 if model == "bpe" else 30000)
    if model == "bpe":
        tok = train_bpe(docs, vocab_size, min_frequency=args.min_frequency)
    elif model == "unigram":
        tok = train_unigram(
            docs, vocab_size, lowercase=not args.cased, strip_accents=_strip_accents(args.strip_accents)
        )
    else:
        tok = train_wordpiece(
            docs,
            vocab_size,
            lowercase=not args.cased,
            strip_accents=_strip_accents(args.strip_accents),
            min_frequency=args.min_frequency,
            limit_alphabet=args.limit_alphabet,
        )
    out = tok.save(args.out)
    _report_stats(stats)
    name = {"wordpiece": "WordPiece", "bpe": "byte-level BPE", "unigram": "Unigram"}[model]
    print(f"trained {name} vocabulary of {tok.vocab_size} tokens on {stats.documents} documents -> {out}")
    return 0


def _report_stats(stats) -> None:
    if getattr(stats, "bad_utf8_lines", 0):
        print(
            f"warning: {stats.bad_utf8_lines} line(s) had invalid UTF-8 (replaced); first at {stats.first_bad_utf8}",
            file=sys.stderr,
        )


# Above this share of [UNK] tokens `prepare` warns: subword vocabularies leave well under 0.1% of real text unknown.
UNK_WARN_SHARE = 0.01


def cmd_prepare(args: argparse.Namespace) -> int:
    from bertzoo.data.text.corpus import ReadStats, read_documents
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.data.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(_model_or_path(args.tokenizer))
    stats = ReadStats()
    docs = read_documents(args.input, fmt=args.format, text_field=args.text_field, doc_per=args.doc_per, stats=stats)
    cleaning = None
    if getattr(args, "clean", "none") == "c4":
        from bertzoo.data.text.clean import C4Cleaner

        cleaner = C4Cleaner()
        docs, cleaning = cleaner.clean(docs), cleaner.report
    info = prepare_shards(
        docs,
        tokenizer,
        args.out,
        shard_tokens=args.shard_tokens,
        overwrite=args.overwrite,
        stats=stats,
        cleaning=cleaning,
    )
    _report_stats(stats)
    if cleaning is not None:
        print("\n".join(cleaning.summary()))
    print(
        f"wrote {info.num_tokens:,} tokens, {info.num_sentences:,} sentences, {info.num_docs:,} documents "
        f"in {info.num_shards} shard(s) -> {args.out}"
    )
    if info.num_unk > UNK_WARN_SHARE * info.num_tokens:
        print(
            f"warning: {info.num_unk / info.num_tokens:.1%} of the tokens are [UNK]: the tokenizer's vocabulary does "
            "not cover this text (a WordPiece trained on Chinese or Japanese needs bertzoo tokenizer train "
            "--limit-alphabet above its count of distinct characters)",
            file=sys.stderr,
        )
    return 0


def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> int:
    from bertzoo.config import load_pretrain_config
    from bertzoo.train.pretrain import pretrain

    cfg = load_pretrain_config(args.config, parse_overrides(extra))
    summary = pretrain(cfg, resume=args.resume)
    print(json.dumps(summary, indent=2, default=str))
    if not summary.get("completed", True):  # stopped by SIGINT/SIGTERM or max_minutes, with a checkpoint
        print(f"to continue this run: {resume_command(getattr(args, 'argv', None))}", file=sys.stderr)
    return stopped_exit(summary.get("stop_reason"))


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


def _os_error_message(exc: OSError) -> str:
    """One line for an OSError that reached the CLI (a write or read the library did not wrap)."""
    where = f" {exc.filename}" if exc.filename else ""
    if is_disk_full(exc):
        return f"disk full while writing{where}; free space and run the command again (pretrain: with --resume auto)"
    return f"{exc.strerror or exc}:{where or ' (no file name)'}; check the path, free space and permissions"


def cmd_finetune(args: argparse.Namespace, extra: list[str]) -> int:
    from bertzoo.config import load_finetune_config
    from bertzoo.train.finetune import finetune

    cfg = load_finetune_config(args.config, parse_overrides(extra))
    summary = finetune(cfg, resume=args.resume)
    print(json.dumps(summary, indent=2, default=str))
    if not summary.get("completed", True):
        print(f"to continue this run: {resume_command(getattr(args, 'argv', None))}", file=sys.stderr)
    return stopped_exit(summary.get("stop_reason"))


def _model_or_path(spec: str) -> str:
    """A `builtin:NAME` / `hf:ID` model's local directory (its tokenizer), any other spec as given."""
    from bertzoo.loading import BUILTIN_PREFIX, HUB_PREFIX, resolve

    return str(resolve(spec)) if spec.startswith((BUILTIN_PREFIX, HUB_PREFIX)) else spec


def cmd_distill(args: argparse.Namespace, extra: list[str]) -> int:
    from bertzoo.config import load_distill_config
    from bertzoo.train.distill import distill

    cfg = load_distill_config(args.config, parse_overrides(extra))
    report = distill(cfg, resume=args.resume)
    print(json.dumps(report, indent=2, default=str))
    if "model_dir" not in report:
        print(f"to continue this run: {resume_command(getattr(args, 'argv', None))}", file=sys.stderr)
    phases = report.get("phases", {}).values()
    return stopped_exit(next((p.get("stop_reason") for p in phases if not p.get("completed", True)), None))


def _print_report(metrics: dict[str, float], report: dict[str, Any]) -> None:
    from bertzoo.metrics.classification import format_table

    for key, value in metrics.items():
        print(f"{key:>22}: {value:.4f}" if isinstance(value, float) else f"{key:>22}: {value}")
    table = report.get("per_label") or report.get("per_type")
    if isinstance(table, dict) and table:
        print()
        print(format_table(table))


def cmd_evaluate(args: argparse.Namespace) -> int:
    from bertzoo.io import write_atomic
    from bertzoo.train.finetune import evaluate_model

    result, cfg = evaluate_model(
        args.model, split=args.split, data=args.data, batch_size=args.batch_size, device=args.device
    )
    _print_report(result.metrics, result.report)
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


def cmd_predict(args: argparse.Namespace) -> int:
    from bertzoo.train.finetune import predict_file

    n = predict_file(args.model, args.input, args.output, batch_size=args.batch_size, device=args.device)
    print(f"wrote {n} prediction(s) -> {args.output}", file=sys.stderr)
    return 0


def cmd_generate(args: argparse.Namespace, extra: list[str]) -> int:
    from bertzoo.train.generate import generate_file

    settings = {}
    for key, value in parse_overrides(extra).items():
        section, _, name = key.partition(".")
        if section != "generation" or not name or "." in name:
            raise ConfigError(f"unknown option --{key}; decoding settings look like --generation.max_new_tokens 40")
        settings[name] = value
    n = generate_file(
        args.model, args.input, args.output, generation=settings, batch_size=args.batch_size, device=args.device
    )
    print(f"wrote {n} generation(s) -> {args.output}", file=sys.stderr)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from bertzoo.hub import convert_directory

    info = convert_directory(args.src, args.dst, args.src_format, args.dst_format)
    arch = f" ({info['architecture']})" if args.dst_format == "hf" else ""
    print(f"converted the {info['kind']} model {info['from']} -> {info['to']}{arch}")
    return 0


def cmd_kg_embed(args: argparse.Namespace) -> int:
    from bertzoo.knowledge.graphs import WORDNET_DIR, load_kg
    from bertzoo.train.transe import train_transe

    kg = load_kg(args.kg, nouns_only=args.nouns_only, seed=args.seed, wordnet_dir=args.wordnet_dir or WORDNET_DIR)
    print(kg.summary(), file=sys.stderr)
    result = train_transe(
        kg,
        dim=args.dim,
        epochs=args.epochs,
        lr=args.lr,
        margin=args.margin,
        batch_size=args.batch_size,
        seed=args.seed,
        norm=args.norm,
        out_dir=args.out,
        eval_every=args.eval_every,
        patience=args.patience,
        corruption=args.corruption,
        optimizer=args.optimizer,
        valid_limit=args.valid_limit,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
    )
    test = result["test"]
    scores = " ".join(f"{k} {v:.4f}" for k, v in test.items() if k != "mr")
    print(
        f"test (filtered): {scores} | best epoch {result['best_epoch']} of {result['epochs_run']} | "
        f"{result['wall_seconds']:.0f}s -> {args.out}"
    )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from bertzoo.cli.info import describe

    info = describe(args.path)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        for key, value in info.items():
            print(f"{key:>22}: {value}")
    return 0


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate config overrides (`--train.lr 5e-4`, `--data.nsp=false`, and for pretrain/finetune
    the top-level keys such as `--model DIR`) from the other arguments.

    Done before argparse sees the line: otherwise an override's value (`bert-tiny` in
    `pretrain --model.preset bert-tiny`) would be taken for the optional CONFIG argument.
    """
    import dataclasses

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


def position_list(text: str) -> list[int]:
    """An argparse `type` for `bertzoo attention --order`: token positions "4,0,8,2" (or space-separated)."""
    return [non_negative_int(p) for p in text.replace(",", " ").split()]


def cmd_attention(args: argparse.Namespace) -> int:
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.engine.devices import resolve_device
    from bertzoo.io import write_atomic
    from bertzoo.loading import load, load_encoder, read_config, resolve
    from bertzoo.visualize import attention_groups, render_html, render_png, require_matplotlib

    if not args.out and not args.png:
        raise ConfigError("bertzoo attention: say what to write: --out view.html and/or --png DIR_OR_FILE")
    if args.png:
        require_matplotlib()  # a missing matplotlib is reported before the model loads
    directory = resolve(args.model)
    # An encoder-decoder loads whole (its decoder has attention too); anything else as its encoder.
    model = load(directory)[1] if read_config(directory)[1].is_encoder_decoder else load_encoder(directory)
    model = model.to(resolve_device(args.device))
    tokenizer = Tokenizer.load(directory)
    groups = attention_groups(model, tokenizer, args.text, args.pair, target=args.target, order=args.order)
    if args.out:
        texts = {"text": args.text, "pair": args.pair, "target": args.target}
        page = render_html(groups, title=args.model, layer=args.layer, head=args.head, **texts)
        write_atomic(args.out, page)
        print(f"attention page -> {args.out}", file=sys.stderr)
    if args.png:
        # A directory gets every group's maps (an encoder-decoder has three); a .png file the first group's.
        many = not args.png.lower().endswith(".png")
        for index in range(len(groups)) if many else [0]:
            path = render_png(groups, args.png, group=index, layer=args.layer, head=args.head)
            print(f"heat map{'' if args.layer is not None else 's'} -> {path}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from bertzoo.hub import load_encoder
    from bertzoo.interop.onnx import export_onnx

    info = export_onnx(load_encoder(args.model), args.out, verify=not args.no_verify)
    check = (
        f"verified with onnxruntime (max |diff| {info['max_abs_diff']:.1e})"
        if info.get("verified")
        else (info.get("verify_skipped", "not verified"))
    )
    print(f"wrote {info['path']} ({info['bytes'] / 1e6:.1f} MB); {check}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    rest, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    try:
        args, extra = parser.parse_known_args(rest)
    except UsageError as exc:  # no traceback to show even with --debug: the command line is the problem
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    extra = overrides + extra
    args.argv = argv
    try:
        if extra and args.command not in ("pretrain", "finetune", "distill", "generate"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "tokenizer":
            return cmd_tokenizer_train(args)
        if args.command == "prepare":
            return cmd_prepare(args)
        if args.command == "pretrain":
            return cmd_pretrain(args, extra)
        if args.command == "finetune":
            return cmd_finetune(args, extra)
        if args.command == "distill":
            return cmd_distill(args, extra)
        if args.command == "evaluate":
            return cmd_evaluate(args)
        if args.command == "predict":
            return cmd_predict(args)
        if args.command == "generate":
            return cmd_generate(args, extra)
        if args.command == "convert":
            return cmd_convert(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "attention":
            return cmd_attention(args)
        if args.command == "kg-embed":
            return cmd_kg_embed(args)
        if args.command == "info":
            return cmd_info(args)
        parser.error(f"unknown command {args.command}")
    except BertzooError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)  # one line: BertzooError keeps its message on one line
        return EXIT_USAGE
    except OSError as exc:  # disk full, permissions, I/O errors: the environment, not a bug in bertzoo
        if args.debug:
            raise
        print("error: " + " ".join(_os_error_message(exc).split()), file=sys.stderr)
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
