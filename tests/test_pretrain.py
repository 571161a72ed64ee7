"""The assembled pretraining pipeline: exact resume with the real BERT objective, held-out eval."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from bertzoo.config import ConfigError, load_pretrain_config
from bertzoo.train.pretrain import build_pretraining, pretrain

TINY_MODEL = {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


def tiny_config(shards, out, **train):
    overrides = {
        "model": TINY_MODEL,
        "data.shards": str(shards),
        "data.max_seq_len": 48,
        "train.output_dir": str(out),
        "train.batch_size": 8,
        "train.max_steps": 20,
        "train.lr": 1e-3,
        "train.warmup_steps": 4,
        "train.log_every": 5,
        "train.save_every": 10,
        "train.threads": 1,
    }
    overrides.update({f"train.{k}": v for k, v in train.items()})
    return load_pretrain_config(None, overrides)


def test_resume_is_bitwise_exact(synthetic_shards, tmp_path):
    """20 steps straight == 10 steps, stop, resume, 10 more steps (parameters bit for bit)."""
    straight = pretrain(tiny_config(synthetic_shards, tmp_path / "a"))
    assert straight["steps"] == 20
    first = pretrain(tiny_config(synthetic_shards, tmp_path / "b", max_steps=10))
    assert first["steps"] == 10
    resumed = pretrain(tiny_config(synthetic_shards, tmp_path / "b"), resume="auto")
    assert resumed["steps"] == 20
    a = load_file(tmp_path / "a" / "final" / "model.safetensors")
    b = load_file(tmp_path / "b" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), key
    # And training really moved the weights.
    init_dir = tmp_path / "b" / "checkpoints"
    assert sorted(p.name for p in init_dir.iterdir() if p.name.startswith("step-"))[-1] == "step-00000020"


def test_eval_reports_unigram_baseline(synthetic_shards, tmp_path):
    cfg = tiny_config(synthetic_shards, tmp_path / "run", max_steps=6, eval_every=3)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    base = summary["baseline"]
    assert 0.0 < base["unigram_mlm_acc"] < 0.5
    assert base["unigram_mlm_loss"] > 1.0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval_mlm_acc" in r]
    assert [r["step"] for r in evals][:2] == [3, 6]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 6


def test_vocab_and_length_are_checked_before_training(synthetic_shards, tmp_path):
    cfg = tiny_config(synthetic_shards, tmp_path / "x")
    cfg.model = {**TINY_MODEL, "vocab_size": 50}
    with pytest.raises(ConfigError, match="vocab_size=50 but the shards' tokenizer has"):
        build_pretraining(cfg)
    cfg = tiny_config(synthetic_shards, tmp_path / "y")
    cfg.data.max_seq_len = 128
    with pytest.raises(ConfigError, match="exceeds model.max_position=64"):
        build_pretraining(cfg)
