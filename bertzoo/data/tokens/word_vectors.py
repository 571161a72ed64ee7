"""Count-based word vectors from a token stream: the first stage of a CPU-budget pretraining recipe.

A word table starts from the truncated SVD of the corpus's positive pointwise mutual information (PPMI)
matrix instead of random noise. Levy & Goldberg (2014) showed that skip-gram with negative sampling
factorises a shifted PMI matrix implicitly; Levy, Goldberg & Dagan (2015) that PPMI + SVD with context
distribution smoothing (alpha = 0.75) and symmetric singular-value weighting (U S^0.5) matches it on word
similarity. The whole computation takes seconds on a few million tokens, where masked-LM pretraining needs
far more than a CPU's ten minutes before its embeddings carry topic information (docs/pretraining.md).

Counts are distance-weighted (a pair d tokens apart counts 1/d, as word2vec's dynamic window does on
average) inside a window, never across document boundaries; special tokens take no part, and their rows
(and those of tokens the corpus never shows) keep the table's random initialisation.

Pure functions on arrays and modules, no file IO (train/pretrain.py streams the shards in).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

# Context distribution smoothing: raising context counts to 0.75 keeps rare contexts from getting huge PMI
# (Levy, Goldberg & Dagan 2015; the same exponent as word2vec's negative-sampling distribution).
CONTEXT_ALPHA = 0.75


def cooccurrence(
    chunks: Iterable[tuple[np.ndarray, np.ndarray]], vocab_size: int, window: int, skip_ids: np.ndarray
) -> torch.Tensor:
    """Symmetric, distance-weighted co-occurrence counts (a coalesced sparse (vocab, vocab) float64 tensor).

    `chunks` yields (token ids, document id per token) arrays; a pair counts only inside one document, and
    never with a token of `skip_ids` on either side."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    skip = np.zeros(vocab_size, dtype=bool)
    skip[np.asarray(skip_ids, dtype=np.int64)] = True
    key, value = np.zeros(0, np.int64), np.zeros(0, np.float64)  # pair id (row * vocab + column), its count
    for tokens, docs in chunks:
        tokens = np.asarray(tokens, dtype=np.int64)
        docs = np.asarray(docs)
        keys, values = [key], [value]
        for d in range(1, window + 1):
            left, right = tokens[:-d], tokens[d:]
            ok = (docs[:-d] == docs[d:]) & ~skip[left] & ~skip[right]
            left, right = left[ok], right[ok]
            # Both directions: the word left of another is also its right-hand context.
            keys.append(np.concatenate([left * vocab_size + right, right * vocab_size + left]))
            values.append(np.full(2 * len(left), 1.0 / d))
        key, value = _sum_by_key(np.concatenate(keys), np.concatenate(values))
    index = torch.from_numpy(np.stack([key // vocab_size, key % vocab_size]))
    return torch.sparse_coo_tensor(
        index, torch.from_numpy(value), (vocab_size, vocab_size), is_coalesced=True, check_invariants=False
    )


def _sum_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct keys and the sum of `values` per key."""
    unique, inverse = np.unique(keys, return_inverse=True)
    # astype: bincount of nothing is an int64 array, whatever the weights
    return unique, np.bincount(inverse, weights=values, minlength=len(unique)).astype(np.float64)


def ppmi(counts: torch.Tensor, alpha: float = CONTEXT_ALPHA) -> torch.Tensor:
    """Positive PMI of sparse co-occurrence `counts`, with context counts smoothed by `alpha`:
    max(0, log(#(w, c) * sum_c' #(c')^alpha / (#(w) * #(c)^alpha))). Sparse, same pattern (zeros dropped)."""
    counts = counts.coalesce()
    (i, j), v = counts.indices(), counts.values()
    words = torch.zeros(counts.shape[0], dtype=torch.float64).index_add_(0, i, v)
    contexts = torch.zeros(counts.shape[1], dtype=torch.float64).index_add_(0, j, v).pow(alpha)
    pmi = torch.log(v * contexts.sum() / (words[i] * contexts[j]))
    keep = pmi > 0
    return torch.sparse_coo_tensor(
        counts.indices()[:, keep], pmi[keep], counts.shape, check_invariants=False
    ).coalesce()


def svd_vectors(matrix: torch.Tensor, dim: int, *, seed: int = 0, power: float = 0.5) -> torch.Tensor:
    """(rows, dim) word vectors U_dim * S_dim^power from a randomized truncated SVD of `matrix` (sparse or
    dense), deterministic for a `seed`; the leading `d` columns are the rank-d answer for any d < dim."""
    k = min(dim, *matrix.shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # float32 CSR: MKL's sparse x dense product; COO or float64 is 10-20x slower for the same vectors.
        with warnings.catch_warnings():  # "sparse CSR support is in beta": matmul is all this needs of it
            warnings.simplefilter("ignore", UserWarning)
            x = matrix.float().to_sparse_csr() if matrix.is_sparse else matrix.float()
        u, s, _ = torch.svd_lowrank(x, q=min(k + 16, *matrix.shape), niter=4)
    vectors = torch.zeros(matrix.shape[0], dim, dtype=torch.float64)
    vectors[:, :k] = (u[:, :k] * s[:k].pow(power)).double()
    return vectors


def word_tables(module: nn.Module) -> list[nn.Embedding]:
    """The distinct input word tables of a model or objective (ELECTRA's two encoders share one; a tied
    decoder is the same table)."""
    seen: dict[int, nn.Embedding] = {}
    for m in module.modules():
        table = getattr(type(m), "word_embeddings", None)
        if isinstance(table, property):
            emb = m.word_embeddings
            if isinstance(emb, nn.Embedding):
                seen.setdefault(id(emb.weight), emb)
    return list(seen.values())


def load_word_vectors(table: nn.Embedding, vectors: torch.Tensor, rows: torch.Tensor) -> None:
    """Copy `vectors` (vocab, >= width) into `table`'s `rows`: centred, every row scaled to the same norm, the one
    that gives them the root mean square the table has now (its initialisation). The layers above then see
    inputs of the scale they were initialised for, and every word as strong as every other: SVD rows of frequent
    words are several times shorter than rare ones' (Chinese characters: the 50 commonest, a third of the text,
    at 0.4x the mean), and with them as they are a 10-minute BERT-mini stayed on the unigram plateau
    (docs/pretraining.md). The other rows (special tokens, unseen tokens) are left as they are."""
    width = table.embedding_dim
    if vectors.shape[1] < width:
        raise ValueError(f"{vectors.shape[1]}-dimensional vectors cannot fill a {width}-wide table")
    with torch.no_grad():
        chosen = vectors[rows, :width]
        chosen = chosen - chosen.mean(0)
        chosen = chosen / chosen.norm(dim=1, keepdim=True).clamp_min(1e-12)  # unit rows: directions only
        target = table.weight[rows].double().pow(2).mean().sqrt()
        table.weight[rows] = (chosen * target * width**0.5).to(table.weight.dtype)
