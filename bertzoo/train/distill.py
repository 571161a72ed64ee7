"""Distillation, assembled: teacher + student + data -> `Distiller` phases -> Trainer -> student and report.

`distill(cfg)` runs a `DistillConfig` and leaves in `train.output_dir`:

    <phase>/          each phase's Trainer run (checkpoints/, final/, best/, metrics.*), resumable
    teacher_cache/    task stage: the teacher's logits on the training features (keyed, see teacher_cache)
    model/            the student. General stage: a pretraining directory (masked LM or encoder +
                      tokenizer) that fine-tuning or a task distillation starts from. Task stage: a
                      fine-tuned model directory (`bertzoo evaluate / predict / export` read it)
    report.json       teacher and student metrics and sizes, the layers taken, each phase's summary

The methods (`PHASES`): DistilBERT distils generally with 5 ce + 2 mlm + 1 cos at T = 2, and on a task
with soft targets plus the gold labels; TinyBERT distils generally with the intermediate losses (attention
scores, hidden states, embeddings) and on a task in two phases, intermediate then prediction (T = 1).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertzoo.config import (
    DataConfig,
    DistillConfig,
    FinetuneConfig,
    PhaseConfig,
    PretrainConfig,
    TrainConfig,
    from_dict,
    to_plain,
)
from bertzoo.errors import ConfigError
from bertzoo.objectives.distill import LOGIT_TERMS, Distiller, check_layer_map, encoder_of, uniform_layer_map

MODEL_DIR = "model"
REPORT = "report.json"
CACHE_DIR = "teacher_cache"
AUGMENT_DIR = "augment_cache"
RESERVED = (MODEL_DIR, CACHE_DIR, AUGMENT_DIR)  # names in output_dir a phase may not take

PHASES: dict[tuple[str, str], tuple[PhaseConfig, ...]] = {
    ("distilbert", "general"): (PhaseConfig("distill", {"ce": 5.0, "mlm": 2.0, "cos": 1.0}),),
    ("distilbert", "task"): (PhaseConfig("distill", {"ce": 1.0, "hard": 1.0}),),
    ("tinybert", "general"): (PhaseConfig("intermediate", {"attn": 1.0, "hidden": 1.0}),),
    ("tinybert", "task"): (
        PhaseConfig("intermediate", {"attn": 1.0, "hidden": 1.0}),
        PhaseConfig("prediction", {"ce": 1.0}),
    ),
}
TEMPERATURE = {"distilbert": 2.0, "tinybert": 1.0}
STATE_TERMS = frozenset({"cos", "attn", "hidden"})


def phases_of(cfg: DistillConfig) -> list[PhaseConfig]:
    """The configured phases, or the method's; each with its loss (the method's when empty), names unique."""
    defaults = PHASES[(cfg.method, cfg.stage)]
    phases = list(cfg.phases) or [dataclasses.replace(p) for p in defaults]
    names = [p.name for p in phases]
    if len(set(names)) != len(names) or any(not n or "/" in n or n in RESERVED for n in names):
        raise ConfigError(f"phase names must be unique plain names (not {'/'.join(RESERVED)}), got {names}")
    out = []
    for i, p in enumerate(phases):
        loss = p.loss or dict(defaults[min(i, len(defaults) - 1)].loss)
        if cfg.stage == "general" and "hard" in loss:
            raise ConfigError("loss.hard scores task labels; general distillation has none (use mlm)")
        if cfg.stage == "task" and "mlm" in loss:
            raise ConfigError("loss.mlm is a general-distillation term; on a task use hard (the gold labels)")
        out.append(PhaseConfig(p.name, loss, p.train))
    return out


def phase_train(cfg: DistillConfig, phase: PhaseConfig, examples: int) -> TrainConfig:
    """The top-level train settings with the phase's overrides, in the phase's own directory; a phase that
    evaluates does so once per epoch unless eval_every says otherwise."""
    plain = {**to_plain(cfg.train), **phase.train, "output_dir": str(Path(cfg.train.output_dir) / phase.name)}
    train = from_dict(TrainConfig, plain, f"phases.{phase.name}.train")
    if not train.eval_every and examples:
        train = dataclasses.replace(train, eval_every=max(1, -(-examples // (train.batch_size * train.grad_accum))))
    return train


def _layer_map(cfg: DistillConfig, teacher: nn.Module, student: nn.Module, loss: dict[str, float]) -> list[int] | None:
    """Student depth -> teacher depth for the hidden/attn terms (None when the phase has neither)."""
    if not {"hidden", "attn"} & {k for k, v in loss.items() if v}:
        return None
    t, s = encoder_of(teacher).config.num_layers, encoder_of(student).config.num_layers
    return check_layer_map(cfg.layer_map, t, s) if cfg.layer_map else uniform_layer_map(t, s)


def _freeze_unread(student: nn.Module, loss: dict[str, float]) -> list[nn.Parameter]:
    """Freeze what a phase never reads (a task head when only hidden states are distilled), so no
    parameter waits for a gradient (DDP) or decays for nothing; returns them to thaw afterwards."""
    if {k for k, v in loss.items() if v} - STATE_TERMS:
        return []
    encoder = encoder_of(student)
    inside = {id(p) for p in encoder.parameters()}
    pooler = {id(p) for p in encoder.pooler.parameters()} if encoder.pooler is not None else set()
    frozen = [p for p in student.parameters() if p.requires_grad and (id(p) not in inside or id(p) in pooler)]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def _reads_cached_logits(loss: dict[str, float]) -> bool:
    """Whether a phase reads the teacher only through its logits, which the cache can then give."""
    terms = {k for k, v in loss.items() if v}
    return bool(LOGIT_TERMS & terms) and not STATE_TERMS & terms


def _run_phases(cfg, student, teacher, dataset, collator, tokenizer, *, save_extra, eval_for, cache=None, resume=None):
    """Each phase as one Trainer run on the same student; returns the phase summaries."""
    from bertzoo.engine.loop import Trainer
    from bertzoo.engine.weights import load_weights

    phases = phases_of(cfg)
    temperature = cfg.temperature or TEMPERATURE[cfg.method]
    summaries: dict[str, Any] = {}
    for phase in phases:
        distiller = Distiller(
            student,
            teacher,
            phase.loss,
            temperature=temperature,
            layer_map=_layer_map(cfg, teacher, student, phase.loss),
            teacher_logits=cache if _reads_cached_logits(phase.loss) else None,
        )
        frozen = _freeze_unread(student, phase.loss)
        eval_fn, metric = eval_for(phase)
        train_cfg = phase_train(cfg, phase, len(dataset) if eval_fn is not None and cfg.stage == "task" else 0)
        trainer = Trainer(
            distiller,
            dataset,
            collator,
            train_cfg,
            save_extra=save_extra,
            run_config=to_plain(cfg),
            eval_fn=eval_fn,
            metric_for_best=metric,
            drop_last=cfg.stage == "general",
        )
        summary = trainer.train(resume=resume)
        for p in frozen:
            p.requires_grad_(True)
        summaries[phase.name] = summary
        if not summary["completed"] and summary.get("stop_reason") != "max_minutes":
            return summaries, False  # interrupted: --resume auto continues this phase
        best = Path(train_cfg.output_dir) / "best" / "model.safetensors"
        if metric is not None and best.is_file():
            load_weights(distiller, best)
            summary["model_from"] = "best"
    return summaries, True


# --- general distillation ---------------------------------------------------------------------------


def _general(cfg: DistillConfig, resume: str | None) -> dict[str, Any]:
    from bertzoo.data.pretraining.collate_mlm import CausalLMCollator, PretrainingCollator
    from bertzoo.data.tokens.shards import ShardedCorpus
    from bertzoo.loading import FINETUNED, load, resolve
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.train.finetune import _seeded
    from bertzoo.train.pretrain import fixed_eval_batches, make_mlm_evaluator, pretraining_examples
    from bertzoo.train.students import copy_matching, encoder_from_teacher, random_encoder

    data = from_dict(DataConfig, cfg.data, "data")
    if not data.shards:
        raise ConfigError("data.shards is not set; run `bertzoo prepare` with the teacher's tokenizer and pass it")
    corpus = ShardedCorpus(data.shards)
    tokenizer = corpus.tokenizer()
    kind, teacher = load(cfg.teacher)
    if kind == FINETUNED:
        raise ConfigError(
            f"{cfg.teacher} is a fine-tuned task model; general distillation needs a masked LM or an encoder "
            "(distil a task model with stage: task)"
        )
    _check_vocab(teacher, tokenizer, resolve(cfg.teacher))
    phases = phases_of(cfg)
    wants_mlm = any({"ce", "mlm"} & {k for k, v in p.loss.items() if v} for p in phases)
    layers = None
    if cfg.student.init == "teacher_layers":
        encoder, layers = encoder_from_teacher(encoder_of(teacher), cfg.student)
    elif cfg.student.init == "model":
        _, loaded = load(_need(cfg.student.model, "student.model"))
        encoder = encoder_of(loaded)
    else:
        encoder = random_encoder(cfg.student.model_config, tokenizer, cfg.train.seed)
    encoder.pooler = None  # general distillation never reads a pooler
    encoder.config.pooler = False
    if wants_mlm:
        # A fresh head starts from train.seed, as everything else does (every process builds the same).
        student: nn.Module = _seeded(cfg.train.seed, lambda: MaskedLM(encoder, sentence_task=None))
        if isinstance(teacher, MaskedLM) and cfg.student.init == "teacher_layers":
            copy_matching(student, teacher, "mlm_head.")
    else:
        student = encoder
    pcfg = PretrainConfig(variant="bert", objective="mlm", data=dataclasses.replace(data, nsp=False), train=cfg.train)
    dataset = pretraining_examples(pcfg, corpus, tokenizer)
    if wants_mlm:
        collator = PretrainingCollator(
            tokenizer, data.masking, seed=cfg.train.seed, pad_to_multiple_of=data.pad_to_multiple_of
        )
    else:  # the intermediate losses read every position of unmasked text
        collator = CausalLMCollator(tokenizer, pad_to_multiple_of=data.pad_to_multiple_of)

    def eval_for(phase: PhaseConfig):
        if not data.eval_shards:
            return None, None
        batches = fixed_eval_batches(pcfg, tokenizer, collator)
        return make_mlm_evaluator(batches)[0], None

    summaries, done = _run_phases(
        cfg, student, teacher, dataset, collator, tokenizer, save_extra=tokenizer.save, eval_for=eval_for, resume=resume
    )
    report = {
        "stage": "general",
        "method": cfg.method,
        "teacher": cfg.teacher,
        "layers_from_teacher": layers,
        "teacher_parameters": encoder_of(teacher).num_parameters(),
        "student_parameters": encoder_of(student).num_parameters(),
        "phases": summaries,
    }
    if done:
        _write_student(cfg, student, tokenizer.save, report)
    return report


# --- task distillation ------------------------------------------------------------------------------


def _task(cfg: DistillConfig, resume: str | None) -> dict[str, Any]:
    from bertzoo.loading import load_finetuned
    from bertzoo.tasks import get_task
    from bertzoo.train.finetune import _prefixed, _save_extra

    teacher_task, teacher, tokenizer = load_finetuned(cfg.teacher, {"data": cfg.data} if cfg.data else None)
    ft_cfg = _student_config(cfg, teacher_task.cfg)
    task = get_task(ft_cfg, tokenizer)  # the student's (its own technique; the teacher's labels)
    examples = _task_examples(task, ft_cfg)
    device = _device(cfg.train)
    augmented = None
    if cfg.augment.model and cfg.augment.copies:
        examples["train"], augmented = _augmented(cfg, examples["train"], tokenizer, device)
    student, layers = _task_student(cfg, task, ft_cfg, teacher, tokenizer)
    datasets = {split: task.featurize(rows, split) for split, rows in examples.items()}

    teacher.to(device)
    cache, cache_entry = _open_teacher_cache(cfg, teacher, task, datasets["train"], device)

    def eval_for(phase: PhaseConfig):
        # Only a phase that trains the predictions evaluates them (and picks its best/ by them): accuracy after
        # an intermediate phase is the frozen head's reading of a moving encoder, not something to select on.
        if "dev" not in datasets or not (LOGIT_TERMS | {"hard"}) & {k for k, v in phase.loss.items() if v}:
            return None, None

        def evaluate(distiller: nn.Module) -> dict[str, float]:
            return _prefixed(task.evaluate(distiller.student, examples["dev"], datasets["dev"]).metrics)

        return evaluate, f"eval_{task.default_metric}"

    save_extra = _save_extra(tokenizer, ft_cfg)
    summaries, done = _run_phases(
        cfg, student, teacher, datasets["train"], task.collate, tokenizer,
        save_extra=save_extra, eval_for=eval_for, cache=cache, resume=resume,
    )  # fmt: skip
    report: dict[str, Any] = {
        "stage": "task",
        "method": cfg.method,
        "teacher": cfg.teacher,
        "layers_from_teacher": layers,
        "teacher_parameters": teacher.encoder.num_parameters(),
        "student_parameters": student.encoder.num_parameters(),
        "examples": {k: len(v) for k, v in examples.items()},
        **({"teacher_cache": cache_entry} if cache is not None else {}),
        **({"augment_cache": augmented} if augmented else {}),
        "phases": summaries,
    }
    if not done:
        return report
    _score_teacher_and_student(report, teacher_task, teacher, task, student, examples, datasets)
    _write_student(cfg, student, save_extra, report)
    return report


def _student_config(cfg: DistillConfig, teacher_cfg: FinetuneConfig) -> FinetuneConfig:
    """The student's fine-tuning config: the teacher's task and data, this run's train settings and technique."""
    technique = cfg.technique
    if technique.pooling == "auto":
        # The student's sentence vector is the teacher's unless the config says otherwise: its head (copied
        # from the teacher, or imitating its logits) is trained on that vector.
        technique = dataclasses.replace(technique, pooling=teacher_cfg.technique.pooling)
    return dataclasses.replace(teacher_cfg, train=cfg.train, technique=technique, model=cfg.teacher, model_config={})


def _task_examples(task: Any, ft_cfg: FinetuneConfig) -> dict[str, list[dict[str, Any]]]:
    """The task's examples by split (training subset applied, empty splits dropped); an empty training split
    is a ConfigError."""
    from bertzoo.train.finetune import SPLITS, has_split, training_subset

    examples: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS:
        if split == "train" or has_split(ft_cfg, split):
            examples[split] = task.load(split)
    examples["train"] = training_subset(examples["train"], ft_cfg.data.max_train_examples)
    if not examples["train"]:
        raise ConfigError("the training split is empty; check the teacher's data section or data overrides")
    return {k: v for k, v in examples.items() if v}


def _task_student(
    cfg: DistillConfig, task: Any, ft_cfg: FinetuneConfig, teacher: nn.Module, tokenizer: Any
) -> tuple[nn.Module, list[int] | None]:
    """The student task model as `student.init` says, checked against the teacher's vocabulary, and the
    teacher layers it was started from (None unless init is teacher_layers)."""
    from bertzoo.loading import load_encoder
    from bertzoo.train.finetune import build_model
    from bertzoo.train.students import copy_matching, encoder_from_teacher, random_encoder

    layers = None
    if cfg.student.init == "teacher_layers":
        encoder, layers = encoder_from_teacher(teacher.encoder, cfg.student)
    elif cfg.student.init == "model":
        encoder = load_encoder(_need(cfg.student.model, "student.model"))
    else:
        encoder = random_encoder(cfg.student.model_config, tokenizer, cfg.train.seed)
    if encoder.config.vocab_size != teacher.encoder.config.vocab_size:
        raise ConfigError(
            f"the student's vocabulary has {encoder.config.vocab_size} tokens and the teacher's "
            f"{teacher.encoder.config.vocab_size}; both read the same token ids, so they need one vocabulary"
        )
    student = build_model(task, encoder, ft_cfg)
    if cfg.student.init == "teacher_layers":
        # The teacher's head reads its pooler: copy both, or neither when the student's pooler is another
        # function (a DistilBERT student's relu pre_classifier under a BERT teacher's tanh pooler).
        same_pooler = (encoder.pooler is None) == (teacher.encoder.pooler is None) and (
            encoder.config.pooler_act == teacher.encoder.config.pooler_act
        )
        if same_pooler:
            copy_matching(student, teacher, "encoder.pooler.")
            copy_matching(student, teacher, "head.")
    return student, layers


def _open_teacher_cache(
    cfg: DistillConfig, teacher: nn.Module, task: Any, train_ds: Any, device: torch.device
) -> tuple[Any, dict[str, Any] | None]:
    """The teacher's logits on the training features, when a phase reads only those and the cache is on, and
    the report's entry for it; (None, None) otherwise."""
    from bertzoo.engine.distributed import main_first
    from bertzoo.engine.keyed_cache import weights_key
    from bertzoo.loading import resolve
    from bertzoo.train.teacher_cache import data_key, open_cache, teacher_logits

    if cfg.teacher_cache == "off" or not any(_reads_cached_logits(p.loss) for p in phases_of(cfg)):
        return None, None
    where = _cache_dir(cfg, cfg.teacher_cache, CACHE_DIR)
    batch_size = cfg.train.eval_batch_size or cfg.train.batch_size
    keys = (weights_key(resolve(cfg.teacher)), data_key(train_ds))

    def compute() -> torch.Tensor:
        return teacher_logits(teacher, train_ds, task.collate, batch_size=batch_size, device=device)

    # One process writes the cache; the others wait for it and read it (torchrun).
    cache, reused = main_first(lambda: open_cache(where, *keys, compute))
    return cache, {"path": str(where), "reused": reused}


def _score_teacher_and_student(
    report: dict[str, Any],
    teacher_task: Any,
    teacher: nn.Module,
    task: Any,
    student: nn.Module,
    examples: dict[str, list[dict[str, Any]]],
    datasets: dict[str, Any],
) -> None:
    """Add the teacher's and the student's dev and test metrics to `report`."""
    student.eval()
    for split in ("dev", "test"):
        if split in datasets:
            t = teacher_task.evaluate(teacher, examples[split], teacher_task.featurize(examples[split], split))
            s = task.evaluate(student, examples[split], datasets[split])
            report[f"teacher_{split}"] = t.metrics
            report[f"student_{split}"] = s.metrics


def _augmented(
    cfg: DistillConfig, train: list[dict[str, Any]], tokenizer, device: torch.device
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The training examples and their `augment.copies` copies each, from the augmentation cache when it holds
    them (`augment.cache`, bertzoo.train.augment_cache); also the report's entry for the cache (None when off).
    Under torchrun rank 0 augments and writes while the others wait, then read."""
    from bertzoo.data.tasks.augment import augment_examples
    from bertzoo.engine.distributed import main_first
    from bertzoo.loading import load_pretraining, resolve
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.train.augment_cache import cached_augmentation

    a = cfg.augment
    settings = {"copies": a.copies, "replace_prob": a.replace_prob, "candidates": a.candidates, "seed": a.seed}

    mlm = load_pretraining(a.model)  # loaded even when the cache holds the copies: a wrong model is refused alike
    if not isinstance(mlm, MaskedLM):
        raise ConfigError(f"augment.model {a.model} is not a masked LM; give one with the teacher's vocabulary")

    def compute() -> list[dict[str, Any]]:
        # batch_size only groups the forwards: the copies do not depend on it, so it is not a key
        return augment_examples(train, mlm.eval().to(device), tokenizer, **settings, batch_size=a.batch_size)

    if a.cache == "off":
        return compute(), None
    where = _cache_dir(cfg, a.cache, AUGMENT_DIR)
    out, reused = main_first(lambda: cached_augmentation(where, resolve(a.model), train, settings, compute))
    return out, {"path": str(where), "reused": reused}


# --- shared --------------------------------------------------------------------------------------------


def _cache_dir(cfg: DistillConfig, setting: str, default: str) -> Path:
    """Where a cache setting (`teacher_cache`, `augment.cache`) puts its cache: "auto" = output_dir/`default`,
    else the directory it names ("off" is the caller's to handle)."""
    return Path(cfg.train.output_dir) / default if setting == "auto" else Path(setting)


def _need(value: str, key: str) -> str:
    if not value:
        raise ConfigError(f"{key} is not set; give a model directory, builtin:NAME or hf:ID")
    return value


def _device(train: TrainConfig) -> torch.device:
    """This process's device, with the process group joined under torchrun (the teacher cache is written
    by rank 0 while the others wait, before the Trainer would join it)."""
    from bertzoo.engine.devices import resolve_device
    from bertzoo.engine.distributed import dist_info, init_distributed

    device = resolve_device(train.device, dist_info().local_rank)
    init_distributed(device)
    return device


def _check_vocab(teacher: nn.Module, tokenizer, teacher_dir: Path) -> None:
    """The shards' tokenizer must be the teacher's: both models read the same ids."""
    from bertzoo.data.tokens.tokenizer import Tokenizer

    size = encoder_of(teacher).config.vocab_size
    if tokenizer.vocab_size != size:
        raise ConfigError(
            f"the shards' tokenizer has {tokenizer.vocab_size} tokens and the teacher {size}; prepare the shards "
            f"with the teacher's tokenizer (bertzoo prepare --tokenizer {teacher_dir})"
        )
    try:
        own = Tokenizer.load(teacher_dir)
    except Exception:  # a teacher directory without tokenizer files: the sizes are all we can compare
        return
    if own.vocab_sha256 != tokenizer.vocab_sha256:
        raise ConfigError(
            f"the shards' tokenizer is not the teacher's (same size, other tokens); prepare the shards with "
            f"--tokenizer {teacher_dir}"
        )


def _write_student(cfg: DistillConfig, student: nn.Module, save_extra, report: dict[str, Any]) -> None:
    from bertzoo.engine.distributed import is_main
    from bertzoo.engine.weights import check_finite
    from bertzoo.interop.model_card import write_model_card, write_run_cards
    from bertzoo.io import write_atomic, write_dir_atomic

    if not is_main():
        return
    out = Path(cfg.train.output_dir)

    def write(directory: Path) -> None:
        check_finite(student)
        student.save_pretrained(directory)
        save_extra(directory)
        write_model_card(directory, run_config=to_plain(cfg), report=report)  # README.md: never fails the save

    report["model_dir"] = str(write_dir_atomic(out / MODEL_DIR, write))
    for phase in report.get("phases", {}):  # each phase's loop writes its own final/ (and best/)
        write_run_cards(out / phase, run_config=to_plain(cfg), report=report)
    write_atomic(out / REPORT, json.dumps(report, indent=2, default=str) + "\n")


def distill(cfg: DistillConfig, resume: str | None = None) -> dict[str, Any]:
    """Run (or resume) a distillation; returns its report (also written to output_dir/report.json)."""
    if not cfg.teacher:
        raise ConfigError("teacher is not set; give a model directory, builtin:all-minilm-l6-v2 or hf:ID")
    if cfg.temperature < 0:
        raise ConfigError(f"temperature must be > 0 (0 = the method's), got {cfg.temperature}")
    if cfg.augment.copies and not cfg.augment.model:
        raise ConfigError(
            "augment.copies is set but augment.model is not; give a masked LM with the teacher's vocabulary"
        )
    if cfg.stage == "general" and cfg.augment.copies:
        raise ConfigError("augment applies to task distillation; remove it from a general distillation")
    return _general(cfg, resume) if cfg.stage == "general" else _task(cfg, resume)
