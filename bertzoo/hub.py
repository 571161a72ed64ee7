"""Saving and loading models: bertzoo directories (config.json + model.safetensors + tokenizer files)
and Hugging Face directories, with errors that name every missing, unexpected or misshapen tensor."""

from __future__ import annotations

import json
import os
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
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(
                f"{st} is not a readable safetensors file ({exc}); re-save or re-download it"
            ) from None
    binary = directory / "pytorch_model.bin"
    if binary.is_file():
        try:
            state = torch.load(binary, map_location="cpu", weights_only=True)
        except Exception as exc:  # pickle errors come in many types
            raise CheckpointError(
                f"refusing to load {binary}: it is not a plain tensor file ({type(exc).__name__}); "
                "convert it to safetensors with a trusted tool"
            ) from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{binary} does not hold a state dict")
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
    elif not any(k.startswith("encoder.") for k in state):
        state = {f"encoder.{k}": v for k, v in state.items()}
    return raw, config, state


def load_encoder(path: str | Path) -> nn.Module:
    """An Encoder from a bertzoo directory (pretraining or encoder-only) or a Hugging Face BERT."""
    from bertzoo.model import Encoder

    directory = resolve(path)
    _, config, state = _load_state(directory)
    encoder = Encoder(config)
    enc_state = {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}
    if "pooler.dense.weight" not in enc_state and config.pooler:
        # Checkpoints without a pooler (e.g. sentence-transformers exports) load without one.
        config.pooler = False
        encoder = Encoder(config)
    load_into(encoder, enc_state, source=str(directory))
    return encoder


def load_pretraining(path: str | Path) -> nn.Module:
    """A MaskedLM objective (encoder + heads) from a bertzoo or Hugging Face pretraining checkpoint."""
    from bertzoo.model import Encoder
    from bertzoo.objectives.mlm import MaskedLM

    directory = resolve(path)
    raw, config, state = _load_state(directory)
    objective = raw.get("objective") or ("mlm+nsp" if "nsp_head.classifier.weight" in state else "mlm")
    sentence_task = None if objective == "mlm" else objective.split("+", 1)[1]
    model = MaskedLM(Encoder(config), sentence_task=sentence_task)
    load_into(model, state, source=str(directory))
    return model


def export_hf(module: nn.Module, directory: str | Path) -> Path:
    """Write a Hugging Face BERT directory: BertForPreTraining (or BertForMaskedLM when there is no
    NSP head) for a MaskedLM, BertModel for an Encoder."""
    from safetensors.torch import save_file

    from bertzoo.model import Encoder

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
