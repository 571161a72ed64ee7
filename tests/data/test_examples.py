"""NSP / single-segment example construction from shards."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from bertzoo.data.pretraining.examples import NspDataset
from bertzoo.data.pretraining.plans import NOT_NEXT, truncation_counts
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.errors import ConfigError, DataError

CLS, SEP = 2, 3


@pytest.fixture(scope="module")
def corpus(synthetic_shards) -> ShardedCorpus:
    return ShardedCorpus(synthetic_shards)


@pytest.fixture(scope="module")
def dataset(corpus) -> NspDataset:
    return NspDataset(corpus, (CLS, SEP), 128, seed=7)


def _doc_of_token(corpus, positions):
    """Document index of global token positions."""
    doc_token_start = corpus.sentence_offsets[corpus.doc_offsets]
    return np.searchsorted(doc_token_start, positions, side="right") - 1


def _google_truncate_counts(la, lb, max_tokens):
    """BERT's truncate_seq_pair, token by token (front/back does not change the counts)."""
    ra = rb = 0
    while (la - ra) + (lb - rb) > max_tokens:
        if la - ra > lb - rb:
            ra += 1
        else:
            rb += 1
    return ra, rb


def test_truncation_counts_match_bert_loop():
    for la, lb, m in itertools.product(range(1, 30), range(1, 30), [2, 5, 17, 40]):
        assert truncation_counts(la, lb, m) == _google_truncate_counts(la, lb, m)


def test_structure_lengths_and_type_ids(dataset, corpus):
    assert len(dataset) > 3000
    for i in range(0, len(dataset), 3):
        ex = dataset[i]
        ids, types = ex["input_ids"], ex["token_type_ids"]
        assert ids.dtype == np.int64 and types.dtype == np.int64
        assert 5 <= len(ids) <= 128
        seps = np.flatnonzero(ids == SEP)
        assert ids[0] == CLS and len(seps) == 2 and seps[1] == len(ids) - 1 and seps[0] >= 2
        assert seps[1] - seps[0] >= 2  # B is not empty
        assert np.all(types[: seps[0] + 1] == 0) and np.all(types[seps[0] + 1 :] == 1)
        assert ex["index"] == i and ex["epoch"] == 0 and ex["next_sentence_label"] in (0, 1)
        (sa, ea), (sb, eb) = dataset.plan.a[i], dataset.plan.b[i]
        assert ids[1 : seps[0]].tolist() == corpus.token_range(sa, ea).tolist()
        assert ids[seps[0] + 1 : -1].tolist() == corpus.token_range(sb, eb).tolist()


def test_nsp_label_balance(corpus):
    for seed, epoch in [(7, 0), (7, 3), (11, 0)]:
        ds = NspDataset(corpus, (CLS, SEP), 128, seed=seed)
        ds.set_epoch(epoch)
        labels = np.array([ds[i]["next_sentence_label"] for i in range(len(ds))])
        assert len(labels) > 3000
        assert abs(labels.mean() - 0.5) < 0.02
    # One-sentence documents can only give NotNext pairs, so this balance needs the compensation.
    assert np.mean(np.diff(corpus.doc_offsets) == 1) > 0.05
    ds30 = NspDataset(corpus, (CLS, SEP), 128, seed=7, nsp_random_prob=0.3)
    assert abs(ds30.plan.label.mean() - 0.3) < 0.02


def test_is_next_follows_a_and_not_next_comes_from_another_document(dataset, corpus):
    a, b, label = dataset.plan.a, dataset.plan.b, dataset.plan.label
    doc_a = _doc_of_token(corpus, a[:, 0])
    assert np.all(doc_a == _doc_of_token(corpus, a[:, 1] - 1))  # A stays within a document
    doc_b = _doc_of_token(corpus, b[:, 0])
    assert np.all(doc_b == _doc_of_token(corpus, b[:, 1] - 1))
    nxt = label == 0
    assert nxt.sum() > 1000 and (~nxt).sum() > 1000
    assert np.all(doc_a[nxt] == doc_b[nxt])
    assert np.all(b[nxt, 0] >= a[nxt, 1])
    # Untruncated IsNext pairs are exactly contiguous: B starts where A ends.
    untruncated = nxt & ((a[:, 1] - a[:, 0]) + (b[:, 1] - b[:, 0]) < 125)
    assert untruncated.sum() > 500
    assert np.all(b[untruncated, 0] == a[untruncated, 1])
    assert np.all(doc_a[label == NOT_NEXT] != doc_b[label == NOT_NEXT])


def test_segments_start_at_sentence_boundaries_unless_truncated(dataset, corpus):
    a, b = dataset.plan.a, dataset.plan.b
    full = (a[:, 1] - a[:, 0]) + (b[:, 1] - b[:, 0]) < 125
    starts = set(corpus.sentence_offsets.tolist())
    assert all(int(s) in starts for s in a[full, 0])
    assert all(int(s) in starts for s in b[full, 0])


def test_deterministic_per_seed_and_epoch(corpus, dataset):
    again = NspDataset(corpus, (CLS, SEP), 128, seed=7)
    for i in range(0, len(dataset), 97):
        x, y = dataset[i], again[i]
        assert x["input_ids"].tolist() == y["input_ids"].tolist()
        assert x["next_sentence_label"] == y["next_sentence_label"]
    other_seed = NspDataset(corpus, (CLS, SEP), 128, seed=8)
    assert not np.array_equal(other_seed.plan.a[:200], dataset.plan.a[:200])

    a0 = dataset.plan.a.copy()
    dataset.set_epoch(1)
    try:
        assert len(dataset) == len(a0)  # the length is fixed across epochs
        assert dataset[5]["epoch"] == 1
        assert not np.array_equal(dataset.plan.a, a0)
        again.set_epoch(1)
        assert np.array_equal(dataset.plan.a, again.plan.a) and np.array_equal(dataset.plan.b, again.plan.b)
    finally:
        dataset.set_epoch(0)
    assert np.array_equal(dataset.plan.a, a0)


def test_short_target_share(dataset):
    plan = dataset.plan
    short = plan.short
    assert abs(short.mean() - 0.1) < 0.02
    assert np.all(plan.target[~short] == 125)
    # Short targets are uniform in [2, 124]: mean 63, and they spread over the whole range.
    assert abs(plan.target[short].mean() - 63) < 6
    assert plan.target[short].min() < 15 and plan.target[short].max() > 110
    lengths = (plan.a[:, 1] - plan.a[:, 0]) + (plan.b[:, 1] - plan.b[:, 0])
    assert lengths[short].mean() < 0.85 * lengths[~short].mean()


def test_single_segment_mode(corpus):
    ds = NspDataset(corpus, (CLS, SEP), 64, seed=1, nsp=False)
    a, target = ds.plan.a, ds.plan.target
    doc = _doc_of_token(corpus, a[:, 0])
    assert np.all(doc == _doc_of_token(corpus, a[:, 1] - 1))  # one document each
    # Epoch 0 is untrimmed and in corpus order: the examples tile every document exactly, so no
    # token is lost to truncation.
    assert ds.epoch_examples == len(ds)
    assert a[0, 0] == 0 and a[-1, 1] == corpus.num_tokens and np.all(a[1:, 0] == a[:-1, 1])
    lengths = a[:, 1] - a[:, 0]
    assert np.all((lengths >= 1) & (lengths <= target) & (target <= 62))
    # Chunks hold whole sentences; only a sentence longer than the target is cut into windows.
    starts = set(corpus.sentence_offsets.tolist())
    ends_at_sentence = np.array([int(e) in starts for e in a[:, 1]])
    assert np.all(ends_at_sentence | (lengths == target))
    assert ends_at_sentence.mean() > 0.9
    full = ~ds.plan.short
    assert lengths[full].mean() > 40  # packing fills most of the 62 tokens
    for i in range(0, len(ds), 5):
        ex = ds[i]
        assert "next_sentence_label" not in ex
        assert ex["input_ids"][0] == CLS and ex["input_ids"][-1] == SEP and len(ex["input_ids"]) <= 64
        assert np.count_nonzero(ex["input_ids"] == SEP) == 1 and not ex["token_type_ids"].any()
        assert ex["input_ids"][1:-1].tolist() == corpus.token_range(*a[i]).tolist()


def test_single_sentence_documents_are_usable(tmp_path, synthetic_tokenizer):
    docs = [f"Abc def ghi number {i}" for i in range(300)]
    prepare_shards(docs, synthetic_tokenizer, tmp_path / "s", progress=False)
    corpus = ShardedCorpus(tmp_path / "s")
    assert corpus.num_sentences == corpus.num_docs == 300
    ds = NspDataset(corpus, (CLS, SEP), 32, seed=0)
    assert len(ds) == 300
    assert all(ds[i]["next_sentence_label"] == NOT_NEXT for i in range(len(ds)))
    one = ShardedCorpus(_one_doc(tmp_path, synthetic_tokenizer))
    with pytest.raises(DataError, match="at least 2 documents"):
        NspDataset(one, (CLS, SEP), 32, seed=0)
    assert len(NspDataset(one, (CLS, SEP), 32, seed=0, nsp=False)) >= 1


def _one_doc(tmp_path, tok):
    prepare_shards(["Just one document. With two sentences."], tok, tmp_path / "one", progress=False)
    return tmp_path / "one"


def test_bad_settings(corpus):
    with pytest.raises(ConfigError, match="max_seq_len"):
        NspDataset(corpus, (CLS, SEP), 4, seed=0)
    with pytest.raises(ConfigError, match="short_seq_prob"):
        NspDataset(corpus, (CLS, SEP), 64, seed=0, short_seq_prob=1.5)
    with pytest.raises(DataError, match="outside the shards' vocabulary"):
        NspDataset(corpus, (CLS, 10**6), 64, seed=0)
    ds = NspDataset(corpus, (CLS, SEP), 64, seed=0)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_epoch_plan_on_wiki_is_fast(wiki_shards):
    corpus = ShardedCorpus(wiki_shards)
    t = time.perf_counter()
    ds = NspDataset(corpus, corpus.tokenizer(), 128, seed=0)
    ds.set_epoch(1)
    elapsed = time.perf_counter() - t
    assert len(ds) > 5000
    assert abs(ds.plan.label.mean() - 0.5) < 0.02
    assert elapsed < 4.0, f"two epoch plans over wiki-en took {elapsed:.2f}s"
