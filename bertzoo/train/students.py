"""Where a distillation student starts: the teacher's own layers (DistilBERT), a model directory (a
general-distilled student), or random weights of a preset (TinyBERT's 4 x 312)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from bertzoo.config import ModelConfig, StudentConfig
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.distill import spread_layers

# A teacher-config field a student taken from its layers cannot change (they shape the copied tensors).
_KEPT = ("hidden_size", "num_heads", "intermediate_size", "embedding_size", "vocab_size", "max_position")


def chosen_layers(teacher: ModelConfig, student: StudentConfig) -> list[int]:
    """The teacher layers (0-based) a `teacher_layers` student copies: `student.layers`, else
    `student.num_layers` (default: half the teacher's, rounded up) spread from first to last."""
    if student.layers:
        bad = [i for i in student.layers if not 0 <= i < teacher.num_layers]
        if bad:
            raise ConfigError(
                f"student.layers {student.layers} names layers the teacher does not have (it has 0.."
                f"{teacher.num_layers - 1}); pick 0-based teacher layers"
            )
        return list(student.layers)
    n = student.num_layers or math.ceil(teacher.num_layers / 2)
    return spread_layers(teacher.num_layers, n)


def student_config(teacher: ModelConfig, student: StudentConfig, num_layers: int) -> ModelConfig:
    """The teacher's architecture with `num_layers` layers, as the student's family (`student.variant`)."""
    from bertzoo.variants import get_variant

    variant = get_variant(student.variant)
    # The fields the student's config class has (a plain encoder student of an ERNIE-THU teacher has no entity
    # stream).
    names = {f.name for f in dataclasses.fields(variant.config_class)} - {"variant"}
    fields = {k: v for k, v in teacher.to_dict().items() if k in names}
    fields["num_layers"] = num_layers
    defaults = variant.defaults
    # The family's structural choices (DistilBERT: no token types, a relu pooler) replace the teacher's.
    for key in ("type_vocab_size", "pooler", "pooler_act"):
        if key in defaults:
            fields[key] = defaults[key]
    fields["share"] = "none"  # each chosen layer gets its own copy (an ALBERT teacher shares one)
    return variant.model_config(fields)


def encoder_from_teacher(teacher: Encoder, student: StudentConfig) -> tuple[Encoder, list[int]]:
    """A student encoder holding the teacher's embeddings and chosen layers (DistilBERT's
    initialisation); returns it and the layers taken. A student without token types (DistilBERT) gets
    the teacher's type-0 row folded into its position table, so a single sentence encodes as before."""
    layers = chosen_layers(teacher.config, student)
    config = student_config(teacher.config, student, len(layers))
    for key in _KEPT:
        if getattr(config, key) != getattr(teacher.config, key):
            raise ConfigError(f"a student taken from the teacher's layers keeps its {key}; remove that override")
    encoder = Encoder(config)
    source = teacher.state_dict()
    target = encoder.state_dict()
    new: dict[str, torch.Tensor] = {}
    for key in target:
        if key.startswith("stack.layers."):
            _, _, i, rest = key.split(".", 3)
            from_key = f"stack.layers.{layers[int(i)] if teacher.config.share != 'all' else 0}.{rest}"
        else:
            from_key = key
        if from_key in source and source[from_key].shape == target[key].shape:
            new[key] = source[from_key].clone()
    if teacher.embeddings.token_type is not None and encoder.embeddings.token_type is None:
        position = "embeddings.position.weight"
        if position not in new:
            raise ConfigError("a student without token types needs learned positions to fold them into")
        new[position] = new[position] + source["embeddings.token_type.weight"][0]
    missing = [k for k in target if k not in new and not k.startswith("pooler.")]
    if missing:
        raise ConfigError(f"the teacher has nothing for the student's {missing[0]}; initialise the student otherwise")
    encoder.load_state_dict(new, strict=False)
    return encoder, layers


def copy_matching(target: nn.Module, source: nn.Module, prefix: str) -> int:
    """Copy the tensors under `prefix` that `source` and `target` both have with one shape (a head);
    returns how many."""
    src = source.state_dict()
    own = target.state_dict()
    found = {k: src[k] for k in own if k.startswith(prefix) and k in src and src[k].shape == own[k].shape}
    target.load_state_dict(found, strict=False)
    return len(found)


def random_encoder(spec: dict[str, Any], tokenizer: Any, seed: int) -> Encoder:
    """A randomly initialised encoder of `spec` ({variant, preset, ...fields}) for `tokenizer`, seeded."""
    from bertzoo.variants import model_config_of

    if not spec:
        raise ConfigError(
            "student.init=random needs student.model_config, e.g. {variant: bert, preset: tinybert-4l-312}"
        )
    _, config = model_config_of(spec, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Encoder(config)
