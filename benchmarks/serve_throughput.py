"""Serving a classifier over HTTP on loopback: `bertzoo serve` (dynamic batching) against the server a transformers
user writes: FastAPI with `transformers.pipeline("text-classification")` called per request (a plain `def`
endpoint, so FastAPI runs each call on its thread pool).

The model is all-MiniLM-L6-v2 with a 12-way topic classifier (a few steps of wiki-topics fine-tuning by bertzoo,
then `bertzoo convert --to hf` for the pipeline): the same weights on both sides. Each request carries one Wikipedia
sentence. Clients keep 1, 8 and 32 requests in flight for a fixed time per level, split into turns that alternate
between the two servers (each in its own process; the one not measured idles). Both answer the same 32 texts
first: the labels must agree and the largest probability difference is printed.

Prints requests/s and p50 / p99 latency per side and level, the model FLOPs per request, the MFU against a matmul
peak measured here (bf16's for bertzoo in bf16), and `ratio` = bertzoo requests/s over the pipeline server's at each
level (the headline: 8 in flight), with the ratio of each turn. The last line is JSON.

    python benchmarks/serve_throughput.py --quick     # under a minute of measuring on 2 CPU cores
    python benchmarks/serve_throughput.py --seconds 20
    python benchmarks/serve_throughput.py --precision fp32
    python benchmarks/serve_throughput.py --reference no-wait    # bertzoo with its group wait against without
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from flops import gemm_rate
from inference_throughput import useful_flops, wiki_sentences
from pydantic import BaseModel

from bertzoo.precision import cpu_capability, resolve_precision

LEVELS = (1, 8, 32)


class Texts(BaseModel):
    """The reference server's request body (at module level, where FastAPI resolves the annotation)."""

    texts: list[str]


def reference_app(model_dir: str):
    """What a transformers user writes: a pipeline, called once per request."""
    from fastapi import FastAPI
    from transformers import pipeline

    classify = pipeline("text-classification", model=model_dir, device="cpu", top_k=None)
    app = FastAPI()

    @app.post("/predict")
    def predict(body: Texts) -> dict:
        return {"predictions": classify(body.texts, truncation=True, max_length=128)}

    @app.get("/ready")
    def ready() -> dict:
        return {"status": "ready"}

    return app


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: list[str], port: int, threads: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import httpx

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a server did not start: {process.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("a server did not become ready in 3 minutes")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


async def load(url: str, texts: list[str], concurrency: int, seconds: float) -> tuple[list[float], float]:
    """`concurrency` clients, each sending one-text requests back to back for `seconds`: (latencies, time taken).
    The load generator is aiohttp: it shares the two cores with the server, and spends about 0.3 ms of CPU per
    request against httpx's 1 ms (measured here at 8 in flight), so more of the machine measures the server."""
    import aiohttp

    latencies: list[float] = []
    stop_at = time.monotonic() + seconds

    async def client(k: int, http: aiohttp.ClientSession) -> None:
        i = k
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            async with http.post(url, json={"texts": [texts[i % len(texts)]]}) as answer:
                answer.raise_for_status()
                await answer.read()
            latencies.append(time.perf_counter() - started)
            i += concurrency

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        async with http.post(url, json={"texts": texts[:1]}) as first:  # a warm connection and model
            await first.read()
        began = time.monotonic()
        await asyncio.gather(*(client(k, http) for k in range(concurrency)))
        return latencies, time.monotonic() - began


def measure(urls: dict[str, str], texts: list[str], level: int, seconds: float, rounds: int) -> dict[str, dict]:
    """Each side for `seconds` in all at `level` in flight, in `rounds` alternating turns (A B, B A, ...): a shared
    machine's speed drifts by 10-15% over minutes, and alternating exposes both sides to the same drift. Each
    side's requests/s is over all its turns; `round_ratios` are the first side's over the second's per round."""
    names = list(urls)
    latencies: dict[str, list[float]] = {n: [] for n in names}
    took = dict.fromkeys(names, 0.0)
    round_ratios = []
    for r in range(rounds):
        rates = {}
        for name in names if r % 2 == 0 else names[::-1]:
            lat, t = asyncio.run(load(urls[name], texts, level, seconds / rounds))
            latencies[name] += lat
            took[name] += t
            rates[name] = len(lat) / t
        round_ratios.append(round(rates[names[0]] / rates[names[1]], 2))
    out: dict[str, dict] = {}
    for name in names:
        ms = np.asarray(latencies[name]) * 1000
        out[name] = {
            "requests_per_s": round(len(ms) / took[name], 2),
            "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p99_ms": round(float(np.percentile(ms, 99)), 1),
            "requests": len(ms),
        }
    out["round_ratios"] = round_ratios
    return out


def classifier(out: Path) -> tuple[Path, Path]:
    """A MiniLM topic classifier (bertzoo directory) and its Hugging Face export."""
    from bertzoo.config import load_finetune_config
    from bertzoo.hub import convert_directory
    from bertzoo.train.finetune import finetune

    run = out / "run"
    finetune(
        load_finetune_config(
            None,
            {
                "task": "classification",
                "model": "builtin:all-minilm-l6-v2",
                "data.dataset": "builtin:wiki-topics",
                "data.max_train_examples": 64,
                "data.max_seq_len": 64,
                "train.output_dir": str(run),
                "train.max_steps": 4,
                "train.batch_size": 16,
                "train.lr": 1e-4,
                "train.save_every": 0,
                "train.log_every": 100,
            },
        )
    )
    convert_directory(run / "model", out / "hf", "bertzoo", "hf")
    return run / "model", out / "hf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5 seconds per side and level")
    ap.add_argument("--seconds", type=float, default=15.0, help="measuring time per side and level")
    ap.add_argument(
        "--rounds", type=int, default=3, help="alternating turns per level (the time is split between them)"
    )
    ap.add_argument("--threads", type=int, default=2, help="torch threads of each server")
    ap.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help="bertzoo's, as `bertzoo serve` defaults to (auto: bf16 where the CPU runs it natively); the pipeline's "
        "is fp32, its own default. fp32 here gives the same probabilities to 1e-7",
    )
    ap.add_argument(
        "--max-wait-ms", type=float, default=2.0, help="bertzoo's group wait (`bertzoo serve --max-wait-ms`)"
    )
    ap.add_argument(
        "--reference",
        choices=["pipeline", "no-wait"],
        default="pipeline",
        help="the other side: the pipeline server, or bertzoo itself with --max-wait-ms 0 (what the group wait buys)",
    )
    ap.add_argument("--workdir", default=None, help="keep the classifier here and reuse it (default: a temporary one)")
    ap.add_argument("--reference-server", nargs=2, metavar=("MODEL_DIR", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reference_server:  # the child process of the reference side
        import uvicorn

        model_dir, port = args.reference_server
        uvicorn.run(reference_app(model_dir), host="127.0.0.1", port=int(port), log_level="warning")
        return
    seconds = 5.0 if args.quick else args.seconds
    texts = wiki_sentences(512)
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        done = (work / "hf" / "config.json").is_file()
        ours_dir, hf_dir = (work / "run" / "model", work / "hf") if done else classifier(work)

        def ours(wait_ms: float):
            return lambda port: [sys.executable, "-m", "bertzoo", "serve", str(ours_dir), "--port", str(port),
                                 "--precision", args.precision, "--max-wait-ms", str(wait_ms)]  # fmt: skip

        sides = {
            "bertzoo": ours(args.max_wait_ms),
            # The reference side keeps its name below; with --reference no-wait it is bertzoo without the group wait.
            "pipeline": ours(0.0)
            if args.reference == "no-wait"
            else (lambda port: [sys.executable, __file__, "--reference-server", str(hf_dir), str(port)]),
        }
        answers: dict[str, list] = {}
        processes: list[subprocess.Popen] = []
        urls = {}
        try:  # both up; one idles (no CPU) while the other is measured
            for name, command in sides.items():
                port = free_port()
                processes.append(start(command(port), port, args.threads))
                urls[name] = f"http://127.0.0.1:{port}/predict"
                first = httpx.post(urls[name], json={"texts": texts[:32]}, timeout=120)
                if first.status_code != 200:
                    raise SystemExit(f"{name} answered {first.status_code}: {first.text[:500]}")
                answers[name] = first.json()["predictions"]
            levels = {str(c): measure(urls, texts, c, seconds, args.rounds) for c in LEVELS}
        finally:
            for process in processes:
                stop(process)

    # The same outputs: the pipeline gives every label's score (top_k=None); bertzoo its label and probabilities.
    labels_ours = [p["label"] for p in answers["bertzoo"]]
    if args.reference == "no-wait":
        scored = [[{"label": k, "score": v} for k, v in p["probabilities"].items()] for p in answers["pipeline"]]
    else:
        scored = answers["pipeline"]
    labels_ref = [max(p, key=lambda x: x["score"])["label"] for p in scored]
    diff = max(
        abs(ours["probabilities"][x["label"]] - x["score"])
        for ours, ref in zip(answers["bertzoo"], scored, strict=True)
        for x in ref
    )
    from inference_throughput import minilm_dir

    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.loading import read_config

    _, config, _ = read_config(minilm_dir())
    lengths = np.asarray([min(128, len(ids) + 2) for ids in Tokenizer.load(minilm_dir()).encode_batch(texts)])
    per_request = useful_flops(config, lengths) / len(lengths)
    precision = resolve_precision(args.precision, torch.device("cpu"))
    torch.set_num_threads(args.threads)
    peak_fp32 = gemm_rate(2048, 2048, 2048, torch.float32, torch.device("cpu"))  # the pipeline's, and fp32 bertzoo's
    peak_ours = gemm_rate(2048, 2048, 2048, torch.bfloat16, torch.device("cpu")) if precision == "bf16" else peak_fp32
    reference = "no wait" if args.reference == "no-wait" else "pipeline"
    peak_ref = peak_ours if args.reference == "no-wait" else peak_fp32
    print(
        f"MiniLM-L6 topic classifier over HTTP, one Wikipedia sentence per request (mean {lengths.mean():.0f} tokens, "
        f"{per_request / 1e9:.3f} GFLOP per request), {seconds:g} s per level, {args.threads} threads per server, "
        f"bertzoo {precision}, {reference} {precision if args.reference == 'no-wait' else 'fp32'}, "
        f"CPU {cpu_capability()}"
    )
    print(f"same labels on 32 texts: {labels_ours == labels_ref}; largest probability difference {diff:.1e}")
    ratios = {}
    for level in map(str, LEVELS):
        measured = levels[level]
        ratios[level] = round(measured["bertzoo"]["requests_per_s"] / measured["pipeline"]["requests_per_s"], 2)
        for name, label, peak in (("bertzoo", "bertzoo", peak_ours), ("pipeline", reference, peak_ref)):
            r = measured[name]
            mfu = r["requests_per_s"] * per_request / peak
            print(
                f"  {level:>2} in flight  {label:>8}: {r['requests_per_s']:8.1f} requests/s, "
                f"p50 {r['p50_ms']:7.1f} ms, p99 {r['p99_ms']:7.1f} ms, MFU {mfu:.2%}"
            )
        turns = ", ".join(f"{x:.2f}" for x in measured["round_ratios"])
        print(f"  {level:>2} in flight  ratio {ratios[level]:.2f}x (by round: {turns})")
    print(
        json.dumps(
            {
                "benchmark": "serve_throughput",
                "cpu_capability": cpu_capability(),
                "precision": precision,
                "threads": args.threads,
                "gflop_per_request": round(per_request / 1e9, 4),
                "peak_gflops": round(peak_ours / 1e9, 1),
                "peak_gflops_fp32": round(peak_fp32 / 1e9, 1),
                "reference": args.reference,
                "rounds": args.rounds,
                "max_wait_ms": args.max_wait_ms,
                "results": levels,
                "same_labels": labels_ours == labels_ref,
                "max_probability_diff": diff,
                "ratio": ratios["8"],
                "ratios": ratios,
            }
        )
    )


if __name__ == "__main__":
    main()
