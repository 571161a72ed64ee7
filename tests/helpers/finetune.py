"""Tiny fine-tuning data (three word classes plus filler words, as classification, NER and QA files) and the
small run config the fine-tuning tests train with."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bertzoo.config import FinetuneConfig, TaskDataConfig, TrainConfig
from bertzoo.data.tokens.tokenizer import Tokenizer

WORDS_A = ["apple", "pear", "plum", "fig", "lime"]


WORDS_B = ["car", "bus", "train", "boat", "bike"]


WORDS_C = ["red", "blue", "green", "pink", "gray"]


FILLER = ["the", "a", "of", "and", "to", "is", "in", "it", "on", "at"]


def synthetic_rows(n: int, seed: int) -> list[dict[str, str]]:
    r = random.Random(seed)
    rows = []
    for _ in range(n):
        label = r.choice(["fruit", "vehicle", "color"])
        topic = {"fruit": WORDS_A, "vehicle": WORDS_B, "color": WORDS_C}[label]
        words = [r.choice(FILLER) for _ in range(r.randint(3, 20))]
        for _ in range(r.randint(1, 3)):
            words.insert(r.randrange(len(words) + 1), r.choice(topic))
        rows.append({"text": " ".join(words), "label": label})
    return rows


def write_task_files(root: Path) -> dict[str, str]:
    """train/dev/test JSONL files and a tokenizer directory whose vocabulary covers every word."""
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS

    root.mkdir(parents=True, exist_ok=True)
    vocab = [*SPECIAL_TOKENS, *WORDS_A, *WORDS_B, *WORDS_C, *FILLER, "."]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    Tokenizer.from_vocab(root / "vocab.txt").save(root / "tok")
    paths = {"tokenizer": str(root / "tok")}
    for split, (n, seed) in {"train": (240, 0), "dev": (60, 1), "test": (60, 2)}.items():
        path = root / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in synthetic_rows(n, seed)), encoding="utf-8")
        paths[split] = str(path)
    return paths


def tiny_finetune_config(paths: dict[str, str], out: Path, **train) -> FinetuneConfig:
    t = dict(
        output_dir=str(out),
        seed=1,
        epochs=6,
        batch_size=16,
        eval_batch_size=64,
        lr=5e-3,
        warmup_ratio=0.1,
        device="cpu",
        bucket_by_length=True,
        log_every=5,
        save_every=0,
    )
    t.update(train)
    return FinetuneConfig(
        task="classification",
        model_config={
            "preset": "bert-tiny",
            "hidden_size": 32,
            "num_heads": 2,
            "intermediate_size": 64,
            "num_layers": 2,
            "max_position": 64,
            "initializer_range": 0.1,  # larger than BERT's 0.02: a tiny random model learns in few steps
        },
        tokenizer=paths["tokenizer"],
        data=TaskDataConfig(train=paths["train"], dev=paths["dev"], test=paths["test"], max_seq_len=32),
        train=TrainConfig(**t),
    )


TYPES = {"FRUIT": WORDS_A, "VEHICLE": WORDS_B, "COLOR": WORDS_C}


def write_conll(path: Path, n: int, seed: int) -> str:
    r = random.Random(seed)
    lines = []
    for _ in range(n):
        for _ in range(r.randint(3, 9)):
            kind = r.choice([*TYPES, "O", "O"])
            word = r.choice(FILLER) if kind == "O" else r.choice(TYPES[kind])
            lines.append(f"{word} {'O' if kind == 'O' else 'B-' + kind}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)
