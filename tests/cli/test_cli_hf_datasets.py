"""The command line on Hugging Face datasets: tokenizer train and prepare on `hf-dataset:` inputs, a tiny
fine-tune on parquet files, and bad dataset inputs as one line and exit code 2. Local data only (no hub)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from bertzoo.cli import main
from bertzoo.config import to_plain

datasets = pytest.importorskip("datasets")

from helpers.finetune import synthetic_rows, tiny_finetune_config, write_task_files  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, synthetic_docs):
    """300 synthetic documents as a saved DatasetDict (train + validation) whose text column is `content`."""
    root = tmp_path_factory.mktemp("hf-corpus")
    docs = synthetic_docs[:300]
    splits = {"train": docs[:250], "validation": docs[250:]}
    table = datasets.DatasetDict({k: datasets.Dataset.from_dict({"content": v}) for k, v in splits.items()})
    table.save_to_disk(str(root / "corpus"))
    return root / "corpus"


def test_tokenizer_train_and_prepare_read_a_dataset(corpus, tmp_path, capsys):
    tok, shards = tmp_path / "tok", tmp_path / "shards"
    spec = f"hf-dataset:{corpus}"
    args = ["tokenizer", "train", "-i", spec, "--text-field", "content", "-o", str(tok), "--vocab-size", "600"]
    assert main(args) == 0
    assert "on 250 documents" in capsys.readouterr().out  # the train split by default
    args = ["prepare", "-i", f"{spec}:validation", "--text-field", "content", "-t", str(tok), "-o", str(shards)]
    assert main(args) == 0
    meta = json.loads((shards / "meta.json").read_text())
    assert meta["num_docs"] == 50
    assert "50 documents" in capsys.readouterr().out


def test_bad_dataset_inputs_are_one_line_and_exit_2(corpus, tmp_path, capsys, monkeypatch, synthetic_tokenizer):
    tok = tmp_path / "tok"
    synthetic_tokenizer.save(tok)
    spec = f"hf-dataset:{corpus}"

    def fails(*args: str) -> str:
        capsys.readouterr()
        code = main(list(args))
        # The error is one line, last (after the progress bar of a command that had started reading).
        lines = [line for line in capsys.readouterr().err.strip().splitlines() if "docs/s]" not in line]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
        return lines[0]

    def prepare(*args: str) -> str:
        return fails("prepare", *args, "-t", str(tok), "-o", str(tmp_path / "shards"))

    assert "no column 'text' (columns: content)" in prepare("-i", spec)
    assert "no split 'test'; available splits: train, validation" in prepare("-i", f"{spec}:test")
    assert "nobody/nothing: not found" in prepare("-i", "hf-dataset:nobody/nothing")
    assert "no such file or directory" in prepare("-i", f"hf-dataset:{tmp_path / 'missing'}")
    assert not (tmp_path / "shards").exists()  # nothing half-written
    train = ("tokenizer", "train", "-o", str(tmp_path / "new-tok"))
    assert "no column 'body' (columns: content)" in fails(*train, "-i", spec, "--text-field", "body")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    assert "pip install datasets" in fails(*train, "-i", spec, "--text-field", "content")


def test_finetune_and_evaluate_read_parquet(tmp_path, capsys):
    paths = write_task_files(tmp_path / "data")
    # train and test as parquet files; dev from a directory of data files (its validation split).
    folder = tmp_path / "data" / "folder"
    folder.mkdir()
    for split, (n, seed) in {"train": (240, 0), "test": (60, 2)}.items():
        datasets.Dataset.from_list(synthetic_rows(n, seed)).to_parquet(str(tmp_path / "data" / f"{split}.parquet"))
        paths[split] = str(tmp_path / "data" / f"{split}.parquet")
    datasets.Dataset.from_list(synthetic_rows(60, 1)).to_parquet(str(folder / "validation.parquet"))
    paths["dev"] = f"hf-dataset:{folder}"
    cfg = to_plain(tiny_finetune_config(paths, tmp_path / "run", epochs=4))
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert main(["finetune", str(config)]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["test"]["metrics"]["accuracy"] > 0.8  # the topic words make it easy; chance is 1/3
    capsys.readouterr()
    out = tmp_path / "eval.json"
    assert main(["evaluate", str(tmp_path / "run" / "model"), "--data", paths["test"], "--out", str(out)]) == 0
    assert json.loads(out.read_text())["metrics"]["accuracy"] == pytest.approx(report["test"]["metrics"]["accuracy"])
