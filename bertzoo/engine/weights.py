"""The model's files in a training run (checkpoints, `best/`, `final/`): what is saved is the user's
module without its DDP / torch.compile wrappers, never one holding NaN or Inf, and loading back is
strict, naming every tensor that does not fit."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from bertzoo.errors import CheckpointError
from bertzoo.io import WEIGHTS, missing_and_unexpected, stored_state


class NonFiniteModelError(CheckpointError):
    """The model holds NaN or Inf values, so it must not be saved."""


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside DDP / torch.compile wrappers (what is saved and loaded)."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def check_finite(model: nn.Module) -> None:
    """Raise NonFiniteModelError naming the parameters/buffers that hold NaN or Inf."""
    tensors = [(n, t) for n, t in model.state_dict().items() if t.is_floating_point() and t.numel()]
    if not tensors:
        return
    # One combined flag: a single device sync instead of one per tensor.
    if bool(torch.stack([t.isfinite().all() for _, t in tensors]).all()):
        return
    bad = [n for n, t in tensors if not bool(t.isfinite().all())]
    shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    raise NonFiniteModelError(
        f"refusing to save a model with NaN/Inf values (in {shown}); resume from the last good checkpoint "
        "with a lower train.lr or train.clip_norm set"
    )


def save_model_files(objective: nn.Module, directory: Path) -> None:
    """Write weights (+ config) with the objective's `save_pretrained`, or plain safetensors without one."""
    objective = unwrap(objective)
    parts = getattr(objective, "checkpoint_parts", None)
    if parts is not None:  # several modules' files (a distiller: the student's, then W_h's)
        (main, _), *rest = parts(directory / WEIGHTS)
        save_model_files(main, directory)
        for module, file in rest:
            save_file(stored_state(module), str(file))
        return
    if hasattr(objective, "save_pretrained"):
        objective.save_pretrained(directory)
    else:
        save_file(stored_state(objective), str(directory / WEIGHTS))
    if not (directory / WEIGHTS).is_file():
        raise CheckpointError(
            f"{type(objective).__name__}.save_pretrained did not write {WEIGHTS}; fix save_pretrained"
        )


def load_weights(objective: nn.Module, path: str | Path) -> None:
    """Load a safetensors file into `objective` strictly, reporting mismatches by name."""
    objective = unwrap(objective)
    path = Path(path)
    parts = getattr(objective, "checkpoint_parts", None)
    if parts is not None:  # an objective whose files are several modules' (a distiller: student + W_h)
        for module, file in parts(path):
            load_weights(module, file)
        return
    expected = objective.state_dict()
    mismatched = []
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                if key in expected:
                    shape = tuple(f.get_slice(key).get_shape())
                    if shape != tuple(expected[key].shape):
                        mismatched.append(f"{key} {list(shape)} vs model {list(expected[key].shape)}")
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise CheckpointError(f"cannot read {path} ({exc}); the file is damaged, use another checkpoint") from None
    if mismatched:
        raise CheckpointError(
            f"{path} does not fit the model, shape mismatch: {'; '.join(mismatched)}; "
            "build the model with the checkpoint's config.json"
        )
    state = load_file(str(path))
    missing, unexpected = missing_and_unexpected(objective, set(state))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys: {', '.join(sorted(missing))}")
        if unexpected:
            parts.append(f"unexpected keys: {', '.join(sorted(unexpected))}")
        raise CheckpointError(
            f"{path} does not fit the model ({'; '.join(parts)}); build the model with the checkpoint's config.json"
        )
    objective.load_state_dict(state, strict=False)
