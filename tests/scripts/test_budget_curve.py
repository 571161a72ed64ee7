"""scripts/studies/budget_curve.py: the objectives_small runs of each budget in one table, picture and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "studies" / "budget_curve.py"


def _report(run: Path, accuracy: float) -> None:
    (run / "finetune").mkdir(parents=True)
    (run / "finetune" / "report.json").write_text(json.dumps({"dev": {"metrics": {"accuracy": accuracy}}}))


def test_no_run_collects_every_finished_seed_and_reports_electra_over_bert(tmp_path):
    runs = {
        (100, "bert"): [0.70, 0.72],
        (100, "electra"): [0.50],  # seed 1 unfinished: left out, not counted as zero
        (300, "bert"): [0.76, 0.78],
        (300, "electra"): [0.70, 0.74],
    }
    for (sequences, family), accs in runs.items():
        for seed, acc in enumerate(accs):
            _report(tmp_path / f"s{sequences}" / family / f"seed{seed}", acc)
    for seed, acc in enumerate([0.52, 0.56]):
        _report(tmp_path / "s100" / "random_init" / f"seed{seed}", acc)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--budgets", "300", "100", "--no-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert "| 100 | 0.710 ± 0.014 (n=2) | 0.500 ± 0.000 (n=1) |" in lines
    assert "| 300 | 0.770 ± 0.014 (n=2) | 0.720 ± 0.028 (n=2) |" in lines
    assert "random init: 0.540 ± 0.028" in lines
    last = json.loads(lines[-1])
    assert last["ratio"] == round(0.72 / 0.77, 4)  # the largest budget where both ran
    assert last["families"]["electra"]["100"] == {"mean": 0.5, "sd": 0.0}
    assert json.loads((tmp_path / "curve.json").read_text())["random_init"] == [0.52, 0.56]
    if "no picture" not in done.stdout:
        assert (tmp_path / "budget_curve.png").stat().st_size > 1000


def test_every_random_arm_and_the_shards_are_shared_between_budgets_but_not_the_pretrained_runs(tmp_path):
    module = load_script(SCRIPT, imports_from=SCRIPT.parents[2] / "benchmarks")
    for name in ("shards-wordpiece-8192", "random_init", "random_init-electra", "electra"):
        (tmp_path / "s100" / name).mkdir(parents=True)
    module.share_common(tmp_path, [100, 200])
    shared = sorted(p.name for p in (tmp_path / "s200").iterdir())
    assert shared == ["random_init", "random_init-electra", "shards-wordpiece-8192"]
    assert all((tmp_path / "s200" / name).is_symlink() for name in shared)
