"""A toy dataset and objective for the training loop (dropout makes the RNG state matter for exact resume), its
run config, and a free TCP port for multi-process tests."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_model
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import TrainConfig
from bertzoo.engine import Trainer
from bertzoo.objectives.base import ObjectiveOutput

VOCAB, SEQ = 24, 8


class ToyDataset:
    """Random tokens whose content depends on (index, epoch), like masked-LM examples."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i * 1009 + self.epoch)
        return {"index": i, "epoch": self.epoch, "input_ids": torch.randint(1, VOCAB, (SEQ,), generator=g)}


class ToyObjective(nn.Module):
    """Embedding + dropout + linear: dropout makes the RNG state matter for exact resume."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(dim, VOCAB)
        self.poison: set[int] = set()  # forward calls (0-based) whose loss becomes NaN
        self.calls = 0

    def forward(self, batch: Batch) -> ObjectiveOutput:
        logits = self.out(self.drop(self.norm(self.emb(batch.input_ids))))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch.labels.flatten(), ignore_index=IGNORE_INDEX)
        if self.calls in self.poison:
            loss = loss * float("nan")
        self.calls += 1
        mask = batch.labels != IGNORE_INDEX
        n = mask.sum()
        acc = ((logits.argmax(-1) == batch.labels) & mask).sum() / n.clamp(min=1)
        return ObjectiveOutput(
            loss=loss,
            metrics={"mlm_loss": loss.detach(), "mlm_acc": acc.detach()},
            counts={"mlm_loss": n, "mlm_acc": n},
        )

    def save_pretrained(self, directory: str | Path) -> None:
        save_model(self, str(Path(directory) / "model.safetensors"))
        (Path(directory) / "config.json").write_text(json.dumps({"vocab_size": VOCAB}))


def make_cfg(out: Path, **kw) -> TrainConfig:
    base = dict(
        output_dir=str(out),
        seed=7,
        batch_size=4,
        max_steps=20,
        lr=5e-3,
        warmup_steps=3,
        schedule="linear",
        clip_norm=1.0,
        log_every=5,
        save_every=10,
        keep_last=2,
        device="cpu",
        # Equivalence checks compare runs at fp32 tolerances; `auto` picks bf16 on a CPU with native bf16.
        precision="fp32",
    )
    base.update(kw)
    return TrainConfig(**base)


def make_trainer(cfg: TrainConfig, n: int = 48, init_seed: int = 0, **kw) -> Trainer:
    torch.manual_seed(init_seed)
    return Trainer(ToyObjective(), ToyDataset(n), collate, cfg, progress=False, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collate(examples: list[dict]) -> Batch:
    ids = torch.stack([e["input_ids"] for e in examples])
    labels = (ids * 5 + 3) % VOCAB
    labels[ids % 3 == 0] = IGNORE_INDEX
    return Batch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        labels=labels,
        example_index=torch.tensor([e["index"] for e in examples]),
    )
