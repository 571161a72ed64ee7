"""Distributed data parallel on CPU (gloo) through the real launcher: torchrun -m bertzoo pretrain.

2 processes x batch b must follow the same loss curve as 1 process x batch 2b (dropout off): every
global batch holds the same examples with the same masks, whatever the world size, and each loss
term is weighted by its share of the items (masked tokens, sentence pairs) of the whole step over
micro-batches and ranks, so the gradient is that of the one big batch. Only the order of float
additions differs, so weights agree to ~1e-7 after 8 steps (1e-5 is asserted).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from helpers.distributed import assert_same_weights, losses, pretrain_args
from helpers.loop import free_port

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="gloo multi-process test runs on Linux")


def run(shards, out, *, nproc: int, batch: int, extra=(), dropout: bool = False):
    args = pretrain_args(shards, out, batch=batch, extra=extra, dropout=dropout)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    if nproc == 1:
        cmd = [sys.executable, "-m", "bertzoo", "pretrain", *args]
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
        cmd = [*launcher, f"--master_port={free_port()}", "-m", "bertzoo", "pretrain", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


FSDP = ("--train.distributed", "fsdp")


@pytest.fixture(scope="module")
def runs(synthetic_shards, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    run(synthetic_shards, root / "one", nproc=1, batch=8)
    run(synthetic_shards, root / "two", nproc=2, batch=4)
    # FSDP with a global batch: 2 processes x micro-batch 2 x 2 accumulated = the same 8 examples per step.
    run(synthetic_shards, root / "fsdp", nproc=2, batch=2, extra=(*FSDP, "--train.global_batch_size", "8"))
    return root


def test_two_processes_match_one_with_double_batch(runs):
    one, two = losses(runs / "one"), losses(runs / "two")
    assert len(one) == len(two) == 8
    assert one[0] == pytest.approx(two[0], rel=1e-6)  # same weights, same examples, same masks
    assert two == pytest.approx(one, rel=1e-5)
    assert_same_weights(runs / "one", runs / "two")
    # Only rank 0 wrote: one metrics file, checkpoints at steps 4 and 8, no stray temporary dirs.
    ckpts = sorted(p.name for p in (runs / "two" / "checkpoints").iterdir())
    assert ckpts == ["step-00000004", "step-00000008"]


def resume_from(runs, source: str, synthetic_shards, out, *, nproc: int, batch: int, extra=()) -> None:
    """Continue run `source` (under `runs`, or an absolute path) from its step-4 checkpoint in `out` and check it ends
    as the 1-process run."""
    (out / "checkpoints").mkdir(parents=True)
    shutil.copytree(runs / source / "checkpoints" / "step-00000004", out / "checkpoints" / "step-00000004")
    shutil.copy(runs / source / "metrics.jsonl", out / "metrics.jsonl")
    proc = run(synthetic_shards, out, nproc=nproc, batch=batch, extra=(*extra, "--resume", "auto"))
    assert '"steps_this_session": 4' in proc.stdout
    resumed = losses(out)
    assert len(resumed) == 8
    assert resumed[4:] == pytest.approx(losses(runs / "one")[4:], rel=1e-5)
    assert_same_weights(runs / "one", out)


def test_resume_two_processes_into_one(runs, synthetic_shards, tmp_path):
    """A checkpoint written by 2 processes continues in 1 process (batch doubled: same global batch)."""
    resume_from(runs, "two", synthetic_shards, tmp_path / "resumed", nproc=1, batch=8)


def test_fsdp_checkpoint_resumes_in_one_process(runs, synthetic_shards, tmp_path):
    resume_from(runs, "fsdp", synthetic_shards, tmp_path / "from-fsdp", nproc=1, batch=8)


def test_one_process_checkpoint_resumes_under_fsdp(runs, synthetic_shards, tmp_path):
    """Optimizer state written by one process is split across FSDP ranks on resume."""
    resume_from(runs, "one", synthetic_shards, tmp_path / "into-fsdp", nproc=2, batch=4, extra=FSDP)


def test_fsdp_with_global_batch_matches_one_process(runs):
    """FSDP (fully_shard) + accumulation derived from train.global_batch_size follows the same curve."""
    one, sharded = losses(runs / "one"), losses(runs / "fsdp")
    assert len(sharded) == 8
    assert sharded == pytest.approx(one, rel=1e-5)
    assert_same_weights(runs / "one", runs / "fsdp")
    state = json.loads((runs / "fsdp" / "checkpoints" / "step-00000008" / "trainer_state.json").read_text())
    assert (state["world_size"], state["batch_size"], state["grad_accum"]) == (2, 2, 2)
    # Checkpoints keep the single-process layout: the same tensors, full shapes.
    full = load_file(runs / "fsdp" / "final" / "model.safetensors")
    ref = load_file(runs / "one" / "final" / "model.safetensors")
    assert {k: v.shape for k, v in full.items()} == {k: v.shape for k, v in ref.items()}


def test_a_continued_run_under_fsdp_matches_one_process(runs, synthetic_shards, tmp_path):
    """`--init` under torchrun: every rank starts from the checkpoint, and FSDP follows the one-process curve."""
    init = ("--init", str(runs / "one" / "final"))
    run(synthetic_shards, tmp_path / "one", nproc=1, batch=8, extra=init)
    run(synthetic_shards, tmp_path / "fsdp", nproc=2, batch=2, extra=(*init, *FSDP, "--train.global_batch_size", "8"))
    one, sharded = losses(tmp_path / "one"), losses(tmp_path / "fsdp")
    assert len(sharded) == 8 and sharded == pytest.approx(one, rel=1e-5)
    assert one[0] < losses(runs / "one")[0] - 0.1  # it began where the checkpoint ended, not from random weights
    assert_same_weights(tmp_path / "one", tmp_path / "fsdp")
    start = json.loads((tmp_path / "fsdp" / "run_config.json").read_text())["start"]
    assert start["checkpoint"] == init[1] and start["loaded"] and start["fresh"] == []


def test_unpadded_ddp_and_fsdp_runs_follow_the_padded_one_process_run(runs, synthetic_shards, tmp_path):
    """The packed path (`model.unpad true`) keeps the loss normalisation over ranks and accumulation: its DDP and
    FSDP runs reach the padded one-process run's curve and weights, and the FSDP run resumes exactly."""
    unpad = ("--model.unpad", "true")
    run(synthetic_shards, tmp_path / "ddp", nproc=2, batch=4, extra=unpad)
    fsdp = (*unpad, *FSDP, "--train.global_batch_size", "8")
    run(synthetic_shards, tmp_path / "fsdp", nproc=2, batch=2, extra=fsdp)
    for name in ("ddp", "fsdp"):
        assert losses(tmp_path / name) == pytest.approx(losses(runs / "one"), rel=1e-5), name
        assert_same_weights(runs / "one", tmp_path / name)
    resume_from(runs, str(tmp_path / "fsdp"), synthetic_shards, tmp_path / "resumed", nproc=2, batch=2, extra=fsdp)


def test_global_batch_size_must_divide(synthetic_shards, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [
        "configs/pretrain/bert-tiny-smoke.yaml",
        "--data.shards",
        str(synthetic_shards),
        "--train.output_dir",
        str(tmp_path / "x"),
        "--train.batch_size",
        "3",
        "--train.global_batch_size",
        "8",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "bertzoo", "pretrain", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2
    assert "global_batch_size=8" in proc.stderr and "multiple" in proc.stderr
    assert not (tmp_path / "x" / "checkpoints").exists()


def test_ddp_resume_with_dropout_is_exact_on_every_rank(synthetic_shards, tmp_path):
    """Dropout on: 2 ranks stopped after step 4 and resumed end where the uninterrupted 2-rank run
    ends. Each rank's own dropout stream is restored from the checkpoint (re-seeding rank 1 instead,
    as before, changed its masks and so the weights)."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(synthetic_shards, straight, nproc=2, batch=4, dropout=True)
    (resumed / "checkpoints").mkdir(parents=True)
    ckpt = straight / "checkpoints" / "step-00000004"
    shutil.copytree(ckpt, resumed / "checkpoints" / ckpt.name)
    run(synthetic_shards, resumed, nproc=2, batch=4, dropout=True, extra=("--resume", "auto"))
    start = load_file(ckpt / "model.safetensors")
    a = load_file(straight / "final" / "model.safetensors")
    b = load_file(resumed / "final" / "model.safetensors")
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-3
    gap = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert gap == 0.0, gap


def test_ddp_mlm_only_objective_with_a_pooler(synthetic_shards, tmp_path):
    """BERT with objective mlm keeps its pooler for fine-tuning but must not run it in pretraining:
    an unused parameter made DDP fail at step 2 ("Expected to have finished reduction...")."""
    out = tmp_path / "mlm"
    run(synthetic_shards, out, nproc=2, batch=4, extra=("--objective", "mlm", "--data.nsp", "false"))
    assert len(losses(out)) == 8
    assert any(k.startswith("encoder.pooler") for k in load_file(out / "final" / "model.safetensors"))


def test_ddp_electra_with_gradient_disentangled_sharing_matches_one_process(synthetic_shards, tmp_path):
    """ELECTRA with DeBERTaV3's disentangled word tables (E_D = sg(E_G) + delta) under 2 processes follows the one
    process of twice the batch: the delta and the generator's table both get their gradients reduced, and the
    discriminator's table ends apart from the generator's (the delta moved)."""
    electra = ("--variant", "electra", "--objective", "electra", "--model.preset", "electra-mini",
               "--model.num_layers", "1", "--model.hidden_size", "64", "--model.num_heads", "2",
               "--model.intermediate_size", "128", "--model.embedding_size", "32",
               "--objective_args.embedding_sharing", "disentangled")  # fmt: skip
    one, two = tmp_path / "one", tmp_path / "two"
    run(synthetic_shards, one, nproc=1, batch=8, extra=electra)
    run(synthetic_shards, two, nproc=2, batch=4, extra=electra)
    assert_same_weights(one, two)
    final = load_file(one / "final" / "model.safetensors")
    gap = final["discriminator.encoder.embeddings.word.weight"] - final["generator.encoder.embeddings.word.weight"]
    assert float(gap.abs().max()) > 1e-4
    assert float(final["discriminator.word_delta"].abs().max()) > 1e-4


def test_ddp_time_clocked_schedule_stops_every_rank_together(synthetic_shards, tmp_path):
    """`schedule_clock: time` under 2 processes: the ranks average their clocks each step, so they agree
    on the learning rate and on the step the budget ends at (a disagreement would hang or fail the
    collective); the run counts as complete and its rate decays from the peak."""
    out = tmp_path / "timed"
    timed = ("--train.schedule_clock", "time", "--train.max_minutes", "0.1", "--train.max_steps", "100000",
             "--train.warmup_steps", "0", "--train.warmup_ratio", "0.1")  # fmt: skip
    proc = run(synthetic_shards, out, nproc=2, batch=4, extra=timed)
    assert '"completed": true' in proc.stdout and '"stop_reason": "max_minutes"' in proc.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    assert len(lrs) >= 3 and max(lrs) > lrs[-1]


def test_a_rank_without_a_gpu_of_its_own_is_a_config_error(monkeypatch):
    """Two ranks on a one-GPU node: one line naming the fix, before any CUDA call (seen on a lent H100, where
    rank 1 died in cuda.set_device with 'invalid device ordinal')."""
    from bertzoo.engine.distributed import init_distributed
    from bertzoo.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: pytest.fail("set_device reached"))
    with pytest.raises(ConfigError, match="--nproc_per_node 1 or fewer, or set train.device cpu"):
        init_distributed(torch.device("cuda"))


def test_main_first_runs_once_in_a_single_process():
    """Without a process group, main_first is one call: rank 0's, with no second run for "the others"."""
    from bertzoo.engine.distributed import main_first

    calls: list[int] = []
    assert main_first(lambda: calls.append(1) or "written") == "written"
    assert calls == [1]
