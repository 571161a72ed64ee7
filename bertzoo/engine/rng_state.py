"""The random number generator states a checkpoint carries, so a resumed run draws the same dropout
masks (and anything else random) as an uninterrupted one.

One state holds torch's CPU generator, the CUDA generators when CUDA is in use, python's `random` and
numpy's global generator, all as tensors and plain containers (loadable with `weights_only=True`).
Under DDP/FSDP every rank has its own streams: rank 0's stay at the top level of the saved state (so
a single-process run reads it unchanged), the others' go under `"ranks"` in rank order.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import torch

from bertzoo.errors import CheckpointError

log = logging.getLogger("bertzoo.train")


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


def pack_rank_states(states: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What `rng.pt` holds: this process's state now, or with `states` (every rank's, in rank order)
    rank 0's at the top level and the others under `"ranks"`."""
    if not states:
        return capture_rng_state()
    return {**states[0], "ranks": list(states[1:])}


def rank_state(packed: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """`rank`'s state from what `pack_rank_states` made; None when the run that saved it had fewer
    than `rank + 1` processes."""
    if rank == 0:
        return packed
    others = packed.get("ranks") or []
    return others[rank - 1] if rank <= len(others) else None
