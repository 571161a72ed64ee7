"""Writes that really fail: a child process under a file-size limit (RLIMIT_FSIZE, `ulimit -f`; Python ignores
SIGXFSZ, so the kernel fails the write with EFBIG), during a checkpoint save and during `prepare`. Whatever the
writer's exception (torch.save reports a short write as a RuntimeError, safetensors as its own error), the run
stops with one line naming the problem, what was written before stays intact and verified, and `--resume auto`
continues exactly once there is room again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from bertzoo.cli import main
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.engine.manifest import verify_checkpoint

from helpers.pretrain import tiny_args

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="RLIMIT_FSIZE needs a POSIX child process")

# In the child: lower the file-size limit just before the `nth` torch.save call (the 3rd is the second
# checkpoint's optimizer state), so the earlier checkpoint is written in full and this one fails for real.
CHILD_AT_SAVE = """
import resource, sys, torch
limit, nth = int(sys.argv[1]), int(sys.argv[2])
real, calls = torch.save, [0]
def save(*args, **kwargs):
    calls[0] += 1
    if calls[0] == nth:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return real(*args, **kwargs)
torch.save = save
from bertzoo.cli import main
sys.exit(main(sys.argv[3:]))
"""
# In the child: the limit from the start (a disk too small for the command's output).
CHILD_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
from bertzoo.cli import main
sys.exit(main(sys.argv[2:]))
"""


def child(program: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return errors[0]


def test_a_checkpoint_that_cannot_be_written_keeps_the_earlier_one_and_resume_is_exact(
    synthetic_shards, tmp_path
) -> None:

    reference = tmp_path / "reference"
    assert main(tiny_args(synthetic_shards, reference)) == 0
    out = tmp_path / "run"
    done = child(CHILD_AT_SAVE, "4096", "3", *tiny_args(synthetic_shards, out))
    line = one_error_line(done)
    target = out / "checkpoints" / "step-00000004"
    assert line.startswith(f"error: the file-size limit (ulimit -f) was reached while writing checkpoint {target}")
    assert line.endswith("free space and continue with --resume auto")
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-00000002"]  # nothing half-written
    verify_checkpoint(out / "checkpoints" / "step-00000002")
    assert main(tiny_args(synthetic_shards, out) + ["--resume", "auto"]) == 0  # room again
    a, b = load_file(out / "final" / "model.safetensors"), load_file(reference / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_prepare_that_cannot_write_a_shard_leaves_the_old_shards_and_creates_nothing(
    synthetic_docs, synthetic_tokenizer, tmp_path
) -> None:
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n\n".join(synthetic_docs[:600]), encoding="utf-8")
    synthetic_tokenizer.save(tmp_path / "tok")
    out = tmp_path / "shards"
    args = ["prepare", "--input", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--shard-tokens", "20000"]
    assert main([*args, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert ShardedCorpus(out).num_shards > 2

    done = child(CHILD_LIMITED, "30000", *args, "--out", str(out), "--overwrite")
    line = one_error_line(done)
    assert line.startswith(f"error: the file-size limit (ulimit -f) was reached while writing shards for {out} (")
    assert "was left as it was" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert ShardedCorpus(out).num_shards > 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("shards")) == ["shards"]  # no leftovers

    fresh = tmp_path / "fresh"
    done = child(CHILD_LIMITED, "30000", *args, "--out", str(fresh))
    assert "was not created" in one_error_line(done) and not fresh.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("fresh")]
