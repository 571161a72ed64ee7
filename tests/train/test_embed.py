"""Batch inference returns vectors in input order, equal to one-at-a-time encoding."""

from __future__ import annotations

import numpy as np
import torch

from bertzoo.config import ModelConfig
from bertzoo.models.encoder import Encoder
from bertzoo.train.embed import encode


def test_sorted_batches_match_single_texts(synthetic_tokenizer, synthetic_docs):
    torch.manual_seed(0)
    enc = Encoder(
        ModelConfig(
            vocab_size=synthetic_tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64
        )
    ).eval()
    texts = [d[: 20 + 37 * i % 300] for i, d in enumerate(synthetic_docs[:23])]
    for pooling in ("mean", "cls", "pooler"):
        batched = encode(enc, synthetic_tokenizer, texts, batch_size=5, pooling=pooling)
        single = np.concatenate([encode(enc, synthetic_tokenizer, [t], pooling=pooling) for t in texts])
        np.testing.assert_allclose(batched, single, atol=1e-5)
    unit = encode(enc, synthetic_tokenizer, texts, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    # Order really is the input order: distinct texts give distinct rows in place.
    assert not np.allclose(batched[0], batched[1])
