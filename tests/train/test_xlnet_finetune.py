"""Fine-tuning XLNet through the shared task code: an XLNet encoder directory (a bertzoo pretraining
checkpoint or a Hugging Face XLNet directory) trains on classification, NER and extractive QA as any encoder
does; its sentence vector is the last real token's state (XLNet has no pooler); a fine-tuned model saves and
reloads exactly; techniques that need an Encoder's layer stack refuse in one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml

import bertzoo.io as io
from bertzoo.cli import main
from bertzoo.config import FinetuneConfig, from_dict, to_plain
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError
from bertzoo.hub import export_hf
from bertzoo.loading import load_encoder, load_finetuned
from bertzoo.models.xlnet import XLNet
from bertzoo.tasks import get_task
from bertzoo.tasks.classification import ClassificationTask
from bertzoo.tasks.techniques import apply_techniques, layer_depths, layerwise_lr_groups, unfreezing_stages
from bertzoo.train.finetune import build_model
from bertzoo.variants import xlnet

from helpers.finetune import FILLER, WORDS_A, WORDS_B, WORDS_C, tiny_finetune_config, write_conll, write_task_files
from helpers.tasks import make_cfg, single_thread, train_steps

NO_DROPOUT = {"dropout": 0.0, "attention_dropout": 0.0}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The three-topic classification task of test_finetune (chance: 1/3) and its tokenizer."""
    return write_task_files(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def tok(files) -> Tokenizer:
    return Tokenizer.load(files["tokenizer"])


def tiny_config(tok: Tokenizer, **fields) -> xlnet.ModelConfig:
    spec = {"preset": "xlnet-tiny", "vocab_size": tok.vocab_size, "hidden_size": 32, "num_heads": 2}
    # Larger than 0.02: a tiny random model learns in few steps (as test_finetune's BERT).
    return xlnet.model_config({**spec, "intermediate_size": 64, "initializer_range": 0.1, **fields})


@pytest.fixture(scope="module")
def dirs(tok, tmp_path_factory) -> dict[str, Path]:
    """One pretrained (random) XLNet saved twice: a bertzoo pretraining checkpoint and a Hugging Face directory."""
    root = tmp_path_factory.mktemp("xlnet")
    torch.manual_seed(0)
    pretrained = xlnet.build(tiny_config(tok))
    pretrained.save_pretrained(root / "pre")
    tok.save(root / "pre")
    export_hf(pretrained, root / "hf")
    tok.save(root / "hf")
    return {"pre": root / "pre", "hf": root / "hf"}


def test_both_directories_load_the_same_xlnet_backbone(dirs) -> None:
    pre, hf = load_encoder(dirs["pre"]), load_encoder(dirs["hf"])
    assert isinstance(pre, XLNet) and isinstance(hf, XLNet)
    for (name, a), b in zip(pre.state_dict().items(), hf.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


# --------------------------------------------------------------------------------- sentence vector


def classifier(tok: Tokenizer, **technique) -> tuple[ClassificationTask, torch.nn.Module]:
    cfg = make_cfg("classification", data={"labels": ["neg", "pos"]}, technique={"head_dropout": 0.0, **technique})
    task = ClassificationTask(cfg, tok)
    torch.manual_seed(0)
    return task, task.build(XLNet(tiny_config(tok, **NO_DROPOUT)))


ROWS = [
    {"text": "the apple is red", "text_pair": "a bus"},
    {"text": "car", "text_pair": "it is on the boat and the bike of a train"},
    {"text": "the plum", "text_pair": "green"},
]


@pytest.mark.parametrize(("pooling", "position"), [("auto", -1), ("last", -1), ("cls", 0)])
def test_sentence_vector_is_a_real_tokens_state_under_padding(tok, pooling, position) -> None:
    task, model = classifier(tok, pooling=pooling)
    assert model.pooling == ("cls" if pooling == "cls" else "last")
    assert not any("pooler" in k for k in model.state_dict())  # none added, whatever the pooling
    ds = task.featurize(ROWS, "predict")
    batch = task.collate([ds[i] for i in range(len(ROWS))])  # right-padded to the longest
    assert (batch.attention_mask == 0).any()
    model.eval()
    with torch.no_grad():
        _, sentence = model.encode(batch)
        for i in range(len(ROWS)):
            ids = torch.as_tensor(ds[i]["input_ids"], dtype=torch.long)[None]  # alone, no padding
            types = torch.as_tensor(ds[i]["token_type_ids"], dtype=torch.long)[None]
            alone = model.encoder(ids, None, types).last_hidden_state[0]
            torch.testing.assert_close(sentence[i], alone[position], atol=1e-5, rtol=0)
            other = 0 if position == -1 else -1
            assert not torch.allclose(sentence[i], alone[other], atol=1e-3)
            assert int(ids[0, -1]) == tok.sep_id  # the last real token: the final [SEP], which has seen all
        torch.testing.assert_close(model(batch).logits, model.head.classifier(sentence))


# ---------------------------------------------------------------------------------- classification


def test_cli_finetunes_an_xlnet_classifier(files, dirs, tmp_path) -> None:
    cfg = to_plain(tiny_finetune_config(files, tmp_path / "ignored", epochs=3))  # 45 steps
    cfg["train"].pop("output_dir")
    cfg.pop("model_config")
    cfg["tokenizer"] = ""  # the model directory's
    cfg["model"] = str(dirs["pre"])
    config = tmp_path / "xlnet.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["finetune", str(config), "--train.output_dir", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["steps"] == 45
    assert report["test"]["metrics"]["accuracy"] > 0.8  # three topics: chance is 1/3
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["variant"] == "xlnet" and saved["pooler"] is False
    assert saved["task"]["pooling"] == "last"
    assert main(["evaluate", str(out / "model"), "--split", "test", "--out", str(out / "eval.json")]) == 0
    again = json.loads((out / "eval.json").read_text())
    assert again["metrics"]["accuracy"] == pytest.approx(report["test"]["metrics"]["accuracy"])


# ------------------------------------------------------------------------------------------ NER, QA


def write_squad(path: Path, n: int, seed: int) -> str:
    """Contexts of filler words around one fruit; the question asks for it, the answer is that word."""
    r = random.Random(seed)
    paragraphs = []
    for i in range(n):
        before = " ".join(r.choice(FILLER + WORDS_C) for _ in range(r.randint(2, 12)))
        after = " ".join(r.choice(FILLER + WORDS_B) for _ in range(r.randint(2, 12)))
        fruit = r.choice(WORDS_A)
        qa = {"id": f"q{i}", "question": "the apple", "answers": [{"text": fruit, "answer_start": len(before) + 1}]}
        paragraphs.append({"context": f"{before} {fruit} {after}", "qas": [qa]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return str(path)


def task_config(task: str, tmp_path: Path) -> FinetuneConfig:
    if task == "qa":
        path = write_squad(tmp_path / "squad.json", 24, 0)
        data = {"train": path, "dev": path, "max_seq_len": 32, "max_query_len": 8, "doc_stride": 12}
    else:
        data = {"train": write_conll(tmp_path / "train.conll", 40, 0), "dev": write_conll(tmp_path / "dev.conll", 8, 1)}
    return from_dict(FinetuneConfig, {"task": task, "train": {"batch_size": 8, "seed": 3}, "data": data})


@pytest.mark.parametrize(("task_name", "width"), [("token_classification", 7), ("qa", 2)])
def test_ner_and_qa_train_save_and_reload_exactly(tok, dirs, tmp_path, task_name, width) -> None:
    cfg = task_config(task_name, tmp_path)
    cfg.model = str(dirs["hf"])
    task = get_task(cfg, tok)
    examples = task.load("train")
    model = build_model(task, load_encoder(dirs["hf"]), cfg)
    features = task.featurize(examples, "train")
    batch = task.collate([features[i] for i in range(8)])
    model.train()
    out = model(batch)
    assert out.logits.shape == (*batch.input_ids.shape, width)  # O + B-/I- of three types; start and end
    assert torch.isfinite(out.loss)
    out.loss.backward()
    layer = model.encoder.layers[0].attention.q
    assert layer.grad is not None and torch.isfinite(layer.grad).all() and layer.grad.abs().sum() > 0
    assert model.encoder.mask_emb.grad is None and not model.encoder.mask_emb.requires_grad  # query stream unused
    model.zero_grad()
    losses = train_steps(task, model, features, steps=12, lr=3e-3)
    assert all(map(torch.isfinite, torch.tensor(losses)))
    saved = tmp_path / "model"
    model.save_pretrained(saved)
    tok.save(saved)
    (saved / io.FINETUNE_CONFIG).write_text(json.dumps(to_plain(cfg)), encoding="utf-8")
    _, loaded, _ = load_finetuned(saved)
    assert isinstance(loaded.encoder, XLNet)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch).logits, model(batch).logits, atol=1e-6, rtol=0)
        moved = model(batch).logits
    assert not torch.allclose(moved, out.logits.detach(), atol=1e-3)  # training changed the model


# ------------------------------------------------------------------------------------------ refusals


def test_adapters_need_a_transformer_stack_and_refuse(tok) -> None:
    _, model = classifier(tok)
    cfg = make_cfg("classification", technique={"adapter_size": 8}).technique
    with pytest.raises(ConfigError, match=r"technique.adapter_size is not available for XLNet"):
        apply_techniques(model, cfg)


def test_layer_lr_decay_and_gradual_unfreezing_count_xlnets_layers(tok) -> None:
    """XLNet's layers are a plain list of two-stream layers: depth-based techniques count them as a stack's."""
    _, model = classifier(tok)
    enc, layers = model.encoder, model.encoder.layers
    assert len(layers) == 2
    groups = layerwise_lr_groups(model, 1e-3, 0.5, 0.01)
    lr_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    # L = 2: the embeddings 1e-3 * 0.5^2, layer 0 * 0.5, layer 1 and the head 1e-3. The query stream's start
    # vector, unused by tasks (frozen), sits with the embeddings (depth 0).
    assert lr_of[id(enc.embeddings.word.weight)] == pytest.approx(2.5e-4)
    assert layer_depths(model)[id(enc.mask_emb)] == 0 and not enc.mask_emb.requires_grad
    assert [lr_of[id(p)] for p in layers[0].parameters()] == pytest.approx([5e-4] * len(list(layers[0].parameters())))
    assert [lr_of[id(p)] for p in layers[1].parameters()] == pytest.approx([1e-3] * len(list(layers[1].parameters())))
    assert [lr_of[id(p)] for p in model.head.parameters()] == pytest.approx([1e-3] * len(list(model.head.parameters())))
    assert sum(len(g["params"]) for g in groups) == sum(1 for p in model.parameters() if p.requires_grad)
    apply_techniques(model, make_cfg("classification", technique={"gradual_unfreezing": True}).technique)
    stage = unfreezing_stages(model)
    assert {stage[id(p)] for p in model.head.parameters()} == {0}
    assert {stage[id(p)] for p in layers[1].parameters()} == {1}
    assert {stage[id(p)] for p in layers[0].parameters()} == {2}
    assert stage[id(enc.mask_emb)] == stage[id(enc.embeddings.word.weight)] == 3


def test_cls_on_a_causal_xlnet_refuses_and_freezing_needs_no_stack(tok) -> None:
    _, model = classifier(tok)
    cfg = make_cfg("classification", data={"labels": ["neg", "pos"]}, technique={"pooling": "cls"})
    with pytest.raises(ConfigError, match=r"technique.pooling=cls on a left-to-right"):
        ClassificationTask(cfg, tok).build(XLNet(tiny_config(tok, causal=True)))
    # freeze_encoder needs no stack: the whole backbone stops training, the head trains.
    apply_techniques(model, make_cfg("classification", technique={"freeze_encoder": True}).technique)
    assert not any(p.requires_grad for p in model.encoder.parameters())
    assert all(p.requires_grad for p in model.head.parameters())
