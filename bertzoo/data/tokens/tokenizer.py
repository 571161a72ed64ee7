"""Subword tokenizers: a thin wrapper around the Rust `tokenizers` library, in three kinds.

* ``wordpiece`` (BERT): BertNormalizer (clean text, split CJK characters, optional lowercasing /
  accent stripping), BertPreTokenizer (whitespace and punctuation), WordPiece with `##`
  continuations and [UNK], a [CLS] A [SEP] B [SEP] post-processor and a WordPiece decoder.
* ``bpe`` (RoBERTa, GPT-2): byte-level BPE: no normalisation, the ByteLevel pre-tokenizer (every
  byte is a symbol, so nothing is ever unknown), <s> A </s></s> B </s>.
* ``unigram`` (ALBERT, SentencePiece-style): quote/NFKD/accent/lowercase normalisation, words
  marked with a leading `▁` (Metaspace), a Unigram language-model vocabulary, [CLS] A [SEP] B [SEP].

Each pipeline is built exactly as Hugging Face's BertTokenizer / RobertaTokenizer / AlbertTokenizer
builds it, so a saved directory loads with `transformers.AutoTokenizer.from_pretrained` and gives
the same ids. Special tokens are looked up by *role* (pad, unk, cls, sep, mask): the rest of the
pipeline (shards, examples, masking, tasks) only sees `SpecialIds` and works with any kind.
Training a new vocabulary is `bertzoo.data.tokens.train_tokenizer`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from bertzoo.errors import DataError

__all__ = [
    "BPE_SPECIAL_TOKENS",
    "KINDS",
    "SPECIAL_TOKENS",
    "UNIGRAM_SPECIAL_TOKENS",
    "Encoded",
    "SpecialIds",
    "Tokenizer",
]

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Order matters: a trained vocabulary gives these ids 0..4.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
# RoBERTa's ids: <s> 0, <pad> 1, </s> 2, <unk> 3 (its <mask> is last; a trained vocabulary puts it at 4).
BPE_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# ALBERT's ids: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4.
UNIGRAM_SPECIAL_TOKENS = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")

KINDS = ("wordpiece", "bpe", "unigram")
ROLES = ("pad", "unk", "cls", "sep", "mask")  # the order of SpecialIds
# role -> token of each kind (what a trained vocabulary holds and what `load` assumes by default)
DEFAULT_SPECIALS: dict[str, dict[str, str]] = {
    "wordpiece": {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK},
    "bpe": {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"},
    "unigram": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
}
_HF_CLASS = {"wordpiece": "BertTokenizer", "bpe": "RobertaTokenizer", "unigram": "AlbertTokenizer"}
_MODEL_KIND = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}
METASPACE = "\u2581"  # "▁", SentencePiece's word-start marker


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
    _set_pair_template(tk, CLS, SEP, special_ids)
    return tk


def _build_bpe_backend(model: models.Model, add_prefix_space: bool) -> tokenizers.Tokenizer:
    """RobertaTokenizer's pipeline: no normaliser, ByteLevel pre-tokenizer and decoder."""
    tk = tokenizers.Tokenizer(model)
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(list(BPE_SPECIAL_TOKENS))
    return tk


def _set_bpe_post_processor(tk: tokenizers.Tokenizer, cls: str, sep: str, add_prefix_space: bool) -> None:
    # <s> A </s> and <s> A </s></s> B </s>, every type id 0 (RoBERTa has a single segment embedding).
    tk.post_processor = processors.RobertaProcessing(
        (sep, tk.token_to_id(sep)), (cls, tk.token_to_id(cls)), trim_offsets=True, add_prefix_space=add_prefix_space
    )


def _unigram_normalizer(lowercase: bool, strip_accents: bool) -> normalizers.Normalizer:
    """AlbertTokenizer's normalisation (without a SentencePiece precompiled charsmap)."""
    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if strip_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def _build_unigram_backend(model: models.Model, lowercase: bool, strip_accents: bool) -> tokenizers.Tokenizer:
    """AlbertTokenizer's pipeline: words split on whitespace and marked with a leading `▁`."""
    tk = tokenizers.Tokenizer(model)
    tk.normalizer = _unigram_normalizer(lowercase, strip_accents)
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always")]
    )
    tk.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    return tk


def _set_pair_template(tk: tokenizers.Tokenizer, cls: str, sep: str, ids: dict[str, int] | None = None) -> None:
    """BERT's and ALBERT's `cls A sep` / `cls A sep B sep` with token types 0 / 1. `ids` gives the
    two tokens' ids where the model does not know them yet (a WordPiece backend before training)."""
    ids = ids if ids is not None else {cls: tk.token_to_id(cls), sep: tk.token_to_id(sep)}
    tk.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids[cls]), (sep, ids[sep])],
    )


def _token_name(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _special_id(role: str) -> property:
    """A read-only `Tokenizer` property: the id of the special token of `role` (`Tokenizer.special`)."""

    def get(self: Tokenizer) -> int:
        return getattr(self._special, role)

    return property(get, doc=f"The id of the {role} token.")


class Tokenizer:
    """A subword tokenizer (WordPiece, byte-level BPE or Unigram). Build one with `train_wordpiece`,
    `train_bpe`, `train_unigram` (`bertzoo.data.tokens.train_tokenizer`), `from_vocab` or `load`.

    `special_tokens` maps roles (pad, unk, cls, sep, mask) to tokens; by default the tokens of the
    kind (`DEFAULT_SPECIALS`). `special` holds their ids in role order, whatever the tokens are.
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        model_max_length: int = 512,
        kind: str | None = None,
        special_tokens: dict[str, str] | None = None,
        add_prefix_space: bool = True,
    ) -> None:
        if kind is None:
            kind = _MODEL_KIND.get(type(backend.model).__name__)
        if kind not in KINDS:
            raise DataError(
                f"a {type(backend.model).__name__} tokenizer model is not supported; "
                "bertzoo needs a WordPiece, BPE or Unigram tokenizer"
            )
        roles = {**DEFAULT_SPECIALS[kind], **(special_tokens or {})}
        vocab = backend.get_vocab(with_added_tokens=True)
        missing = list(dict.fromkeys(roles[r] for r in ROLES if roles[r] not in vocab))
        if missing:
            if kind == "wordpiece":
                raise DataError(
                    f"the tokenizer vocabulary lacks {', '.join(missing)}; use a BERT vocabulary with "
                    f"{' '.join(SPECIAL_TOKENS)} (or train one with bertzoo)"
                )
            raise DataError(
                f"the {kind} tokenizer vocabulary lacks the special token(s) {', '.join(missing)}; "
                "name its special tokens in tokenizer_config.json (pad_token, unk_token, cls_token, sep_token, "
                "mask_token) or train one with bertzoo"
            )
        # Pure encoding: truncation or padding configured in a loaded tokenizer.json would silently
        # change shard contents.
        backend.no_truncation()
        backend.no_padding()
        self._tk = backend
        self.kind = kind
        self.special_tokens = {r: roles[r] for r in ROLES}
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.add_prefix_space = add_prefix_space  # bpe only: a space before the first word, like any other
        self.model_max_length = model_max_length
        self._special = SpecialIds(*(vocab[roles[r]] for r in ROLES))
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
        """Load a directory written by `save` (or a Hugging Face BERT / RoBERTa / ALBERT tokenizer
        directory with a tokenizer.json).

        Uses tokenizer.json when present, else vocab.txt (WordPiece only); the kind follows the
        tokenizer.json model (WordPiece, BPE, Unigram); lowercasing, accent stripping and the special
        tokens come from tokenizer_config.json when present. `path` may also name a vocab.txt or
        tokenizer.json.
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
            kind = _MODEL_KIND.get(type(backend.model).__name__)
            if kind is None:
                raise DataError(
                    f"{tok_json} holds a {type(backend.model).__name__} model; bertzoo needs a WordPiece, BPE or "
                    "Unigram tokenizer"
                )
            names = {r: _token_name(config.get(f"{r}_token")) for r in ROLES}
            special_tokens = {r: t for r, t in names.items() if t is not None}
            if kind == "wordpiece":
                norm = backend.normalizer
                lowercase = bool(config.get("do_lower_case", getattr(norm, "lowercase", True)))
                strip_accents = config.get("strip_accents", getattr(norm, "strip_accents", None))
                tok = cls(backend, lowercase=lowercase, strip_accents=strip_accents, special_tokens=special_tokens)
            elif kind == "bpe":
                apx = config.get("add_prefix_space", getattr(backend.pre_tokenizer, "add_prefix_space", False))
                tok = cls(
                    backend,
                    lowercase=False,
                    strip_accents=False,
                    kind=kind,
                    special_tokens=special_tokens,
                    add_prefix_space=bool(apx),
                )
            else:
                lowercase = bool(config.get("do_lower_case", True))
                tok = cls(
                    backend,
                    lowercase=lowercase,
                    strip_accents=not bool(config.get("keep_accents", False)),
                    kind=kind,
                    special_tokens=special_tokens,
                )
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
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json, plus vocab.txt
        (WordPiece) or vocab.json + merges.txt (BPE). `tokenizer_config.json` names the Hugging Face
        class (BertTokenizer, RobertaTokenizer, AlbertTokenizer) so `AutoTokenizer` loads the directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        names = {f"{r}_token": t for r, t in self.special_tokens.items()}
        if self.kind == "wordpiece":
            (directory / "vocab.txt").write_text("".join(t + "\n" for t in self.vocab_list()), encoding="utf-8")
            config = {
                "tokenizer_class": _HF_CLASS[self.kind],
                "do_lower_case": self.lowercase,
                "strip_accents": self.strip_accents,
                "tokenize_chinese_chars": True,
                "model_max_length": self.model_max_length,
                "clean_up_tokenization_spaces": False,
                **names,
            }
        else:
            # RoBERTa and ALBERT name their first/last tokens also as bos/eos.
            names.update(bos_token=self.special_tokens["cls"], eos_token=self.special_tokens["sep"])
            config = {"tokenizer_class": _HF_CLASS[self.kind], "model_max_length": self.model_max_length}
            if self.kind == "bpe":
                self._tk.model.save(str(directory))  # vocab.json + merges.txt, for tools that want them
                config.update(add_prefix_space=self.add_prefix_space, trim_offsets=True, errors="replace")
            else:
                config.update(do_lower_case=self.lowercase, keep_accents=not self.strip_accents)
            config.update(clean_up_tokenization_spaces=False, **names)
        self._tk.save(str(directory / "tokenizer.json"))
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (directory / "special_tokens_map.json").write_text(json.dumps(names, indent=2) + "\n", encoding="utf-8")
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

    pad_id = _special_id("pad")
    unk_id = _special_id("unk")
    cls_id = _special_id("cls")
    sep_id = _special_id("sep")
    mask_id = _special_id("mask")

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
        return self.prefix_sha256(self.vocab_size)

    def prefix_sha256(self, n: int) -> str:
        """`vocab_sha256` of the first `n` tokens: a tokenizer extended with tokens at the end (T5's
        sentinels) still maps ids 0..n-1 as the one it extends."""
        return hashlib.sha256("".join(t + "\n" for t in self.vocab_list()[:n]).encode("utf-8")).hexdigest()

    def with_special_tokens(self, tokens: Sequence[str]) -> Tokenizer:
        """A copy with `tokens` appended as special tokens, in order, skipping those it already has: every
        existing id keeps its token, so data encoded with this tokenizer reads the same."""
        backend = tokenizers.Tokenizer.from_str(self._tk.to_str())
        new = [t for t in dict.fromkeys(tokens) if backend.token_to_id(t) is None]
        backend.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in new])
        copy = Tokenizer(
            backend,
            lowercase=self.lowercase,
            strip_accents=self.strip_accents,
            model_max_length=self.model_max_length,
            kind=self.kind,
            special_tokens=self.special_tokens,
            add_prefix_space=self.add_prefix_space,
        )
        if copy.vocab_size != self.vocab_size + len(new):
            raise DataError("the added tokens did not get ids after the vocabulary; the tokenizer has gaps in its ids")
        return copy

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
        kind = "" if self.kind == "wordpiece" else f"kind={self.kind!r}, "
        return (
            f"Tokenizer({kind}vocab_size={self.vocab_size}, lowercase={self.lowercase}, "
            f"strip_accents={self.strip_accents})"
        )
