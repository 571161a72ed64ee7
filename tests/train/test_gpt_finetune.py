"""Fine-tuning a left-to-right (GPT) model as the GPT paper does: the extract token's state as the
sentence vector, [CLS] A [SEP] B [SEP] inputs, similarity in both orders, task loss + lambda x LM loss,
multiple choice from each choice's extract state, learning, the CLI, refusals and the Hugging Face export."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from bertzoo.batch import Batch
from bertzoo.cli import main
from bertzoo.config import TechniqueConfig
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.hub import export_hf
from bertzoo.tasks.classification import ClassificationTask
from bertzoo.tasks.multiple_choice import MultipleChoiceTask
from bertzoo.tasks.qa import QAModel
from bertzoo.tasks.token_classification import TokenClassificationModel

from helpers.tasks import make_cfg, single_thread, small_tokenizer, tiny_encoder, tiny_gpt, train_steps

GOOD = ["great", "wonderful", "excellent", "lovely"]
BAD = ["awful", "terrible", "horrible", "dreadful"]
FILLER = ["the", "movie", "was", "a", "book", "it", "and", "of", "show"]
NO_DROPOUT = {"dropout": 0.0, "attention_dropout": 0.0}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    return small_tokenizer(tmp_path_factory.mktemp("vocab"), [*GOOD, *BAD, *FILLER])


def classifier(tok: Tokenizer, seed: int = 0, problem: str = "single_label", **technique):
    """(task, model) of a tiny GPT classifier without dropout (outputs are exact functions of the weights)."""
    cfg = make_cfg(
        "classification",
        problem=problem,
        data={"labels": [] if problem == "regression" else ["neg", "pos"]},
        technique={"head_dropout": 0.0, **technique},
    )
    task = ClassificationTask(cfg, tok)
    model = task.build(tiny_gpt(tok.vocab_size, seed, **NO_DROPOUT))
    with torch.no_grad():  # a head that is not near zero, so logits differ between inputs
        model.head.classifier.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(seed))
    return task, model


def test_sentence_vector_is_the_last_real_tokens_state(tok) -> None:
    task, model = classifier(tok)
    assert model.pooling == "last" and model.encoder.pooler is None  # auto on a causal encoder
    texts = ["the movie was great", "awful", "it was a lovely book and a wonderful show"]
    ds = task.featurize([{"text": t} for t in texts], "predict")
    batch = task.collate([ds[i] for i in range(len(texts))])  # right-padded to the longest
    assert (batch.attention_mask == 0).any()
    model.eval()
    with torch.no_grad():
        _, sentence = model.encode(batch)
        for i in range(len(texts)):
            ids = torch.as_tensor(ds[i]["input_ids"], dtype=torch.long)[None]  # alone, no padding
            alone = model.encoder(ids).last_hidden_state[0]
            torch.testing.assert_close(sentence[i], alone[-1], atol=1e-5, rtol=0)
            assert not torch.allclose(sentence[i], alone[0], atol=1e-3)  # not the start token's state
            assert int(ids[0, -1]) == tok.sep_id  # the extract token
        # The classifier's logits are h W_y of that state: no pooler, no bias.
        assert model.head.classifier.bias is None
        torch.testing.assert_close(model(batch).logits, sentence @ model.head.classifier.weight.T)


def test_pairs_are_cls_a_sep_b_sep(tok) -> None:
    task, _ = classifier(tok)
    a, b = "the movie was great", "it was awful"
    ids = task.featurize([{"text": a, "text_pair": b}], "predict")[0]["input_ids"]
    ea, eb = tok.encode_batch([a, b])
    assert list(ids) == [tok.cls_id, *ea, tok.sep_id, *eb, tok.sep_id]


def test_similarity_in_both_orders_is_symmetric(tok) -> None:
    task, model = classifier(tok, problem="regression")
    assert task.both_orders  # auto: regression on a causal model
    pairs = [("the movie was great", "awful"), ("a book", "it was a lovely show and a wonderful book")]
    rows = [{"text": a, "text_pair": b} for a, b in pairs] + [{"text": b, "text_pair": a} for a, b in pairs]
    ds = task.featurize(rows, "predict")
    batch = task.collate([ds[i] for i in range(len(rows))])
    assert batch.input_ids.shape[:2] == (4, 2)  # (batch, orders, seq)
    model.eval()
    with torch.no_grad():
        scores = model(batch).logits
        torch.testing.assert_close(scores[:2], scores[2:], atol=1e-6, rtol=0)
        # = h W_y of the sum of the two orders' extract states, each computed alone
        states = [
            model.encoder(torch.as_tensor(ds[0][key], dtype=torch.long)[None]).last_hidden_state[0, -1]
            for key in ("input_ids", "swapped_input_ids")
        ]
        torch.testing.assert_close(scores[0], model.head.classifier.weight[0] @ (states[0] + states[1]))
    # One order is not symmetric: the check above could fail.
    one_task, one_model = classifier(tok, problem="regression", pair_orders="one")
    ds1 = one_task.featurize(rows, "predict")
    with torch.no_grad():
        one = one_model.eval()(one_task.collate([ds1[i] for i in range(len(rows))])).logits
    assert not torch.allclose(one[:2], one[2:], atol=1e-4)


def test_both_orders_truncate_to_the_same_tokens(tok) -> None:
    cfg = make_cfg("classification", problem="regression", data={"max_seq_len": 12}, technique={"pair_orders": "both"})
    task = ClassificationTask(cfg, tok)
    a, b = "great awful lovely dreadful", "movie book show the"  # equal lengths, 3 tokens too many
    f = task.featurize([{"text": a, "text_pair": b}, {"text": b, "text_pair": a}], "predict")
    assert len(f[0]["input_ids"]) <= 12
    assert list(f[0]["input_ids"]) == list(f[1]["swapped_input_ids"])
    assert list(f[0]["swapped_input_ids"]) == list(f[1]["input_ids"])


def manual_lm_loss(model, batch: Batch, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Next-token cross-entropy over the real tokens, by hand: logits = h W_e^T (the tied word table)."""
    ids = batch.input_ids.reshape(-1, batch.input_ids.size(-1))
    mask = batch.attention_mask.reshape(ids.shape).bool()
    if rows is not None:
        mask = mask & rows.reshape(-1, 1).bool()
    hidden = model.encoder(ids, batch.attention_mask.reshape(ids.shape)).last_hidden_state
    logits = hidden @ model.encoder.word_embeddings.weight.T
    targets = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)


def test_lm_weight_adds_lambda_times_the_lm_loss(tok) -> None:
    rows = [{"text": "the movie was great", "label": "pos"}, {"text": "awful", "label": "neg"}]
    task0, plain = classifier(tok, lm_weight=0.0)
    task, model = classifier(tok, lm_weight=0.25)
    model.load_state_dict(plain.state_dict(), strict=False)  # the same weights; its LM head is the word table
    assert plain.lm_head is None and model.lm_head.decoder.weight is model.encoder.word_embeddings.weight
    ds = task.featurize(rows, "train")
    batch = task.collate([ds[0], ds[1]])
    model.train()
    plain.train()
    out, base = model(batch), plain(batch)
    lm = manual_lm_loss(model, batch)
    torch.testing.assert_close(out.loss, base.loss + 0.25 * lm, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.metrics["lm_loss"], lm.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.metrics["task_loss"], base.loss.detach())
    assert int(out.counts["lm_loss"]) == int(batch.attention_mask.sum()) - 2  # every real token but each start
    assert "lm_loss" not in base.metrics
    # The LM term trains the word table through the tied head.
    out.loss.backward()
    assert model.encoder.word_embeddings.weight.grad.abs().sum() > 0
    # Evaluation scores the task alone; a bidirectional model has no next-token loss (lm_weight unused).
    model.eval()
    torch.testing.assert_close(model(batch).loss, base.loss, atol=1e-5, rtol=0)
    bert = ClassificationTask(make_cfg("classification", data={"labels": ["neg", "pos"]}), tok)
    assert bert.build(tiny_encoder(tok.vocab_size)).lm_head is None


def test_multiple_choice_scores_each_choices_extract_state(tok, tmp_path) -> None:
    cfg = make_cfg("multiple_choice", technique={"head_dropout": 0.0, "lm_weight": 0.5})
    task = MultipleChoiceTask(cfg, tok)
    model = task.build(tiny_gpt(tok.vocab_size, 1, **NO_DROPOUT))
    with torch.no_grad():
        model.head.classifier.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(0))
    examples = [
        {"context": "the movie was", "endings": ["great", "a lovely show and a book", "awful"], "label": 1},
        {"context": "it was a", "endings": ["book", "dreadful movie"], "label": 0},  # one choice fewer: padded
    ]
    ds = task.featurize(examples, "train")
    batch = task.collate([ds[0], ds[1]])
    assert batch.input_ids.shape[:2] == (2, 3)
    model.eval()
    with torch.no_grad():
        logits = model(batch).logits
        for b, ex in enumerate(examples):
            for c in range(len(ex["endings"])):
                ids = torch.as_tensor(ds[b]["input_ids"][c], dtype=torch.long)[None]
                assert int(ids[0, -1]) == tok.sep_id
                state = model.encoder(ids).last_hidden_state[0, -1]
                torch.testing.assert_close(logits[b, c], model.head.classifier.weight[0] @ state, atol=1e-5, rtol=0)
        assert logits[1, 2] == torch.finfo(logits.dtype).min  # the padded choice never wins
    model.train()
    out = model(batch)
    manual = manual_lm_loss(model, batch, batch.extra["choice_mask"])  # padded choices are no LM data
    torch.testing.assert_close(out.metrics["lm_loss"], manual.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits.float(), batch.labels) + 0.5 * manual)


def learnable_rows(n: int, seed: int) -> list[dict[str, str]]:
    """The label is a sentiment word at a random position, often far from the end, among filler."""
    r = random.Random(seed)
    rows = []
    for i in range(n):
        pos = i % 2 == 0
        words = [r.choice(FILLER) for _ in range(r.randint(2, 10))]
        words.insert(r.randrange(len(words) + 1), r.choice(GOOD if pos else BAD))
        rows.append({"text": " ".join(words), "label": "pos" if pos else "neg"})
    return rows


def test_a_tiny_gpt_learns_to_classify(tok) -> None:
    cfg = make_cfg("classification", data={"labels": ["neg", "pos"]}, technique={"head_dropout": 0.0})
    task = ClassificationTask(cfg, tok)
    model = task.build(tiny_gpt(tok.vocab_size, 0, **NO_DROPOUT))
    train = task.featurize(learnable_rows(400, 0), "train")
    dev_rows = learnable_rows(100, 1)
    dev = task.featurize(dev_rows, "dev")
    before = task.evaluate(model, dev_rows, dev).metrics["accuracy"]
    losses = train_steps(task, model, train, steps=250, lr=2e-3, batch_size=16)
    after = task.evaluate(model, dev_rows, dev).metrics["accuracy"]
    assert after >= 0.9 > before + 0.2, (before, after)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])


def test_tasks_that_read_every_token_refuse_a_causal_model(tok) -> None:
    with pytest.raises(ConfigError, match="token classification needs every token to see the words after it"):
        TokenClassificationModel(tiny_gpt(tok.vocab_size), 3, TechniqueConfig())
    with pytest.raises(ConfigError, match="extractive QA .* task: seq2seq"):
        QAModel(tiny_gpt(tok.vocab_size))
    with pytest.raises(ConfigError, match=r"technique.pooling=cls on a left-to-right"):
        classifier(tok, pooling="cls")
    _, model = classifier(tok, pooling="mean")  # allowed: the mean of left-to-right states
    assert model.pooling == "mean"


# ---------------------------------------------------------------------------------- CLI and export


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`bertzoo finetune` of a tiny GPT on the synthetic three-topic task of test_finetune."""
    from bertzoo.config import to_plain

    from helpers.finetune import tiny_finetune_config, write_task_files

    root = tmp_path_factory.mktemp("gpt-ft")
    paths = write_task_files(root / "data")
    cfg = to_plain(tiny_finetune_config(paths, root / "ignored", epochs=5))
    cfg["train"].pop("output_dir")
    cfg["model_config"] = {
        "variant": "gpt",
        "preset": "gpt-tiny",
        "hidden_size": 32,
        "num_heads": 2,
        "intermediate_size": 64,
        "num_layers": 2,
        "max_position": 64,
    }
    config = root / "gpt.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = root / "run"
    assert main(["finetune", str(config), "--train.output_dir", str(out), "--train.log_every=5"]) == 0
    return {"root": root, "config": config, "out": out, "model": out / "model", "paths": paths}


def test_cli_finetunes_a_gpt_classifier(run, capsys) -> None:
    report = json.loads((run["out"] / "report.json").read_text())
    assert report["dev"]["metrics"]["accuracy"] > 0.6  # three topics: chance is 1/3
    saved = json.loads((run["model"] / "config.json").read_text())
    assert saved["causal"] is True and saved["pooler"] is False  # no pooler was added
    assert saved["task"]["pooling"] == "last" and saved["task"]["pair_orders"] == "one"
    logged = [json.loads(line) for line in (run["out"] / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in logged if "loss" in row]
    assert train_rows and all("lm_loss" in row and "task_loss" in row for row in train_rows)  # logged apart
    capsys.readouterr()
    assert main(["evaluate", str(run["model"]), "--split", "test", "--out", str(run["out"] / "eval.json")]) == 0
    again = json.loads((run["out"] / "eval.json").read_text())
    assert again["metrics"]["accuracy"] == pytest.approx(report["test"]["metrics"]["accuracy"])
    hf_dir = run["out"] / "hf"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(run["model"]), str(hf_dir)]) == 0
    assert json.loads((hf_dir / "config.json").read_text())["architectures"] == ["GPT2ForSequenceClassification"]


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--technique.pooling=cls", "technique.pooling=cls on a left-to-right"),
        ("--technique.pair_orders=both", "technique.pair_orders=both needs text pairs"),
        ("--technique.lm_weight=-1", "technique.lm_weight must be >= 0"),
    ],
)
def test_bad_combinations_exit_2_with_one_line(run, capsys, tmp_path, flag, expected) -> None:
    capsys.readouterr()
    code = main(["finetune", str(run["config"]), "--train.output_dir", str(tmp_path / "x"), flag])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and expected in lines[0], lines


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():  # a non-trivial model: default init would give near-zero logits
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


@pytest.mark.parametrize("norm", ["pre", "post"])  # GPT2ForSequenceClassification, OpenAIGPTForSequenceClassification
def test_export_to_transformers_gives_the_same_logits(tok, tmp_path, norm) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = make_cfg("classification", data={"labels": ["neg", "pos", "mixed"]})
    task = ClassificationTask(cfg, tok)
    model = perturbed(task.build(tiny_gpt(tok.vocab_size, 0, norm=norm, intermediate_size=128)))
    export_hf(model, tmp_path / "hf")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == ("GPT2" if norm == "pre" else "OpenAIGPT") + "ForSequenceClassification"
    assert hf.config.id2label[2] == "mixed"
    rows = [{"text": "the movie was great"}, {"text": "awful and a lovely book"}, {"text": "it"}]
    ds = task.featurize(rows, "predict")
    batch = task.collate([ds[i] for i in range(len(rows))])  # right padding with [PAD]
    with torch.no_grad():
        ours = model(batch).logits
        theirs = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)


def test_export_refuses_what_transformers_would_compute_differently(tok, tmp_path) -> None:
    _, both = classifier(tok, problem="regression")
    with pytest.raises(CheckpointError, match="cannot export to GPT2ForSequenceClassification.*both orders"):
        export_hf(both, tmp_path / "a")
    mc = MultipleChoiceTask(make_cfg("multiple_choice"), tok).build(tiny_gpt(tok.vocab_size))
    with pytest.raises(CheckpointError, match="multiple_choice head on a left-to-right model"):
        export_hf(mc, tmp_path / "b")
    _, mean = classifier(tok, pooling="mean")
    with pytest.raises(CheckpointError, match="technique.pooling=mean"):
        export_hf(mean, tmp_path / "c")
    bert_cfg = make_cfg("classification", problem="regression", technique={"pair_orders": "both"})
    bert = ClassificationTask(bert_cfg, tok).build(tiny_encoder(tok.vocab_size))
    with pytest.raises(CheckpointError, match="BertForSequenceClassification.*both orders"):
        export_hf(bert, tmp_path / "d")
