"""Crash-safe checkpoints: layout, rotation, latest selection, safe loading, clear mismatch errors."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch

from bertzoo.config import TrainConfig
from bertzoo.engine.checkpoint import load_checkpoint, safe_torch_load
from bertzoo.engine.manifest import find_latest_checkpoint, verify_checkpoint, write_manifest
from bertzoo.engine.optim import build_optimizer
from bertzoo.engine.weights import NonFiniteModelError
from bertzoo.errors import CheckpointError
from bertzoo.io import write_atomic

from helpers.checkpoint import save_run, setup_run, train_steps


def test_roundtrip_restores_everything(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    train_steps(net, opt, sched)
    extra_written = []
    path = save_run(
        tmp_path, 3, net, opt, sched, extra=lambda d: extra_written.append((d / "vocab.txt").write_text("a"))
    )
    # What comes next from each RNG after the save must come again after the load.
    expected_rng = (torch.rand(3), random.random())

    assert path.name == "step-00000003" and extra_written
    manifest = json.loads((path / "manifest.json").read_text())
    names = {f["path"]: f for f in manifest["files"]}
    assert set(names) == {
        "model.safetensors",
        "config.json",
        "optimizer.pt",
        "rng.pt",
        "trainer_state.json",
        "vocab.txt",
    }
    assert names["vocab.txt"]["size"] == 1 and len(names["vocab.txt"]["sha256"]) == 64
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]

    net2, opt2, sched2 = setup_run(seed=1)
    state = load_checkpoint(path, net2, opt2, sched2)
    assert state["step"] == 3 and state["note"] == "x"
    for (n, a), b in zip(net.state_dict().items(), net2.state_dict().values(), strict=True):
        assert torch.equal(a, b), n
    assert sched2.last_epoch == sched.last_epoch and sched2.get_last_lr() == sched.get_last_lr()
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"]) for k in s1)
    assert opt2.param_groups[0]["fused"] is True  # the current optimizer's kernel, not the saved one's
    assert torch.equal(torch.rand(3), expected_rng[0]) and random.random() == expected_rng[1]


def test_keep_last_rotation(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    for step in (1, 2, 3, 4):
        save_run(tmp_path, step, net, opt, sched, keep_last=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000003", "step-00000004"]


def test_failed_save_keeps_previous_checkpoints(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    save_run(tmp_path, 1, net, opt, sched, keep_last=1)

    def broken_extra(directory: Path) -> None:
        (directory / "tokenizer.json").write_text("{")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_run(tmp_path, 2, net, opt, sched, keep_last=1, extra=broken_extra)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000001"]  # no partial step-2, no .tmp leftover, step-1 not rotated away
    assert find_latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-00000001"


def test_latest_skips_tmp_and_damaged_checkpoints(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        save_run(tmp_path, step, net, opt, sched)
    # An interrupted save of step 5 by a process that no longer exists.
    leftover = root / ".tmp-step-00000005-999999999"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"partial")
    # step 4: corrupted manifest; step 3: a flipped byte (same size); step 2: truncated file.
    (root / "step-00000004" / "manifest.json").write_text("{not json")
    weights = root / "step-00000003" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    opt_file = root / "step-00000002" / "optimizer.pt"
    opt_file.write_bytes(opt_file.read_bytes()[:-10])

    assert find_latest_checkpoint(tmp_path) == root / "step-00000001"
    assert not leftover.exists()  # cleaned up
    # Without hashing, the flipped byte goes unnoticed but the truncation does not.
    assert find_latest_checkpoint(tmp_path, verify_hash=False) == root / "step-00000003"
    with pytest.raises(CheckpointError, match="sha256"):
        verify_checkpoint(root / "step-00000003")
    (root / "step-00000001" / "rng.pt").unlink()
    assert find_latest_checkpoint(tmp_path, verify_hash=False) == root / "step-00000003"
    assert find_latest_checkpoint(tmp_path) is None
    assert find_latest_checkpoint(tmp_path / "nowhere") is None


class Evil:
    """Unpickling this would create `marker`: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_refuses_malicious_pickle(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    path = save_run(tmp_path, 1, net, opt, sched)
    marker = tmp_path / "pwned"
    torch.save({"optimizer": Evil(marker)}, path / "optimizer.pt")
    write_manifest(path, 1)  # a consistent manifest, as an attacker would publish it

    net2, opt2, sched2 = setup_run(seed=3)
    before = {k: v.clone() for k, v in net2.state_dict().items()}
    with pytest.raises(CheckpointError, match="refusing to unpickle .*optimizer.pt"):
        load_checkpoint(path, net2, opt2, sched2)
    with pytest.raises(CheckpointError, match="refusing to unpickle"):
        safe_torch_load(path / "optimizer.pt")
    assert not marker.exists()
    assert all(torch.equal(before[k], v) for k, v in net2.state_dict().items())  # model untouched


def test_mismatched_model_names_keys(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    path = save_run(tmp_path, 1, net, opt, sched)
    bigger, opt_b, sched_b = setup_run(extra=True)
    with pytest.raises(CheckpointError, match=r"missing keys: more\.bias, more\.weight"):
        load_checkpoint(path, bigger, opt_b, sched_b)
    wider, opt_w, sched_w = setup_run(dim=8)
    with pytest.raises(CheckpointError, match=r"shape mismatch: .*norm\.weight \[6\] vs model \[8\]"):
        load_checkpoint(path, wider, opt_w, sched_w)


def test_optimizer_param_mismatch_is_clear(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    path = save_run(tmp_path, 1, net, opt, sched)
    net2, _, _ = setup_run()
    net2.norm.requires_grad_(False)  # frozen norm: fewer parameters in the optimizer
    opt2 = build_optimizer(net2, TrainConfig())
    with pytest.raises(CheckpointError, match=r"unexpected: norm\.bias, norm\.weight"):
        load_checkpoint(path, net2, opt2, None)


def test_non_finite_model_is_never_saved(tmp_path: Path) -> None:
    net, opt, sched = setup_run()
    with torch.no_grad():
        net.norm.bias[0] = float("nan")
    with pytest.raises(NonFiniteModelError, match=r"NaN/Inf values \(in norm\.bias\)"):
        save_run(tmp_path, 1, net, opt, sched)
    assert find_latest_checkpoint(tmp_path) is None
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_write_atomic(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "state.json"
    write_atomic(target, '{"a": 1}')
    write_atomic(target, b'{"a": 2}')
    assert json.loads(target.read_text()) == {"a": 2}
    assert os.listdir(target.parent) == ["state.json"]


def test_parameters_that_are_views_of_one_buffer_save_and_load(tmp_path):
    """cuDNN packs an LSTM's weights into one flat buffer on CUDA (ELMo on a lent H100 failed to save with
    safetensors' save_model): the same layout made on the CPU saves, and loads back into a fresh module."""
    from bertzoo.engine.weights import load_weights, save_model_files

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 3)
    flat = torch.cat([p.detach().flatten() for p in lstm.parameters()])
    offset = 0
    for p in lstm.parameters():
        p.data = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    assert len({p.untyped_storage().data_ptr() for p in lstm.parameters()}) == 1
    save_model_files(lstm, tmp_path)
    fresh = torch.nn.LSTM(4, 3)
    load_weights(fresh, tmp_path / "model.safetensors")
    for (name, a), b in zip(lstm.state_dict().items(), fresh.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
