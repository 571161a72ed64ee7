"""A made-up language of K topics for learning tests: each document draws its content words from one topic, and a
linear probe of an encoder's mean-pooled features tells the topics apart only if pretraining learned them (the
`topic_corpus` fixture in conftest.py tokenizes it into shards)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.models.encoder import Encoder

sklearn_linear = pytest.importorskip("sklearn.linear_model", reason="pip install scikit-learn")

K = 4  # topics
PER_TOPIC = 12  # content words per topic (6 seen by the probe's training set, 6 by its test set)
FUNCTION = 10  # words shared by every topic
TOPIC_SHARE = 0.6  # share of content words in a sentence


def _words() -> tuple[list[list[str]], list[str]]:
    r = random.Random(0)
    words: set[str] = set()
    while len(words) < K * PER_TOPIC + FUNCTION:
        words.add("".join(r.choice("bcdfghjklmnprstvz") + r.choice("aeiou") for _ in range(r.randint(2, 3))))
    ordered = sorted(words)
    r.shuffle(ordered)
    topics = [ordered[k * PER_TOPIC : (k + 1) * PER_TOPIC] for k in range(K)]
    return topics, ordered[K * PER_TOPIC :]


TOPICS, FUNCTION_WORDS = _words()


def document(topic: int, r: random.Random, half: int | None = None) -> str:
    """2-4 sentences of 6-12 words; content words from `topic` (only its `half` when given)."""
    pool = TOPICS[topic]
    if half is not None:
        pool = pool[half * PER_TOPIC // 2 : (half + 1) * PER_TOPIC // 2]
    sentences = []
    for _ in range(r.randint(2, 4)):
        n = r.randint(6, 12)
        words = [r.choice(pool) if r.random() < TOPIC_SHARE else r.choice(FUNCTION_WORDS) for _ in range(n)]
        sentences.append(" ".join(words))
    return ". ".join(sentences) + "."


def mean_pooled(encoder: Encoder, tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """Mean of the last layer over real tokens: the sentence vector the fine-tuning recipe uses."""
    ids = [tokenizer.encode(t).ids for t in texts]
    width = max(map(len, ids))
    input_ids = torch.zeros(len(ids), width, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    encoder.eval()
    with torch.no_grad():
        hidden = encoder(input_ids, attention_mask=mask).last_hidden_state
    weights = mask.unsqueeze(-1).float()
    return ((hidden * weights).sum(1) / weights.sum(1)).numpy()


def transfer_probe(encoder: Encoder, tokenizer: Tokenizer) -> float:
    """Accuracy on second-half-word documents of a logistic regression trained on first-half ones."""
    r = random.Random(2)
    sets = []
    for half in (0, 1):
        labels = [r.randrange(K) for _ in range(300)]
        sets.append((mean_pooled(encoder, tokenizer, [document(k, r, half) for k in labels]), np.array(labels)))
    (x_train, y_train), (x_test, y_test) = sets
    probe = sklearn_linear.LogisticRegression(max_iter=2000).fit(x_train, y_train)
    return float(probe.score(x_test, y_test))
