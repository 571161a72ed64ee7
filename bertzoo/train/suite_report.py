"""The report of a benchmark suite (`bertzoo suite`): `suite.json` (the result as `bertzoo.train.suite.run_suite`
returns it), `suite.md` and a self-contained `suite.html` with the same tables and a chart (an inline PNG drawn
with matplotlib). Several models are also shown side by side, with each one's difference from the first."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from bertzoo.io import write_atomic, write_json

__all__ = ["chart_png", "markdown", "page", "tables", "write_reports"]

Table = tuple[str, list[str], list[list[str]]]  # (heading, header, rows)


def pct(value: float | None, signed: bool = False) -> str:
    """A score as percentage points with one decimal (the leaderboards' way); "—" when missing."""
    if value is None:
        return "—"
    shown = round(100 * value, 1) + 0.0  # + 0.0: no "-0.0"
    return f"{shown:+.1f}" if signed else f"{shown:.1f}"


def _model_table(model: dict[str, Any], seeds: int) -> Table:
    header = ["task", "metrics (median)", "score", "min–max", "sd", "learning rate per seed", "minutes"]
    rows = []
    for name, t in model["tasks"].items():
        metrics = ", ".join(f"{m} {pct(v)}" for m, v in t["metric_medians"].items())
        lrs = ", ".join(f"{s['lr']:g}" for s in t["seeds"])
        s = t["score"]
        spread = f"{pct(s['min'])}–{pct(s['max'])}" if seeds > 1 else "—"
        sd = pct(s["sd"]) if seeds > 1 else "—"
        rows.append([name, metrics, pct(s["median"]), spread, sd, lrs, f"{t['seconds'] / 60:.1f}"])
    agg = model.get("aggregate")
    if agg:
        spread = f"{pct(agg['min'])}–{pct(agg['max'])}" if seeds > 1 else "—"
        rows.append([f"aggregate ({agg['tasks']} tasks)", "mean of task scores", pct(agg["score"]), spread, "", "", ""])
    return model["model"], header, rows


def _comparison_table(comparison: dict[str, Any]) -> Table:
    models = list(comparison["rows"][0]["scores"])
    others = models[1:]
    header = ["task", *models, *(f"Δ {m}" for m in others)]
    rows = []
    for row in comparison["rows"]:
        cells = [row["task"], *(pct(row["scores"][m]) for m in models)]
        cells += [pct(row["delta"][m], signed=True) for m in others]
        rows.append(cells)
    return f"side by side (Δ: difference from {comparison['baseline']})", header, rows


def tables(result: dict[str, Any]) -> list[Table]:
    """The report's tables: the comparison when there are several models, then one per model."""
    seeds = len(result["seeds"])
    out = []
    if result.get("comparison"):
        out.append(_comparison_table(result["comparison"]))
    out += [_model_table(m, seeds) for m in result["models"] if m["tasks"]]
    return out


def _intro(result: dict[str, Any]) -> list[str]:
    seeds = len(result["seeds"])
    options = {k: v for k, v in result["options"].items() if v is not None and k not in ("seeds", "device")}
    lines = [
        f"Dev scores ×100 (test labels are hidden), the median over {seeds} seed(s) "
        f"({', '.join(map(str, result['seeds']))}); for each seed the learning rate of the recipe's grid with the "
        "best dev score is kept. A task's score is the mean of its metrics, the aggregate the mean of the tasks' "
        "scores.",
        f"Tasks: {', '.join(result['tasks'])}. CPU capability: {result['cpu_capability']}.",
    ]
    if options:
        shown = {k: ", ".join(f"{x:g}" for x in v) if isinstance(v, (list, tuple)) else v for k, v in options.items()}
        lines.append("Settings: " + "; ".join(f"{k} {v}" for k, v in shown.items()) + ".")
    return lines


def markdown(result: dict[str, Any]) -> str:
    """The report as Markdown."""
    out = [f"# {result['title']}", "", *(line + "\n" for line in _intro(result))]
    for heading, header, rows in tables(result):
        out += [f"## {heading}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
        out.append("")
    return "\n".join(out)


def chart_png(result: dict[str, Any]) -> bytes | None:
    """A grouped bar chart of each task's median score and the aggregate per model (whiskers: min and max over
    seeds), as PNG bytes; None without matplotlib (the report then says how to get the chart)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    models = [m for m in result["models"] if m["tasks"]]
    names = [t for t in result["tasks"] if any(t in m["tasks"] for m in models)]
    if not names:
        return None
    names.append("aggregate")
    width = 0.8 / len(models)
    fig = Figure(figsize=(max(5.0, 1.1 * len(names) * max(1, len(models)) ** 0.5 + 2), 3.8))
    FigureCanvasAgg(fig)  # attaches itself to fig: no global pyplot state
    ax = fig.add_subplot(1, 1, 1)
    for i, m in enumerate(models):
        xs, ys, low, high = [], [], [], []
        for j, name in enumerate(names):
            if name == "aggregate":
                agg = m["aggregate"]
                mid, lo, hi = agg["score"], agg["min"], agg["max"]
            elif name in m["tasks"]:
                s = m["tasks"][name]["score"]
                mid, lo, hi = s["median"], s["min"], s["max"]
            else:
                continue
            xs.append(j + (i - (len(models) - 1) / 2) * width)
            ys.append(100 * mid)
            # The aggregate of the median task scores may lie outside the range of the per-seed aggregates.
            low.append(100 * max(0.0, mid - lo))
            high.append(100 * max(0.0, hi - mid))
        ax.bar(xs, ys, width, yerr=[low, high], capsize=2, label=m["model"])
    tilted = len(names) > 5
    ax.set_xticks(range(len(names)), labels=names, rotation=30 if tilted else 0, ha="right" if tilted else "center")
    ax.set_ylabel("dev score ×100 (median over seeds)")
    ax.set_title(result["title"])
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:72em;color:#222}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}"
    "th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}img{max-width:100%}"
)


def page(result: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (styles and chart inline)."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(result['title'])} suite</title><style>{_STYLE}</style></head><body>",
        f"<h1>{e(result['title'])}</h1>",
        *(f"<p>{e(line)}</p>" for line in _intro(result)),
    ]
    png = chart_png(result)
    if png is not None:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<p><img alt="dev score per task and model" src="data:image/png;base64,{data}"></p>')
    else:
        parts.append("<p>(The chart needs matplotlib: pip install 'bertzoo[plot]'.)</p>")
    for heading, header, rows in tables(result):
        parts.append(f"<h2>{e(heading)}</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_reports(result: dict[str, Any], out: str | Path) -> dict[str, Path]:
    """Write suite.json, suite.md and suite.html into `out` (each atomically); their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "json": write_json(out / "suite.json", result),
        "md": write_atomic(out / "suite.md", markdown(result)),
        "html": write_atomic(out / "suite.html", page(result)),
    }
