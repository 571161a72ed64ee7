"""Small helpers shared by the task tests: a tiny encoder, a config builder and a few-step trainer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertzoo.config import FinetuneConfig, ModelConfig, from_dict
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.base import ObjectiveOutput

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def small_tokenizer(directory: Path, words: Iterable[str]) -> Tokenizer:
    """A fixed WordPiece vocabulary: specials, punctuation, letters and their ## forms, and `words`
    (any other word splits into letters). A few hundred ids keep the tiny models fast."""
    vocab = [*SPECIAL_TOKENS, *".,!?;:'\"-()", *LETTERS, *(f"##{c}" for c in LETTERS), *words]
    path = Path(directory) / "vocab.txt"
    path.write_text("".join(t + "\n" for t in dict.fromkeys(vocab)), encoding="utf-8")
    return Tokenizer.from_vocab(path)


def tiny_encoder(vocab_size: int, seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(ModelConfig(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64))


def tiny_gpt(vocab_size: int, seed: int = 0, **overrides: Any) -> Encoder:
    """A tiny causal (GPT-2 layout) encoder: no pooler, no segment table, LM head tied to its word table."""
    from bertzoo.variants import get_variant

    spec = {
        "preset": "gpt-tiny",
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "num_heads": 4,
        "intermediate_size": 64,
        "max_position": 64,
        "pad_token_id": 0,
        **overrides,
    }
    torch.manual_seed(seed)
    return Encoder(get_variant("gpt").model_config(spec))


def make_cfg(task: str, **sections: Any) -> FinetuneConfig:
    """FinetuneConfig for `task`; keyword arguments are top-level keys or sections (data={...})."""
    data = {"task": task, "train": {"batch_size": 8}, **sections}
    return from_dict(FinetuneConfig, data)


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """One intra-op thread: tiny models gain nothing from more, and on a busy machine spinning
    worker threads make each step many times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def train_steps(
    task, model: torch.nn.Module, dataset, steps: int = 30, lr: float = 3e-3, batch_size: int = 8
) -> list[float]:
    """Plain AdamW steps on random batches (fixed seeds); returns the loss of every step."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        idx = rng.choice(len(dataset), size=min(batch_size, len(dataset)), replace=False)
        out = model(task.collate([dataset[int(i)] for i in idx]))
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out.loss.detach()))
    return losses


def fell(losses: list[float], k: int = 5, factor: float = 0.7) -> bool:
    """True when the mean of the last k losses is below `factor` times the mean of the first k."""
    return float(np.mean(losses[-k:])) < factor * float(np.mean(losses[:k]))


class LogitModel(torch.nn.Module):
    """A stand-in model whose logits are a fixed function of the batch (to test post-processing)."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, batch) -> ObjectiveOutput:
        return ObjectiveOutput(loss=None, logits=self.fn(batch))
