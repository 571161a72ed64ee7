"""scripts/studies/domain_adapt.py: its budgets, and the table, gains and picture it writes from known scores."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from helpers.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def study():
    return load_script(REPO / "scripts" / "studies" / "domain_adapt.py")


def test_a_budget_is_steps_or_minutes(study) -> None:
    steps = argparse.Namespace(minutes=None)
    assert study.budget_of(300, steps) == ({"train.max_steps": 300, "train.max_minutes": None}, "300steps")
    clock = argparse.Namespace(minutes=[2.5])
    assert study.budget_of(2.5, clock) == ({"train.max_minutes": 2.5, "train.max_steps": 100000}, "2.5min")


ROWS = [
    {"task": "chinese-sentiment", "metric": "accuracy", "arm": "a", "budget": "", "amount": 0, "steps": [],
     "scores": [0.60, 0.62]},
    {"task": "chinese-sentiment", "metric": "accuracy", "arm": "c", "budget": "300steps", "amount": 300,
     "steps": [300, 300], "scores": [0.80, 0.82, 0.78, 0.80]},
]  # fmt: skip


def test_the_table_lists_every_score_with_mean_and_sd(study) -> None:
    text = study.table({"rows": ROWS, "unit": "steps"})
    lines = text.splitlines()
    assert lines[2] == "| chinese-sentiment (accuracy) | a: MiniLM as released | — | — | 0.600, 0.620 | 0.610 ± 0.014 |"
    # mean 0.80, sample sd of (0.80, 0.82, 0.78, 0.80) = sqrt(0.0008 / 3) = 0.0163
    assert lines[3].endswith("| 300steps | 300, 300 | 0.800, 0.820, 0.780, 0.800 | 0.800 ± 0.016 |")


def test_the_picture_is_written(study, tmp_path) -> None:
    path = study.plot({"rows": ROWS, "unit": "steps"}, tmp_path / "p.png")
    assert path is not None and path.stat().st_size > 1000
