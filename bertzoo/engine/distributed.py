"""Just enough process-group handling to make the training loop rank-aware.

Launchers such as `torchrun` describe the job through RANK / WORLD_SIZE / LOCAL_RANK; a plain
`python` run has none of them and is rank 0 of 1. Logging and checkpoint writing happen on rank 0
only, so every other helper here is a no-op in a single-process run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from bertzoo.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"environment variable {name}={raw!r} is not an integer; unset it or fix the launcher"
        ) from None


def dist_info() -> DistInfo:
    """Read RANK / WORLD_SIZE / LOCAL_RANK from the environment (defaults: a single process)."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", rank)
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is not within WORLD_SIZE={world}; fix the launcher's environment")
    return DistInfo(rank=rank, world_size=world, local_rank=local)


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group when WORLD_SIZE > 1 (nccl on CUDA, gloo on CPU); return this rank's info."""
    info = dist_info()
    if info.world_size > 1 and not is_initialized():
        if device.type == "cuda":
            gpus = torch.cuda.device_count()
            if info.local_rank >= gpus:
                raise ConfigError(
                    f"process {info.local_rank} of this node has no GPU of its own ({gpus} visible): start torchrun "
                    f"with --nproc_per_node {gpus} or fewer, or set train.device cpu"
                )
            torch.cuda.set_device(info.local_rank)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return info


def is_initialized() -> bool:
    """True when a process group is up (so collectives are needed)."""
    return dist.is_available() and dist.is_initialized()


def is_main() -> bool:
    """True on rank 0, the process that logs and writes files."""
    if is_initialized():
        return dist.get_rank() == 0
    return dist_info().rank == 0


def barrier() -> None:
    """Wait for every rank; a no-op in a single-process run."""
    if is_initialized():
        dist.barrier()


def main_first(fn: Callable[[], T]) -> T:
    """`fn()` on rank 0, then, once it is done, on every other rank: a cache that rank 0 writes the others read
    (a single-process run calls it once)."""
    if is_main():
        out = fn()
    barrier()
    if not is_main():
        out = fn()
    return out


def any_rank(flag: bool, device: torch.device | None = None) -> bool:
    """True if `flag` is true on any rank, so all ranks stop (or skip) together."""
    if not is_initialized():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device or "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks in place (identity in a single process)."""
    if is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_gather_objects(obj: Any) -> list[Any]:
    """`obj` from every rank, in rank order (a one-element list in a single process).

    Pickles between the processes of this job only (our own RNG states), never a user's file.
    """
    if not is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def cleanup() -> None:
    """Leave the process group if this process joined one."""
    if is_initialized():
        dist.destroy_process_group()
