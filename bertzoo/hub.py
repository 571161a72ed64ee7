"""Saving and loading models: bertzoo directories (config.json + model.safetensors + tokenizer files)
and Hugging Face directories, with errors that name every missing, unexpected or misshapen tensor."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model
from torch import nn

from bertzoo import convert
from bertzoo.config import ModelConfig, from_dict, read_json
from bertzoo.errors import CheckpointError

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 1


def _replace_atomically(write, target: Path) -> None:
    """Run `write(tmp_path)` then rename over `target`, so readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_module(
    module: nn.Module, config: ModelConfig, directory: str | Path, extra: dict[str, Any] | None = None
) -> None:
    """Write `config.json` and `model.safetensors` (tied tensors stored once) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, p in module.state_dict().items():
        if p.is_floating_point() and not torch.isfinite(p).all():
            raise CheckpointError(f"refusing to save: tensor {name} holds NaN or Inf values")
    payload = {"bertzoo_version": FORMAT_VERSION, **config.to_dict(), **(extra or {})}
    _replace_atomically(lambda p: save_model(module, p, metadata={"format": "pt"}), directory / WEIGHTS)
    _replace_atomically(lambda p: Path(p).write_text(json.dumps(payload, indent=2) + "\n"), directory / CONFIG)


def resolve(path: str | Path) -> Path:
    """A local directory, or a Hugging Face hub id fetched through `huggingface_hub` when installed."""
    local = Path(path)
    if local.is_dir():
        return local
    if local.exists():
        raise CheckpointError(f"{path} is a file; pass the directory that holds config.json and the weights")
    text = str(path)
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download
        except ImportError:
            raise CheckpointError(
                f"{path} is not a local directory; to fetch it from the hub install huggingface_hub "
                "(pip install huggingface_hub) or download it and pass the directory"
            ) from None
        try:
            return Path(snapshot_download(text, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))
        except Exception as exc:  # network or hub errors arrive in many types
            raise CheckpointError(
                f"could not fetch {path} from the hub ({type(exc).__name__}); download it and pass the local directory"
            ) from None
    raise CheckpointError(f"model directory not found: {path}; check the path")


def load_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Tensors from model.safetensors, or pytorch_model.bin loaded with weights_only=True."""
    st = directory / WEIGHTS
    if st.is_file():
        try:
            return load_file(st)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:  # damaged header or data
            raise CheckpointError(
                f"{st} is not a readable safetensors file ({exc}); re-save or re-download it"
            ) from None
    binary = directory / "pytorch_model.bin"
    if binary.is_file():
        try:
            state = torch.load(binary, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # weights_only refused a global: the file would run code when loaded
            raise CheckpointError(
                f"refusing to unpickle {binary}: it holds objects other than tensors and could run code; "
                "only use weights from a trusted source, converted to safetensors"
            ) from None
        except Exception as exc:  # truncated or not a torch file; pickle errors come in many types
            raise CheckpointError(
                f"refusing to load {binary}: it is not a plain tensor file ({type(exc).__name__}); "
                "convert it to safetensors with a trusted tool"
            ) from None
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise CheckpointError(f"{binary} does not hold a state dict (names -> tensors); use another file")
        return state
    raise CheckpointError(f"no weights in {directory}: expected {WEIGHTS} (or pytorch_model.bin)")


def _aliases(module: nn.Module) -> dict[str, set[str]]:
    """For each state-dict key, the other keys that share its storage (tied weights)."""
    by_ptr: dict[tuple[int, int], list[str]] = {}
    for name, t in module.state_dict(keep_vars=True).items():
        by_ptr.setdefault((t.data_ptr(), t.numel()), []).append(name)
    return {n: set(group) - {n} for group in by_ptr.values() for n in group}


def load_into(module: nn.Module, state: dict[str, torch.Tensor], *, source: str = "checkpoint") -> None:
    """Copy `state` into `module`, requiring every key to match by name and shape.

    A key missing from `state` is fine only when it is tied to one that is present.
    """
    own = module.state_dict()
    aliases = _aliases(module)
    missing = [k for k in own if k not in state and not (aliases.get(k, set()) & state.keys())]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected[:8])}{' ...' if len(unexpected) > 8 else ''}")
    if mismatched:
        problems.append(f"shape mismatches: {', '.join(mismatched[:8])}{' ...' if len(mismatched) > 8 else ''}")
    if problems:
        raise CheckpointError(
            f"{source} does not match the model ({'; '.join(problems)}); "
            "check that config.json belongs to these weights"
        )
    module.load_state_dict(state, strict=False)


def read_config(directory: Path) -> tuple[dict[str, Any], ModelConfig, bool]:
    """(raw dict, ModelConfig, is_hf) from a directory's config.json."""
    raw = read_json(directory / CONFIG)
    if convert.is_hf_config(raw):
        return raw, convert.config_from_hf(raw), True
    fields = {k: v for k, v in raw.items() if k in ModelConfig.__dataclass_fields__}
    return raw, from_dict(ModelConfig, fields, "model"), False


def _load_state(directory: Path) -> tuple[dict[str, Any], ModelConfig, dict[str, torch.Tensor]]:
    raw, config, is_hf = read_config(directory)
    state = load_weights(directory)
    if is_hf:
        state, unused = convert.state_from_hf(state, config)
        if unused:
            # Task heads of other architectures (e.g. a classifier) are not part of the encoder.
            raw = {**raw, "_unused_hf_keys": unused}
    elif not any(k.startswith(("encoder.", "discriminator.encoder.")) for k in state):
        state = {f"encoder.{k}": v for k, v in state.items()}
    return raw, config, state


def load_encoder(path: str | Path) -> nn.Module:
    """An Encoder from a bertzoo directory (pretraining or encoder-only) or a Hugging Face BERT."""
    from bertzoo.model import Encoder
    from bertzoo.nn.adapter import adapter_size_from_state, add_adapters

    directory = resolve(path)
    _, config, state = _load_state(directory)
    # An ELECTRA pretraining checkpoint holds a generator and a discriminator: the discriminator is the encoder.
    prefix = "discriminator.encoder." if any(k.startswith("discriminator.encoder.") for k in state) else "encoder."
    enc_state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    if "pooler.dense.weight" not in enc_state and config.pooler:
        # Checkpoints without a pooler (e.g. sentence-transformers exports) load without one.
        config.pooler = False
    encoder = Encoder(config)
    bottleneck = adapter_size_from_state(enc_state)
    if bottleneck:
        add_adapters(encoder, bottleneck)  # a model fine-tuned with adapters: they are part of its encoder
    load_into(encoder, enc_state, source=str(directory))
    return encoder


def load_pretraining(path: str | Path) -> nn.Module:
    """A MaskedLM objective (encoder + heads) from a bertzoo or Hugging Face pretraining checkpoint."""
    from bertzoo.model import Encoder
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.variants import get_variant

    directory = resolve(path)
    raw, config, state = _load_state(directory)
    variant = get_variant(config.variant)
    if hasattr(variant, "pretraining_model"):  # a variant whose pretraining module is not BERT's (ELECTRA)
        model = variant.pretraining_model(raw, config, state)
    else:
        objective = raw.get("objective") or ("mlm+nsp" if "nsp_head.classifier.weight" in state else "mlm")
        sentence_task = None if objective == "mlm" else objective.split("+", 1)[1]
        model = MaskedLM(Encoder(config), sentence_task=sentence_task)
    load_into(model, state, source=str(directory))
    return model


def export_hf(module: nn.Module, directory: str | Path) -> Path:
    """Write a Hugging Face BERT directory: BertForPreTraining (or BertForMaskedLM when there is no
    NSP head) for a MaskedLM, BertModel for an Encoder, and for a fine-tuned task model (one with
    `head_config`) the matching `BertFor...` head class (see `export_finetuned_hf`)."""
    from safetensors.torch import save_file

    from bertzoo.model import Encoder
    from bertzoo.nn.adapter import has_adapters

    if hasattr(module, "head_config") and hasattr(module, "encoder"):
        return export_finetuned_hf(module, directory)
    if hasattr(module, "export_hf"):  # modules that write their own (ELECTRA's discriminator and joint objective)
        return Path(module.export_hf(directory))
    if has_adapters(module):
        raise CheckpointError(
            "the model has adapters, which the Hugging Face BERT architecture has no place for; "
            "save it with save_pretrained (bertzoo format) instead"
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(module, Encoder):
        config, state, prefix, arch = (
            module.config,
            {f"encoder.{k}": v for k, v in module.state_dict().items()},
            "",
            "BertModel",
        )
    else:
        config, state, prefix = module.config, module.state_dict(), "bert."
        arch = "BertForPreTraining" if getattr(module, "nsp_head", None) is not None else "BertForMaskedLM"
    hf_state = convert.state_to_hf(state, config, prefix=prefix)
    hf_config = convert.config_to_hf(config, [arch])
    hf_config["tie_word_embeddings"] = bool(config.tie_word_embeddings)
    if not config.pooler:
        hf_config["add_pooling_layer"] = False
    _replace_atomically(lambda p: save_file(hf_state, p, metadata={"format": "pt"}), directory / WEIGHTS)
    _replace_atomically(lambda p: Path(p).write_text(json.dumps(hf_config, indent=2) + "\n"), directory / CONFIG)
    return directory


# task name -> (Hugging Face class, head module class name, our head attribute -> HF key prefix, reads pooler)
_CLASSIFIER = {"classifier": "classifier"}
HF_TASK_HEADS: dict[str, tuple[str, str, dict[str, str], bool]] = {
    "classification": ("BertForSequenceClassification", "ClassificationHead", _CLASSIFIER, True),
    "token_classification": ("BertForTokenClassification", "TokenClassificationHead", _CLASSIFIER, False),
    "qa": ("BertForQuestionAnswering", "SpanHead", {"qa": "qa_outputs"}, False),
    "multiple_choice": ("BertForMultipleChoice", "ClassificationHead", _CLASSIFIER, True),
}
_HF_PROBLEM = {
    "single_label": "single_label_classification",
    "multi_label": "multi_label_classification",
    "regression": "regression",
}


def _find_head(model: nn.Module, class_name: str) -> tuple[str, nn.Module]:
    found = [
        (name, m)
        for name, m in model.named_modules()
        if type(m).__name__ == class_name and not name.startswith("encoder.") and name != "encoder"
    ]
    if len(found) != 1:
        raise CheckpointError(
            f"expected one {class_name} in the task model, found {len(found)}; only the standard task heads export"
        )
    return found[0]


def export_finetuned_hf(model: nn.Module, directory: str | Path) -> Path:
    """Write a fine-tuned task model as a Hugging Face `BertFor<Task>` directory (`bert.*` encoder keys
    plus the head's `classifier.*` / `qa_outputs.*`), with `num_labels`, `id2label`, `label2id` and
    `problem_type` in config.json, loadable by `transformers.AutoModelFor<Task>`.

    Only heads Hugging Face has exactly export: a plain linear head on the pooled [CLS] vector
    (sequence classification, multiple choice) or on every token (token classification, QA). Feature
    mixes, BiLSTM taggers and adapters raise CheckpointError saying so.
    """
    from safetensors.torch import save_file

    from bertzoo.nn.adapter import has_adapters

    head_cfg = dict(getattr(model, "head_config", {}) or {})
    task = head_cfg.get("task", "")
    if task not in HF_TASK_HEADS:
        raise CheckpointError(f"task {task!r} has no Hugging Face export; exportable tasks: {', '.join(HF_TASK_HEADS)}")
    arch, head_class, key_map, reads_pooler = HF_TASK_HEADS[task]
    encoder = model.encoder
    config = encoder.config
    what = None
    if has_adapters(model):
        what = "adapters inside the encoder"
    elif getattr(model, "feature_layers", 0):
        what = f"a mix of the top {model.feature_layers} layers (feature-based head)"
    elif reads_pooler and encoder.pooler is None:
        what = "a classifier on [CLS] without a pooler (Hugging Face's reads the pooler)"
    if what is None:
        head_name, head = _find_head(model, head_class)
        if getattr(head, "lstm", None) is not None:
            what = "a BiLSTM tagger head"
    if what is not None:
        raise CheckpointError(
            f"cannot export to {arch}: the model has {what}, which the Hugging Face architecture cannot "
            "represent; keep the bertzoo format (save_pretrained) for this model"
        )
    state = model.state_dict()
    allowed = tuple(f"{head_name}.{ours}." for ours in key_map)
    extra = [k for k in state if not k.startswith("encoder.") and not k.startswith(allowed)]
    if extra:
        raise CheckpointError(
            f"cannot export to {arch}: parameters outside the encoder and the linear head ({', '.join(extra[:5])}); "
            "keep the bertzoo format for this model"
        )
    enc_state = {k: v for k, v in state.items() if k.startswith("encoder.")}
    if not reads_pooler:  # these Hugging Face classes build BertModel without a pooler
        enc_state = {k: v for k, v in enc_state.items() if not k.startswith("encoder.pooler.")}
    hf_state = convert.state_to_hf(enc_state, config, prefix="bert.")
    for ours, hf in key_map.items():
        for part in ("weight", "bias"):
            hf_state[f"{hf}.{part}"] = state[f"{head_name}.{ours}.{part}"].contiguous()
    hf_config = convert.config_to_hf(config, [arch])
    if task in ("classification", "token_classification"):
        num_labels = int(state[f"{head_name}.classifier.weight"].shape[0])
        labels = [str(x) for x in head_cfg.get("labels") or []]
        if len(labels) != num_labels:
            labels = [f"LABEL_{i}" for i in range(num_labels)]
        hf_config["num_labels"] = num_labels
        hf_config["id2label"] = {str(i): name for i, name in enumerate(labels)}
        hf_config["label2id"] = {name: i for i, name in enumerate(labels)}
        if task == "classification":
            problem = head_cfg.get("problem") or ("regression" if num_labels == 1 else "single_label")
            hf_config["problem_type"] = _HF_PROBLEM.get(problem, "single_label_classification")
    hf_config["classifier_dropout"] = None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _replace_atomically(lambda p: save_file(hf_state, p, metadata={"format": "pt"}), directory / WEIGHTS)
    _replace_atomically(lambda p: Path(p).write_text(json.dumps(hf_config, indent=2) + "\n"), directory / CONFIG)
    return directory


_HF_HEAD_TASKS = {
    "BertForSequenceClassification": "classification",
    "BertForTokenClassification": "token_classification",
}
_PROBLEM_FROM_HF = {v: k for k, v in _HF_PROBLEM.items()}
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json")


def _copy_tokenizer(src: Path, dst: Path) -> bool:
    """Re-save the tokenizer of `src` into `dst` (HF and bertzoo read the same files); False if none."""
    if not any((src / name).is_file() for name in TOKENIZER_FILES):
        return False
    from bertzoo.data.tokenizer import Tokenizer

    Tokenizer.load(src).save(dst)
    return True


def _hf_to_finetuned(src: Path, dst: Path, raw: dict[str, Any], task_name: str) -> None:
    """A Hugging Face BertForSequence/TokenClassification directory -> a bertzoo fine-tuned model directory."""
    from bertzoo.config import FinetuneConfig, to_plain
    from bertzoo.data.tokenizer import Tokenizer
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
        raise CheckpointError(f"{src} has no pooler weights, which BertForSequenceClassification needs")
    model = task.build(encoder)
    head = {**task.head_config(), **(getattr(model, "head_config", None) or {})}
    if task_name == "classification":
        head["problem"] = cfg.problem
    model.head_config = head
    _, head_class, key_map, _ = HF_TASK_HEADS[task_name]
    head_name, _ = _find_head(model, head_class)
    hf_state = convert.normalise_hf_keys(load_weights(src))
    state = dict(model.state_dict())
    for ours, hf in key_map.items():
        for part in ("weight", "bias"):
            if f"{hf}.{part}" not in hf_state:
                raise CheckpointError(f"{src} lacks {hf}.{part}; it is not a complete {raw.get('architectures')}")
            state[f"{head_name}.{ours}.{part}"] = hf_state[f"{hf}.{part}"]
    load_into(model, state, source=str(src))
    model.save_pretrained(dst)
    tokenizer.save(dst)
    (dst / "finetune_config.json").write_text(json.dumps(to_plain(cfg), indent=2) + "\n", encoding="utf-8")


def convert_directory(src: str | Path, dst: str | Path, src_format: str, dst_format: str) -> dict[str, Any]:
    """`bertzoo convert`: a bertzoo model directory to a Hugging Face one or back, tokenizer included.

    bertzoo -> hf: a fine-tuned model becomes `BertFor<Task>`, a pretraining checkpoint
    `BertForPreTraining`/`BertForMaskedLM`, an encoder `BertModel`. hf -> bertzoo: sequence/token
    classifiers become fine-tuned bertzoo models (usable by `bertzoo evaluate/predict`), checkpoints
    with an MLM head pretraining models, anything else an encoder.
    """
    from bertzoo.errors import ConfigError

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
    dst_dir.mkdir(parents=True, exist_ok=True)
    if src_format == "bertzoo":
        if isinstance(raw.get("task"), dict):
            from bertzoo.train.finetune import load_finetuned

            _, model, _ = load_finetuned(src_dir)
            kind = f"fine-tuned {raw['task'].get('task')}"
        elif raw.get("objective") or any(k.startswith("mlm_head.") for k in load_weights(src_dir)):
            model, kind = load_pretraining(src_dir), "pretraining"
        else:
            model, kind = load_encoder(src_dir), "encoder"
        export_hf(model, dst_dir)
        arch = read_json(dst_dir / CONFIG)["architectures"][0]
    else:
        arch = (raw.get("architectures") or ["BertModel"])[0]
        if arch in _HF_HEAD_TASKS:
            _hf_to_finetuned(src_dir, dst_dir, raw, _HF_HEAD_TASKS[arch])
            kind = f"fine-tuned {_HF_HEAD_TASKS[arch]}"
        elif any(k.startswith(("cls.predictions.", "bert.cls.predictions.")) for k in load_weights(src_dir)):
            load_pretraining(src_dir).save_pretrained(dst_dir)
            kind = "pretraining"
        else:
            load_encoder(src_dir).save_pretrained(dst_dir)
            kind = "encoder"
    tokenizer = (dst_dir / "vocab.txt").is_file() or _copy_tokenizer(src_dir, dst_dir)
    return {"from": str(src_dir), "to": str(dst_dir), "kind": kind, "architecture": arch, "tokenizer": bool(tokenizer)}
