"""Masked-LM corruption in two steps: *select* which positions to predict, then *corrupt* them.

Selection strategies are pluggable (token-level here; whole-word, span and entity selection add
their own functions with the same signature and output, a boolean mask) and all of them share
`corrupt`, the only place where BERT's 80/10/10 rule lives. Everything is vectorised over the
batch and driven by uniform numbers from `bertzoo.data.rng`, so a given (seed, epoch, example)
always gets the same mask however it is batched.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig
from bertzoo.data import rng
from bertzoo.errors import ConfigError

__all__ = [
    "SELECTORS",
    "STREAM_ACTION",
    "STREAM_SELECT",
    "STREAM_TOKEN",
    "Selector",
    "corrupt",
    "mask_tokens",
    "num_to_select",
    "rank_select",
    "select_tokens",
]

# Random streams: each decision draws from its own stream so they are independent.
STREAM_SELECT = "mlm/select"
STREAM_ACTION = "mlm/action"
STREAM_TOKEN = "mlm/token"


class Selector(Protocol):
    """A selection strategy: returns a bool array shaped like `input_ids`, True = predict here."""

    def __call__(
        self,
        input_ids: np.ndarray,
        special_mask: np.ndarray,
        rng_uniform: np.ndarray,
        mask_prob: float,
        max_predictions: int | None = None,
    ) -> np.ndarray: ...


def num_to_select(num_candidates: np.ndarray, mask_prob: float, max_predictions: int | None = None) -> np.ndarray:
    """Per row: round(mask_prob * candidates), at least 1 when there is a candidate, capped."""
    n = np.asarray(num_candidates, dtype=np.int64)
    k = np.rint(n * mask_prob).astype(np.int64)  # round half to even, like Python's round()
    k = np.where(n > 0, np.maximum(k, 1), 0)
    if max_predictions is not None:
        k = np.minimum(k, max_predictions)
    return k


def rank_select(keys: np.ndarray, candidates: np.ndarray, k: np.ndarray) -> np.ndarray:
    """True at the `k[row]` candidates with the smallest keys of each row (vectorised ranking).

    Shared by all strategies: token selection ranks tokens, whole-word or span selection can rank
    unit keys and expand the chosen units to positions.
    """
    keyed = np.where(candidates, keys, np.inf)
    order = np.argsort(keyed, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(keys.shape[-1])[None, :].repeat(keys.shape[0], 0), axis=-1)
    return (ranks < np.asarray(k)[:, None]) & candidates


def select_tokens(
    input_ids: np.ndarray,
    special_mask: np.ndarray,
    rng_uniform: np.ndarray,
    mask_prob: float,
    max_predictions: int | None = None,
) -> np.ndarray:
    """BERT's token-level selection: exactly `num_to_select` of each row's non-special positions.

    `special_mask` is True at special tokens and padding (never selected); `rng_uniform` holds one
    uniform key per position, and the lowest keys win.
    """
    candidates = ~np.asarray(special_mask, dtype=bool)
    k = num_to_select(candidates.sum(-1), mask_prob, max_predictions)
    return rank_select(np.asarray(rng_uniform), candidates, k)


# Every selection strategy by config name, listed explicitly (later: whole word, span, entity).
SELECTORS: dict[str, Selector] = {
    "token": select_tokens,
}


def corrupt(
    input_ids: np.ndarray,
    selected: np.ndarray,
    u_action: np.ndarray,
    u_token: np.ndarray,
    *,
    mask_id: int,
    replacement_ids: np.ndarray,
    replace_mask: float = 0.8,
    replace_random: float = 0.1,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Corrupt the selected positions: [MASK] with probability `replace_mask`, a random token from
    `replacement_ids` with probability `replace_random`, else unchanged. Returns (ids, labels), with
    labels = original id at selected positions and IGNORE_INDEX elsewhere.

    `u_action` (uniforms deciding the action) broadcasts against `input_ids`: per position (B, L),
    or one decision per row (B, 1). With `groups` (int array like `input_ids`), position l uses the
    decision drawn at `u_action[b, groups[b, l]]`, so all positions of a group (e.g. a span, with
    groups = index of its first token) share one action. `u_token` picks the random replacements.
    """
    input_ids = np.asarray(input_ids)
    selected = np.asarray(selected, dtype=bool)
    u = np.broadcast_to(u_action, input_ids.shape) if groups is None else None
    if groups is not None:
        ua = np.broadcast_to(u_action, (input_ids.shape[0], np.shape(u_action)[-1]))
        u = np.take_along_axis(ua, np.asarray(groups, dtype=np.int64), axis=-1)
    to_mask = selected & (u < replace_mask)
    to_random = selected & (u >= replace_mask) & (u < replace_mask + replace_random)
    replacement_ids = np.asarray(replacement_ids)
    out = np.where(to_mask, mask_id, input_ids)
    if to_random.any():
        pick = np.minimum(
            (np.asarray(u_token)[to_random] * len(replacement_ids)).astype(np.int64), len(replacement_ids) - 1
        )
        out[to_random] = replacement_ids[pick]
    labels = np.where(selected, input_ids, IGNORE_INDEX)
    return out.astype(input_ids.dtype, copy=False), labels.astype(np.int64, copy=False)


def mask_tokens(
    input_ids: np.ndarray,
    special_mask: np.ndarray,
    *,
    seed: int,
    epoch: np.ndarray | int,
    index: np.ndarray,
    config: MaskingConfig,
    mask_id: int,
    replacement_ids: np.ndarray,
    selector: str | Selector = "token",
) -> tuple[np.ndarray, np.ndarray]:
    """Select and corrupt a padded batch, keyed by (seed, epoch, example index, position).

    Returns (corrupted input_ids, labels). Positions are numbered from the start of each example,
    so padding length and batch neighbours do not change an example's mask.
    """
    if isinstance(selector, str):
        if selector not in SELECTORS:
            raise ConfigError(f"unknown masking strategy {selector!r}; choose one of: {', '.join(SELECTORS)}")
        selector = SELECTORS[selector]
    batch, length = input_ids.shape
    epoch = np.broadcast_to(np.asarray(epoch, dtype=np.int64), (batch,))[:, None]
    index = np.asarray(index, dtype=np.int64)[:, None]
    pos = np.arange(length, dtype=np.int64)[None, :]
    u_select = rng.uniform(seed, epoch, index, pos, STREAM_SELECT)
    selected = selector(input_ids, special_mask, u_select, config.mask_prob, config.max_predictions)
    u_action = rng.uniform(seed, epoch, index, pos, STREAM_ACTION)
    u_token = rng.uniform(seed, epoch, index, pos, STREAM_TOKEN)
    return corrupt(
        input_ids,
        selected,
        u_action,
        u_token,
        mask_id=mask_id,
        replacement_ids=replacement_ids,
        replace_mask=config.replace_mask,
        replace_random=config.replace_random,
    )
