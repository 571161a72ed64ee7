"""Masked-LM corruption in two steps: *select* which positions to predict, then *corrupt* them.

Selection strategies are pluggable and all of them share `corrupt`, the only place where BERT's
80/10/10 rule lives:

* `token` (BERT): exactly `round(mask_prob * candidates)` tokens per row.
* `whole_word`, `phrase`, `entity` (Google's whole-word masking, ERNIE's knowledge masking): the same
  algorithm on different units. The caller passes `starts`, True at the first token of every unit
  (a word, or a phrase/entity with the remaining tokens grouped by word); units are taken in random
  order and a unit that would overshoot the budget is skipped, so a unit is never split.
* `span` (SpanBERT): span lengths in words from a geometric distribution (p = `span_p`, truncated at
  `max_span` and renormalised), anchored at a uniformly chosen unmasked word, never crossing a
  special token, until the budget is met.

Unit selectors return a `Selection` with `groups` (the first position of each position's unit or
span), which `corrupt` uses to apply one 80/10/10 decision per unit. Randomness comes from
`bertzoo.data.rng`, keyed by (seed, epoch, example index, position), so a given example always gets
the same mask however it is batched.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

import bertzoo.data.rng as rng
from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig
from bertzoo.errors import ConfigError

__all__ = [
    "SELECTORS",
    "STREAM_ACTION",
    "STREAM_SELECT",
    "STREAM_SPAN_LENGTH",
    "STREAM_TOKEN",
    "UNIT_STRATEGIES",
    "Selection",
    "Selector",
    "corrupt",
    "mask_tokens",
    "num_to_select",
    "rank_select",
    "sample_span_lengths",
    "select_spans",
    "select_tokens",
    "select_units",
    "span_length_pmf",
    "unit_bounds",
    "weighted_keys",
]

# Random streams: each decision draws from its own stream so they are independent.
STREAM_SELECT = "mlm/select"
STREAM_ACTION = "mlm/action"
STREAM_TOKEN = "mlm/token"
STREAM_SPAN_LENGTH = "mlm/span_length"

# Strategies that need unit boundaries (`starts`) from the caller.
UNIT_STRATEGIES = frozenset({"whole_word", "span", "phrase", "entity"})


class Selection(NamedTuple):
    """What a unit-level selector chose: the positions to predict and the unit of each position."""

    selected: np.ndarray  # (B, L) bool, True = predict here
    groups: np.ndarray  # (B, L) int64: first position of the unit (or span) a position belongs to
    ends: np.ndarray  # (B, L) int64: last position (inclusive) of that unit or span


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


def weighted_keys(rng_uniform: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Ranking keys for weighted selection without replacement: Exp(1) / weight (Efraimidis-Spirakis).

    Taking the k smallest keys draws k positions one after another, each with probability proportional
    to its weight among those left. Exp(1) is -log(1 - u), increasing in u, so with equal weights the
    ranking (hence the mask) is the same as ranking the uniforms themselves.
    """
    return -np.log1p(-np.asarray(rng_uniform, dtype=np.float64)) / np.asarray(weights, dtype=np.float64)


def unit_bounds(starts: np.ndarray, special_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit boundaries from start flags: (boundary, first, last), each (B, L).

    A unit starts where `starts` is True, at every special token or padding position (each is a unit
    of its own) and right after one, so no unit ever crosses [CLS]/[SEP]/padding even if `starts`
    says otherwise (e.g. a segment truncated in the middle of a word). `first`/`last` give, for every
    position, the first and last (inclusive) position of its unit.
    """
    special = np.asarray(special_mask, dtype=bool)
    b, length = special.shape
    after_special = np.zeros_like(special)
    after_special[:, 1:] = special[:, :-1]
    boundary = np.asarray(starts, dtype=bool) | special | after_special
    boundary[:, 0] = True
    pos = np.arange(length, dtype=np.int64)[None, :]
    first = np.maximum.accumulate(np.where(boundary, pos, 0), axis=1)
    # The next boundary after each position, scanning from the right.
    nxt = np.full((b, length), length, dtype=np.int64)
    nxt[:, :-1] = np.where(boundary[:, 1:], pos[:, 1:], length)
    nxt = np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1]
    return boundary, first, nxt - 1


def _selectable_units(
    starts: np.ndarray, special_mask: np.ndarray, mask_prob: float, max_predictions: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the unit selectors start from: (selectable unit starts, first, last, token budget per row).

    The budget counts tokens, as BERT's does, so whole-unit and span masking select as many tokens
    as token-level masking would.
    """
    special = np.asarray(special_mask, dtype=bool)
    candidates = ~special
    boundary, first, last = unit_bounds(starts, special)
    budget = num_to_select(candidates.sum(-1), mask_prob, max_predictions)
    return boundary & candidates, first, last, budget


def select_units(
    input_ids: np.ndarray,
    special_mask: np.ndarray,
    rng_uniform: np.ndarray,
    mask_prob: float,
    max_predictions: int | None = None,
    *,
    starts: np.ndarray,
) -> Selection:
    """Whole-unit selection (whole words, phrases, entities): units in random order (the key of a
    unit is the uniform at its first position), each taken whole while it fits the row's budget of
    `num_to_select` tokens; a unit that would overshoot is skipped, as in Google's whole-word
    masking, so units are never split and a row may end a few tokens under budget."""
    unit_start, first, last, budget = _selectable_units(starts, special_mask, mask_prob, max_predictions)
    keys = np.asarray(rng_uniform)
    selected = np.zeros_like(unit_start)
    for row in np.flatnonzero(budget > 0):
        pos = np.flatnonzero(unit_start[row])
        order = pos[np.argsort(keys[row, pos], kind="stable")]
        sizes = (last[row, order] - order + 1).tolist()
        remaining = int(budget[row])
        for p, n in zip(order.tolist(), sizes, strict=True):
            if n <= remaining:
                selected[row, p : p + n] = True
                remaining -= n
                if remaining == 0:
                    break
    return Selection(selected, first, last)


def span_length_pmf(p: float, max_span: int) -> np.ndarray:
    """P(length = 1..max_span): geometric(p) truncated at max_span and renormalised (SpanBERT: mean
    3.8 words for p=0.2, max 10)."""
    if not 0.0 < p <= 1.0:
        raise ConfigError(f"data.masking.span_p must be in (0, 1], got {p}")
    if max_span < 1:
        raise ConfigError(f"data.masking.max_span must be >= 1, got {max_span}")
    lengths = np.arange(1, max_span + 1)
    pmf = p * (1.0 - p) ** (lengths - 1)
    return pmf / pmf.sum()


def sample_span_lengths(u: np.ndarray, p: float, max_span: int) -> np.ndarray:
    """Span lengths (1..max_span, int64) from uniforms by inverting the truncated geometric CDF."""
    cdf = np.cumsum(span_length_pmf(p, max_span))
    cdf[-1] = 1.0  # guard against rounding: every u < 1 maps to a length <= max_span
    return np.searchsorted(cdf, np.asarray(u), side="right").astype(np.int64) + 1


def select_spans(
    input_ids: np.ndarray,
    special_mask: np.ndarray,
    rng_uniform: np.ndarray,
    mask_prob: float,
    max_predictions: int | None = None,
    *,
    starts: np.ndarray,
    u_length: np.ndarray,
    span_p: float = 0.2,
    max_span: int = 10,
) -> Selection:
    """SpanBERT's span masking, aligned to whole words (`starts` marks the first token of each word).

    The k-th span of a row is `sample_span_lengths(u_length[row, k])` words long. Anchor words are
    visited in random order (uniform over words; key = `rng_uniform` at the word's first token) and
    the span is placed at the first anchor where all its words are unmasked and inside one segment
    (spans never cross a special token or padding and never overlap, so each span keeps its own
    boundary tokens and 80/10/10 decision). Placing a span of the drawn length, rather than cutting
    it where it hits an obstacle, keeps the realised lengths on the geometric distribution. This
    goes on until the budget (`num_to_select` tokens) is spent: the last span is cut to the words
    that still fit. When no anchor is left for the drawn length (short rows), a second pass fills
    the remaining budget with spans cut at obstacles.
    """
    word_start, first, last, budget = _selectable_units(starts, special_mask, mask_prob, max_predictions)
    keys = np.asarray(rng_uniform)
    lengths = sample_span_lengths(u_length, span_p, max_span)  # (B, L): the length of the k-th span
    selected = np.zeros_like(word_start)
    groups = first.copy()
    ends = last.copy()
    for row in np.flatnonzero(budget > 0):
        w_first = np.flatnonzero(word_start[row])  # words in text order
        if not len(w_first):
            continue
        w_last = last[row, w_first]
        # Word i+1 continues word i's segment only if it starts right after it (no special between).
        contiguous = np.append(w_first[1:] == w_last[:-1] + 1, False).tolist()
        w_first_l, w_last_l = w_first.tolist(), w_last.tolist()
        taken = [False] * len(w_first_l)
        remaining = int(budget[row])
        row_lengths = lengths[row].tolist()
        anchors = np.argsort(keys[row, w_first], kind="stable").tolist()
        k = 0
        for strict in (True, False):
            for w in anchors:
                if remaining == 0:
                    break
                if taken[w]:
                    continue
                want = row_lengths[k % len(row_lengths)]
                if strict:  # the whole span must fit here: same segment, nothing masked yet
                    j = w
                    for _ in range(want - 1):
                        if not contiguous[j] or taken[j + 1]:
                            break
                        j += 1
                    if j - w + 1 < want:
                        continue
                start, end, n, j = w_first_l[w], -1, 0, w
                while n < want and not taken[j]:
                    size = w_last_l[j] - w_first_l[j] + 1
                    if size > remaining:
                        break
                    remaining -= size
                    taken[j] = True
                    end = w_last_l[j]
                    n += 1
                    if not contiguous[j]:
                        break
                    j += 1
                if n:
                    selected[row, start : end + 1] = True
                    groups[row, start : end + 1] = start
                    ends[row, start : end + 1] = end
                    k += 1
            if remaining == 0:
                break
    return Selection(selected, groups, ends)


# Every selection strategy by config name, listed explicitly. Unit strategies (UNIT_STRATEGIES) take
# `starts` as well: the word, phrase-level or entity-level unit starts (bertzoo.data.tokens.unit_flags).
SELECTORS: dict[str, Selector] = {
    "token": select_tokens,
    "whole_word": select_units,
    "span": select_spans,
    "phrase": select_units,
    "entity": select_units,
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
    starts: np.ndarray | None = None,
    return_selection: bool = False,
    position_weights: np.ndarray | None = None,
):
    """Select and corrupt a padded batch, keyed by (seed, epoch, example index, position).

    Returns (corrupted input_ids, labels), plus the `Selection` when `return_selection` (token
    selection then reports every position as its own unit). Unit strategies need `starts` (B, L),
    True at the first token of each unit. Positions are numbered from the start of each example,
    so padding length and batch neighbours do not change an example's mask. `position_weights` (B, L),
    positive, makes token selection weighted (`weighted_keys`); unit strategies refuse it.
    """
    name = selector if isinstance(selector, str) else None
    if isinstance(selector, str):
        if selector not in SELECTORS:
            raise ConfigError(f"unknown masking strategy {selector!r}; choose one of: {', '.join(SELECTORS)}")
        selector = SELECTORS[selector]
    batch, length = input_ids.shape
    epoch = np.broadcast_to(np.asarray(epoch, dtype=np.int64), (batch,))[:, None]
    index = np.asarray(index, dtype=np.int64)[:, None]
    pos = np.arange(length, dtype=np.int64)[None, :]
    u_select = rng.uniform(seed, epoch, index, pos, STREAM_SELECT)
    unit = name in UNIT_STRATEGIES or selector in (select_units, select_spans)
    if position_weights is not None:
        if unit:
            raise ConfigError(
                "data.masking.frequency_power works with token-level selection only; set "
                "data.masking.strategy=token or frequency_power=0"
            )
        u_select = weighted_keys(u_select, position_weights)
    if unit:
        if starts is None:
            raise ConfigError(
                f"masking strategy {name or getattr(selector, '__name__', selector)!r} needs unit boundaries "
                "(`starts`); use a collator that provides them "
                "(bertzoo.data.pretraining.collate_units.UnitMaskingCollator)"
            )
        kwargs: dict = {"starts": starts}
        if selector is select_spans:
            kwargs.update(
                u_length=rng.uniform(seed, epoch, index, pos, STREAM_SPAN_LENGTH),
                span_p=config.span_p,
                max_span=config.max_span,
            )
        result = selector(input_ids, special_mask, u_select, config.mask_prob, config.max_predictions, **kwargs)
    else:
        result = selector(input_ids, special_mask, u_select, config.mask_prob, config.max_predictions)
    if isinstance(result, Selection):
        selection = result
    else:
        own = np.broadcast_to(pos, input_ids.shape).copy()
        selection = Selection(np.asarray(result, dtype=bool), own, own.copy())
    u_action = rng.uniform(seed, epoch, index, pos, STREAM_ACTION)
    u_token = rng.uniform(seed, epoch, index, pos, STREAM_TOKEN)
    out, labels = corrupt(
        input_ids,
        selection.selected,
        u_action,
        u_token,
        mask_id=mask_id,
        replacement_ids=replacement_ids,
        replace_mask=config.replace_mask,
        replace_random=config.replace_random,
        groups=selection.groups if isinstance(result, Selection) else None,
    )
    if return_selection:
        return out, labels, selection
    return out, labels
