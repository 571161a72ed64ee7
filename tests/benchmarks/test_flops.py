"""benchmarks/flops.py counts what a training step computes: the FLOPs of a linear layer's forward and backward,
and of fused attention on the CPU (whose kernel torch's own counter does not know), against counts by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.scripts import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def flops():
    return load_script(BENCHMARKS / "flops.py", imports_from=BENCHMARKS)  # it imports timing.py beside it


def test_a_linear_layer_forward_and_backward(flops) -> None:
    layer = torch.nn.Linear(8, 16, bias=False)
    x = torch.randn(4, 8, requires_grad=True)  # a gradient for the input too, as inside a network
    # forward (4 x 8) @ (8 x 16): 2 x 4 x 8 x 16 = 1024; backward: the input's and the weight's, 1024 each
    assert flops.counted_flops(lambda: layer(x).sum().backward(), CPU, None) == 3 * 2 * 4 * 8 * 16 == 3072


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_fused_attention_counts_on_the_cpu(flops, amp) -> None:
    b, h, s, d = 2, 4, 16, 8
    q = torch.randn(b, h, s, d, requires_grad=True)
    # forward: scores (s x d) @ (d x s) and (s x s) @ (s x d) per batch and head, 2 x b x h x s x s x d each;
    # backward: the scores recomputed and four products (values', probabilities', queries', keys' gradients)
    forward, backward = 2 * (2 * b * h * s * s * d), 5 * (2 * b * h * s * s * d)
    count = flops.counted_flops(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward(), CPU, amp)
    assert count == forward + backward == 229376
