"""The FLOP bound benchmarks/distill_throughput.py prints beside each student's speed-up, checked against
counts worked out by hand; and the claim of docs/distillation.md that a 4 x 312 student cannot run 3x faster
than a 6 x 384 teacher (its bound is ~2.3x)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertzoo.variants import bert

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "distill_throughput.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_flops_of_a_tiny_encoder_match_a_hand_count(bench) -> None:
    cfg = bert.model_config({"num_layers": 2, "hidden_size": 4, "num_heads": 1, "intermediate_size": 8})
    # per token and layer: 2 FLOPs x (4 projections of 4 x 4 + 2 FFN matrices of 4 x 8) = 2 x 128 = 256;
    # two layers, 3 + 1 tokens -> 2 x 256 x 4 = 2048; attention: 2 layers x 4 x hidden x (3^2 + 1^2) = 320.
    assert bench.useful_flops(cfg, np.array([3, 1])) == 2048 + 320


def test_half_the_layers_bound_is_two_and_tinybert_is_under_three(bench) -> None:
    lengths = np.array([64, 40, 17])
    teacher = bert.model_config({"preset": "minilm-l6-h384"})
    three = bert.model_config({"preset": "minilm-l6-h384", "num_layers": 3})
    tiny = bert.model_config({"preset": "tinybert-4l-312"})
    t = bench.useful_flops(teacher, lengths)
    assert t / bench.useful_flops(three, lengths) == pytest.approx(2.0)
    bound = t / bench.useful_flops(tiny, lengths)
    # 6/4 layers x (384/312)^2 for the projections; the FFNs are 1536 against 1200 wide, attention 384 against 312
    assert 2.2 < bound < 2.4


def test_against_bert_base_tinybert_has_room_for_three_times(bench) -> None:
    # --teacher-preset bert-base: the 12 x 768 teacher of TinyBERT's paper. Per token and layer the projections
    # are 2 x (4 x 768^2 + 2 x 768 x 3072) = 14,155,776 FLOPs x 12 layers against 2 x (4 x 312^2 + 2 x 312 x 1200)
    # = 2,276,352 x 4; attention 4 x hidden x (sum of squared lengths = 5,985) per layer.
    lengths = np.array([64, 40, 17])
    teacher = bert.model_config({"preset": "bert-base"})
    tiny = bert.model_config({"preset": "tinybert-4l-312"})
    t = 12 * (14_155_776 * 121 + 4 * 768 * 5985)
    s = 4 * (2_276_352 * 121 + 4 * 312 * 5985)
    assert bench.useful_flops(teacher, lengths) == t
    assert bench.useful_flops(tiny, lengths) == s
    assert t / s > 9.4  # TinyBERT's measured 9.4x fits under this teacher's bound, and 3x easily
