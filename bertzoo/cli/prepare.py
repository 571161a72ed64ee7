"""`bertzoo prepare`: a corpus tokenized once into memory-mapped shards."""

from __future__ import annotations

import argparse
import sys

from bertzoo.cli.common import add_corpus_args, model_or_path, positive_int, report_stats

# Above this share of [UNK] tokens `prepare` warns: subword vocabularies leave well under 0.1% of real text unknown.
UNK_WARN_SHARE = 0.01


def add_parser(sub) -> None:
    prep = sub.add_parser("prepare", help="tokenize a corpus once into memory-mapped shards")
    add_corpus_args(prep)
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
    prep.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.data.text.corpus import ReadStats, read_documents
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.data.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(model_or_path(args.tokenizer))
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
        source=", ".join(args.input),  # meta.json's record of the corpus: a model card's datasets and language
        cleaning=cleaning,
    )
    report_stats(stats)
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
