"""The tiny pretraining run config the family tests train with, and the check that an interrupted run resumes
exactly."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from safetensors.torch import load_file

from bertzoo.config import load_pretrain_config
from bertzoo.engine.loop import Trainer
from bertzoo.train.pretrain import build_pretraining, pretrain

# Steps of the CLI runs `tiny_args` describes.
MAX_STEPS = 12
TINY_MODEL = {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


def assert_resume_is_exact(make_config, shards, tmp_path) -> tuple[dict, dict]:
    """12 steps straight == the same run stopped (SIGTERM) after step 6, then resumed, bit for bit.
    `make_config(shards, out, **train)` builds the family's config; returns (straight, resumed) final weights."""
    straight = pretrain(make_config(shards, tmp_path / "a", max_steps=12, save_every=6))
    assert straight["steps"] == 12
    cfg = make_config(shards, tmp_path / "b", max_steps=12, save_every=6)
    objective, dataset, collator, tokenizer = build_pretraining(cfg)

    def stop(trainer, step):
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    first = Trainer(objective, dataset, collator, cfg.train, save_extra=tokenizer.save, callbacks=[stop]).train()
    assert first["steps"] == 6 and first["stop_reason"] == "SIGTERM"
    resumed = pretrain(make_config(shards, tmp_path / "b", max_steps=12, save_every=6), resume="auto")
    assert resumed["steps_this_session"] == 6
    a = load_file(tmp_path / "a" / "final" / "model.safetensors")
    b = load_file(tmp_path / "b" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), key
    mid = load_file(tmp_path / "b" / "checkpoints" / "step-00000006" / "model.safetensors")
    assert any(not mid[k].equal(a[k]) for k in a)  # the resumed half trained
    return a, b


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


def tiny_args(shards: Path, out: Path, **train: object) -> list[str]:
    """`bertzoo pretrain` arguments for a seconds-long run of a 2-layer, 32-wide BERT on one thread."""
    settings: dict[str, object] = {
        "model.preset": "bert-tiny",
        "model.hidden_size": 32,
        "model.num_heads": 2,
        "model.intermediate_size": 64,
        "model.max_position": 64,
        "data.shards": shards,
        "data.max_seq_len": 48,
        "train.output_dir": out,
        "train.batch_size": 8,
        "train.max_steps": MAX_STEPS,
        "train.lr": 1e-3,
        "train.warmup_steps": 4,
        "train.log_every": 4,
        "train.save_every": 2,
        "train.keep_last": 1,
        "train.threads": 1,
        "train.device": "cpu",
    }
    settings.update({f"train.{k}": v for k, v in train.items()})
    # --key=value: with a separate value argparse could take it for the optional config-file argument.
    return ["pretrain", *(f"--{key}={value}" for key, value in settings.items())]
