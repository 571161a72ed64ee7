"""Training a subword vocabulary on a stream of documents: `train_wordpiece` (BERT), `train_bpe` (RoBERTa,
GPT-2) and `train_unigram` (ALBERT), each on the pipeline of its kind (`bertzoo.data.tokens.tokenizer`), with
its special tokens at ids 0..4.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import tokenizers
from tokenizers import models, pre_tokenizers, trainers

from bertzoo.data.tokens.tokenizer import (
    BPE_SPECIAL_TOKENS,
    DEFAULT_SPECIALS,
    SPECIAL_TOKENS,
    UNIGRAM_SPECIAL_TOKENS,
    UNK,
    Tokenizer,
    _build_backend,
    _build_bpe_backend,
    _build_unigram_backend,
    _set_bpe_post_processor,
    _set_pair_template,
)
from bertzoo.errors import DataError

__all__ = ["LIMIT_ALPHABET", "MAX_VOCAB_SIZE", "train_bpe", "train_unigram", "train_wordpiece"]


def _batched(documents: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in documents:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# The largest vocabulary the trainers accept: tokenizers reserves memory for the requested size up
# front (2**31 asks for ~140 GB and aborts the process), and 16.7M is far beyond any real model.
MAX_VOCAB_SIZE = 1 << 24


def _check_train_args(vocab_size: int, minimum: int, why: str, name: str = "vocab_size", **counts: int) -> None:
    """DataError for a vocab size outside (minimum, MAX_VOCAB_SIZE] or a negative count, before the
    Rust trainer turns them into an OverflowError or an out-of-memory abort."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= minimum:
        raise DataError(f"{name} must exceed {minimum} ({why}), got {vocab_size!r}")
    if vocab_size > MAX_VOCAB_SIZE:
        raise DataError(f"vocab_size must be at most {MAX_VOCAB_SIZE:,}, got {vocab_size:,}")
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= sys.maxsize:
            raise DataError(f"{key} must be an integer in 0..{sys.maxsize}, got {value!r}")


# WordPiece keeps this many of the most frequent characters (the rest become [UNK]): HF tokenizers' BERT default,
# ample for alphabetic scripts; Chinese or Japanese text needs its count of distinct characters (thousands).
LIMIT_ALPHABET = 1000


def train_wordpiece(
    documents: Iterable[str],
    vocab_size: int = 30000,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    min_frequency: int = 2,
    limit_alphabet: int = LIMIT_ALPHABET,
    show_progress: bool = False,
) -> Tokenizer:
    """Train a BERT WordPiece vocabulary on a stream of documents ([PAD] [UNK] [CLS] [SEP] [MASK] = ids 0..4).

    `strip_accents=None` strips accents exactly when lowercasing, as BERT does.
    """
    _check_train_args(
        vocab_size,
        len(SPECIAL_TOKENS),
        "the special tokens",
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
    )
    model = models.WordPiece(unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100)
    placeholder = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    backend = _build_backend(model, lowercase, strip_accents, placeholder)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=show_progress,
    )
    _train(backend, trainer, documents, SPECIAL_TOKENS, vocab_size)
    return Tokenizer(backend, lowercase=lowercase, strip_accents=strip_accents)


def _train(
    backend: tokenizers.Tokenizer, trainer: trainers.Trainer, documents: Iterable[str], order: tuple, vocab_size: int
) -> None:
    """Train `backend` in place on a document stream; the specials must come out as ids 0..4 in `order`, and
    the vocabulary may not exceed the `vocab_size` asked for (WordPiece keeps every character it saw)."""
    count = 0

    def counted(docs: Iterable[str]) -> Iterator[list[str]]:
        nonlocal count
        for batch in _batched(docs, 1000):  # batches let the Rust side count words in parallel
            count += len(batch)
            yield batch

    backend.train_from_iterator(counted(documents), trainer=trainer)
    if count == 0:
        raise DataError("cannot train a tokenizer on an empty corpus; check the input paths")
    vocab = backend.get_vocab(with_added_tokens=True)
    if len(vocab) > vocab_size:
        raise DataError(
            f"the corpus has more distinct characters than a vocabulary of {vocab_size} holds ({len(vocab)} tokens "
            f"are its characters and special tokens alone); raise --vocab-size to at least {len(vocab)}, or lower "
            "--limit-alphabet"
        )
    if [vocab.get(t) for t in order] != list(range(len(order))):
        raise DataError(f"tokenizer training did not give {' '.join(order)} the ids 0..4; report this as a bug")


def train_bpe(
    documents: Iterable[str],
    vocab_size: int = 50000,
    *,
    min_frequency: int = 2,
    add_prefix_space: bool = True,
    show_progress: bool = False,
) -> Tokenizer:
    """Train a byte-level BPE vocabulary (RoBERTa / GPT-2 style) on a stream of documents.

    Ids 0..4 are <s> <pad> </s> <unk> <mask> (RoBERTa's first four ids; <mask> follows them). The
    256 byte symbols are always in the vocabulary, so no input is ever unknown and decoding gives
    the text back. `add_prefix_space=True` treats the first word of a text like every other word
    (with its leading space, `Ġ`): shards encode sentence by sentence, and without it the first word
    of each sentence would get different tokens from the same word inside a sentence.
    """
    _check_train_args(
        vocab_size,
        len(BPE_SPECIAL_TOKENS) + 256,
        "5 specials + 256 bytes",
        "a byte-level BPE vocab_size",
        min_frequency=min_frequency,
    )
    model = models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)
    backend = _build_bpe_backend(model, add_prefix_space)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(BPE_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    _train(backend, trainer, documents, BPE_SPECIAL_TOKENS, vocab_size)
    names = DEFAULT_SPECIALS["bpe"]
    _set_bpe_post_processor(backend, names["cls"], names["sep"], add_prefix_space)
    return Tokenizer(backend, lowercase=False, strip_accents=False, kind="bpe", add_prefix_space=add_prefix_space)


def train_unigram(
    documents: Iterable[str],
    vocab_size: int = 30000,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    max_piece_length: int = 16,
    show_progress: bool = False,
) -> Tokenizer:
    """Train a SentencePiece-style Unigram vocabulary (ALBERT's tokenizer) on a stream of documents.

    Ids 0..4 are <pad> <unk> [CLS] [SEP] [MASK], as in ALBERT's vocabulary. Text is normalised like
    AlbertTokenizer does (`` and '' to ", NFKD + accent stripping, lowercasing) and every word starts
    with `▁`. `strip_accents=None` strips accents exactly when lowercasing (ALBERT: do_lower_case
    and not keep_accents). The trainer may return fewer pieces than `vocab_size` on a small corpus.
    """
    _check_train_args(
        vocab_size,
        len(UNIGRAM_SPECIAL_TOKENS),
        "the special tokens",
        max_piece_length=max_piece_length,
    )
    if max_piece_length < 1:
        raise DataError(f"max_piece_length must be >= 1, got {max_piece_length}")
    strip = lowercase if strip_accents is None else bool(strip_accents)
    backend = _build_unigram_backend(models.Unigram(), lowercase, strip)
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(UNIGRAM_SPECIAL_TOKENS),
        unk_token="<unk>",
        max_piece_length=max_piece_length,
        show_progress=show_progress,
    )
    # The specials become added tokens only after training: registered before, they would be
    # appended after the empty model's own <unk> (id 0) instead of taking ids 0..4 in order.
    _train(backend, trainer, documents, UNIGRAM_SPECIAL_TOKENS, vocab_size)
    backend.add_special_tokens(list(UNIGRAM_SPECIAL_TOKENS))
    names = DEFAULT_SPECIALS["unigram"]
    _set_pair_template(backend, names["cls"], names["sep"])
    return Tokenizer(backend, lowercase=lowercase, strip_accents=strip, kind="unigram")
