"""ELMo as features for the fine-tuning tasks: its layers ([token; token], then every biLSTM layer's [forward;
backward], 2 x hidden wide) mixed by the task's ScalarMix, a frozen ELMo under the BiLSTM tagger for NER
through `bertzoo finetune`, mean pooling as its sentence vector, exact save and reload, and what it refuses.
Tiny models (elmo-tiny), one thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import bertzoo.io as io
from bertzoo.batch import Batch
from bertzoo.cli import main
from bertzoo.config import FinetuneConfig, from_dict, to_plain
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError
from bertzoo.loading import load_encoder, load_finetuned
from bertzoo.models.elmo import Elmo, char_table
from bertzoo.nn.masks import masked_mean
from bertzoo.tasks import get_task, output_width
from bertzoo.tasks.techniques import apply_techniques, layerwise_lr_groups
from bertzoo.train.finetune import build_encoder, build_model
from bertzoo.variants import elmo

from helpers.finetune import tiny_finetune_config, write_conll, write_task_files
from helpers.tasks import make_cfg

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN"),
]

HIDDEN, LAYERS = 8, 2  # 2 x 8 = 16 wide; 3 layers to read


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The three-topic classification task of test_finetune (chance: 1/3) and its tokenizer."""
    return write_task_files(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def tok(files) -> Tokenizer:
    return Tokenizer.load(files["tokenizer"])


def tiny_config(tok: Tokenizer) -> elmo.ModelConfig:
    return elmo.model_config({"preset": "elmo-tiny", "vocab_size": tok.vocab_size, "hidden_size": HIDDEN})


@pytest.fixture(scope="module")
def pre(tok, tmp_path_factory) -> Path:
    """A (random) ELMo saved as its pretraining run saves it: the biLM objective, the run's tokenizer."""
    root = tmp_path_factory.mktemp("elmo") / "pre"
    torch.manual_seed(0)
    module = elmo.build(tiny_config(tok))
    elmo.use_tokenizer(module, tok)
    module.save_pretrained(root)
    tok.save(root)
    return root


def ner_config(tmp_path: Path, pre: Path, **technique) -> FinetuneConfig:
    data = {"train": write_conll(tmp_path / "train.conll", 40, 0), "dev": write_conll(tmp_path / "dev.conll", 8, 1)}
    t = {"head_dropout": 0.0, **technique}
    return from_dict(
        FinetuneConfig,
        {"task": "token_classification", "model": str(pre), "train": {"batch_size": 8, "seed": 3}, "data": data,
         "technique": t},
    )  # fmt: skip


def task_model(cfg: FinetuneConfig, tok: Tokenizer):
    encoder = build_encoder(cfg, tok)
    task = get_task(cfg, tok)
    examples = task.load("train")
    model = build_model(task, encoder, cfg)
    features = task.featurize(examples, "train")
    return task, model, features


def test_load_encoder_gives_the_pretrained_elmo(pre) -> None:
    encoder = load_encoder(pre)
    assert isinstance(encoder, Elmo)
    assert encoder.char_ids.any()  # the character table came with the weights
    assert output_width(encoder) == 2 * HIDDEN and encoder.config.num_layers == LAYERS


def test_random_init_from_model_config_spells_the_vocabulary(tok) -> None:
    cfg = make_cfg("token_classification", model_config={"variant": "elmo", "preset": "elmo-tiny"})
    encoder = build_encoder(cfg, tok)
    assert isinstance(encoder, Elmo) and encoder.config.vocab_size == tok.vocab_size
    assert torch.equal(encoder.char_ids, char_table(tok.vocab_list(), encoder.config.max_chars))


# ------------------------------------------------------------------------------------------ the layers


def test_layer_stack_widths_token_layer_and_directions_through_the_task_model(tok, pre, tmp_path) -> None:
    cfg = ner_config(tmp_path, pre, feature_layers=LAYERS + 1, feature_head="bilstm")
    task, model, features = task_model(cfg, tok)
    model.eval()
    batch = task.collate([features[i] for i in range(4)])
    with torch.no_grad():
        out = model.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, output_hidden_states=True)
        layers = out.hidden_states
        assert len(layers) == LAYERS + 1
        assert all(h.shape == (*batch.input_ids.shape, 2 * HIDDEN) for h in layers)
        assert model.feature_dim == 2 * HIDDEN and model.head.lstm.input_size == 2 * HIDDEN
        assert model.head.lstm.hidden_size == HIDDEN  # the tagger's BiLSTM gives back the backbone's width
        token = layers[0]
        assert torch.equal(token[..., :HIDDEN], token[..., HIDDEN:])  # the token vector, repeated
        assert not torch.allclose(layers[1][..., :HIDDEN], layers[1][..., HIDDEN:])
        # The task reads gamma * sum softmax(s)_j h_j: at the start an even average of every layer.
        sequence, _ = model.encode(batch)
        torch.testing.assert_close(sequence, torch.stack(layers).mean(0), atol=1e-6, rtol=0)

    # Without feature_layers: the top layer. Its forward half at t reads tokens <= t, its backward half tokens >= t.
    _, plain, _ = task_model(ner_config(tmp_path, pre), tok)
    plain.eval()
    ids = batch.input_ids[:1, : int(batch.attention_mask[0].sum())].clone()
    t = ids.size(1) // 2
    after, before = ids.clone(), ids.clone()
    after[0, t + 1 :] = (ids[0, t + 1 :] + 1) % tok.vocab_size  # other tokens after t
    before[0, :t] = (ids[0, :t] + 1) % tok.vocab_size  # other tokens before t

    def top(x: torch.Tensor) -> torch.Tensor:
        return plain.encode(Batch(input_ids=x, attention_mask=torch.ones_like(x)))[0][0]

    with torch.no_grad():
        base, a, b = top(ids), top(after), top(before)
    torch.testing.assert_close(base, plain.encoder(ids).hidden_states[-1][0])
    torch.testing.assert_close(a[: t + 1, :HIDDEN], base[: t + 1, :HIDDEN], atol=1e-6, rtol=0)
    assert not torch.allclose(a[t, HIDDEN:], base[t, HIDDEN:], atol=1e-4)  # the backward half saw the change
    torch.testing.assert_close(b[t:, HIDDEN:], base[t:, HIDDEN:], atol=1e-6, rtol=0)
    assert not torch.allclose(b[t, :HIDDEN], base[t, :HIDDEN], atol=1e-4)


def test_frozen_elmo_with_every_layer_trains_only_the_mix_and_the_head(tok, pre, tmp_path) -> None:
    cfg = ner_config(tmp_path, pre, feature_layers=LAYERS + 1, freeze_encoder=True, feature_head="bilstm")
    task, model, features = task_model(cfg, tok)
    apply_techniques(model, cfg.technique)
    model.train()
    batch = task.collate([features[i] for i in range(8)])
    model(batch).loss.backward()
    got = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    head = {name for name, _ in model.named_parameters() if name.startswith("head.")}
    assert got == {"mix.weights", "mix.gamma", *head}
    assert not any(p.requires_grad for p in model.encoder.parameters())


def test_auto_pooling_is_the_mean_and_no_pooler_is_added(files, tok, pre) -> None:
    cfg = make_cfg("classification", model=str(pre), data={"labels": ["neg", "pos"]}, technique={"head_dropout": 0.0})
    task = get_task(cfg, tok)
    model = build_model(task, build_encoder(cfg, tok), cfg)
    assert model.pooling == "mean" and not model.poolable
    assert not any("pooler" in k for k in model.state_dict())
    assert not model.encoder.softmax.weight.requires_grad  # pretraining's softmax: no task reads it
    rows = [{"text": "the apple is red"}, {"text": "car"}, {"text": "the plum and a bus on the boat"}]
    batch = task.collate([task.featurize(rows, "predict")[i] for i in range(3)])
    assert (batch.attention_mask == 0).any()
    model.eval()
    with torch.no_grad():
        sequence, sentence = model.encode(batch)
        torch.testing.assert_close(sentence, masked_mean(sequence, batch.attention_mask))
        for i in range(3):  # a padded row gives its sentence vector alone
            n = int(batch.attention_mask[i].sum())
            alone = model.encoder(batch.input_ids[i : i + 1, :n]).hidden_states[-1][0].mean(0)
            torch.testing.assert_close(sentence[i], alone, atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------ through bertzoo finetune


def write_yaml(cfg: FinetuneConfig, path: Path) -> str:
    plain = to_plain(cfg)
    plain["train"].pop("output_dir", None)
    path.write_text(yaml.safe_dump(plain), encoding="utf-8")
    return str(path)


def test_cli_trains_a_bilstm_tagger_on_frozen_elmo_features_and_reloads(tok, pre, tmp_path) -> None:
    train = {"train": write_conll(tmp_path / "train.conll", 160, 0), "dev": write_conll(tmp_path / "dev.conll", 30, 1)}
    test = write_conll(tmp_path / "test.conll", 30, 2)
    cfg = from_dict(
        FinetuneConfig,
        {
            "task": "token_classification",
            "model": str(pre),
            "data": {**train, "test": test},
            "technique": {
                "freeze_encoder": True, "feature_layers": LAYERS + 1, "feature_head": "bilstm", "head_dropout": 0.0
            },
            # A random tiny ELMo's LSTM states are small (|h| ~ 0.04): a high rate, 200 steps.
            "train": {"epochs": 20, "batch_size": 16, "lr": 3e-2, "seed": 1, "device": "cpu", "save_every": 0,
                      "eval_every": 50, "log_every": 50},
        },
    )  # fmt: skip
    out = tmp_path / "run"
    assert main(["finetune", write_yaml(cfg, tmp_path / "ner.yaml"), "--train.output_dir", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    # Every word is one of 3 types or O by its spelling alone; tagging all O (the majority) scores F1 0.
    assert report["test"]["metrics"]["f1"] > 0.7
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["variant"] == "elmo" and saved["task"]["feature_layers"] == LAYERS + 1
    assert main(["evaluate", str(out / "model"), "--split", "test", "--out", str(out / "eval.json")]) == 0
    again = json.loads((out / "eval.json").read_text())
    assert again["metrics"]["f1"] == pytest.approx(report["test"]["metrics"]["f1"])


def test_cli_trains_a_sentence_classifier_on_elmo(files, pre, tmp_path) -> None:
    # The whole ELMo trains; its random tiny states are small, hence the high rate.
    cfg = to_plain(tiny_finetune_config(files, tmp_path / "ignored", epochs=6, lr=3e-2))
    cfg.pop("model_config")
    cfg["tokenizer"] = ""  # the model directory's
    cfg["model"] = str(pre)
    cfg["technique"] = {"feature_layers": LAYERS + 1, "head_dropout": 0.0}
    cfg["train"].pop("output_dir")
    config = tmp_path / "cls.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["finetune", str(config), "--train.output_dir", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["test"]["metrics"]["accuracy"] > 0.8  # three topics: chance is 1/3
    assert json.loads((out / "model" / "config.json").read_text())["task"]["pooling"] == "mean"


@pytest.mark.parametrize("task_name", ["token_classification", "classification"])
def test_a_fine_tuned_elmo_saves_and_reloads_exactly(files, tok, pre, tmp_path, task_name) -> None:
    if task_name == "classification":
        cfg = make_cfg(
            "classification", model=str(pre), data={"train": files["train"]}, technique={"feature_layers": 2}
        )
    else:
        cfg = ner_config(tmp_path, pre, feature_layers=LAYERS + 1, feature_head="bilstm")
    task, model, features = task_model(cfg, tok)
    batch = task.collate([features[i] for i in range(8)])
    model.eval()
    with torch.no_grad():
        start = model(batch).logits
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(5):
        opt.zero_grad()
        model(batch).loss.backward()
        opt.step()
    saved = tmp_path / "model"
    model.save_pretrained(saved)
    tok.save(saved)
    (saved / io.FINETUNE_CONFIG).write_text(json.dumps(to_plain(cfg)), encoding="utf-8")
    _, loaded, _ = load_finetuned(saved)
    assert isinstance(loaded.encoder, Elmo)
    model.eval()
    with torch.no_grad():
        trained = model(batch).logits
        torch.testing.assert_close(loaded(batch).logits, trained, atol=1e-6, rtol=0)
    assert not torch.allclose(trained, start, atol=1e-3)  # training changed the model


# ------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("technique", "match"),
    [
        ({"adapter_size": 4}, r"technique.adapter_size is not available for Elmo"),
        ({"gradual_unfreezing": True}, r"technique.gradual_unfreezing is not available for Elmo"),
    ],
)
def test_techniques_that_need_a_transformer_stack_refuse(tok, pre, tmp_path, technique, match) -> None:
    cfg = ner_config(tmp_path, pre, **technique)
    _, model, _ = task_model(cfg, tok)
    with pytest.raises(ConfigError, match=match):
        apply_techniques(model, cfg.technique)


def test_what_cannot_work_on_elmo_is_refused_in_one_line(tok, pre, tmp_path) -> None:
    _, model, _ = task_model(ner_config(tmp_path, pre), tok)
    with pytest.raises(ConfigError, match=r"technique.layer_lr_decay is not available for Elmo"):
        layerwise_lr_groups(model, 1e-3, 0.9, 0.01)
    with pytest.raises(ConfigError, match=r"technique.feature_layers=4 but the model has 3 layers"):
        task_model(ner_config(tmp_path, pre, feature_layers=4), tok)
    seq2seq = make_cfg("seq2seq", model=str(pre))
    with pytest.raises(ConfigError, match=r"task=seq2seq .* which ELMo has not"):
        build_encoder(seq2seq, tok)
    lm = make_cfg("classification", model=str(pre), technique={"lm_weight": 0.3})
    with pytest.raises(ConfigError, match=r"technique.lm_weight=0.3 adds GPT's next-token loss"):
        build_encoder(lm, tok)
    for fine in ({}, {"lm_weight": 0.0}):  # the default and off are accepted
        assert isinstance(build_encoder(make_cfg("classification", model=str(pre), technique=fine), tok), Elmo)
