"""MASS pretraining through the shared trainer: one masked span per block, the decoder writing it from
[MASK] at the span's own positions, a loss that falls, a checkpoint that loads back, and what MASS refuses."""

from __future__ import annotations

import json

import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.errors import ConfigError
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.train.pretrain import build_pretraining, pretrain

from helpers.pretrain import tiny_config

MASS_TINY = {"preset": "mass-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


def mass_config(shards, out, args=None, **train):
    cfg = tiny_config(shards, out, **train)
    cfg.variant = "mass"
    cfg.objective = "mass"
    cfg.objective_args = dict(args or {})
    cfg.model = dict(MASS_TINY)
    cfg.data.short_seq_prob = 0.0
    return cfg


def test_a_batch_masks_one_span_and_the_decoder_writes_it_at_its_positions(synthetic_shards, tmp_path):
    objective, dataset, collator, tokenizer = build_pretraining(mass_config(synthetic_shards, tmp_path / "r"))
    assert isinstance(objective, EncoderDecoderLM)
    assert objective.config.decoder_start_token_id == tokenizer.mask_id
    assert objective.config.norm == "post" and objective.config.position == "learned"
    dataset.set_epoch(0)
    examples = [dataset[i] for i in range(8)]
    batch = collator(examples)
    special = set(tokenizer.special_ids.tolist())
    for row, ex in enumerate(examples):
        text = [int(t) for t in ex["input_ids"] if int(t) not in special]
        target = [t for t in batch.labels[row].tolist() if t != IGNORE_INDEX]
        positions = batch.extra["decoder_position_ids"][row, : len(target)].tolist()
        assert len(target) == max(1, round(0.5 * len(text)))
        assert positions == list(range(positions[0], positions[0] + len(target)))
        assert target == text[positions[0] : positions[0] + len(target)]  # the span, from the sentence
        src = batch.input_ids[row, : len(text)].tolist()
        outside = [i for i in range(len(text)) if not positions[0] <= i < positions[0] + len(target)]
        assert [src[i] for i in outside] == [text[i] for i in outside]  # only the span is corrupted
        masked = sum(src[i] == tokenizer.mask_id for i in range(positions[0], positions[0] + len(target)))
        assert masked >= 0.5 * len(target) - 1  # ~80% [MASK]
        dec = batch.extra["decoder_input_ids"][row, : len(target)].tolist()
        assert dec == [tokenizer.mask_id, *target[:-1]]


def test_decoder_positions_change_the_prediction(synthetic_shards, tmp_path):
    """The decoder reads where the span lies: the same tokens at other positions give other logits."""
    objective, dataset, collator, _ = build_pretraining(mass_config(synthetic_shards, tmp_path / "r"))
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(4)])
    objective.eval()
    with torch.no_grad():
        a = objective(batch).loss
        batch.extra["decoder_position_ids"] = batch.extra["decoder_position_ids"] + 3
        b = objective(batch).loss
    assert not torch.isclose(a, b)


def test_k_reaches_the_noise_and_bad_args_are_refused(synthetic_shards, tmp_path):
    _, dataset, collator, _ = build_pretraining(mass_config(synthetic_shards, tmp_path / "a", args={"k": 2}))
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(8)])
    assert ((batch.labels != IGNORE_INDEX).sum(1) <= 2).all()
    with pytest.raises(ConfigError, match="objective_args.k"):
        build_pretraining(mass_config(synthetic_shards, tmp_path / "b", args={"k": 1.5}))
    with pytest.raises(ConfigError, match="noise_density"):
        build_pretraining(mass_config(synthetic_shards, tmp_path / "c", args={"noise_density": 0.1}))
    cfg = mass_config(synthetic_shards, tmp_path / "d")
    cfg.model["position"] = "none"
    with pytest.raises(ConfigError, match="absolute positions"):
        build_pretraining(cfg)


def test_pretraining_learns_and_the_checkpoint_loads_back(synthetic_shards, tmp_path):
    cfg = mass_config(synthetic_shards, tmp_path / "run", max_steps=200, lr=3e-3, eval_every=200)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["lm_loss"] for r in rows if "lm_loss" in r]
    assert losses[-1] < losses[0] - 0.8  # post-norm and a half-sentence span: slower than T5 at this size
    evals = [r for r in rows if "eval_lm_loss" in r]
    assert evals[-1]["eval_lm_loss"] < summary["baseline"]["unigram_lm_loss"]
    from bertzoo.loading import load_pretraining

    model = load_pretraining(tmp_path / "run" / "final")
    assert isinstance(model, EncoderDecoderLM) and model.config.variant == "mass"
    fresh, dataset, collator, _ = build_pretraining(cfg)
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(16)])
    model.eval()
    fresh.eval()
    with torch.no_grad():
        assert float(model(batch).loss) < float(fresh(batch).loss) - 0.5
