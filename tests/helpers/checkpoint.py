"""A tiny network, optimizer and schedule trained a few steps and checkpointed: what the checkpoint tests save
and load."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_model
from torch import nn

from bertzoo.config import TrainConfig
from bertzoo.engine.checkpoint import save_checkpoint
from bertzoo.engine.optim import build_optimizer, build_scheduler


class Net(nn.Module):
    """A small model with tied weights and a save_pretrained like the real objectives."""

    def __init__(self, dim: int = 6, extra: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, dim)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, 11)
        self.out.weight = self.emb.weight
        if extra:
            self.more = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.emb(x)))

    def save_pretrained(self, directory: str | Path) -> None:
        save_model(self, str(Path(directory) / "model.safetensors"))
        (Path(directory) / "config.json").write_text(json.dumps({"dim": self.emb.embedding_dim}))


def setup_run(seed: int = 0, **kw):
    torch.manual_seed(seed)
    net = Net(**kw)
    cfg = TrainConfig(lr=1e-2, warmup_steps=2, max_steps=10)
    opt = build_optimizer(net, cfg)
    sched = build_scheduler(opt, cfg, cfg.max_steps)
    return net, opt, sched


def train_steps(net, opt, sched, steps: int = 3) -> None:
    for _ in range(steps):
        x = torch.randint(0, 11, (4, 5))
        loss = nn.functional.cross_entropy(net(x).flatten(0, 1), x.flatten())
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()


def save_run(out: Path, step: int, net, opt, sched, **kw) -> Path:
    return save_checkpoint(out, step, net, opt, sched, {"epoch": 0, "note": "x"}, **kw)
