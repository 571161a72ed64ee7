"""Does Transformer-XL's memory help? Pretrain Transformer-XL-mini with and without segment-level recurrence at
equal compute, then read the dev split as long streams with evaluation memories of several lengths.

Both arms train on the same blocks of one corpus (`configs/pretrain/transformer-xl-mini.yaml`: blocks of 256
tokens in segments of 64), for the same steps and seeds; the only difference is `objective_args.memory`.
`--corpus wiki-en` (default): built-in English Wikipedia, lead sections of ~95 tokens, so what a memory holds
beyond one segment is mostly the previous, unrelated article. `--corpus peoples-daily`: the People's Daily
paragraphs in file order (the articles of January 1998 as they ran), the last tenth as dev, so a memory holds
the same article's earlier paragraphs. Evaluation (`bertzoo.models.transfo_xl.stream_nll`) cuts the dev split,
documents in order with a [SEP] after each, into parallel streams and reads them in segments of the training
length, carrying `mem_len` positions of memory: 0 is the model without memory, longer ones reach further back than
training did (the paper evaluates that way). Prints a table, draws the curves, and ends with one JSON line whose
`ratio` is the no-memory model's perplexity over the memory model's (at the training memory): above 1, memory
helps.

    python scripts/studies/transfo_xl_memory.py --steps 300 --seeds 0 1
    python scripts/studies/transfo_xl_memory.py --corpus peoples-daily --steps 300 --seeds 0 1
    python scripts/studies/transfo_xl_memory.py --quick        # a smoke run of a few steps, about a minute
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from bertzoo.config import load_pretrain_config
from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.loading import load_pretraining
from bertzoo.models.transfo_xl import stream_nll
from bertzoo.precision import cpu_capability

CONFIG = "configs/pretrain/transformer-xl-mini.yaml"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipe_study import overrides_of, pretrain_once, set_tag, shards_for  # noqa: E402

VOCAB = 8192
TITLES = {"wiki-en": "Wikipedia dev", "peoples-daily": "People's Daily, last tenth"}


def corpus_shards(corpus: str, out: Path) -> tuple[Path, Path]:
    """Train and dev shards of `corpus`, with an 8k WordPiece trained on its train part (reused when done)."""
    if corpus == "wiki-en":
        docs = list(read_documents(["builtin:wiki-en:train"]))
        return shards_for(VOCAB, out, docs), shards_for(VOCAB, out, docs, "dev")
    # Lines in file order, cut once: the dev tenth is one contiguous stretch of articles, never seen in training.
    shards, dev = out / f"shards-{VOCAB}", out / f"shards-{VOCAB}-dev"
    if not (dev / "meta.json").is_file():
        lines = list(read_documents(["builtin:peoples-daily"]))
        cut = len(lines) * 9 // 10
        tok = train_wordpiece(lines[:cut], VOCAB)
        source = "builtin:peoples-daily"
        prepare_shards(lines[:cut], tok, shards, progress=False, overwrite=True, source=source + " (first 9/10)")
        prepare_shards(lines[cut:], tok, dev, progress=False, overwrite=True, source=source + " (last 1/10)")
    return shards, dev


def dev_streams(shards: Path, num_streams: int, max_docs: int | None) -> torch.Tensor:
    """(num_streams, n) token ids: [CLS], then every dev document followed by [SEP], cut into equal contiguous
    parts (the remainder dropped), as the paper batches its evaluation text."""
    corpus = ShardedCorpus(shards)
    tok = corpus.tokenizer()
    pieces = [torch.tensor([tok.cls_id])]
    for d in range(corpus.num_docs if max_docs is None else min(max_docs, corpus.num_docs)):
        first, last = corpus.doc_sentences(d)
        pieces += [torch.tensor(corpus.tokens(first, last), dtype=torch.long), torch.tensor([tok.sep_id])]
    stream = torch.cat(pieces)
    n = stream.numel() // num_streams
    return stream[: n * num_streams].view(num_streams, n)


def run_arm(memory: bool, seed: int, args, extra: dict[str, Any], shards: Path, dev: Path, out: Path) -> Path:
    """Pretrain one arm with the --set overrides `extra` (or reuse a finished run); returns its final directory."""
    # The overrides name the run, so a finished run is reused only for the same settings.
    run = out / f"{'memory' if memory else 'no-memory'}{set_tag(args.set)}-{seed}"
    overrides = {
        "data.shards": str(shards),
        "data.eval_shards": str(dev),
        "objective_args.memory": memory,
        "train.seed": seed,
        **extra,
    }
    log = max(1, args.steps // 20)
    summary = pretrain_once(CONFIG, run, args.steps, overrides, evals=4, threads=args.threads, log_every=log)
    if "wall_s" in summary:  # trained now, not reused
        print(f"  {run.name}: {summary['steps']} steps in {summary['wall_s']:.0f} s", flush=True)
    return run / "final"


def evaluate(
    model_dir: Path, streams: torch.Tensor, segment_len: int, mems: list[int], clamp_len: int = 0
) -> dict[int, float]:
    """Dev perplexity of the streams at each evaluation memory; `clamp_len` > 0 reads every longer distance as
    that one (the paper's evaluation setting for memories longer than training's)."""
    model = load_pretraining(model_dir).encoder.eval()
    if clamp_len:
        model.config.clamp_len = clamp_len
    out = {}
    for mem in mems:
        total, count = stream_nll(model, streams, segment_len, mem_len=mem)
        out[mem] = math.exp(total / count)
    return out


def plot(curves: dict[str, list[list[float]]], mems: list[int], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, runs in curves.items():
        mean = [statistics.mean(r[i] for r in runs) for i in range(len(mems))]
        ax.plot(mems, mean, marker="o", label=label)
        for r in runs:
            ax.plot(mems, r, color=ax.lines[-1].get_color(), alpha=0.25, lw=1)
    ax.set_xlabel("evaluation memory (positions per layer)")
    ax.set_ylabel("dev perplexity")
    ax.set_title(f"Transformer-XL-mini on {title}, read as streams")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=sorted(TITLES), default="wiki-en")
    ap.add_argument("--steps", type=int, default=300, help="pretraining steps per arm (blocks of 16 x 256 tokens)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--eval-mems", nargs="+", type=int, default=[0, 32, 64, 128, 256, 512])
    ap.add_argument(
        "--eval-clamp",
        type=int,
        default=0,
        help="evaluation only: longer distances read as this one (-1: the longest each arm trained on; 0: off)",
    )
    ap.add_argument("--streams", type=int, default=8, help="parallel dev streams")
    ap.add_argument("--dev-docs", type=int, default=None, help="only the first N dev documents")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="pretraining config overrides")
    ap.add_argument("--out", default=None, help="default: runs/transfo_xl_memory[-CORPUS]")
    ap.add_argument("--plot", default=None, help="default: docs/img/transfo_xl_memory[-CORPUS].png")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 6 steps, one seed, 100 dev documents")
    args = ap.parse_args()
    suffix = "" if args.corpus == "wiki-en" else f"-{args.corpus}"
    args.out = args.out or f"runs/transfo_xl_memory{suffix}"
    args.plot = args.plot or f"docs/img/transfo_xl_memory{suffix}.png"
    if args.quick:
        args.steps, args.seeds, args.dev_docs = 6, [0], args.dev_docs or 100
        args.out = args.out + "-quick"
        args.plot = str(Path(args.out) / "transfo_xl_memory.png")
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shards, dev = corpus_shards(args.corpus, out)
    extra = overrides_of(args.set)
    cfg = load_pretrain_config(CONFIG, extra)
    segment_len, train_mem = cfg.objective_args["segment_len"], cfg.model["mem_len"]
    streams = dev_streams(dev, args.streams, args.dev_docs)
    print(f"CPU {cpu_capability()}, torch {torch.__version__}; dev streams {tuple(streams.shape)}", flush=True)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[list[float]]] = {"with memory": [], "without memory": []}
    for seed in args.seeds:
        for memory in (True, False):
            # -1: the longest distance this arm's training saw (its segment, and the memory before it if any).
            clamp = segment_len - 1 + (train_mem if memory else 0) if args.eval_clamp < 0 else args.eval_clamp
            final = run_arm(memory, seed, args, extra, shards, dev, out)
            ppl = evaluate(final, streams, segment_len, args.eval_mems, clamp)
            curves["with memory" if memory else "without memory"].append([ppl[m] for m in args.eval_mems])
            rows.append({"seed": seed, "memory": memory, "dev_ppl": ppl})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n| trained | {' | '.join(f'eval memory {m}' for m in args.eval_mems)} |")
    print("| --- |" + " ---: |" * len(args.eval_mems))
    for label, runs in curves.items():
        cells = [
            f"{statistics.mean(r[i] for r in runs):.1f}"
            + (f" ± {statistics.stdev(r[i] for r in runs):.1f}" if len(runs) > 1 else "")
            for i in range(len(args.eval_mems))
        ]
        print(f"| {label} | {' | '.join(cells)} |")
    plot(curves, args.eval_mems, Path(args.plot), TITLES[args.corpus])
    at = args.eval_mems.index(train_mem) if train_mem in args.eval_mems else -1
    with_mem = [r[at] for r in curves["with memory"]]
    without = [r[args.eval_mems.index(0)] if 0 in args.eval_mems else r[0] for r in curves["without memory"]]
    ratios = [b / a for a, b in zip(with_mem, without, strict=True)]
    print(
        json.dumps(
            {
                "ratio": statistics.mean(ratios),
                "ratios": ratios,
                "dev_ppl_memory": with_mem,
                "dev_ppl_no_memory": without,
                "eval_mems": args.eval_mems,
                "curves": curves,
                "corpus": args.corpus,
                "eval_clamp": args.eval_clamp,
                "steps": args.steps,
                "seeds": args.seeds,
                "cpu": cpu_capability(),
                "plot": args.plot,
            }
        )
    )


if __name__ == "__main__":
    main()
