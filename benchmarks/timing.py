"""What the same-process speed benchmarks share: the `--device` option, CUDA synchronisation around timed
regions, timing two sides in alternating order, autocast on the device (or none), and each side's AdamW.

The scripts run as `python benchmarks/x.py`, so this directory is on `sys.path` and `from timing import ...`
works; a script that tests load by file path puts its own directory there first.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable

import torch
from torch import nn


def device_arg(ap: argparse.ArgumentParser, default: str = "cpu") -> None:
    """Add `--device` (default `default`, normally cpu) to a benchmark's parser."""
    ap.add_argument("--device", default=default, help="cpu or cuda")


def resolve_device(name: str) -> torch.device:
    """The torch.device named by `--device`; exits with one line when CUDA is asked for but absent."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device here")
    return device


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously); nothing to wait for on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def alternate(fns: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds of each repetition of each side, alternating which runs first (load hits both alike); each
    timing is synchronised with the device at both ends."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for r in range(repeats):
        for name, fn in order[:: 1 if r % 2 == 0 else -1]:
            sync(device)
            t = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t)
    return times


def peak_memory_gib(fn: Callable[[], object], device: torch.device) -> float | None:
    """Peak device memory (GiB) allocated while `fn` runs once, on CUDA; None on the CPU, where torch keeps no
    per-allocation account (the process's resident size would mix both sides)."""
    if device.type != "cuda":
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    sync(device)
    return torch.cuda.max_memory_allocated(device) / 2**30


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """torch.autocast on the device's type at `dtype`, or a no-op context when `dtype` is None (fp32)."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def transformers_trainer_kernel() -> dict[str, bool]:
    """The AdamW kernel transformers' Trainer picks by default on this torch: `adamw_torch_fused` from torch
    2.8 (on any device), plain `adamw_torch` before it."""
    return {"fused": True} if torch.torch_version.TorchVersion(torch.__version__) >= "2.8" else {}


def training_adamw(ours: nn.Module, ref: nn.Module, **settings: object) -> dict[str, torch.optim.Optimizer]:
    """Each side's AdamW as its own training loop builds it on this torch: bertzoo's `adamw` (the fused
    kernel where it fits, else foreach) and transformers' Trainer default (`transformers_trainer_kernel`);
    `settings` (lr, weight decay, ...) are the same for both."""
    from bertzoo.engine.optim import adamw

    return {
        "bertzoo": adamw(ours.parameters(), **settings),
        "transformers": torch.optim.AdamW(ref.parameters(), **transformers_trainer_kernel(), **settings),
    }
