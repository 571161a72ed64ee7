"""Crash-safe training checkpoints: `save_checkpoint` and `load_checkpoint`.

Layout (one directory per checkpoint, under `<output_dir>/checkpoints/`; names in `manifest`)::

    step-00001000/
        model.safetensors    weights (objective.save_pretrained; tied weights stored once)
        config.json          model config (objective.save_pretrained)
        optimizer.pt         {"optimizer", "scheduler", "scaler"} state dicts (torch.save)
        rng.pt               torch CPU/CUDA, python `random` and numpy RNG states, every rank's (`rng_state`)
        trainer_state.json   step, epoch, sampler position, tokens seen, elapsed time, ...
        <extra files>        e.g. tokenizer files written by the `extra` callback
        manifest.json        written last: step, every file's size and sha256 (`manifest`)

A checkpoint is written into `.tmp-step-XXXXXXXX-<pid>/`, every file is fsynced, the manifest is
written last and the directory is renamed into place, so a crash at any moment leaves either a
complete checkpoint or a `.tmp-*` leftover that `find_latest_checkpoint` ignores and removes.
`.pt` files are only ever read with `torch.load(weights_only=True)`: a checkpoint cannot run code.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertzoo.engine.manifest import (
    CHECKPOINTS_DIR,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_FILE,
    STATE_FILE,
    checkpoint_name,
    rotate_checkpoints,
    verify_checkpoint,
    write_manifest,
)
from bertzoo.engine.rng_state import pack_rank_states, rank_state, restore_rng_state
from bertzoo.engine.weights import check_finite, load_weights, save_model_files, unwrap
from bertzoo.errors import CheckpointError, DiskFullError
from bertzoo.io import fsync_dir, out_of_room, pause_for_tests, replace_dir


def safe_torch_load(path: str | Path) -> Any:
    """`torch.load(weights_only=True)` with clear errors; never unpickles arbitrary objects."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"refusing to unpickle {path}: it contains objects other than tensors and plain containers "
            f"({first[:200]}); it may be malicious, only use checkpoints written by bertzoo"
        ) from None
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; the checkpoint is incomplete, use another one") from None
    except Exception as exc:  # truncated zip, wrong format, ...
        raise CheckpointError(f"cannot read {path} ({type(exc).__name__}: {exc}); use another checkpoint") from None


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    objective: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    extra: Callable[[Path], None] | None = None,
    *,
    keep_last: int | None = None,
    scaler: Any = None,
    rng_states: list[dict[str, Any]] | None = None,
) -> Path:
    """Write a complete checkpoint to `output_dir/checkpoints/step-XXXXXXXX` and return its path.

    Raises NonFiniteModelError (and writes nothing) when the model holds NaN/Inf. With `keep_last`,
    older complete checkpoints are deleted once the new one is in place.
    """
    objective = unwrap(objective)
    check_finite(objective)
    root = Path(output_dir) / CHECKPOINTS_DIR
    target = root / checkpoint_name(step)
    tmp = root / f".tmp-{checkpoint_name(step)}-{os.getpid()}"
    # First, so nothing below can disturb the state being recorded. Under DDP/FSDP `rng_states` holds
    # every rank's streams (rank order).
    rng = pack_rank_states(rng_states)
    try:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        save_model_files(objective, tmp)
        pause_for_tests()
        opt_state: dict[str, Any] = {"optimizer": optimizer.state_dict()}
        if scheduler is not None:
            opt_state["scheduler"] = scheduler.state_dict()
        if scaler is not None and scaler.is_enabled():
            opt_state["scaler"] = scaler.state_dict()
        torch.save(opt_state, tmp / OPTIMIZER_FILE)
        pause_for_tests()
        torch.save(rng, tmp / RNG_FILE)
        state = {**trainer_state, "step": step}
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        pause_for_tests()
        if extra is not None:
            extra(tmp)
        write_manifest(tmp, step)  # fsyncs every file, manifest last
        fsync_dir(tmp)
        pause_for_tests()  # complete but not yet renamed: the window a crash must not turn into a bad checkpoint
        replace_dir(tmp, target)
    except Exception as exc:
        problem = out_of_room(exc, tmp)
        if problem:
            raise DiskFullError(
                f"{problem} while writing checkpoint {target}; the earlier checkpoints are intact, "
                "free space and continue with --resume auto"
            ) from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if keep_last:
        # Rotate only once the new checkpoint is known good, so a bad write never costs the old ones.
        verify_checkpoint(target, check_hash=False)
        rotate_checkpoints(output_dir, keep_last, protect=target)
    return target


_IMPL_KEYS = ("foreach", "fused", "capturable", "differentiable")


def _load_optimizer(optimizer: torch.optim.Optimizer, state: Any, path: Path) -> None:
    if not isinstance(state, dict) or "param_groups" not in state:
        raise CheckpointError(f"{path} holds no optimizer state; use another checkpoint")
    saved = [g.get("param_names") for g in state["param_groups"]]
    current = [g.get("param_names") for g in optimizer.param_groups]
    if all(n is not None for n in saved + current):
        have = {n for names in current for n in names}
        got = {n for names in saved for n in names}
        if have != got or [len(n) for n in saved] != [len(n) for n in current]:
            parts = []
            if have - got:
                parts.append(f"missing: {', '.join(sorted(have - got))}")
            if got - have:
                parts.append(f"unexpected: {', '.join(sorted(got - have))}")
            if not parts:
                parts.append("the parameters are grouped differently (weight-decay groups changed)")
            raise CheckpointError(
                f"optimizer state in {path} does not match the model's parameters ({'; '.join(parts)}); "
                "resume with the same model and optimizer setup"
            )
    # The checkpoint's implementation flags (foreach on CPU) must not override the ones chosen for this
    # device (fused on CUDA), so keep the current ones.
    impl = [{k: g[k] for k in _IMPL_KEYS if k in g} for g in optimizer.param_groups]
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(
            f"optimizer state in {path} does not match the optimizer ({exc}); resume with the same setup"
        ) from None
    for group, flags in zip(optimizer.param_groups, impl, strict=True):
        group.update(flags)


def load_checkpoint(
    path: str | Path,
    objective: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    scaler: Any = None,
    restore_rng: bool = True,
    verify_hash: bool = True,
) -> dict[str, Any]:
    """Restore model, optimizer, scheduler (and scaler) and RNG states; return the trainer state."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist; check the path or use --resume auto")
    verify_checkpoint(path, check_hash=verify_hash)
    # Unpickle-free reads first, so a refused file leaves the model untouched.
    opt_state = safe_torch_load(path / OPTIMIZER_FILE) if optimizer is not None or scheduler is not None else None
    rng_state = safe_torch_load(path / RNG_FILE) if restore_rng else None
    try:
        trainer_state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise CheckpointError(f"{path / STATE_FILE} is not valid JSON; use another checkpoint") from None
    if not isinstance(trainer_state, dict):
        raise CheckpointError(f"{path / STATE_FILE} does not hold a JSON object; use another checkpoint")
    load_weights(objective, path / MODEL_FILE)
    if opt_state is not None:
        if not isinstance(opt_state, dict):
            raise CheckpointError(f"{path / OPTIMIZER_FILE} has an unexpected layout; use another checkpoint")
        if optimizer is not None:
            _load_optimizer(optimizer, opt_state.get("optimizer"), path / OPTIMIZER_FILE)
        if scheduler is not None:
            if "scheduler" not in opt_state:
                raise CheckpointError(f"{path / OPTIMIZER_FILE} has no scheduler state; use another checkpoint")
            scheduler.load_state_dict(opt_state["scheduler"])
        if scaler is not None and scaler.is_enabled() and "scaler" in opt_state:
            scaler.load_state_dict(opt_state["scaler"])
    if rng_state is not None:
        if not isinstance(rng_state, dict):
            raise CheckpointError(f"{path / RNG_FILE} has an unexpected layout; use another checkpoint")
        restore_rng_state(rng_state)
    return trainer_state


def restore_rank_rng(path: str | Path, rank: int) -> bool:
    """Restore this rank's RNG streams from checkpoint `path`; False when it holds none for `rank`.

    Rank 0's streams are always there; other ranks' only when the checkpoint was written by a run
    with at least `rank + 1` processes.
    """
    packed = safe_torch_load(Path(path) / RNG_FILE)
    if not isinstance(packed, dict):
        raise CheckpointError(f"{Path(path) / RNG_FILE} has an unexpected layout; use another checkpoint")
    state = rank_state(packed, rank)
    if state is None:
        return False
    restore_rng_state(state)
    return True
