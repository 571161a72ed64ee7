"""`bertzoo suite`: two tiny models compared side by side on GLUE files (suite.json, suite.md, suite.html), and one
line with exit code 2 for each kind of bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bertzoo.cli import main

from helpers.suites import save_tiny_model, write_clue, write_glue

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("suite-cli")
    return {
        "root": root,
        "glue": write_glue(root / "glue"),
        "clue": write_clue(root / "clue"),
        "model": save_tiny_model(root / "tiny", seed=3),
    }


def test_two_models_side_by_side(files, tmp_path, capsys) -> None:
    model, out = str(files["model"]), tmp_path / "out"
    args = ["suite", "glue", model, f"random:{model}", "--data", str(files["glue"]), "--out", str(out)]
    args += ["--tasks", "cola", "sts-b", "--lrs", "1e-3", "--epochs", "1"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "suite.json").read_text())
    assert result["tasks"] == ["CoLA", "STS-B"] and result["seeds"] == [0]
    assert [m["model"] for m in result["models"]] == [model, f"random:{model}"]
    medians = [{t: m["tasks"][t]["score"]["median"] for t in result["tasks"]} for m in result["models"]]
    rows = {r["task"]: r for r in result["comparison"]["rows"]}
    for task in result["tasks"]:
        assert rows[task]["scores"] == {model: medians[0][task], f"random:{model}": medians[1][task]}
        assert rows[task]["delta"][f"random:{model}"] == pytest.approx(medians[1][task] - medians[0][task])
    md = (out / "suite.md").read_text()
    assert md in printed
    assert f"| task | {model} | random:{model} | Δ random:{model} |" in md
    page = (out / "suite.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "data:image/png;base64," in page
    assert "<script" not in page and 'src="http' not in page  # self-contained


def _error(capsys, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_bad_input_is_one_line_and_exit_2(files, tmp_path, capsys) -> None:
    model, glue = str(files["model"]), files["glue"]
    out = ["--out", str(tmp_path / "out")]
    assert "unknown suite 'superglue'" in _error(capsys, ["suite", "superglue", model, *out])
    assert "pass --data DIR" in _error(capsys, ["suite", "glue", model, *out])
    assert "model directory not found" in _error(capsys, ["suite", "glue", str(tmp_path / "none"), "--data", str(glue)])
    assert "has no task 'squad'" in _error(capsys, ["suite", "glue", model, "--data", str(glue), "--tasks", "squad"])
    assert "--max-steps" in _error(capsys, ["suite", "glue", model, "--epochs", "1", "--max-steps", "2"])
    # A GLUE directory without the task's folder, without a file, with a wrong header.
    broken = tmp_path / "broken"
    shutil.copytree(glue, broken)
    shutil.rmtree(broken / "RTE")
    assert "has no RTE/ folder" in _error(capsys, ["suite", "glue", model, "--data", str(broken), *out])
    (broken / "SST-2" / "dev.tsv").unlink()
    err = _error(capsys, ["suite", "glue", model, "--data", str(broken), "--tasks", "sst-2", *out])
    assert "dev.tsv not found" in err
    header = broken / "QNLI" / "train.tsv"
    header.write_text(header.read_text().replace("question", "query", 1))
    err = _error(capsys, ["suite", "glue", model, "--data", str(broken), "--tasks", "qnli", *out])
    assert "no column 'question'" in err
    # CLUE: a record without its field.
    clue = tmp_path / "clue"
    shutil.copytree(files["clue"], clue)
    (clue / "tnews" / "dev.json").write_text('{"label": "100"}\n')
    err = _error(capsys, ["suite", "clue", model, "--data", str(clue), "--tasks", "tnews", *out])
    assert "no field 'sentence'" in err
    assert not (tmp_path / "out" / "runs").exists()  # nothing ran
