"""Tiny sequence-to-sequence models (GPT, T5) and a made-up mapping task for the text-to-text tests."""

from __future__ import annotations

import json
import random

import torch
import yaml

from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.variants import gpt, t5


def tiny_gpt(vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    spec = {"vocab_size": vocab, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128}
    return gpt.build(gpt.model_config({**spec, "dropout": 0.0, "attention_dropout": 0.0})).encoder


WORDS = ["red", "green", "blue", "cat", "dog", "bird", "runs", "sleeps", "sings", "the", "a", "big", "small"]


FILLERS = WORDS[3:]


# The target is fixed by the one colour word somewhere in the source; targets of 2 and 3 words, so a
# model that does not stop where the target ends gets them wrong.
MAPPING = {"red": "big cat runs", "green": "small dog", "blue": "a bird sings"}


def mapping_examples(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(FILLERS) for _ in range(5)]
        colour = rng.choice(sorted(MAPPING))
        words.insert(rng.randrange(6), colour)
        out.append({"text": " ".join(words), "target": MAPPING[colour]})
    return out


def tiny_t5(tok, seed: int = 0, **fields) -> EncoderDecoderLM:
    torch.manual_seed(seed)
    spec = {
        "preset": "t5-tiny",
        "vocab_size": tok.vocab_size,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "decoder_start_token_id": tok.pad_id,
        **fields,
    }
    return t5.build(t5.model_config(spec))


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def t5_run_config(tmp_path, tok, data: dict, technique: dict | None = None, **train) -> str:
    """A `bertzoo finetune` YAML for a t5-tiny from random init on `data` (plus 16/6-token limits)."""
    tok.save(tmp_path / "tok")
    cfg = {
        "task": "seq2seq",
        "tokenizer": str(tmp_path / "tok"),
        "model_config": {"variant": "t5", "preset": "t5-tiny", "dropout": 0.0, "attention_dropout": 0.0},
        "data": {"max_seq_len": 16, "max_target_len": 6, **data},
        "train": {
            "output_dir": str(tmp_path / "run"),
            "seed": 0,
            "max_steps": 60,
            "batch_size": 16,
            "lr": 3e-3,
            "precision": "fp32",
            "device": "cpu",
            "log_every": 20,
            "save_every": 0,
            **train,
        },
        "technique": technique or {},
        "generation": {"max_new_tokens": 6},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return str(path)
