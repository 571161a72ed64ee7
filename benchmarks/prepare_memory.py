"""Peak memory of `bertzoo prepare` as the corpus grows: it should stay flat.

Writes plain-text corpora of increasing size (English Wikipedia lead sections repeated with their
sentences shuffled, so no two documents are equal), runs `bertzoo prepare` on each in a fresh
process, and reports the corpus size next to that process's peak resident memory. Streaming
preparation holds one batch of documents and the offset arrays, never the corpus.

    python benchmarks/prepare_memory.py --quick      # 16 MB and 64 MB
    python benchmarks/prepare_memory.py              # 64 MB, 256 MB and 1 GB
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bertzoo.data.text.corpus import read_documents, split_sentences
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.precision import cpu_capability

# Runs in the child: prepare, then print the peak RSS of this process (ru_maxrss is in KiB on Linux).
CHILD = """
import json, resource, sys
from bertzoo.cli import main
code = main(["prepare", "--input", sys.argv[1], "--tokenizer", sys.argv[2], "--out", sys.argv[3]])
print(json.dumps({"code": code, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def write_corpus(path: Path, size_bytes: int, docs: list[list[str]], seed: int = 0) -> int:
    rng = random.Random(seed)
    written = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size_bytes:
            sentences = list(rng.choice(docs))
            rng.shuffle(sentences)
            block = " ".join(sentences) + "\n\n"
            fh.write(block)
            written += len(block.encode("utf-8"))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--quick", action="store_true", help="16 MB and 64 MB: well under a minute")
    ap.add_argument("--workdir", default=None, help="where to write corpora (default: a temp dir, removed)")
    args = ap.parse_args()
    if args.quick:
        args.sizes_mb = [16, 64]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bertzoo-mem-"))
    work.mkdir(parents=True, exist_ok=True)
    docs = [split_sentences(d) for d in read_documents(["builtin:wiki-en:all"])]
    tok_dir = work / "tok"
    train_wordpiece((" ".join(d) for d in docs), 8000).save(tok_dir)
    # Tokenisation and shard writing only: no floating-point model compute, so no precision applies.
    print(f"precision: none (no model compute), CPU {cpu_capability()}", flush=True)
    rows = []
    try:
        for mb in args.sizes_mb:
            corpus = work / f"corpus-{mb}mb.txt"
            size = write_corpus(corpus, mb << 20, docs, seed=mb)
            out = work / f"shards-{mb}"
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(corpus), str(tok_dir), str(out)],
                capture_output=True,
                text=True,
                check=True,
            )
            seconds = time.perf_counter() - t
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            meta = json.loads((out / "meta.json").read_text())
            rss_mb = result["peak_rss_kib"] / 1024
            rows.append(
                {
                    "corpus_mb": round(size / 2**20, 1),
                    "tokens": meta["num_tokens"],
                    "peak_rss_mb": round(rss_mb, 1),
                    "seconds": round(seconds, 1),
                }
            )
            print(
                f"corpus {size / 2**20:8.1f} MB  {meta['num_tokens']:>12,} tokens  peak RSS {rss_mb:7.1f} MB  "
                f"{seconds:6.1f} s",
                flush=True,
            )
            corpus.unlink()
            shutil.rmtree(out)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    growth = rows[-1]["peak_rss_mb"] / rows[0]["peak_rss_mb"]
    print(
        json.dumps(
            {
                "memory_growth": round(growth, 3),  # peak memory growth while the corpus grows corpus_growth-fold
                "runs": rows,
                "rss_growth": round(growth, 3),
                "corpus_growth": round(rows[-1]["corpus_mb"] / rows[0]["corpus_mb"], 1),
                "precision": None,
                "cpu_capability": cpu_capability(),
            }
        )
    )


if __name__ == "__main__":
    main()
