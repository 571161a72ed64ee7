"""Precision follows the hardware: `auto` picks bf16 only where it is native and measured faster."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from bertzoo import precision as P
from bertzoo.train.pretrain import pretrain

from helpers.pretrain import tiny_config

CPU = torch.device("cpu")


@pytest.fixture
def cpu(monkeypatch):
    """Pretend to be a CPU with the given flags and a probe with the given bf16/fp32 rates."""

    def make(flags: set[str] | None, fp32: float = 100.0, bf16: float = 1.0):
        monkeypatch.setattr(P, "_cpu_flags", lambda: flags)
        monkeypatch.setattr(P, "probe_cpu_bf16", lambda: P.Bf16Probe(bool(flags), fp32, bf16))
        monkeypatch.setattr(P, "_warned", set())

    return make


def test_auto_is_fp32_on_avx2_without_probing(cpu, monkeypatch):
    cpu({"avx", "avx2", "fma"})

    def no_probe():
        raise AssertionError("an AVX2-only CPU must not be probed: it has no bf16 units")

    monkeypatch.setattr(P, "probe_cpu_bf16", no_probe)
    assert P.resolve_precision("auto", CPU) == "fp32"


def test_auto_is_bf16_on_amx_when_the_probe_confirms(cpu):
    cpu({"avx512f", "amx_bf16", "amx_tile"}, fp32=400.0, bf16=1600.0)
    assert P.resolve_precision("auto", CPU) == "bf16"


def test_auto_is_fp32_when_the_probe_contradicts_the_flags(cpu):
    # avx512_bf16 advertised but (e.g. under a hypervisor) slower than fp32: trust the measurement.
    cpu({"avx512f", "avx512_bf16"}, fp32=200.0, bf16=150.0)
    assert P.resolve_precision("auto", CPU) == "fp32"


def test_explicit_bf16_runs_but_warns_once_with_the_slowdown(cpu):
    cpu({"avx2"}, fp32=114.0, bf16=0.9)
    with pytest.warns(UserWarning, match=r"127x slower"):
        assert P.resolve_precision("bf16", CPU) == "bf16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert P.resolve_precision("bf16", CPU) == "bf16"  # second time: silent


def test_explicit_fp32_and_fp16_pass_through_and_nonsense_is_refused(cpu):
    cpu({"avx2"})
    assert P.resolve_precision("fp32", CPU) == "fp32"
    assert P.resolve_precision("fp16", torch.device("cuda")) == "fp16"
    with pytest.raises(ValueError, match="precision must be one of"):
        P.resolve_precision("int8", CPU)


def test_autocast_dtype():
    assert P.autocast_dtype("fp32") is None
    assert P.autocast_dtype("bf16") is torch.bfloat16
    assert P.autocast_dtype("fp16") is torch.float16


def test_probe_measures_positive_rates():
    P.probe_cpu_bf16.cache_clear()
    probe = P.probe_cpu_bf16()
    assert probe.fp32_gflops > 0 and probe.bf16_gflops > 0
    assert probe.speedup == pytest.approx(probe.bf16_gflops / probe.fp32_gflops)


def test_probe_takes_turns_on_one_thread_and_keeps_the_best_of_each(monkeypatch):
    """A stall in one timing (another job took the core) must not decide the precision: the dtypes alternate
    and each keeps its best rate; the probe runs on one thread and gives the caller's thread count back."""
    calls = []
    slow_first = iter([2.0, 200.0, 100.0, 4.0, 90.0, 190.0])  # fp32, bf16, fp32, bf16, ...

    def timed(dtype, *a, **k):
        calls.append((dtype, torch.get_num_threads()))
        return next(slow_first)

    monkeypatch.setattr(P, "_matmul_gflops", timed)
    before = torch.get_num_threads()
    P.probe_cpu_bf16.cache_clear()
    try:
        probe = P.probe_cpu_bf16()
    finally:
        P.probe_cpu_bf16.cache_clear()
    assert [d for d, _ in calls] == [torch.float32, torch.bfloat16] * 3
    assert {t for _, t in calls} == {1} and torch.get_num_threads() == before
    assert (probe.fp32_gflops, probe.bf16_gflops) == (100.0, 200.0) and probe.speedup == 2.0


def test_a_run_records_what_auto_became(cpu, synthetic_shards, tmp_path):
    cpu({"avx2"})
    cfg = tiny_config(synthetic_shards, tmp_path / "run", max_steps=2, precision="auto")
    cfg.train.device = "cpu"  # what auto picks on an AVX2 CPU, also on a machine with a GPU
    summary = pretrain(cfg)
    assert summary["precision"] == "fp32"
    resolved = json.loads((tmp_path / "run" / "run_config.json").read_text())["resolved"]
    assert resolved["precision"] == "fp32" and resolved["device"] == "cpu"
    assert resolved["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_time_capped_run_leaves_a_loadable_final_model(synthetic_shards, tmp_path):
    """A run stopped by train.max_minutes writes final/ (and evaluates) so a next stage can read it."""
    from bertzoo.objectives.mlm import MaskedLM

    cfg = tiny_config(synthetic_shards, tmp_path / "run", max_steps=10_000, max_minutes=1e-4)
    summary = pretrain(cfg)
    assert summary["stop_reason"] == "max_minutes" and not summary["completed"]
    assert 1 <= summary["steps"] < 10_000
    final = tmp_path / "run" / "final"
    assert summary["final_dir"] == str(final)
    model = MaskedLM.from_pretrained(final)
    assert sum(p.numel() for p in model.parameters()) > 0
    assert (final / "tokenizer.json").is_file() or any(final.glob("vocab*"))
