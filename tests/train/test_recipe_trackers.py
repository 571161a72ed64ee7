"""`train.report_to` in the recipes: a fine-tuning run (dev evaluations included) and a distillation run (each phase
one tracker run under the distillation's directory) log what their `metrics.jsonl` and `run_config.json` hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertzoo.config import DistillConfig, ModelConfig, from_dict
from bertzoo.engine.trackers import json_safe
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM

from helpers.finetune import tiny_finetune_config, write_task_files
from helpers.trackers import (
    jsonl_series,
    mlflow_run,
    mlflow_series,
    tensorboard_run,
    tensorboard_scalars,
    tensorboard_text,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def no_tracker_settings(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(name, raising=False)


def assert_same_series(scalars: dict, out: Path) -> None:
    """TensorBoard's scalars hold every value of `out/metrics.jsonl`, at its steps (float32 precision)."""
    expected = jsonl_series(out)
    for name, points in expected.items():
        assert [s for s, _ in scalars[name]] == [s for s, _ in points], name
        assert [v for _, v in scalars[name]] == pytest.approx([v for _, v in points], rel=1e-6), name


def test_finetuning_logs_training_and_dev_metrics_to_tensorboard(tmp_path):
    from bertzoo.train.finetune import finetune

    paths = write_task_files(tmp_path / "data")
    out = tmp_path / "run"
    summary = finetune(tiny_finetune_config(paths, out, epochs=2, threads=1, report_to=["tensorboard"]))
    acc = tensorboard_run(out / "tensorboard")
    scalars = tensorboard_scalars(acc)
    assert {"loss", "eval_accuracy"} <= set(scalars)
    assert_same_series(scalars, out)
    assert json.loads(tensorboard_text(acc, "run_config")) == json.loads((out / "run_config.json").read_text())
    assert json.loads(tensorboard_text(acc, "summary"))["steps"] == summary["steps"]
    report = json.loads((out / "report.json").read_text())  # the dev/test report of the best model, at the end
    assert json.loads(tensorboard_text(acc, "report")) == report
    assert scalars["report/test/metrics/accuracy"] == [(summary["steps"], pytest.approx(summary["test"]["accuracy"]))]


def _teacher(tokenizer, out: Path) -> Path:
    torch.manual_seed(5)
    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_layers=4,
        num_heads=4,
        intermediate_size=64,
        max_position=64,
    )
    MaskedLM(Encoder(config), sentence_task=None).save_pretrained(out)
    tokenizer.save(out)
    return out


def test_distillation_logs_each_phase_as_a_run_of_one_experiment(
    synthetic_shards, synthetic_tokenizer, tmp_path, monkeypatch
):
    from bertzoo.train.distill import distill

    out = tmp_path / "run"
    cfg = from_dict(
        DistillConfig,
        {
            "teacher": str(_teacher(synthetic_tokenizer, tmp_path / "teacher")),
            "student": {"num_layers": 2, "variant": "bert"},
            "data": {"shards": str(synthetic_shards), "max_seq_len": 32},
            "train": {"output_dir": str(out), "batch_size": 8, "max_steps": 6, "lr": 1e-3, "log_every": 2,
                      "save_every": 3, "threads": 1, "precision": "fp32", "report_to": ["tensorboard", "mlflow"]},
        },
    )  # fmt: skip
    report = distill(cfg)
    phase = out / "distill"  # the DistilBERT method's one phase trains in <output_dir>/distill
    scalars = tensorboard_scalars(tensorboard_run(out / "tensorboard" / "distill"))
    assert {"ce_loss", "cos_loss", "mlm_loss"} <= set(scalars)
    assert_same_series(scalars, phase)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client, run = mlflow_run(out / "mlruns", "run")  # one store and experiment for the whole distillation
    assert run.info.run_name == "run/distill"
    expected = jsonl_series(phase)
    assert mlflow_series(client, run, list(expected)) == expected
    assert run.data.metrics["summary/steps"] == report["phases"]["distill"]["steps"] == 6
    summary = json_safe(report["phases"]["distill"])
    assert run.data.metrics["summary/final_metrics/mlm_loss"] == pytest.approx(summary["final_metrics"]["mlm_loss"])
