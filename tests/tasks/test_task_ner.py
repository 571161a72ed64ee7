"""Token classification: first-sub-word alignment, scheme conversion, mapping predictions back to
words (long sentences in overlapping windows), entity F1, training with the linear and BiLSTM heads, prediction."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import DataError
from bertzoo.tasks import TASKS
from bertzoo.tasks.token_classification import (
    TokenClassificationTask,
    convert_scheme,
    split_words,
    tags_for_types,
    word_windows,
)

from helpers.tasks import LogitModel, fell, make_cfg, single_thread, small_tokenizer, tiny_encoder, train_steps

NAMES = ["alice", "bob", "carol", "dave", "johanson"]
CITIES = ["paris", "london", "berlin", "madrid", "kyoto"]
FILLER = ["the", "a", "went", "to", "saw", "in", "and", "then", "happily"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    return small_tokenizer(
        tmp_path_factory.mktemp("vocab"),
        [*NAMES[:-1], *CITIES, *FILLER, "new", "lives", "today", "again", "anna", "lee", "visited", "江", "泽", "民"],
    )


def ner_examples(n: int, seed: int = 0) -> list[dict]:
    r = random.Random(seed)
    out = []
    for _ in range(n):
        tokens, labels = [], []
        for _ in range(r.randint(3, 8)):
            kind = r.random()
            if kind < 0.2:
                tokens.append(r.choice(NAMES))
                labels.append("B-PER")
            elif kind < 0.4:
                tokens += ["new", r.choice(CITIES)] if r.random() < 0.3 else [r.choice(CITIES)]
                labels += ["B-LOC", "I-LOC"] if len(tokens) > len(labels) + 1 else ["B-LOC"]
            else:
                tokens.append(r.choice(FILLER))
                labels.append("O")
        out.append({"tokens": tokens, "labels": labels})
    return out


def test_registered():
    assert TASKS["token_classification"] is TokenClassificationTask


def test_scheme_conversion():
    assert convert_scheme(["B-PER", "I-PER", "O", "B-LOC"], "IOBES") == ["B-PER", "E-PER", "O", "S-LOC"]
    assert convert_scheme(["I-PER", "I-PER", "I-LOC"], "BIO") == ["B-PER", "I-PER", "B-LOC"]  # IOB1 in
    assert convert_scheme(["S-PER", "B-LOC", "E-LOC"], "BIO") == ["B-PER", "B-LOC", "I-LOC"]
    assert tags_for_types(["PER"], "IOBES") == ["O", "B-PER", "I-PER", "E-PER", "S-PER"]


def test_first_subword_alignment(tok):
    task = TokenClassificationTask(make_cfg("token_classification", data={"labels": ["PER", "LOC"]}), tok)
    assert task.label_names() == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    words = ["Johanson", "lives", "in", "Berlin", "!"]
    assert len(tok.tokenize("Johanson")) > 1  # the test needs a word split into pieces
    f = task.featurize([{"tokens": words, "labels": ["B-PER", "O", "O", "B-LOC", "O"]}], "train").features[0]
    ids = f["input_ids"].tolist()
    pieces = [tok.tokenize(w) for w in words]
    assert ids == [tok.cls_id, *[tok.token_to_id(p) for ps in pieces for p in ps], tok.sep_id]
    starts = np.cumsum([1] + [len(p) for p in pieces[:-1]])
    assert f["word_starts"].tolist() == starts.tolist()
    expected = np.full(len(ids), IGNORE_INDEX)
    expected[starts] = [1, 0, 0, 3, 0]
    assert f["labels"].tolist() == expected.tolist()  # specials and continuation pieces: -100
    # A word the normalizer erases still gets a position ([UNK]), so words and labels stay aligned.
    g = task.featurize([{"tokens": ["in", "\u200b", "Berlin"], "labels": ["O", "O", "B-LOC"]}], "train").features[0]
    assert g["input_ids"][2] == tok.unk_id and g["word_starts"].tolist() == [1, 2, 3]
    assert g["labels"][3] == task.label_names().index("B-LOC")
    empty = task.featurize([{"tokens": [], "labels": []}], "train").features[0]
    assert empty["input_ids"].tolist() == [tok.cls_id, tok.sep_id] and len(empty["word_starts"]) == 0


def test_iobes_labels_and_unknown_types(tok, tmp_path):
    train = tmp_path / "train.conll"
    train.write_text("Alice B-PER\nin O\nParis B-LOC\n\nBob I-PER\n", encoding="utf-8")
    dev = tmp_path / "dev.conll"
    dev.write_text("Acme B-ORG\n", encoding="utf-8")
    cfg = make_cfg("token_classification", data={"train": str(train), "dev": str(dev), "label_scheme": "IOBES"})
    task = TokenClassificationTask(cfg, tok)
    ex = task.load("train")
    assert ex[0]["labels"] == ["S-PER", "O", "S-LOC"] and ex[1]["labels"] == ["S-PER"]
    assert task.label_names() == ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    with pytest.raises(DataError, match=r"dev.conll:1: entity type 'ORG' is not among the types seen in train"):
        task.load("dev")
    bad = tmp_path / "bad.conll"
    bad.write_text("x PER\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.conll:1: tag 'PER' is not O or B-/I-/E-/S-TYPE"):
        TokenClassificationTask(make_cfg("token_classification", data={"train": str(bad)}), tok).load("train")


def _label_logits(task: TokenClassificationTask):
    """Logits that predict label (input id % number of labels) at every position."""
    n = len(task.label_names())
    return lambda batch: torch.nn.functional.one_hot(batch.input_ids % n, n).float()


def test_long_sentences_are_windowed_and_merged_by_context(tok):
    """max_seq_len 6 = 4 word pieces per window, overlap 2: 8 one-piece words give windows [0, 4),
    [2, 6), [4, 8). Logits that depend on the position in the window show which window each word was
    read from: the one where it has most context on its poorer side (hand-derived below)."""
    task = TokenClassificationTask(
        make_cfg("token_classification", data={"labels": ["PER", "LOC"], "max_seq_len": 6, "doc_stride": 2}), tok
    )
    labels = task.label_names()
    n = len(labels)
    words = ["alice", "went", "to", "paris", "and", "then", "saw", "bob"]
    gold = ["B-PER", "O", "O", "B-LOC", "O", "O", "O", "B-PER"]
    examples = [{"tokens": words, "labels": gold}, {"tokens": ["anna"], "labels": ["B-PER"]}]
    ds = task.featurize(examples, "dev")
    assert [f["word_range"] for f in ds.features] == [(0, 4), (2, 6), (4, 8), (0, 1)]
    assert ds.example_ids.tolist() == [0, 0, 0, 1]
    assert all(len(f["input_ids"]) <= 6 for f in ds.features)
    for f in ds.features[:3]:  # every window labels each of its words at the word's piece
        w0, w1 = f["word_range"]
        assert f["word_starts"].tolist() == list(range(1, w1 - w0 + 1))
        assert f["labels"][f["word_starts"]].tolist() == [labels.index(t) for t in gold[w0:w1]]
    model = LogitModel(
        lambda batch: (
            torch.nn.functional.one_hot(torch.arange(batch.input_ids.size(1)) % n, n)
            .float()
            .expand(batch.input_ids.size(0), -1, -1)
        )
    )
    result = task.evaluate(model, examples, ds)
    #          word:  0  1  2  3  4  5  6  7   (window 0 for words 0-2, window 1 for 3-4, window 2 for 5-7)
    read_at = [1, 2, 3, 2, 3, 2, 3, 4]
    assert result.predictions[0]["labels"] == [labels[pos % n] for pos in read_at]
    assert result.predictions[1]["labels"] == [labels[1 % n]]
    assert result.metrics["truncated_words"] == 0


def test_word_windows_cover_fit_and_overlap():
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.integers(1, 7, size=rng.integers(1, 40))  # pieces per word; some longer than small budgets
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        n_pieces = int(sizes.sum())
        budget = int(rng.integers(1, 30))
        overlap = int(rng.integers(0, budget // 2 + 1))
        windows = word_windows(starts, n_pieces, budget, overlap)
        assert windows[0][0] == 0 and windows[-1][1] == len(sizes)
        for (a0, a1), (b0, b1) in zip(windows, windows[1:], strict=False):
            assert a0 < b0 <= a1 < b1  # progress, no gap
        for w0, w1 in windows:
            assert w1 - w0 == 1 or int(sizes[w0:w1].sum()) <= budget  # only a lone over-long word exceeds it
        if n_pieces <= budget:
            assert windows == [(0, len(sizes))]


def test_perfect_predictions_score_one(tok):
    task = TokenClassificationTask(make_cfg("token_classification", data={"labels": ["PER", "LOC"]}), tok)
    examples = ner_examples(20)
    ds = task.featurize(examples, "dev")
    n = len(task.label_names())
    # Gold labels as logits; -100 positions get label 0.
    model = LogitModel(lambda batch: torch.nn.functional.one_hot(batch.labels.clamp(min=0), n).float() * 10)
    result = task.evaluate(model, examples, ds)
    assert result.metrics["f1"] == 1.0 and result.metrics["accuracy"] == 1.0
    assert result.report["n_gold_entities"] > 10
    assert "PER" in result.report["table"]


@pytest.mark.parametrize("head", ["linear", "bilstm"])
def test_training_loss_falls(tok, head):
    cfg = make_cfg("token_classification", data={"labels": ["PER", "LOC"]}, technique={"feature_head": head})
    task = TokenClassificationTask(cfg, tok)
    examples = ner_examples(64)
    ds = task.featurize(examples, "train")
    model = task.build(tiny_encoder(tok.vocab_size))
    assert (model.head.lstm is not None) == (head == "bilstm")
    if head == "bilstm":
        assert model.head.lstm.hidden_size == 16  # hidden_size // 2
    losses = train_steps(task, model, ds, steps=40)
    assert fell(losses), losses
    result = task.evaluate(model, examples, ds)
    assert result.metrics["f1"] > 0.5
    assert model.head_config["label_scheme"] == "BIO"


def test_predict_words_and_text(tok):
    task = TokenClassificationTask(make_cfg("token_classification", data={"labels": ["PER", "LOC"]}), tok)
    n = len(task.label_names())
    b_per = task.label_names().index("B-PER")
    i_per = task.label_names().index("I-PER")

    # Every word predicted I-PER, except [CLS]-adjacent first word B-PER: one entity over all words.
    def fn(batch):
        logits = torch.zeros(*batch.input_ids.shape, n)
        logits[..., i_per] = 1.0
        logits[:, 1, b_per] = 2.0
        return logits

    model = LogitModel(fn)
    (p,) = task.predict(model, [{"tokens": ["Anna", "Lee"]}])
    assert p["labels"] == ["B-PER", "I-PER"]
    (ent,) = p["entities"]
    assert (ent["type"], ent["start"], ent["end"], ent["text"]) == ("PER", 0, 2, "Anna Lee")
    assert 0.0 < ent["score"] <= 1.0
    (q,) = task.predict(model, [{"text": "江泽民 visited"}])
    assert q["tokens"] == ["江", "泽", "民", "visited"]
    ent = q["entities"][0]
    assert ent["text"] == "江泽民 visited" and (ent["char_start"], ent["char_end"]) == (0, 11)
    json.dumps([p, q])


def test_split_words():
    assert split_words("北京 is big。") == [("北", 0, 1), ("京", 1, 2), ("is", 3, 5), ("big", 6, 9), ("。", 9, 10)]
