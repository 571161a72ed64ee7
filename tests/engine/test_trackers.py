"""Experiment trackers (`train.report_to`): TensorBoard, MLflow and W&B (offline) get what `metrics.jsonl`,
`run_config.json` and the run's summary get, read back through each tracker's own reader; a resumed run continues
its tracker runs; only rank 0 tracks; a tracker that cannot start is one line and exit 2 before any step; one that
fails mid-run warns once and training goes on."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from bertzoo.config import load_pretrain_config
from bertzoo.config.parse import parse_scalar
from bertzoo.engine.trackers import TRACKERS, TensorBoard, Trackers, flatten, json_safe
from bertzoo.errors import ConfigError

from helpers.loop import make_cfg, make_trainer
from helpers.pretrain import tiny_args
from helpers.trackers import (
    jsonl_series,
    mlflow_artifact,
    mlflow_run,
    mlflow_series,
    tensorboard_hparams,
    tensorboard_run,
    tensorboard_scalars,
    tensorboard_text,
    wandb_run,
    wandb_series,
)

pytestmark = pytest.mark.usefixtures("one_thread", "tracker_env")


@pytest.fixture()
def tracker_env(monkeypatch, tmp_path):
    """No tracker setting of the machine's leaks in; W&B offline, its files (and its own settings) in tmp."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(name, str(tmp_path / name))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_SILENT", "true")


def train(out: Path, report_to: list[str], **kw):
    """The toy run (20 steps, logged every 5, an evaluation at 10 and 20) with these trackers; its summary."""
    cfg = make_cfg(out, report_to=report_to, eval_every=10, **kw.pop("cfg", {}))
    return make_trainer(cfg, eval_fn=lambda m: {"loss": 2.5, "accuracy": 0.25}, **kw).train()


def read_mlflow(monkeypatch, store: Path, experiment: str):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when allowed
    return mlflow_run(store, experiment)


# --- the config -----------------------------------------------------------------------------------------------


def test_report_to_is_a_list_of_known_trackers():
    assert load_pretrain_config(None).train.report_to == []
    # as the command line gives it: `--train.report_to '[tensorboard, mlflow]'`
    cfg = load_pretrain_config(None, {"train.report_to": parse_scalar("[tensorboard, mlflow]")})
    assert cfg.train.report_to == ["tensorboard", "mlflow"]
    with pytest.raises(ConfigError, match=r"train.report_to\[0\]='comet' is not allowed; choose one of: tensorboard"):
        load_pretrain_config(None, {"train.report_to": ["comet"]})
    with pytest.raises(ConfigError, match="train.report_to must be a list"):
        load_pretrain_config(None, {"train.report_to": "tensorboard"})
    assert set(TRACKERS) == {"tensorboard", "wandb", "mlflow"}


# --- what each tracker gets -----------------------------------------------------------------------------------


def test_tensorboard_gets_every_logged_value_the_config_and_the_summary(tmp_path):
    out = tmp_path / "run"
    summary = train(out, ["tensorboard"])
    acc = tensorboard_run(out / "tensorboard")
    scalars = tensorboard_scalars(acc)
    expected = jsonl_series(out)
    assert {"loss", "lr", "eval_loss", "eval_accuracy", "tokens_per_s"} <= set(expected)
    for name, points in expected.items():  # the same names at the same steps (TensorBoard keeps float32)
        assert [s for s, _ in scalars[name]] == [s for s, _ in points], name
        assert [v for _, v in scalars[name]] == pytest.approx([v for _, v in points], rel=1e-6), name
    run_config = json.loads((out / "run_config.json").read_text())
    assert json.loads(tensorboard_text(acc, "run_config")) == run_config
    hparams = tensorboard_hparams(out / "tensorboard")
    assert hparams["train.lr"] == pytest.approx(run_config["train"]["lr"])
    assert hparams["resolved.device"] == "cpu"
    assert json.loads(tensorboard_text(acc, "summary")) == json_safe(summary)
    assert scalars["summary/final_metrics/eval_loss"] == [(20, 2.5)]
    assert scalars["summary/steps"] == [(20, 20.0)]


def test_mlflow_gets_metrics_params_config_and_summary_in_a_local_file_store(tmp_path, monkeypatch):
    out = tmp_path / "run"
    summary = train(out, ["mlflow"])
    client, run = read_mlflow(monkeypatch, out / "mlruns", "run")  # the experiment: the output directory's name
    expected = jsonl_series(out)
    assert mlflow_series(client, run, list(expected)) == expected  # exact: MLflow keeps doubles
    run_config = json.loads((out / "run_config.json").read_text())
    assert mlflow_artifact(client, run, "run_config.json", tmp_path / "a") == run_config
    params = run.data.params
    assert params["train.lr"] == json.dumps(run_config["train"]["lr"]) and params["resolved.device"] == "cpu"
    assert set(params) == set(flatten(run_config, "."))
    assert mlflow_artifact(client, run, "summary.json", tmp_path / "b") == json_safe(summary)
    assert run.data.metrics["summary/final_metrics/eval_accuracy"] == 0.25
    assert run.info.status == "FINISHED" and run.info.run_name == "run"


def test_mlflow_experiment_and_store_follow_the_config_and_the_environment(tmp_path, monkeypatch):
    store = tmp_path / "elsewhere"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    train(tmp_path / "run", ["mlflow"], cfg={"tracker_project": "my-study", "max_steps": 5})
    assert not (tmp_path / "run" / "mlruns").exists()
    client, run = read_mlflow(monkeypatch, store, "my-study")
    assert run.data.metrics["summary/steps"] == 5


def test_wandb_offline_gets_metrics_config_and_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "bertzoo-tests")
    out = tmp_path / "run"
    summary = train(out, ["wandb"])
    run = wandb_run(tmp_path / "WANDB_DIR")  # WANDB_DIR is honoured
    assert (run["project"], run["name"]) == ("bertzoo-tests", "run")
    expected = jsonl_series(out)
    assert wandb_series(run, list(expected)) == expected
    assert run["config"] == json.loads((out / "run_config.json").read_text())
    assert run["summary"]["summary/steps"] == summary["steps"] == 20
    assert run["summary"]["summary/final_metrics/eval_loss"] == 2.5
    assert json.loads((out / "trackers.json").read_text()) == {"wandb": run["id"]}


def test_a_report_after_training_goes_to_the_same_runs(tmp_path, monkeypatch):
    """A recipe with a report of its own (fine-tuning's dev/test report) holds the runs open past `train()`."""
    out = tmp_path / "run"
    trainer = make_trainer(make_cfg(out, report_to=["tensorboard", "mlflow"], max_steps=5))
    trainer.trackers.hold()
    trainer.train()
    client, run = read_mlflow(monkeypatch, out / "mlruns", "run")
    assert run.info.status == "RUNNING"
    labels = {"why?": {"f1": 0.5}, "": {"f1": 0.25}, "a:b": {"f1": 0.0}}  # label names MLflow would refuse
    trainer.trackers.report("report", {"test": {"metrics": {"accuracy": 0.75}}, "labels": ["a", "b"], "per": labels})
    client, run = mlflow_run(out / "mlruns", "run")
    assert run.info.status == "FINISHED" and run.data.metrics["report/test/metrics/accuracy"] == 0.75
    assert {k: v for k, v in run.data.metrics.items() if k.startswith("report/per/")} == {
        "report/per/why_/f1": 0.5,
        "report/per/_/f1": 0.25,
        "report/per/a_b/f1": 0.0,
    }
    acc = tensorboard_run(out / "tensorboard")
    assert tensorboard_scalars(acc)["report/test/metrics/accuracy"] == [(5, 0.75)]
    assert json.loads(tensorboard_text(acc, "report"))["labels"] == ["a", "b"]


# --- resume, ranks --------------------------------------------------------------------------------------------


class Crash(Exception):
    pass


def test_a_resumed_run_continues_its_tracker_runs(tmp_path, monkeypatch):
    out = tmp_path / "run"

    def crash(trainer, step):
        if step == 17:  # after the checkpoint at 10 and the log row of 15
            raise Crash

    with pytest.raises(Crash):
        train(out, ["tensorboard", "mlflow", "wandb"], callbacks=[crash])
    first = json.loads((out / "trackers.json").read_text())
    client, run = read_mlflow(monkeypatch, out / "mlruns", "run")
    assert run.info.status == "FAILED"
    summary = make_trainer(make_cfg(out, report_to=["tensorboard", "mlflow", "wandb"], eval_every=10)).train("auto")
    assert summary["steps_this_session"] == 10  # from the checkpoint at step 10
    assert json.loads((out / "trackers.json").read_text()) == first  # the same MLflow and W&B runs
    # TensorBoard hides the steps after the checkpoint that the crashed session logged (15), as metrics.jsonl does.
    scalars = tensorboard_scalars(tensorboard_run(out / "tensorboard"))
    expected = jsonl_series(out)
    assert [s for s, _ in scalars["loss"]] == [s for s, _ in expected["loss"]] == [5, 10, 15, 20]
    assert [v for _, v in scalars["loss"]] == pytest.approx([v for _, v in expected["loss"]], rel=1e-6)
    client, run = mlflow_run(out / "mlruns", "run")  # still one run, finished this time
    assert run.info.status == "FINISHED" and run.info.run_id == first["mlflow"]
    assert [s for s, _ in mlflow_series(client, run, ["loss"])["loss"]] == [5, 10, 15, 15, 20]  # 15 twice: redone


def test_a_fresh_run_in_a_used_directory_starts_new_curves(tmp_path):
    out = tmp_path / "run"
    train(out, ["tensorboard"], cfg={"max_steps": 10})
    shutil.rmtree(out / "checkpoints")  # what lets a fresh run start there
    train(out, ["tensorboard"], cfg={"max_steps": 5})
    scalars = tensorboard_scalars(tensorboard_run(out / "tensorboard"))
    assert [s for s, _ in scalars["loss"]] == [5]


def test_only_the_main_rank_tracks(tmp_path):
    cfg = make_cfg(tmp_path / "run", report_to=["tensorboard", "mlflow", "wandb"])
    trackers = Trackers(cfg, enabled=False)
    assert not trackers
    trackers.start({"train": {}}, 0)
    trackers.log({"step": 1, "loss": 1.0})
    trackers.report("summary", {"steps": 1})
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="gloo multi-process test runs on Linux")
def test_under_ddp_one_rank_writes_the_tracker_runs(tmp_path, monkeypatch):
    from helpers.trackers import run_two_ranks

    out = tmp_path / "ddp"
    run_two_ranks(out, ["tensorboard", "mlflow"])
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 1
    client, run = read_mlflow(monkeypatch, out / "mlruns", "ddp")  # one run, not one per rank
    expected = jsonl_series(out)
    assert mlflow_series(client, run, ["loss"]) == {"loss": expected["loss"]}


# --- trackers that cannot start, or fail ----------------------------------------------------------------------


def cli(args: list[str], capsys) -> tuple[int, str]:
    from bertzoo.cli import main

    code = main(args)
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("tracker", "module", "fix"),
    [
        ("wandb", "wandb", "pip install 'bertzoo[wandb]'"),
        ("mlflow", "mlflow", "pip install 'bertzoo[mlflow]'"),
        ("tensorboard", "tensorboard", "pip install tensorboard"),
    ],
)
def test_a_missing_package_is_one_line_and_exit_2_before_training(
    tracker, module, fix, synthetic_shards, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails as if it were not installed
    out = tmp_path / "run"
    code, err = cli([*tiny_args(synthetic_shards, out), "--train.report_to", f"[{tracker}]"], capsys)
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("error: train.report_to names") and fix in err, err
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()


def test_unwritable_places_and_unknown_names_exit_2_before_training(synthetic_shards, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "tensorboard").write_text("a file where the event files would go")
    code, err = cli([*tiny_args(synthetic_shards, out), "--train.report_to", "[tensorboard]"], capsys)
    assert code == 2 and "tensorboard cannot write to" in err and err.count("\n") == 0, err
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (blocked / "store").as_uri())
    code, err = cli([*tiny_args(synthetic_shards, out), "--train.report_to=[mlflow]"], capsys)
    assert code == 2 and "mlflow cannot write to" in err and "MLFLOW_TRACKING_URI" in err, err
    code, err = cli([*tiny_args(synthetic_shards, out), "--train.report_to", "[neptune]"], capsys)
    assert code == 2 and "'neptune' is not allowed; choose one of: tensorboard, wandb, mlflow" in err, err
    assert not (out / "metrics.jsonl").exists()


def test_a_tracker_whose_run_cannot_start_is_exit_2_before_training(synthetic_shards, tmp_path, capsys, monkeypatch):
    import wandb

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", refuse)
    out = tmp_path / "run"
    code, err = cli([*tiny_args(synthetic_shards, out), "--train.report_to", "[tensorboard, wandb]"], capsys)
    assert code == 2 and "W&B could not start a run (api_key not configured" in err and "WANDB_MODE=offline" in err
    assert not (out / "metrics.jsonl").exists()


def test_a_tracker_failing_mid_run_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    def broken(self, values, step):
        raise OSError("disk of the dashboard is gone")

    monkeypatch.setattr(TensorBoard, "log", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = train(tmp_path / "run", ["tensorboard", "mlflow"])
    mine = [w for w in caught if "training goes on without it" in str(w.message)]
    assert len(mine) == 1 and "tensorboard failed (disk of the dashboard is gone)" in str(mine[0].message)
    assert summary["completed"] and summary["steps"] == 20
    client, run = read_mlflow(monkeypatch, tmp_path / "run" / "mlruns", "run")  # the other tracker carried on
    assert mlflow_series(client, run, ["loss"])["loss"] == jsonl_series(tmp_path / "run")["loss"]
