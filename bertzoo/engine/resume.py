"""Continuing a run: which checkpoint `--resume` means, reading back the loop's progress from its
`trainer_state.json`, and giving every rank its own random streams again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bertzoo.engine.checkpoint import restore_rank_rng
from bertzoo.engine.manifest import STATE_FILE, find_latest_checkpoint, list_checkpoints
from bertzoo.errors import CheckpointError, ConfigError

RESUME_HINT = "--resume auto"


def resolve_resume(resume: str | None, output_dir: Path, *, cleanup: bool, say: Callable[[str], None]) -> Path | None:
    """The checkpoint directory to continue from, or None to start fresh.

    `resume`: None starts fresh (refused when `output_dir` already holds checkpoints, which would mix two
    runs), "auto" picks the newest checkpoint that verifies (fresh if none; `cleanup` removes leftovers
    of interrupted saves), anything else is a checkpoint directory.
    """
    if resume is None:
        if list_checkpoints(output_dir):
            # Starting over would mix two runs' checkpoints; --resume auto would later pick the old one.
            raise ConfigError(
                f"{output_dir} already holds checkpoints of a run; continue it with {RESUME_HINT}, "
                "or choose another train.output_dir (or delete that one) to start fresh"
            )
        return None
    if resume == "auto":
        path = find_latest_checkpoint(output_dir, verify_hash=True, cleanup=cleanup)
        if path is None:
            say(f"no complete checkpoint in {output_dir / 'checkpoints'}; starting fresh")
        return path
    path = Path(resume)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist; pass a checkpoint directory or {RESUME_HINT}")
    return path


@dataclasses.dataclass(frozen=True)
class SavedProgress:
    """The part of a checkpoint's `trainer_state.json` the loop continues from (the rest is a record)."""

    step: int
    sampler: dict[str, Any]  # the sampler's state dict: the data position
    tokens_seen: int
    elapsed_seconds: float
    skipped_steps: int
    best_metric: dict[str, Any] | None
    evals_without_improvement: int


def read_progress(state: dict[str, Any], path: Path) -> SavedProgress:
    """`state` (as `load_checkpoint` returns it) typed; CheckpointError naming the file when a field is
    missing or malformed."""
    try:
        return SavedProgress(
            step=int(state["step"]),
            sampler=state["sampler"],
            tokens_seen=int(state.get("tokens_seen", 0)),
            elapsed_seconds=float(state.get("elapsed_seconds", 0.0)),
            skipped_steps=int(state.get("skipped_steps", 0)),
            best_metric=state.get("best_metric"),
            evals_without_improvement=int(state.get("evals_without_improvement", 0)),
        )
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path}/{STATE_FILE} is incomplete; use another checkpoint") from None


def restore_streams(path: Path, rank: int, seed: int, step: int) -> None:
    """This rank's RNG streams from checkpoint `path`; derived from (seed, rank, step) when the run that
    wrote it had fewer processes. Deterministic either way (same resume, same run); the continuation is
    exact for the ranks the checkpoint held."""
    if not restore_rank_rng(path, rank):
        torch.manual_seed(seed + 1_000_003 * rank + step)
