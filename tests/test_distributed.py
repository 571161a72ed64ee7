"""Distributed data parallel on CPU (gloo) through the real launcher: torchrun -m bertzoo pretrain.

2 processes x batch b must follow the same loss curve as 1 process x batch 2b (dropout off): every
global batch holds the same examples with the same masks, whatever the world size. They agree to
float tolerance, not bitwise: DDP averages each rank's mean loss, while one process takes the mean
over all masked tokens, and ranks rarely hold exactly the same number of masked tokens.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="gloo multi-process test runs on Linux")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(shards, out, *, nproc: int, batch: int, extra=()):
    args = [
        "configs/pretrain/bert-tiny-smoke.yaml",
        "--data.shards", str(shards),
        "--data.max_seq_len", "48",
        "--model.dropout", "0",
        "--model.attention_dropout", "0",
        "--train.max_steps", "8",
        "--train.warmup_steps", "2",
        "--train.log_every", "1",
        "--train.save_every", "4",
        "--train.threads", "1",
        "--train.batch_size", str(batch),
        "--train.output_dir", str(out),
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    if nproc == 1:
        cmd = [sys.executable, "-m", "bertzoo", "pretrain", *args]
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
        cmd = [*launcher, f"--master_port={free_port()}", "-m", "bertzoo", "pretrain", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def losses(out) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


def assert_close_to_movement(run_a, run_b) -> None:
    """Final weights of two runs differ by much less than training moved them from the step-4 state.

    Adam normalises each update, so rare-token rows with tiny gradients move by ~lr per step and
    float noise there is not small in absolute terms; relative to the distance travelled it is.
    """
    start = load_file(run_a / "checkpoints" / "step-00000004" / "model.safetensors")
    a = load_file(run_a / "final" / "model.safetensors")
    b = load_file(run_b / "final" / "model.safetensors")
    moved = sum(float((a[k] - start[k]).norm() ** 2) for k in a) ** 0.5
    gap = sum(float((a[k] - b[k]).norm() ** 2) for k in a) ** 0.5
    assert moved > 0
    assert gap < 0.1 * moved, (gap, moved)


@pytest.fixture(scope="module")
def runs(synthetic_shards, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    run(synthetic_shards, root / "one", nproc=1, batch=8)
    run(synthetic_shards, root / "two", nproc=2, batch=4)
    return root


def test_two_processes_match_one_with_double_batch(runs):
    one, two = losses(runs / "one"), losses(runs / "two")
    assert len(one) == len(two) == 8
    assert one[0] == pytest.approx(two[0], rel=1e-6)  # same weights, same examples, same masks
    assert two == pytest.approx(one, rel=1e-3)
    assert_close_to_movement(runs / "one", runs / "two")
    # Only rank 0 wrote: one metrics file, checkpoints at steps 4 and 8, no stray temporary dirs.
    ckpts = sorted(p.name for p in (runs / "two" / "checkpoints").iterdir())
    assert ckpts == ["step-00000004", "step-00000008"]


def test_resume_two_processes_into_one(runs, synthetic_shards, tmp_path):
    """A checkpoint written by 2 processes continues in 1 process (batch doubled: same global batch)."""
    out = tmp_path / "resumed"
    (out / "checkpoints").mkdir(parents=True)
    shutil.copytree(runs / "two" / "checkpoints" / "step-00000004", out / "checkpoints" / "step-00000004")
    shutil.copy(runs / "two" / "metrics.jsonl", out / "metrics.jsonl")
    proc = run(synthetic_shards, out, nproc=1, batch=8, extra=("--resume", "auto"))
    assert '"steps_this_session": 4' in proc.stdout
    resumed = losses(out)
    assert len(resumed) == 8
    assert resumed[4:] == pytest.approx(losses(runs / "one")[4:], rel=1e-3)
    assert_close_to_movement(runs / "two", out)
