"""Fine-tuning, assembled: tokenizer + encoder + task -> features -> techniques -> Trainer -> report.

`finetune(cfg)` runs a `FinetuneConfig` end to end and leaves in `train.output_dir`:

    checkpoints/        resumable checkpoints (--resume auto)
    best/               the model of the best dev evaluation (train.metric_for_best)
    model/              the final fine-tuned model: config.json (encoder + `task` head config),
                        model.safetensors, tokenizer files and finetune_config.json
    report.json         dev and test metrics of the best model plus the task's tables
    confusion_matrix.png  when the task reports a confusion matrix
    metrics.png, metrics.jsonl, metrics.csv   the training curve

`bertzoo.loading.load_finetuned(dir)` rebuilds (task, model, tokenizer) from `model/` (or `best/`, or a
checkpoint) for `bertzoo evaluate` / `bertzoo predict` (`bertzoo.train.evaluate`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.config import FinetuneConfig, TrainConfig, resolve_batching, to_plain
from bertzoo.engine.evaluation import BEST_DIR
from bertzoo.errors import CheckpointError, ConfigError, DataError
from bertzoo.io import FINETUNE_CONFIG
from bertzoo.loading import BUILTIN_PREFIX, HUB_PREFIX
from bertzoo.loading import resolve as resolve_model_path  # a model spec: path, builtin:NAME or hf:ID
from bertzoo.tasks import POOLED_TASKS, TASKS, get_task, mark_sentence_only, poolable, resolve_pooling
from bertzoo.variants import prepare_task

MODEL_DIR = "model"
REPORT = "report.json"
SPLITS = ("train", "dev", "test")


def check_start(cfg: FinetuneConfig) -> None:
    """ConfigError unless the run names exactly one start: a model directory or a `model_config`."""
    if bool(cfg.model) == bool(cfg.model_config):
        raise ConfigError(
            "set exactly one of `model` (a pretrained directory or builtin:all-minilm-l6-v2) and `model_config` "
            "(random init, e.g. {preset: bert-mini})"
        )


def load_tokenizer(cfg: FinetuneConfig):
    """The tokenizer of `cfg.tokenizer`, else of the model directory. The start is checked first, so a missing
    model is reported as such even when the config names a tokenizer of its own."""
    from bertzoo.data.tokens.tokenizer import Tokenizer

    check_start(cfg)
    model_dir = resolve_model_path(cfg.model) if cfg.model else None
    source = cfg.tokenizer or (str(model_dir) if model_dir is not None else "")
    if not source:
        raise ConfigError(
            "no tokenizer: set `tokenizer` (a directory with vocab.txt or tokenizer.json) when training from "
            "model_config, or start from a model directory"
        )
    path = resolve_model_path(source) if source.startswith((BUILTIN_PREFIX, HUB_PREFIX)) else Path(source)
    return Tokenizer.load(path)


def build_encoder(cfg: FinetuneConfig, tokenizer) -> nn.Module:
    """The model a task goes on: pretrained weights from `cfg.model`, or random init from `cfg.model_config`.

    A bare `Encoder`, except for a task that generates with a decoder (`Task.uses_decoder`: seq2seq) on an
    encoder-decoder (T5, MASS): then the whole `EncoderDecoderLM` (encoder, decoder and LM head, every part
    pretrained, or initialised as the variant's `build` does). Other tasks read an encoder-decoder's
    encoder alone."""
    from bertzoo.loading import load_encoder, load_encoder_decoder, read_config
    from bertzoo.variants import get_variant, model_config_of

    check_start(cfg)
    uses_decoder = bool(getattr(TASKS.get(cfg.task), "uses_decoder", False))
    if cfg.model:
        path = resolve_model_path(cfg.model)  # once: an hf: model is downloaded here
        _, config, _ = read_config(path)
        whole = uses_decoder and config.is_encoder_decoder
        encoder = load_encoder_decoder(path) if whole else load_encoder(path)
    else:
        variant, config = model_config_of(cfg.model_config, tokenizer)
        whole = uses_decoder and config.is_encoder_decoder
        if whole:
            encoder = _seeded(cfg.train.seed, lambda: variant.build(config))
        else:
            encoder = _seeded(cfg.train.seed, lambda: _encoder_from_config(config))
            if variant.use_tokenizer is not None:
                variant.use_tokenizer(encoder, tokenizer)  # what it takes from the vocabulary (ELMo's characters)
    c = encoder.config
    if tokenizer.vocab_size > c.vocab_size:
        raise ConfigError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's embedding table only {c.vocab_size}; "
            "use the tokenizer the model was trained with"
        )
    # The position table's length (unbounded without one: T5's positions are relative, ELMo's LSTMs have none).
    # An encoder-decoder reads the source and the target as two sequences, each with its own positions.
    embeddings = getattr(encoder.encoder if whole else encoder, "embeddings", None)
    max_position = embeddings.max_position if embeddings is not None else 1 << 62
    limits = [("data.max_seq_len", cfg.data.max_seq_len)]
    if whole:
        # The decoder's positions hold the training target and, in evaluation, the generated one (its start
        # token first): refused here rather than at the first evaluation, after the training.
        limits += [("data.max_target_len", cfg.data.max_target_len)]
        limits += [("generation.max_new_tokens", cfg.generation.max_new_tokens)]
    for name, value in limits:
        if value > max_position:
            raise ConfigError(f"{name}={value} exceeds the model's max_position={max_position}; lower {name}")
    # What the family's backbone cannot do in fine-tuning, refused before any data is read (ELMo).
    check = get_variant(c.variant).check_finetune
    if check is not None:
        check(cfg)
    return encoder


def _encoder_from_config(config) -> nn.Module:
    from bertzoo.loading import empty_encoder

    return empty_encoder(config)


def _seeded(seed: int, fn):
    """Run `fn` with torch's RNG seeded from the run's seed, leaving the global RNG state untouched:
    a head (or a from-scratch model) gets the same initial weights in every attempt of the run."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fn()


def add_pooler(encoder: nn.Module) -> None:
    """Give an encoder without a pooler a freshly initialised one (and record it in its config)."""
    from bertzoo.models.encoder import Pooler, init_weights

    if encoder.pooler is not None:
        return
    pooler = Pooler(encoder.config.hidden_size, encoder.config.pooler_act)
    pooler.apply(lambda m: init_weights(m, encoder.config.initializer_range))
    encoder.pooler = pooler.to(next(encoder.parameters()).device)
    encoder.config.pooler = True


def has_split(cfg: FinetuneConfig, split: str) -> bool:
    """A built-in dataset has every split; files only those configured; a mixture the splits of any task."""
    d = cfg.data
    return bool(d.dataset) or bool(getattr(d, split)) or any(e.dataset or getattr(e, split) for e in d.mixture)


def build_model(task, encoder: nn.Module, cfg: FinetuneConfig) -> nn.Module:
    """task.build(encoder), with the head config completed for saving (task name, labels, problem)."""
    t = cfg.technique
    # Only a [CLS] classifier reads a pooler (a causal model's auto pooling is its last token: none added), and
    # only an Encoder takes one (XLNet: auto pooling is its last token, `cls` the state of [CLS] itself).
    pooled = poolable(encoder)
    cls = resolve_pooling(t.pooling, encoder) == "cls"
    if cfg.task in POOLED_TASKS and not t.feature_layers and cls and pooled:
        _seeded(cfg.train.seed + 1, lambda: add_pooler(encoder))
    model = _seeded(cfg.train.seed, lambda: task.build(encoder))
    if cfg.model and getattr(model, "pretrained_head_prefix", None):
        load_pretrained_head(model, cfg.model)
    mark_sentence_only(model, cfg.task)
    head = {**task.head_config(), **(getattr(model, "head_config", None) or {})}
    if cfg.task == "classification":
        head.setdefault("problem", cfg.problem)
    model.head_config = head
    return model


def load_pretrained_head(model: nn.Module, path: str) -> int:
    """Copy the head a task model shares with pretraining (seq2seq on a bidirectional model: the
    masked-LM head, `model.pretrained_head_prefix` = "mlm_head.") from the checkpoint at `path` into
    `model.head`; returns how many tensors came from it (0: the checkpoint has no such head, e.g. a bare
    encoder, and the head keeps its fresh initialisation)."""
    from bertzoo.loading import read_checkpoint

    prefix = model.pretrained_head_prefix
    _, _, state, _ = read_checkpoint(resolve_model_path(path))
    own = model.head.state_dict()
    found = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix) and k[len(prefix) :] in own}
    for key, value in found.items():
        if value.shape != own[key].shape:
            raise CheckpointError(
                f"{path}: {prefix}{key} has shape {tuple(value.shape)}, the model needs {tuple(own[key].shape)}"
            )
    model.head.load_state_dict(found, strict=False)
    model.head_from_pretraining = len(found)
    return len(found)


def _save_extra(tokenizer, cfg: FinetuneConfig):
    plain = json.dumps(to_plain(cfg), indent=2) + "\n"

    def save(directory: Path) -> None:
        tokenizer.save(directory)
        (Path(directory) / FINETUNE_CONFIG).write_text(plain, encoding="utf-8")

    return save


def _prefixed(metrics: dict[str, float]) -> dict[str, float]:
    from bertzoo.engine.evaluation import eval_metric_key

    return {eval_metric_key(k): float(v) for k, v in metrics.items()}


def finetune(cfg: FinetuneConfig, resume: str | None = None) -> dict[str, Any]:
    """Run (or resume) a fine-tuning job; returns the trainer's summary plus dev/test metrics of the
    best model and where the model and report went."""
    from bertzoo.engine.distributed import is_main
    from bertzoo.engine.loop import Trainer
    from bertzoo.tasks.lora import merge_lora
    from bertzoo.tasks.techniques import apply_techniques, trainable_summary

    tokenizer = load_tokenizer(cfg)
    encoder = build_encoder(cfg, tokenizer)
    task = get_task(cfg, tokenizer)
    prepare_task(task, encoder, tokenizer)  # ERNIE-THU: task text linked to its knowledge graph
    examples = _load_splits(task, cfg)

    # Build before featurizing: features may depend on the model (a causal model's similarity pairs
    # are encoded in both orders), as they do when a saved model is loaded.
    model = build_model(task, encoder, cfg)
    datasets = {split: task.featurize(rows, split) for split, rows in examples.items()}
    if len(datasets["train"]) == 0:
        raise DataError("no training features were produced; check the data and data.max_seq_len")
    techniques = apply_techniques(model, cfg.technique, seed=cfg.train.seed)
    schedule = techniques.pop("schedule", None)  # gradual unfreezing or LP-FT: what trains changes by epoch
    _say_trainable(model, techniques)
    groups = _param_groups(model, cfg, schedule)
    train_cfg, eval_fn, metric_for_best = _dev_evaluation(cfg, task, examples, datasets)
    trainer = Trainer(
        model,
        datasets["train"],
        task.collate,
        train_cfg,
        save_extra=_save_extra(tokenizer, cfg),
        run_config=to_plain(cfg),
        eval_fn=eval_fn,
        num_workers=cfg.data.num_workers,
        param_groups=groups,
        epoch_callbacks=[schedule] if schedule is not None else (),
        metric_for_best=metric_for_best,
        drop_last=False,  # fine-tuning sees every example each epoch; dynamic padding makes a short batch cheap
    )
    trainer.trackers.hold()  # train.report_to: the dev/test report below goes to the same tracker runs
    summary = trainer.train(resume=resume)
    summary["trainable_parameters"] = trainable_summary(model)
    if schedule is not None:
        schedule.apply(10**9)  # everything trainable again (for saving nothing changes; for later use)
    if not summary["completed"] and summary["stop_reason"] != "max_minutes":
        trainer.trackers.close()
        return summary  # interrupted: continue with --resume auto; a spent time budget still reports

    out = Path(train_cfg.output_dir)
    summary["model_from"] = _load_best(model, out)
    # LoRA folded into the weights once, here: what is evaluated below is exactly what model/ holds, a plain
    # model (the run's best/, final/ and checkpoints already hold merged weights, the LoRA state beside them).
    model = merge_lora(model)
    model.eval()
    # Test before dev: a task may tune something on the split it evaluates (QA's no-answer threshold)
    # and keep it in the saved model; evaluating dev last makes that value dev's, never test's.
    results = {
        split: task.evaluate(model, examples[split], datasets[split]) for split in ("test", "dev") if split in datasets
    }
    results = {split: results[split] for split in ("dev", "test") if split in results}
    report = _report(cfg, summary, examples)
    for split, result in results.items():
        report[split] = {"metrics": result.metrics, "report": result.report}
        summary[split] = result.metrics
    if is_main():
        _write_results(out, model, tokenizer, cfg, report, results, summary)
    trainer.trackers.report("report", report)
    return summary


def _say_trainable(model: nn.Module, techniques: dict[str, Any]) -> None:
    """One log line: how many parameters train, and what the techniques added (main rank)."""
    from bertzoo.engine.distributed import is_main
    from bertzoo.engine.progress import say
    from bertzoo.tasks.techniques import trainable_summary

    counts = trainable_summary(model)
    done = "".join(f", {k}={v}" for k, v in techniques.items() if not isinstance(v, bool))
    if is_main():
        say(
            f"trainable parameters: {counts['trainable']:,} of {counts['total']:,} "
            f"({100 * counts['trainable'] / max(1, counts['total']):.2f}%){done}"
        )


def _load_splits(task: Any, cfg: FinetuneConfig) -> dict[str, list[dict[str, Any]]]:
    """The task's examples of every configured split (the training subset applied, empty splits dropped);
    an empty training split is a DataError."""
    examples: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS:  # train first: it fixes the label set
        if split == "train" or has_split(cfg, split):
            examples[split] = task.load(split)
            if split == "train":
                examples[split] = training_subset(examples[split], cfg.data.max_train_examples)
            if not examples[split]:
                if split == "train":
                    raise DataError("the training split is empty; check data.train / data.dataset")
                del examples[split]
    return examples


def _param_groups(model: nn.Module, cfg: FinetuneConfig, schedule: Any) -> list[dict[str, Any]] | None:
    """Layer-wise learning-rate groups when the technique decays rates by layer or unfreezes by epoch, else None."""
    from bertzoo.tasks.techniques import layerwise_lr_groups

    if cfg.technique.layer_lr_decay == 1.0 and schedule is None:
        return None
    return layerwise_lr_groups(
        model,
        cfg.train.lr,
        cfg.technique.layer_lr_decay,
        cfg.train.weight_decay,
        include_frozen=schedule is not None,
    )


def _dev_evaluation(
    cfg: FinetuneConfig, task: Any, examples: dict[str, list[dict[str, Any]]], datasets: dict[str, Any]
) -> tuple[TrainConfig, Callable[[nn.Module], dict[str, float]] | None, str | None]:
    """(train config, eval_fn, metric_for_best) for the Trainer: evaluation on dev when there is a dev split,
    by default once per epoch."""
    from bertzoo.engine.distributed import dist_info
    from bertzoo.engine.sampler import examples_per_epoch

    train_cfg = cfg.train
    if "dev" not in datasets:
        return train_cfg, None, None
    dev_ex, dev_ds = examples["dev"], datasets["dev"]

    def eval_fn(m: nn.Module) -> dict[str, float]:
        return _prefixed(task.evaluate(m, dev_ex, dev_ds).metrics)

    metric_for_best = f"eval_{task.default_metric}"
    if not train_cfg.eval_every:
        # Evaluate once per epoch by default: the unit early stopping and best-model selection count in.
        world = dist_info().world_size
        accum = resolve_batching(train_cfg, world).grad_accum
        batches = math.ceil(examples_per_epoch(datasets["train"]) / (train_cfg.batch_size * world))
        per_epoch = math.ceil(batches / accum)
        train_cfg = dataclasses.replace(train_cfg, eval_every=max(1, per_epoch))
    return train_cfg, eval_fn, metric_for_best


def _load_best(model: nn.Module, out: Path) -> str:
    """Load the best evaluation's weights into `model` when `best/` holds them; which model this is ("best"/"last")."""
    best = out / BEST_DIR
    if (best / "model.safetensors").is_file():
        from bertzoo.engine.weights import load_weights

        load_weights(model, best / "model.safetensors")
        return "best"
    return "last"


def _report(cfg: FinetuneConfig, summary: dict[str, Any], examples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The head of `report.json`: the task, the model, how training went and the examples per split."""
    return {
        "task": cfg.task,
        "model": cfg.model or {"model_config": cfg.model_config},
        "model_from": summary["model_from"],
        "best_metric": summary.get("best_metric"),
        "steps": summary["steps"],
        "stop_reason": summary.get("stop_reason"),
        "train_seconds": summary.get("elapsed_s"),
        "trainable_parameters": summary["trainable_parameters"],
        "examples": {split: len(examples[split]) for split in examples},
    }


def _write_results(
    out: Path,
    model: nn.Module,
    tokenizer: Any,
    cfg: FinetuneConfig,
    report: dict[str, Any],
    results: dict[str, Any],
    summary: dict[str, Any],
) -> None:
    """Write the final model, the report, the confusion matrix and the summary into `out` (main rank)."""
    from bertzoo.interop.model_card import write_model_card, write_run_cards
    from bertzoo.io import write_atomic, write_dir_atomic

    model_dir = out / MODEL_DIR

    run_config = {**to_plain(cfg), "resolved": {k: summary.get(k) for k in ("device", "precision", "cpu_capability")}}

    def write_model(directory: Path) -> None:
        model.save_pretrained(directory)
        _save_extra(tokenizer, cfg)(directory)
        write_model_card(directory, run_config=run_config, report=report)  # README.md: never fails the save

    write_dir_atomic(model_dir, write_model)
    write_run_cards(out, run_config=run_config, report=report)
    write_atomic(out / REPORT, json.dumps(report, indent=2, default=json_default) + "\n")
    shown = results.get("test") or results.get("dev")
    if shown is not None and plot_confusion(shown.report, out / "confusion_matrix.png"):
        summary["confusion_matrix"] = str(out / "confusion_matrix.png")
    summary["model_dir"] = str(model_dir)
    summary["report"] = str(out / REPORT)
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, default=json_default) + "\n")


def training_subset(examples: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """A fixed random subset of `limit` examples in their original order (all when limit is None)."""
    if limit is None or limit >= len(examples):
        return examples
    if limit < 1:
        raise ConfigError(f"data.max_train_examples must be >= 1 or null (all), got {limit}")
    keep = np.sort(np.random.default_rng(0).permutation(len(examples))[:limit])
    return [examples[i] for i in keep]


def json_default(obj: Any) -> Any:
    """What json.dumps writes for a value it cannot: an array as its list, anything else as its string."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def plot_confusion(report: dict[str, Any], png_path: str | Path) -> Path | None:
    """Draw `report["confusion_matrix"]` (rows = gold, columns = predicted) labelled with
    `report["labels"]`; None when the report has no matrix. Never raises for a plotting problem."""
    from bertzoo.metrics.classification import confusion_matrix_png

    matrix = report.get("confusion_matrix") if isinstance(report, dict) else None
    if matrix is None or not len(matrix):
        return None
    labels = [str(x) for x in (report.get("labels") or range(len(matrix)))]
    try:
        return confusion_matrix_png(matrix, labels, png_path)
    except Exception as exc:  # a plot must never fail a finished run
        warnings.warn(f"could not draw {png_path} ({exc})", stacklevel=2)
        return None
