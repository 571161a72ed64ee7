"""FULL-SENTENCES packing with `data.document_boundaries`: each example says which document each token is from,
and the collated batch carries it to the encoder."""

from __future__ import annotations

import numpy as np
import pytest

from bertzoo.config import DataConfig, MaskingConfig
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.examples import FullSentencesDataset, pretraining_dataset
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.errors import ConfigError

CLS, SEP = 2, 3  # the synthetic WordPiece tokenizer's [CLS]/[SEP]


@pytest.fixture(scope="module")
def corpus(synthetic_shards) -> ShardedCorpus:
    return ShardedCorpus(synthetic_shards)


def test_document_ids_follow_the_separators(corpus: ShardedCorpus) -> None:
    ds = FullSentencesDataset(corpus, (CLS, SEP), 64, seed=3, document_boundaries=True)
    crossing = 0
    for i in range(0, len(ds), 5):
        ex = ds[i]
        ids, docs = ex["input_ids"], ex["document_ids"]
        # Hand rule: a new document starts right after every separator but the closing one.
        expected = np.concatenate([[0], np.cumsum(ids[:-1] == SEP)])
        assert docs.tolist() == expected.tolist()
        crossing += int(docs[-1] > 0)
    assert crossing > 3  # the corpus has examples spanning documents


def test_without_the_option_no_document_ids(corpus: ShardedCorpus) -> None:
    assert "document_ids" not in FullSentencesDataset(corpus, (CLS, SEP), 64, seed=3)[0]


def test_collator_carries_document_ids(corpus: ShardedCorpus) -> None:
    ds = FullSentencesDataset(corpus, (CLS, SEP), 64, seed=3, document_boundaries=True)
    collate = PretrainingCollator((0, 1, CLS, SEP, 4), MaskingConfig(), seed=0, vocab_size=corpus.vocab_size)
    batch = collate([ds[i] for i in range(4)])
    docs = batch.extra["document_ids"]
    assert docs.shape == batch.input_ids.shape
    assert docs[0, : len(ds[0]["document_ids"])].tolist() == ds[0]["document_ids"].tolist()


def test_document_boundaries_need_full_sentences(corpus: ShardedCorpus, synthetic_tokenizer) -> None:
    with pytest.raises(ConfigError, match="full_sentences"):
        pretraining_dataset(
            "doc_sentences", corpus, synthetic_tokenizer, DataConfig(max_seq_len=64, document_boundaries=True), seed=0
        )
