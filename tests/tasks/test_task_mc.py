"""Multiple choice: (batch, choices, seq) features, softmax over choices, training on separable
data, SWAG files end to end, and examples with different numbers of endings."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError
from bertzoo.tasks import TASKS
from bertzoo.tasks.multiple_choice import MultipleChoiceTask

from helpers.tasks import LogitModel, fell, make_cfg, single_thread, small_tokenizer, tiny_encoder, train_steps

SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    return small_tokenizer(
        tmp_path_factory.mktemp("vocab"),
        [
            "the",
            "cat",
            "dog",
            "bird",
            "was",
            "asked",
            "it",
            "she",
            "he",
            "said",
            "yes",
            "no",
            "sat",
            "on",
            "a",
            "mat",
            "in",
            "hat",
        ],
    )


def mc_examples(n: int, seed: int = 0) -> list[dict]:
    """The right ending always says "yes", the others "no"; its position is random."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        endings = [f"{r.choice(['it', 'she', 'he'])} said no" for _ in range(4)]
        label = r.randrange(4)
        endings[label] = f"{r.choice(['it', 'she', 'he'])} said yes"
        out.append({"context": f"the {r.choice(['cat', 'dog', 'bird'])} was asked", "endings": endings, "label": label})
    return out


def test_registered():
    assert TASKS["multiple_choice"] is MultipleChoiceTask


def test_features_are_context_ending_pairs(tok):
    task = MultipleChoiceTask(make_cfg("multiple_choice"), tok)
    ex = {"context": "the cat sat", "endings": ["on a mat", "in a hat"], "label": 1}
    ds = task.featurize([ex], "train")
    f = ds[0]
    for ids, types, ending in zip(f["input_ids"], f["token_type_ids"], ex["endings"], strict=True):
        ref = tok.encode("the cat sat", ending)
        assert ids.tolist() == ref.ids and types.tolist() == ref.type_ids
    batch = task.collate([f, task.featurize([mc_examples(1)[0]], "train")[0]])
    assert batch.input_ids.shape[:2] == (2, 4) and batch.input_ids.shape[2] % 8 == 0
    assert batch.extra["choice_mask"].tolist() == [[True, True, False, False], [True] * 4]
    assert batch.labels.tolist() == [1, mc_examples(1)[0]["label"]]


def test_softmax_over_choices_and_padded_choices(tok):
    task = MultipleChoiceTask(make_cfg("multiple_choice"), tok)
    model = task.build(tiny_encoder(tok.vocab_size))
    examples = [
        {"context": "a", "endings": ["x", "y"], "label": 0},
        {"context": "b", "endings": ["x", "y", "z"], "label": 2},
    ]
    batch = task.collate([task.featurize(examples, "train")[i] for i in range(2)])
    out = model(batch)
    assert out.logits.shape == (2, 3)
    assert out.logits[0, 2] == torch.finfo(out.logits.dtype).min  # the padded third choice never wins
    manual = torch.nn.functional.cross_entropy(out.logits.float(), batch.labels)
    assert out.loss.item() == pytest.approx(manual.item())
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    preds = task.predict(model, examples)
    assert [len(p["probabilities"]) for p in preds] == [2, 3]
    assert all(sum(p["probabilities"]) == pytest.approx(1.0) for p in preds)
    assert preds[0]["ending"] == examples[0]["endings"][preds[0]["label"]]
    json.dumps(preds)


def test_evaluate_post_processing(tok):
    task = MultipleChoiceTask(make_cfg("multiple_choice"), tok)
    examples = mc_examples(6)
    # A stand-in that scores each choice by its length: the "yes" ending ties with "no" ones, so
    # use the last token id instead ("yes" > "no" in the vocabulary).
    yes, no = tok.token_to_id("yes"), tok.token_to_id("no")
    assert yes is not None and no is not None

    def fn(batch):
        return (batch.input_ids == yes).any(-1).float() - (batch.input_ids == no).any(-1).float()

    result = task.evaluate(LogitModel(fn), examples, task.featurize(examples, "dev"))
    assert result.metrics["accuracy"] == 1.0
    assert [p["label"] for p in result.predictions] == [ex["label"] for ex in examples]
    assert result.metrics["loss"] == pytest.approx(-np.log(np.e / (np.e + 3 / np.e)))


def test_training_loss_falls(tok):
    task = MultipleChoiceTask(make_cfg("multiple_choice"), tok)
    assert task.default_metric == "accuracy"
    examples = mc_examples(48)
    ds = task.featurize(examples, "train")
    model = task.build(tiny_encoder(tok.vocab_size))
    losses = train_steps(task, model, ds, steps=40)
    assert fell(losses), losses


def test_swag_files_end_to_end(tok, tmp_path):
    rows = []
    for i, ex in enumerate(mc_examples(8)):
        endings = [e.split(" ", 1)[1] for e in ex["endings"]]
        starts = [e.split(" ", 1)[0] for e in ex["endings"]]
        # SWAG: choice = sent2 + ending; here sent2 is the shared first word.
        rows.append(f"{i},v,0,x,{ex['context']},{starts[0]},gold,{','.join(endings)},{ex['label']}\n")
    path = tmp_path / "train.csv"
    path.write_text(SWAG_HEADER + "".join(rows), encoding="utf-8")
    task = MultipleChoiceTask(make_cfg("multiple_choice", data={"train": str(path), "dev": str(path)}), tok)
    examples = task.load("dev")
    assert len(examples) == 8 and all(len(e["endings"]) == 4 for e in examples)
    model = task.build(tiny_encoder(tok.vocab_size))
    result = task.evaluate(model, examples, task.featurize(examples, "dev"))
    assert 0.0 <= result.metrics["accuracy"] <= 1.0 and np.isfinite(result.metrics["loss"])
    assert model.head_config == {
        "task": "multiple_choice",
        "labels": [],
        "feature_layers": 0,
        "feature_mix": "weighted",
    }


def test_no_builtin_dataset(tok):
    with pytest.raises(ConfigError, match="no built-in multiple-choice dataset"):
        MultipleChoiceTask(make_cfg("multiple_choice", data={"dataset": "builtin:wiki-topics"}), tok)
