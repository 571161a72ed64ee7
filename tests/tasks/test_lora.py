"""LoRA fine-tuning (technique.lora, through peft): what trains, the start equal to the pretrained model, the
merged model directories (load_finetuned, Hugging Face export), seq2seq, bad input and exact resume."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertzoo.batch import Batch
from bertzoo.config import TechniqueConfig
from bertzoo.config.runs import LoraConfig, load_finetune_config
from bertzoo.engine.weights import load_weights
from bertzoo.errors import ConfigError
from bertzoo.loading import load_finetuned
from bertzoo.tasks.techniques import apply_techniques
from bertzoo.train.finetune import finetune

from helpers.finetune import tiny_finetune_config, write_task_files
from helpers.seq2seq import WORDS, mapping_examples, t5_run_config, write_jsonl
from helpers.tasks import small_tokenizer
from helpers.toy_task import LAYERS, TinyClassifier, collate, tiny_encoder, toy_data

# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")

LORA_KEY = ("lora_", "base_layer")


def batch_of(n: int = 8, seed: int = 0) -> Batch:
    data = toy_data(n, seed)
    return collate([data[i] for i in range(n)])


def lora(**kw) -> TechniqueConfig:
    return TechniqueConfig(lora=LoraConfig(**kw))


# ------------------------------------------------------------------------------------------ the model


def test_only_lora_matrices_and_the_head_train_with_the_hand_counted_size() -> None:
    model = TinyClassifier(tiny_encoder())
    done = apply_techniques(model, lora(r=4, alpha=8))
    assert done == {"lora_layers": 4 * LAYERS}  # qkv, out, up, down in each layer
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {
        f"encoder.stack.layers.{i}.{m}.lora_{ab}.default.weight"
        for i in range(LAYERS)
        for m in ("attention.qkv", "attention.out", "ffn.up", "ffn.down")
        for ab in "AB"
    } | {"head.classifier.weight", "head.classifier.bias"}
    assert trainable == expected
    # hidden 16, intermediate 32, r 4: r * (in + out) per adapted layer, the 16 -> 3 classifier on top.
    per_layer = 4 * (16 + 48) + 4 * (16 + 16) + 4 * (16 + 32) + 4 * (32 + 16)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == LAYERS * per_layer + 16 * 3 + 3 == 2355

    only_qkv = TinyClassifier(tiny_encoder())
    assert apply_techniques(only_qkv, lora(r=2, target_modules=["attention.qkv"])) == {"lora_layers": LAYERS}
    assert sum(p.numel() for p in only_qkv.parameters() if p.requires_grad) == LAYERS * 2 * (16 + 48) + 51


def test_a_fresh_lora_model_computes_exactly_what_the_model_did() -> None:
    model = TinyClassifier(tiny_encoder()).eval()
    batch = batch_of(6, seed=2)
    with torch.no_grad():
        before = model(batch).logits.clone()
    apply_techniques(model, lora(r=8, alpha=16))
    with torch.no_grad():
        assert torch.equal(model(batch).logits, before)  # B = 0: the update adds exact zeros


def test_bad_lora_settings_are_refused_in_one_line(monkeypatch) -> None:
    with pytest.raises(ConfigError) as err:
        apply_techniques(TinyClassifier(tiny_encoder()), lora(r=4, target_modules=["query"]))
    message = str(err.value)
    assert "\n" not in message and "'query'" in message
    assert message.endswith("the model's linear layers: dense, down, out, qkv, up")  # pooler.dense too
    for other in ({"adapter_size": 8}, {"freeze_encoder": True}, {"gradual_unfreezing": True}):
        with pytest.raises(ConfigError, match="keep one of them"):
            apply_techniques(TinyClassifier(tiny_encoder()), TechniqueConfig(lora=LoraConfig(r=4), **other))
    with pytest.raises(ConfigError, match=r"lora.r must be >= 0"):
        apply_techniques(TinyClassifier(tiny_encoder()), lora(r=-1))
    monkeypatch.setitem(sys.modules, "peft", None)  # not installed
    with pytest.raises(ConfigError) as err:
        apply_techniques(TinyClassifier(tiny_encoder()), lora(r=4))
    assert str(err.value).endswith("pip install 'bertzoo[lora]'") and "\n" not in str(err.value)
    assert apply_techniques(TinyClassifier(tiny_encoder()), lora(r=0)) == {}  # off: peft never imported


# ------------------------------------------------------------------------------------- fine-tuning runs


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    """A tiny classification run with LoRA (r 4, alpha 8) and checkpoints every 5 steps."""
    root = tmp_path_factory.mktemp("lora")
    paths = write_task_files(root / "data")
    cfg = tiny_finetune_config(paths, root / "run", epochs=2, save_every=5, lr=2e-2)
    cfg.technique.lora = LoraConfig(r=4, alpha=8)
    summary = finetune(cfg)
    assert summary["completed"] and summary["model_from"] == "best"
    return root


def task_paths(data: Path) -> dict[str, str]:
    """The files `write_task_files` wrote into `data`."""
    return {s: str(data / f"{s}.jsonl") for s in ("train", "dev", "test")} | {"tokenizer": str(data / "tok")}


def lora_model_of(directory: Path):
    """The in-memory LoRA model of a run directory: the plain model rebuilt, LoRA put on, the run's files
    (merged weights + the exact unmerged LoRA state beside them) loaded back."""
    task, plain, tok = load_finetuned(directory)
    model = copy.deepcopy(plain)
    apply_techniques(model, lora(r=4, alpha=8), seed=123)  # another A: loading must replace it
    load_weights(model, directory / "model.safetensors")
    return task, plain, model.eval(), tok


def test_the_saved_model_is_plain_merged_and_computes_what_the_lora_model_does(lora_run: Path) -> None:
    run = lora_run / "run"
    keys = set(load_file(run / "model" / "model.safetensors"))
    assert keys and not [k for k in keys if any(s in k for s in LORA_KEY)]
    assert not (run / "model" / "lora.safetensors").exists()
    best = load_file(run / "best" / "model.safetensors")
    assert set(best) == keys  # best/ too holds the plain keys (its LoRA state lies beside it)

    task, plain, model, _ = lora_model_of(run / "best")
    state = load_file(run / "best" / "lora.safetensors")
    prefix = "encoder.stack.layers.1.ffn.up."
    a, b = state[prefix + "lora_A.default.weight"], state[prefix + "lora_B.default.weight"]
    assert b.abs().max() > 1e-3  # training moved B off zero: the merge has something to fold in
    # W' = W + (alpha / r) B A, by hand.
    merged = load_file(run / "model" / "model.safetensors")[prefix + "weight"]
    torch.testing.assert_close(merged, state[prefix + "base_layer.weight"] + 2.0 * b @ a, rtol=0, atol=1e-6)

    ids = torch.randint(5, 30, (4, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    batch = Batch(input_ids=ids, attention_mask=mask)
    _, saved, _ = load_finetuned(run / "model")
    with torch.no_grad():
        ours = model(batch).logits
        torch.testing.assert_close(saved(batch).logits, ours, rtol=0, atol=1e-5)
        torch.testing.assert_close(plain(batch).logits, ours, rtol=0, atol=1e-5)


def test_the_merged_model_exports_to_hugging_face_with_equal_logits(lora_run: Path, tmp_path: Path) -> None:
    import transformers

    from bertzoo.cli import main

    run = lora_run / "run"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(run / "model"), str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    _, _, model, _ = lora_model_of(run / "best")
    ids = torch.randint(5, 30, (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0
    with torch.no_grad():
        ours = model(Batch(input_ids=ids, attention_mask=mask)).logits
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)


def test_a_resumed_lora_run_ends_with_the_weights_of_an_uninterrupted_one(lora_run: Path) -> None:
    paths = task_paths(lora_run / "data")
    out = lora_run / "resumed"
    cfg = tiny_finetune_config(paths, out, epochs=2, save_every=5, lr=2e-2, max_minutes=1e-9, schedule_clock="steps")
    cfg.technique.lora = LoraConfig(r=4, alpha=8)
    stopped = finetune(cfg)  # a spent time budget: stops after its first step, with a checkpoint
    assert not stopped["completed"] and stopped["steps"] == 1
    cfg.train.max_minutes = None
    resumed = finetune(cfg, resume="auto")
    assert resumed["completed"] and resumed["steps"] == 30
    # final/ (the last step's weights; model/ is the best evaluation's, and the stopped run evaluated at step 1).
    for name in ("final/model.safetensors", "final/lora.safetensors"):
        want, got = load_file(lora_run / "run" / name), load_file(out / name)
        assert set(want) == set(got) and all(torch.equal(want[k], got[k]) for k in want), name


def test_a_t5_seq2seq_run_with_lora_saves_plain_merged_weights(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    tok = small_tokenizer(tmp_path / "tok", WORDS)
    data = {
        "train": write_jsonl(tmp_path / "train.jsonl", mapping_examples(32, 0)),
        "dev": write_jsonl(tmp_path / "dev.jsonl", mapping_examples(8, 1)),
    }
    path = t5_run_config(tmp_path, tok, data, {"lora": {"r": 4, "alpha": 8}}, max_steps=12, lr=2e-2)
    cfg = load_finetune_config(path, {"technique.lora.target_modules": ["qkv", "q", "kv", "out", "up", "down"]})
    summary = finetune(cfg)
    assert summary["completed"]
    # t5-tiny: 2 encoder layers (qkv, out, up, down) and 2 decoder layers (+ cross q, kv, out); d 64, ff 128,
    # inner 64; nothing else trains (the LM head is pretrained). r (in + out) per layer:
    enc = 4 * (64 + 192) + 4 * (64 + 64) + 4 * (64 + 128) * 2
    dec = enc + 4 * (64 + 64) + 4 * (64 + 128) + 4 * (64 + 64)
    assert summary["trainable_parameters"]["trainable"] == 2 * (enc + dec)
    model_dir = tmp_path / "run" / "model"
    keys = set(load_file(model_dir / "model.safetensors"))
    assert not [k for k in keys if any(s in k for s in LORA_KEY)] and "decoder.stack.layers.0.cross.kv.weight" in keys

    task, saved, _ = load_finetuned(model_dir)
    lora_model = copy.deepcopy(saved)
    apply_techniques(lora_model, cfg.technique, seed=5)
    load_weights(lora_model, tmp_path / "run" / "best" / "model.safetensors")
    lora_model.eval()
    examples = mapping_examples(4, 2)
    batch = task.collate([task.featurize(examples, "x")[i] for i in range(4)])
    with torch.no_grad():
        torch.testing.assert_close(saved(batch).loss, lora_model(batch).loss, rtol=0, atol=1e-5)


def test_the_cli_refuses_an_unknown_target_in_one_line_and_exits_2(lora_run: Path, tmp_path: Path, capsys) -> None:
    import yaml

    from bertzoo.cli import main
    from bertzoo.config import to_plain

    config = tiny_finetune_config(task_paths(lora_run / "data"), tmp_path / "out")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(to_plain(config)))
    capsys.readouterr()
    args = ["finetune", str(tmp_path / "run.yaml"), "--technique.lora.r", "8", "--technique.lora.target_modules"]
    assert main([*args, "[qkv, query]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no linear layer named 'query'" in err[0] and "qkv, up" in err[0], err
    assert not (tmp_path / "out" / "model").exists()
