"""Hugging Face checkpoints as data: how a transformers architecture names our tensors and config
fields, and the generic functions that apply those tables in both directions.

A family (`bertzoo/variants/*.py`) states its differences from BERT as one `HFFamily` (key maps,
config defaults, the class names it exports to, a hook for the few computed config fields); this
module holds everything they share: reading and validating a Hugging Face `config.json` (every
wrong or missing field is one CheckpointError naming it), the activation names, the split and
concatenation of our fused query/key/value projection, and the key renaming itself.

It knows `ModelConfig` and tensors, never a variant module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from bertzoo.config import ModelConfig, from_dict
from bertzoo.errors import BertzooError, CheckpointError

# Hugging Face activation name -> ours, and back.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
OUR_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
QKV = ("query", "key", "value")
# The class names the generic exporter asks for; each family maps them to its own.
BERT_CLASSES = (
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
)
REQUIRED = object()  # a config key without a default: the checkpoint must state it
# (Hugging Face keys, our key): one key is a rename; several are concatenated along dim 0 into ours (a
# fused projection: T5's q, k, v) and split back into equal parts on export.
TensorMap = list[tuple[tuple[str, ...], str]]


@dataclass(frozen=True)
class HFFamily:
    """One Hugging Face architecture's names for our tensors and config, as data."""

    model_type: str  # config.json's model_type
    variant: str  # the bertzoo variant a checkpoint of this model_type becomes
    base: str  # prefix of the base model's keys inside heads models ("bert." in BertForPreTraining)
    encoder_keys: tuple[tuple[str, str], ...]  # (HF key, our Encoder key); `{i}` is a stored layer
    # HF key of stored layer {i}'s separate {n} = `qkv_names` {part} = weight/bias; None when the
    # checkpoint's projection is fused like ours (GPT's c_attn) and listed in encoder_keys.
    qkv: str | None
    head_keys: tuple[tuple[str, str], ...] = ()  # (HF key, our key) of the pretraining heads
    untied_decoder: str | None = None  # HF key of the MLM decoder weight, used only when untied
    tied_copies: frozenset[str] = frozenset()  # HF keys repeating a tied tensor: ignored on import
    config_defaults: Mapping[str, Any] = field(default_factory=dict)  # HF config defaults unlike BERT's
    # Config fields computed from several HF keys: (raw config, fields read so far) -> fields to set.
    read_fields: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    architectures: Mapping[str, str] = field(default_factory=lambda: {n: n for n in BERT_CLASSES})
    refused: Mapping[str, str] = field(default_factory=dict)  # BERT class name -> why it cannot export
    # HF keys (`{i}` as in encoder_keys) stored as (in, out): GPT's Conv1D, the transpose of nn.Linear.
    transposed: frozenset[str] = frozenset()
    # The family's own table of config keys, like HF_CONFIG_FIELDS (GPT names every field differently);
    # None: BERT's.
    config_fields: Mapping[str, tuple[str, str, Any]] | None = None
    # Classes whose checkpoints are pretraining modules although every head tensor is a tied copy
    # (GPT's LM-head models), so `bertzoo.loading.kind_of` cannot tell them by their keys.
    pretraining_classes: frozenset[str] = frozenset()
    # The `{n}` of `qkv` for the query, key and value projections, in that order (DistilBERT: q_lin, ...).
    qkv_names: tuple[str, str, str] = QKV
    # A family whose tensors are not laid out like BERT's (T5's encoder and decoder stacks) lists them
    # itself, for a config: (config, HF tensors on import / None on export) -> TensorMap of full keys on
    # both sides. On import it may settle config fields the tensors decide (T5: whether the LM head is
    # its own matrix), as `state_from_hf` sets `pooler`. When set, encoder_keys, qkv and head_keys are unused.
    tensor_map: Callable[[ModelConfig, Mapping[str, torch.Tensor] | None], TensorMap] | None = None


# --- keys ------------------------------------------------------------------------------------------


def is_hf_config(raw: dict[str, Any]) -> bool:
    """A Hugging Face config.json has `model_type`; ours has `bertzoo_version`."""
    return "model_type" in raw and "bertzoo_version" not in raw


def expand(pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]], num_layers: int) -> list[tuple[str, str]]:
    """Instantiate `{i}` layer placeholders in (hf_key, our_key) pairs."""
    out = []
    for hf, ours in pairs:
        if "{i}" in hf:
            out.extend((hf.format(i=i), ours.format(i=i)) for i in range(num_layers))
        else:
            out.append((hf, ours))
    return out


def fuse_qkv(src: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor | None:
    """Concatenate separate query/key/value tensors (in that order) into our fused projection."""
    if all(n in src for n in names):
        return torch.cat([src[n] for n in names], dim=0)
    return None


def split_qkv(fused: torch.Tensor, parts: int = 3) -> list[torch.Tensor]:
    """Our fused (parts*width, ...) projection back into its parts (query, key, value)."""
    width = fused.size(0) // parts
    return [fused[j * width : (j + 1) * width].clone() for j in range(parts)]


def normalise_hf_keys(state: dict[str, torch.Tensor], prefix: str = "bert.") -> dict[str, torch.Tensor]:
    """Strip the base-model prefix and map TF-era names (LayerNorm gamma/beta) to today's."""
    out = {}
    for key, value in state.items():
        if key.startswith(prefix):
            key = key[len(prefix) :]
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        out[key] = value
    return out


def stored_layers(config: ModelConfig) -> int:
    """Layers with their own weights: one when every layer is the same (share="all")."""
    return 1 if config.share == "all" else config.num_layers


def _transposed(family: HFFamily, layers: int) -> set[str]:
    """The family's Conv1D keys with their layer index filled in."""
    return {hf for hf, _ in expand(tuple((k, k) for k in family.transposed), layers)}


def _head_keys(family: HFFamily, config: ModelConfig) -> list[tuple[str, str]]:
    heads = list(family.head_keys)
    if family.untied_decoder and not config.tie_word_embeddings:
        heads.append((family.untied_decoder, "mlm_head.decoder.weight"))
    return heads


def state_from_hf(
    state: dict[str, torch.Tensor], config: ModelConfig, family: HFFamily
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF tensors -> bertzoo keys (`encoder.` for the backbone, `mlm_head.`/`nsp_head.`/`rtd_head.` for
    heads). Returns (state, HF keys that were not used). Sets `config.pooler` to whether the checkpoint
    has one (BertModel does, the MaskedLM classes do not), so an encoder built from `config` fits."""
    src = normalise_hf_keys(state, prefix=family.base)
    if family.tensor_map is not None:
        return _mapped_from_hf(src, family.tensor_map(config, src), family)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    layers = stored_layers(config)
    transposed = _transposed(family, layers)
    for hf, ours in expand(family.encoder_keys, layers):
        if hf in src:
            out[f"encoder.{ours}"] = src[hf].t().contiguous() if hf in transposed else src[hf]
            used.add(hf)
    for i in range(layers if family.qkv else 0):
        for part in ("weight", "bias"):
            names = [family.qkv.format(i=i, n=n, part=part) for n in family.qkv_names]
            fused = fuse_qkv(src, names)
            if fused is not None:
                out[f"encoder.stack.layers.{i}.attention.qkv.{part}"] = fused
                used.update(names)
    for hf, ours in _head_keys(family, config):
        if hf in src:
            out[ours] = src[hf]
            used.add(hf)
    config.pooler = "encoder.pooler.dense.weight" in out
    # Buffers transformers recomputes, and copies of tied tensors, carry nothing of their own.
    ignorable = family.tied_copies | {"embeddings.position_ids", "embeddings.token_type_ids"}
    unused = sorted(k for k in src if k not in used and k not in ignorable)
    return out, unused


def state_to_hf(
    state: dict[str, torch.Tensor], config: ModelConfig, family: HFFamily, *, prefix: str = ""
) -> dict[str, torch.Tensor]:
    """bertzoo keys -> HF keys. An empty `prefix` gives the base model's names (BertModel); any other
    (the exporter passes "bert.") the heads models' names, under the family's own base prefix."""
    if family.tensor_map is not None:
        return _mapped_to_hf(state, family.tensor_map(config, None))
    base = family.base if prefix else ""
    out: dict[str, torch.Tensor] = {}
    layers = stored_layers(config)
    transposed = _transposed(family, layers)
    for hf, ours in expand(family.encoder_keys, layers):
        if f"encoder.{ours}" in state:
            tensor = state[f"encoder.{ours}"]
            out[base + hf] = tensor.t() if hf in transposed else tensor
    for i in range(layers if family.qkv else 0):
        for part in ("weight", "bias"):
            fused = state.get(f"encoder.stack.layers.{i}.attention.qkv.{part}")
            if fused is not None:
                for n, t in zip(family.qkv_names, split_qkv(fused), strict=True):
                    out[base + family.qkv.format(i=i, n=n, part=part)] = t
    # A tied decoder weight is not written: transformers re-ties it on load.
    for hf, ours in _head_keys(family, config):
        if ours in state:
            out[hf] = state[ours]
    return {k: v.contiguous() for k, v in out.items()}


def _mapped_from_hf(
    src: dict[str, torch.Tensor], pairs: TensorMap, family: HFFamily
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """`state_from_hf` of a family with its own TensorMap: every pair whose HF keys are all present."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for hf, ours in pairs:
        if all(k in src for k in hf):
            out[ours] = src[hf[0]] if len(hf) == 1 else torch.cat([src[k] for k in hf], dim=0)
            used.update(hf)
    unused = sorted(k for k in src if k not in used and k not in family.tied_copies)
    return out, unused


def _mapped_to_hf(state: dict[str, torch.Tensor], pairs: TensorMap) -> dict[str, torch.Tensor]:
    """`state_to_hf` of a family with its own TensorMap: every pair whose key of ours is in `state`."""
    out: dict[str, torch.Tensor] = {}
    for hf, ours in pairs:
        if ours in state:
            parts = [state[ours]] if len(hf) == 1 else split_qkv(state[ours], len(hf))
            out.update(zip(hf, parts, strict=True))
    return {k: v.contiguous() for k, v in out.items()}


# --- config.json -----------------------------------------------------------------------------------

# Hugging Face config key -> (ModelConfig field, kind of value, BERT's default).
HF_CONFIG_FIELDS: dict[str, tuple[str, str, Any]] = {
    "vocab_size": ("vocab_size", "size", REQUIRED),
    "hidden_size": ("hidden_size", "size", REQUIRED),
    "num_hidden_layers": ("num_layers", "size", REQUIRED),
    "num_attention_heads": ("num_heads", "size", REQUIRED),
    "intermediate_size": ("intermediate_size", "size", REQUIRED),
    "max_position_embeddings": ("max_position", "size", 512),
    "type_vocab_size": ("type_vocab_size", "count", 2),
    "hidden_act": ("hidden_act", "activation", "gelu"),
    "hidden_dropout_prob": ("dropout", "probability", 0.1),
    "attention_probs_dropout_prob": ("attention_dropout", "probability", 0.1),
    "layer_norm_eps": ("layer_norm_eps", "positive", 1e-12),
    "initializer_range": ("initializer_range", "non-negative", 0.02),
    "pad_token_id": ("pad_token_id", "count", 0),
    "tie_word_embeddings": ("tie_word_embeddings", "bool", True),
}
_KINDS = {
    "size": "a positive integer",
    "count": "a non-negative integer",
    "probability": "a number in [0, 1)",
    "positive": "a positive number",
    "non-negative": "a non-negative number",
    "bool": "true or false",
    "activation": f"one of {', '.join(HF_ACTIVATIONS)}",
    "string": "a string",
}


def _bad(key: str, kind: str, value: Any) -> CheckpointError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return CheckpointError(
        f"config.json: {key} must be {_KINDS[kind]}, got {shown}; fix the file or re-download the checkpoint"
    )


def hf_value(raw: dict[str, Any], key: str, kind: str, default: Any = REQUIRED) -> Any:
    """`raw[key]` checked to be of `kind` (see `_KINDS`), or `default` when absent or null; the one
    place a Hugging Face config value is validated, so a damaged file gives one line naming the key."""
    value = raw.get(key)
    if value is None:
        if default is REQUIRED:
            raise CheckpointError(
                f"config.json has no {key}, which a Hugging Face {raw.get('model_type')} config must state; "
                "fix the file or re-download the checkpoint"
            )
        return default
    if kind in ("size", "count"):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if kind == "size" else 0):
            raise _bad(key, kind, value)
        return value
    if kind in ("probability", "positive", "non-negative"):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _bad(key, kind, value)
        number = float(value)
        ok = (
            math.isfinite(number)
            and {
                "probability": 0.0 <= number < 1.0,
                "positive": number > 0.0,
                "non-negative": number >= 0.0,
            }[kind]
        )
        if not ok:
            raise _bad(key, kind, value)
        return number
    if kind == "bool":
        if not isinstance(value, bool):
            raise _bad(key, kind, value)
        return value
    if kind == "activation":
        if not isinstance(value, str) or value not in HF_ACTIVATIONS:
            raise CheckpointError(f"activation {value!r} in the Hugging Face config is not supported")
        return HF_ACTIVATIONS[value]
    if not isinstance(value, str):
        raise _bad(key, "string", value)
    return value


def check_hf_config(raw: dict[str, Any]) -> None:
    """The fields outside ModelConfig that loading and conversion read (architectures, labels)."""
    archs = raw.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise CheckpointError(
            f"config.json: architectures must be a list of class names, got {archs!r:.60}; fix the file"
        )
    for key in ("id2label", "label2id"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise CheckpointError(f"config.json: {key} must be a mapping, got {type(raw[key]).__name__}; fix the file")
    if raw.get("problem_type") is not None:
        hf_value(raw, "problem_type", "string")
    pe = hf_value(raw, "position_embedding_type", "string", "absolute")
    if pe != "absolute":
        raise CheckpointError(f"position_embedding_type={pe!r} is not supported; only 'absolute' positions convert")


def config_from_hf(raw: dict[str, Any], family: HFFamily, cls: type[ModelConfig] = ModelConfig) -> ModelConfig:
    """The config (`cls`, the family's config class) of a Hugging Face config dict of `family`: every key
    validated (CheckpointError naming it), BERT's defaults unless the family states its own, then the family's
    computed fields."""
    check_hf_config(raw)
    fields: dict[str, Any] = {"variant": family.variant}
    table = HF_CONFIG_FIELDS if family.config_fields is None else family.config_fields
    for key, (ours, kind, default) in table.items():
        fields[ours] = hf_value(raw, key, kind, family.config_defaults.get(key, default))
    if fields.get("pad_token_id") is not None and fields["pad_token_id"] >= fields["vocab_size"]:
        raise CheckpointError(
            f"config.json: pad_token_id={fields['pad_token_id']} is outside the vocabulary of "
            f"{fields['vocab_size']}; fix the file"
        )
    if family.read_fields is not None:
        fields.update(family.read_fields(raw, fields))
    try:
        return from_dict(cls, fields, "config.json")
    except BertzooError as exc:  # a combination ModelConfig refuses (e.g. hidden_size not divisible by heads)
        raise CheckpointError(f"{exc}; the Hugging Face config.json is inconsistent") from None


def hf_architecture(family: HFFamily, name: str) -> str:
    """The family's class for a BERT class name the exporter asks for (its own names pass through)."""
    if name in family.architectures:
        return family.architectures[name]
    if name in family.architectures.values():
        return name
    reason = family.refused.get(name) or f"{name} has no {family.model_type} counterpart"
    raise CheckpointError(f"{reason}; keep the bertzoo format (save_pretrained) for this model")


def check_exportable(
    config: ModelConfig,
    model_type: str,
    *,
    shares: tuple[str, ...] = ("none",),
    offset: int = 0,
    offset_name: str = "0",
    factorized: bool | None = False,
) -> None:
    """CheckpointError listing what a Hugging Face `model_type` model of the BERT kind cannot hold:
    every such family is bidirectional and post-norm with learned absolute positions; they differ in
    layer sharing, where positions start (`offset`, described as `offset_name`) and factorized
    embeddings (True: required, False: refused, None: either). GPT states its own checks."""
    problems = []
    if config.causal:
        problems.append("causal attention (it attends in both directions)")
    if not config.embedding_norm:
        problems.append("no LayerNorm over the embeddings (it has one)")
    if config.norm != "post":
        problems.append(f"norm={config.norm!r} (it is post-norm)")
    if config.position != "learned":
        problems.append(f"position={config.position!r} (it learns absolute positions)")
    if config.share not in shares:
        problems.append(f"share={config.share!r}, which has no Hugging Face {model_type} counterpart")
    if config.pooler and config.pooler_act != "tanh":
        problems.append(f"a {config.pooler_act} pooler (its pooler is tanh)")
    if config.position_offset != offset:
        problems.append(
            f"position_offset={config.position_offset}, but Hugging Face {model_type} numbers positions from "
            f"{offset_name}"
        )
    projected = bool(config.embedding_size) and config.embedding_size != config.hidden_size
    if factorized is False and config.embedding_size:
        problems.append(f"factorized embeddings (embedding_size={config.embedding_size}), which it does not have")
    if factorized is True and not projected:
        problems.append("no embedding projection (embedding_size unset or equal to hidden_size), which it always has")
    if problems:
        raise CheckpointError(
            f"cannot export to the Hugging Face {model_type!r} architecture: the model has {'; '.join(problems)}; "
            "keep the bertzoo format (save_pretrained) for this model"
        )


def config_to_hf(
    config: ModelConfig, family: HFFamily, architectures: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    """A Hugging Face config dict of `family` for `config` (the checks of what the family can hold are
    the variant's); `extra` adds the family's own keys."""
    return {
        "model_type": family.model_type,
        "architectures": [hf_architecture(family, a) for a in architectures or ["BertModel"]],
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        # RoBERTa's table has rows below its first position (position_offset); the others start at 0.
        "max_position_embeddings": config.max_position + config.position_offset,
        "type_vocab_size": config.type_vocab_size,
        "hidden_act": OUR_ACTIVATIONS[config.hidden_act],
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "layer_norm_eps": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        **extra,
    }
