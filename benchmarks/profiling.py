"""Where a training step's time goes: torch.profiler over a few steps, each operator's own time (not its
children's) summed into kinds (matrix products, fused attention, the optimizer, normalisation and activations,
dtype casts and copies, the rest), then the costliest operators. A benchmark's `--profile` calls `profile_steps`
after its timing, so the profile explains the figures printed above it.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Callable

import torch
from timing import autocast, sync
from torch.profiler import ProfilerActivity, profile

# Operator name fragments -> the kind of work they are; first match wins, so the more specific come first.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention")),
    ("optimizer", ("adam", "_foreach", "optimizer")),
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
    ("casts and copies", ("aten::to", "aten::_to_copy", "aten::copy_", "aten::clone", "aten::contiguous")),
    (
        "norms and activations",
        ("layer_norm", "gelu", "softmax", "dropout", "tanh", "aten::add", "aten::mul", "aten::div", "aten::sub"),
    ),
    ("loss", ("cross_entropy", "nll_loss", "log_softmax")),
    ("embeddings and indexing", ("embedding", "index", "gather", "scatter", "masked", "nonzero", "where")),
)


def kind_of(name: str) -> str:
    """The kind of work an operator named `name` does (`KINDS`), or "other"."""
    low = name.lower()
    for kind, fragments in KINDS:
        if any(f.lower() in low for f in fragments):
            return kind
    return "other"


def profile_steps(
    step: Callable[[], object], device: torch.device, amp: torch.dtype | None, steps: int = 3, top: int = 12
) -> dict[str, float]:
    """Profile `steps` calls of `step`; print each kind's share of the operators' own time and the `top`
    costliest operators; return the shares (kind -> fraction)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof, autocast(device, amp):
        for _ in range(steps):
            step()
        sync(device)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr, 0) > 0]
    total = sum(getattr(e, attr) for e in events) or 1.0
    shares: dict[str, float] = defaultdict(float)
    for e in events:
        shares[kind_of(e.key)] += getattr(e, attr) / total
    print(f"profile of {steps} steps: {total / steps / 1e3:,.1f} ms of operator time per step")
    for kind, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<24} {share:6.1%}")
    print("  costliest operators (own time per step, calls per step):")
    for e in sorted(events, key=lambda e: -getattr(e, attr))[:top]:
        per_step = getattr(e, attr) / steps / 1e3
        print(f"    {e.key:<48} {per_step:8.2f} ms  {e.count / steps:6.0f}")
    return {k: round(v, 4) for k, v in shares.items()}


def add_profile_arg(ap: argparse.ArgumentParser) -> None:
    """Add `--profile` to a benchmark's parser."""
    ap.add_argument("--profile", action="store_true", help="then profile each side's step: where its time goes")


def profile_sides(steps: dict[str, Callable[[], object]], device: torch.device, amp: torch.dtype | None) -> dict:
    """`profile_steps` of each side's step (name -> a call of one step); the shares as flat JSON keys
    (`bertzoo_time_matrix_products`, ...)."""
    out: dict[str, float] = {}
    for name, step in steps.items():
        print(f"{name}:")
        shares = profile_steps(step, device, amp)
        out.update({f"{name}_time_{kind.replace(' ', '_')}": share for kind, share in shares.items()})
    return out
