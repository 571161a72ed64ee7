"""Multiple-negatives ranking under torchrun (2 processes, gloo): with `embedding.gather` (the default) each query
picks its positive among every process's documents, so 2 processes of half the batch train exactly as 1 process
with the whole batch (the same losses, the same weights), hard negatives and the symmetric direction included;
without it each process sees only its own batch, and the run differs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from bertzoo.config import to_plain
from bertzoo.objectives.contrastive import gather_rows, multiple_negatives_ranking_loss

from helpers.embedding import embedding_config, write_retrieval
from helpers.loop import free_port


def triplets(path: Path, seed: int) -> None:
    """The pairs at `path` with a hard negative each: another row's document."""
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    r = random.Random(seed)
    for row in rows:
        row["negative"] = r.choice(rows)["positive"]
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))


def torchrun(config: Path, nproc: int, out: Path, batch: int, *extra: str) -> Path:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    args = ["finetune", str(config), "--train.output_dir", str(out), "--train.batch_size", str(batch), *extra]
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                f"--master_port={free_port()}"] if nproc > 1 else [sys.executable]  # fmt: skip
    proc = subprocess.run([*launcher, "-m", "bertzoo", *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def losses(out: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model" / "model.safetensors")


def test_gather_rows_is_the_identity_in_one_process():
    x = torch.randn(3, 4)
    rows, start = gather_rows(x)
    assert rows is x and start == 0
    q, p = torch.randn(4, 8), torch.randn(4, 8)
    assert multiple_negatives_ranking_loss(q, p, gather=True)[0] == multiple_negatives_ranking_loss(q, p)[0]


def test_two_processes_with_gathered_negatives_train_as_one_with_the_whole_batch(tmp_path):
    paths = write_retrieval(tmp_path / "data")
    triplets(Path(paths["train"]), seed=3)
    train = {"epochs": None, "max_steps": 4, "bucket_by_length": False, "log_every": 1, "precision": "fp32"}
    cfg = embedding_config(paths, tmp_path / "unused", **train, threads=1, lr=1e-2)
    cfg.model_config.update(dropout=0.0, attention_dropout=0.0)  # dropout draws differ per process
    cfg.embedding.symmetric = True
    config = tmp_path / "embedding.yaml"
    config.write_text(yaml.safe_dump(to_plain(cfg)), encoding="utf-8")

    one = torchrun(config, 1, tmp_path / "one", 16)
    two = torchrun(config, 2, tmp_path / "two", 8)
    alone = torchrun(config, 2, tmp_path / "alone", 8, "--embedding.gather", "false")

    a, b, c = losses(one), losses(two), losses(alone)
    assert len(a) == len(b) == 4 and b == pytest.approx(a, rel=1e-4)
    wa, wb, wc = weights(one), weights(two), weights(alone)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-4
    # Each process alone: fewer negatives, an easier task (a lower loss) and other weights.
    assert c[0] < a[0] - 0.1
    assert max(float((wa[k] - wc[k]).abs().max()) for k in wa) > 1e-3
