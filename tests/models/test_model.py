"""Encoder, heads and the MLM(+NSP) objective: sizes, equivalences, save/load."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import ModelConfig
from bertzoo.errors import BertzooError, CheckpointError, ConfigError
from bertzoo.hub import load_encoder, load_pretraining
from bertzoo.models.encoder import Encoder
from bertzoo.variants import VARIANTS, get_variant
from bertzoo.variants.bert import PRESETS, build, model_config

TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)


def tiny_batch(vocab=97, b=3, s=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, s), generator=g)
    am = torch.ones_like(ids)
    am[0, 8:] = 0
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 2] = ids[:, 2]
    labels[1:, 5] = ids[1:, 5]
    return Batch(
        input_ids=ids,
        attention_mask=am,
        token_type_ids=torch.zeros_like(ids),
        labels=labels,
        next_sentence_label=torch.tensor([0, 1, 0]),
    )


def published_count(preset):
    """Independent count for BERT from the architecture's formula (not from our modules)."""
    p = PRESETS[preset]
    h, i, L, v = p["hidden_size"], p["intermediate_size"], p["num_layers"], 30522
    emb = v * h + 512 * h + 2 * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return emb + L * layer + (h * h + h)


@pytest.mark.parametrize("preset,paper", [("bert-base", 110e6), ("bert-large", 340e6)])
def test_parameter_counts(preset, paper):
    enc = Encoder(model_config({"preset": preset}))
    n = enc.num_parameters()
    assert n == published_count(preset)
    # The paper rounds: base 109.5M ("110M"); large 335.1M ("340M", 1.4% above the exact count).
    assert abs(n - paper) / paper < (0.01 if preset == "bert-base" else 0.015)


def test_every_preset_builds_and_trains_a_step():
    """Every preset of every family (widths shrunk) builds, and a few optimizer steps on one batch lower its
    pretraining loss: gradients reach the token table and the update moves the loss the right way."""
    for variant in VARIANTS.values():
        for name in variant.presets:
            # Keep the shape of each preset but shrink widths so the test is fast.
            small = {"vocab_size": 97, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64, "num_layers": 2}
            if variant.name == "elmo":
                small["lstm_size"] = 64  # ELMo's LSTM cell, wider than hidden_size
            cfg = variant.model_config({"preset": name, **small})
            torch.manual_seed(0)
            model = variant.build(cfg).eval()  # no dropout: each step sees the same function of the weights
            if variant.use_tokenizer is not None:  # ELMo spells its vocabulary into its character table
                variant.use_tokenizer(model, SimpleNamespace(vocab_list=lambda: [f"w{i}" for i in range(97)]))
            optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
            losses = []
            for _ in range(4):
                torch.manual_seed(1)  # ELECTRA's sampled replacements: the same ones every step
                out = model(tiny_batch())
                optimizer.zero_grad()
                out.loss.backward()
                losses.append(float(out.loss))
                if len(losses) == 1:
                    # The token table: a word table, or ELMo's character embeddings (it has no word table).
                    enc = model.encoder
                    table = (
                        enc.word_embeddings if hasattr(enc, "word_embeddings") else enc.token_encoder.char_embeddings
                    )
                    assert table.weight.grad is not None and table.weight.grad.abs().sum() > 0, (variant.name, name)
                optimizer.step()
            assert all(map(math.isfinite, losses)) and losses[-1] < losses[0], (variant.name, name, losses)


def test_unknown_preset_and_variant_are_config_errors():
    with pytest.raises(ConfigError, match="bert-mini"):
        model_config({"preset": "bert-huge"})
    with pytest.raises(ConfigError, match="unknown config key model.hiden_size"):
        model_config({"hiden_size": 3})
    with pytest.raises(ConfigError, match="bert"):
        get_variant("bort")
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(hidden_size=30, num_heads=4)


def test_masked_only_head_equals_full_head_gathered():
    torch.manual_seed(0)
    model = build(ModelConfig(**TINY)).eval()
    b = tiny_batch()
    hidden = model.encoder(b.input_ids, b.attention_mask).last_hidden_state
    sel = b.labels != IGNORE_INDEX
    full = model.mlm_head(hidden)  # (batch, seq, vocab)
    torch.testing.assert_close(model.mlm_head(hidden, sel), full[sel])


def test_loss_is_sum_of_mean_mlm_and_mean_nsp():
    torch.manual_seed(0)
    model = build(ModelConfig(**TINY)).eval()
    b = tiny_batch()
    out = model(b)
    enc = model.encoder(b.input_ids, b.attention_mask, b.token_type_ids)
    sel = b.labels != IGNORE_INDEX
    mlm_logits = model.mlm_head(enc.last_hidden_state)[sel]
    mlm = torch.nn.functional.cross_entropy(mlm_logits, b.labels[sel])
    nsp = torch.nn.functional.cross_entropy(model.nsp_head(enc.pooler_output), b.next_sentence_label)
    torch.testing.assert_close(out.loss, mlm + nsp)
    assert out.counts["mlm_acc"].item() == int(sel.sum())
    assert 0.0 <= out.metrics["nsp_acc"].item() <= 1.0


def test_decoder_is_tied_to_word_embeddings():
    model = build(ModelConfig(**TINY))
    assert model.mlm_head.decoder.weight is model.encoder.embeddings.word.weight


def test_batch_without_masked_tokens_still_backpropagates():
    model = build(ModelConfig(**TINY), objective="mlm")
    b = tiny_batch()
    b.labels = torch.full_like(b.labels, IGNORE_INDEX)
    out = model(b)
    out.loss.backward()
    assert out.loss.item() == 0.0


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    model = build(ModelConfig(**TINY)).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "config.json").is_file()
    loaded = load_pretraining(tmp_path).eval()
    b = tiny_batch()
    torch.testing.assert_close(model(b).loss, loaded(b).loss, rtol=0, atol=0)
    enc = load_encoder(tmp_path).eval()
    torch.testing.assert_close(
        enc(b.input_ids, b.attention_mask).last_hidden_state,
        model.encoder(b.input_ids, b.attention_mask).last_hidden_state,
        rtol=0,
        atol=0,
    )
    # Encoder-only save loads back too.
    model.encoder.save_pretrained(tmp_path / "enc")
    again = Encoder.from_pretrained(str(tmp_path / "enc")).eval()
    assert torch.equal(again.pooler.dense.weight, model.encoder.pooler.dense.weight)


def test_shape_mismatch_is_named(tmp_path):
    build(ModelConfig(**TINY)).save_pretrained(tmp_path)
    import json

    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 48
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"shape mismatches: .*ffn\.up\.weight"):
        load_pretraining(tmp_path)


def test_missing_directory_and_weights(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_encoder(tmp_path / "nope")
    ModelConfig(**TINY).save(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="no weights"):
        load_encoder(tmp_path)


def test_sequence_longer_than_positions_is_a_clear_error():
    model = build(ModelConfig(**TINY))
    with pytest.raises(BertzooError, match="exceeds the model's position table"):
        model.encoder(torch.ones(1, 65, dtype=torch.long))


def test_pre_norm_and_sinusoidal_and_shared_build():
    cfg = ModelConfig(**{**TINY, "norm": "pre", "position": "sinusoidal", "share": "all", "embedding_size": 16})
    model = build(cfg, objective="mlm")
    out = model(tiny_batch())
    out.loss.backward()
    assert model.encoder.final_norm is not None
    assert len(model.encoder.stack.layers) == 1
    assert model.mlm_head.decoder.weight.shape == (97, 16)
