"""TinyBERT's data augmentation: a masked LM proposes replacements for single-piece words.

TinyBERT (Jiao et al., 2020, `data_augmentation.py`) multiplies a task's training set before task
distillation: each word of a sentence is replaced, with probability p = 0.4, by one of the M = 15 words
a BERT masked LM finds most likely at its position (words of one WordPiece), or by a GloVe neighbour
(words of several pieces), N = 20 times per sentence. `augment_examples` does the masked-LM half; see
its docstring for where it differs.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertzoo.batch import Batch
from bertzoo.data.text.lines import is_cjk
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError, DataError
from bertzoo.objectives.mlm import MaskedLM

__all__ = ["augment_examples", "word_tokens"]

# Examples tokenized (and their copies' forwards prepared) together; bounds the memory held at once.
_CHUNK = 1024


@dataclass
class _Word:
    """A replaceable word: one token at `pos` in the model input, `text[start:end]` of field `field`."""

    field: int
    pos: int
    start: int
    end: int
    token: int


@dataclass
class _Prepared:
    """One example, tokenized: its text fields, the model input and its replaceable words."""

    texts: list[tuple[str, str]]  # (field name, text) of the fields present, in `fields` order
    ids: list[int]
    type_ids: list[int]
    words: list[_Word]


@dataclass
class _Copy:
    """One augmented copy that needs the masked LM: its chosen words and the uniform draws picking each
    replacement from the top-k."""

    example: int  # position in the chunk
    copy: int  # 1..copies
    words: list[_Word]
    picks: np.ndarray  # (len(words),) in [0, 1)
    replacements: list[int] | None = None  # token id per word, -1 = left as it was


def _check(name: str, ok: bool, allowed: str, value: object) -> None:
    if not ok:
        raise ConfigError(f"augment.{name} must be {allowed}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def word_tokens(tokenizer: Tokenizer) -> np.ndarray:
    """(vocab_size,) bool: the tokens that are a whole word and may stand in for one.

    A word token is one whose text tokenizes back to exactly itself and holds a letter or digit: this
    leaves out special and added tokens, [UNK], `##` continuations, `[unused0]`-style placeholders,
    tokens the normalizer never produces (upper case in an uncased vocabulary, accents it strips) and
    punctuation.
    """
    size = tokenizer.vocab_size
    added = set(tokenizer.backend.get_added_tokens_decoder())
    excluded = added | {int(i) for i in tokenizer.special_ids}
    ids = [i for i in range(size) if i not in excluded]
    tokens = [tokenizer.id_to_token(i) or "" for i in ids]
    encodings = tokenizer.backend.encode_batch(tokens, add_special_tokens=False)
    allowed = np.zeros(size, dtype=bool)
    for i, token, e in zip(ids, tokens, encodings, strict=True):
        allowed[i] = e.ids == [i] and any(ch.isalnum() for ch in token)
    return allowed


def _is_punctuation(ch: str) -> bool:
    """BERT's punctuation: ASCII symbols and Unicode P* (the pre-tokenizer splits words on them)."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _joins(ch: str) -> bool:
    """Whether `ch` next to another such character would make one word of two."""
    return not (ch.isspace() or _is_punctuation(ch) or is_cjk(ch) or unicodedata.category(ch).startswith("C"))


def _budgets(lengths: list[int], budget: int) -> list[int]:
    """Tokens kept per field: the longest fields are cut first (BERT's pair truncation), to `budget` in all."""
    if sum(lengths) <= budget:
        return list(lengths)
    budget = max(budget, 0)
    lo, hi = 0, max(lengths)  # the largest cap c with sum(min(l, c)) <= budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= budget:
            lo = mid
        else:
            hi = mid - 1
    kept = [min(n, lo) for n in lengths]
    spare = budget - sum(kept)
    for j, n in enumerate(lengths):  # what the cap leaves goes to the first fields it cut
        if spare and n > lo:
            kept[j] += 1
            spare -= 1
    return kept


def _prepare(
    chunk: list[tuple[int, dict[str, Any]]],
    tokenizer: Tokenizer,
    fields: Sequence[str],
    allowed: np.ndarray,
    max_seq_len: int,
    type_vocab_size: int,
) -> list[_Prepared]:
    texts_of: list[list[tuple[str, str]]] = []
    for index, example in chunk:
        if not isinstance(example, dict):
            raise DataError(f"augment: example {index} is a {type(example).__name__}, not a dict of fields")
        present = []
        for name in fields:
            value = example.get(name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise DataError(f"augment: example {index} field {name!r} is a {type(value).__name__}, not text")
            present.append((name, value))
        texts_of.append(present)
    flat = [text for present in texts_of for _, text in present]
    encodings = tokenizer.backend.encode_batch(flat, add_special_tokens=False) if flat else []
    prepared = []
    at = 0
    unk = tokenizer.unk_id
    for present in texts_of:
        encs = encodings[at : at + len(present)]
        at += len(present)
        kept = _budgets([len(e.ids) for e in encs], max_seq_len - 1 - len(present))
        ids, type_ids, words = [tokenizer.cls_id], [0], []
        for j, (e, keep) in enumerate(zip(encs, kept, strict=True)):
            segment = min(j, max(type_vocab_size - 1, 0))
            base = len(ids)
            # Group the tokens of each pre-tokenizer word; a word of one kept word token is replaceable.
            groups: dict[int, list[int]] = {}
            for t, w in enumerate(e.word_ids):
                if w is not None:
                    groups.setdefault(w, []).append(t)
            for group in groups.values():
                t = group[0]
                if len(group) == 1 and t < keep and e.ids[t] != unk and allowed[e.ids[t]]:
                    start, end = e.offsets[t]
                    words.append(_Word(j, base + t, start, end, e.ids[t]))
            ids += [*e.ids[:keep], tokenizer.sep_id]
            type_ids += [segment] * (keep + 1)
        words.sort(key=lambda w: w.pos)
        prepared.append(_Prepared(present, ids, type_ids, words))
    return prepared


@torch.inference_mode()
def _propose(
    mlm: MaskedLM,
    items: list[_Copy],
    prepared: list[_Prepared],
    tokenizer: Tokenizer,
    banned: torch.Tensor,
    candidates: int,
    use_types: bool,
) -> None:
    """One masked-LM forward over `items` (all chosen words of each copy masked together); sets each
    copy's `replacements` to a token drawn from the top-`candidates` allowed tokens at its position."""
    device = banned.device
    length = max(len(prepared[c.example].ids) for c in items)
    ids = torch.full((len(items), length), tokenizer.pad_id, dtype=torch.long)
    types = torch.zeros((len(items), length), dtype=torch.long)
    real = torch.zeros((len(items), length), dtype=torch.bool)
    selected = torch.zeros((len(items), length), dtype=torch.bool)
    for b, c in enumerate(items):
        p = prepared[c.example]
        n = len(p.ids)
        ids[b, :n] = torch.tensor(p.ids)
        types[b, :n] = torch.tensor(p.type_ids)
        real[b, :n] = True
        positions = torch.tensor([w.pos for w in c.words])  # ascending: the head's rows follow this order
        selected[b, positions] = True
    original = ids[selected]  # (num_selected,)
    ids[selected] = tokenizer.mask_id
    batch = Batch(input_ids=ids, attention_mask=real, token_type_ids=types if use_types else None).to(device)
    hidden = mlm.encode(batch).last_hidden_state  # (batch, seq, hidden)
    logits = mlm.mlm_head(hidden, selected.to(device)).float()  # (num_selected, vocab)
    logits = logits.masked_fill(banned, -math.inf)
    logits.scatter_(1, original.to(device)[:, None], -math.inf)  # never the word it replaces
    values, top = logits.topk(min(candidates, logits.size(1)), dim=1)  # (num_selected, k)
    values, top = values.cpu(), top.cpu()
    row = 0
    for c in items:
        chosen = []
        for pick in c.picks:
            pool = sorted(top[row][torch.isfinite(values[row])].tolist())  # sorted: topk's tie order is not ours
            chosen.append(pool[min(int(pick * len(pool)), len(pool) - 1)] if pool else -1)
            row += 1
        c.replacements = chosen


def _rebuild(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) span replaced by its new word; the rest is kept as it was. A space is
    put between a new word and a neighbour it would otherwise run into (a replaced CJK character next
    to a Latin word)."""
    out: list[str] = []
    at = 0
    last = ""  # the last character written so far
    starts = {start for start, _, _ in edits}
    for start, end, word in sorted(edits):
        between = text[at:start]
        last = between[-1] if between else last
        if last and _joins(last) and _joins(word[0]):
            word = " " + word
        if end < len(text) and end not in starts and _joins(text[end]) and _joins(word[-1]):
            word += " "
        out += [between, word]
        last = word[-1]
        at = end
    out.append(text[at:])
    return "".join(out)


def _check_settings(
    copies: int,
    replace_prob: float,
    candidates: int,
    batch_size: int,
    seed: int,
    max_seq_len: int,
    fields: Sequence[str],
) -> None:
    """ConfigError for the first of `augment_examples`' settings out of its range."""
    _check("copies", _is_int(copies) and copies >= 0, "an integer >= 0", copies)
    _check(
        "replace_prob",
        isinstance(replace_prob, (int, float)) and not isinstance(replace_prob, bool) and 0.0 <= replace_prob <= 1.0,
        "a number in [0, 1]",
        replace_prob,
    )
    _check("candidates", _is_int(candidates) and candidates >= 1, "an integer >= 1", candidates)
    _check("batch_size", _is_int(batch_size) and batch_size >= 1, "an integer >= 1", batch_size)
    _check("seed", _is_int(seed) and seed >= 0, "an integer >= 0", seed)
    _check("max_seq_len", _is_int(max_seq_len) and max_seq_len >= 3, "an integer >= 3", max_seq_len)
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields) or not fields:
        raise ConfigError(f"augment.fields must be a non-empty list of field names, got {fields!r}")


def _readable_length(mlm: MaskedLM, tokenizer: Tokenizer, max_seq_len: int) -> int:
    """`max_seq_len` cut to the masked LM's positions, once the tokenizer is checked to be its own (WordPiece)."""
    config = mlm.config
    if config.vocab_size != tokenizer.vocab_size:
        raise ConfigError(
            f"augment: the masked LM has vocab_size {config.vocab_size} and the tokenizer {tokenizer.vocab_size} "
            "tokens; use the tokenizer the masked LM was trained with"
        )
    max_seq_len = min(max_seq_len, config.max_position - config.position_offset)  # what the model can read
    if tokenizer.kind != "wordpiece":
        raise ConfigError(f"augment needs a WordPiece tokenizer (BERT's), got a {tokenizer.kind} tokenizer")
    return max_seq_len


def _draw_copies(prepared: list[_Prepared], first: int, copies: int, seed: int, replace_prob: float) -> list[_Copy]:
    """The `copies` copies of each prepared example (the chunk starting at example `first`), with their chosen words."""
    made: list[_Copy] = []
    for e, p in enumerate(prepared):
        for k in range(1, copies + 1):
            # Keyed by the example's index in the whole list, so a copy does not depend on the chunking.
            rng = np.random.default_rng([seed, first + e, k])
            draws = rng.random((2, len(p.words)))  # replace?, which of the top-k
            keep = draws[0] < replace_prob
            words = [w for w, chosen in zip(p.words, keep, strict=True) if chosen]
            made.append(_Copy(e, k, words, draws[1][keep]))
    return made


def _copy_of(example: dict[str, Any], p: _Prepared, c: _Copy, tokenizer: Tokenizer) -> dict[str, Any]:
    """Copy `c` of `example`: its text fields with the proposed replacements, and `"augmented": k`."""
    edits: list[list[tuple[int, int, str]]] = [[] for _ in p.texts]
    for w, new in zip(c.words, c.replacements or [], strict=True):
        if new >= 0:
            edits[w.field].append((w.start, w.end, tokenizer.id_to_token(new)))
    texts = {name: _rebuild(text, edits[j]) for j, (name, text) in enumerate(p.texts)}
    return {**example, **texts, "augmented": c.copy}


def augment_examples(
    examples: list[dict[str, Any]],
    mlm: MaskedLM,
    tokenizer: Tokenizer,
    *,
    copies: int,
    replace_prob: float = 0.4,
    candidates: int = 15,
    batch_size: int = 64,
    seed: int = 0,
    fields: Sequence[str] = ("text", "text_pair"),
    max_seq_len: int = 128,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """The examples followed by `copies` augmented copies of each (TinyBERT's augmentation, adapted).

    Each copy keeps every key of its original (label, source, ...), replaces the text `fields` and adds
    `"augmented": k` (k = 1..copies); the copies of example 0 come first, then those of example 1, ...
    The originals are returned as they are.

    A text is split into words by the tokenizer's own pre-tokenization (whitespace and punctuation; each
    CJK character is a word). A word is replaceable when it is one WordPiece token and a word token (see
    `word_tokens`: not special, not [UNK], not punctuation). In each copy every replaceable word is
    chosen with probability `replace_prob`; the chosen words are masked together and one masked-LM
    forward gives, at each, a replacement drawn uniformly from the `candidates` most likely word tokens
    other than the word itself (never a special token or a `##` piece). The word's characters are
    replaced by the new token; every other character of the text stays as it was. The fields of an
    example are one input ([CLS] text [SEP] text_pair [SEP]), cut to `max_seq_len` tokens (at most the model's
    positions) longest field first; words past the cut are never replaced.

    WordPiece (BERT) tokenizers only; another kind is a ConfigError. Where this differs from TinyBERT:
    * Words of several pieces stay as they are (TinyBERT replaced them by a GloVe neighbour; there is no
      GloVe here). Punctuation is never replaced, a replacement is never punctuation (TinyBERT took
      only [a-z] words); stop words are replaceable (TinyBERT kept its list of them).
    * All chosen words of a copy are masked in one forward (TinyBERT masks one word per forward and
      appends the unmasked sentence as a second segment): one forward per copy is what makes 20 copies
      affordable on a CPU, at the price of less context when many words are masked.
    * Both fields of a pair change together in each copy, and exactly `copies` copies are made, duplicates
      included (TinyBERT augmented one field at a time and dropped repeated sentences).

    Randomness comes from `numpy.random.default_rng([seed, example index, copy])` and each forward
    reads only its own sequence (padding is masked), so a copy depends on the seed, the example's index
    and its own text, not on `batch_size` or the other examples' texts. The model runs in eval mode
    (its mode is restored after) without gradients, on the device of its parameters.
    """
    _check_settings(copies, replace_prob, candidates, batch_size, seed, max_seq_len, fields)
    max_seq_len = _readable_length(mlm, tokenizer, max_seq_len)
    examples = list(examples)
    if copies == 0 or not examples:
        return examples
    if not any(isinstance(e, dict) and any(e.get(f) is not None for f in fields) for e in examples):
        raise DataError(f"augment: no example has a text field ({', '.join(fields)}) to augment")

    from tqdm.auto import tqdm

    config = mlm.config
    allowed = word_tokens(tokenizer)
    device = next(mlm.parameters()).device
    banned = torch.from_numpy(~allowed).to(device)
    use_types = config.type_vocab_size > 0
    out: list[dict[str, Any]] = list(examples)
    was_training = mlm.training
    mlm.eval()
    try:
        with tqdm(total=len(examples), desc="augment", unit="example", leave=False, disable=not progress) as bar:
            for first in range(0, len(examples), _CHUNK):
                chunk = list(enumerate(examples[first : first + _CHUNK], start=first))
                prepared = _prepare(chunk, tokenizer, fields, allowed, max_seq_len, config.type_vocab_size)
                made = _draw_copies(prepared, first, copies, seed, replace_prob)
                pending = [c for c in made if c.words]
                for start in range(0, len(pending), batch_size):
                    _propose(
                        mlm, pending[start : start + batch_size], prepared, tokenizer, banned, candidates, use_types
                    )
                for c in made:
                    out.append(_copy_of(examples[first + c.example], prepared[c.example], c, tokenizer))
                bar.update(len(chunk))
    finally:
        mlm.train(was_training)
    return out
