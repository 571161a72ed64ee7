"""C4 cleaning (`bertzoo.data.text.clean`) rule by rule on hand-made pages, deduplication of three-sentence
spans, and `bertzoo prepare --clean c4`. Expected texts and counts are written out by hand."""

from __future__ import annotations

import json

import pytest

from bertzoo.cli import main
from bertzoo.data.text.clean import LINE_RULES, PAGE_RULES, C4Cleaner, C4Rules, CleanReport, clean_c4
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.errors import ConfigError, DataError


def line_counts(**nonzero: int) -> dict[str, int]:
    return {**dict.fromkeys(LINE_RULES, 0), **nonzero}


def page_counts(**nonzero: int) -> dict[str, int]:
    return {**dict.fromkeys(PAGE_RULES, 0), **nonzero}


def clean(docs: list[str], **rules) -> tuple[list[str], CleanReport]:
    report = CleanReport()
    return list(clean_c4(docs, C4Rules(**rules), report)), report


def test_line_rules():
    page = "\n".join(
        [
            "Home | About | Contact",  # no terminal punctuation
            "Click here.",  # 2 words
            "The river flows through the old town.",
            "",  # blank: skipped, not counted
            "Please enable JavaScript to view this site properly.",
            "By using this site you agree to our Terms of Use.",
            "It was founded in 1850 by settlers from the east[1].",  # citation mark deleted
            "  The bridge was rebuilt twice. It still stands today.  ",
            "Read more about the history of the town...",  # ellipsis
            "x" * 1001 + " is a very long word in this line.",
            "She said it was \u201cthe best view in the whole valley.\u201d",  # closing curly quote
            "Visitors come from far away for the fair!",
            "Our site uses cookies to improve your experience.",
        ]
    )
    out, report = clean([page])
    assert out == [
        "The river flows through the old town.\n"
        "It was founded in 1850 by settlers from the east.\n"
        "The bridge was rebuilt twice. It still stands today.\n"
        "She said it was \u201cthe best view in the whole valley.\u201d\n"
        "Visitors come from far away for the fair!"
    ]
    assert report.lines_removed == line_counts(
        too_long_word=1, no_terminal_punctuation=2, too_few_words=1, javascript=1, policy=2
    )
    assert report.documents_removed == page_counts()
    assert (report.documents_in, report.documents_out, report.lines_in, report.lines_out) == (1, 1, 12, 5)


@pytest.mark.parametrize(
    "phrase",
    ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies"],
)
def test_each_policy_phrase_drops_its_line(phrase):
    good = "The first line is a sentence.\nThe second line is one too.\nThe third line ends the page."
    out, report = clean([f"Please read the {phrase.upper()} of this site.\n{good}"])
    assert out == [good] and report.lines_removed["policy"] == 1


def test_page_rules():
    good = "The first line is a sentence.\nThe second line is one too.\nThe third line ends the page."
    docs = [
        good + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        "The function returns { a value } to the caller.\n" + good,
        "var settings = {\n" + good,  # the brace is on a line without end mark: as in C4's code, kept
        "Only two sentences here. Both are fine.\nMenu",
        "A short page. With just one line. But three sentences.",
    ]
    out, report = clean(docs)
    assert out == [good, "A short page. With just one line. But three sentences."]
    assert report.documents_removed == page_counts(lorem_ipsum=1, curly_brace=1, too_few_sentences=1)
    assert report.lines_removed == line_counts(no_terminal_punctuation=2)
    assert (report.documents_in, report.documents_out) == (5, 2)


def test_word_and_sentence_minimums_are_parameters():
    page = "Click here now.\nRead this too.\nAnd this one."
    good = "The first line is a sentence.\nThe second line is one too.\nThe third line ends the page."
    out, report = clean([page, good])  # C4's code: 5 words per line
    assert out == [good] and report.lines_removed["too_few_words"] == 3
    out, _ = clean([page, good], min_words_per_line=3)  # the paper's 3
    assert out == [page, good]
    out, report = clean([page, good + " And a fourth one here."], min_words_per_line=3, min_sentences=4)
    assert out == [good + " And a fourth one here."] and report.documents_removed["too_few_sentences"] == 1
    with pytest.raises(ConfigError, match="min_words_per_line must be an integer >= 0"):
        C4Rules(min_words_per_line=-1)


# Sentences of at least 5 words, one per "S" line unless joined.
S = {
    1: "The sun rose over the hills.",
    2: "Birds began to sing very loudly.",
    3: "A farmer walked to his field.",
    4: "He carried a heavy basket there.",
    5: "The day grew warm and bright.",
    6: "Children ran along the dusty road.",
    7: "Rain came late in the evening.",
    8: "The market opened at nine sharp.",
    9: "Traders set out fruit and bread.",
    10: "Buyers argued over every price.",
    11: "A dog slept under the cart.",
    12: "Nobody woke it before the noon.",
    13: "The bells rang across the valley.",
    14: "Everyone went home for the night.",
}


def join(*ids: int) -> str:
    return " ".join(S[i] for i in ids)


def test_three_sentence_spans_are_kept_at_their_first_occurrence():
    docs = [
        join(1, 2, 3, 4),
        # S1 S2 S3 was seen: its sentences go; the line that held only them goes with them.
        "\n".join([join(5, 6), join(1, 2, 3), join(7)]),
        # Compared lower-cased, whitespace collapsed: nothing is left, the page is dropped.
        "THE SUN ROSE OVER THE HILLS.  Birds began   to sing very loudly.\nA farmer walked to his field.",
        # Repeated inside one page: the second copy goes.
        "\n".join([join(8, 9, 10), join(8, 9, 10)]),
        # Part of a line: the rest of the line is kept, joined by spaces.
        "\n".join([join(11, 1, 2, 3, 12), join(13, 14)]),
    ]
    out, report = clean(docs)
    assert out == [
        join(1, 2, 3, 4),
        "\n".join([join(5, 6), join(7)]),
        join(8, 9, 10),
        "\n".join([join(11, 12), join(13, 14)]),
    ]
    assert report.sentences_deduplicated == 3 + 3 + 3 + 3
    assert report.lines_removed == line_counts(duplicate_span=2)
    assert report.documents_removed == page_counts(too_few_sentences_after_dedupe=1)
    assert (report.documents_in, report.documents_out, report.lines_in, report.lines_out) == (5, 4, 10, 6)


def test_a_dropped_page_does_not_claim_its_spans():
    """Spans are remembered only from kept pages, so the next copy is the first surviving one."""
    docs = [
        join(1, 2, 3) + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        join(1, 2, 3),
        join(1, 2, 3),
    ]
    out, report = clean(docs)
    assert out == [join(1, 2, 3)]
    assert report.documents_removed == page_counts(lorem_ipsum=1, too_few_sentences_after_dedupe=1)


def test_deduplication_can_be_turned_off():
    out, report = clean([join(1, 2, 3), join(1, 2, 3)], dedupe_sentences=0)
    assert out == [join(1, 2, 3)] * 2 and report.sentences_deduplicated == 0


def test_cleaning_everything_away_is_an_error():
    with pytest.raises(DataError, match="c4 cleaning removed all 2 documents \\(too_few_sentences 2\\)"):
        list(C4Cleaner().clean(["Menu", "Home | About"]))


def test_prepare_clean_c4(tmp_path, synthetic_tokenizer, capsys):
    tok = synthetic_tokenizer.save(tmp_path / "tok")
    corpus = tmp_path / "web.txt"
    blocks = [
        "\n".join([join(1, 2), "Share this page", join(3, 4)]),
        join(5, 6, 7) + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        "\n".join([join(1, 2), join(3, 4)]),  # a copy of the first page
        join(8, 9, 10),
    ]
    corpus.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    out = tmp_path / "shards"
    args = ["prepare", "-i", str(corpus), "-t", str(tok), "-o", str(out), "--clean", "c4"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "c4 cleaning kept 2 of 4 documents and 3 of 8 lines" in printed
    assert "lorem_ipsum 1" in printed and "too_few_sentences_after_dedupe 1" in printed
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert meta["cleaning"]["documents_removed"] == page_counts(lorem_ipsum=1, too_few_sentences_after_dedupe=1)
    assert meta["cleaning"]["lines_removed"] == line_counts(no_terminal_punctuation=1)
    corpus_shards = ShardedCorpus(out)
    assert corpus_shards.num_docs == 2 and corpus_shards.num_sentences == 4 + 3

    assert main(["prepare", "-i", str(corpus), "-t", str(tok), "-o", str(tmp_path / "plain")]) == 0
    assert "cleaning" not in capsys.readouterr().out
    assert json.loads((tmp_path / "plain" / "meta.json").read_text(encoding="utf-8"))["cleaning"] is None
    assert ShardedCorpus(tmp_path / "plain").num_docs == 4


def test_prepare_clean_refuses_unknown_rules(tmp_path, capsys):
    code = main(["prepare", "-i", "c.txt", "-t", "tok", "-o", str(tmp_path / "o"), "--clean", "c5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "invalid choice: 'c5'" in err[0]
