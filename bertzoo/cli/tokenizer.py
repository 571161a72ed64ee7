"""`bertzoo tokenizer train`: a WordPiece, byte-level BPE or Unigram vocabulary trained on a corpus;
`bertzoo tokenizer extend`: a checkpoint with a domain's most useful missing tokens added (bertzoo.train.extend)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

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
    _add_extend_parser(tok)


def _add_extend_parser(tok) -> None:
    ex = tok.add_parser(
        "extend",
        help="add a corpus's most useful missing tokens to a checkpoint's vocabulary and grow its word table",
        description="Characters the tokenizer maps to [UNK] first (by count), then the words it splits into the most "
        "pieces (by tokens saved); existing words keep their exact segmentation. Writes a model directory that "
        "prepare --tokenizer, pretrain --init and convert read.",
    )
    ex.add_argument("model", help="model directory (bertzoo or Hugging Face), builtin:NAME or hf:ORG/NAME")
    add_corpus_args(ex, names=("--corpus", "--input", "-i"), example="builtin:chinese-sentiment")
    ex.add_argument("--add", type=positive_int, default=None, metavar="N", help="how many mined tokens to add")
    ex.add_argument(
        "--tokens", default=None, metavar="FILE", help="tokens to add, one per line (instead of or with --add)"
    )
    ex.add_argument("--out", "-o", required=True, metavar="DIR", help="output model directory (new or empty)")
    ex.add_argument(
        "--min-count", type=positive_int, default=2, metavar="N", help="a word is a candidate from N occurrences on"
    )
    ex.add_argument("--window", type=positive_int, default=5, help="co-occurrence window of the count-based vectors")
    ex.add_argument("--seed", type=non_negative_int, default=0, help="seed of the SVD and of fallback rows' noise")
    ex.set_defaults(run=run_extend)


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


def run_extend(args: argparse.Namespace) -> int:
    from bertzoo.data.text.corpus import ReadStats, read_documents
    from bertzoo.train.extend import STARTS, extend_model

    reads: list[ReadStats] = []  # one per pass over the corpus; the first is reported

    def documents() -> Iterator[str]:
        reads.append(ReadStats())
        return read_documents(
            args.input, fmt=args.format, text_field=args.text_field, doc_per=args.doc_per, stats=reads[-1]
        )

    record = extend_model(
        args.model,
        documents,
        args.out,
        add=args.add,
        tokens_file=args.tokens,
        corpus=list(args.input),
        min_count=args.min_count,
        window=args.window,
        seed=args.seed,
    )
    report_stats(reads[0])
    counts, size = record["counts"], record["vocab_size"]
    shown = ", ".join(t["token"] for t in record["tokens"][:12]) + (" ..." if len(record["tokens"]) > 12 else "")
    lines = [
        f"added {counts['added']} tokens to {args.model} ({size['before']:,} -> {size['after']:,}): "
        f"{counts['chars']} [UNK] character(s), {counts['words']} word(s) "
        f"(of {counts['candidates']['chars']} + {counts['candidates']['words']} candidates): {shown}",
        "new rows: " + ", ".join(f"{counts[s]} {s}" for s in STARTS),
    ]
    if record["dropped"]:
        lines.append(f"left out {len(record['dropped'])} word(s) that would change how other words split")
    lines.append(f"wrote {args.out}")
    print("\n".join(lines), file=sys.stderr)
    summary = {key: value for key, value in record.items() if key != "tokens"}
    print(json.dumps({"out": str(args.out), **summary}))
    return 0
