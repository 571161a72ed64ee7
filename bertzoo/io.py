"""Files on disk, one place for each way of writing them: atomic writes of a file or of a whole
directory, safetensors weights, and the `config.json` + `model.safetensors` pair of a saved model.

It knows tensors, modules and `ModelConfig`, never a variant, a task or
a training run, so every layer above can save and load through it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
from bertzoo.config import FORMAT_VERSION, ModelConfig, from_dict, read_json, saved_fields
from bertzoo.errors import BertzooError, CheckpointError, DataError, DiskFullError, is_disk_full, room_problem
from bertzoo.interop.hf_keys import HFFamily

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
FINETUNE_CONFIG = "finetune_config.json"  # the FinetuneConfig a fine-tuned model directory was trained with
# A `bertzoo kg-embed` directory's entity list (ids in table order, the graph's name), which an ERNIE-THU
# model also keeps beside its weights: the linker's lexicon comes from it.
ENTITIES_FILE = "entities.json"
# Side data a module carries beside its weights (`side_data[kind]`, JSON), by kind: the file it is saved in.
SIDE_FILES = {"entities": ENTITIES_FILE}


# ------------------------------------------------------------------------------------ atomic writes


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


def fsync_file(path: str | Path) -> None:
    """Flush a written file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Below this much free space a failed write is taken for a full disk, whatever the writer's exception says.
LOW_SPACE = 1 << 20


def out_of_room(exc: BaseException, where: str | Path) -> str | None:
    """How a failed write at `where` (a file, or a directory being filled) ran out of room, as a message names it
    ("disk full", or the file-size limit), or None when it did not: an error that says so (`is_disk_full`), or one
    that does not (torch.save reports a short write as a RuntimeError, numpy as an OSError without errno) while the
    disk under `where` is nearly full or a file there reached the process's file-size limit."""
    if is_disk_full(exc):
        return room_problem(exc)
    if not isinstance(exc, (OSError, RuntimeError)):
        return None
    where = Path(where)
    try:
        disk = os.statvfs(where if where.exists() else where.parent)
        if disk.f_bavail * disk.f_frsize < LOW_SPACE:
            return "disk full"
    except OSError:
        pass
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    files = [where] if where.is_file() else [p for p in where.rglob("*") if p.is_file()] if where.is_dir() else []
    return room_problem(OSError(errno.EFBIG, "")) if any(p.stat().st_size >= limit for p in files) else None


def replace_atomically(write: Callable[[str], None], target: str | Path) -> Path:
    """Run `write(tmp_path)` on a temporary file beside `target`, fsync it and rename it over `target`,
    so readers see the old file or the new one, never a partial one. For writers that want a path
    (safetensors, torch.save); `write_atomic` is the same for bytes or text in memory."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        fsync_file(tmp)
        os.replace(tmp, target)
    except Exception as exc:
        problem = out_of_room(exc, tmp)
        Path(tmp).unlink(missing_ok=True)
        if problem:
            raise DiskFullError(f"{problem} while writing {target}; it was left as it was") from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return target


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (text as UTF-8) so readers see the old content or the new one, never a torn mix."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return replace_atomically(lambda tmp: Path(tmp).write_bytes(payload), path)


def write_json(path: str | Path, obj: Any) -> Path:
    """`obj` as indented JSON, written atomically."""
    return write_atomic(path, json.dumps(obj, indent=2) + "\n")


# Test hook: seconds to sleep at the steps of a directory write, so that the SIGKILL test in
# tests/engine/test_reliability.py reliably lands inside one. Unset in normal use.
TEST_PAUSE_ENV = "BERTZOO_TEST_SAVE_PAUSE"
_TMP_PID = re.compile(r"-(\d+)$")


def pause_for_tests() -> None:
    """Sleep for $BERTZOO_TEST_SAVE_PAUSE seconds when set (tests only)."""
    delay = os.environ.get(TEST_PAUSE_ENV)
    if delay:
        time.sleep(float(delay))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_tmp(root: str | Path, prefix: str) -> list[Path]:
    """Delete leftovers named `prefix*-PID` in `root` (temporary files or directories of an interrupted
    write), except those of another live process, whose write may still be under way."""
    root = Path(root)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for p in root.iterdir():
        if not p.name.startswith(prefix):
            continue
        m = _TMP_PID.search(p.name)
        pid = int(m.group(1)) if m else None
        if pid is not None and pid != os.getpid() and _pid_alive(pid):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def replace_dir(tmp: str | Path, target: str | Path) -> None:
    """Rename the finished directory `tmp` to `target`, replacing an existing `target`; if that
    fails, the old `target` is put back."""
    tmp, target = Path(tmp), Path(target)
    old = None
    if target.exists():
        # rename() cannot replace a non-empty directory: move the old one aside under a temporary
        # name, put the new one in place, then delete the old one.
        old = target.with_name(f".tmp-replaced-{target.name}-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)
        raise
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_dir_atomic(target: str | Path, writer: Callable[[Path], None]) -> Path:
    """Fill a directory with `writer(tmp_dir)` and rename it to `target` only once it is complete."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for prefix in (f".tmp-{target.name}-", f".tmp-replaced-{target.name}-"):
        remove_stale_tmp(target.parent, prefix)  # leftovers of a crashed earlier attempt
    tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        writer(tmp)
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                fsync_file(p)
        fsync_dir(tmp)
        pause_for_tests()
        replace_dir(tmp, target)
    except Exception as exc:
        problem = None if isinstance(exc, DiskFullError) else out_of_room(exc, tmp)
        if problem:
            raise DiskFullError(
                f"{problem} while writing {target}; its earlier content is intact, free space and run again"
            ) from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# ------------------------------------------------------------------------------------------ weights


def write_safetensors(state: dict[str, torch.Tensor], path: str | Path) -> Path:
    """A state dict as a safetensors file (every tensor its own storage), written atomically."""
    return replace_atomically(lambda p: save_file(state, p, metadata={"format": "pt"}), path)


def write_model_dir(directory: str | Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """A model directory: `state` as model.safetensors and `config` as config.json (each written atomically)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors(state, directory / WEIGHTS)
    write_json(directory / CONFIG, config)
    return directory


def read_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a model directory: model.safetensors, or pytorch_model.bin read with
    weights_only=True (never a pickle that could run code)."""
    directory = Path(directory)
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


def tied_aliases(module: nn.Module) -> dict[str, set[str]]:
    """For each state-dict key, the other keys that share its storage (tied weights)."""
    by_ptr: dict[tuple[int, int], list[str]] = {}
    for name, t in module.state_dict(keep_vars=True).items():
        by_ptr.setdefault((t.data_ptr(), t.numel()), []).append(name)
    return {n: set(group) - {n} for group in by_ptr.values() for n in group}


def missing_and_unexpected(module: nn.Module, keys: set[str]) -> tuple[list[str], list[str]]:
    """The module's state keys absent from `keys` (a key tied to a present one is not missing: tied tensors are
    stored once), and the `keys` the module does not have."""
    own = module.state_dict()
    aliases = tied_aliases(module)
    missing = [k for k in own if k not in keys and not (aliases.get(k, set()) & keys)]
    return missing, [k for k in keys if k not in own]


def load_into(module: nn.Module, state: dict[str, torch.Tensor], *, source: str = "checkpoint") -> None:
    """Copy `state` into `module`, requiring every key to match by name and shape; the error names
    every missing, unexpected or misshapen tensor. A key missing from `state` is fine only when it
    is tied to one that is present."""
    own = module.state_dict()
    missing, unexpected = missing_and_unexpected(module, set(state))
    mismatched = [
        f"{k} {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]
    problems = []
    for what, names in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", mismatched)):
        if names:
            problems.append(f"{what}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
    if problems:
        raise CheckpointError(
            f"{source} does not match the model ({'; '.join(problems)}); "
            "check that config.json belongs to these weights"
        )
    module.load_state_dict(state, strict=False)


# ------------------------------------------------------------------------------------ saved models


def save_module(
    module: nn.Module, config: ModelConfig, directory: str | Path, extra: dict[str, Any] | None = None
) -> None:
    """Write `config.json` (the ModelConfig plus `extra` fields) and `model.safetensors` (tied
    tensors stored once) into `directory`; refuses weights holding NaN or Inf."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, p in module.state_dict().items():
        if p.is_floating_point() and not torch.isfinite(p).all():
            raise CheckpointError(f"refusing to save: tensor {name} holds NaN or Inf values")
    payload = {"bertzoo_version": FORMAT_VERSION, **config.to_dict(), **(extra or {})}
    state = stored_state(module)
    replace_atomically(lambda p: save_file(state, p, metadata={"format": "pt"}), directory / WEIGHTS)
    write_json(directory / CONFIG, payload)


def stored_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict as written to disk: tied tensors (one storage, same offset and shape) once, under the
    first of their names in sorted order (safetensors' `save_model` rule), every tensor copied to the CPU.

    The copy is what lets a module whose parameters are views of one buffer be saved: on CUDA, cuDNN packs an
    LSTM's weights into one flat buffer (ELMo), which `save_model` refuses as partly shared storage."""
    state = module.state_dict()
    groups: dict[tuple, list[str]] = {}
    for name, t in state.items():
        groups.setdefault((t.device, t.data_ptr(), t.numel(), tuple(t.shape)), []).append(name)
    return {min(names): state[min(names)].detach().to("cpu", copy=True).contiguous() for names in groups.values()}


def save_pretrained(self: nn.Module, directory: str | Path) -> None:
    """Write config.json + model.safetensors: the model's config plus what `checkpoint_fields()`
    says rebuilds it (objective, task head, generator, ...). The `save_pretrained` method of every
    bertzoo model (attached by bertzoo.loading)."""
    fields = self.checkpoint_fields() if hasattr(self, "checkpoint_fields") else {}
    save_module(self, self.config, directory, extra=fields)
    save_side_data(self, directory)


def read_entities(directory: str | os.PathLike, error: type[BertzooError] = DataError) -> tuple[dict[str, Any], str]:
    """The `entities.json` object of a `bertzoo kg-embed` directory (a dict with an `entities` list) and the
    sha256 of its bytes (what a linking is keyed by); `error`, one line naming the fix, when the file is
    missing or is not such an object."""
    path = Path(directory) / ENTITIES_FILE
    hint = f"make it with `bertzoo kg-embed --kg wordnet --out {directory}`"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {path} ({exc.strerror or exc}): not a kg-embed directory; {hint}") from None
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise error(f"{path} is not valid JSON ({exc}); {hint}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("entities"), list):
        raise error(f"{path} has no 'entities' list; {hint}")
    return meta, hashlib.sha256(raw).hexdigest()


def save_side_data(module: nn.Module, directory: str | Path) -> None:
    """Write the JSON side data of `module` and its submodules (`side_data`: kind -> object) into `directory`,
    each kind in its `SIDE_FILES` file: what a model needs beside its weights (ERNIE-THU's entity list)."""
    for m in module.modules():
        for kind, obj in (getattr(m, "side_data", None) or {}).items():
            write_json(Path(directory) / SIDE_FILES[kind], obj)


def load_side_data(module: nn.Module, directory: str | Path) -> None:
    """Give each submodule that takes side data (`SIDE_DATA`: the kinds it reads) the files `directory` holds,
    through its `set_side_data(kind, obj)` (which validates them)."""
    for m in module.modules():
        for kind in getattr(m, "SIDE_DATA", ()):
            path = Path(directory) / SIDE_FILES[kind]
            if path.is_file():
                m.set_side_data(kind, read_json(path))


def read_config(
    directory: str | Path, family_of: Callable[[Any], HFFamily], config_class: Callable[[Any], type[ModelConfig]]
) -> tuple[dict[str, Any], ModelConfig, HFFamily | None]:
    """(raw config.json, its config, Hugging Face family or None for a bertzoo directory).
    `family_of(model_type)` names the family of a Hugging Face config (or raises); `config_class(variant)` is
    the config class of a family's models."""
    raw = read_json(Path(directory) / CONFIG)
    if hf_keys.is_hf_config(raw):
        family = family_of(raw.get("model_type"))
        return raw, hf_keys.config_from_hf(raw, family, config_class(family.variant)), family
    cls = config_class(raw.get("variant", "bert"))
    return raw, from_dict(cls, saved_fields(cls, raw), "model"), None


_WORD = "embeddings.word.weight"


def check_fits(config: ModelConfig, state: dict[str, torch.Tensor], source: str) -> None:
    """Before a model is built from `config`: the sizes it states must be those of the weights, so a
    damaged or mismatched config.json is one CheckpointError instead of a huge allocation or a
    failure deep inside the build. Checks the word table and the stored layers of the kept encoder."""
    prefix = "discriminator.encoder." if f"discriminator.encoder.{_WORD}" in state else "encoder."
    word = state.get(prefix + _WORD)
    width = config.embedding_size or config.hidden_size
    problems = []
    if word is not None and tuple(word.shape) != (config.vocab_size, width):
        problems.append(f"the word table is {tuple(word.shape)}, config.json says ({config.vocab_size}, {width})")
    qkv = state.get(f"{prefix}stack.layers.0.attention.qkv.weight")
    inner = config.num_heads * config.head_dim  # hidden_size unless the heads have their own width (T5's d_kv)
    if qkv is not None and tuple(qkv.shape) != (3 * inner, config.hidden_size):
        problems.append(f"attention is {tuple(qkv.shape)} wide, config.json says hidden_size={config.hidden_size}")
    layers = hf_keys.stored_layers(config)
    stored = {k[len(prefix) :].split(".")[2] for k in state if k.startswith(f"{prefix}stack.layers.")}
    if stored and stored != {str(i) for i in range(layers)}:
        problems.append(f"the weights hold {len(stored)} layer(s), config.json says {layers}")
    if problems:
        raise CheckpointError(
            f"{source}: config.json does not describe these weights ({'; '.join(problems)}); "
            "use the config.json saved with them"
        )


def read_checkpoint(
    directory: str | Path, family_of: Callable[[Any], HFFamily], config_class: Callable[[Any], type[ModelConfig]]
) -> tuple[dict[str, Any], ModelConfig, dict[str, torch.Tensor], bool]:
    """(raw config, ModelConfig, state with bertzoo keys, whether it was a Hugging Face directory).

    Hugging Face tensors are renamed by their family (task heads of other architectures are not
    part of the encoder: they are listed in raw["_unused_hf_keys"]); a bare encoder saved without
    prefixes gets the `encoder.` prefix every pretraining module uses."""
    raw, config, family = read_config(directory, family_of, config_class)
    state = read_weights(directory)
    if family is not None:
        state, unused = hf_keys.state_from_hf(state, config, family)
        if unused:
            raw = {**raw, "_unused_hf_keys": unused}
    elif not any(k.startswith(("encoder.", "discriminator.encoder.")) for k in state):
        state = {f"encoder.{k}": v for k, v in state.items()}
    check_fits(config, state, str(directory))
    return raw, config, state, family is not None
