"""Fine-tuned accuracy against pretraining budget: where each family starts to pay off, and where ELECTRA
catches up with BERT: where the ELECTRA paper's ordering does not hold at a small budget, the curve over the
budget shows where it starts to.

Each budget is one `benchmarks/objectives_small.py` run (the same corpus, tokenizers, recipes and
fine-tuning as the equal-budget table), kept in `--out/s<sequences>`; the tokenizer shards and the
random-init row are made once and shared by every budget. Finished runs are reused, so the curve grows a
point at a time. Writes `--out/curve.json` and a picture (`--plot`); the last line is JSON with, per
family, dev accuracy mean and sd at each budget and `ratio`: ELECTRA's mean over BERT's at the largest
budget where both ran.

    python scripts/studies/budget_curve.py --families bert electra --budgets 8000 16000 32000 48000 --seeds 2
    python scripts/studies/budget_curve.py --budgets 16000 32000 --no-run     # table and picture from what exists
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bertzoo.precision import cpu_capability

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from objectives_small import FAMILIES, RANDOM_INIT, dev_metric  # noqa: E402

OBJECTIVES_SMALL = Path(__file__).resolve().parents[2] / "benchmarks" / "objectives_small.py"


def budget_dir(out: Path, sequences: int) -> Path:
    return out / f"s{sequences}"


def share_common(out: Path, budgets: list[int]) -> None:
    """Link the first budget's tokenizer shards and random-init runs (every family's random arm, which no budget
    changes) into every other budget's directory."""
    first = budget_dir(out, budgets[0])
    for sequences in budgets[1:]:
        target = budget_dir(out, sequences)
        target.mkdir(parents=True, exist_ok=True)
        for common in first.iterdir():
            if common.name.startswith(("shards-", RANDOM_INIT)):
                link = target / common.name
                if not link.exists():
                    link.symlink_to(os.path.relpath(common.resolve(), target))


def run_budget(out: Path, sequences: int, families: list[str], args) -> None:
    """One objectives_small run at `sequences` (its random-init row too, so the first budget makes it)."""
    cmd = [sys.executable, str(OBJECTIVES_SMALL), "--families", *families, "--sequences", str(sequences)]
    cmd += ["--seeds", str(args.seeds), "--out", str(budget_dir(out, sequences))]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def dev_accuracy(run: Path) -> float | None:
    report = run / "finetune" / "report.json"
    if not report.is_file():
        return None
    return dev_metric(json.loads(report.read_text()))


def collect(out: Path, budgets: list[int], families: list[str], seeds: int) -> dict[str, Any]:
    """{family: {sequences: [accuracy per finished seed]}} plus the random-init accuracies."""
    curve: dict[str, dict[int, list[float]]] = {f: {} for f in families}
    for sequences in budgets:
        for family in families:
            accs = [dev_accuracy(budget_dir(out, sequences) / family / f"seed{s}") for s in range(seeds)]
            curve[family][sequences] = [a for a in accs if a is not None]
    base = [dev_accuracy(budget_dir(out, budgets[0]) / RANDOM_INIT / f"seed{s}") for s in range(seeds)]
    return {"curve": curve, "random_init": [a for a in base if a is not None]}


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


Stats = dict[str, dict[int, tuple[float, float]]]  # family -> sequences -> (mean, sd)


def plot(stats: Stats, random_init: tuple[float, float] | None, path: Path, title: str) -> Path | None:
    """Mean ± sd per family against budget, with random init's mean and band; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'bertzoo[plot]'): no picture", flush=True)
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for family, points in stats.items():
        if not points:
            continue
        xs = sorted(points)
        ys, sds = zip(*(points[n] for n in xs), strict=True)
        ax.errorbar(xs, ys, yerr=sds, marker="o", capsize=3, label=family)
    if random_init:
        m, s = random_init
        ax.axhline(m, color="grey", linestyle="--", label=f"random init ({m:.3f})")
        ax.axhspan(m - s, m + s, color="grey", alpha=0.15)
    ax.set_xlabel("pretraining sequences (of <= 128 tokens)")
    ax.set_ylabel("wiki-topics dev accuracy")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["bert", "electra"], choices=list(FAMILIES))
    ap.add_argument("--budgets", nargs="+", type=int, default=[8000, 16000, 32000, 48000], help="sequences")
    ap.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 at every budget")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per run")
    ap.add_argument("--out", default="runs/budget_curve")
    ap.add_argument("--plot", default=None, help="PNG path (default: --out/budget_curve.png)")
    ap.add_argument("--no-run", action="store_true", help="only collect what exists: table, picture, JSON")
    args = ap.parse_args()
    budgets = sorted(set(args.budgets))
    if any(n < 1 for n in budgets) or args.seeds < 1:
        ap.error("--budgets and --seeds must be positive")
    out = Path(args.out)
    if not args.no_run:
        for i, sequences in enumerate(budgets):
            run_budget(out, sequences, args.families, args)
            if i == 0:
                share_common(out, budgets)  # the next budgets reuse its shards and random-init row
    data = collect(out, budgets, args.families, args.seeds)
    # (mean, sd) of every finished point, once: the table, the JSON and the ratio read these.
    stats = {f: {n: mean_sd(a) for n, a in pts.items() if a} for f, pts in data["curve"].items()}
    print(f"wiki-topics dev accuracy against pretraining budget ({cpu_capability()}, {time.strftime('%Y-%m-%d')})")
    print("| sequences | " + " | ".join(args.families) + " |")
    print("| ---: |" + " ---: |" * len(args.families))
    for sequences in budgets:
        cells = []
        for family in args.families:
            point = stats[family].get(sequences)
            n = len(data["curve"][family][sequences])
            cells.append(f"{point[0]:.3f} ± {point[1]:.3f} (n={n})" if point else "—")
        print(f"| {sequences:,} | " + " | ".join(cells) + " |")
    random_init = mean_sd(data["random_init"]) if data["random_init"] else None
    if random_init:
        print("random init: {:.3f} ± {:.3f}".format(*random_init))
    (out / "curve.json").write_text(json.dumps(data, indent=2) + "\n")
    path = Path(args.plot) if args.plot else out / "budget_curve.png"
    picture = plot(stats, random_init, path, f"{cpu_capability()} CPU")
    if picture:
        print(f"picture: {picture}")
    summary = {
        f: {str(n): {"mean": round(m, 4), "sd": round(sd, 4)} for n, (m, sd) in pts.items()} for f, pts in stats.items()
    }
    both = [n for n in budgets if n in stats.get("bert", {}) and n in stats.get("electra", {})]
    ratio = round(stats["electra"][both[-1]][0] / stats["bert"][both[-1]][0], 4) if both else None
    print(json.dumps({"families": summary, "random_init": data["random_init"], "ratio": ratio}))


if __name__ == "__main__":
    main()
