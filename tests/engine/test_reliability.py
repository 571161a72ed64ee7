"""Reliability: no lost work, no crash on bad input, no unsafe loading (docs/reliability.md lists which
test checks which guarantee).

The expensive pieces run the real CLI in subprocesses with a tiny model: SIGKILL at chosen and random
points with resume each time, and SIGINT/SIGTERM. Everything else runs in-process.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertzoo.cli import main
from bertzoo.config import load_pretrain_config
from bertzoo.data.pretraining.examples import NspDataset
from bertzoo.data.text.corpus import ReadStats, read_documents
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.engine.checkpoint import load_checkpoint
from bertzoo.engine.manifest import find_latest_checkpoint, list_checkpoints, verify_checkpoint, write_manifest
from bertzoo.engine.weights import NonFiniteModelError
from bertzoo.errors import BertzooError, CheckpointError, ConfigError, DataError, DiskFullError
from bertzoo.io import TEST_PAUSE_ENV

from helpers.pretrain import MAX_STEPS, tiny_args

REPO = Path(__file__).resolve().parents[2]
# Control characters the corpus cleaner must remove (everything in Unicode category Cc but tab/newline).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def same_tensors(a_path: Path, b_path: Path) -> None:
    a, b = load_file(a_path), load_file(b_path)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def reference(synthetic_shards, tmp_path_factory) -> Path:
    """final/model.safetensors of an uninterrupted in-process run (the bitwise target)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(tiny_args(synthetic_shards, out)) == 0
    return out / "final" / "model.safetensors"


def spawn(args: list[str], log: Path, pause: float = 0.0) -> subprocess.Popen:
    """`python -m bertzoo ARGS` in a fresh process; stdout and stderr go to files (a full pipe would block it)."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop(TEST_PAUSE_ENV, None)
    if pause:
        env[TEST_PAUSE_ENV] = str(pause)
    with open(log.with_suffix(".out"), "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "bertzoo", *args], stdout=out, stderr=err, env=env, cwd=REPO)


def wait_until(proc: subprocess.Popen, condition: Callable[[], bool], log: Path, timeout: float = 90.0) -> bool:
    """Poll `condition` every 2 ms; False if the process exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    proc.kill()
    raise AssertionError(f"timed out; stderr: {log.with_suffix('.err').read_text(errors='replace')[-2000:]}")


def own_entries(root: Path, prefix: str, pid: int) -> list[Path]:
    """`prefix*-<pid>` entries under `root`: temporary directories of the process `pid`."""
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.name.startswith(prefix) and p.name.endswith(f"-{pid}")]


# ------------------------------------------------------------------------------ crash-safe checkpoints


def test_sigkill_at_random_points_then_resume_is_bitwise_exact(synthetic_shards, reference, tmp_path):
    """kill -9 mid-save, mid-rotation, between manifest and rename, and at a random moment; resume with
    --resume auto each time; the final weights equal the uninterrupted run's bit for bit."""
    out = tmp_path / "run"
    root = out / "checkpoints"
    rng = random.Random(20261122)
    args = tiny_args(synthetic_shards, out) + ["--resume", "auto"]

    def mid_save(pid: int) -> Callable[[], bool]:
        return lambda: bool(own_entries(root, ".tmp-step-", pid))

    def mid_rotation(pid: int) -> Callable[[], bool]:
        return lambda: bool(own_entries(root, ".tmp-delete-", pid))

    def manifest_written(pid: int) -> Callable[[], bool]:
        return lambda: any((p / "manifest.json").is_file() for p in own_entries(root, ".tmp-step-", pid))

    plan: list[tuple[str, Callable[[int], Callable[[], bool]] | None, float]] = [
        ("mid-save", mid_save, rng.uniform(0.0, 0.08)),
        ("mid-rotation", mid_rotation, 0.0),
        ("manifest written, not yet renamed", manifest_written, 0.0),
        ("random moment", None, rng.uniform(0.5, 4.0)),
    ]
    latest_step = 0
    killed_mid_save = 0
    for attempt, (what, event, delay) in enumerate(plan):
        log = tmp_path / f"attempt{attempt}"
        proc = spawn(args, log, pause=0.08)
        reached = wait_until(proc, event(proc.pid), log) if event is not None else True
        if reached:
            time.sleep(delay)
            proc.kill()
        rc = proc.wait(timeout=60)
        assert rc in (0, -signal.SIGKILL), f"{what}: exit {rc}; {log.with_suffix('.err').read_text()[-2000:]}"
        if event is not None:  # the planned event must have been reached, or the test checks less than it says
            assert reached and rc == -signal.SIGKILL, f"{what}: the run ended before the event"
        killed_mid_save += bool(own_entries(root, ".tmp-step-", proc.pid))
        # Every directory that carries a checkpoint name is complete and verifies; none is half-written.
        for path in root.glob("step-*") if root.is_dir() else []:
            verify_checkpoint(path)
        latest = find_latest_checkpoint(out, cleanup=False)
        step = int(latest.name.split("-")[1]) if latest is not None else 0
        # Progress is never lost: keep_last=1 rotation never leaves the run without a complete checkpoint.
        assert step >= latest_step, f"{what}: newest complete checkpoint went from step {latest_step} to {step}"
        latest_step = step
    assert killed_mid_save >= 1, "no kill landed inside a checkpoint write"

    proc = spawn(args, tmp_path / "final")
    assert proc.wait(timeout=120) == 0, (tmp_path / "final.err").read_text()[-2000:]
    same_tensors(out / "final" / "model.safetensors", reference)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [4, 8, 12]  # each step logged once despite the repeats
    assert not list(root.glob(".tmp-*")) and [s for s, _ in list_checkpoints(out)] == [MAX_STEPS]


def test_resume_auto_skips_a_damaged_newest_checkpoint(synthetic_shards, reference, tmp_path, capsys, caplog):
    import logging
    import shutil

    out = tmp_path / "run"
    args = tiny_args(synthetic_shards, out, keep_last=0)
    assert main(args) == 0
    # Make it a run that crashed after step 6 with its newest checkpoint damaged (a flipped byte, same size).
    shutil.rmtree(out / "final")
    for step in (8, 10, 12):
        shutil.rmtree(out / "checkpoints" / f"step-{step:08d}")
    weights = out / "checkpoints" / "step-00000006" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="bertzoo.train"):
        assert main(args + ["--resume", "auto"]) == 0
    assert "skipping checkpoint" in caplog.text and "step-00000006" in caplog.text and "sha256" in caplog.text
    assert "step-00000004 at step 4" in capsys.readouterr().err  # fell back to the previous complete one
    same_tensors(out / "final" / "model.safetensors", reference)


# ------------------------------------------------------------------------------------- graceful stop


def check_stopped_run(out: Path, summary: dict, err: str, sig: signal.Signals) -> None:
    """The run stopped cleanly on `sig`: a verified checkpoint at the last step, a resume command, no final/."""
    assert f"received {sig.name}" in err and "Traceback" not in err
    hint = next(line for line in err.splitlines() if line.startswith("to continue this run:"))
    assert hint.startswith("to continue this run: bertzoo pretrain ") and hint.endswith("--resume auto")
    assert shlex.quote(f"--train.output_dir={out}") in hint
    assert summary["completed"] is False and summary["stop_reason"] == sig.name
    checkpoint = Path(summary["last_checkpoint"])
    assert checkpoint.name == f"step-{summary['steps']:08d}" and verify_checkpoint(checkpoint)["step"] >= 1
    assert not (out / "final").exists()


def first_step_logged(out: Path) -> Callable[[], bool]:
    metrics = out / "metrics.jsonl"  # written inside the loop, so the stop handlers are installed
    return lambda: metrics.is_file() and metrics.stat().st_size > 0


def test_sigterm_finishes_the_step_saves_and_exits_143(synthetic_shards, tmp_path):
    """A real `python -m bertzoo pretrain` process, as a cluster scheduler stops it."""
    out = tmp_path / "run"
    proc = spawn(tiny_args(synthetic_shards, out, max_steps=100_000, save_every=0, log_every=1), out)
    assert wait_until(proc, first_step_logged(out), out)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143  # 128 + SIGTERM: stopped with a checkpoint, not finished
    summary = json.loads(out.with_suffix(".out").read_text())
    check_stopped_run(out, summary, out.with_suffix(".err").read_text(), signal.SIGTERM)


def test_sigint_finishes_the_step_saves_and_exits_130(synthetic_shards, tmp_path, capsys):
    """Ctrl-C, delivered to this process while `main` trains in it (saves a process start-up)."""
    import threading

    out = tmp_path / "run"
    done = threading.Event()

    def interrupt() -> None:
        started = first_step_logged(out)
        while not done.wait(0.005):
            if started():
                os.kill(os.getpid(), signal.SIGINT)
                return

    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    try:
        code = main(tiny_args(synthetic_shards, out, max_steps=100_000, save_every=0, log_every=1))
    finally:
        done.set()
        thread.join()
    assert code == 130  # 128 + SIGINT
    captured = capsys.readouterr()
    check_stopped_run(out, json.loads(captured.out), captured.err, signal.SIGINT)


# -------------------------------------------------------------------------------- numerical faults


def toy_trainer(tmp_path: Path, **cfg):
    from helpers.loop import make_cfg, make_trainer

    return make_trainer(make_cfg(tmp_path, **cfg))


def test_bf16_non_finite_loss_is_skipped_and_counted(tmp_path):
    trainer = toy_trainer(tmp_path, precision="bf16", max_steps=6, save_every=0)
    trainer.objective.poison = {1, 4}  # steps 2 and 5 produce a NaN loss
    before: dict[int, dict[str, torch.Tensor]] = {}
    trainer.callbacks.append(
        lambda tr, step: before.update({step: {k: v.clone() for k, v in tr.objective.state_dict().items()}})
    )
    summary = trainer.train()
    assert summary["completed"] and summary["skipped_steps"] == 2
    assert all(torch.equal(before[1][k], before[2][k]) for k in before[1])  # step 2 changed nothing
    assert not all(torch.equal(before[2][k], before[3][k]) for k in before[2])  # step 3 trained


def test_non_finite_gradient_with_finite_loss_is_skipped(tmp_path):
    trainer = toy_trainer(tmp_path, max_steps=5, save_every=0, clip_norm=None)
    calls = {"n": 0}

    def poison_grad(grad: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return grad * float("inf") if calls["n"] == 3 else grad

    trainer.objective.out.weight.register_hook(poison_grad)
    summary = trainer.train()
    assert summary["skipped_steps"] == 1 and summary["completed"]
    assert all(torch.isfinite(p).all() for p in trainer.objective.parameters())


def test_a_nan_model_never_replaces_a_good_checkpoint(tmp_path):
    trainer = toy_trainer(tmp_path, max_steps=20, save_every=10)

    def break_weights(tr, step: int) -> None:
        if step == 13:
            with torch.no_grad():
                tr.objective.norm.weight.fill_(float("nan"))

    trainer.callbacks.append(break_weights)
    with pytest.raises(NonFiniteModelError, match=r"refusing to save .*norm\.weight"):
        trainer.train()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10]
    good = find_latest_checkpoint(tmp_path)
    assert good is not None and good.name == "step-00000010"
    weights = load_file(good / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())
    assert not (tmp_path / "final").exists()


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"train.lr_rate": 1}, r"unknown config key train\.lr_rate; allowed keys under train: .*\blr\b"),
        ({"data.masking.prob": 0.2}, r"unknown config key data\.masking\.prob; allowed keys .*mask_prob"),
        ({"train.precision": "fp8"}, r"train\.precision='fp8' is not allowed; choose one of: auto, fp32, bf16, fp16"),
        ({"train.batch_size": "big"}, r"train\.batch_size must be an integer, got 'big'"),
        ({"data.masking.mask_prob": 1.5}, r"data\.masking\.mask_prob must be in \(0, 1\), got 1\.5"),
        ({"data.nsp": "maybe"}, r"data\.nsp must be true or false"),
        ({"train.seed": -1}, r"train\.seed must be in \[0, 2\*\*63\), got -1"),  # was numpy's traceback
        ({"data.masking.max_predictions": -1}, r"max_predictions must be >= 1 or null"),  # was accepted
    ],
)
def test_config_errors_name_the_key_path_and_allowed_values(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_pretrain_config(None, overrides)


def test_zero_heads_is_a_config_error_not_a_division_by_zero():
    from bertzoo.config import ModelConfig

    with pytest.raises(ConfigError, match=r"model\.num_heads must be positive, got 0"):
        ModelConfig(num_heads=0)


def test_bad_yaml_and_json_files_are_config_errors(tmp_path):
    from bertzoo.config import read_json

    bad_date = tmp_path / "run.yaml"
    bad_date.write_text("train:\n  output_dir: 2024-13-45\n")  # YAML reads a date, and month 13 fails
    with pytest.raises(ConfigError, match="run.yaml holds a value YAML cannot read"):
        load_pretrain_config(bad_date)
    big = tmp_path / "config.json"
    big.write_text('{"hidden_size": ' + "9" * 5000 + "}")  # Python refuses ints over 4300 digits
    with pytest.raises(ConfigError, match="config.json is not valid JSON"):
        read_json(big)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="deep.json is not valid JSON"):
        read_json(deep)


@pytest.fixture()
def hostile_corpus(tmp_path) -> Path:
    """Empty files, blank lines, a 4 MB line, control characters, invalid UTF-8, NUL bytes, lone CRs."""
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a_empty.txt").write_bytes(b"")
    (d / "b_blank.txt").write_bytes(b"\n\n   \n\t\n\r\n")
    (d / "c_huge.txt").write_bytes(b"Before the huge line.\n\n" + b"abc def " * 500_000 + b"\n\nAfter it.\n")
    (d / "d_controls.txt").write_bytes(
        b"Tab\there\x00NUL\x07bell \x1b[31mansi\x7f \xc2\x85 end.\n\nForm\x0cfeed doc.\n"
    )
    (d / "e_utf8.txt").write_bytes(b"fine line\n\xff\xfe bad bytes\n\n\xc3 truncated\n")
    (d / "f_cr.txt").write_bytes(b"one\rtwo\r\n\r\nthree")
    (d / "g_nul_only.txt").write_bytes(b"\x00\x00\x00\n\x01\x02\n")
    return d


def test_corpus_reader_survives_hostile_text(hostile_corpus, synthetic_tokenizer, tmp_path):
    stats = ReadStats()
    docs = list(read_documents([hostile_corpus], stats=stats))
    assert stats.files == 7
    assert docs[0] == "Before the huge line." and len(docs[1]) == len("abc def " * 500_000) - 1
    assert docs[2] == "After it."
    assert docs[3] == "Tab\thereNULbell [31mansi end." and docs[4] == "Formfeed doc."
    assert docs[5:7] == ["fine line\n\ufffd\ufffd bad bytes", "\ufffd truncated"]
    assert docs[7:] == ["one\ntwo", "three"]
    assert not any(CONTROL.search(d) for d in docs)
    assert stats.bad_utf8_lines == 2 and stats.first_bad_utf8 == f"{hostile_corpus / 'e_utf8.txt'}:2"
    # The cleaned stream tokenizes into shards and pretraining examples (the huge line is one long sentence).
    small = [d for d in docs if len(d) < 100_000] + [docs[1][:200_000]]
    info = prepare_shards(small, synthetic_tokenizer, tmp_path / "shards", progress=False)
    assert info.num_docs == len(small)
    dataset = NspDataset(ShardedCorpus(tmp_path / "shards"), synthetic_tokenizer, 32, seed=0)
    assert all(len(dataset[i]["input_ids"]) <= 32 for i in range(len(dataset)))


def test_jsonl_lone_surrogates_big_ints_and_deep_nesting(tmp_path, synthetic_tokenizer):
    good = tmp_path / "surrogates.jsonl"
    good.write_text('{"text": "pair \\ud83d\\ude00 ok"}\n{"text": "lone \\ud800 surrogate"}\n', encoding="utf-8")
    stats = ReadStats()
    docs = list(read_documents([good], stats=stats))
    assert docs == ["pair \U0001f600 ok", "lone \ufffd surrogate"]  # encodable: the tokenizer accepts them
    assert stats.bad_utf8_lines == 1 and stats.first_bad_utf8 == f"{good}:2"
    # ... and the tokenizer takes them: the emoji is [UNK], and BERT's normaliser drops U+FFFD.
    encoded = synthetic_tokenizer.encode_batch(docs)
    assert synthetic_tokenizer.unk_id in encoded[0] and synthetic_tokenizer.decode(encoded[1]) == "lone surrogate"
    for name, line, reason in [
        ("big.jsonl", '{"text": "x", "n": ' + "1" * 5000 + "}", "ValueError"),
        ("deep.jsonl", "[" * 50_000 + "]" * 50_000, "RecursionError"),
    ]:
        path = tmp_path / name
        path.write_text('{"text": "first"}\n' + line + "\n", encoding="utf-8")
        with pytest.raises(DataError, match=rf"{name}:2: invalid JSON \({reason}\)"):
            list(read_documents([path]))


def test_damaged_gzip_is_a_data_error(tmp_path):
    import gzip

    path = tmp_path / "corpus.txt.gz"
    data = gzip.compress(b"Some text.\n" * 10_000)
    path.write_bytes(data[: len(data) // 2])  # a truncated download
    with pytest.raises(DataError, match=r"cannot read .*corpus.txt.gz after line \d+ \(EOFError"):
        list(read_documents([path]))


@pytest.fixture(scope="module")
def small_run(synthetic_shards, tmp_path_factory) -> Path:
    """A run stopped after 2 steps, with one checkpoint."""
    out = tmp_path_factory.mktemp("small") / "run"
    assert main(tiny_args(synthetic_shards, out, max_steps=2)) == 0
    return out


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (["--model.intermediate_size=48"], r"shape mismatch: .*encoder\.\S+ \[64, 32\] vs model \[48, 32\]"),
        (["--data.nsp=false"], r"unexpected keys: nsp_head\.classifier\.bias, nsp_head\.classifier\.weight"),
        (["--model.num_layers=3"], r"missing keys: encoder\.\S*2\."),
    ],
    ids=["shape", "unexpected", "missing"],
)
def test_resuming_another_model_names_the_tensors(synthetic_shards, small_run, capsys, override, expected):
    capsys.readouterr()
    args = tiny_args(synthetic_shards, small_run, max_steps=4) + override + ["--resume", "auto"]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and re.search(expected, err[0]), err


def test_tokenizer_swapped_in_shards_is_caught_before_training(synthetic_shards, tmp_path, capsys):
    import shutil

    shards = tmp_path / "shards"
    shutil.copytree(synthetic_shards, shards)
    vocab = (shards / "tokenizer" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    shutil.rmtree(shards / "tokenizer")
    (tmp_path / "vocab.txt").write_text("\n".join(vocab[:-40]) + "\n", encoding="utf-8")  # 40 tokens fewer
    Tokenizer.from_vocab(tmp_path / "vocab.txt").save(shards / "tokenizer")
    out = tmp_path / "run"
    assert main(tiny_args(shards, out)) == 2
    err = capsys.readouterr().err
    assert "error: the tokenizer (vocab" in err and "differs from the one" in err
    assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()


# ----------------------------------------------------------------------------------------- disk full


class FullDisk:
    """An `open` whose files raise ENOSPC once `budget` bytes have been written through all of them."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def open(self, path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return f if "w" not in mode and "a" not in mode else _FillingFile(f, self, str(path))


class _FillingFile:
    """A writable file on a `FullDisk`: a write past the budget is cut short and raises ENOSPC."""

    def __init__(self, f, disk: FullDisk, path: str) -> None:
        self._f, self._disk, self._path = f, disk, path

    def write(self, data):
        if len(data) > self._disk.budget:
            self._f.write(data[: self._disk.budget])  # a partial write, as a filling disk does
            self._disk.budget = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)
        self._disk.budget -= len(data)
        return self._f.write(data)

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def test_disk_full_during_prepare_keeps_earlier_output(
    synthetic_docs, synthetic_tokenizer, tmp_path, capsys, monkeypatch
):
    import bertzoo.data.tokens.shards as shards_mod

    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n\n".join(synthetic_docs[:600]), encoding="utf-8")
    synthetic_tokenizer.save(tmp_path / "tok")
    out = tmp_path / "shards"
    args = ["prepare", "--input", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--shard-tokens", "20000"]
    assert main([*args, "--out", str(out)]) == 0
    meta_before = (out / "meta.json").read_bytes()
    assert ShardedCorpus(out).num_shards > 2

    capsys.readouterr()
    monkeypatch.setattr(shards_mod, "open", FullDisk(budget=60_000).open, raising=False)  # dies in shard 2
    assert main([*args, "--out", str(out), "--overwrite"]) == 2
    captured = capsys.readouterr().err
    err = [line for line in captured.splitlines() if line.startswith("error:")]  # the rest is the progress bar
    assert len(err) == 1 and "Traceback" not in captured
    assert err[0].startswith(f"error: disk full while writing shards for {out} (")
    assert "was left as it was" in err[0] and "free space" in err[0]
    assert (out / "meta.json").read_bytes() == meta_before and ShardedCorpus(out).num_shards > 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("shards")) == ["shards"]  # no .tmp/.old

    monkeypatch.setattr(shards_mod, "open", FullDisk(budget=60_000).open, raising=False)
    fresh = tmp_path / "fresh"
    assert main([*args, "--out", str(fresh)]) == 2
    assert "was not created" in capsys.readouterr().err and not fresh.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("fresh")]


def test_disk_full_during_a_checkpoint_keeps_earlier_ones(synthetic_shards, reference, tmp_path, capsys, monkeypatch):
    real_save = torch.save
    calls = {"n": 0}

    def save(obj, path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # optimizer.pt of the second checkpoint (step 4)
            Path(path).write_bytes(b"PK\x03\x04 half a file")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    out = tmp_path / "run"
    assert main(tiny_args(synthetic_shards, out)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert errors[0].startswith(f"error: disk full while writing checkpoint {out / 'checkpoints' / 'step-00000004'}")
    assert errors[0].endswith("free space and continue with --resume auto")
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-00000002"]  # no half-written directory
    verify_checkpoint(out / "checkpoints" / "step-00000002")

    monkeypatch.setattr(torch, "save", real_save)  # space freed
    assert main(tiny_args(synthetic_shards, out) + ["--resume", "auto"]) == 0
    assert "resumed from" in capsys.readouterr().err
    same_tensors(out / "final" / "model.safetensors", reference)


def test_cli_turns_os_errors_into_one_line(tmp_path, capsys, monkeypatch):
    import bertzoo.cli.info as info_command

    blocker = tmp_path / "file"
    blocker.write_text("x")
    corpus = tmp_path / "c.txt"
    corpus.write_text("Some text here. More text there.\n")
    assert main(["tokenizer", "train", "-i", str(corpus), "--out", str(blocker / "tok"), "--vocab-size", "50"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(blocker) in err[0]

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/metrics.jsonl")

    monkeypatch.setattr(info_command, "run", full)
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: disk full while writing /runs/x/metrics.jsonl; free space and run the command again "
        "(pretrain: with --resume auto)"
    ]
    with pytest.raises(OSError):
        main(["--debug", "info", str(tmp_path)])


# --------------------------------------------------------------------------------------- safe loading


class Evil:
    """Unpickling this creates `marker`: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_hub_refuses_a_malicious_pytorch_model_bin(tmp_path):
    from bertzoo.io import read_weights
    from bertzoo.loading import load_pretraining
    from bertzoo.variants import get_variant

    variant = get_variant("bert")
    cfg = variant.model_config({"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64})
    model = variant.build(cfg)
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    torch.save({**state, "payload": Evil(marker)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"refusing to unpickle .*pytorch_model\.bin: .*could run code"):
        load_pretraining(tmp_path)
    assert not marker.exists()
    # Plain containers pass weights_only but are still not a state dict.
    torch.save({"weights": [1, 2, 3]}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="does not hold a state dict"):
        read_weights(tmp_path)
    # A clean pytorch_model.bin still loads, through weights_only=True.
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert read_weights(tmp_path).keys() == state.keys()


def test_checkpoint_files_never_run_code(small_run, tmp_path):
    import shutil

    from bertzoo.hub import load_pretraining

    ckpt = tmp_path / "ckpt"
    shutil.copytree(find_latest_checkpoint(small_run), ckpt)
    model = load_pretraining(ckpt)
    marker = tmp_path / "pwned"
    torch.save({"torch": Evil(marker)}, ckpt / "rng.pt")
    write_manifest(ckpt, 2)  # consistent, as an attacker would publish it
    with pytest.raises(CheckpointError, match=r"refusing to unpickle .*rng\.pt"):
        load_checkpoint(ckpt, model)
    # Weights are read only as safetensors: a pickle in model.safetensors is not unpickled.
    torch.save({"w": Evil(marker)}, ckpt / "model.safetensors")
    torch.save({"torch": torch.get_rng_state()}, ckpt / "rng.pt")
    write_manifest(ckpt, 2)
    with pytest.raises(CheckpointError, match=r"cannot read .*model\.safetensors"):
        load_checkpoint(ckpt, model)
    assert not marker.exists()


def test_manifest_cannot_point_outside_the_checkpoint(small_run, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(find_latest_checkpoint(small_run), ckpt)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"].append({"path": "../../secret", "size": 1, "sha256": "0" * 64})
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="manifest.json is corrupted"):
        verify_checkpoint(ckpt)


def test_every_expected_error_is_a_bertzoo_error():
    for cls in (ConfigError, DataError, CheckpointError, DiskFullError, NonFiniteModelError):
        assert issubclass(cls, BertzooError)


def test_an_empty_override_is_the_empty_string():
    """`--model ''` (random init in a fine-tuning config) failed with "model must be a string, got None"."""
    from bertzoo.config import load_finetune_config, parse_scalar

    assert parse_scalar("") == "" and parse_scalar("null") is None and parse_scalar("''") == ""
    cfg = load_finetune_config("configs/finetune/wiki-topics-bert-mini.yaml", {"model": parse_scalar("")})
    assert cfg.model == ""


@pytest.mark.parametrize(("text", "value"), [("1e-3", 1e-3), ("5E-4", 5e-4), ("2e+1", 20.0), (".5e-2", 0.005)])
def test_exponent_without_a_dot_is_a_number(text, value):
    """YAML 1.1 reads `1e-3` as a string; the README's own overrides (`--train.lr 5e-4`) must work."""
    from bertzoo.config import parse_scalar

    assert load_pretrain_config(None, {"train.lr": parse_scalar(text)}).train.lr == value
    with pytest.raises(ConfigError, match=r"train\.lr must be a number, got '1e'"):
        load_pretrain_config(None, {"train.lr": parse_scalar("1e")})
