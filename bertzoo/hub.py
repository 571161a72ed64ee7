"""`bertzoo convert`: a model directory from the bertzoo format to Hugging Face's or back, tokenizer
included; and the interop names users import from here (`from bertzoo.hub import export_hf`).

Loading lives in `bertzoo.loading`, writing files in `bertzoo.io`, Hugging Face names and exporters
in `bertzoo.interop.hf_keys` / `bertzoo.interop.convert`; this module only combines them (above loading).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bertzoo.io as io
from bertzoo.config import read_json
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.convert import HF_PROBLEM, HF_TASK_HEADS, export_finetuned_hf, export_hf, find_head, hf_task_of
from bertzoo.interop.hf_keys import normalise_hf_keys
from bertzoo.loading import (
    FINETUNED,
    PRETRAINING,
    kind_of,
    load_encoder,
    load_finetuned,
    load_pretraining,
    read_checkpoint,
    read_config,
    resolve,
)

__all__ = [
    "convert_directory",
    "export_finetuned_hf",
    "export_hf",
    "load_encoder",
    "load_pretraining",
    "read_config",
    "resolve",
]

_PROBLEM_FROM_HF = {v: k for k, v in HF_PROBLEM.items()}
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json")


def _copy_tokenizer(src: Path, dst: Path) -> bool:
    """Re-save the tokenizer of `src` into `dst` (HF and bertzoo read the same files); False if none."""
    if not any((src / name).is_file() for name in TOKENIZER_FILES):
        return False
    from bertzoo.data.tokens.tokenizer import Tokenizer

    Tokenizer.load(src).save(dst)
    return True


def _hf_to_finetuned(src: Path, dst: Path, raw: dict[str, Any], task_name: str) -> None:
    """A Hugging Face sequence or token classifier directory (BertForSequenceClassification,
    DistilBertForTokenClassification, ...) -> a bertzoo fine-tuned model directory."""
    from bertzoo.config import FinetuneConfig, to_plain
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.tasks import TASKS

    if task_name not in TASKS:
        raise CheckpointError(f"the {task_name} task is not available in this bertzoo, so {src} cannot convert")
    if not any((src / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"{src} has no tokenizer (vocab.txt or tokenizer.json); a fine-tuned model needs one")
    id2label = raw.get("id2label") or {}
    labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
    cfg = FinetuneConfig(task=task_name)
    cfg.data.labels = labels
    if task_name == "classification":
        cfg.problem = _PROBLEM_FROM_HF.get(raw.get("problem_type") or "", "single_label")
        if cfg.problem == "regression":
            cfg.data.labels = []
    tokenizer = Tokenizer.load(src)
    task = TASKS[task_name](cfg, tokenizer)
    encoder = load_encoder(src)
    if task_name == "classification" and encoder.pooler is None:
        arch = (raw.get("architectures") or ["BertForSequenceClassification"])[0]
        raise CheckpointError(f"{src} has no pooler weights, which {arch} needs")
    model = task.build(encoder)
    head = {**task.head_config(), **(getattr(model, "head_config", None) or {})}
    if task_name == "classification":
        head["problem"] = cfg.problem
    model.head_config = head
    _, head_class, key_map, _ = HF_TASK_HEADS[task_name]
    head_name, _ = find_head(model, head_class)
    hf_state = normalise_hf_keys(io.read_weights(src))
    state = dict(model.state_dict())
    for ours, hf in key_map.items():
        for part in ("weight", "bias"):
            if f"{hf}.{part}" not in hf_state:
                raise CheckpointError(f"{src} lacks {hf}.{part}; it is not a complete {raw.get('architectures')}")
            state[f"{head_name}.{ours}.{part}"] = hf_state[f"{hf}.{part}"]
    io.load_into(model, state, source=str(src))
    model.save_pretrained(dst)
    tokenizer.save(dst)
    io.write_json(dst / io.FINETUNE_CONFIG, to_plain(cfg))


def convert_directory(src: str | Path, dst: str | Path, src_format: str, dst_format: str) -> dict[str, Any]:
    """`bertzoo convert`: a bertzoo model directory to a Hugging Face one or back, tokenizer included;
    `bertzoo.loading.kind_of` decides what the directory holds.

    bertzoo -> hf: a fine-tuned model becomes `BertFor<Task>`, a pretraining checkpoint
    `BertForPreTraining`/`BertForMaskedLM`, an encoder `BertModel` (each under its family's names).
    hf -> bertzoo: sequence/token classifiers become fine-tuned bertzoo models (usable by `bertzoo
    evaluate/predict`), checkpoints with pretraining heads pretraining models, anything else an encoder.
    """
    formats = ("hf", "bertzoo")
    for name, value in (("--from", src_format), ("--to", dst_format)):
        if value not in formats:
            raise ConfigError(f"{name} {value!r} is not a format; choose hf or bertzoo")
    if src_format == dst_format:
        raise ConfigError(f"--from and --to are both {src_format}; nothing to convert")
    src_dir = resolve(src)
    raw, _, is_hf = read_config(src_dir)
    actual = "hf" if is_hf else "bertzoo"
    if actual != src_format:
        raise ConfigError(f"{src_dir} holds a {actual} model, not {src_format}; use --from {actual}")
    dst_dir = Path(dst)
    if dst_dir.exists() and any(dst_dir.iterdir()):
        raise ConfigError(f"{dst_dir} exists and is not empty; choose a new output directory")
    raw, _, state, _ = read_checkpoint(src_dir)
    kind = kind_of(raw, state, is_hf)
    dst_dir.mkdir(parents=True, exist_ok=True)
    if src_format == "bertzoo":
        if kind == FINETUNED:
            model = load_finetuned(src_dir)[1]
            kind = f"{FINETUNED} {raw['task'].get('task')}"
        else:
            model = load_pretraining(src_dir) if kind == PRETRAINING else load_encoder(src_dir)
        export_hf(model, dst_dir)
        arch = read_json(dst_dir / io.CONFIG)["architectures"][0]
    else:
        arch = (raw.get("architectures") or ["BertModel"])[0]
        if kind == FINETUNED:
            task_name = hf_task_of(raw)
            _hf_to_finetuned(src_dir, dst_dir, raw, task_name)
            kind = f"{FINETUNED} {task_name}"
        else:
            model = load_pretraining(src_dir) if kind == PRETRAINING else load_encoder(src_dir)
            model.save_pretrained(dst_dir)
    tokenizer = (dst_dir / "vocab.txt").is_file() or _copy_tokenizer(src_dir, dst_dir)
    return {"from": str(src_dir), "to": str(dst_dir), "kind": kind, "architecture": arch, "tokenizer": bool(tokenizer)}
