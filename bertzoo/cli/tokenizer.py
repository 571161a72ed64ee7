"""`bertzoo tokenizer train`: a WordPiece, byte-level BPE or Unigram vocabulary trained on a corpus."""

from __future__ import annotations

import argparse

from bertzoo.cli.common import add_corpus_args, int_range, non_negative_int, positive_int, report_stats


def add_parser(sub) -> None:
    from bertzoo.data.tokens.train_tokenizer import LIMIT_ALPHABET, MAX_VOCAB_SIZE

    tok = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="tok_command", required=True)
    tt = tok.add_parser("train", help="train a WordPiece, byte-level BPE or Unigram vocabulary on a corpus")
    add_corpus_args(tt)
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
    tt.set_defaults(run=run)


def _strip_accents(choice: str) -> bool | None:
    return {"auto": None, "yes": True, "no": False}[choice]


def run(args: argparse.Namespace) -> int:
    import itertools

    from bertzoo.data.text.corpus import ReadStats, read_documents
    from bertzoo.data.tokens.train_tokenizer import train_bpe, train_unigram, train_wordpiece

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
    report_stats(stats)
    name = {"wordpiece": "WordPiece", "bpe": "byte-level BPE", "unigram": "Unigram"}[model]
    print(f"trained {name} vocabulary of {tok.vocab_size} tokens on {stats.documents} documents -> {out}")
    return 0
