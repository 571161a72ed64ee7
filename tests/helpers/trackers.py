"""Reading back what a run sent to its experiment trackers, through each tracker's own reader: TensorBoard's
EventAccumulator, MLflow's MlflowClient, and the records of a W&B offline run (its `.wandb` file, read with W&B's
own protobuf classes), so that the tests compare them with `metrics.jsonl` and `run_config.json`."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from bertzoo.engine.logs import read_metrics


def jsonl_series(out: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as {name: [(step, value), ...]}, numbers only (null and text left out, as trackers do)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in read_metrics(out / "metrics.jsonl"):
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                series.setdefault(key, []).append((row["step"], float(value)))
    return series


# --- TensorBoard ----------------------------------------------------------------------------------------------


def tensorboard_run(directory: Path) -> Any:
    """An EventAccumulator over `directory`'s event files, everything loaded."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def tensorboard_scalars(acc: Any) -> dict[str, list[tuple[int, float]]]:
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_text(acc: Any, tag: str) -> str:
    """The last text logged under `tag` (add_text), without its Markdown code fence."""
    text = acc.Tensors(f"{tag}/text_summary")[-1].tensor_proto.string_val[0].decode("utf-8")
    return text.removeprefix("```json\n").removesuffix("\n```")


def tensorboard_hparams(directory: Path) -> dict[str, Any]:
    """The HParams plugin's session start info: the hyperparameters as the HParams dashboard shows them."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == "_hparams_/session_start_info":
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    params = data.session_start_info.hparams
                    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in params.items()}
    return {}


# --- MLflow ---------------------------------------------------------------------------------------------------


def mlflow_run(store: Path, experiment: str) -> tuple[Any, Any]:
    """(client, the one run of `experiment`) in the file store `store`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r} in {store}"
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return client, runs[0]


def mlflow_series(client: Any, run: Any, names: list[str]) -> dict[str, list[tuple[int, float]]]:
    return {n: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, n)) for n in names}


def mlflow_artifact(client: Any, run: Any, name: str, tmp: Path) -> Any:
    return json.loads(Path(client.download_artifacts(run.info.run_id, name, str(tmp))).read_text())


# --- W&B (offline) --------------------------------------------------------------------------------------------

# A .wandb file is W&B's transaction log: a 7-byte header (":W&B", a magic number, a version) and then LevelDB's
# log format, 32 KiB blocks of records with a 7-byte header (CRC32C, length, type), a record cut at a block's end
# continuing in FIRST / MIDDLE / LAST pieces. Each whole record is one W&B `Record` protobuf.
_BLOCK, _HEADER = 32768, 7
_FULL, _LAST = 1, 4


def wandb_records(run_dir: Path) -> list[Any]:
    """The Record messages of the offline run in `run_dir` (wandb/offline-run-*), in order."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    records, pos, pieces = [], _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0 and length == 0:
            break
        pos += _HEADER
        pieces += data[pos : pos + length]
        pos += length
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
            pieces = b""
    return records


def wandb_run(wandb_dir: Path) -> dict[str, Any]:
    """What an offline run recorded: its project, name and id, config, history rows by step, and summary."""
    (run_dir,) = (wandb_dir / "wandb").glob("offline-run-*")
    out: dict[str, Any] = {"config": {}, "history": {}, "summary": {}}
    for record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.update(project=record.run.project, name=record.run.display_name, id=record.run.run_id)
            out["config"].update(_items(record.run.config.update))
        elif kind == "config":
            out["config"].update(_items(record.config.update))
        elif kind == "history":
            row = _items(record.history.item)
            out["history"].setdefault(row.pop("_step"), {}).update(row)
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
    out["config"].pop("_wandb", None)
    return out


def _items(items: Any) -> dict[str, Any]:
    return {"/".join(i.nested_key) if i.nested_key else i.key: json.loads(i.value_json) for i in items}


def wandb_series(run: dict[str, Any], names: list[str]) -> dict[str, list[tuple[int, float]]]:
    history = run["history"]
    return {n: [(step, float(history[step][n])) for step in sorted(history) if n in history[step]] for n in names}


# --- two ranks ------------------------------------------------------------------------------------------------


def _rank(rank: int, out: str, report_to: list[str], port: int) -> None:
    import os

    import torch

    from bertzoo.engine import distributed

    from helpers.loop import make_cfg, make_trainer

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    try:
        make_trainer(make_cfg(Path(out), report_to=report_to, max_steps=10, save_every=0)).train()
    finally:
        distributed.cleanup()


def run_two_ranks(out: Path, report_to: list[str]) -> None:
    """The toy run as two gloo processes on the CPU, each its own Trainer (rank 0 and rank 1)."""
    import torch.multiprocessing as mp

    from helpers.loop import free_port

    mp.spawn(_rank, args=(str(out), report_to, free_port()), nprocs=2, join=True)
