"""The assembled pretraining pipeline: exact resume with the real BERT objective, held-out eval."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
from safetensors.torch import load_file

from bertzoo.config import load_pretrain_config
from bertzoo.engine.loop import Trainer
from bertzoo.errors import ConfigError
from bertzoo.train.pretrain import build_pretraining, fixed_eval_batches, pretrain

from helpers.pretrain import TINY_MODEL, tiny_config


def test_resume_is_bitwise_exact(synthetic_shards, tmp_path):
    """20 steps straight == the same 20-step run stopped (SIGTERM) at step 10, then resumed."""
    straight = pretrain(tiny_config(synthetic_shards, tmp_path / "a"))
    assert straight["steps"] == 20

    cfg = tiny_config(synthetic_shards, tmp_path / "b")
    objective, dataset, collator, tokenizer = build_pretraining(cfg)

    def stop(trainer, step):
        # The signal is honoured after the next step: the run checkpoints at step 10 and returns.
        if step == 9:
            os.kill(os.getpid(), signal.SIGTERM)

    first = Trainer(objective, dataset, collator, cfg.train, save_extra=tokenizer.save, callbacks=[stop]).train()
    assert first["steps"] == 10 and first["stop_reason"] == "SIGTERM"
    resumed = pretrain(tiny_config(synthetic_shards, tmp_path / "b"), resume="auto")
    assert resumed["steps"] == 20 and resumed["steps_this_session"] == 10
    a = load_file(tmp_path / "a" / "final" / "model.safetensors")
    b = load_file(tmp_path / "b" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), key
    # Training really moved the weights away from the step-10 checkpoint.
    mid = load_file(tmp_path / "b" / "checkpoints" / "step-00000010" / "model.safetensors")
    assert not mid["encoder.embeddings.norm.bias"].equal(b["encoder.embeddings.norm.bias"])


def test_eval_reports_unigram_baseline(synthetic_shards, tmp_path):
    cfg = tiny_config(synthetic_shards, tmp_path / "run", max_steps=6, eval_every=3)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    # Recompute the baseline independently: raw token counts straight from the shard files, and
    # the masked labels of the same fixed evaluation batches.
    _, _, collator, tokenizer = build_pretraining(cfg)
    files = sorted(synthetic_shards.glob("shard_*.tokens.npy"))
    tokens = np.concatenate([np.load(f, allow_pickle=False) for f in files]).astype(np.int64)
    counts = np.bincount(tokens, minlength=tokenizer.vocab_size)
    counts[tokenizer.special_ids] = 0
    labels = np.concatenate([b.labels[b.labels != -100].numpy() for b in fixed_eval_batches(cfg, tokenizer, collator)])
    assert len(labels) > 50
    probs = (counts + 1) / (counts.sum() + len(counts))
    base = summary["baseline"]
    assert base["unigram_mlm_acc"] == pytest.approx(float((labels == counts.argmax()).mean()))
    assert base["unigram_mlm_loss"] == pytest.approx(float(-np.log(probs[labels]).mean()))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval_mlm_acc" in r]
    assert [r["step"] for r in evals][:2] == [3, 6]
    assert all(0.0 <= r["eval_mlm_acc"] <= 1.0 and r["eval_mlm_loss"] > 0 for r in evals)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 6


def test_vocab_and_length_are_checked_before_training(synthetic_shards, tmp_path):
    cfg = tiny_config(synthetic_shards, tmp_path / "x")
    cfg.model = {**TINY_MODEL, "vocab_size": 50}
    with pytest.raises(ConfigError, match="vocab_size=50 but the run's tokenizer has"):
        build_pretraining(cfg)
    cfg = tiny_config(synthetic_shards, tmp_path / "y")
    cfg.data.max_seq_len = 128
    with pytest.raises(ConfigError, match="exceeds model.max_position=64"):
        build_pretraining(cfg)


def test_unigram_mlm_bias_init(synthetic_shards, tmp_path):
    """mlm_bias_init: unigram sets the decoder bias to log add-one-smoothed training frequencies."""
    from bertzoo.data.tokens.shards import ShardedCorpus

    cfg = tiny_config(synthetic_shards, tmp_path / "u")
    cfg.mlm_bias_init = "unigram"
    objective, _, _, tokenizer = build_pretraining(cfg)
    corpus = ShardedCorpus(synthetic_shards)
    ids = np.concatenate([np.asarray(corpus.tokens(s, s + 1)) for s in range(corpus.num_sentences)])
    counts = np.bincount(ids, minlength=tokenizer.vocab_size).astype(np.float64)
    counts[list(tokenizer.special_ids)] = 0
    expected = np.log((counts + 1) / (counts.sum() + tokenizer.vocab_size))
    bias = objective.mlm_head.decoder.bias.detach().numpy()
    np.testing.assert_allclose(bias, expected, rtol=1e-5)
    assert bias.argmax() == counts.argmax()
    # The default leaves BERT's zero bias.
    zero, _, _, _ = build_pretraining(tiny_config(synthetic_shards, tmp_path / "z"))
    assert not zero.mlm_head.decoder.bias.detach().any()
    with pytest.raises(ConfigError, match="mlm_bias_init"):
        load_pretrain_config(None, {"mlm_bias_init": "frequency"})


def test_frequency_weighted_masking_is_wired(synthetic_shards, tmp_path):
    """data.masking.frequency_power gives the collator (count + 1) ** -power per vocabulary id, from the
    training shards; unit strategies and variants with their own collator refuse it."""
    from bertzoo.data.tokens.shards import ShardedCorpus

    cfg = tiny_config(synthetic_shards, tmp_path / "f")
    cfg.data.masking.frequency_power = 0.5
    _, _, collator, tokenizer = build_pretraining(cfg)
    corpus = ShardedCorpus(synthetic_shards)
    ids = np.concatenate([np.asarray(corpus.tokens(s, s + 1)) for s in range(corpus.num_sentences)])
    counts = np.bincount(ids, minlength=tokenizer.vocab_size).astype(np.float64)
    counts[list(tokenizer.special_ids)] = 0
    np.testing.assert_allclose(collator.token_weights, 1.0 / np.sqrt(counts + 1), rtol=1e-12)
    assert build_pretraining(tiny_config(synthetic_shards, tmp_path / "u"))[2].token_weights is None
    cfg.data.masking.strategy = "whole_word"
    with pytest.raises(ConfigError, match="frequency_power"):
        build_pretraining(cfg)


class FakeClock:
    """Stands in for the `time` module of the training loop: each reading advances one second, so a
    budget ends after a number of steps that does not depend on the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


def test_time_clocked_schedule_ends_with_the_budget(synthetic_shards, tmp_path, monkeypatch):
    """With `schedule_clock: time` a run with a huge max_steps still warms up, decays to ~0 when
    max_minutes is spent, and counts as complete; resuming it finds nothing left to do."""
    monkeypatch.setattr("bertzoo.engine.loop.time", FakeClock())
    cfg = tiny_config(
        synthetic_shards, tmp_path / "run", max_steps=1_000_000, max_minutes=1.0, warmup_steps=0,
        warmup_ratio=0.2, schedule_clock="time", log_every=1, save_every=0,
    )  # fmt: skip
    summary = pretrain(cfg)
    assert summary["completed"] and summary["stop_reason"] == "max_minutes"
    assert 10 <= summary["steps"] < 60  # 60 fake seconds, at least one reading per step
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = [lr for lr in lrs if lr is not None]
    peak = lrs.index(max(lrs))
    assert max(lrs) > 0.8e-3  # reached (about) the configured 1e-3
    assert 0 < peak < len(lrs) - 1  # warmed up, then decayed
    assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1 :], strict=False))
    assert lrs[-1] < 0.15e-3  # the budget ended with the decay (one step of lag: 3 fake seconds)
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()

    again = pretrain(cfg, resume="auto")
    assert again["steps_this_session"] == 0 and again["completed"]
