"""benchmarks/profiling.py splits a step's operator time into kinds of work: operators land in the right kind,
and a step made only of one large product is read as matrix products."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.scripts import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def profiling():
    return load_script(BENCHMARKS / "profiling.py", imports_from=BENCHMARKS)


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        ("aten::mm", "matrix products"),
        ("aten::addmm", "matrix products"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::_fused_adamw_", "optimizer"),
        ("aten::_foreach_mul_", "optimizer"),
        ("aten::native_layer_norm_backward", "norms and activations"),
        ("aten::_to_copy", "casts and copies"),
        ("aten::nll_loss_forward", "loss"),
        ("aten::embedding_dense_backward", "embeddings and indexing"),
        ("aten::empty", "other"),
    ],
)
def test_each_operator_lands_in_its_kind(profiling, op: str, kind: str) -> None:
    assert profiling.kind_of(op) == kind


def test_a_step_of_one_large_product_is_read_as_matrix_products(profiling, capsys) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    a @ b  # warm: the first call's one-off set-up is not the step's
    shares = profiling.profile_steps(lambda: a @ b, torch.device("cpu"), None, steps=2, top=3)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    # nothing but the product and its output's allocation: the product is all but all of it
    assert shares["matrix products"] > 0.9
    out = capsys.readouterr().out
    assert "matrix products" in out and "aten::mm" in out
