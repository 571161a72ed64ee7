"""Adding a domain's missing tokens to a trained tokenizer without changing how it reads anything else.

`mine` reads a corpus with the old tokenizer and ranks two kinds of candidates:

* characters it maps to [UNK] (a script it barely covers: Chinese with an English WordPiece), by how often they
  occur: every word holding one is lost, so they come first;
* words it splits into the most pieces, by the tokens a new entry would save (count x (pieces - 1)), among words
  made of letters and digits only.

Both must be seen at least `min_count` times.

`extend_tokenizer` adds the chosen ones so that existing ids and existing segmentations stay exactly as they were:

* an [UNK] character goes into the subword vocabulary itself, as one more entry: WordPiece gets the forms the
  greedy longest match lacked (`c` at the start of a word, `##c` inside one; a CJK character is a word of its own,
  so only `c`), Unigram a piece scored at the vocabulary's lowest score. A word the old tokenizer read without
  [UNK] never needed the character, and a one-character entry can only be matched where nothing matched before,
  so its segmentation is unchanged;
* a whole word becomes a `tokenizers.AddedToken(word, single_word=True, normalized=True)`, matched on the
  normalised text before pre-tokenization and only where no letter, digit or `_` touches it. Putting the word
  into the WordPiece vocabulary instead would change the greedy longest match of every longer word it starts
  ("hemoglobin" would turn `hem ##og ##lo ##bin ##uria` into `hemoglobin ##uria`). One case remains where the
  rules differ: a word glued to a symbol that BERT's pre-tokenizer does not split off (`hemoglobin©`). The
  corpus's own words are checked (`changed_words`): a new word that would change any of them is dropped.

Byte-level BPE has no [UNK] (every byte is in its alphabet), so only words are added to it; around a word matched in
BPE or Unigram text the pre-tokenizer restarts, so the space before it and any punctuation glued after it get their
own word-start markers (text without the new word reads exactly as before).

A tokenizer whose vocabulary already ends in added tokens (one extended before) cannot take more subword entries
after them: its CJK characters are added as AddedTokens matched in the raw text (the normaliser isolates them anyway,
so that is the same), other [UNK] characters are skipped.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import AddedToken, decoders

from bertzoo.data.tokens.tokenizer import METASPACE, Tokenizer
from bertzoo.errors import DataError

__all__ = [
    "CHAR",
    "LISTED",
    "MINED",
    "WORD",
    "Candidate",
    "Mined",
    "changed_words",
    "choose",
    "extend_tokenizer",
    "isolated",
    "listed_candidates",
    "mine",
    "read_token_file",
    "token_chunks",
]

CHAR, WORD = "char", "word"  # what a new token is: a character the old tokenizer lacked, or a whole word
MINED, LISTED = "mined", "listed"  # where it came from: the corpus, or --tokens
WORDPIECE_PREFIX = "##"
_BYTE_LEVEL = decoders.ByteLevel()


@dataclass
class Candidate:
    """One token to add: its vocabulary entry, kind, corpus count and the old tokenizer's ids for it."""

    token: str  # the entry: "中", "##д", "hemoglobin" (normalised as the tokenizer normalises text)
    kind: str  # CHAR or WORD
    count: int = 0  # occurrences in the corpus (a char: of this form where the old tokenizer had none)
    pieces: tuple[int, ...] = ()  # the old tokenizer's ids for a word ([UNK] ids included)
    source: str = MINED
    added: bool = False  # an AddedToken (a word, or a CJK character after earlier added tokens), not a subword

    @property
    def saved(self) -> int:
        """Tokens the corpus would save with this entry: count x (pieces - 1)."""
        return self.count * max(0, len(self.pieces) - 1)

    def as_dict(self) -> dict[str, object]:
        return {"token": self.token, "kind": self.kind, "count": self.count, "source": self.source}


@dataclass
class Mined:
    """What `mine` found: ranked candidates and the counts behind them."""

    chars: list[Candidate]  # missing character forms, most frequent first
    words: list[Candidate]  # multi-piece words, most tokens saved first
    documents: int = 0
    occurrences: int = 0  # words read (pre-tokens)
    unk_occurrences: int = 0  # of them, read as [UNK] or with an [UNK] piece
    skipped_chars: int = 0  # missing characters seen often enough that cannot go after earlier added tokens
    plain_words: list[str] = field(default_factory=list)  # distinct words read without [UNK]: what must not change
    surface_counts: Counter = field(default_factory=Counter)  # word -> count (BPE/Unigram markers removed)
    form_counts: Counter = field(default_factory=Counter)  # missing character form -> count


# --- the old tokenizer's view ---------------------------------------------------------------------------------


def _words(tokenizer: Tokenizer, documents: Iterable[str], mined: Mined) -> Counter:
    """Distinct pre-tokens (normalised words as the model sees them) and their counts."""
    backend = tokenizer.backend
    normalizer, pre = backend.normalizer, backend.pre_tokenizer
    counts: Counter = Counter()
    for doc in documents:
        mined.documents += 1
        text = normalizer.normalize_str(doc) if normalizer is not None else doc
        words = pre.pre_tokenize_str(text) if pre is not None else [(text, None)]
        counts.update(word for word, _ in words)
    mined.occurrences = sum(counts.values())
    return counts


def _surface(tokenizer: Tokenizer, word: str) -> str:
    """A pre-token as text: byte-level BPE's bytes decoded, the word-start marker (Ġ, ▁) removed."""
    if tokenizer.kind == "bpe":
        return _BYTE_LEVEL.decode([word]).strip()
    if tokenizer.kind == "unigram":
        return word.lstrip(METASPACE)
    return word


def isolated(tokenizer: Tokenizer, char: str) -> bool:
    """Whether the normaliser makes `char` a word of its own (BERT's CJK characters)."""
    normalizer = tokenizer.backend.normalizer
    return normalizer is not None and normalizer.normalize_str(f"a{char}a").split() == ["a", char, "a"]


def _model(tokenizer: Tokenizer) -> dict:
    return json.loads(tokenizer.backend.to_str())["model"]


def _appendable(tokenizer: Tokenizer) -> bool:
    """Whether new subword entries can take the next ids: no added token sits after the subword vocabulary."""
    return tokenizer.backend.get_vocab_size(with_added_tokens=False) == tokenizer.vocab_size


def _missing_forms(word: str, vocab: set[str], longest: int) -> list[str]:
    """The one-character WordPiece entries the greedy longest match of `word` lacks, along its path: at each
    position with no match, the character (`c` at the start, `##c` inside) is recorded and the match moves on."""
    out, start = [], 0
    while start < len(word):
        end = min(len(word), start + longest)
        while end > start:
            piece = word[start:end] if start == 0 else WORDPIECE_PREFIX + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            out.append(word[start] if start == 0 else WORDPIECE_PREFIX + word[start])
            end = start + 1
        start = end
    return out


def mine(tokenizer: Tokenizer, documents: Iterable[str], *, min_count: int = 2) -> Mined:
    """Read `documents` with `tokenizer` and rank what it lacks (module docstring): missing characters by count,
    then words by the tokens they would save (each seen at least `min_count` times)."""
    if min_count < 1:
        raise DataError(f"min_count must be at least 1, got {min_count}")
    mined = Mined(chars=[], words=[])
    counts = _words(tokenizer, documents, mined)
    backend = tokenizer.backend
    vocab = set(backend.get_vocab(with_added_tokens=True))
    covered = _covered_chars(tokenizer) if tokenizer.kind == "unigram" else frozenset()
    longest, max_chars = max(map(len, vocab)), _max_chars(tokenizer)
    unk = tokenizer.unk_id
    pieces_of: dict[str, tuple[int, ...]] = {}
    best: Counter = Counter()  # surface word -> count of the pre-token form whose pieces it keeps
    for word, count in counts.items():
        ids = (backend.token_to_id(word),) if word in vocab else tuple(t.id for t in backend.model.tokenize(word))
        if unk in ids:
            mined.unk_occurrences += count
            for form in _unknown_forms(tokenizer, word, vocab, covered, longest, max_chars):
                mined.form_counts[form] += count
            continue
        mined.plain_words.append(word)
        surface = _surface(tokenizer, word)
        mined.surface_counts[surface] += count
        if len(ids) >= 2 and surface.isalnum() and count > best[surface]:
            best[surface], pieces_of[surface] = count, ids
    for surface, ids in pieces_of.items():
        count = mined.surface_counts[surface]
        if count >= min_count and surface not in vocab:
            mined.words.append(Candidate(surface, WORD, count, ids, added=True))
    mined.words.sort(key=lambda c: (-c.saved, -c.count, c.token))
    appendable = _appendable(tokenizer)
    for form, count in sorted(mined.form_counts.items(), key=lambda item: (-item[1], item[0])):
        if count < min_count:  # a character seen once is noise more often than a script (a stray symbol)
            continue
        if appendable or (tokenizer.kind == "wordpiece" and isolated(tokenizer, form)):
            mined.chars.append(Candidate(form, CHAR, count, added=not appendable))
        else:
            mined.skipped_chars += 1
    return mined


def _unknown_forms(
    tokenizer: Tokenizer, word: str, vocab: set[str], covered: frozenset[str], longest: int, max_chars: int
) -> list[str]:
    """The character entries a word read with [UNK] lacks: WordPiece's missing forms along its greedy path; for
    Unigram, characters no piece holds (a new piece for one of those cannot change any other word's best split)."""
    if tokenizer.kind == "wordpiece":
        return _missing_forms(word, vocab, longest) if len(word) <= max_chars else []
    if tokenizer.kind == "unigram":
        return [char for char in _surface(tokenizer, word) if char not in covered]
    return []


def _max_chars(tokenizer: Tokenizer) -> int:
    """WordPiece's longest word: a longer one is [UNK] whatever its characters."""
    return int(_model(tokenizer).get("max_input_chars_per_word") or 100)


def _covered_chars(tokenizer: Tokenizer) -> frozenset[str]:
    """Every character some subword entry holds."""
    return frozenset("".join(tokenizer.backend.get_vocab(with_added_tokens=False)))


# --- tokens listed by the user ----------------------------------------------------------------------------------


def read_token_file(path: str | os.PathLike) -> list[tuple[int, str]]:
    """(line number, token) of a token list: one token per line, blank lines skipped."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"token list not found: {path}; pass a text file with one token per line") from None
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text; pass a text file with one token per line") from None
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def listed_candidates(
    tokenizer: Tokenizer, lines: Sequence[tuple[int, str]], mined: Mined, where: str = "--tokens"
) -> list[Candidate]:
    """Candidates for tokens a user listed, normalised as the tokenizer normalises text; DataError naming the
    line for a token already in the vocabulary ("would collide") or one that cannot be added exactly."""
    backend = tokenizer.backend
    out: dict[str, Candidate] = {}
    appendable = _appendable(tokenizer)
    for number, raw in lines:
        token = backend.normalizer.normalize_str(raw).strip() if backend.normalizer is not None else raw
        at = f"{where} line {number}: {raw!r}"
        if any(ch.isspace() for ch in raw):
            raise DataError(f"{at} holds whitespace; list one token per line, without spaces")
        if not token or any(ch.isspace() for ch in token):
            raise DataError(
                f"{at} is several words to the tokenizer, which normalises it to {token!r} (a CJK character is a word "
                "of its own); list them one per line"
            )
        known = backend.token_to_id(token)
        if known is not None:
            raise DataError(f"{at} is already in the vocabulary (id {known}); adding it would collide, remove the line")
        if token in out:
            continue
        out[token] = _listed(tokenizer, token, at, mined, appendable)
    return list(out.values())


def _listed(tokenizer: Tokenizer, token: str, at: str, mined: Mined, appendable: bool) -> Candidate:
    """One listed token as a character or a word candidate."""
    if tokenizer.kind == "wordpiece" and token.startswith(WORDPIECE_PREFIX) and len(token) > len(WORDPIECE_PREFIX):
        char = token[len(WORDPIECE_PREFIX) :]
        if len(char) != 1 or isolated(tokenizer, char):
            raise DataError(
                f"{at}: only a single character can be added as a ## piece (a longer one would change how existing "
                "words split, and a CJK character never continues a word); list the whole word instead"
            )
        if not appendable:
            raise DataError(f"{at}: {_AFTER_ADDED}")
        return Candidate(token, CHAR, mined.form_counts.get(token, 0), source=LISTED)
    is_char = len(token) == 1 and tokenizer.kind == "wordpiece"
    is_char = is_char or (len(token) == 1 and tokenizer.kind == "unigram" and token not in _covered_chars(tokenizer))
    if is_char:
        if not appendable and not (tokenizer.kind == "wordpiece" and isolated(tokenizer, token)):
            raise DataError(f"{at}: {_AFTER_ADDED}")
        return Candidate(token, CHAR, mined.form_counts.get(token, 0), source=LISTED, added=not appendable)
    ids = tuple(tokenizer.encode_batch([token])[0])
    if len(ids) == 1 and ids[0] != tokenizer.unk_id:
        piece = tokenizer.id_to_token(ids[0])
        raise DataError(f"{at} already reads as the one token {piece!r}; adding it would collide, remove the line")
    return Candidate(token, WORD, mined.surface_counts.get(token, 0), ids, source=LISTED, added=True)


_AFTER_ADDED = (
    "the tokenizer already ends in added tokens (it was extended before), so a character entry cannot take the next "
    "id; extend the original model with all the tokens at once"
)


def choose(mined: Mined, listed: Sequence[Candidate], n: int, exclude: set[str] = frozenset()) -> list[Candidate]:
    """The tokens to add, in id order: characters (listed, then the mined ones by count), then words (listed,
    then the mined ones by tokens saved). `n` mined candidates are taken, characters first (0: only `listed`);
    `exclude` names mined words left out."""
    taken = {c.token for c in listed}
    pool = [c for c in [*mined.chars, *mined.words] if c.token not in taken and c.token not in exclude]
    picked = [*listed, *pool[:n]]
    return [c for c in picked if c.kind == CHAR] + [c for c in picked if c.kind == WORD]


# --- the new tokenizer ------------------------------------------------------------------------------------------


def extend_tokenizer(tokenizer: Tokenizer, candidates: Sequence[Candidate]) -> Tokenizer:
    """A copy of `tokenizer` with `candidates` appended in order (characters before words): every existing id keeps
    its token (module docstring for how each kind is added)."""
    entries = list(itertools.takewhile(lambda c: c.kind == CHAR and not c.added, candidates))
    if any(c.kind == CHAR and not c.added for c in candidates[len(entries) :]):
        raise DataError("subword entries must come before added tokens; list the characters first")
    if entries and tokenizer.kind == "bpe":
        raise DataError("a byte-level BPE tokenizer has no [UNK] characters to add: every byte is in its alphabet")
    if entries and not _appendable(tokenizer):
        raise DataError(_AFTER_ADDED)
    state = json.loads(tokenizer.backend.to_str())
    first = tokenizer.vocab_size
    if entries:
        model = state["model"]
        if tokenizer.kind == "wordpiece":
            for i, c in enumerate(entries):
                model["vocab"][c.token] = first + i
        else:
            # The lowest score of the vocabulary: a piece for a character no other piece holds; the unknown-token
            # penalty, computed from the lowest score, stays what it was.
            lowest = min(score for _, score in model["vocab"])
            model["vocab"].extend([c.token, lowest] for c in entries)
    backend = tokenizers.Tokenizer.from_str(json.dumps(state))
    added = [c for c in candidates if c.added]
    # A word is matched in the normalised text (so "Hemoglobin" finds it in an uncased model); a CJK character in
    # the raw text, as the normaliser would pad it with spaces that then became part of the token.
    backend.add_tokens(
        [AddedToken(c.token, single_word=c.kind == WORD, normalized=c.kind == WORD, special=False) for c in added]
    )
    new = Tokenizer(
        backend,
        lowercase=tokenizer.lowercase,
        strip_accents=tokenizer.strip_accents,
        model_max_length=tokenizer.model_max_length,
        kind=tokenizer.kind,
        special_tokens=tokenizer.special_tokens,
        add_prefix_space=tokenizer.add_prefix_space,
    )
    got = [new.token_to_id(c.token) for c in candidates]
    if got != list(range(first, first + len(candidates))):
        raise DataError("the new tokens did not get the ids after the vocabulary; the tokenizer has gaps in its ids")
    return new


def changed_words(old: Tokenizer, new: Tokenizer, words: Sequence[str], batch: int = 4096) -> dict[str, list[str]]:
    """The words of `words` that `new` splits differently from `old`, with `new`'s tokens."""
    out: dict[str, list[str]] = {}
    for start in range(0, len(words), batch):
        chunk = list(words[start : start + batch])
        for word, a, b in zip(chunk, old.encode_batch(chunk), new.encode_batch(chunk), strict=True):
            if a != b:
                out[word] = [new.id_to_token(i) for i in b]
    return out


# --- the corpus under the new tokenizer -------------------------------------------------------------------------


def token_chunks(
    tokenizer: Tokenizer, documents: Iterable[str], *, max_tokens: int = 1 << 24, batch_docs: int = 256
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(token ids, document number per token) of `documents` a batch at a time, up to about `max_tokens` tokens:
    what `word_vectors.cooccurrence` reads."""
    seen, number, batch = 0, 0, []
    for doc in documents:
        batch.append(doc)
        if len(batch) == batch_docs:
            ids, docs = _encode(tokenizer, batch, number)
            number, seen, batch = number + len(batch), seen + len(ids), []
            yield ids, docs
            if seen >= max_tokens:
                return
    if batch:
        yield _encode(tokenizer, batch, number)


def _encode(tokenizer: Tokenizer, docs: list[str], first: int) -> tuple[np.ndarray, np.ndarray]:
    encoded = tokenizer.encode_batch(docs)
    ids = np.fromiter((i for e in encoded for i in e), dtype=np.int64)
    numbers = np.repeat(np.arange(first, first + len(docs)), [len(e) for e in encoded])
    return ids, numbers
