"""Text pairs for embedding fine-tuning (task: embedding): one record becomes one example of the three layouts
sentence-transformers trains on.

* pairs:        {"query", "positive"}: the positive must be picked out of the batch;
* triplets:     {"query", "positive", "negative"}: the negative is a hard negative beside the batch;
* scored pairs: {"text", "text_pair", "score"}: a similarity (STS) to rank pairs by.

sentence-transformers' column names are read too: `anchor` for the query, `sentence1` / `sentence2` for a
scored pair's texts and `label` for its score. Every example becomes {"query", "positive", optional
"negative", optional "score", "source"}; `check_layout` refuses a file that mixes layouts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bertzoo.errors import DataError

__all__ = ["LAYOUT_HELP", "check_layout", "layout_of", "pair_example"]

LAYOUT_HELP = (
    'write {"query": ..., "positive": ...} (optionally "negative": ...) per line, or {"text": ..., '
    '"text_pair": ..., "score": ...} for scored pairs'
)
_QUERY = ("query", "anchor", "text", "sentence1")
_POSITIVE = ("positive", "text_pair", "sentence2")
_SCORE = ("score", "label")


def _first(record: dict[str, Any], names: Sequence[str]) -> tuple[str, Any] | None:
    for name in names:
        if name in record and record[name] is not None:
            return name, record[name]
    return None


def _text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {name!r} must be a non-empty string; {LAYOUT_HELP}")
    return value


def pair_example(record: dict[str, Any], where: str) -> dict[str, Any]:
    """{"query", "positive", optional "negative" / "score", "source"} from one record (see the module doc).
    DataError naming `where` for a missing or empty text or a score that is not a finite number."""
    query, positive = _first(record, _QUERY), _first(record, _POSITIVE)
    if query is None or positive is None:
        raise DataError(f"{where}: needs a query and a positive text; {LAYOUT_HELP}")
    example: dict[str, Any] = {
        "query": _text(query[1], query[0], where),
        "positive": _text(positive[1], positive[0], where),
        "source": where,
    }
    if record.get("negative") is not None:
        example["negative"] = _text(record["negative"], "negative", where)
    score = _first(record, _SCORE)
    if score is not None:
        try:
            value = float(score[1])
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(score[1], bool) or not math.isfinite(value):
            raise DataError(f"{where}: {score[0]!r} must be a finite number, got {score[1]!r}")
        example["score"] = value
    if "negative" in example and "score" in example:
        raise DataError(f"{where}: a scored pair takes no negative; {LAYOUT_HELP}")
    return example


def layout_of(example: dict[str, Any]) -> str:
    """ "scored", "triplets" or "pairs"."""
    return "scored" if "score" in example else "triplets" if "negative" in example else "pairs"


def check_layout(examples: Sequence[dict[str, Any]]) -> str:
    """The one layout every example shares; DataError naming the first example that differs."""
    if not examples:
        raise DataError(f"no examples; {LAYOUT_HELP}")
    layout = layout_of(examples[0])
    for ex in examples:
        if layout_of(ex) != layout:
            raise DataError(
                f"{ex.get('source', 'an example')} is a {layout_of(ex)} example among {layout}; "
                "give every line of a file the same fields"
            )
    return layout
