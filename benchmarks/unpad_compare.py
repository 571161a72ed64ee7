"""Unpadded execution against today's padded length buckets, bertzoo against itself on the same model and texts.

`finetune_sides`: fine-tuning steps (forward, backward, AdamW) of the wiki-topics MiniLM classifier, three ways on
the same examples: padded length-bucketed batches (today's default), unpadded on the same bucketed batches, and
unpadded on shuffled batches (no bucketing needed). `inference_sides`: `bertzoo.train.embed.encode` with the
model's `unpad` off and on. Both alternate the sides (benchmarks/timing.py) and report the ratio of the best
unpadded side over the padded one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np
import torch
from timing import alternate, autocast

from bertzoo.train.embed import encode


def bucketed(lengths: np.ndarray, batch: int, rng: np.random.Generator, window: int = 50) -> list[np.ndarray]:
    """Length buckets: shuffled, sorted by length within windows of `window` batches, batches in random order."""
    order = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(order), batch * window):
        chunk = order[start : start + batch * window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch] for i in range(0, len(chunk), batch)]
    return [batches[i] for i in rng.permutation(len(batches))]


def shuffled(n: int, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[i : i + batch] for i in range(0, n, batch)]


def finetune_sides(
    model: torch.nn.Module,
    dataset,
    collate: Callable,
    steps: int,
    batch: int,
    seed: int,
    device: torch.device,
    amp: torch.dtype | None,
) -> dict:
    """Seconds per side for `steps` training steps each, and the padding share of each batching."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(dataset.lengths)
    plans = {
        "padded, length buckets": (False, bucketed(lengths, batch, rng)),
        "unpadded, length buckets": (True, bucketed(lengths, batch, rng)),
        "unpadded, shuffled": (True, shuffled(len(lengths), batch, rng)),
    }
    sides, padding = {}, {}
    for name, (unpad, batches) in plans.items():
        net = copy.deepcopy(model).train()
        net.encoder.config = copy.copy(net.encoder.config)
        net.encoder.config.unpad = unpad
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
        padded = sum(len(b) * -(-int(lengths[b].max()) // 8) * 8 for b in batches)
        padding[name] = 0.0 if unpad else padded / int(sum(lengths[b].sum() for b in batches)) - 1
        sides[name] = step_fn(net, opt, batches, dataset, collate, amp)
    for fn in sides.values():  # warm-up
        fn()
    times = alternate(sides, steps, device)
    return {"seconds": {k: sum(v) for k, v in times.items()}, "padding": padding}


def step_fn(
    net: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batches: Sequence[np.ndarray],
    dataset,
    collate: Callable,
    amp: torch.dtype | None,
) -> Callable[[], None]:
    state = {"i": 0}

    def step() -> None:
        b = batches[state["i"] % len(batches)]
        state["i"] += 1
        device = next(net.parameters()).device
        with autocast(device, amp):
            out = net(collate([dataset[int(i)] for i in b]).to(device))
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def inference_sides(
    encoder: torch.nn.Module, tokenizer, texts: list[str], batch: int, max_length: int, repeats: int, precision: str
):
    """Seconds per `encode` of all texts with unpadding off and on, and the largest difference between them."""
    results: dict[str, np.ndarray] = {}
    original = encoder.config.unpad

    def side(unpad: bool) -> Callable[[], None]:
        def run() -> None:
            encoder.config.unpad = unpad
            results[unpad] = encode(
                encoder, tokenizer, texts, batch_size=batch, max_length=max_length, precision=precision
            )

        return run

    sides = {"padded, length-sorted": side(False), "unpadded": side(True)}
    for fn in sides.values():
        fn()
    times = alternate(sides, repeats, next(encoder.parameters()).device)
    encoder.config.unpad = original
    return {k: min(v) for k, v in times.items()}, float(np.abs(results[True] - results[False]).max())
