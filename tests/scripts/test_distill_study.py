"""scripts/studies/distill_study.py: each arm builds only the general students it reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "studies" / "distill_study.py"


@pytest.fixture(scope="module")
def study():
    return load_script(SCRIPT)


@pytest.mark.parametrize(
    ("arms", "expected"),
    [
        (["distilbert", "distilbert-nokd"], set()),  # 3 layers of the teacher: no general distillation
        (["distilbert-aug"], {"distilbert"}),  # its augmentations come from the DistilBERT student's MLM
        (["distilbert-aug-nokd"], {"distilbert"}),  # the same augmented data, gold labels only
        (["tinybert-nokd"], {"tinybert"}),  # no augmentation
        (["tinybert"], {"tinybert", "distilbert"}),
        (["distilbert", "tinybert"], {"tinybert", "distilbert"}),
    ],
)
def test_needs_names_the_general_students_of_the_arms(study, arms, expected):
    assert study.needs(arms) == expected


def test_the_distilbert_arms_run_without_tinybert_and_pair_the_augmented_arms(study, tmp_path, monkeypatch):
    """Each command the study would run, recorded instead of run: no TinyBERT general distillation for
    DistilBERT arms; the two augmented arms read the same copies for the same steps, one without the teacher."""
    out = tmp_path / "study"
    (out / "teacher" / "model").mkdir(parents=True)
    (out / "teacher" / "model" / "model.safetensors").write_bytes(b"")
    for shards in ("shards-minilm", "dev-shards-minilm"):
        (out / shards).mkdir()
        (out / shards / "meta.json").write_text("{}")
    commands: list[list[str]] = []

    def fake_run(args: list[str]) -> None:  # writes what a finished run leaves, so the study reads a report
        commands.append(args)
        run_dir = Path(args[args.index("--train.output_dir") + 1])
        (run_dir / "model").mkdir(parents=True)
        (run_dir / "model" / "model.safetensors").write_bytes(b"")
        accuracy = {"teacher_test": {"accuracy": 0.8}, "student_test": {"accuracy": 0.7}}
        (run_dir / "report.json").write_text(json.dumps(accuracy))

    monkeypatch.setattr(study, "run", fake_run)
    monkeypatch.setattr(study, "speed", lambda *a, **k: {})
    arms = ["distilbert-aug", "distilbert-aug-nokd", "distilbert-nokd"]
    monkeypatch.setattr(sys, "argv", ["distill_study.py", "--seeds", "3", "--out", str(out), "--arms", *arms])
    study.main()

    general, *students = commands
    assert general[:2] == ["distill", "configs/distill/distilbert-general-minilm.yaml"]  # the augmenter, alone
    assert len(students) == 3 and not any("tinybert" in " ".join(c) for c in commands)

    def option(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    aug, aug_nokd, nokd = students
    for command in (aug, aug_nokd):
        assert option(command, "--augment.model") == str(out / "distilbert-general" / "model")
        assert option(command, "--augment.copies") == "2" and option(command, "--augment.seed") == "3"
        assert option(command, "--augment.cache") == str(out / "augmented-seed3")  # one set of copies, made once
        assert float(option(command, "--train.epochs")) == 1.0  # 3 epochs over (1 + 2 copies): distilbert's steps
    assert "--phases" not in aug  # the config's soft targets + gold labels
    assert json.loads(option(aug_nokd, "--phases")) == [{"name": "finetune", "loss": {"hard": 1.0}}]
    assert "--augment.model" not in nokd and float(option(nokd, "--train.epochs")) == 3.0
    result = json.loads((out / "study.json").read_text())
    assert set(result["students"]) == set(arms) and "distilbert-aug_distillation_gain" in result
