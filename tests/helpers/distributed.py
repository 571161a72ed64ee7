"""What the distributed tests share: the tiny pretraining command line they launch and how they compare runs."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file


def pretrain_args(shards: Path, out: Path, *, batch: int, extra=(), dropout: bool = False) -> list[str]:
    """`bertzoo pretrain` arguments of an 8-step tiny BERT run in fp32 on the CPU, checkpointed at step 4."""
    no_dropout = () if dropout else ("--model.dropout", "0", "--model.attention_dropout", "0")
    return [
        "configs/pretrain/bert-tiny-smoke.yaml",
        "--data.shards", str(shards),
        "--data.max_seq_len", "48",
        *no_dropout,
        "--train.max_steps", "8",
        "--train.warmup_steps", "2",
        "--train.log_every", "1",
        "--train.save_every", "4",
        "--train.threads", "1",
        "--train.precision", "fp32",  # equivalence at fp32 tolerances; `auto` may pick bf16
        "--train.device", "cpu",  # gloo on the CPU, also on a machine with one GPU (two ranks, one device)
        "--train.batch_size", str(batch),
        "--train.output_dir", str(out),
        *extra,
    ]  # fmt: skip


def losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


def assert_same_weights(run_a: Path, run_b: Path) -> None:
    """Final weights of two runs agree to float-summation noise, and training did move them."""
    start = load_file(run_a / "checkpoints" / "step-00000004" / "model.safetensors")
    a = load_file(run_a / "final" / "model.safetensors")
    b = load_file(run_b / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    moved = max(float((a[k] - start[k]).abs().max()) for k in a)
    gap = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert moved > 1e-3
    assert gap < 1e-5, (gap, moved)
