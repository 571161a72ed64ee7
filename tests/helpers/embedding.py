"""What the embedding tests share: a toy retrieval task (a content word finds the filler sentence that holds it)
and a tiny `task: embedding` fine-tuning config."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bertzoo.config import FinetuneConfig, TaskDataConfig

from helpers.finetune import FILLER, WORDS_A, WORDS_B, WORDS_C, tiny_finetune_config, write_task_files

CONTENT = [*WORDS_A, *WORDS_B, *WORDS_C]


def retrieval_rows(n: int, seed: int) -> list[dict[str, str]]:
    """A content word is the query; its document is filler with that word (the only content word) inside."""
    r = random.Random(seed)
    rows = []
    for _ in range(n):
        word = r.choice(CONTENT)
        words = [r.choice(FILLER) for _ in range(r.randint(4, 12))]
        words.insert(r.randrange(len(words) + 1), word)
        rows.append({"query": word, "positive": " ".join(words)})
    return rows


def write_retrieval(root: Path) -> dict[str, str]:
    paths = write_task_files(root)  # for its tokenizer
    for split, (n, seed) in {"train": (320, 0), "dev": (60, 1), "test": (60, 2)}.items():
        path = root / f"{split}-pairs.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in retrieval_rows(n, seed)))
        paths[split] = str(path)
    return paths


def embedding_config(paths: dict[str, str], out: Path, **train) -> FinetuneConfig:
    cfg = tiny_finetune_config(paths, out, **{"epochs": 4, "lr": 3e-3, **train})
    cfg.task = "embedding"
    cfg.data = TaskDataConfig(train=paths["train"], dev=paths["dev"], test=paths["test"], max_seq_len=32)
    cfg.data.max_query_len = 8
    return cfg
