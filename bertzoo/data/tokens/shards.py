"""Tokenized, memory-mapped shards: the on-disk form of a pretraining corpus.

Layout of a shard directory (format version 1)::

    meta.json                       written last; its presence marks the directory complete
    tokenizer/                      the tokenizer the shards were made with (vocab.txt, tokenizer.json, ...)
    shard_00000.tokens.npy          token ids of all sentences, concatenated (uint16, or uint32 when
                                    the vocabulary has more than 65535 entries)
    shard_00000.sentences.npy       int64 (num_sentences + 1,): token offset of each sentence in the shard
    shard_00000.documents.npy       int64 (num_docs + 1,): sentence offset of each document in the shard
    shard_00001.tokens.npy ...

Documents never straddle shards; a shard is closed once it holds `shard_tokens` tokens, so it can
exceed that by at most one document. All arrays are plain .npy files that load with
`np.load(path, mmap_mode="r", allow_pickle=False)`.

Preparation is atomic: everything is written to `<out>.tmp-<pid>` and renamed into place after
meta.json; a failure (or Ctrl-C) removes the temporary directory and leaves earlier output intact.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from bertzoo.data.text.corpus import ReadStats, split_sentences
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError, DataError, DiskFullError
from bertzoo.io import out_of_room, replace_dir

__all__ = ["FORMAT_VERSION", "ShardInfo", "ShardedCorpus", "check_shard_name", "is_shard_dir", "prepare_shards"]

FORMAT_VERSION = 1
FORMAT_NAME = "bertzoo-shards"
META = "meta.json"
TOKENIZER_DIR = "tokenizer"
_NPY_HEADER_LEN = 128  # fixed, so the header can be rewritten in place once the length is known


def _npy_header(dtype: np.dtype, length: int) -> bytes:
    """A version 1.0 .npy header for a 1-D array, padded to exactly 128 bytes."""
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    d = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({length},), }}"
    pad = _NPY_HEADER_LEN - 10 - len(d) - 1
    if pad < 0:
        raise AssertionError("npy header does not fit")  # impossible for 1-D arrays of realistic size
    header = (d + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (halves disk and page cache), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


@dataclass
class ShardInfo:
    """Summary of a finished `prepare_shards` run (also what meta.json holds)."""

    path: Path
    num_shards: int
    num_docs: int
    num_sentences: int
    num_tokens: int
    vocab_size: int
    dtype: str
    docs_skipped: int = 0  # documents without any token
    sentences_dropped: int = 0  # sentences that tokenized to nothing
    num_unk: int = 0  # tokens that are [UNK]: text the tokenizer's vocabulary does not cover
    seconds: float = 0.0
    shards: list[dict[str, Any]] = field(default_factory=list)


class _ShardWriter:
    """Streams documents into shard files; only the current shard's offset arrays live in RAM."""

    def __init__(self, directory: Path, dtype: np.dtype, shard_tokens: int) -> None:
        self.directory = directory
        self.dtype = dtype
        self.shard_tokens = shard_tokens
        self.shards: list[dict[str, Any]] = []
        self._file: BinaryIO | None = None
        self._sent_offsets: list[np.ndarray] = []  # per batch: token end offsets of its sentences
        self._doc_offsets: list[np.ndarray] = []  # per batch: sentence end offsets of its documents
        self._tokens = 0
        self._sentences = 0
        self._docs = 0

    def _open(self) -> None:
        name = f"shard_{len(self.shards):05d}"
        self._name = name
        self._file = open(self.directory / f"{name}.tokens.npy", "wb")
        self._file.write(_npy_header(self.dtype, 0))
        self._sent_offsets, self._doc_offsets = [], []
        self._tokens = self._sentences = self._docs = 0

    def add(self, tokens: np.ndarray, sent_lens: np.ndarray, doc_nsent: np.ndarray) -> None:
        """Append whole documents: `tokens` concatenated, `sent_lens` per sentence, `doc_nsent` per doc."""
        sent_end = np.cumsum(sent_lens, dtype=np.int64)  # token end of each sentence
        doc_sent_end = np.cumsum(doc_nsent, dtype=np.int64)  # sentence end of each document
        doc_tok_end = sent_end[doc_sent_end - 1] if len(doc_nsent) else np.zeros(0, np.int64)
        d0 = 0
        while d0 < len(doc_nsent):
            if self._file is None:
                self._open()
            s0 = int(doc_sent_end[d0 - 1]) if d0 else 0
            t0 = int(sent_end[s0 - 1]) if s0 else 0
            # The first document that brings the shard to `shard_tokens` closes it (vectorised search).
            room = self.shard_tokens - self._tokens
            d1 = int(np.searchsorted(doc_tok_end, t0 + room, side="left")) + 1
            d1 = min(d1, len(doc_nsent))
            s1 = int(doc_sent_end[d1 - 1])
            t1 = int(sent_end[s1 - 1])
            self._file.write(np.ascontiguousarray(tokens[t0:t1], dtype=self.dtype).tobytes())
            self._sent_offsets.append(sent_end[s0:s1] - t0 + self._tokens)
            self._doc_offsets.append(doc_sent_end[d0:d1] - s0 + self._sentences)
            self._tokens += t1 - t0
            self._sentences += s1 - s0
            self._docs += d1 - d0
            d0 = d1
            if self._tokens >= self.shard_tokens:
                self.close_shard()

    def close_shard(self) -> None:
        if self._file is None:
            return
        f = self._file
        f.seek(0)
        f.write(_npy_header(self.dtype, self._tokens))
        f.flush()
        os.fsync(f.fileno())
        f.close()
        self._file = None
        zero = [np.zeros(1, np.int64)]
        np.save(self.directory / f"{self._name}.sentences.npy", np.concatenate(zero + self._sent_offsets))
        np.save(self.directory / f"{self._name}.documents.npy", np.concatenate(zero + self._doc_offsets))
        self.shards.append(
            {
                "name": self._name,
                "num_tokens": self._tokens,
                "num_sentences": self._sentences,
                "num_docs": self._docs,
            }
        )

    @property
    def total_tokens(self) -> int:
        return sum(s["num_tokens"] for s in self.shards) + self._tokens

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _batches(documents: Iterable[str], size: int):
    it = iter(documents)
    while batch := list(itertools.islice(it, size)):
        yield batch


def is_shard_dir(path: str | os.PathLike) -> bool:
    """True when `path` holds a complete shard directory (a readable meta.json of our format)."""
    try:
        meta = json.loads((Path(path) / META).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def _looks_replaceable(path: Path) -> bool:
    """Only an empty directory or one that holds our files may be deleted by overwrite=True."""
    if is_shard_dir(path):
        return True
    entries = list(path.iterdir())
    return all(e.name.startswith("shard_") or e.name in (META, TOKENIZER_DIR) for e in entries)


def _check_out_dir(out: Path, overwrite: bool) -> None:
    """DataError when the shards may not go to `out`: a file, a non-empty directory (without `overwrite`),
    or a directory that holds files other than shards (with it)."""
    if out.exists():
        if not out.is_dir():
            raise DataError(f"{out} exists and is not a directory; choose another output path")
        if not overwrite and any(out.iterdir()):
            if is_shard_dir(out):
                raise DataError(f"{out} already holds prepared shards; pass --overwrite to replace them")
            raise DataError(f"{out} exists and is not empty; choose another output path")
        if overwrite and not _looks_replaceable(out):
            raise DataError(
                f"refusing to overwrite {out}: it holds files that are not bertzoo shards; choose another path"
            )


def _write_documents(
    documents: Iterable[str], tokenizer: Tokenizer, writer: _ShardWriter, batch_docs: int, progress: bool, desc: str
) -> dict[str, int]:
    """Sentence-split and tokenize `documents`, `batch_docs` at a time, into `writer`; returns what was left out
    or unknown: `docs_skipped`, `sentences_dropped` (empty ones) and `num_unk` (unknown tokens)."""
    from tqdm.auto import tqdm

    docs_skipped = sentences_dropped = num_unk = 0
    unk_id = tokenizer.unk_id
    bar = tqdm(disable=not progress, unit=" docs", desc=desc, dynamic_ncols=True)
    with bar:
        for batch in _batches(documents, batch_docs):
            sentences: list[str] = []
            per_doc: list[int] = []
            for doc in batch:
                sents = split_sentences(doc)
                sentences.extend(sents)
                per_doc.append(len(sents))
            ids = tokenizer.encode_batch(sentences)
            lens = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
            tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=writer.dtype, count=int(lens.sum()))
            if unk_id is not None:
                num_unk += int(np.count_nonzero(tokens == unk_id))
            # Drop empty sentences and the documents left without any, in numpy.
            doc_of_sent = np.repeat(np.arange(len(batch)), per_doc)
            keep = lens > 0
            sentences_dropped += int((~keep).sum())
            doc_nsent = np.bincount(doc_of_sent[keep], minlength=len(batch))
            docs_skipped += int((doc_nsent == 0).sum())
            writer.add(tokens, lens[keep], doc_nsent[doc_nsent > 0])
            bar.update(len(batch))
            bar.set_postfix(tokens=f"{writer.total_tokens:,}", refresh=False)
    return {"docs_skipped": docs_skipped, "sentences_dropped": sentences_dropped, "num_unk": num_unk}


def _meta(
    tokenizer: Tokenizer,
    writer: _ShardWriter,
    totals: dict[str, int],
    counts: dict[str, int],
    *,
    source: str,
    stats: ReadStats | None,
    cleaning: Any,
) -> dict[str, Any]:
    """The content of meta.json for the shards `writer` wrote (see the module doc)."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "vocab_size": tokenizer.vocab_size,
        "dtype": writer.dtype.name,
        **totals,
        "num_shards": len(writer.shards),
        "shards": writer.shards,
        "tokenizer": {
            "vocab_sha256": tokenizer.vocab_sha256,
            "lowercase": tokenizer.lowercase,
            "strip_accents": tokenizer.strip_accents,
            "vocab_size": tokenizer.vocab_size,
        },
        "source": source,
        "read_stats": asdict(stats) if stats is not None else None,
        "cleaning": asdict(cleaning) if is_dataclass(cleaning) else cleaning,
        **counts,  # docs_skipped, sentences_dropped, num_unk
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def prepare_shards(
    documents: Iterable[str],
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike,
    *,
    shard_tokens: int = 16_777_216,
    batch_docs: int = 256,
    overwrite: bool = False,
    progress: bool = True,
    stats: ReadStats | None = None,
    source: str = "",
    cleaning: Any = None,
) -> ShardInfo:
    """Sentence-split, tokenize and write `documents` as memory-mapped shards in `out_dir`.

    Memory stays bounded by one batch of `batch_docs` documents plus one shard's offset arrays.
    `stats` (the ReadStats that `read_documents` fills), `source` (e.g. the input paths) and
    `cleaning` (a report that cleaning the documents filled as they were read, e.g. `clean.CleanReport`:
    a dataclass or a dict) are recorded in meta.json. Returns counts; see the module doc for the layout
    and atomicity.
    """
    if shard_tokens < 1:
        raise ConfigError(f"shard_tokens must be >= 1, got {shard_tokens}")
    if batch_docs < 1:
        raise ConfigError(f"batch_docs must be >= 1, got {batch_docs}")
    out = Path(out_dir)
    _check_out_dir(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    if tmp.exists():  # left by an earlier crash of a process that had our pid
        shutil.rmtree(tmp)
    dtype = token_dtype(tokenizer.vocab_size)
    start = time.perf_counter()
    writer = _ShardWriter(tmp, dtype, shard_tokens)
    try:
        tmp.mkdir()
        counts = _write_documents(documents, tokenizer, writer, batch_docs, progress, f"prepare {out.name}")
        writer.close_shard()
        totals = {k: sum(s[k] for s in writer.shards) for k in ("num_tokens", "num_sentences", "num_docs")}
        if totals["num_docs"] == 0:
            raise DataError(f"no document of {source or 'the corpus'} produced any token; check the input text")
        tokenizer.save(tmp / TOKENIZER_DIR)
        meta = _meta(tokenizer, writer, totals, counts, source=source, stats=stats, cleaning=cleaning)
        with open(tmp / META, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        replace_dir(tmp, out)
    except BaseException as exc:
        writer.abort()
        problem = out_of_room(exc, tmp) if isinstance(exc, Exception) else None
        shutil.rmtree(tmp, ignore_errors=True)
        if problem:
            before = "was left as it was" if out.exists() else "was not created"
            raise DiskFullError(
                f"{problem} while writing shards for {out} ({getattr(exc, 'filename', None) or tmp}); "
                f"{out} {before}, free space and run bertzoo prepare again"
            ) from exc
        raise
    return ShardInfo(
        path=out,
        num_shards=len(writer.shards),
        num_docs=totals["num_docs"],
        num_sentences=totals["num_sentences"],
        num_tokens=totals["num_tokens"],
        vocab_size=tokenizer.vocab_size,
        dtype=dtype.name,
        **counts,
        seconds=time.perf_counter() - start,
        shards=writer.shards,
    )


def check_shard_name(directory: Path, name: Any) -> str:
    """`name` from meta.json if the files named after it (NAME.tokens.npy, NAME.units.npy, ...) lie
    inside `directory`; DataError otherwise. meta.json is input like any other file: a crafted one
    must not make readers, and above all the unit annotation that writes NAME.units.npy, reach
    outside the shard directory."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise DataError(f"{directory / META} names a shard {name!r}, not a file name; re-run bertzoo prepare")
    root = directory.resolve()
    # Every file of a shard is NAME + a suffix without separators, so all of them sit in the
    # directory that holds `directory / NAME`; an absolute NAME replaces `directory` altogether.
    where = (directory / name).parent.resolve()
    if Path(name).is_absolute() or not where.is_relative_to(root):
        raise DataError(
            f"{directory / META} names a shard file outside the shard directory ({name!r}); "
            "the file is damaged or crafted, re-run bertzoo prepare"
        )
    return name


class ShardedCorpus:
    """Read-only, memory-mapped view of a shard directory as one corpus.

    Sentences and documents are numbered globally across shards. Token positions are also global
    (a virtual concatenation of all shards), so a contiguous run of sentences is one token range.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise DataError(f"shard directory not found: {self.path}; run bertzoo prepare first")
        meta_path = self.path / META
        if not meta_path.is_file():
            raise DataError(f"{self.path} is not a complete shard directory (no meta.json); re-run bertzoo prepare")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
            raise DataError(f"{meta_path} is not valid JSON; re-run bertzoo prepare") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise DataError(f"{self.path} is not a bertzoo shard directory; re-run bertzoo prepare")
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(
                f"{self.path} has shard format version {meta.get('format_version')}, this bertzoo reads "
                f"version {FORMAT_VERSION}; re-run bertzoo prepare"
            )
        self.meta: dict[str, Any] = meta
        try:
            self.vocab_size: int = int(meta["vocab_size"])
            self.dtype = np.dtype(meta["dtype"])
            self._load()
        except (KeyError, TypeError, ValueError):  # a meta.json of our format with missing or wrong fields
            raise DataError(f"{meta_path} is damaged (missing or malformed fields); re-run bertzoo prepare") from None

    def _load(self) -> None:
        tokens, sent_lens, doc_starts = [], [], []
        tok_base = [0]
        sent_base = 0
        for shard in self.meta["shards"]:
            name = check_shard_name(self.path, shard["name"])
            try:
                tok = np.load(self.path / f"{name}.tokens.npy", mmap_mode="r", allow_pickle=False)
                sent = np.load(self.path / f"{name}.sentences.npy", allow_pickle=False)
                docs = np.load(self.path / f"{name}.documents.npy", allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty file
                raise DataError(f"{self.path}: cannot read shard {name} ({exc}); re-run bertzoo prepare") from None
            if (
                len(tok) != shard["num_tokens"]
                or len(sent) != shard["num_sentences"] + 1
                or len(docs) != shard["num_docs"] + 1
                or tok.dtype != self.dtype
            ):
                raise DataError(f"{self.path}: shard {name} does not match meta.json; re-run bertzoo prepare")
            tokens.append(tok)
            sent_lens.append(np.diff(sent).astype(np.int32))
            doc_starts.append(docs[:-1] + sent_base)
            sent_base += len(sent) - 1
            tok_base.append(tok_base[-1] + len(tok))
        self._tokens = tokens
        self._tok_base = np.asarray(tok_base, dtype=np.int64)  # global token offset of each shard
        self.sentence_lengths: np.ndarray = np.concatenate(sent_lens) if sent_lens else np.zeros(0, np.int32)
        # Global token offset of every sentence start (+ the end): contiguous across shards.
        self.sentence_offsets: np.ndarray = np.zeros(len(self.sentence_lengths) + 1, dtype=np.int64)
        np.cumsum(self.sentence_lengths, out=self.sentence_offsets[1:])
        # Global sentence index of every document start (+ the end).
        self.doc_offsets: np.ndarray = np.append(
            np.concatenate(doc_starts) if doc_starts else np.zeros(0, np.int64), sent_base
        ).astype(np.int64)

    # Memory maps must not be pickled (that would copy the corpus into every DataLoader worker
    # started with "spawn"): workers reopen the files instead.
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])

    @property
    def num_docs(self) -> int:
        return len(self.doc_offsets) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_lengths)

    @property
    def num_tokens(self) -> int:
        return int(self._tok_base[-1])

    @property
    def num_shards(self) -> int:
        return len(self._tokens)

    def doc_sentences(self, d: int) -> tuple[int, int]:
        """Global sentence range (first, last_exclusive) of document `d`."""
        if not 0 <= d < self.num_docs:
            raise IndexError(f"document {d} out of range 0..{self.num_docs - 1}")
        return int(self.doc_offsets[d]), int(self.doc_offsets[d + 1])

    def token_range(self, start: int, end: int) -> np.ndarray:
        """Tokens at global positions [start, end) (a memory-map view when inside one shard)."""
        if not 0 <= start <= end <= self.num_tokens:
            raise IndexError(f"token range [{start}, {end}) outside 0..{self.num_tokens}")
        if start == end:
            return np.zeros(0, self.dtype)
        k = int(np.searchsorted(self._tok_base, start, side="right")) - 1
        base = int(self._tok_base[k])
        if end <= self._tok_base[k + 1]:  # the usual case: one shard, no copy
            return self._tokens[k][start - base : end - base]
        parts = []
        while start < end:
            k = int(np.searchsorted(self._tok_base, start, side="right")) - 1
            base = int(self._tok_base[k])
            stop = min(end, int(self._tok_base[k + 1]))
            parts.append(self._tokens[k][start - base : stop - base])
            start = stop
        return np.concatenate(parts)

    def sentence(self, s: int) -> np.ndarray:
        """Token ids of global sentence `s`."""
        if not 0 <= s < self.num_sentences:
            raise IndexError(f"sentence {s} out of range 0..{self.num_sentences - 1}")
        return self.token_range(int(self.sentence_offsets[s]), int(self.sentence_offsets[s + 1]))

    def tokens(self, s_first: int, s_last: int) -> np.ndarray:
        """Token ids of sentences s_first..s_last-1, concatenated."""
        if not 0 <= s_first <= s_last <= self.num_sentences:
            raise IndexError(f"sentence range [{s_first}, {s_last}) outside 0..{self.num_sentences}")
        return self.token_range(int(self.sentence_offsets[s_first]), int(self.sentence_offsets[s_last]))

    def tokenizer(self) -> Tokenizer:
        """The tokenizer saved with the shards."""
        return Tokenizer.load(self.path / TOKENIZER_DIR)

    def check_tokenizer(self, tokenizer: Tokenizer) -> None:
        """DataError unless `tokenizer` has the vocabulary and normalisation the shards were made with."""
        want = self.meta.get("tokenizer", {})
        fix = f"use the tokenizer in {self.path / TOKENIZER_DIR} or re-run bertzoo prepare"
        # A tokenizer that extends the shards' one at the end (T5 adds its sentinels) reads them the same.
        sha = tokenizer.prefix_sha256(self.vocab_size)
        if tokenizer.vocab_size < self.vocab_size or sha != want.get("vocab_sha256"):
            raise DataError(
                f"the tokenizer (vocab {tokenizer.vocab_size}, sha256 {sha[:12]}) differs from the one "
                f"{self.path} was prepared with (vocab {self.vocab_size}, sha256 "
                f"{str(want.get('vocab_sha256'))[:12]}); {fix}"
            )
        have = (tokenizer.lowercase, tokenizer.strip_accents)
        if have != (want.get("lowercase"), want.get("strip_accents")):
            raise DataError(
                f"the tokenizer has lowercase={have[0]}, strip_accents={have[1]} but {self.path} was "
                f"prepared with lowercase={want.get('lowercase')}, "
                f"strip_accents={want.get('strip_accents')}; {fix}"
            )

    def __repr__(self) -> str:
        return (
            f"ShardedCorpus({str(self.path)!r}, docs={self.num_docs}, sentences={self.num_sentences}, "
            f"tokens={self.num_tokens}, shards={self.num_shards})"
        )
