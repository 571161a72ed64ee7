"""ELMo pretraining through the shared trainer: packed unmasked blocks, a character table spelled from the
run's vocabulary, held-out forward and backward perplexities computed apart, checkpoints that reload
exactly, exact resume, the shipped config, and the settings ELMo refuses. Tiny models, one thread."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import load_pretrain_config
from bertzoo.errors import ConfigError
from bertzoo.loading import load, load_encoder, load_pretraining
from bertzoo.models.elmo import Elmo, char_table
from bertzoo.objectives.bilm import BidirectionalLM, bilm_targets
from bertzoo.train.pretrain import build_pretraining, fixed_eval_batches, make_mlm_evaluator, pretrain

from helpers.pretrain import assert_resume_is_exact, tiny_config

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN"),
]

ELMO_TINY = {"preset": "elmo-tiny"}


def elmo_config(shards, out, **train):
    cfg = tiny_config(shards, out, **train)
    cfg.variant = "elmo"
    cfg.objective = ""  # the variant's default: bilm
    cfg.model = dict(ELMO_TINY)
    cfg.data.short_seq_prob = 0.0
    return cfg


def with_eval(cfg, shards, batches: int = 2):
    cfg.data.eval_shards = str(shards)
    cfg.data.eval_batches = batches
    return cfg


def eval_rows(run) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "eval_loss" in r]


def test_blocks_are_unmasked_and_the_character_table_spells_the_vocabulary(synthetic_shards, tmp_path):
    cfg = elmo_config(synthetic_shards, tmp_path / "run")
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    assert isinstance(objective, BidirectionalLM) and isinstance(objective.encoder, Elmo)
    assert objective.config.variant == "elmo" and objective.config.vocab_size == tokenizer.vocab_size
    expected = char_table(tokenizer.vocab_list(), objective.config.max_chars)
    assert torch.equal(objective.encoder.char_ids, expected)
    assert (expected[tokenizer.special.cls] != 0).any() and not torch.equal(expected[7], expected[8])
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(6)])
    assert not (batch.input_ids == tokenizer.special.mask).any()
    assert (batch.input_ids[:, 0] == tokenizer.special.cls).all()
    real = batch.attention_mask.bool()
    assert real.sum(1).max() > 20  # packed: long rows, not single short sentences
    forward, backward = bilm_targets(batch.input_ids, batch.attention_mask)
    # Every real token is a target of both LMs except the first (forward) and the last (backward) of a row.
    assert int((forward != IGNORE_INDEX).sum()) == int((backward != IGNORE_INDEX).sum()) == int(real.sum()) - 6


def test_held_out_loss_falls_and_both_perplexities_are_reported(synthetic_shards, tmp_path):
    cfg = elmo_config(synthetic_shards, tmp_path / "run", max_steps=80, eval_every=20, lr=5e-3)
    cfg.model.update(hidden_size=32, lstm_size=64)
    summary = pretrain(with_eval(cfg, synthetic_shards))
    evals = eval_rows(tmp_path / "run")
    assert [r["step"] for r in evals][:4] == [20, 40, 60, 80]
    first, last = evals[0], evals[-1]
    for row in evals:
        for direction in ("fwd", "bwd"):
            # Perplexity of the held-out set: exp of its mean loss, not a mean of per-batch perplexities.
            assert row[f"eval_{direction}_ppl"] == pytest.approx(math.exp(row[f"eval_{direction}_loss"]))
    assert last["eval_loss"] < first["eval_loss"] - 0.2, (first, last)  # 5.70 -> 5.35 when written
    assert last["eval_fwd_ppl"] < first["eval_fwd_ppl"] and last["eval_bwd_ppl"] < first["eval_bwd_ppl"]
    # Below the next-token unigram baseline (5.68 nats; both LMs about 5.35-5.38 when written).
    assert last["eval_fwd_loss"] < summary["baseline"]["unigram_lm_loss"] - 0.1
    assert last["eval_bwd_loss"] < summary["baseline"]["unigram_lm_loss"] - 0.1


def test_each_direction_is_scored_on_its_own(synthetic_shards, tmp_path):
    """The evaluator's fwd/bwd numbers are the two LMs' own held-out cross-entropies, recomputed here from
    the reloaded model's states; spoiling the backward LSTMs moves the backward perplexity only."""
    cfg = with_eval(elmo_config(synthetic_shards, tmp_path / "run", max_steps=10), synthetic_shards)
    pretrain(cfg)
    model = load_pretraining(tmp_path / "run" / "final").eval()
    _, _, collator, tokenizer = build_pretraining(cfg)
    batches = fixed_eval_batches(cfg, tokenizer, collator)
    evaluate, _ = make_mlm_evaluator(batches)
    with torch.no_grad():
        before = evaluate(model)
        losses = {"fwd": [], "bwd": []}
        for batch in batches:
            out = model.encoder(batch.input_ids, batch.attention_mask)
            for name, states, targets in zip(
                ("fwd", "bwd"),
                (out.forward_states, out.backward_states),
                bilm_targets(batch.input_ids, batch.attention_mask),
                strict=True,
            ):
                keep = targets != IGNORE_INDEX
                logits = model.encoder.softmax(states[keep])
                losses[name].append(F.cross_entropy(logits, targets[keep], reduction="none"))
        for name in ("fwd", "bwd"):
            mean = float(torch.cat(losses[name]).mean())
            assert before[f"eval_{name}_loss"] == pytest.approx(mean, rel=1e-5)
            assert before[f"eval_{name}_ppl"] == pytest.approx(math.exp(mean), rel=1e-5)
        assert before["eval_fwd_loss"] != pytest.approx(before["eval_bwd_loss"], rel=1e-4)
        for p in model.encoder.backward_lstm.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
        after = evaluate(model)
    assert after["eval_fwd_loss"] == before["eval_fwd_loss"]
    assert after["eval_bwd_loss"] > before["eval_bwd_loss"] + 0.1


def test_a_checkpoint_reloads_with_identical_outputs(synthetic_shards, tmp_path):
    cfg = elmo_config(synthetic_shards, tmp_path / "run", max_steps=10, save_every=5)
    objective, dataset, collator, _ = build_pretraining(cfg)
    pretrain(cfg)
    checkpoint = tmp_path / "run" / "checkpoints" / "step-00000010"
    saved = json.loads((checkpoint / "config.json").read_text())
    assert saved["variant"] == "elmo" and saved["objective"] == "bilm"
    assert saved["char_filters"] == [[1, 8], [2, 8], [3, 16]] and saved["lstm_size"] == 32
    assert (checkpoint / "model.safetensors").is_file()
    trained = load_file(checkpoint / "model.safetensors")
    assert "encoder.char_ids" in trained and "encoder.softmax.weight" in trained

    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(4)])
    model = load_pretraining(checkpoint).eval()
    assert isinstance(model, BidirectionalLM)
    assert not torch.equal(model.encoder.softmax.weight, objective.encoder.softmax.weight)  # trained, not fresh
    objective.load_state_dict(trained)
    objective.eval()
    with torch.no_grad():
        a, b = objective(batch), model(batch)
        assert torch.equal(a.loss, b.loss)
        for h, g in zip(objective.encode(batch).hidden_states, model.encode(batch).hidden_states, strict=True):
            assert torch.equal(h, g)
        # The backbone alone, and `load`, find the same model.
        encoder = load_encoder(tmp_path / "run" / "final").eval()
        assert isinstance(encoder, Elmo)
        kind, again = load(tmp_path / "run" / "final")
        assert kind == "pretraining" and isinstance(again, BidirectionalLM)
        final = load_pretraining(tmp_path / "run" / "final").eval()
        torch.testing.assert_close(
            encoder(batch.input_ids, batch.attention_mask).forward_states,
            final.encode(batch).forward_states,
            rtol=0,
            atol=0,
        )
        assert torch.equal(BidirectionalLM.from_pretrained(checkpoint)(batch).loss, b.loss)


def test_resume_is_exact(synthetic_shards, tmp_path):
    """12 steps straight == the same run stopped (SIGTERM) after step 6, then resumed."""
    assert_resume_is_exact(elmo_config, synthetic_shards, tmp_path)


@pytest.mark.parametrize(
    "model, says",
    [
        ({"char_filters": [[3]]}, r"model\.char_filters\[0\]=\[3\] is not a \[width, count\] pair"),
        ({"char_filters": [[0, 8]]}, r"model\.char_filters\[0\]"),
        ({"char_filters": "wide"}, r"model\.char_filters must be a list"),
        ({"max_chars": 2}, r"model\.max_chars=2"),
        ({"char_filters": [[13, 4]]}, r"wider than max_chars=12"),
        ({"highway_layers": -1}, r"model\.highway_layers must be >= 0"),
        ({"char_embedding_size": 0}, r"model\.char_embedding_size must be positive"),
        ({"lstm_size": 16}, r"model\.lstm_size=16 must exceed model\.hidden_size=16"),
        ({"char_filters": []}, r"model\.char_filters is empty"),
        ({"lstm_units": 64}, r"unknown config key model\.lstm_units"),
        ({"preset": "elmo-huge"}, r"not a ELMo preset"),
    ],
)
def test_bad_elmo_settings_are_config_errors(synthetic_shards, tmp_path, model, says):
    cfg = elmo_config(synthetic_shards, tmp_path / "x")
    cfg.model.update(model)
    with pytest.raises(ConfigError, match=says):
        build_pretraining(cfg)


def test_recipes_elmo_refuses(synthetic_shards, tmp_path):
    for change, says in (
        (lambda c: setattr(c.data, "input_format", "segment_pair"), "not a ELMo input format"),
        (lambda c: setattr(c, "objective", "mlm"), "bilm"),
        (lambda c: c.objective_args.update(plm_probability=0.2), "objective_args"),
        (lambda c: setattr(c, "mlm_bias_init", "unigram"), "mlm_bias_init"),
        # ELMo reads characters: there is no word table to start from PPMI + SVD vectors.
        (lambda c: setattr(c, "word_embedding_init", "ppmi-svd"), "word_embedding_init: ppmi-svd needs a word table"),
    ):
        cfg = elmo_config(synthetic_shards, tmp_path / "y")
        change(cfg)
        with pytest.raises(ConfigError, match=says):
            build_pretraining(cfg)


def test_cli_pretrains_the_shipped_config(synthetic_shards, tmp_path, capsys):
    from bertzoo.cli import main

    shipped = load_pretrain_config("configs/pretrain/elmo-mini.yaml")
    assert shipped.variant == "elmo" and shipped.model["preset"] == "elmo-mini"
    assert shipped.train.precision == "auto"
    out = tmp_path / "cli"
    args = [
        "pretrain",
        "configs/pretrain/elmo-mini.yaml",
        "--data.shards",
        str(synthetic_shards),
        f"--data.eval_shards={synthetic_shards}",
        "--data.eval_batches=1",
        "--model.hidden_size=16",
        "--model.lstm_size=32",
        "--model.char_filters=[[1, 4], [2, 4]]",
        "--data.max_seq_len=32",
        "--train.max_steps=2",
        "--train.eval_every=2",
        "--train.batch_size=4",
        f"--train.output_dir={out}",
        "--train.threads=1",
    ]
    assert main(args) == 0
    assert (out / "final" / "model.safetensors").is_file() and (out / "final" / "config.json").is_file()
    row = eval_rows(out)[-1]
    assert {"eval_fwd_ppl", "eval_bwd_ppl", "eval_fwd_loss", "eval_bwd_loss"} <= row.keys()
    capsys.readouterr()
    bad = [a if not a.startswith("--train.output_dir") else f"--train.output_dir={tmp_path / 'bad'}" for a in args]
    assert main([*bad, "--model.char_filters=[[1]]"]) == 2
    err = capsys.readouterr().err
    assert "model.char_filters[0]" in err and len(err.strip().splitlines()) == 1, err
