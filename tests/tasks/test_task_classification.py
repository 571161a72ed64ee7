"""Sequence classification: pair encoding, labels, the three problems (single-label, multi-label,
regression) training on tiny separable data, evaluation reports and prediction output."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertzoo.config import TechniqueConfig
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError, DataError
from bertzoo.tasks import TASKS
from bertzoo.tasks.classification import ClassificationModel, ClassificationTask
from bertzoo.tasks.common import truncate_pair

from helpers.tasks import LogitModel, fell, make_cfg, single_thread, small_tokenizer, tiny_encoder, train_steps

GOOD = ["great", "wonderful", "excellent", "lovely", "superb"]
BAD = ["awful", "terrible", "horrible", "boring", "dreadful"]
NOUNS = ["movie", "book", "meal", "song", "trip", "show"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    return small_tokenizer(
        tmp_path_factory.mktemp("vocab"),
        [
            *GOOD,
            *BAD,
            *NOUNS,
            "the",
            "was",
            "it",
            "gets",
            "stars",
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "cat",
            "sat",
            "on",
            "mat",
            "hi",
        ],
    )


def sentiment_examples(n: int, seed: int = 0) -> list[dict]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        pos = i % 2 == 0
        word = r.choice(GOOD if pos else BAD)
        out.append({"text": f"the {r.choice(NOUNS)} was {word}", "label": "pos" if pos else "neg"})
    return out


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_registered():
    assert TASKS["classification"] is ClassificationTask


def test_truncate_pair_matches_bert_loop():
    for la in range(8):
        for lb in range(8):
            for budget in range(1, 10):
                a, b = la, lb
                while a + b > budget:  # BERT's _truncate_seq_pair
                    if a > b:
                        a -= 1
                    else:
                        b -= 1
                assert truncate_pair(la, lb, budget) == (a, b), (la, lb, budget)


def test_pair_encoding_segment_ids_and_truncation(tok):
    cfg = make_cfg("classification", data={"text_pair_column": "b", "max_seq_len": 12})
    task = ClassificationTask(cfg, tok)
    ex = [{"text": "the cat sat", "text_pair": "on the mat"}]
    f = task.featurize(ex, "predict").features[0]
    ref = tok.encode("the cat sat", "on the mat")
    assert f["input_ids"].tolist() == ref.ids
    assert f["token_type_ids"].tolist() == ref.type_ids == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert ref.ids[0] == tok.cls_id and ref.ids.count(tok.sep_id) == 2
    # Longest first: the 10-word first text loses tokens until 12 fit with the 3-word pair.
    long = [{"text": "one two three four five six seven eight nine ten", "text_pair": "a b c"}]
    g = task.featurize(long, "predict").features[0]
    assert len(g["input_ids"]) == 12
    assert tok.decode(g["input_ids"]) == "one two three four five six a b c"
    assert g["token_type_ids"].tolist() == [0] * 8 + [1] * 4


def test_collate_pads_to_multiple_of_8(tok):
    task = ClassificationTask(make_cfg("classification", data={"labels": ["x", "y"]}), tok)
    ds = task.featurize([{"text": "a " * 9, "label": "x"}, {"text": "b", "label": "y"}], "train")
    assert ds.lengths.tolist() == [11, 3]
    batch = task.collate([ds[0], ds[1]])
    assert batch.input_ids.shape == (2, 16)
    assert batch.attention_mask.sum(1).tolist() == [11, 3]
    assert batch.labels.tolist() == [0, 1] and batch.example_index.tolist() == [0, 1]
    assert (batch.input_ids[1, 3:] == tok.pad_id).all()


def test_labels_sorted_from_train_and_unknown_dev_label(tok, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "label": "z"}, {"text": "b", "label": "m"}])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": "a", "label": "z"}, {"text": "c", "label": "q"}])
    task = ClassificationTask(make_cfg("classification", data={"train": train, "dev": dev}), tok)
    # Asking for dev first still fixes the labels from train.
    with pytest.raises(DataError, match=r"dev.jsonl:2: label 'q' is not among the 2 known labels"):
        task.load("dev")
    assert task.label_names() == ["m", "z"]
    fixed = ClassificationTask(make_cfg("classification", data={"train": train, "labels": ["z", "m"]}), tok)
    fixed.load("train")
    assert fixed.label_names() == ["z", "m"]
    with pytest.raises(ConfigError, match="data.dev is not set"):
        fixed.load("dev")
    unlabelled = tmp_path / "test.csv"
    unlabelled.write_text("text\nhello\n", encoding="utf-8")
    task = ClassificationTask(make_cfg("classification", data={"train": train, "test": str(unlabelled)}), tok)
    with pytest.raises(DataError, match=r"test.csv:2: the test split has no labels \(column 'label'\)"):
        task.load("test")


def test_single_label_trains_evaluates_predicts(tok, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", sentiment_examples(64))
    dev = write_jsonl(tmp_path / "dev.jsonl", sentiment_examples(16, seed=1))
    task = ClassificationTask(make_cfg("classification", data={"train": train, "dev": dev}), tok)
    assert task.default_metric == "accuracy"
    examples = task.load("train")
    assert task.label_names() == ["neg", "pos"]
    model = task.build(tiny_encoder(tok.vocab_size))
    assert model.head_config["labels"] == ["neg", "pos"] and model.head_config["task"] == "classification"
    ds = task.featurize(examples, "train")
    losses = train_steps(task, model, ds, steps=100)
    assert fell(losses), losses
    dev_ex = task.load("dev")
    result = task.evaluate(model, dev_ex, task.featurize(dev_ex, "dev"))
    assert set(result.metrics) >= {"accuracy", "macro_f1", "loss"}
    assert result.metrics["accuracy"] >= 0.75
    assert np.asarray(result.report["confusion_matrix"]).sum() == 16
    assert "precision" in result.report["table"].splitlines()[0]
    preds = task.predict(model, [{"text": "the song was wonderful"}, {"text": "the trip was dreadful"}])
    assert [p["label"] for p in preds] == ["pos", "neg"]
    assert sum(preds[0]["probabilities"].values()) == pytest.approx(1.0)
    json.dumps(preds)
    json.dumps(result.metrics)


def test_forward_without_labels_has_no_loss(tok):
    task = ClassificationTask(make_cfg("classification", data={"labels": ["a", "b", "c"]}), tok)
    model = task.build(tiny_encoder(tok.vocab_size))
    out = model(task.collate([task.featurize([{"text": "hi"}], "predict")[0]]))
    assert out.loss is None and out.logits.shape == (1, 3)


def test_multi_label(tok):
    cfg = make_cfg("classification", problem="multi_label", data={"labels": ["good", "thing"]})
    task = ClassificationTask(cfg, tok)
    assert task.default_metric == "micro_f1"
    r = random.Random(0)
    examples = []
    for _ in range(64):
        g, b = r.random() < 0.5, r.random() < 0.5
        words = ([r.choice(GOOD)] if g else []) + ([r.choice(NOUNS)] if b else []) + ["it", "was"]
        r.shuffle(words)
        examples.append({"text": " ".join(words), "label": (["good"] if g else []) + (["thing"] if b else [])})
    ds = task.featurize(examples, "train")
    assert ds[0]["label"].dtype == np.float32 and ds[0]["label"].shape == (2,)
    model = task.build(tiny_encoder(tok.vocab_size))
    losses = train_steps(task, model, ds, steps=80)
    assert fell(losses), losses
    result = task.evaluate(model, examples, ds)
    assert set(result.metrics) >= {"micro_f1", "macro_f1", "exact_match", "loss"}
    assert result.metrics["micro_f1"] > 0.7
    (pred,) = task.predict(model, [{"text": "superb show"}])
    assert set(pred["probabilities"]) == {"good", "thing"} and isinstance(pred["labels"], list)


def test_regression(tok):
    task = ClassificationTask(make_cfg("classification", problem="regression"), tok)
    assert task.default_metric == "pearson" and task.label_names() == []
    r = random.Random(0)
    levels = ["zero", "one", "two", "three", "four"]
    examples = []
    for _ in range(64):
        k = r.randint(0, 4)
        examples.append({"text": f"{r.choice(NOUNS)} gets {levels[k]} stars", "label": float(k)})
    ds = task.featurize(examples, "train")
    model = task.build(tiny_encoder(tok.vocab_size))
    assert model.head.classifier.out_features == 1
    losses = train_steps(task, model, ds, steps=100)
    assert fell(losses), losses
    result = task.evaluate(model, examples, ds)
    assert set(result.metrics) >= {"mse", "pearson", "spearman", "loss"}
    assert result.metrics["pearson"] > 0.5
    assert isinstance(task.predict(model, [{"text": "book gets two stars"}])[0]["score"], float)


def test_evaluate_uses_logits_per_example(tok):
    """Post-processing alone: a stand-in model that always prefers label index 1."""
    task = ClassificationTask(make_cfg("classification", data={"labels": ["a", "b"]}), tok)
    examples = [{"text": "x", "label": "a"}, {"text": "y y y", "label": "b"}, {"text": "z", "label": "b"}]
    model = LogitModel(lambda batch: torch.tensor([[0.0, 1.0]]).repeat(batch.input_ids.size(0), 1))
    result = task.evaluate(model, examples, task.featurize(examples, "dev"))
    assert result.metrics["accuracy"] == pytest.approx(2 / 3)
    assert result.report["confusion_matrix"] == [[0, 1], [0, 2]]
    assert [p["gold"] for p in result.predictions] == ["a", "b", "b"]
    assert result.metrics["loss"] == pytest.approx(
        -np.log(np.exp(0) / (1 + np.e)) / 3 + 2 * -np.log(np.e / (1 + np.e)) / 3
    )


def test_problem_checks(tok):
    with pytest.raises(ConfigError, match="single-label dataset"):
        ClassificationTask(
            make_cfg("classification", problem="regression", data={"dataset": "builtin:wiki-topics"}), tok
        )
    with pytest.raises(ConfigError, match="token_classification dataset"):
        ClassificationTask(make_cfg("classification", data={"dataset": "builtin:peoples-daily-ner"}), tok)


def test_mean_pooling_reads_the_mean_of_real_tokens(tok):
    """technique.pooling=mean: the head reads the average of the last layer over real tokens, so
    padding never changes the logits, the full top layer runs, and a model built so trains."""
    task = ClassificationTask(
        make_cfg("classification", data={"labels": ["neg", "pos"]}, technique={"pooling": "mean"}), tok
    )
    assert task.head_config()["pooling"] == "mean"
    model = task.build(tiny_encoder(tok.vocab_size)).eval()
    feats = task.featurize([{"text": "the song was wonderful"}, {"text": "awful"}], "predict")
    batch = task.collate([feats[0], feats[1]])  # the short text is padded
    alone = task.collate([feats[1]])
    seq, vec = model.encode(batch)
    assert seq.shape[1] == batch.input_ids.shape[1]  # every position computed (no [CLS]-only top layer)
    hidden = model.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids).last_hidden_state
    n = int(batch.attention_mask[1].sum())
    assert torch.allclose(vec[1], hidden[1, :n].mean(0), atol=1e-6)
    assert torch.allclose(model(batch).logits[1], model(alone).logits[0], atol=1e-5)
    ds = task.featurize(sentiment_examples(64), "train")
    model.train()
    assert fell(train_steps(task, model, ds, steps=40))
    with pytest.raises(ConfigError, match="technique.pooling"):
        ClassificationModel(tiny_encoder(tok.vocab_size), 2, "single_label", TechniqueConfig(pooling="max"))
