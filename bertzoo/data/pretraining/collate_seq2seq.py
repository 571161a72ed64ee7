"""Encoder-decoder pretraining batches: the T5 paper's noise objectives and MASS.

Every collator turns examples (`input_ids` of plain text tokens, `index`, `epoch`) into a `Batch` for
an encoder-decoder:

* `input_ids`, `attention_mask`: the encoder input, padded with the pad id (1 = real token);
* `labels`: the decoder targets, padded with IGNORE_INDEX (-100);
* `batch.extra["decoder_input_ids"]`: the labels shifted right, starting with `decoder_start_token_id`
  (T5: the pad id), padding (-100) replaced by the pad id;
* `batch.extra["decoder_attention_mask"]`: 1 at real decoder positions;
* MASS only, `batch.extra["decoder_position_ids"]`: the original position of each target token in the
  sentence (0 at padding).

The objectives (`OBJECTIVES`; `seq2seq_collator(name, ...)` builds one by name):

* `span_corruption` (T5): `round(length * noise_density)` noise tokens (at least 1, at most
  length - 1) in `max(1, round(noise / mean_noise_span_length))` spans whose lengths come from a
  random segmentation. Each noise span becomes one sentinel in the input; the target is each
  sentinel followed by its span, then a final sentinel (the paper's "<X> for inviting <Y> last <Z>").
  Sentinel i is `vocab_size - 1 - i` (`<extra_id_i>`, counted down from the end of the vocabulary).
  T5's `random_spans_noise_mask` always starts with a clean span and ends with a noise span, so the
  first token is never noise and the last always is; here the interleaved mask is rolled by a random
  offset (as later t5 versions do with `random_roll`), which makes every position equally likely to be
  noise. A span that wraps around the end is then split in two (one more sentinel): this happens in
  about (noise - spans) / length of the examples.
* `prefix_lm`: split at a uniformly random point in [1, length - 1]; input = prefix, target = the rest.
* `deshuffle`: input = the tokens in a random order, target = the original order.
* `iid_mask` (the T5 paper's "BERT-style"): `mask_prob` of the tokens selected and corrupted by BERT's
  80/10/10 rule (`masking.mask_tokens`); the target is the WHOLE original sequence, not only the masked
  tokens.
* `mass` (Song et al. 2019): one contiguous span of `k` tokens (a fraction of the sentence, default
  0.5, or a count) starting at the beginning 20% of the time, at the end 20%, elsewhere 60%; in the
  encoder its tokens are replaced 80% [MASK] / 10% random / 10% kept; the decoder input is the span
  shifted right, starting with [MASK] by default (the paper's figure 1: decoder positions outside the
  span are [MASK], so the start token carries nothing from the source), with the span's original
  positions in `decoder_position_ids`; the labels are the span. Positions of the sentence outside the
  span are not in the decoder at all. k = 1 is BERT's single-token prediction, k = length a
  left-to-right LM over a fully masked source.

The T5 objectives append EOS to the input and the target when the vocabulary has one (`eos_id`:
"auto" takes `</s>` from a `Tokenizer`; a BERT WordPiece vocabulary has none); MASS appends nothing.
Special tokens in an example ([CLS], [SEP], [MASK], padding; `drop_special`) are removed first, so the
noise falls on text only.

Randomness is keyed by (seed, epoch, example index, objective): an example gets the same noise in any
batch, with any number of workers or processes (`bertzoo.data.rng`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import bertzoo.data.rng as rng
from bertzoo.batch import IGNORE_INDEX, Batch, pad_batch
from bertzoo.config import MaskingConfig, is_number
from bertzoo.data.pretraining.collate_mlm import flatten_bins
from bertzoo.data.pretraining.masking import corrupt, mask_tokens
from bertzoo.data.tokens.tokenizer import SpecialIds, Tokenizer
from bertzoo.errors import ConfigError, DataError

__all__ = [
    "OBJECTIVES",
    "DeshuffleCollator",
    "IIDMaskCollator",
    "MassCollator",
    "PrefixLMCollator",
    "Seq2SeqCollator",
    "Seq2SeqExample",
    "SpanCorruptionCollator",
    "mass_span",
    "random_segmentation",
    "random_spans_noise_mask",
    "seq2seq_collator",
    "shift_right",
    "span_corruption",
]

EOS_TOKEN = "</s>"
SENTINEL_TOKEN = "<extra_id_{}>"
_SENTINEL = re.compile(r"<extra_id_\d+>$")


@dataclass(frozen=True)
class Seq2SeqExample:
    """One example after noising: encoder input, decoder targets, and (MASS) the targets' positions."""

    inputs: np.ndarray  # (n_in,) int64
    targets: np.ndarray  # (n_out,) int64
    positions: np.ndarray | None = None  # (n_out,) int64 original positions of the targets


# ---------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------


def end_token_id(tokenizer: Tokenizer) -> int:
    """The token an encoder-decoder's source and target end with: `</s>` where the vocabulary has it (T5's),
    else [SEP] (a BERT WordPiece vocabulary). T5 pretraining, text-to-text fine-tuning and the attention
    view all read it here."""
    eos = tokenizer.token_to_id(EOS_TOKEN)
    return tokenizer.sep_id if eos is None else int(eos)


def random_segmentation(num_items: int, num_segments: int, generator: np.random.Generator) -> np.ndarray:
    """Lengths (int64, each >= 1, summing to `num_items`) of a uniformly random cut of `num_items` items
    into `num_segments` non-empty segments (T5's `_random_segmentation`)."""
    if not 1 <= num_segments <= num_items:
        raise ValueError(f"cannot cut {num_items} items into {num_segments} non-empty segments")
    cuts = np.sort(generator.choice(num_items - 1, size=num_segments - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [num_items]])).astype(np.int64)


def random_spans_noise_mask(
    length: int,
    noise_density: float,
    mean_noise_span_length: float,
    generator: np.random.Generator,
    *,
    roll: bool = True,
) -> np.ndarray:
    """(length,) bool, True = noise: T5's `random_spans_noise_mask`, rolled by a random offset.

    `round(length * noise_density)` noise tokens (clamped to [1, length - 1]) in
    `max(1, round(noise / mean_noise_span_length))` spans (at most the number of clean tokens),
    interleaved clean, noise, clean, noise, ... with lengths from `random_segmentation`. `roll=False`
    is upstream's mask, whose first token is never noise and whose last token always is.
    """
    if length < 2:
        raise ValueError(f"span corruption needs at least 2 tokens, got {length}")
    num_noise = min(max(int(np.rint(length * noise_density)), 1), length - 1)
    num_spans = max(1, int(np.rint(num_noise / mean_noise_span_length)))
    num_spans = min(num_spans, num_noise, length - num_noise)
    noise_lengths = random_segmentation(num_noise, num_spans, generator)
    clean_lengths = random_segmentation(length - num_noise, num_spans, generator)
    interleaved = np.stack([clean_lengths, noise_lengths], axis=1).reshape(-1)
    mask = np.repeat(np.tile(np.array([False, True]), num_spans), interleaved)
    if roll:
        mask = np.roll(mask, int(generator.integers(length)))
    return mask


def span_corruption(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) for a noise mask: each maximal noise run replaced by one sentinel in the
    inputs; the targets are sentinel i + run i for every run, then a final sentinel. Sentinel i is
    `vocab_size - 1 - i`. No EOS is added here."""
    tokens = np.asarray(tokens, dtype=np.int64)
    mask = np.asarray(noise_mask, dtype=bool)
    starts = mask & ~np.concatenate([[False], mask[:-1]])
    num_runs = int(starts.sum())
    sentinels = vocab_size - 1 - np.arange(num_runs + 1, dtype=np.int64)
    run = np.cumsum(starts) - 1
    inputs = np.where(starts, sentinels[np.maximum(run, 0)], tokens)[~mask | starts]
    # Insert sentinel i before the first token of run i among the noise tokens.
    targets = np.insert(tokens[mask], np.flatnonzero(starts[mask]), sentinels[:num_runs])
    return inputs, np.concatenate([targets, sentinels[num_runs:]])


def mass_span(length: int, k: int, generator: np.random.Generator) -> int:
    """The start of MASS's span of `k` tokens in a sentence of `length`: 0 with probability 0.2, the
    last possible start (length - k) with 0.2, otherwise uniform over the starts strictly between
    (over every start when there are none in between)."""
    last = length - k
    u = generator.random()
    if u < 0.2 or last == 0:
        return 0
    if u < 0.4:
        return last
    if last >= 2:
        return int(generator.integers(1, last))
    return int(generator.integers(0, last + 1))


def shift_right(labels: np.ndarray, start_id: int, pad_id: int) -> np.ndarray:
    """(batch, n) decoder inputs: `labels` shifted one to the right, `start_id` first, IGNORE_INDEX -> pad."""
    out = np.empty_like(labels)
    out[:, 0] = start_id
    out[:, 1:] = labels[:, :-1]
    return np.where(out == IGNORE_INDEX, pad_id, out)


def _probability(value: Any, name: str, *, open_low: bool = True, open_high: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > 0 if open_low else value >= 0) and (value < 1 if open_high else value <= 1)
    if not ok:
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        raise ConfigError(f"objective_args.{name} must be a number in {lo}0, 1{hi}, got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------------
# Collators
# ---------------------------------------------------------------------------------------------


class Seq2SeqCollator:
    """The shared part: reading and keying examples, EOS, padding, shifting. A subclass implements
    `example(tokens, epoch, index)`; `min_length` is the shortest example it accepts."""

    name = ""
    min_length = 1
    append_eos = True

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        seed: int,
        *,
        vocab_size: int | None = None,
        eos_id: int | str | None = "auto",
        decoder_start_token_id: int | None = None,
        pad_to_multiple_of: int = 8,
        drop_special: bool = True,
    ) -> None:
        if isinstance(tokenizer, Tokenizer):
            special = tokenizer.special
            vocab_size = tokenizer.vocab_size if vocab_size is None else vocab_size
            if eos_id == "auto":
                eos_id = tokenizer.token_to_id(EOS_TOKEN)
        else:
            special = SpecialIds(*tokenizer)
            if vocab_size is None:
                raise ConfigError("a seq2seq collator needs vocab_size when given special ids instead of a tokenizer")
            if eos_id == "auto":
                eos_id = None
        if isinstance(eos_id, str):
            raise ConfigError(f"eos_id must be a token id, 'auto' or None, got {eos_id!r}")
        self.special = special
        self.vocab_size = int(vocab_size)
        self.seed = int(seed)
        self.eos_id = None if eos_id is None else int(eos_id)
        self.pad_id = int(special.pad)
        self.decoder_start_token_id = int(
            self.default_start() if decoder_start_token_id is None else decoder_start_token_id
        )
        self.pad_to_multiple_of = pad_to_multiple_of
        self.drop_special = bool(drop_special)
        used = [*special, self.decoder_start_token_id] + ([self.eos_id] if self.eos_id is not None else [])
        bad = [i for i in used if not 0 <= i < self.vocab_size]
        if bad:
            raise ConfigError(f"special token id {bad[0]} is outside the vocabulary of {self.vocab_size}")
        self._dropped = np.zeros(self.vocab_size, dtype=bool)
        if self.drop_special:
            self._dropped[[special.pad, special.cls, special.sep, special.mask]] = True
            if self.eos_id is not None:
                self._dropped[self.eos_id] = True
        self._reserved = np.zeros(self.vocab_size, dtype=bool)
        self._reserved[used] = True
        self._top_special = max(used)
        if isinstance(tokenizer, Tokenizer):
            # A T5 vocabulary's sentinels are never a random replacement (iid_mask, MASS) either.
            vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
            self._reserved[[i for t, i in vocab.items() if _SENTINEL.match(t) and i < self.vocab_size]] = True

    def default_start(self) -> int:
        """T5's decoder start token: the pad id."""
        return self.special.pad

    @property
    def replacement_ids(self) -> np.ndarray:
        """Ids a random replacement may pick: every id but the special ones (and the sentinels)."""
        return np.flatnonzero(~self._reserved).astype(np.int64)

    def example(self, tokens: np.ndarray, epoch: int, index: int) -> Seq2SeqExample:
        raise NotImplementedError

    def generator(self, epoch: int, index: int) -> np.random.Generator:
        """This example's own random generator: keyed by (seed, epoch, index, objective)."""
        return rng.KeyedRNG(self.seed, epoch, index, f"seq2seq/{self.name}")

    def tokens(self, example: dict[str, Any]) -> np.ndarray:
        ids = np.asarray(example["input_ids"], dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise DataError(
                f"token id {int(ids.max())} is outside the vocabulary of {self.vocab_size}; "
                "the shards and the tokenizer or model do not match"
            )
        return ids[~self._dropped[ids]] if self.drop_special else ids

    def __call__(self, examples: Sequence[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Batch:
        examples = flatten_bins(examples)
        if not examples:
            raise DataError("cannot collate an empty list of examples")
        try:
            index = np.fromiter((int(e["index"]) for e in examples), dtype=np.int64, count=len(examples))
        except KeyError:
            raise DataError("pretraining examples need an 'index' (it seeds the noise)") from None
        epoch = np.fromiter((int(e.get("epoch", 0)) for e in examples), dtype=np.int64, count=len(examples))
        made, kept = [], []
        for e, ep, i in zip(examples, epoch.tolist(), index.tolist(), strict=True):
            tokens = self.tokens(e)
            # Packing leaves the odd block too short for the noise (a one-word tail of the corpus): it is
            # left out of the batch; the loss averages over the target tokens there are.
            if len(tokens) >= self.min_length:
                made.append(self.example(tokens, ep, i))
                kept.append(i)
        if not made:
            raise DataError(
                f"every example of the batch has fewer than {self.min_length} text token(s), the least the "
                f"{self.name} objective needs; raise data.max_seq_len or check the data"
            )
        return self.assemble(made, np.asarray(kept, dtype=np.int64))

    def assemble(self, made: Sequence[Seq2SeqExample], index: np.ndarray) -> Batch:
        """Pad encoder inputs and targets (appending EOS where this objective does) into a `Batch`."""
        eos = [self.eos_id] if self.append_eos and self.eos_id is not None else []
        inputs = [np.concatenate([m.inputs, eos]).astype(np.int64) for m in made]
        targets = [np.concatenate([m.targets, eos]).astype(np.int64) for m in made]
        ids, lengths = pad_batch(inputs, self.pad_id, self.pad_to_multiple_of)
        labels, _ = pad_batch(targets, IGNORE_INDEX, self.pad_to_multiple_of)
        attention = np.arange(ids.shape[1])[None, :] < lengths[:, None]
        batch = Batch(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(attention.astype(np.int64)),
            labels=torch.from_numpy(labels),
            example_index=torch.from_numpy(np.asarray(index, dtype=np.int64)),
        )
        batch.extra["decoder_input_ids"] = torch.from_numpy(
            shift_right(labels, self.decoder_start_token_id, self.pad_id)
        )
        batch.extra["decoder_attention_mask"] = torch.from_numpy((labels != IGNORE_INDEX).astype(np.int64))
        if made[0].positions is not None:
            positions, _ = pad_batch([m.positions for m in made], 0, self.pad_to_multiple_of)
            batch.extra["decoder_position_ids"] = torch.from_numpy(positions)
        return batch


class SpanCorruptionCollator(Seq2SeqCollator):
    """T5's span corruption (see the module doc): `noise_density` 0.15, `mean_noise_span_length` 3,
    sentinels counted down from the end of the vocabulary. `num_sentinels` ids at the top of the
    vocabulary are reserved for them (T5: 100): they must lie above every special id, and when a
    `Tokenizer` is given they must be its `<extra_id_i>` tokens or lie beyond its vocabulary (a model
    `vocab_size` larger than the tokenizer's), never ordinary tokens."""

    name = "span_corruption"
    min_length = 2

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        seed: int,
        *,
        noise_density: float = 0.15,
        mean_noise_span_length: float = 3.0,
        num_sentinels: int = 100,
        roll: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, seed, **kwargs)
        self.noise_density = _probability(noise_density, "noise_density")
        ok = isinstance(mean_noise_span_length, (int, float)) and not isinstance(mean_noise_span_length, bool)
        if not ok or not 1 <= mean_noise_span_length < math.inf:
            raise ConfigError(
                f"objective_args.mean_noise_span_length must be a number >= 1, got {mean_noise_span_length!r}"
            )
        if isinstance(num_sentinels, bool) or not isinstance(num_sentinels, int) or num_sentinels < 1:
            raise ConfigError(f"objective_args.num_sentinels must be an integer >= 1, got {num_sentinels!r}")
        self.mean_noise_span_length = float(mean_noise_span_length)
        self.num_sentinels = num_sentinels
        self.roll = bool(roll)
        first = self.vocab_size - num_sentinels  # the lowest sentinel id
        top_special = self._top_special
        if first <= top_special:
            raise ConfigError(
                f"a vocabulary of {self.vocab_size} has no room for {num_sentinels} sentinels above the special "
                f"id {top_special}; use a larger vocab_size (the tokenizer's + {num_sentinels}) or fewer num_sentinels"
            )
        if isinstance(tokenizer, Tokenizer) and first < tokenizer.vocab_size:
            for i in (0, num_sentinels - 1):
                if tokenizer.token_to_id(SENTINEL_TOKEN.format(i)) != self.vocab_size - 1 - i:
                    raise ConfigError(
                        f"ids {first}..{self.vocab_size - 1} are the tokenizer's ordinary tokens, not the sentinels "
                        f"<extra_id_{num_sentinels - 1}>..<extra_id_0>; set vocab_size to the tokenizer's "
                        f"{tokenizer.vocab_size} + {num_sentinels} so the sentinels get ids of their own"
                    )
        self._reserved[first:] = True

    def example(self, tokens: np.ndarray, epoch: int, index: int) -> Seq2SeqExample:
        if tokens.max() >= self.vocab_size - self.num_sentinels:
            raise DataError(
                f"example {index} holds token id {int(tokens.max())}, one of the {self.num_sentinels} sentinel ids "
                f"at the end of the vocabulary of {self.vocab_size}; the shards and the tokenizer do not match"
            )
        g = self.generator(epoch, index)
        mask = random_spans_noise_mask(len(tokens), self.noise_density, self.mean_noise_span_length, g, roll=self.roll)
        needed = int((mask & ~np.concatenate([[False], mask[:-1]])).sum()) + 1  # one per span, plus the final one
        if needed > self.num_sentinels:
            raise ConfigError(
                f"example {index} of {len(tokens)} tokens needs {needed} sentinels, more than "
                f"num_sentinels={self.num_sentinels}; shorten the examples or raise num_sentinels"
            )
        return Seq2SeqExample(*span_corruption(tokens, mask, self.vocab_size))


class PrefixLMCollator(Seq2SeqCollator):
    """The T5 paper's prefix LM: split at a uniformly random point in [1, length - 1]; the prefix is the
    input, the rest the target."""

    name = "prefix_lm"
    min_length = 2

    def example(self, tokens: np.ndarray, epoch: int, index: int) -> Seq2SeqExample:
        split = int(self.generator(epoch, index).integers(1, len(tokens)))
        return Seq2SeqExample(tokens[:split], tokens[split:])


class DeshuffleCollator(Seq2SeqCollator):
    """The T5 paper's deshuffling: the input is the tokens in a random order, the target the original."""

    name = "deshuffle"

    def example(self, tokens: np.ndarray, epoch: int, index: int) -> Seq2SeqExample:
        return Seq2SeqExample(tokens[self.generator(epoch, index).permutation(len(tokens))], tokens)


class IIDMaskCollator(Seq2SeqCollator):
    """The T5 paper's "BERT-style" objective: `mask_prob` of the tokens are selected and replaced 80%
    [MASK] / 10% random / 10% kept (BERT's `mask_tokens`, keyed by position); the target is the whole
    original sequence (the paper: "we simply use the entire uncorrupted sequence as the target"), not
    only the selected tokens."""

    name = "iid_mask"

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        seed: int,
        *,
        mask_prob: float = 0.15,
        replace_mask: float = 0.8,
        replace_random: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, seed, **kwargs)
        self.masking = MaskingConfig(mask_prob=mask_prob, replace_mask=replace_mask, replace_random=replace_random)
        self._replacements = self.replacement_ids

    def example(self, tokens: np.ndarray, epoch: int, index: int) -> Seq2SeqExample:
        masked, _ = mask_tokens(
            tokens[None, :],
            np.zeros((1, len(tokens)), dtype=bool),
            seed=self.seed,
            epoch=np.array([epoch]),
            index=np.array([index]),
            config=self.masking,
            mask_id=self.special.mask,
            replacement_ids=self._replacements,
        )
        return Seq2SeqExample(masked[0], tokens)


class MassCollator(Seq2SeqCollator):
    """MASS (see the module doc). `k`: the span length, a fraction of the sentence in (0, 1] (rounded,
    at least 1; default 0.5) or a number of tokens >= 1 (capped at the sentence length). The decoder
    starts with [MASK] unless `decoder_start_token_id` says otherwise; no EOS is appended."""

    name = "mass"
    append_eos = False
    STREAM_ACTION = "seq2seq/mass/action"
    STREAM_TOKEN = "seq2seq/mass/token"

    def __init__(
        self,
        tokenizer: Tokenizer | SpecialIds,
        seed: int,
        *,
        k: int | float = 0.5,
        replace_mask: float = 0.8,
        replace_random: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, seed, **kwargs)
        if not is_number(k):
            raise ConfigError(f"objective_args.k must be a fraction in (0, 1] or a token count >= 1, got {k!r}")
        if isinstance(k, float) and not 0 < k <= 1:
            raise ConfigError(f"objective_args.k as a fraction must be in (0, 1], got {k}; give a count as an integer")
        if isinstance(k, int) and k < 1:
            raise ConfigError(f"objective_args.k must be >= 1 tokens, got {k}")
        self.k = k
        self.replace_mask = _probability(replace_mask, "replace_mask", open_low=False, open_high=False)
        self.replace_random = _probability(replace_random, "replace_random", open_low=False, open_high=False)
        if self.replace_mask + self.replace_random > 1:
            raise ConfigError(
                f"objective_args.replace_mask + replace_random must be at most 1, got {replace_mask} + {replace_random}"
            )
        self._replacements = self.replacement_ids

    def default_start(self) -> int:
        """MASS's decoder starts with [MASK] (what the decoder sees outside the span)."""
        return self.special.mask

    def span_length(self, length: int) -> int:
        if isinstance(self.k, float):
            return min(length, max(1, int(np.rint(self.k * length))))
        return min(length, self.k)

    def example(self, tokens: np.ndarray, epoch: int, index: int) -> Seq2SeqExample:
        length = len(tokens)
        k = self.span_length(length)
        start = mass_span(length, k, self.generator(epoch, index))
        selected = np.zeros((1, length), dtype=bool)
        selected[0, start : start + k] = True
        pos = np.arange(length, dtype=np.int64)[None, :]
        inputs, _ = corrupt(
            tokens[None, :],
            selected,
            rng.uniform(self.seed, epoch, index, pos, self.STREAM_ACTION),
            rng.uniform(self.seed, epoch, index, pos, self.STREAM_TOKEN),
            mask_id=self.special.mask,
            replacement_ids=self._replacements,
            replace_mask=self.replace_mask,
            replace_random=self.replace_random,
        )
        span = slice(start, start + k)
        return Seq2SeqExample(inputs[0], tokens[span], np.arange(length, dtype=np.int64)[span])


OBJECTIVES: dict[str, type[Seq2SeqCollator]] = {
    "span_corruption": SpanCorruptionCollator,
    "prefix_lm": PrefixLMCollator,
    "deshuffle": DeshuffleCollator,
    "iid_mask": IIDMaskCollator,
    "mass": MassCollator,
}


def seq2seq_collator(objective: str, tokenizer: Tokenizer | SpecialIds, seed: int, **kwargs: Any) -> Seq2SeqCollator:
    """The collator of `objective` (a key of `OBJECTIVES`) with its keyword arguments."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"unknown seq2seq objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}")
    try:
        return OBJECTIVES[objective](tokenizer, seed, **kwargs)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        name = str(exc).rsplit(" ", 1)[-1]
        raise ConfigError(
            f"objective_args.{name.strip(chr(39))} is not an argument of the {objective} objective"
        ) from None
