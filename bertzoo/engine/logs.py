"""Metric logging: count-weighted running averages, JSONL + CSV files and a PNG of the curves."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from bertzoo.io import write_atomic

log = logging.getLogger("bertzoo.train")

JSONL_NAME = "metrics.jsonl"
CSV_NAME = "metrics.csv"


class RunningAverage:
    """Averages metrics over micro-batches and log intervals, weighted by their `counts`.

    Sums stay on the device as tensors, so `update` never waits for the accelerator; only
    `compute` reads the values back (once per log interval). A metric without a count weighs 1.
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, torch.Tensor] = {}

    def __bool__(self) -> bool:
        return bool(self._sums)

    @staticmethod
    def _acc_dtype(t: torch.Tensor) -> torch.dtype:
        return torch.float32 if t.device.type == "mps" else torch.float64  # mps has no float64

    def update(self, metrics: Mapping[str, torch.Tensor | float], counts: Mapping[str, Any] | None = None) -> None:
        """Add one observation of each metric (its mean over `counts[name]` items)."""
        counts = counts or {}
        for name, value in metrics.items():
            v = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
            dtype = self._acc_dtype(v)
            c = counts.get(name, 1)
            if isinstance(c, torch.Tensor):
                c = c.detach().to(v.device, dtype)
            else:
                # torch.full is a fill kernel; torch.tensor(..., device=cuda) would be a blocking copy.
                c = torch.full((), float(c), dtype=dtype, device=v.device)
            v = v.to(dtype).reshape(())
            c = c.reshape(())
            if name in self._sums:
                self._sums[name] += v * c
                self._counts[name] += c
            else:
                self._sums[name] = v * c
                self._counts[name] = c.clone()

    def merge(self, other: RunningAverage) -> None:
        """Add everything `other` has accumulated (device ops only, no sync)."""
        for name, s in other._sums.items():
            if name in self._sums:
                self._sums[name] += s
                self._counts[name] += other._counts[name]
            else:
                self._sums[name] = s.clone()
                self._counts[name] = other._counts[name].clone()

    def reset(self) -> None:
        self._sums.clear()
        self._counts.clear()

    def compute(self, reduce: bool = False) -> dict[str, float]:
        """Weighted means as floats (one device sync). `reduce` sums over ranks first (DDP)."""
        if not self._sums:
            return {}
        names = sorted(self._sums)
        packed = torch.stack([torch.stack([self._sums[n], self._counts[n]]) for n in names])
        if reduce:
            from bertzoo.engine.distributed import all_reduce_sum

            all_reduce_sum(packed)  # every rank logs the same metric names, so shapes agree
        out = {}
        for name, (s, c) in zip(names, packed.tolist(), strict=True):
            out[name] = s / c if c else float("nan")
        return out


def _clean(value: Any) -> Any:
    """JSON-safe scalar: tensors to numbers, NaN/Inf to None (JSON has no NaN)."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    """Appends each log event to `metrics.jsonl` and `metrics.csv` in `output_dir`.

    Both files are flushed on every write, so a crash loses nothing already logged. A CSV row with
    keys the header lacks rewrites the file with the widened header (rare: it happens when e.g. eval
    metrics first appear). `enabled=False` (ranks other than 0) makes every call a no-op.
    """

    def __init__(self, output_dir: str | Path, *, enabled: bool = True) -> None:
        self.output_dir = Path(output_dir)
        self.enabled = enabled
        self.jsonl_path = self.output_dir / JSONL_NAME
        self.csv_path = self.output_dir / CSV_NAME
        self._header: list[str] | None = None
        if enabled:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self._header = self._read_header()

    def _read_header(self) -> list[str] | None:
        if not self.csv_path.is_file() or self.csv_path.stat().st_size == 0:
            return None
        with open(self.csv_path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), None)

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one event (a flat mapping of names to numbers/strings, usually with `step`)."""
        if not self.enabled:
            return
        row = {k: _clean(v) for k, v in row.items()}
        with open(self.jsonl_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        if self._header is None:
            self._header = list(row)
            self._rewrite_csv([row])
            return
        new_keys = [k for k in row if k not in self._header]
        if new_keys:
            rows = self._read_csv_rows()
            self._header = self._header + new_keys
            self._rewrite_csv(rows + [row])
            return
        with open(self.csv_path, "a", newline="", encoding="utf-8") as f:
            csv.DictWriter(f, fieldnames=self._header).writerow(row)
            f.flush()

    def _read_csv_rows(self) -> list[dict[str, Any]]:
        if not self.csv_path.is_file():
            return []
        with open(self.csv_path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    def _rewrite_csv(self, rows: Iterable[Mapping[str, Any]]) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self._header or [], extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow(r)
        write_atomic(self.csv_path, buf.getvalue())

    def reset(self) -> None:
        """Delete both files (a fresh run in a reused directory)."""
        if not self.enabled:
            return
        self.jsonl_path.unlink(missing_ok=True)
        self.csv_path.unlink(missing_ok=True)
        self._header = None

    def truncate_after(self, step: int) -> None:
        """Drop events logged after `step` (a resumed run re-logs the steps it repeats)."""
        if not self.enabled:
            return
        if self.jsonl_path.is_file():
            kept = []
            for line in self.jsonl_path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a crash mid-write
                if not isinstance(rec.get("step"), int) or rec["step"] <= step:
                    kept.append(line)
            write_atomic(self.jsonl_path, "".join(line + "\n" for line in kept))
        if self.csv_path.is_file() and self._header:
            rows = [r for r in self._read_csv_rows() if not r.get("step", "").isdigit() or int(r["step"]) <= step]
            self._rewrite_csv(rows)


def read_metrics(jsonl_path: str | Path) -> list[dict[str, Any]]:
    """Parse `metrics.jsonl`, skipping a line torn by a crash."""
    rows = []
    for line in Path(jsonl_path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def plot_metrics(jsonl_path: str | Path, png_path: str | Path, keys: Sequence[str] | None = None) -> Path | None:
    """Draw loss and accuracy curves against step into a PNG; returns None (with a warning) if it can't.

    `keys` defaults to every logged metric whose name contains "loss" or "acc". Never raises for a
    missing matplotlib or unreadable log, so it is safe to call at the end of training.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        warnings.warn(
            "matplotlib is not installed; skipping the metrics plot (pip install bertzoo[plot])", stacklevel=2
        )
        return None
    try:
        rows = [r for r in read_metrics(jsonl_path) if isinstance(r.get("step"), (int, float))]
    except OSError as exc:
        warnings.warn(f"cannot read {jsonl_path} ({exc}); skipping the metrics plot", stacklevel=2)
        return None
    names = list(dict.fromkeys(k for r in rows for k in r))
    if keys is None:
        keys = [k for k in names if "loss" in k or "acc" in k]
    panels = [[k for k in keys if "acc" not in k], [k for k in keys if "acc" in k]]
    panels = [p for p in panels if any(k in names for k in p)]
    if not panels:
        return None
    # The object-oriented API with the Agg canvas needs no GUI and leaves pyplot's global backend alone.
    fig = Figure(figsize=(6.5 * len(panels), 4.0), dpi=100)
    FigureCanvasAgg(fig)
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for k in panel:
            pts = [(r["step"], r[k]) for r in rows if isinstance(r.get(k), (int, float))]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, label=k, marker="o" if len(pts) < 20 else None, markersize=3)
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy" if any("acc" in k for k in panel) else "loss")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    png_path = Path(png_path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_atomic(png_path, buf.getvalue())
    return png_path
