"""Serving a classifier over HTTP on loopback: `bertzoo serve` (dynamic batching) against the server a transformers
user writes: FastAPI with `transformers.pipeline("text-classification")` called per request (a plain `def`
endpoint, so FastAPI runs each call on its thread pool).

The model is all-MiniLM-L6-v2 with a 12-way topic classifier (a few steps of wiki-topics fine-tuning by bertzoo,
then `bertzoo convert --to hf` for the pipeline): the same weights on both sides. Each request carries one Wikipedia
sentence. Clients keep 1, 8 and 32 requests in flight for a fixed time per level; each server runs alone in its
own process while it is measured. Both answer the same 32 texts first: the labels must agree and the largest
probability difference is printed.

Prints requests/s and p50 / p99 latency per side and level, the model FLOPs per request, the MFU against a matmul
peak measured here, and `ratio` = bertzoo requests/s over the pipeline server's at each level (the headline: 8 in
flight). The last line is JSON.

    python benchmarks/serve_throughput.py --quick     # under a minute of measuring on 2 CPU cores
    python benchmarks/serve_throughput.py --seconds 20
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


async def load(url: str, texts: list[str], concurrency: int, seconds: float) -> dict[str, float]:
    """`concurrency` clients, each sending one-text requests back to back for `seconds`."""
    import httpx

    latencies: list[float] = []
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(k: int, http: httpx.AsyncClient) -> None:
        i = k
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            answer = await http.post(url, json={"texts": [texts[i % len(texts)]]})
            answer.raise_for_status()
            latencies.append(time.perf_counter() - started)
            i += concurrency

    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        await http.post(url, json={"texts": texts[:1]})  # a warm connection and model
        began = time.monotonic()
        await asyncio.gather(*(client(k, http) for k in range(concurrency)))
        took = time.monotonic() - began
    ms = np.asarray(latencies) * 1000
    return {
        "requests_per_s": round(len(latencies) / took, 2),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "requests": len(latencies),
    }


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
    ap.add_argument("--threads", type=int, default=2, help="torch threads of each server")
    ap.add_argument(
        "--precision", choices=["auto", "fp32", "bf16"], default="fp32", help="bertzoo's (the pipeline's is fp32)"
    )
    ap.add_argument(
        "--max-wait-ms", type=float, default=0.0, help="bertzoo's group wait (`bertzoo serve --max-wait-ms`)"
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
        sides = {
            "bertzoo": lambda port: [
                sys.executable,
                "-m",
                "bertzoo",
                "serve",
                str(ours_dir),
                "--port",
                str(port),
                "--precision",
                args.precision,
                "--max-wait-ms",
                str(args.max_wait_ms),
            ],
            "pipeline": lambda port: [sys.executable, __file__, "--reference-server", str(hf_dir), str(port)],
        }
        results: dict[str, dict[str, dict[str, float]]] = {}
        answers: dict[str, list] = {}
        for name, command in sides.items():
            port = free_port()
            process = start(command(port), port, args.threads)
            try:
                url = f"http://127.0.0.1:{port}/predict"
                first = httpx.post(url, json={"texts": texts[:32]}, timeout=120)
                if first.status_code != 200:
                    raise SystemExit(f"{name} answered {first.status_code}: {first.text[:500]}")
                answers[name] = first.json()["predictions"]
                results[name] = {str(c): asyncio.run(load(url, texts, c, seconds)) for c in LEVELS}
            finally:
                stop(process)

    # The same outputs: the pipeline gives every label's score (top_k=None); bertzoo its label and probabilities.
    labels_ours = [p["label"] for p in answers["bertzoo"]]
    labels_ref = [max(p, key=lambda x: x["score"])["label"] for p in answers["pipeline"]]
    diff = max(
        abs(ours["probabilities"][x["label"]] - x["score"])
        for ours, ref in zip(answers["bertzoo"], answers["pipeline"], strict=True)
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
    peak = gemm_rate(2048, 2048, 2048, torch.bfloat16 if precision == "bf16" else torch.float32, torch.device("cpu"))
    print(
        f"MiniLM-L6 topic classifier over HTTP, one Wikipedia sentence per request (mean {lengths.mean():.0f} tokens, "
        f"{per_request / 1e9:.3f} GFLOP per request), {seconds:g} s per level, {args.threads} threads per server, "
        f"bertzoo {precision}, pipeline fp32, CPU {cpu_capability()}"
    )
    print(f"same labels on 32 texts: {labels_ours == labels_ref}; largest probability difference {diff:.1e}")
    ratios = {}
    for level in map(str, LEVELS):
        ours, ref = results["bertzoo"][level], results["pipeline"][level]
        ratios[level] = round(ours["requests_per_s"] / ref["requests_per_s"], 2)
        for name, r in (("bertzoo", ours), ("pipeline", ref)):
            mfu = r["requests_per_s"] * per_request / peak
            print(
                f"  {level:>2} in flight  {name:>8}: {r['requests_per_s']:8.1f} requests/s, p50 {r['p50_ms']:7.1f} ms, "
                f"p99 {r['p99_ms']:7.1f} ms, MFU {mfu:.2%}"
            )
        print(f"  {level:>2} in flight  ratio {ratios[level]:.2f}x")
    print(
        json.dumps(
            {
                "benchmark": "serve_throughput",
                "cpu_capability": cpu_capability(),
                "precision": precision,
                "threads": args.threads,
                "gflop_per_request": round(per_request / 1e9, 4),
                "peak_gflops": round(peak / 1e9, 1),
                "results": results,
                "same_labels": labels_ours == labels_ref,
                "max_probability_diff": diff,
                "ratio": ratios["8"],
                "ratios": ratios,
            }
        )
    )


if __name__ == "__main__":
    main()
