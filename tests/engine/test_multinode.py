"""Two nodes on one machine: two torchrun agents (`--nnodes 2`, one process each) meet through c10d rendezvous on
127.0.0.1 and train with gloo on the CPU. Ranks then differ from local ranks (the second node's process is RANK 1,
LOCAL_RANK 0), which a one-node launch never shows; the weights must equal one process of the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from helpers.distributed import assert_same_weights, losses, pretrain_args
from helpers.loop import free_port

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="gloo multi-process test runs on Linux")


def test_two_nodes_match_one_process_of_the_same_global_batch(synthetic_shards, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run(
        [sys.executable, "-m", "bertzoo", "pretrain", *pretrain_args(synthetic_shards, tmp_path / "one", batch=8)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr[-3000:]

    rendezvous = [
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        f"--rdzv-id={uuid.uuid4().hex[:8]}",
        "--max-restarts=0",
    ]
    args = pretrain_args(synthetic_shards, tmp_path / "two-nodes", batch=4)
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *rendezvous, "-m", "bertzoo", "pretrain", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=300))
    finally:
        for agent in agents:  # a hung rendezvous must not outlive the test
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
    tails = "\n".join(f"--- node {i}:\n{err[-2000:]}" for i, (_, err) in enumerate(outputs))
    assert [a.returncode for a in agents] == [0, 0], tails

    assert losses(tmp_path / "two-nodes") == pytest.approx(losses(tmp_path / "one"), rel=1e-5)
    assert_same_weights(tmp_path / "one", tmp_path / "two-nodes")
    # Only global rank 0 wrote, although each node has a local rank 0.
    ckpts = sorted(p.name for p in (tmp_path / "two-nodes" / "checkpoints").iterdir())
    assert ckpts == ["step-00000004", "step-00000008"]
    rows = [(tmp_path / run / "metrics.jsonl").read_text().count("\n") for run in ("one", "two-nodes")]
    assert rows[0] == rows[1]
