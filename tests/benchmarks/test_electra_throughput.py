"""The reference side of benchmarks/electra_throughput.py: its sampler inverts the softmax's CDF exactly (as
bertzoo's does, so both sides draw the same replacements), and its batches are masked as ELECTRA's collator
masks them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertzoo.batch import IGNORE_INDEX

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "electra_throughput.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_the_sampler_inverts_the_cdf_at_the_uniform(bench) -> None:
    logits = torch.log(torch.tensor([[0.25, 0.25, 0.5], [0.5, 0.0, 0.5]]))  # exact binary fractions
    rows = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    u = torch.tensor([0.0, 0.2499, 0.25, 0.5, 0.4999, 0.5, 0.9999999])
    assert bench.sample(logits[rows], u).tolist() == [0, 0, 1, 2, 0, 2, 2]


def test_batches_mask_ordinary_real_tokens_only(bench) -> None:
    (b,) = bench.batches(1, batch=8, seq=64, vocab=100, device=torch.device("cpu"))
    selected = b.labels != IGNORE_INDEX
    real = b.attention_mask.bool()
    assert selected.any() and not (selected & ~real).any()
    assert (b.labels[selected] >= bench.FIRST_ORDINARY).all()  # never [CLS], [SEP] or padding
    shown = b.input_ids[selected]
    assert ((shown == bench.MASK) | (shown == b.labels[selected])).all()  # [MASK] or kept: no random ids
    assert (b.input_ids[:, 0] == bench.CLS).all() and (b.input_ids[~real] == bench.PAD).all()
    assert real.sum(1).min() >= 48  # rows of 3/4 to full length
