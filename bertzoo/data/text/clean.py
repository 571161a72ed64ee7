"""C4's cleaning rules for web text (Raffel et al. 2020, section 2.2), as `bertzoo prepare --clean c4`.

The rules follow the code that built the released C4, TensorFlow Datasets' `c4_utils.clean_page`, in
its order, line by line (each line stripped; blank lines are skipped and not counted):

1. `too_long_word`: a line with a word longer than `max_word_length` (1000) characters is dropped.
2. Wikipedia-style citation marks (`[12]`, `[edit]`, `[citation needed]`) are deleted from the line.
3. `no_terminal_punctuation`: a line must end in `. ! ? "` (C4's marks) or a closing curly quote
   `”` / `’` (added here; C4 had only the ASCII quote), and not in an ellipsis `...`.
4. `too_few_words`: a line needs `min_words_per_line` words. The default is 5, what C4's code used;
   the paper's text says 3 (and 5 sentences where the code has 3): pass `min_words_per_line=3` for it.
5. `lorem_ipsum` (page): a kept line containing "lorem ipsum" drops the whole page.
6. `javascript`: a line containing "javascript" is dropped.
7. `curly_brace` (page): a kept line containing "{" drops the whole page.
8. `policy`: a line containing "terms of use", "privacy policy", "cookie policy", "uses cookies",
   "use of cookies" or "use cookies" is dropped.
9. `too_few_sentences` (page): a page with fewer than `min_sentences` (3) sentences in its kept lines is
   dropped (sentences as `corpus.split_sentences` cuts them; C4 used NLTK's punkt, which needs a
   download).

As in C4's code, the page rules 5 and 7 look only at lines that passed rules 1-4 (and 6 for the
brace): "{" in a line without terminal punctuation does not drop the page.

Deduplication (`duplicate_span`) follows the paper: "we discarded all but one of any three-sentence
span occurring more than once in the data set". Pages are read in order; a page's sentences (across
its kept lines) form spans of `dedupe_sentences` (3) consecutive sentences, compared lower-cased with
whitespace collapsed; the sentences of every span already seen in an earlier kept page, or earlier in
the same page, are removed (repeated until none is left, since removing sentences forms new spans), a
line left without sentences disappears, and a page left with fewer than `min_sentences` sentences is
dropped (`too_few_sentences_after_dedupe`, as C4's code re-checks after its line deduplication). So the
first surviving occurrence of each span is kept. C4's code deduplicated whole lines instead; spans
are what the paper describes. Memory: one 64-bit hash per kept span.

Not applied, because nothing offline provides them: the "List of Dirty, Naughty, Obscene or Otherwise
Bad Words" page filter (no packaged copy of the list is installed or a dependency of bertzoo) and
langdetect's English filter (langdetect is not installed; NLTK is, without models). Clean with
another tool first if you need them.

`CleanReport` counts, per rule, the lines and the pages removed (lines removed by a line rule count
even if their page is dropped later).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from bertzoo.data.text.corpus import split_sentences
from bertzoo.errors import ConfigError, DataError

__all__ = [
    "CLEANERS",
    "END_MARKS",
    "LINE_RULES",
    "PAGE_RULES",
    "POLICY_PHRASES",
    "C4Cleaner",
    "C4Rules",
    "CleanReport",
    "clean_c4",
]

END_MARKS = (".", "!", "?", '"', "\u201d", "\u2019")
ELLIPSIS = "..."
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")

LINE_RULES = ("too_long_word", "no_terminal_punctuation", "too_few_words", "javascript", "policy", "duplicate_span")
PAGE_RULES = ("lorem_ipsum", "curly_brace", "too_few_sentences", "too_few_sentences_after_dedupe")
CLEANERS = ("none", "c4")


@dataclass
class CleanReport:
    """What cleaning did: documents and (non-blank) lines in and out, and per rule what it removed."""

    rules: str = "c4"
    documents_in: int = 0
    documents_out: int = 0
    lines_in: int = 0
    lines_out: int = 0
    sentences_deduplicated: int = 0
    lines_removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LINE_RULES, 0))
    documents_removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PAGE_RULES, 0))

    def summary(self) -> list[str]:
        """The report as a few printable lines."""
        return [
            f"{self.rules} cleaning kept {self.documents_out:,} of {self.documents_in:,} documents and "
            f"{self.lines_out:,} of {self.lines_in:,} lines",
            "  documents removed: " + ", ".join(f"{k} {v:,}" for k, v in self.documents_removed.items()),
            "  lines removed: " + ", ".join(f"{k} {v:,}" for k, v in self.lines_removed.items()),
            f"  sentences removed as repeated spans: {self.sentences_deduplicated:,}",
        ]


@dataclass(frozen=True)
class C4Rules:
    """The parameters of the rules (see the module doc); the defaults are C4's code."""

    min_words_per_line: int = 5
    min_sentences: int = 3
    max_word_length: int = 1000
    dedupe_sentences: int = 3  # sentences per deduplicated span; 0 turns deduplication off
    end_marks: tuple[str, ...] = END_MARKS
    strip_citations: bool = True

    def __post_init__(self) -> None:
        for name in ("min_words_per_line", "min_sentences", "max_word_length", "dedupe_sentences"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"cleaning rule {name} must be an integer >= 0, got {value!r}")
        if not self.end_marks or not all(isinstance(m, str) and m for m in self.end_marks):
            raise ConfigError(f"cleaning rule end_marks must be non-empty strings, got {self.end_marks!r}")


def _span_key(sentences: list[str]) -> int:
    text = "\n".join(" ".join(s.lower().split()) for s in sentences)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class C4Cleaner:
    """Applies `C4Rules` to a stream of documents (`clean(documents)` or calling the cleaner), keeping the
    span hashes of the pages kept so far for deduplication and counting into `report`."""

    def __init__(self, rules: C4Rules | None = None, report: CleanReport | None = None) -> None:
        self.rules = rules if rules is not None else C4Rules()
        self.report = report if report is not None else CleanReport()
        self._seen: set[int] = set()

    def __call__(self, documents: Iterable[str]) -> Iterator[str]:
        return self.clean(documents)

    def clean(self, documents: Iterable[str]) -> Iterator[str]:
        """The kept documents, cleaned, in order; a DataError at the end if cleaning removed them all."""
        report = self.report
        before_in, before_out = report.documents_in, report.documents_out
        for doc in documents:
            report.documents_in += 1
            cleaned = self.clean_document(doc)
            if cleaned is not None:
                report.documents_out += 1
                report.lines_out += cleaned.count("\n") + 1
                yield cleaned
        if report.documents_in > before_in and report.documents_out == before_out:
            removed = ", ".join(f"{k} {v}" for k, v in report.documents_removed.items() if v)
            raise DataError(
                f"c4 cleaning removed all {report.documents_in - before_in} documents ({removed or 'no text left'}); "
                "C4's rules expect web pages of full sentences: check the corpus, or prepare without --clean"
            )

    def clean_document(self, text: str) -> str | None:
        """One page cleaned (its kept lines joined by newlines), or None when a page rule drops it."""
        lines = self.filter_lines(text)
        if lines is None:
            return None
        return self.deduplicate(lines)

    def filter_lines(self, text: str) -> list[tuple[str, list[str]]] | None:
        """The kept lines of a page with their sentences, or None when a page rule drops the page."""
        rules, removed, dropped = self.rules, self.report.lines_removed, self.report.documents_removed
        kept: list[tuple[str, list[str]]] = []
        num_sentences = 0
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            self.report.lines_in += 1
            if any(len(word) > rules.max_word_length for word in line.split()):
                removed["too_long_word"] += 1
                continue
            if rules.strip_citations:
                line = CITATION.sub("", line)
            if not line.endswith(rules.end_marks) or line.endswith(ELLIPSIS):
                removed["no_terminal_punctuation"] += 1
                continue
            if len(line.split()) < rules.min_words_per_line:
                removed["too_few_words"] += 1
                continue
            lower = line.lower()
            if "lorem ipsum" in lower:
                dropped["lorem_ipsum"] += 1
                return None
            if "javascript" in lower:
                removed["javascript"] += 1
                continue
            if "{" in line:
                dropped["curly_brace"] += 1
                return None
            if any(p in lower for p in POLICY_PHRASES):
                removed["policy"] += 1
                continue
            sentences = split_sentences(line)
            num_sentences += len(sentences)
            kept.append((line, sentences))
        if num_sentences < rules.min_sentences or not kept:
            dropped["too_few_sentences"] += 1
            return None
        return kept

    def deduplicate(self, lines: list[tuple[str, list[str]]]) -> str | None:
        """Remove the sentences of repeated spans (see the module doc); the page text, or None if too
        few sentences are left. A line that lost sentences is its remaining sentences joined by spaces."""
        n = self.rules.dedupe_sentences
        if n == 0:
            return "\n".join(text for text, _ in lines)
        items = [(i, s) for i, (_, sents) in enumerate(lines) for s in sents]  # (line number, sentence)
        total = len(items)
        while True:
            local: set[int] = set()
            drop = [False] * len(items)
            for start in range(len(items) - n + 1):
                key = _span_key([s for _, s in items[start : start + n]])
                if key in self._seen or key in local:
                    drop[start : start + n] = [True] * n
                else:
                    local.add(key)
            if not any(drop):
                break
            items = [item for item, d in zip(items, drop, strict=True) if not d]
        self.report.sentences_deduplicated += total - len(items)
        if len(items) < self.rules.min_sentences:
            self.report.documents_removed["too_few_sentences_after_dedupe"] += 1
            return None
        self._seen |= local
        out: list[list[str]] = [[] for _ in lines]
        for i, s in items:
            out[i].append(s)
        self.report.lines_removed["duplicate_span"] += sum(1 for line in out if not line)
        texts = [
            text if len(kept) == len(sents) else " ".join(kept) for (text, sents), kept in zip(lines, out, strict=True)
        ]
        return "\n".join(t for t, kept in zip(texts, out, strict=True) if kept)


def clean_c4(
    documents: Iterable[str], rules: C4Rules | None = None, report: CleanReport | None = None
) -> Iterator[str]:
    """`documents` cleaned by C4's rules (`C4Cleaner`); counts go into `report` as they are read."""
    return C4Cleaner(rules, report).clean(documents)
