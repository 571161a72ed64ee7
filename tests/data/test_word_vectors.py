"""Count-based word vectors (bertzoo.data.tokens.word_vectors) and `word_embedding_init: ppmi-svd` in pretraining.

Expected counts and PMI values are written out by hand or computed here with plain numpy on a dense
matrix, never by the module under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertzoo.config import load_pretrain_config
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.word_vectors import cooccurrence, load_word_vectors, ppmi, svd_vectors, word_tables
from bertzoo.errors import ConfigError
from bertzoo.loading import load_encoder
from bertzoo.models.encoder import Encoder
from bertzoo.train.pretrain import build_pretraining, pretrain
from bertzoo.train.start import document_chunks

from helpers.learning import K, transfer_probe

V = 8


def dense(chunks, window=2, skip=(0,)) -> np.ndarray:
    return cooccurrence(chunks, V, window, np.array(skip)).to_dense().numpy()


def test_counts_are_distance_weighted_symmetric_and_stay_inside_documents() -> None:
    # Document 0 is 3 4 5, document 1 is 6 7; token 0 is special and counts with nothing.
    counts = dense([(np.array([3, 4, 5, 6, 0, 7]), np.array([0, 0, 0, 1, 1, 1]))])
    want = np.zeros((V, V))
    for a, b, w in [(3, 4, 1.0), (4, 5, 1.0), (3, 5, 0.5), (6, 7, 0.5)]:  # 6 and 7 are two apart (0 between)
        want[a, b] = want[b, a] = w
    np.testing.assert_allclose(counts, want)


def test_counts_add_up_over_chunks() -> None:
    whole = dense([(np.array([1, 2, 3, 1, 2]), np.zeros(5, int))])
    split = dense([(np.array([1, 2, 3]), np.zeros(3, int)), (np.array([1, 2]), np.ones(2, int))])
    # The split stream loses the pairs that cross the chunk (document) boundary: (3,1) at 1, (2,1)/(3,2) at 2.
    lost = np.zeros((V, V))
    for a, b, w in [(3, 1, 1.0), (2, 1, 0.5), (3, 2, 0.5)]:
        lost[a, b] += w
        lost[b, a] += w
    np.testing.assert_allclose(whole - split, lost)


def test_ppmi_matches_the_formula_on_a_dense_matrix() -> None:
    rng = np.random.default_rng(0)
    c = rng.integers(0, 4, (6, 6)).astype(float)
    c = c + c.T
    sparse = torch.from_numpy(c).to_sparse()
    got = ppmi(sparse, alpha=0.75).to_dense().numpy()
    words, contexts = c.sum(1), c.sum(0) ** 0.75
    want = np.zeros_like(c)
    for i in range(6):
        for j in range(6):
            if c[i, j]:
                want[i, j] = max(0.0, math.log(c[i, j] * contexts.sum() / (words[i] * contexts[j])))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_svd_vectors_reconstruct_a_low_rank_symmetric_matrix() -> None:
    g = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(40, 3, generator=g, dtype=torch.float64))[0]
    m = basis @ torch.diag(torch.tensor([9.0, 4.0, 1.0], dtype=torch.float64)) @ basis.T  # rank 3, PSD
    vectors = svd_vectors(m.to_sparse(), 5, seed=0)
    assert vectors.shape == (40, 5)
    # U S^0.5 of a PSD matrix: vectors @ vectors.T gives the matrix back; the columns past its rank are ~0.
    torch.testing.assert_close(vectors @ vectors.T, m, atol=1e-4, rtol=0)
    from_dense = svd_vectors(m, 5, seed=0)
    torch.testing.assert_close(from_dense @ from_dense.T, m, atol=1e-4, rtol=0)
    torch.testing.assert_close(vectors, svd_vectors(m.to_sparse(), 5, seed=0))  # seeded: repeatable


def test_loaded_vectors_take_the_tables_scale_and_leave_other_rows() -> None:
    torch.manual_seed(0)
    table = torch.nn.Embedding(10, 4)
    torch.nn.init.normal_(table.weight, std=0.02)
    before = table.weight.detach().clone()
    vectors = torch.arange(60, dtype=torch.float64).reshape(10, 6) ** 1.5
    rows = torch.tensor([2, 3, 5, 7])
    load_word_vectors(table, vectors, rows)
    after = table.weight.detach()
    untouched = torch.tensor([0, 1, 4, 6, 8, 9])
    torch.testing.assert_close(after[untouched], before[untouched], rtol=0, atol=0)
    # Centred, each row to one norm, that of the rms those rows had at initialisation; only 4 columns used.
    rms = before[rows].pow(2).mean().sqrt()
    torch.testing.assert_close(after[rows].pow(2).mean().sqrt(), rms)
    torch.testing.assert_close(after[rows].norm(dim=1), torch.full((4,), float(rms) * 2.0))  # sqrt(width) = 2
    centred = vectors[rows, :4] - vectors[rows, :4].mean(0)
    unit = centred / centred.norm(dim=1, keepdim=True)
    torch.testing.assert_close(after[rows].double(), unit * float(rms) * 2.0)
    with pytest.raises(ValueError, match="cannot fill"):
        load_word_vectors(torch.nn.Embedding(10, 8), vectors, rows)


def test_word_tables_finds_one_table_per_shared_weight(tmp_path, synthetic_shards) -> None:
    small = {"model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 2, "model.intermediate_size": 64}
    tables = {}
    for family in ("bert", "electra"):
        cfg = load_pretrain_config(
            f"configs/pretrain/{family}-mini.yaml",
            {"data.shards": str(synthetic_shards), "train.output_dir": str(tmp_path / family), **small},
        )
        objective = build_pretraining(cfg)[0]
        tables[family] = (objective, word_tables(objective))
    bert, found = tables["bert"]
    assert len(found) == 1 and found[0] is bert.encoder.embeddings.word
    electra, found = tables["electra"]
    # The generator and the discriminator share one word table: it is found once.
    assert electra.generator.encoder.embeddings.word is electra.discriminator.encoder.embeddings.word
    assert len(found) == 1


def _topic_config(shards, out, **overrides):
    return load_pretrain_config(
        "configs/pretrain/bert-mini.yaml",
        {
            "model": {"preset": "bert-mini", "hidden_size": 64, "num_heads": 2, "intermediate_size": 128,
                      "num_layers": 2, "max_position": 128},
            "data.shards": str(shards),
            "data.max_seq_len": 64,
            "train.output_dir": str(out),
            "train.batch_size": 16,
            "train.precision": "fp32",
            "train.threads": 1,
            "train.seed": 0,
            **overrides,
        },
    )  # fmt: skip


def test_ppmi_svd_start_already_transfers_topics(topic_corpus, tmp_path) -> None:  # noqa: F811
    """Before any training step, word tables from PPMI + SVD put a topic's unseen words near its seen ones: the
    transfer probe of tests/train/test_learning.py reads topics from the untrained encoder, random init cannot."""
    shards, tokenizer = topic_corpus
    cfg = _topic_config(shards, tmp_path / "ppmi", word_embedding_init="ppmi-svd", **{"train.max_steps": 1})
    summary = pretrain(cfg)
    encoder = load_encoder(summary["final_dir"])
    torch.manual_seed(0)
    random_init = transfer_probe(Encoder(encoder.config), tokenizer)
    started = transfer_probe(encoder, tokenizer)
    # Measured (2026-11-27): 1.0 after one step; random init 0.04 (chance 1 / K).
    assert random_init < 0.45, f"random init transfers ({random_init:.2f}): the probe set leaks"
    assert started > 0.8, f"PPMI + SVD start transfers at {started:.2f} (random init {random_init:.2f}, K={K})"


def test_document_chunks_cover_the_corpus_in_whole_documents(synthetic_shards) -> None:
    from bertzoo.data.tokens.shards import ShardedCorpus

    corpus = ShardedCorpus(synthetic_shards)
    chunks = list(document_chunks(corpus, tokens_per_chunk=500))
    assert len(chunks) > 3
    tokens = np.concatenate([t for t, _ in chunks])
    docs = np.concatenate([d for _, d in chunks])
    np.testing.assert_array_equal(tokens, corpus.token_range(0, corpus.num_tokens))
    assert np.all(np.diff(docs) >= 0) and docs[-1] == corpus.num_docs - 1
    for d in (0, corpus.num_docs // 2, corpus.num_docs - 1):
        first, last = corpus.doc_sentences(d)
        assert (docs == d).sum() == corpus.sentence_offsets[last] - corpus.sentence_offsets[first]
    # No document is split between two chunks.
    assert all(c[1][-1] != n[1][0] for c, n in zip(chunks, chunks[1:], strict=False))


def test_a_large_corpus_is_sampled_in_evenly_spread_whole_chunks(synthetic_shards) -> None:
    from bertzoo.data.tokens.shards import ShardedCorpus

    corpus = ShardedCorpus(synthetic_shards)
    everything = list(document_chunks(corpus, tokens_per_chunk=500))
    sample = list(document_chunks(corpus, tokens_per_chunk=500, max_tokens=2000))
    assert len(everything) > 8 and len(sample) == 4
    # The first and the last chunk of the whole, two between them; each one a chunk of the whole, unchanged.
    firsts = {int(d[0]): i for i, (_, d) in enumerate(everything)}
    picked = [firsts[int(d[0])] for _, d in sample]
    assert picked[0] == 0 and picked[-1] == len(everything) - 1 and picked == sorted(set(picked))
    for (tokens, docs), i in zip(sample, picked, strict=True):
        np.testing.assert_array_equal(tokens, everything[i][0])
        np.testing.assert_array_equal(docs, everything[i][1])


def test_bad_settings_are_one_line_errors(synthetic_shards, tmp_path) -> None:
    with pytest.raises(ConfigError, match="word_embedding_window must be at least 1"):
        load_pretrain_config("configs/pretrain/bert-mini.yaml", {"word_embedding_window": 0})
    with pytest.raises(ConfigError, match="word_embedding_init"):
        load_pretrain_config("configs/pretrain/bert-mini.yaml", {"word_embedding_init": "glove"})


@pytest.mark.parametrize(
    "family", ["bert", "albert", "electra", "gpt", "t5", "mass", "xlnet", "transformer-xl", "unilm"]
)
def test_every_family_with_a_word_table_starts_from_the_vectors(family, synthetic_shards, tmp_path) -> None:
    """The same seed with and without `ppmi-svd`: the rows of corpus words differ, special tokens' rows do not."""
    built = {}
    for init in ("random", "ppmi-svd"):
        cfg = load_pretrain_config(
            f"configs/pretrain/{family}-mini.yaml",
            {"data.shards": str(synthetic_shards), "train.output_dir": str(tmp_path / init),
             "word_embedding_init": init, "train.seed": 3},
        )  # fmt: skip
        built[init] = [t.weight.detach().clone() for t in word_tables(build_pretraining(cfg)[0])]
    tokenizer = Tokenizer.load(synthetic_shards / "tokenizer")
    words = torch.tensor(sorted(set(range(tokenizer.vocab_size)) - set(tokenizer.special_ids.tolist())))
    assert len(built["random"]) == len(built["ppmi-svd"]) >= 1
    for before, after in zip(built["random"], built["ppmi-svd"], strict=True):
        torch.testing.assert_close(after[tokenizer.special_ids], before[tokenizer.special_ids], rtol=0, atol=0)
        changed = (after[words] != before[words]).any(1).float().mean()
        assert changed > 0.9, f"{family}: only {changed:.0%} of the word rows were set"


def test_a_corpus_without_word_pairs_is_a_config_error(tmp_path) -> None:
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS

    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in [*SPECIAL_TOKENS, "alpha", "beta"]), encoding="utf-8")
    tokenizer = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    prepare_shards(["alpha", "beta", "alpha"] * 20, tokenizer, tmp_path / "shards", progress=False)  # one word each
    cfg = _topic_config(tmp_path / "shards", tmp_path / "run", word_embedding_init="ppmi-svd")
    with pytest.raises(ConfigError, match="found no word pairs in data.shards"):
        build_pretraining(cfg)


@pytest.mark.parametrize("family", ["bert", "electra", "xlnet", "unilm", "t5", "mass", "transformer-xl"])
def test_the_measured_configs_keep_the_count_based_start(family) -> None:
    """These families' CPU-budget figures were measured from the PPMI + SVD start (docs/families.md,
    docs/generation.md; XLNet-, UniLM-, T5- and MASS-mini beat their random init only with it): a shipped config that
    dropped it would no longer be the recipe its figures describe."""
    cfg = load_pretrain_config(f"configs/pretrain/{family}-mini.yaml")
    assert cfg.word_embedding_init == "ppmi-svd"
