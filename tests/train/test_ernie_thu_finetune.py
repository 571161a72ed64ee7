"""ERNIE (Tsinghua) downstream: the entity list travels beside the weights, and fine-tuning, evaluation and
prediction link task text to the model's own knowledge graph."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import yaml
from safetensors.torch import save_file

from bertzoo.cli import main
from bertzoo.config import FinetuneConfig, TaskDataConfig, TrainConfig
from bertzoo.errors import CheckpointError
from bertzoo.loading import load, load_encoder, load_finetuned
from bertzoo.models.ernie_thu import ErnieThu
from bertzoo.tasks import get_task
from bertzoo.train.finetune import finetune
from bertzoo.variants import get_variant
from bertzoo.variants.ernie_thu import link_task_entities

WORDS = ["the", "army", "dog", "has", "a", "cat", "sat", "ran"]
NAMES = ["army", "dog"]


def kg_dir(root, names=NAMES, width=12):
    """A kg-embed directory by hand: a random table and an entity list named by `names`."""
    d = root / "kg"
    d.mkdir()
    table = torch.randn(len(names), width, generator=torch.Generator().manual_seed(3))
    save_file({"entity_embeddings": table}, str(d / "entity_embeddings.safetensors"))
    meta = {"entities": [f"e{i}" for i in range(len(names))], "names": names, "kg": "tsv", "dim": width}
    (d / "entities.json").write_text(json.dumps(meta))
    return d, meta


@pytest.fixture()
def pretrained(tmp_path):
    """A saved ERNIE-THU pretraining module (2 layers, both fusing: a fusion reaches [CLS] only through a later
    layer's attention) and its tokenizer."""
    from helpers.tasks import small_tokenizer

    tok = small_tokenizer(tmp_path, WORDS)
    kg, meta = kg_dir(tmp_path)
    v = get_variant("ernie-thu")
    spec = {"preset": "ernie-thu-tiny", "vocab_size": tok.vocab_size, "hidden_size": 32, "num_heads": 4}
    spec["knowledge_layers"] = 2
    config = v.model_config({**spec, "intermediate_size": 64, "entity_size": 12, "entity_heads": 3})
    torch.manual_seed(0)
    model = v.build(config, entities=str(kg))
    model.save_pretrained(tmp_path / "pre")
    tok.save(tmp_path / "pre")
    return tmp_path / "pre", meta, tok


def test_the_entity_list_is_saved_beside_the_weights_and_loaded_back(pretrained):
    directory, meta, _ = pretrained
    assert json.loads((directory / "entities.json").read_text()) == meta
    encoder = load_encoder(directory)
    assert isinstance(encoder, ErnieThu) and encoder.entity_list == meta
    kind, module = load(directory)
    assert kind == "pretraining" and module.encoder.entity_list == meta


def test_a_damaged_entity_list_is_one_error(pretrained):
    directory, meta, _ = pretrained
    (directory / "entities.json").write_text(json.dumps({**meta, "entities": ["e0", "e1", "e2"]}))
    with pytest.raises(CheckpointError, match="names 3 entities but the model's table has 2") as info:
        load_encoder(directory)
    assert "\n" not in str(info.value)
    (directory / "entities.json").write_text(json.dumps({"names": NAMES}))
    with pytest.raises(CheckpointError, match="no 'entities' list"):
        load_encoder(directory)


def test_a_model_without_its_entity_list_warns_and_is_not_linked(pretrained):
    directory, _, tok = pretrained
    (directory / "entities.json").unlink()
    encoder = load_encoder(directory)
    assert encoder.entity_list is None
    cfg = FinetuneConfig(task="classification", data=TaskDataConfig(labels=["x", "y"]))
    task = get_task(cfg, tok)
    with pytest.warns(UserWarning, match="no entities.json beside its weights"):
        assert link_task_entities(task, encoder, tok) is False
    features = task.featurize([{"text": "the army has a dog", "label": "x"}], "test")
    assert "entity_ids" not in task.collate([features[0]]).extra


def rows(n, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        label = ["x", "y"][i % 2]
        subject = "army" if label == "x" else "dog"
        filler = [["cat", "sat", "ran"][int(j)] for j in torch.randint(0, 3, (3,), generator=g)]
        out.append({"text": " ".join(["the", subject, *filler]), "label": label})
    return out


def test_finetune_evaluate_and_predict_link_task_text(pretrained, tmp_path):
    directory, meta, tok = pretrained
    paths = {}
    for split, (n, seed) in {"train": (16, 0), "dev": (8, 1)}.items():
        paths[split] = tmp_path / f"{split}.jsonl"
        paths[split].write_text("".join(json.dumps(r) + "\n" for r in rows(n, seed)))
    out = tmp_path / "ft"
    cfg = FinetuneConfig(
        task="classification",
        model=str(directory),
        data=TaskDataConfig(train=str(paths["train"]), dev=str(paths["dev"]), max_seq_len=16),
        train=TrainConfig(output_dir=str(out), epochs=1, batch_size=8, device="cpu", log_every=1, save_every=0),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # linked, so no "not linked" warning
        summary = finetune(cfg)
    model_dir = out / "model"
    assert summary["model_dir"] == str(model_dir)
    assert json.loads((model_dir / "entities.json").read_text()) == meta

    task, model, _ = load_finetuned(model_dir)
    assert model.encoder.entity_list == meta
    features = task.featurize([{"text": "the army has a dog", "label": "x"}], "test")
    batch = task.collate([features[0]])
    # [CLS] the army has a dog [SEP] (+ padding): each entity at its mention's token; "the", "has", "a", the
    # special tokens and the padding never link.
    links = batch.extra["entity_ids"][0].tolist()
    assert links[:7] == [-1, -1, 0, -1, -1, 1, -1] and set(links[7:]) <= {-1}
    with torch.no_grad():
        linked = model(batch).logits
        batch.extra.pop("entity_ids")
        unlinked = model(batch).logits
    # The entity stream changes the prediction (slightly: two steps from BERT's small initial fusion weights;
    # without the links the computation is the same and the logits equal bit for bit).
    assert (linked - unlinked).abs().max() > 0

    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "the army has a dog"}) + "\n")
    assert main(["predict", str(model_dir), "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]) == 0
    predicted = json.loads((tmp_path / "out.jsonl").read_text())
    probs = torch.softmax(linked, -1)[0]
    assert predicted["label"] == ["x", "y"][int(probs.argmax())]


def test_cli_refuses_a_mismatched_entity_list_in_one_line(pretrained, tmp_path, capsys):
    directory, meta, _ = pretrained
    (directory / "entities.json").write_text(json.dumps({**meta, "entities": ["e0"]}))
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows(4, 0)))
    config = tmp_path / "ft.yaml"
    spec = {"task": "classification", "model": str(directory), "data": {"train": str(train)}}
    config.write_text(yaml.safe_dump({**spec, "train": {"output_dir": str(tmp_path / "ft"), "device": "cpu"}}))
    assert main(["finetune", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "names 1 entities but the model's table has 2" in err
    assert not (tmp_path / "ft" / "model").exists()
