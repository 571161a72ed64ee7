"""Crash-safe training checkpoints.

Layout (one directory per checkpoint, under `<output_dir>/checkpoints/`)::

    step-00001000/
        model.safetensors    weights (objective.save_pretrained; tied weights stored once)
        config.json          model config (objective.save_pretrained)
        optimizer.pt         {"optimizer", "scheduler", "scaler"} state dicts (torch.save)
        rng.pt               torch CPU/CUDA, python `random` and numpy RNG states (torch.save)
        trainer_state.json   step, epoch, sampler position, tokens seen, elapsed time, ...
        <extra files>        e.g. tokenizer files written by the `extra` callback
        manifest.json        written last: step, every file's size and sha256

A checkpoint is written into `.tmp-step-XXXXXXXX-<pid>/`, every file is fsynced, the manifest is
written last and the directory is renamed into place, so a crash at any moment leaves either a
complete checkpoint or a `.tmp-*` leftover that `find_latest_checkpoint` ignores and removes.
`.pt` files are only ever read with `torch.load(weights_only=True)`: a checkpoint cannot run code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from bertzoo.errors import CheckpointError, DiskFullError, is_disk_full

log = logging.getLogger("bertzoo.train")

CHECKPOINTS_DIR = "checkpoints"
MANIFEST = "manifest.json"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "trainer_state.json"
REQUIRED_FILES = (MODEL_FILE, OPTIMIZER_FILE, RNG_FILE, STATE_FILE)
FORMAT = "bertzoo-checkpoint"
FORMAT_VERSION = 1

_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_TMP_PID = re.compile(r"-(\d+)$")
# Test hook: seconds to sleep after each file of a save, rename or deletion, so that the SIGKILL test in
# tests/test_reliability.py reliably lands inside a checkpoint write. Unset in normal use.
TEST_PAUSE_ENV = "BERTZOO_TEST_SAVE_PAUSE"


def _test_pause() -> None:
    delay = os.environ.get(TEST_PAUSE_ENV)
    if delay:
        time.sleep(float(delay))


class NonFiniteModelError(CheckpointError):
    """The model holds NaN or Inf values, so it must not be saved."""


# --------------------------------------------------------------------------------------------- files


def fsync_dir(path: str | Path) -> None:
    """Make a rename or file creation inside `path` durable (no-op where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write a file so readers see the old content or the new one, never a torn mix.

    Writes `data` (text is UTF-8) to a temporary file in the same directory, fsyncs it, renames it
    over `path` and fsyncs the directory.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def _write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(directory: str | Path, step: int) -> dict[str, Any]:
    """fsync every file in `directory`, then write `manifest.json` (sizes and sha256) last."""
    directory = Path(directory)
    files = []
    for p in _files_in(directory):
        _fsync_file(p)
        files.append({"path": p.relative_to(directory).as_posix(), "size": p.stat().st_size, "sha256": _sha256(p)})
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "step": step,
        "created": time.time(),
        "files": files,
    }
    _write_json(directory / MANIFEST, manifest)
    return manifest


def _replace_dir(tmp: Path, target: Path) -> None:
    """Rename finished directory `tmp` to `target`, replacing an existing `target` directory."""
    old = None
    if target.exists():
        # rename() cannot replace a non-empty directory: move the old one aside (as a .tmp-* name that
        # cleanup understands), put the new one in place, then delete the old one.
        old = target.with_name(f".tmp-replaced-{target.name}-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.rename(target, old)
    os.rename(tmp, target)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_dir_atomic(target: str | Path, writer: Callable[[Path], None]) -> Path:
    """Fill a directory with `writer(tmp_dir)` and rename it to `target` only once it is complete."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for prefix in (f".tmp-{target.name}-", f".tmp-replaced-{target.name}-"):
        _remove_stale_tmp(target.parent, prefix)  # leftovers of a crashed earlier attempt
    tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        writer(tmp)
        for p in _files_in(tmp):
            _fsync_file(p)
        fsync_dir(tmp)
        _test_pause()
        _replace_dir(tmp, target)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFullError(
                f"disk full while writing {target}; its earlier content is intact, free space and run again"
            ) from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# ------------------------------------------------------------------------------------------- model


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
    if hasattr(objective, "save_pretrained"):
        objective.save_pretrained(directory)
    else:
        save_model(objective, str(directory / MODEL_FILE))
    if not (directory / MODEL_FILE).is_file():
        raise CheckpointError(
            f"{type(objective).__name__}.save_pretrained did not write {MODEL_FILE}; fix save_pretrained"
        )


def load_weights(objective: nn.Module, path: str | Path) -> None:
    """Load a safetensors file into `objective` strictly, reporting mismatches by name."""
    objective = unwrap(objective)
    path = Path(path)
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
    missing, unexpected = load_model(objective, str(path), strict=False)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys: {', '.join(sorted(missing))}")
        if unexpected:
            parts.append(f"unexpected keys: {', '.join(sorted(unexpected))}")
        raise CheckpointError(
            f"{path} does not fit the model ({'; '.join(parts)}); build the model with the checkpoint's config.json"
        )


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


# --------------------------------------------------------------------------------------------- RNG


def capture_rng_state() -> dict[str, Any]:
    """RNG states of torch (CPU and initialised CUDA devices), python `random` and numpy's global RNG."""
    version, internal, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # Plain lists/ints keep rng.pt loadable with weights_only=True.
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {
            "name": np_name,
            "keys": [int(k) for k in np_keys],
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
    }
    # Only when CUDA is already in use: querying would otherwise initialise it in CPU-only runs.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rank_rng(path: str | Path, rank: int) -> bool:
    """Restore this rank's RNG streams from checkpoint `path`; False when it holds none for `rank`.

    Rank 0's streams are always there; other ranks' only when the checkpoint was written by a run
    with at least `rank + 1` processes.
    """
    state = safe_torch_load(Path(path) / RNG_FILE)
    if not isinstance(state, dict):
        raise CheckpointError(f"{Path(path) / RNG_FILE} has an unexpected layout; use another checkpoint")
    if rank > 0:
        others = state.get("ranks") or []
        if rank > len(others):
            return False
        state = others[rank - 1]
    restore_rng_state(state)
    return True


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    try:
        torch.set_rng_state(state["torch"])
        py = state["python"]
        random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
        if "numpy" in state:
            n = state["numpy"]
            keys = np.asarray(n["keys"], dtype=np.uint32)
            np.random.set_state((n["name"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"the RNG state in the checkpoint is malformed ({exc}); use another checkpoint") from None
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            log.warning(
                "checkpoint has CUDA RNG states for %d devices, this machine has %d; not restored",
                len(cuda),
                torch.cuda.device_count(),
            )


# ----------------------------------------------------------------------------------- directories


def checkpoint_name(step: int) -> str:
    """Directory name of the checkpoint taken after optimizer step `step`."""
    return f"step-{step:08d}"


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Checkpoints with a manifest (complete as written), oldest first; not verified."""
    root = Path(output_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / MANIFEST).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def verify_checkpoint(path: str | Path, *, check_hash: bool = True) -> dict[str, Any]:
    """Check a checkpoint against its manifest; return the manifest or raise CheckpointError."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{path} is not a complete checkpoint (no {MANIFEST}); pass a checkpoints/step-XXXXXXXX "
            "directory or use --resume auto"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = {f["path"]: f for f in manifest["files"]}
        step = int(manifest["step"])
        if not all(_valid_entry(f) for f in files.values()):
            raise ValueError("malformed file entry")
    except (UnicodeDecodeError, KeyError, TypeError, ValueError, RecursionError):  # ValueError: bad JSON too
        raise CheckpointError(f"{manifest_path} is corrupted; use another checkpoint") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format {manifest.get('format')} v{manifest.get('version')}, expected {FORMAT} "
            f"v{FORMAT_VERSION}; use a checkpoint written by this bertzoo version"
        )
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}; the checkpoint is incomplete, use another one")
    for name, meta in files.items():
        p = path / name
        if not p.is_file():
            raise CheckpointError(f"{p} listed in the manifest is missing; use another checkpoint")
        if p.stat().st_size != meta["size"]:
            raise CheckpointError(
                f"{p} has {p.stat().st_size} bytes, the manifest says {meta['size']}; the file is damaged, "
                "use another checkpoint"
            )
        if check_hash and _sha256(p) != meta["sha256"]:
            raise CheckpointError(f"{p} fails its sha256 check; the file is damaged, use another checkpoint")
    manifest["step"] = step
    return manifest


def _valid_entry(entry: Any) -> bool:
    """A manifest file entry: a relative path inside the checkpoint, an int size and a hash string."""
    path = entry.get("path")
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        return False  # never check (or hash) files outside the checkpoint directory
    return isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_tmp(output_dir: str | Path) -> list[Path]:
    """Remove `.tmp-*` leftovers of interrupted saves (except those of other live processes)."""
    return _remove_stale_tmp(Path(output_dir) / CHECKPOINTS_DIR, ".tmp-")


def _remove_stale_tmp(root: Path, prefix: str) -> list[Path]:
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for p in root.iterdir():
        if not p.name.startswith(prefix):
            continue
        m = _TMP_PID.search(p.name)
        pid = int(m.group(1)) if m else None
        if pid is not None and pid != os.getpid() and _pid_alive(pid):
            continue  # possibly a save in progress by another process
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def find_latest_checkpoint(output_dir: str | Path, *, verify_hash: bool = True, cleanup: bool = True) -> Path | None:
    """Newest checkpoint under `output_dir/checkpoints` that verifies against its manifest, or None.

    Incomplete `.tmp-*` directories are ignored (and removed when `cleanup`); damaged checkpoints
    are skipped with a warning, falling back to older ones.
    """
    if cleanup:
        cleanup_tmp(output_dir)
    for step, path in reversed(list_checkpoints(output_dir)):
        try:
            manifest = verify_checkpoint(path, check_hash=verify_hash)
        except CheckpointError as exc:
            log.warning("skipping checkpoint %s: %s", path, exc)
            continue
        if manifest["step"] != step:
            log.warning("skipping checkpoint %s: its manifest says step %d", path, manifest["step"])
            continue
        return path
    return None


def rotate_checkpoints(output_dir: str | Path, keep_last: int, protect: Path | None = None) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints; never deletes `protect`."""
    if keep_last is None or keep_last < 1:
        return []
    complete = list_checkpoints(output_dir)
    keep = {p for _, p in complete[-keep_last:]}
    if protect is not None:
        keep.add(Path(protect))
    removed = []
    for _, p in complete:
        if p in keep:
            continue
        # Rename first so a crash mid-delete leaves a .tmp-* leftover, not a half-deleted checkpoint
        # that still has a manifest.
        doomed = p.with_name(f".tmp-delete-{p.name}-{os.getpid()}")
        os.rename(p, doomed)
        _test_pause()
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(p)
    if removed:
        fsync_dir(Path(output_dir) / CHECKPOINTS_DIR)
    return removed


# ------------------------------------------------------------------------------------ save / load


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
    # every rank's streams (rank order): rank 0's stay at the top level, the others under "ranks".
    rng = capture_rng_state() if not rng_states else {**rng_states[0], "ranks": list(rng_states[1:])}
    try:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        save_model_files(objective, tmp)
        _test_pause()
        opt_state: dict[str, Any] = {"optimizer": optimizer.state_dict()}
        if scheduler is not None:
            opt_state["scheduler"] = scheduler.state_dict()
        if scaler is not None and scaler.is_enabled():
            opt_state["scaler"] = scaler.state_dict()
        torch.save(opt_state, tmp / OPTIMIZER_FILE)
        _test_pause()
        torch.save(rng, tmp / RNG_FILE)
        state = {**trainer_state, "step": step}
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _test_pause()
        if extra is not None:
            extra(tmp)
        write_manifest(tmp, step)  # fsyncs every file, manifest last
        fsync_dir(tmp)
        _test_pause()  # complete but not yet renamed: the window a crash must not turn into a bad checkpoint
        _replace_dir(tmp, target)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFullError(
                f"disk full while writing checkpoint {target}; the earlier checkpoints are intact, "
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
