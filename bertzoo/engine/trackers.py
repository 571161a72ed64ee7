"""Experiment trackers (`train.report_to`): TensorBoard, MLflow and W&B get what a run writes to its own files.

Each tracker receives every row of `metrics.jsonl` (same names, same steps: `TrackedWriter` sends them on as it
writes them), the dict of `run_config.json` as the run's configuration, and at the end the run's summary (and a
recipe's own report, `Trackers.report`). Only the main rank tracks.

A tracker that cannot start is one `ConfigError` naming the fix before the first step: its package and its
directory are checked when the Trainer is built, its run is opened when `train()` starts. Once training runs, a
failing tracker call warns once and that tracker is dropped for the rest of the run: a dashboard never ends a
training run, and `metrics.jsonl` still holds everything.

Where runs go: `<home>` is the run's top output directory (`train.output_dir` of the run config; a distillation
phase trains in `<home>/<phase>`, and is one tracker run named after it).

    tensorboard  event files in `<home>/tensorboard/` (a distillation phase: `<home>/tensorboard/<phase>/`)
    mlflow       MLFLOW_TRACKING_URI, else a file store in `<home>/mlruns`; the experiment is
                 `train.tracker_project`, else MLFLOW_EXPERIMENT_NAME, else `<home>`'s name
    wandb        WANDB_MODE and WANDB_DIR as W&B reads them (the directory defaults to `<home>`); the project is
                 `train.tracker_project`, else WANDB_PROJECT, else `<home>`'s name
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import tempfile
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args

from bertzoo.config.runs import TrackerName, TrainConfig
from bertzoo.engine.logs import MetricsWriter
from bertzoo.errors import ConfigError
from bertzoo.io import write_atomic

TRACKERS: tuple[str, ...] = get_args(TrackerName)
STATE_NAME = "trackers.json"  # each tracker's run id, so that a resumed run continues the same tracker runs
TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
_FINISHED, _FAILED, _KILLED = "FINISHED", "FAILED", "KILLED"  # MLflow's run states; the others map onto them
_MLFLOW_REFUSED = re.compile(r"[^\w.\- /]")  # what MLflow's names may not hold (colons: not on Windows)


# --- values -------------------------------------------------------------------------------------------------


def number(value: Any) -> float | None:
    """`value` as a finite float, or None for anything else (text, booleans, None, NaN: JSON's null)."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()  # a 0-d tensor or numpy scalar
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def flatten(data: Mapping[str, Any], sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of `a<sep>b` keys; other values (lists included) as they are."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, sep, name))
        else:
            flat[name] = value
    return flat


def numbers(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers among the nested values of `data`, under `prefix/a/b` names."""
    out = {}
    for key, value in flatten(data, "/", prefix).items():
        x = number(value)
        if x is not None:
            out[key] = x
    return out


def json_safe(data: Any) -> Any:
    """`data` as plain JSON types (what `run_config.json` reads back as; unknown objects as their string)."""
    return json.loads(json.dumps(data, default=str))


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the checks at build time -------------------------------------------------------------------------------


def _need(name: str, module: str, install: str) -> Any:
    """Import `module` or raise the one-line error that says how to install it."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken install can raise more than ImportError
        raise ConfigError(
            f"train.report_to names {name}, but {module} cannot be imported ({_short(exc)}); {install}"
        ) from None


def _writable(directory: Path, name: str, fix: str) -> None:
    """Create `directory` and a file in it, or raise the one-line error naming it (a check that holds for root
    too, where permission bits do not)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ConfigError(
            f"train.report_to: {name} cannot write to {directory} ({exc.strerror or exc}); {fix}"
        ) from None


def _local_path(uri: str) -> Path | None:
    """The directory of a local MLflow file store (`file:` URI or a plain path); None for a database or a server."""
    if uri.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(uri).path))
    return None if "://" in uri else Path(uri)


# --- the trackers -------------------------------------------------------------------------------------------


class _Tracker:
    """One tracker's run: `start` opens it (raising ConfigError), then `log`, `final`, `close`."""

    name = ""

    def start(self, config: dict[str, Any], step: int, run_id: str | None, names: tuple[str, str]) -> str | None:
        """Open the run (continue `run_id` when resuming at `step` > 0); returns the id to continue it by."""
        raise NotImplementedError

    def log(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def final(self, name: str, data: dict[str, Any], step: int) -> None:
        raise NotImplementedError

    def close(self, status: str) -> None:
        raise NotImplementedError


class TensorBoard(_Tracker):
    """Scalars, the config as text (and as HParams) and the summary through torch's SummaryWriter."""

    name = "tensorboard"

    def __init__(self, directory: Path) -> None:
        _need("tensorboard", "tensorboard", "pip install tensorboard (bertzoo's default install includes it)")
        _need("tensorboard", "torch.utils.tensorboard", "pip install tensorboard")
        _writable(directory, "tensorboard", "check train.output_dir and its permissions")
        self.directory = directory
        self.writer: Any = None

    def start(self, config: dict[str, Any], step: int, run_id: str | None, names: tuple[str, str]) -> str | None:
        from torch.utils.tensorboard import SummaryWriter

        if step == 0:  # a fresh run: an earlier attempt's curves would mix with this one's (as metrics.jsonl's)
            for old in self.directory.glob("events.out.tfevents.*"):
                if old.is_file():
                    old.unlink()
        try:
            # Resuming at `step`: the steps after it are trained again, so their earlier events are hidden.
            self.writer = SummaryWriter(str(self.directory), purge_step=step + 1 if step else None)
            self.writer.add_text("run_config", _markdown_json(config), step)
            if step == 0:
                self._hparams(config)
            self.writer.flush()
        except Exception as exc:
            raise ConfigError(
                f"train.report_to: TensorBoard could not start writing to {self.directory} ({_short(exc)}); "
                "check the directory, or pip install --upgrade tensorboard"
            ) from None
        return None

    def _hparams(self, config: dict[str, Any]) -> None:
        """The flattened config in the HParams dashboard, in this run's own event file."""
        from torch.utils.tensorboard.summary import hparams

        flat = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flatten(config, ".").items()}
        file_writer = self.writer._get_file_writer()
        for summary in hparams(flat, {}):
            file_writer.add_summary(summary)

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # as metrics.jsonl: a crash loses nothing already logged

    def final(self, name: str, data: dict[str, Any], step: int) -> None:
        self.writer.add_text(name, _markdown_json(data), step)
        self.log(numbers(data, name), step)

    def close(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _markdown_json(data: Any) -> str:
    return "```json\n" + json.dumps(data, indent=2) + "\n```"


def _mlflow_name(key: str) -> str:
    """`key` as a name MLflow accepts: a report's label names can hold any character, and an empty or dotted part
    of a path; those become "_"."""
    parts = _MLFLOW_REFUSED.sub("_", key).split("/")
    return "/".join(p if p.strip(".") else "_" for p in parts)


class MLflow(_Tracker):
    """Metrics, the config as params (dotted names, as the command line's overrides) and as `run_config.json`, and
    the summary as metrics and a JSON artifact, through MlflowClient (no global active run)."""

    name = "mlflow"

    def __init__(self, home: Path, project: str) -> None:
        _need("mlflow", "mlflow", "pip install 'bertzoo[mlflow]'")
        self.uri = os.environ.get("MLFLOW_TRACKING_URI") or (home / MLFLOW_DIR).resolve().as_uri()
        self.experiment = project or os.environ.get("MLFLOW_EXPERIMENT_NAME") or home.resolve().name
        local = _local_path(self.uri)
        if local is not None:
            _writable(local, "mlflow", "set MLFLOW_TRACKING_URI to a writable store or check train.output_dir")
        self.client: Any = None
        self.run_id = ""

    @contextlib.contextmanager
    def _store(self) -> Iterator[None]:
        """MLflow 3 refuses a file store unless MLFLOW_ALLOW_FILE_STORE is set: bertzoo's default store is one,
        so it is allowed for bertzoo's own calls (a user's setting, either way, is left as it is)."""
        if "MLFLOW_ALLOW_FILE_STORE" in os.environ or _local_path(self.uri) is None:
            yield
            return
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        try:
            yield
        finally:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)

    def start(self, config: dict[str, Any], step: int, run_id: str | None, names: tuple[str, str]) -> str | None:
        from mlflow.tracking import MlflowClient

        try:
            with self._store():
                self.client = MlflowClient(tracking_uri=self.uri)
                self.run_id = self._continue(run_id) if step and run_id else ""
                if not self.run_id:
                    found = self.client.get_experiment_by_name(self.experiment)
                    experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
                    self.run_id = self.client.create_run(experiment_id, run_name=names[1]).info.run_id
                    self._params(config)  # once: MLflow refuses a param changed later (a resume's new max_steps)
                self.client.log_dict(self.run_id, config, "run_config.json")
        except Exception as exc:
            raise ConfigError(
                f"train.report_to: MLflow could not start a run at {self.uri} ({_short(exc)}); "
                "check MLFLOW_TRACKING_URI (unset, runs go to <output_dir>/mlruns)"
            ) from None
        return self.run_id

    def _continue(self, run_id: str) -> str:
        """`run_id` set running again, or "" when the store no longer has it (a new run is made instead)."""
        try:
            self.client.update_run(run_id, status="RUNNING")
        except Exception:
            return ""
        return run_id

    def _params(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        try:
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as limit
        except ImportError:
            limit = 500  # MLflow 1's limit
        params = [
            Param(k, (v if isinstance(v, str) else json.dumps(v))[:limit]) for k, v in flatten(config, ".").items()
        ]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per call
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_mlflow_name(k), v, now, step) for k, v in values.items()]
        with self._store():
            for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per call
                self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def final(self, name: str, data: dict[str, Any], step: int) -> None:
        self.log(numbers(data, name), step)
        with self._store():
            self.client.log_dict(self.run_id, data, f"{name}.json")

    def close(self, status: str) -> None:
        if self.client is not None and self.run_id:
            with self._store():
                self.client.set_terminated(self.run_id, status=status)
            self.client = None


class WandB(_Tracker):
    """Metrics at their step, the nested config, and the summary in the run's summary, through `wandb.init`."""

    name = "wandb"

    def __init__(self, home: Path, project: str) -> None:
        _need("wandb", "wandb", "pip install 'bertzoo[wandb]'")
        self.project = project or os.environ.get("WANDB_PROJECT") or home.resolve().name
        # W&B reads WANDB_DIR itself; without it, the run goes beside the rest of bertzoo's output.
        self.dir = None if os.environ.get("WANDB_DIR") else home
        _writable(Path(os.environ.get("WANDB_DIR") or home), "wandb", "set WANDB_DIR to a writable directory")
        self.run: Any = None

    def start(self, config: dict[str, Any], step: int, run_id: str | None, names: tuple[str, str]) -> str | None:
        import wandb

        resume = {"id": run_id, "resume": "allow"} if step and run_id else {}
        try:
            self.run = wandb.init(project=self.project, name=names[1], dir=self.dir, **resume)
            self.run.config.update(config, allow_val_change=True)
        except Exception as exc:
            raise ConfigError(
                f"train.report_to: W&B could not start a run ({_short(exc)}); run `wandb login`, or set "
                "WANDB_MODE=offline to keep the run on disk (`wandb sync` uploads it later)"
            ) from None
        return self.run.id

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)  # rows of one step (training and eval) merge into one

    def final(self, name: str, data: dict[str, Any], step: int) -> None:
        self.run.summary.update(flatten(data, "/", name))

    def close(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if status == _FAILED else 0)
            self.run = None


# --- all of a run's trackers --------------------------------------------------------------------------------


def home_of(cfg: TrainConfig, run_config: Mapping[str, Any] | None) -> Path:
    """The run's top directory: the run config's `train.output_dir` when `cfg.output_dir` lies inside it (a
    distillation phase's), else `cfg.output_dir`."""
    out = Path(cfg.output_dir)
    train = (run_config or {}).get("train")
    top = train.get("output_dir") if isinstance(train, Mapping) else None
    if isinstance(top, str) and top and out.resolve().is_relative_to(Path(top).resolve()):
        return Path(top)
    return out


class Trackers:
    """The trackers `cfg.report_to` names, checked at once (ConfigError); empty when `enabled` is false (ranks
    other than 0) or nothing is named, and then every method does nothing."""

    def __init__(self, cfg: TrainConfig, run_config: Mapping[str, Any] | None = None, *, enabled: bool = True) -> None:
        self.output_dir = Path(cfg.output_dir)
        home = home_of(cfg, run_config)
        part = self.output_dir.resolve().relative_to(home.resolve())
        self.names = (home.resolve().name, str(Path(home.resolve().name) / part))  # (project, run name)
        builders = {
            "tensorboard": lambda: TensorBoard(home / TENSORBOARD_DIR / part),
            "mlflow": lambda: MLflow(home, cfg.tracker_project),
            "wandb": lambda: WandB(home, cfg.tracker_project),
        }
        self._built = [builders[n]() for n in dict.fromkeys(cfg.report_to)] if enabled else []
        self.trackers: list[_Tracker] = list(self._built)  # those with a run open (or about to open one)
        self.step = 0
        self._held = False
        self._status = _FINISHED
        self._finalizer: weakref.finalize | None = None

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def start(self, config: Mapping[str, Any], step: int) -> None:
        """Open every tracker's run at `step` (0: a fresh run; more: a resumed one, continuing the same runs)."""
        self.trackers = list(self._built)  # every one again: a Trainer may train more than once
        if not self.trackers:
            return
        state_path = self.output_dir / STATE_NAME
        previous = _read_state(state_path) if step else {}
        plain, ids, started = json_safe(dict(config)), {}, []
        try:
            for tracker in self.trackers:
                ids[tracker.name] = tracker.start(plain, step, previous.get(tracker.name), self.names)
                started.append(tracker)
        except BaseException:
            _close_all(started, _FAILED)
            raise
        write_atomic(state_path, json.dumps(ids, indent=2) + "\n")
        self.step = step
        self._finalizer = weakref.finalize(self, _close_all, list(self.trackers), _FAILED)

    def log(self, row: Mapping[str, Any]) -> None:
        """One row of `metrics.jsonl`: its numbers at its `step` (null values, as NaN, left out)."""
        if not self.trackers:
            return
        step = row.get("step")
        self.step = step if isinstance(step, int) else self.step
        values = {k: x for k, v in row.items() if k != "step" and (x := number(v)) is not None}
        if values:
            self._each("log", values, self.step)

    def report(self, name: str, data: Mapping[str, Any], *, close: bool = True) -> None:
        """Log a final document (`summary`, a fine-tuning `report`): its numbers as `name/...` metrics at the last
        step and the whole of it as text/artifact/summary; then close the runs unless `close` is false."""
        if self.trackers:
            self._each("final", name, json_safe(dict(data)), self.step)
        if close:
            self.close()

    def hold(self) -> None:
        """Keep the runs open after `train()` returns, for a recipe that reports more (`report`, then closed)."""
        self._held = True

    @contextlib.contextmanager
    def session(self, config: Mapping[str, Any], step: int) -> Iterator[Trackers]:
        """The runs of one `train()` call: started here, closed on the way out (failed on an exception; left open
        after a normal end when `hold` asked for it)."""
        self.start(config, step)
        try:
            yield self
        except BaseException:
            self.close(_FAILED)
            raise
        if not self._held:
            self.close()

    def ended(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Log the Trainer's summary (its run's end state from it); returns it."""
        over = summary.get("completed") or summary.get("stop_reason") == "max_minutes"
        self._status = _FINISHED if over else _KILLED  # an interrupted run, to be resumed
        if isinstance(summary.get("steps"), int):
            self.step = summary["steps"]
        self.report("summary", summary, close=False)
        return summary

    def close(self, status: str | None = None) -> None:
        """End every run: FINISHED, FAILED or KILLED, in MLflow's words (default: as the summary had it, a run
        stopped to be resumed KILLED, else FINISHED); calling it again does nothing."""
        status = status or self._status
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self.trackers:
            _close_all(self.trackers, status)
            self.trackers = []

    def _each(self, method: str, *args: Any) -> None:
        """Call `method` on every tracker; one that fails warns once and is dropped, and training goes on."""
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:
                self.trackers.remove(tracker)
                warnings.warn(
                    f"{tracker.name} failed ({_short(exc)}); training goes on without it (metrics.jsonl has it all)",
                    stacklevel=3,
                )
                _close_all([tracker], _FAILED)


def _close_all(trackers: list[_Tracker], status: str) -> None:
    """Close each tracker, never raising: the end of a run must not fail on a dashboard."""
    for tracker in trackers:
        try:
            tracker.close(status)
        except Exception as exc:
            warnings.warn(f"{tracker.name} did not close cleanly ({_short(exc)})", stacklevel=2)


def _read_state(path: Path) -> dict[str, str]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in state.items() if isinstance(v, str)} if isinstance(state, dict) else {}


class TrackedWriter(MetricsWriter):
    """A MetricsWriter that sends each row on to the trackers too, so they get exactly what `metrics.jsonl` gets."""

    def __init__(self, output_dir: str | Path, trackers: Trackers, *, enabled: bool = True) -> None:
        super().__init__(output_dir, enabled=enabled)
        self.trackers = trackers

    def write(self, row: Mapping[str, Any]) -> None:
        super().write(row)
        self.trackers.log(row)
