"""Loading, saving and Hugging Face interop at the edges: what `bertzoo.loading` accepts as a model
(local paths, `hf:` hub ids, `builtin:` models), what the Hugging Face exporter refuses, one-line
errors for a damaged Hugging Face config.json in every command that reads one, and the IO layer's
atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from bertzoo import io, loading
from bertzoo.cli import main
from bertzoo.config import FinetuneConfig, ModelConfig, to_plain
from bertzoo.errors import CheckpointError
from bertzoo.models.encoder import Encoder

from helpers.hf import VALID_HF_CONFIGS

TINY = {"vocab_size": 99, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 37}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


# --- technique.pooling=mean has no Hugging Face classifier ------------------------------------------


def mean_pooled_classifier(tmp_path: Path, task: str = "classification"):
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.tasks import TASKS
    from bertzoo.train.finetune import build_encoder, build_model

    from helpers.finetune import write_task_files

    tok_dir = Path(write_task_files(tmp_path / "data")["tokenizer"])
    tok = Tokenizer.load(tok_dir)
    cfg = FinetuneConfig(task=task, model_config={"preset": "bert-tiny", "num_layers": 2}, tokenizer=str(tok_dir))
    cfg.data.labels = ["a", "b"] if task == "classification" else []
    cfg.technique.pooling = "mean"
    model = build_model(TASKS[task](cfg, tok), build_encoder(cfg, tok), cfg).eval()
    # The encoder has a pooler (bert-tiny's default), so Hugging Face's classifier would have one to read:
    # nothing but the pooling itself tells the two apart.
    assert model.encoder.pooler is not None and model.pooling == "mean"
    return model, tok, cfg


@pytest.mark.parametrize("task", ["classification", "multiple_choice"])
def test_a_mean_pooled_classifier_is_refused_by_the_hf_exporter(tmp_path, task) -> None:
    from bertzoo.hub import export_hf

    model, _, _ = mean_pooled_classifier(tmp_path, task)
    with pytest.raises(CheckpointError, match=r"technique\.pooling=mean.*re-train with technique\.pooling=cls"):
        export_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf" / "config.json").exists()


def test_bertzoo_convert_refuses_a_mean_pooled_classifier_in_one_line(tmp_path, capsys) -> None:
    model, tok, cfg = mean_pooled_classifier(tmp_path)
    src = tmp_path / "model"
    model.save_pretrained(src)  # what `bertzoo finetune` leaves in model/
    tok.save(src)
    (src / io.FINETUNE_CONFIG).write_text(json.dumps(to_plain(cfg)), encoding="utf-8")
    capsys.readouterr()
    code = main(["convert", "--from", "bertzoo", "--to", "hf", str(src), str(tmp_path / "hf")])
    line = one_error_line(capsys)
    assert code == 2 and "technique.pooling=mean" in line and "BertForSequenceClassification" in line
    assert not (tmp_path / "hf" / "config.json").exists()


# --- local paths, hf: hub ids -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "runs/nomodel", "-i", "in.jsonl", "-o", "out.jsonl"],
        ["evaluate", "runs/nomodel"],
        ["export", "--onnx", "runs/nomodel", "out.onnx"],
    ],
    ids=["predict", "evaluate", "export"],
)
def test_a_missing_local_model_is_reported_not_looked_up_on_the_hub(tmp_path, monkeypatch, capsys, args) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    asked = []

    def no_network(*a, **kw):
        asked.append(a)
        raise AssertionError("the hub must not be contacted for a local path")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text('{"text": "a fig"}\n', encoding="utf-8")
    capsys.readouterr()
    code = main(args)
    line = one_error_line(capsys)
    assert code == 2 and asked == []
    assert "not found: runs/nomodel" in line and "hf:" in line, line


def test_hf_prefixed_ids_are_downloaded_from_the_hub(tmp_path, monkeypatch) -> None:
    torch.manual_seed(0)
    encoder = Encoder(ModelConfig(**TINY)).eval()
    encoder.save_pretrained(tmp_path / "snapshot")  # what a hub snapshot of this model holds
    asked = []

    def fake_download(repo_id: str) -> Path:
        asked.append(repo_id)
        return tmp_path / "snapshot"

    monkeypatch.setattr(loading, "download_from_hub", fake_download)
    loaded = Encoder.from_pretrained("hf:someone/tiny-bert")
    assert asked == ["someone/tiny-bert"]
    for key, value in encoder.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    with pytest.raises(CheckpointError, match="names no model"):
        loading.resolve("hf:")


def test_the_hub_download_goes_through_huggingface_hub(tmp_path, monkeypatch) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    seen = {}

    def snapshot_download(repo_id, **kwargs):
        seen["repo_id"] = repo_id
        seen.update(kwargs)
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert loading.resolve("hf:google/bert_uncased_L-2_H-128_A-2") == tmp_path
    assert seen["repo_id"] == "google/bert_uncased_L-2_H-128_A-2"
    assert "*.safetensors" in seen["allow_patterns"]


# --- a damaged Hugging Face config.json: one line in every command ---------------------------------

HF_CONFIG = VALID_HF_CONFIGS["bert"]  # a small valid Hugging Face BERT config.json
DAMAGE = {
    "missing": ("num_hidden_layers", None),
    "wrong-type": ("hidden_size", "32"),
    "zero-heads": ("num_attention_heads", 0),
    "architectures-not-a-list": ("architectures", "BertModel"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["info", "convert", "export", "finetune"])
def test_a_damaged_hf_config_is_one_line_in_every_command(tmp_path, capsys, command, damage) -> None:
    from helpers.finetune import write_task_files

    key, value = DAMAGE[damage]
    raw = dict(HF_CONFIG)
    if value is None:
        del raw[key]
    else:
        raw[key] = value
    model = tmp_path / "hf"
    tok = Path(write_task_files(tmp_path / "data")["tokenizer"])
    model.mkdir()
    for f in tok.iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    (model / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    args = {
        "info": ["info", str(model)],
        "convert": ["convert", "--from", "hf", "--to", "bertzoo", str(model), str(tmp_path / "out")],
        "export": ["export", "--onnx", str(model), str(tmp_path / "m.onnx")],
        "finetune": ["finetune", str(tmp_path / "ft.yaml"), "--train.output_dir", str(tmp_path / "run")],
    }[command]
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump({"task": "classification", "model": str(model)}), "utf-8")
    capsys.readouterr()
    code = main(args)
    line = one_error_line(capsys)
    assert code == 2 and key in line, line


def test_config_json_that_does_not_describe_the_weights_is_refused_before_building(tmp_path) -> None:
    Encoder(ModelConfig(**TINY)).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "vocab_size": 10**9}), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"word table is \(99, 32\), config.json says \(1000000000, 32\)"):
        loading.load_encoder(tmp_path)  # not an allocation of 10**9 rows
    (tmp_path / "config.json").write_text(json.dumps({**raw, "num_layers": 5}), encoding="utf-8")
    with pytest.raises(CheckpointError, match="the weights hold 2 layer"):
        loading.load_encoder(tmp_path)


def test_load_decides_what_a_directory_holds(tmp_path) -> None:
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.variants import get_variant

    bert = get_variant("bert")
    config = bert.model_config(TINY)
    Encoder(config).save_pretrained(tmp_path / "enc")
    bert.build(config, "mlm+nsp").save_pretrained(tmp_path / "pre")
    kind, model = loading.load(tmp_path / "enc")
    assert kind == "encoder" and type(model) is Encoder
    kind, model = loading.load(tmp_path / "pre")
    assert kind == "pretraining" and isinstance(model, MaskedLM) and model.nsp_head is not None


# --- Hugging Face names, as data per family ---------------------------------------------------------


def test_each_hf_model_type_has_one_importing_family() -> None:
    from bertzoo.variants import hf_families, hf_family

    assert sorted(hf_families()) == [
        "albert",
        "bert",
        "distilbert",
        "electra",
        "ernie",
        "gpt2",
        "openai-gpt",
        "roberta",
        "t5",
        "xlnet",
    ]
    # Each model_type is its family's own name, except GPT's two architectures of one variant.
    assert {t: f.variant for t, f in hf_families().items()} == {
        t: "gpt" if t in ("gpt2", "openai-gpt") else t for t in hf_families()
    }
    with pytest.raises(CheckpointError, match="model_type 'xlm' is not supported; supported: albert, bert"):
        hf_family("xlm")


@pytest.mark.parametrize(
    ("variant", "extra"),
    [
        ("bert", {}),
        ("roberta", {}),
        ("albert", {"embedding_size": 16}),
        ("albert", {"embedding_size": 16, "share": "none"}),
        ("electra", {"embedding_size": 16, "pooler": False}),
        ("ernie", {"task_type_vocab_size": 3}),
        ("spanbert", {}),
        ("distilbert", {}),
        ("distilbert", {"pooler": True}),  # a fine-tuned relu pooler is pre_classifier
    ],
)
def test_state_to_hf_and_back_is_the_identity(variant, extra) -> None:
    """Every tensor of a pretraining module survives the export names and the import names."""
    from bertzoo.interop.convert import state_from_hf, state_to_hf
    from bertzoo.variants import get_variant

    module = get_variant(variant)
    config = module.model_config({**TINY, "vocab_size": 99, **extra})
    objective = "mlm" if variant == "electra" else module.default_objective
    state = module.build(config, objective).state_dict()
    hf_state = state_to_hf(state, config, prefix="bert.")
    back, unused = state_from_hf(hf_state, config)
    # SpanBERT's boundary head has no Hugging Face name; tied decoder weights are not written.
    expected = {k for k in state if not k.startswith("sbo_head.") and k != "mlm_head.decoder.weight"}
    assert set(back) == expected and unused == []
    for key in expected:
        assert torch.equal(back[key], state[key]), key


# --- atomic writes ------------------------------------------------------------------------------------


def test_write_atomic_replaces_text_or_bytes_and_leaves_nothing_else(tmp_path) -> None:
    target = tmp_path / "sub" / "f.json"
    io.write_atomic(target, "first\n")
    io.write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_a_failed_write_keeps_the_old_file_and_the_old_directory(tmp_path) -> None:
    target = tmp_path / "f.bin"
    io.write_atomic(target, b"old")

    def broken(path: str) -> None:
        Path(path).write_bytes(b"half")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        io.replace_atomically(broken, target)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.bin"]

    out = tmp_path / "model"
    io.write_dir_atomic(out, lambda d: (d / "a.txt").write_text("1"))
    io.write_dir_atomic(out, lambda d: (d / "b.txt").write_text("2"))
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]  # replaced as a whole

    def half_dir(d: Path) -> None:
        (d / "c.txt").write_text("3")
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        io.write_dir_atomic(out, half_dir)
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin", "model"]
