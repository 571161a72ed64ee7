"""scripts/studies/generation_study.py: a pretraining directory is named by the --set overrides, so a run made for
another step budget is refused instead of being reported as this one; a finished run of this budget is reused."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "studies" / "generation_study.py"


@pytest.fixture(scope="module")
def study():
    return load_script(SCRIPT, imports_from=SCRIPT.parent)


def args(steps: int, overrides: list[str]) -> SimpleNamespace:
    return SimpleNamespace(set=overrides, steps=steps, minutes=1.0)


def test_set_tag_names_runs_by_their_overrides(study):
    assert study.set_tag([]) == ""
    assert study.set_tag(["b=2", "model.position=sinusoidal"]) == "+b=2+model.position=sinusoidal"
    assert study.set_tag(["b=2", "model.position=sinusoidal"], model_only=True) == "+model.position=sinusoidal"


def test_a_run_of_another_budget_is_refused_and_one_of_this_budget_reused(study, tmp_path, monkeypatch):
    run_dir = tmp_path / "pretrain-t5+relative_bias_init=local"
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "final" / "config.json").write_text("{}")
    (run_dir / "run_config.json").write_text(json.dumps({"train": {"max_steps": 300}}))
    commands = []
    monkeypatch.setattr(study, "run", commands.append)
    overrides = ["relative_bias_init=local"]
    with pytest.raises(SystemExit, match="pretrained for 300 steps, not --steps 1500; use another --out"):
        study.pretrain("t5", tmp_path, tmp_path / "shards", tmp_path / "dev", args(1500, overrides))
    assert study.pretrain("t5", tmp_path, tmp_path / "s", tmp_path / "d", args(300, overrides)) == run_dir / "final"
    assert commands == []  # reused, not run again
    study.pretrain("t5", tmp_path, tmp_path / "s", tmp_path / "d", args(300, []))  # no such run yet: it runs
    assert commands and commands[0][:2] == ["pretrain", "configs/pretrain/t5-mini.yaml"]
