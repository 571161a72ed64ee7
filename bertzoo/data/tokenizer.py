"""BERT WordPiece tokenizer: a thin wrapper around the Rust `tokenizers` library.

The pipeline is exactly BERT's: BertNormalizer (clean text, split CJK characters, optional
lowercasing / accent stripping), BertPreTokenizer (whitespace and punctuation), WordPiece with
`##` continuations and [UNK], a [CLS] A [SEP] B [SEP] post-processor and a WordPiece decoder.
A saved tokenizer directory also loads with `transformers.AutoTokenizer.from_pretrained`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertzoo.errors import DataError

__all__ = ["SPECIAL_TOKENS", "Encoded", "SpecialIds", "Tokenizer", "train_wordpiece"]

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Order matters: a trained vocabulary gives these ids 0..4.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
_HF_NAMES = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}


class SpecialIds(NamedTuple):
    """Ids of the special tokens; enough for the collator when no tokenizer object is at hand."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


class Encoded(NamedTuple):
    """One encoded input with special tokens: ids and segment (token type) ids."""

    ids: list[int]
    type_ids: list[int]


def _build_backend(
    model: models.Model, lowercase: bool, strip_accents: bool | None, special_ids: dict[str, int]
) -> tokenizers.Tokenizer:
    tk = tokenizers.Tokenizer(model)
    tk.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece(prefix="##")
    # Registering the specials as added tokens makes "[MASK]" in text map to the special id, as in
    # Hugging Face's BertTokenizer (the saved tokenizer.json must behave the same in both).
    tk.add_special_tokens(list(SPECIAL_TOKENS))
    _set_post_processor(tk, special_ids)
    return tk


def _set_post_processor(tk: tokenizers.Tokenizer, special_ids: dict[str, int]) -> None:
    tk.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, special_ids[CLS]), (SEP, special_ids[SEP])],
    )


class Tokenizer:
    """A BERT WordPiece tokenizer. Build one with `train_wordpiece`, `from_vocab` or `load`."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        model_max_length: int = 512,
    ) -> None:
        vocab = backend.get_vocab(with_added_tokens=True)
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise DataError(
                f"the tokenizer vocabulary lacks {', '.join(missing)}; use a BERT vocabulary with "
                f"{' '.join(SPECIAL_TOKENS)} (or train one with bertzoo)"
            )
        # Pure encoding: truncation or padding configured in a loaded tokenizer.json would silently
        # change shard contents.
        backend.no_truncation()
        backend.no_padding()
        self._tk = backend
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.model_max_length = model_max_length
        self._special = SpecialIds(*(vocab[t] for t in SPECIAL_TOKENS))
        self._vocab_list: list[str] | None = None

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_vocab(
        cls, vocab_txt: str | os.PathLike, lowercase: bool = True, strip_accents: bool | None = None
    ) -> Tokenizer:
        """Load an existing BERT `vocab.txt` (one token per line, line number = id)."""
        path = Path(vocab_txt)
        if not path.is_file():
            raise DataError(f"vocabulary file not found: {path}; check the path")
        vocab: dict[str, int] = {}
        try:
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    token = line.rstrip("\n")
                    vocab.setdefault(token, i)  # a duplicated line keeps the first id, like BERT's loader
        except UnicodeDecodeError:
            raise DataError(f"{path} is not UTF-8 text; use a BERT vocab.txt (one token per line)") from None
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise DataError(f"{path} lacks the special token(s) {', '.join(missing)}; use a BERT vocab.txt")
        model = models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100)
        backend = _build_backend(model, lowercase, strip_accents, vocab)
        return cls(backend, lowercase=lowercase, strip_accents=strip_accents)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Load a directory written by `save` (or a Hugging Face BERT tokenizer directory).

        Uses tokenizer.json when present, else vocab.txt; lowercasing and accent stripping come
        from tokenizer_config.json when present. `path` may also name a vocab.txt or tokenizer.json.
        """
        path = Path(path)
        if path.is_file():
            directory, file = path.parent, path
        elif path.is_dir():
            directory, file = path, None
        else:
            raise DataError(f"tokenizer not found: {path}; pass a directory with tokenizer.json or vocab.txt")
        config: dict = {}
        config_path = directory / "tokenizer_config.json"
        if config_path.is_file():
            try:
                config = json.loads(config_path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
                raise DataError(f"{config_path} is not valid JSON; fix it or delete it") from None
            if not isinstance(config, dict):
                raise DataError(f"{config_path} must hold a JSON object; fix it or delete it")
        tok_json = file if file is not None and file.suffix == ".json" else directory / "tokenizer.json"
        vocab_txt = file if file is not None and file.suffix == ".txt" else directory / "vocab.txt"
        if (file is None or file.suffix == ".json") and tok_json.is_file():
            try:
                backend = tokenizers.Tokenizer.from_file(str(tok_json))
            except Exception as exc:  # the Rust side raises a bare Exception for malformed files
                raise DataError(f"cannot read {tok_json} ({exc}); regenerate the tokenizer") from None
            if not isinstance(backend.model, models.WordPiece):
                raise DataError(
                    f"{tok_json} holds a {type(backend.model).__name__} model; bertzoo needs a WordPiece tokenizer"
                )
            norm = backend.normalizer
            lowercase = bool(config.get("do_lower_case", getattr(norm, "lowercase", True)))
            strip_accents = config.get("strip_accents", getattr(norm, "strip_accents", None))
            tok = cls(backend, lowercase=lowercase, strip_accents=strip_accents)
        elif vocab_txt.is_file():
            tok = cls.from_vocab(
                vocab_txt,
                lowercase=bool(config.get("do_lower_case", True)),
                strip_accents=config.get("strip_accents"),
            )
        else:
            raise DataError(f"{path} has neither tokenizer.json nor vocab.txt; pass a tokenizer directory")
        try:
            tok.model_max_length = int(config.get("model_max_length", 512)) if config else 512
        except (TypeError, ValueError, OverflowError):
            raise DataError(f"{config_path}: model_max_length must be an integer; fix it or delete it") from None
        if tok.model_max_length > 1_000_000:  # HF writes a huge sentinel for "no limit"
            tok.model_max_length = 512
        return tok

    def save(self, directory: str | os.PathLike) -> Path:
        """Write vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "vocab.txt").write_text("".join(t + "\n" for t in self.vocab_list()), encoding="utf-8")
        self._tk.save(str(directory / "tokenizer.json"))
        config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": True,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": False,
            **_HF_NAMES,
        }
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (directory / "special_tokens_map.json").write_text(json.dumps(_HF_NAMES, indent=2) + "\n", encoding="utf-8")
        return directory

    # -- vocabulary -----------------------------------------------------------------------------

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer`."""
        return self._tk

    @property
    def vocab_size(self) -> int:
        return self._tk.get_vocab_size(with_added_tokens=True)

    @property
    def special(self) -> SpecialIds:
        return self._special

    @property
    def pad_id(self) -> int:
        return self._special.pad

    @property
    def unk_id(self) -> int:
        return self._special.unk

    @property
    def cls_id(self) -> int:
        return self._special.cls

    @property
    def sep_id(self) -> int:
        return self._special.sep

    @property
    def mask_id(self) -> int:
        return self._special.mask

    @property
    def special_ids(self) -> np.ndarray:
        """Sorted int64 array of the special token ids (never masked, never a random replacement)."""
        return np.unique(np.asarray(self._special, dtype=np.int64))

    def token_to_id(self, token: str) -> int | None:
        return self._tk.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self._tk.id_to_token(i)

    def vocab_list(self) -> list[str]:
        """Tokens in id order (the lines of vocab.txt)."""
        if self._vocab_list is None:
            vocab = self._tk.get_vocab(with_added_tokens=True)
            tokens: list[str | None] = [None] * len(vocab)
            for token, i in vocab.items():
                if i >= len(tokens) or tokens[i] is not None:
                    raise DataError("the tokenizer's ids are not contiguous from 0; it cannot be saved as vocab.txt")
                tokens[i] = token
            self._vocab_list = tokens  # type: ignore[assignment]
        return self._vocab_list  # type: ignore[return-value]

    @property
    def vocab_sha256(self) -> str:
        """sha256 of vocab.txt as `save` writes it: identifies the id <-> token mapping."""
        return hashlib.sha256("".join(t + "\n" for t in self.vocab_list()).encode("utf-8")).hexdigest()

    # -- encoding -------------------------------------------------------------------------------

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, WITHOUT special tokens (batched and parallel in Rust)."""
        if not texts:
            return []
        # encode_batch_fast (tokenizers >= 0.20) skips computing character offsets we do not need.
        encode = getattr(self._tk, "encode_batch_fast", self._tk.encode_batch)
        encodings = encode(list(texts), add_special_tokens=False)
        return [e.ids for e in encodings]

    def encode(self, text: str, pair: str | None = None) -> Encoded:
        """[CLS] text [SEP] (or [CLS] text [SEP] pair [SEP]) ids with their token type ids."""
        e = self._tk.encode(text, pair, add_special_tokens=True)
        return Encoded(e.ids, e.type_ids)

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of `text` (no special tokens)."""
        return self._tk.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`, joining `##` continuations."""
        return self._tk.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase}, strip_accents={self.strip_accents})"
        )


def _batched(documents: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in documents:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def train_wordpiece(
    documents: Iterable[str],
    vocab_size: int = 30000,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    show_progress: bool = False,
) -> Tokenizer:
    """Train a BERT WordPiece vocabulary on a stream of documents ([PAD] [UNK] [CLS] [SEP] [MASK] = ids 0..4).

    `strip_accents=None` strips accents exactly when lowercasing, as BERT does.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise DataError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
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
    if [vocab.get(t) for t in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):
        raise DataError("tokenizer training did not give the special tokens ids 0..4; report this as a bug")
    return Tokenizer(backend, lowercase=lowercase, strip_accents=strip_accents)
