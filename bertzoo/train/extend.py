"""`bertzoo tokenizer extend`: a checkpoint with a domain's most useful missing tokens added to its vocabulary.

The tokenizer side (which tokens, and how they are added without changing any other segmentation) is
`bertzoo.data.tokens.extend`; this module resizes the model and starts its new rows:

- every vocabulary-sized table grows from [V, H] to [V+N, H]: the word table, a masked-LM head's decoder (tied or
  not) and its bias; `vocab_size` of the configs follows;
- a new word starts as the mean of the rows of the pieces the old tokenizer gave it ("pieces-mean"): the model
  read the word through those rows until now;
- a new character (it was [UNK], so it has no pieces) starts from count-based evidence ("projected"): PPMI + SVD
  vectors of the corpus under the new tokenizer (`bertzoo.data.tokens.word_vectors`), carried into the table's space
  by a least-squares linear map fitted on the old tokens the corpus shows often enough;
- a token the corpus shows fewer than `min_count` times (or a table the map cannot be fitted for) starts at the
  mean row of the table plus a little noise ("fallback");
- an output bias starts at the token's log unigram frequency in the corpus, shifted by the median gap between the
  old biases and the old tokens' log frequencies: the head's own scale.

The result is a bertzoo model directory (config.json, model.safetensors, the tokenizer files) plus
`extension.json`, written to a temporary directory and renamed into place at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import bertzoo.data.tokens.extend as ext
from bertzoo.config import ModelConfig
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import CheckpointError, ConfigError, DataError

EXTENSION_FILE = "extension.json"
PIECES_MEAN, PROJECTED, FALLBACK = "pieces-mean", "projected", "fallback"
STARTS = (PIECES_MEAN, PROJECTED, FALLBACK)
SVD_DIM_CAP = 100  # count-based vectors beyond ~100 dimensions add noise, not signal, on a domain corpus
MIN_ANCHORS = 20  # fewer old tokens in common than this and the linear map is not fitted
NOISE = 0.1  # a fallback row's noise, as a share of the table's spread per dimension
MAX_CHECK_ROUNDS = 8  # rounds of dropping new words that would change how a corpus word splits


# --- the rows ------------------------------------------------------------------------------------------------------


def pieces_mean(table: torch.Tensor, pieces: list[list[int]]) -> torch.Tensor:
    """(len(pieces), width): the mean of `table`'s rows of each id list."""
    return torch.stack([table[torch.tensor(ids, dtype=torch.long)].mean(0) for ids in pieces])


def fit_linear_map(source: torch.Tensor, target: torch.Tensor, ridge: float = 1e-6) -> torch.Tensor:
    """The least-squares affine map from `source` (m, k) to `target` (m, d), as a (k+1, d) matrix whose last row is
    the offset; `ridge` (relative to the mean squared input) keeps it defined when m is close to k."""
    x = torch.cat([source.double(), torch.ones(len(source), 1, dtype=torch.float64)], dim=1)
    gram = x.T @ x
    gram += ridge * gram.diagonal().mean() * torch.eye(len(gram), dtype=torch.float64)
    return torch.linalg.solve(gram, x.T @ target.double())


def apply_linear_map(weight: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """`source` (n, k) through a map of `fit_linear_map`: (n, d)."""
    return source.double() @ weight[:-1] + weight[-1]


def r_squared(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """The share of the variance of `target` that `predicted` explains."""
    residual = (target.double() - predicted).pow(2).sum()
    total = (target.double() - target.double().mean(0)).pow(2).sum().clamp_min(1e-30)
    return float(1 - residual / total)


def fallback_rows(table: torch.Tensor, n: int, keep: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(n, width): the mean of `table`'s rows `keep`, plus noise at a NOISE share of their spread per dimension."""
    rows = table[keep].double()
    noise = torch.randn(n, table.shape[1], generator=generator, dtype=torch.float64)
    return rows.mean(0) + NOISE * rows.std(0) * noise


def unigram_bias(bias: torch.Tensor, counts: np.ndarray, anchors: np.ndarray, new_ids: np.ndarray) -> torch.Tensor:
    """Output biases of `new_ids`: their add-one smoothed log frequency in `counts`, shifted by the median of
    (old bias - log frequency) over the `anchors`, the head's own offset."""
    log_p = np.log((counts.astype(np.float64) + 1.0) / (counts.sum() + len(counts)))
    offset = float(np.median(bias.double().numpy()[anchors] - log_p[anchors]))
    return torch.from_numpy(log_p[new_ids] + offset)


# --- the plan: how each new row starts -------------------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    """How the new rows start, and the corpus statistics under the new tokenizer that they read."""

    old_size: int
    starts: list[str]  # per new token: PIECES_MEAN, PROJECTED or FALLBACK
    pieces: list[list[int]]  # per new token: the old ids its row averages (PIECES_MEAN)
    counts: np.ndarray  # occurrences of every id of the new tokenizer in the corpus
    anchors: np.ndarray  # old ids seen at least min_count times with a count-based vector: the fit's examples
    vectors: torch.Tensor | None  # unit PPMI + SVD rows (new vocab, k), None when too few anchors
    keep: torch.Tensor  # old ids a fallback averages (every id but the special tokens)
    seed: int
    fits: dict[str, float] = dataclasses.field(default_factory=dict)  # tensor -> R^2 of its map on the anchors

    def new_ids(self, which: str) -> list[int]:
        return [i for i, s in enumerate(self.starts) if s == which]

    def rows(self, name: str, table: torch.Tensor) -> torch.Tensor:
        """The new rows of `table` (the tensor `name`): (N, width) for a table, (N,) for a bias."""
        n = len(self.starts)
        if table.dim() == 1:
            new = np.arange(self.old_size, self.old_size + n)
            return unigram_bias(table, self.counts, self.anchors, new)
        out = torch.zeros(n, table.shape[1], dtype=torch.float64)
        generator = torch.Generator().manual_seed(self.seed)
        fallback = self.new_ids(FALLBACK)
        projected = self.new_ids(PROJECTED)
        if fallback:
            out[fallback] = fallback_rows(table, len(fallback), self.keep, generator)
        if projected:
            assert self.vectors is not None  # a PROJECTED start needs vectors (`plan`)
            anchors = torch.from_numpy(self.anchors)
            weight = fit_linear_map(self.vectors[anchors], table[anchors])
            self.fits[name] = r_squared(apply_linear_map(weight, self.vectors[anchors]), table[anchors])
            out[projected] = apply_linear_map(weight, self.vectors[[self.old_size + i for i in projected]])
        words = self.new_ids(PIECES_MEAN)
        if words:
            out[words] = pieces_mean(table.double(), [self.pieces[i] for i in words])
        return out


def plan(
    chosen: list[ext.Candidate],
    old: Tokenizer,
    new: Tokenizer,
    documents: Iterable[str],
    *,
    min_count: int,
    window: int,
    seed: int,
    width: int,
    max_tokens: int = 1 << 24,
) -> Plan:
    """How each of `chosen` (the new tokenizer's ids from old.vocab_size on) starts, with the corpus counts and
    count-based vectors (under the new tokenizer `new`) the starts read."""
    from bertzoo.data.tokens.word_vectors import cooccurrence, ppmi, svd_vectors

    old_size, specials = old.vocab_size, set(new.special_ids.tolist())
    counts = np.zeros(new.vocab_size, dtype=np.int64)

    def counted() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The token stream, counted on its way to the co-occurrence counts: the corpus is read once."""
        for ids, docs in ext.token_chunks(new, documents, max_tokens=max_tokens):
            np.add(counts, np.bincount(ids, minlength=new.vocab_size), out=counts)
            yield ids, docs

    matrix = ppmi(cooccurrence(counted(), new.vocab_size, window, new.special_ids))
    has_vector = np.zeros(new.vocab_size, dtype=bool)
    has_vector[matrix.indices()[0].numpy()] = True
    anchors = np.array(
        [i for i in range(old_size) if counts[i] >= min_count and has_vector[i] and i not in specials], dtype=np.int64
    )
    vectors = None
    if len(anchors) >= MIN_ANCHORS:
        dim = max(2, min(width, SVD_DIM_CAP, len(anchors) // 10))
        vectors = svd_vectors(matrix, dim, seed=seed)
        vectors = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-12)  # directions: frequency-free
    starts, pieces = [], []
    for i, c in enumerate(chosen):
        usable = [p for p in c.pieces if p not in specials]
        seen = counts[old_size + i] >= min_count and has_vector[old_size + i] and vectors is not None
        starts.append(PIECES_MEAN if usable else PROJECTED if seen else FALLBACK)
        pieces.append(usable)
    keep = torch.tensor([i for i in range(old_size) if i not in specials], dtype=torch.long)
    if len(anchors) == 0:  # a bias offset needs some old token the corpus shows: use them all
        anchors = keep.numpy()
    return Plan(old_size, starts, pieces, counts, anchors, vectors, keep, seed)


# --- resizing a module ---------------------------------------------------------------------------------------------


def resize_vocabulary(
    module: nn.Module, old_size: int, new_rows: Callable[[str, torch.Tensor], torch.Tensor]
) -> list[str]:
    """Grow every vocabulary-sized tensor of `module` by the rows `new_rows(name, tensor)` returns: each word table
    (nn.Embedding of `old_size` rows), each decoder onto the vocabulary (nn.Linear with `old_size` outputs) and its
    bias. Tied tensors stay one tensor; configs' `vocab_size` follows. Returns the names of the tensors grown.
    CheckpointError for another tensor of `old_size` rows, which this cannot know how to grow."""
    places: dict[int, tuple[nn.Parameter, str, list[tuple[nn.Module, str]]]] = {}
    grown: list[nn.Module] = []
    for name, m in module.named_modules():
        if isinstance(m, nn.Embedding) and m.num_embeddings == old_size:
            attrs = ["weight"]
        elif isinstance(m, nn.Linear) and m.out_features == old_size:
            attrs = ["weight"] if m.bias is None else ["weight", "bias"]
        else:
            continue
        grown.append(m)
        for attr in attrs:
            p = getattr(m, attr)
            places.setdefault(id(p), (p, f"{name}.{attr}", []))[2].append((m, attr))
    if not places:
        raise CheckpointError(f"the model has no word table of {old_size} rows (its tokenizer's size) to grow")
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.dim() and tensor.shape[0] == old_size and id(tensor) not in places:
            raise CheckpointError(f"{name} has one row per token, which extending the vocabulary cannot grow")
    new_size = old_size
    with torch.no_grad():
        for p, name, owners in places.values():
            rows = new_rows(name, p.detach()).to(p.dtype)
            grown_p = nn.Parameter(torch.cat([p.detach(), rows]), requires_grad=p.requires_grad)
            new_size = len(grown_p)
            for owner, attr in owners:
                setattr(owner, attr, grown_p)
    for m in grown:
        if isinstance(m, nn.Embedding):
            m.num_embeddings = new_size
        else:
            m.out_features = new_size
    _set_vocab_size(module, old_size, new_size)
    return [name for _, name, _ in places.values()]


def _set_vocab_size(module: nn.Module, old_size: int, new_size: int) -> None:
    """`vocab_size` of every model config the module holds (the encoder's, ELECTRA's generator's)."""
    for m in module.modules():
        for value in vars(m).values():
            if isinstance(value, ModelConfig) and value.vocab_size == old_size:
                value.vocab_size = new_size


# --- the command ---------------------------------------------------------------------------------------------------


def check_request(add: int | None, tokens_file: str | None, out: str | Path) -> None:
    """ConfigError for a request that cannot add anything or would overwrite something, before any work."""
    if add is not None and add < 1:
        raise ConfigError(f"--add {add}: the number of tokens to add must be at least 1; pass --add N with N >= 1")
    if add is None and not tokens_file:
        raise ConfigError("nothing to add: pass --add N (the N most useful missing tokens) or --tokens FILE, or both")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not empty; choose a new output directory or remove it")


def _load(model: str) -> tuple[Path, Tokenizer, nn.Module, str]:
    """(directory, tokenizer, module, kind) of MODEL: a pretraining checkpoint keeps its heads, anything else is
    read as its encoder."""
    from bertzoo.loading import PRETRAINING, kind_of, load_encoder, load_pretraining, read_checkpoint, resolve

    directory = resolve(model)
    raw, config, state, is_hf = read_checkpoint(directory)
    try:
        tokenizer = Tokenizer.load(directory)
    except DataError:
        raise DataError(
            f"{model}: {directory} has no tokenizer bertzoo can read; copy the model's tokenizer files "
            "(tokenizer.json or vocab.txt) beside its weights"
        ) from None
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(
            f"{model}: the word table has {config.vocab_size} rows but the tokenizer {tokenizer.vocab_size} tokens; "
            "extending needs a tokenizer with one token per row"
        )
    kind = kind_of(raw, state, is_hf)
    module = load_pretraining(directory) if kind == PRETRAINING else load_encoder(directory)
    return directory, tokenizer, module, kind


def choose_exact(
    tokenizer: Tokenizer, mined: ext.Mined, listed: list[ext.Candidate], add: int
) -> tuple[Tokenizer | None, list[ext.Candidate], list[tuple[str, str]]]:
    """(new tokenizer, the tokens added, the mined words dropped with the corpus word each would have changed).
    A WordPiece tokenizer's corpus words are re-read with the new one; a new word that changes how any of them
    splits is dropped and the next candidate taken (module docstring of bertzoo.data.tokens.extend)."""
    dropped: dict[str, str] = {}
    for _ in range(MAX_CHECK_ROUNDS):
        chosen = ext.choose(mined, listed, add, exclude=set(dropped))
        if not chosen:
            return None, [], sorted(dropped.items())
        new = ext.extend_tokenizer(tokenizer, chosen)
        if tokenizer.kind != "wordpiece":
            return new, chosen, sorted(dropped.items())
        added = {c.token for c in chosen if c.kind == ext.WORD}
        changed = ext.changed_words(tokenizer, new, [w for w in mined.plain_words if w not in added])
        if not changed:
            return new, chosen, sorted(dropped.items())
        listed_words, before = {c.token for c in listed}, len(dropped)
        for word, tokens in changed.items():
            for culprit in added.intersection(tokens):
                if culprit in listed_words:
                    raise DataError(
                        f"--tokens {culprit!r} would change how the corpus word {word!r} splits ({tokens}); remove it"
                    )
                dropped.setdefault(culprit, word)
        if len(dropped) == before:  # a change no new word explains: the exactness argument failed somewhere
            word, tokens = next(iter(changed.items()))
            raise DataError(f"the extended tokenizer splits the corpus word {word!r} differently ({tokens}); not saved")
    raise DataError("new words kept changing how other corpus words split; list the tokens to add with --tokens")


def extend_model(
    model: str,
    documents: Callable[[], Iterable[str]],
    out: str | Path,
    *,
    add: int | None = None,
    tokens_file: str | None = None,
    corpus: list[str] | None = None,
    min_count: int = 2,
    window: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Add to MODEL's tokenizer its `add` most useful missing tokens in the corpus `documents()` yields (read twice:
    once by the old tokenizer, once by the new), and/or the tokens of `tokens_file`; grow and start the model's rows
    (module docstring) and write a bertzoo model directory with `extension.json` to `out`, atomically. Returns the
    record `extension.json` holds."""
    import bertzoo.io as io

    check_request(add, tokens_file, out)
    lines = ext.read_token_file(tokens_file) if tokens_file else []
    directory, tokenizer, module, kind = _load(model)
    old_size = tokenizer.vocab_size
    mined = ext.mine(tokenizer, documents(), min_count=min_count)
    listed = ext.listed_candidates(tokenizer, lines, mined) if lines else []
    new, chosen, dropped = choose_exact(tokenizer, mined, listed, add or 0)
    if not chosen:
        raise DataError(_nothing_to_add(model, corpus or [], mined, min_count, dropped))
    width = next(
        (m.embedding_dim for m in module.modules() if isinstance(m, nn.Embedding) and m.num_embeddings == old_size),
        None,
    )
    if width is None:
        raise CheckpointError(f"{model} has no word table of {old_size} rows (its tokenizer's size) to grow")
    starts = plan(chosen, tokenizer, new, documents(), min_count=min_count, window=window, seed=seed, width=width)
    grown = resize_vocabulary(module, old_size, starts.rows)
    record = _record(model, directory, kind, corpus or [], tokenizer, chosen, starts, grown, mined, dropped)
    record["settings"] = {
        "add": add,
        "tokens_file": str(tokens_file) if tokens_file else None,
        "min_count": min_count,
        "window": window,
        "seed": seed,
    }

    def write(tmp: Path) -> None:
        module.save_pretrained(tmp)
        new.save(tmp)
        io.write_json(tmp / EXTENSION_FILE, record)

    io.write_dir_atomic(out, write)
    return record


def _nothing_to_add(
    model: str, corpus: list[str], mined: ext.Mined, min_count: int, dropped: list[tuple[str, str]]
) -> str:
    where = ", ".join(corpus) or "the corpus"
    also = f" ({len(dropped)} word(s) were left out: they would change how other words split)" if dropped else ""
    return (
        f"0 candidates in {where}: the tokenizer of {model} reads every character of its {mined.occurrences:,} "
        f"words, and no word seen at least {min_count} times takes more than one piece{also}; nothing to add (lower "
        "--min-count, use a larger corpus, or list tokens with --tokens)"
    )


def _record(
    model: str,
    directory: Path,
    kind: str,
    corpus: list[str],
    old: Tokenizer,
    chosen: list[ext.Candidate],
    starts: Plan,
    grown: list[str],
    mined: ext.Mined,
    dropped: list[tuple[str, str]],
) -> dict[str, Any]:
    """What `extension.json` holds: where the model and tokens came from, and how each new row started."""
    size = old.vocab_size
    tokens = [
        {
            **c.as_dict(),
            "id": size + i,
            "start": starts.starts[i],
            "pieces": [old.id_to_token(p) for p in c.pieces],
            "corpus_count": int(starts.counts[size + i]),
        }
        for i, c in enumerate(chosen)
    ]
    counts = {
        "added": len(chosen),
        "chars": sum(c.kind == ext.CHAR for c in chosen),
        "words": sum(c.kind == ext.WORD for c in chosen),
        "listed": sum(c.source == ext.LISTED for c in chosen),
        "mined": sum(c.source == ext.MINED for c in chosen),
        **{start: starts.starts.count(start) for start in STARTS},
        "candidates": {"chars": len(mined.chars), "words": len(mined.words)},
        "documents": mined.documents,
        "word_occurrences": mined.occurrences,
        "unk_occurrences": mined.unk_occurrences,
        "skipped_chars": mined.skipped_chars,
    }
    return {
        "source_model": model,
        "resolved": str(directory),
        "source_kind": kind,
        "corpus": corpus,
        "tokenizer_kind": old.kind,
        "vocab_size": {"before": size, "after": size + len(chosen)},
        "counts": counts,
        "projection": {
            "anchors": int(len(starts.anchors)) if starts.vectors is not None else 0,
            "dim": int(starts.vectors.shape[1]) if starts.vectors is not None else 0,
            "r2": {name: round(value, 4) for name, value in starts.fits.items()},
        },
        "tensors": grown,
        "dropped": [{"token": token, "would_change": word} for token, word in dropped],
        "tokens": tokens,
    }
