"""`python -m bertzoo.cli.annotate SHARDS [ANNOTATIONS]`: write the unit flags of a shard directory.

The word, phrase and entity boundaries that whole-word, span and knowledge (ERNIE) masking read
(`bertzoo.data.tokens.annotate`). Pretraining computes them on first use, so this command is for doing it
ahead of time, or again with other annotations.
"""

from __future__ import annotations

import argparse
import json
import sys

from bertzoo.data.tokens.annotate import annotate_shards
from bertzoo.errors import DataError


def main(argv: list[str] | None = None) -> int:
    """`python -m bertzoo.cli.annotate SHARDS [ANNOTATIONS]`: write the unit flags of a shard directory."""
    parser = argparse.ArgumentParser(prog="python -m bertzoo.cli.annotate", description=main.__doc__)
    parser.add_argument("shards", help="shard directory written by bertzoo prepare")
    parser.add_argument(
        "annotations",
        nargs="?",
        default="auto",
        help="builtin:peoples-daily, a word/TAG file, a lexicon file, jieba, chars or auto (default)",
    )
    args = parser.parse_args(argv)
    try:
        flags = annotate_shards(args.shards, args.annotations, progress=True)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(flags.meta["counts"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
