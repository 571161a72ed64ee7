"""benchmarks/objectives_small.py: processes started with --no-table share one --out, each family and seed run
by one of them (a claim is an exclusive file create), and a finished run is read, never claimed."""

from __future__ import annotations

import importlib.util
import multiprocessing
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "objectives_small.py"


def _module():
    spec = importlib.util.spec_from_file_location("objectives_small", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _module()


def _claim(path: str) -> bool:
    """In a fresh process (spawn): did this one claim the run?"""
    return not _module().claimed_elsewhere(Path(path))


def test_one_claim_per_run_among_processes(tmp_path):
    run = tmp_path / "bert" / "seed1"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        won = pool.map(_claim, [str(run)] * 8)
    assert sum(won) == 1 and (run / ".claimed").is_file()


def test_a_finished_run_is_read_not_claimed(bench, tmp_path):
    run = tmp_path / "ernie" / "seed0"
    assert bench.claimed_elsewhere(run) is False  # first: claimed here
    assert bench.claimed_elsewhere(run) is True  # second process: someone else's
    (run / "finetune").mkdir()
    (run / "finetune" / "report.json").write_text("{}")
    assert bench.claimed_elsewhere(run) is False  # done: every process reads it
