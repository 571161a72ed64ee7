"""The training loop: exact resume, signals, non-finite steps, metrics; and the resumable sampler."""

from __future__ import annotations

import csv
import json
import os
import signal
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.engine import MetricsWriter, ResumableBatchSampler, RunningAverage, Trainer
from bertzoo.engine.manifest import list_checkpoints
from bertzoo.errors import BertzooError, ConfigError
from bertzoo.objectives.base import ObjectiveOutput

from helpers.loop import (
    ToyDataset,
    ToyObjective,
    collate,  # noqa: F401
    make_cfg,
    make_trainer,
)


def params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.objective.state_dict().items()}


class Crash(Exception):
    pass


def crash_at(step: int):
    def callback(trainer: Trainer, s: int) -> None:
        if s == step:
            raise Crash(f"simulated crash after step {s}")

    return callback


# ------------------------------------------------------------------------------------------ resume


@pytest.mark.parametrize(
    ("grad_accum", "n"),
    [(1, 40), (2, 48)],  # (1, 40): step 10 ends epoch 0 exactly; (2, 48): resume mid-epoch
)
def test_crash_and_resume_is_bitwise_exact(tmp_path: Path, grad_accum: int, n: int) -> None:
    straight = make_trainer(make_cfg(tmp_path / "a", grad_accum=grad_accum), n=n)
    summary = straight.train()
    assert summary["completed"] and summary["steps"] == 20

    cfg = make_cfg(tmp_path / "b", grad_accum=grad_accum)
    first = make_trainer(cfg, n=n, callbacks=[crash_at(13)])
    with pytest.raises(Crash):
        first.train()
    assert [s for s, _ in list_checkpoints(cfg.output_dir)] == [10]
    # A new process: different initial weights, RNG elsewhere; everything must come from the checkpoint.
    torch.manual_seed(999)
    resumed = make_trainer(cfg, n=n, init_seed=123)
    summary2 = resumed.train(resume="auto")

    assert summary2["steps"] == 20 and summary2["steps_this_session"] == 10
    a, b = params(straight), params(resumed)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert summary2["tokens_seen"] == summary["tokens_seen"]
    # The metrics of the crashed attempt after step 10 were dropped, so each step is logged once.
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15, 20]
    final = tmp_path / "b" / "final"
    assert (final / "model.safetensors").is_file() and (final / "config.json").is_file()
    assert [s for s, _ in list_checkpoints(cfg.output_dir)] == [10, 20]


def test_resume_from_explicit_path_and_fresh_run_guard(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, max_steps=6, save_every=3, keep_last=0)
    make_trainer(cfg).train()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 6]
    with pytest.raises(ConfigError, match="--resume auto"):
        make_trainer(cfg).train()  # a fresh run would mix with the existing checkpoints
    longer = make_trainer(make_cfg(tmp_path, max_steps=8, save_every=3, keep_last=0))
    summary = longer.train(resume=str(tmp_path / "checkpoints" / "step-00000003"))
    assert summary["steps"] == 8 and summary["steps_this_session"] == 5


# ----------------------------------------------------------------------------------------- signals


def test_sigterm_checkpoints_and_returns(tmp_path: Path) -> None:
    k = 4
    sent = []

    def send_sigterm(trainer: Trainer, step: int) -> None:
        if step == k:
            sent.append(step)
            os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    cfg = make_cfg(tmp_path, save_every=0)
    summary = make_trainer(cfg, callbacks=[send_sigterm]).train()
    assert sent == [k]
    assert summary["completed"] is False and summary["stop_reason"] == "SIGTERM"
    assert summary["steps"] == k + 1  # the step in progress when the signal came was finished
    assert summary["last_checkpoint"].endswith(f"step-{k + 1:08d}")
    assert (Path(summary["last_checkpoint"]) / "manifest.json").is_file()
    assert not (tmp_path / "final").exists()
    assert signal.getsignal(signal.SIGTERM) == previous  # handler restored

    summary = make_trainer(cfg).train(resume="auto")
    assert summary["completed"] and summary["steps"] == 20 and (tmp_path / "final").is_dir()


# ------------------------------------------------------------------------------------ non-finite


def test_non_finite_steps_are_skipped_and_counted(tmp_path: Path) -> None:
    trainer = make_trainer(make_cfg(tmp_path, max_steps=8, save_every=0))
    trainer.objective.poison = {2, 5}  # steps 3 and 6
    snapshots = {}

    def snapshot(tr: Trainer, step: int) -> None:
        snapshots[step] = params(tr)

    trainer.callbacks.append(snapshot)
    summary = trainer.train()
    assert summary["skipped_steps"] == 2 and summary["steps"] == 8
    for name, before in snapshots[2].items():  # step 3 was skipped: no parameter moved
        assert torch.equal(before, snapshots[3][name]), name
    assert not all(torch.equal(snapshots[3][k], v) for k, v in snapshots[4].items())  # step 4 updated
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["skipped_steps"] == 2
    assert all(r["loss"] is not None and r["loss"] == r["loss"] for r in rows)  # NaN steps not averaged in
    state = json.loads((Path(summary["last_checkpoint"]) / "trainer_state.json").read_text())
    assert state["skipped_steps"] == 2


def test_ten_consecutive_non_finite_steps_stop_training(tmp_path: Path) -> None:
    trainer = make_trainer(make_cfg(tmp_path, max_steps=30, save_every=0))
    trainer.objective.poison = set(range(3, 100))
    with pytest.raises(BertzooError, match=r"10 consecutive steps .*\(last at step 13\)"):
        trainer.train()
    assert trainer.step == 12  # steps 4..13 failed; the failing step 13 was never counted


# --------------------------------------------------------------------------------------- metrics


def test_metrics_files_and_plot(tmp_path: Path) -> None:
    evals = []

    def eval_fn(objective: nn.Module) -> dict[str, float]:
        evals.append(objective.training)
        torch.rand(5)  # consumes RNG: must not change training
        return {"loss": 1.0 / (len(evals) + 1)}

    cfg = make_cfg(tmp_path, max_steps=10, eval_every=5, save_every=0)
    summary = make_trainer(cfg, eval_fn=eval_fn, run_config={"train": {"lr": cfg.lr}, "note": "x"}).train()
    assert evals == [False, False]  # evaluated in eval mode at steps 5 and 10
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train_rows] == [5, 10]
    for key in ("mlm_loss", "mlm_acc", "lr", "tokens_per_s", "elapsed_s", "grad_norm", "epoch"):
        assert isinstance(train_rows[0][key], (int, float)), key
    assert 0.0 <= train_rows[0]["mlm_acc"] <= 1.0
    with open(tmp_path / "metrics.csv", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == len(rows) == 4
    assert "eval_loss" in csv_rows[0] and float(csv_rows[-1]["eval_loss"]) == pytest.approx(1 / 3)
    assert summary["best_metric"] == {"name": "eval_loss", "value": pytest.approx(1 / 3), "step": 10}
    assert (tmp_path / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "run_config.json").read_text())["note"] == "x"
    assert summary["tokens_per_s"] > 0 and summary["final_metrics"]["mlm_acc"] == train_rows[-1]["mlm_acc"]

    # Evaluation forks the RNG, so the trained weights equal those of a run without evaluation.
    plain = make_trainer(make_cfg(tmp_path / "plain", max_steps=10, save_every=0))
    plain.train()
    with_eval = make_trainer(make_cfg(tmp_path / "again", max_steps=10, eval_every=5, save_every=0), eval_fn=eval_fn)
    with_eval.train()
    for name, value in params(plain).items():
        assert torch.equal(value, params(with_eval)[name]), name


def test_metrics_writer_new_keys_and_truncate(tmp_path: Path) -> None:
    w = MetricsWriter(tmp_path)
    w.write({"step": 1, "loss": 2.0})
    w.write({"step": 2, "loss": 1.5, "eval_loss": float("nan")})
    w.write({"step": 3, "loss": 1.0})
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", "loss", "eval_loss"]
    assert [r["loss"] for r in rows] == ["2.0", "1.5", "1.0"] and rows[1]["eval_loss"] == ""
    w.truncate_after(2)
    # A new writer (a resumed process) keeps appending under the widened header.
    MetricsWriter(tmp_path).write({"step": 3, "loss": 0.5, "eval_loss": 0.7})
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3] and lines[1]["eval_loss"] is None
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["loss"], r["eval_loss"]) for r in rows] == [
        ("1", "2.0", ""),
        ("2", "1.5", ""),
        ("3", "0.5", "0.7"),
    ]


def test_running_average_weights_by_counts() -> None:
    avg = RunningAverage()
    avg.update({"acc": torch.tensor(1.0), "loss": torch.tensor(2.0)}, {"acc": torch.tensor(1)})
    avg.update({"acc": torch.tensor(0.0), "loss": torch.tensor(4.0)}, {"acc": torch.tensor(3)})
    other = RunningAverage()
    other.update({"acc": torch.tensor(1.0)}, {"acc": 4})
    avg.merge(other)
    out = avg.compute()
    assert out["acc"] == pytest.approx(5 / 8) and out["loss"] == pytest.approx(3.0)
    avg.reset()
    assert avg.compute() == {}


# --------------------------------------------------------------------------------------- sampler


def _drain(sampler: ResumableBatchSampler) -> list[list[int]]:
    return [list(b) for b in sampler]


def test_sampler_order_is_world_size_independent() -> None:
    single = _drain(ResumableBatchSampler(50, 4, seed=3))
    r0 = _drain(ResumableBatchSampler(50, 2, seed=3, rank=0, world_size=2))
    r1 = _drain(ResumableBatchSampler(50, 2, seed=3, rank=1, world_size=2))
    assert len(single) == 12 and [a + b for a, b in zip(r0, r1, strict=True)] == single
    flat = [i for b in single for i in b]
    assert len(set(flat)) == 48 and set(flat) <= set(range(50))

    s = ResumableBatchSampler(50, 4, seed=3)
    s.set_epoch(1)
    assert _drain(s) != single  # a new epoch, a new order
    s.set_epoch(0)
    assert _drain(s) == single


def test_sampler_resumes_across_world_sizes() -> None:
    full = _drain(ResumableBatchSampler(48, 4, seed=1))
    s = ResumableBatchSampler(48, 4, seed=1)
    it = iter(s)
    consumed = [next(it) for _ in range(5)]
    state = s.state_dict()
    assert state["offset"] == 20 and consumed == full[:5]
    # Continue the same epoch on two processes with batch_size 2: same examples, same order.
    ranks = []
    for r in range(2):
        t = ResumableBatchSampler(48, 2, seed=99, rank=r, world_size=2)  # the saved seed wins
        t.load_state_dict(state)
        ranks.append(_drain(t))
    assert [a + b for a, b in zip(*ranks, strict=True)] == full[5:]
    skipper = ResumableBatchSampler(48, 4, seed=1)
    skipper.skip(3)
    assert len(skipper) == 9 and _drain(skipper) == full[3:]
    with pytest.raises(BertzooError, match="dataset of 48 examples"):
        ResumableBatchSampler(40, 4, seed=1).load_state_dict(state)


def test_sampler_no_drop_last_pads_for_ddp() -> None:
    single = _drain(ResumableBatchSampler(10, 4, seed=0, drop_last=False))
    assert [len(b) for b in single] == [4, 4, 2]
    ranks = [_drain(ResumableBatchSampler(10, 2, seed=0, drop_last=False, rank=r, world_size=2)) for r in (0, 1)]
    assert [len(b) for b in ranks[0]] == [2, 2, 2] and [len(b) for b in ranks[1]] == [2, 2, 2]
    assert set(i for r in ranks for b in r for i in b) == set(range(10))


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device"):
        make_trainer(make_cfg(tmp_path, precision="fp16"))
    with pytest.raises(ConfigError, match="grad_accum"):
        make_trainer(make_cfg(tmp_path, grad_accum=0))
    with pytest.raises(ConfigError, match="fewer than one global batch"):
        make_trainer(make_cfg(tmp_path, batch_size=64))


def test_max_minutes_stops_with_a_checkpoint_and_a_final_model(tmp_path: Path) -> None:
    """A spent time budget ends the run: checkpoint (to continue) and final/ (for the next stage)."""
    summary = make_trainer(make_cfg(tmp_path, max_minutes=1e-9, save_every=0)).train()
    assert summary["stop_reason"] == "max_minutes" and summary["steps"] == 1 and not summary["completed"]
    assert summary["last_checkpoint"].endswith("step-00000001")
    assert summary["final_dir"] == str(tmp_path / "final") and (tmp_path / "final" / "config.json").is_file()


class FakeCompiled(nn.Module):
    """What the patched torch.compile returns: calls the real module unless `failure` is set, which the
    first call raises (as compilation at the first forward would)."""

    def __init__(self, inner: nn.Module, failure: Exception | None = None) -> None:
        super().__init__()
        self._orig_mod = inner
        self.failure = failure

    def forward(self, batch: Batch) -> ObjectiveOutput:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        return self._orig_mod(batch)


def test_compile_failure_falls_back_to_eager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._dynamo.exc import BackendCompilerFailed

    failure = BackendCompilerFailed(lambda gm, example_inputs: gm, RuntimeError("no C++ compiler"), None)
    monkeypatch.setattr(torch, "compile", lambda model, **kw: FakeCompiled(model, failure))
    with pytest.warns(UserWarning, match="torch.compile failed at the first step"):
        summary = make_trainer(make_cfg(tmp_path, compile=True, max_steps=3, save_every=0)).train()
    assert summary["completed"] and summary["final_metrics"]["loss"] == summary["final_metrics"]["loss"]


class BadBatch(ToyObjective):
    def forward(self, batch: Batch) -> ObjectiveOutput:
        raise ValueError("bad batch: token id 99 is outside the vocabulary")


def train_bad_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception | None) -> list[str]:
    """Train BadBatch under a patched torch.compile; the warnings raised on the way."""
    monkeypatch.setattr(torch, "compile", lambda model, **kw: FakeCompiled(model, failure))
    cfg = make_cfg(tmp_path, compile=True, max_steps=3)
    trainer = Trainer(BadBatch(), ToyDataset(48), collate, cfg, progress=False)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ValueError, match="bad batch: token id 99"):
        warnings.simplefilter("always")
        trainer.train()
    return [str(w.message) for w in caught]


def test_a_model_error_at_the_first_compiled_step_is_raised_as_itself(tmp_path, monkeypatch) -> None:
    """An error of the model or the data is not a compile failure: raised, no fallback, no compile warning."""
    warned = train_bad_batch(tmp_path, monkeypatch, failure=None)
    assert not [w for w in warned if "torch.compile" in w]


def test_a_compile_error_that_eager_repeats_is_raised_as_the_eager_error(tmp_path, monkeypatch) -> None:
    """Dynamo wraps real errors it meets while tracing; eager failing too proves the model is at fault."""
    from torch._dynamo.exc import TorchRuntimeError

    warned = train_bad_batch(tmp_path, monkeypatch, failure=TorchRuntimeError("Dynamo failed to run FX node"))
    assert not [w for w in warned if "torch.compile" in w]


# ------------------------------------------------------------------------ exact loss normalisation


class CountedToy(ToyObjective):
    """ToyObjective without dropout that splits its loss into a term with host-side item counts."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Identity()

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        return {"mlm": int((batch.labels != IGNORE_INDEX).sum())}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        out = super().forward(batch)
        out.terms = {"mlm": (out.loss, 1.0)}
        return out


def train_weights(tmp_path: Path, objective_cls, **kw) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    cfg = make_cfg(tmp_path, max_steps=6, save_every=0, clip_norm=None, **kw)
    trainer = Trainer(objective_cls(), ToyDataset(48), collate, cfg, progress=False)
    trainer.train()
    return params(trainer)


@pytest.mark.parametrize("objective_cls", [CountedToy, ToyObjective])
def test_accumulation_equals_one_big_batch_only_with_item_counts(tmp_path: Path, objective_cls) -> None:
    """4 micro-batches of 2 == 1 batch of 8 when terms are weighted by their share of the masked tokens
    of the whole step; the plain mean of micro-batch means (no counts) weights tokens unequally."""
    big = train_weights(tmp_path / "big", objective_cls, batch_size=8)
    accum = train_weights(tmp_path / "accum", objective_cls, batch_size=2, global_batch_size=8)
    gap = max(float((big[k] - accum[k]).abs().max()) for k in big)
    if objective_cls is CountedToy:
        assert gap < 1e-6
    else:
        assert gap > 1e-4  # the masked-token counts differ between micro-batches, so this path is inexact


def test_global_batch_size_sets_accumulation(tmp_path: Path) -> None:
    trainer = make_trainer(make_cfg(tmp_path, batch_size=4, global_batch_size=12))
    assert trainer.cfg.grad_accum == 3
    with pytest.raises(ConfigError, match="contradicts"):
        make_trainer(make_cfg(tmp_path / "b", batch_size=4, global_batch_size=12, grad_accum=2))
