"""XLNet test helpers: toy examples over a small vocabulary, the reachability check that no target token leaks
through the layers, and a tiny XLNet for the attention view."""

from __future__ import annotations

import numpy as np
import torch

from bertzoo.data.tokens.tokenizer import SpecialIds
from bertzoo.variants import xlnet

VOCAB = 40


SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


def examples(n: int, length: int, seed: int = 0) -> list[dict]:
    """[CLS] a [SEP] b [SEP] blocks of random ordinary ids (5..VOCAB-1), lengths varying."""
    r = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = int(r.integers(length // 2, length + 1))
        body = r.integers(5, VOCAB, size - 3).tolist()
        cut = int(r.integers(1, size - 3))
        out.append({"input_ids": [2, *body[:cut], 3, *body[cut:], 3], "index": i})
    return out


def reachable(blocked: np.ndarray, layers: int) -> np.ndarray:
    """(seq, seq) bool: the inputs whose content can reach query i's query stream after `layers` layers.
    The content stream sees what the mask allows and itself; the query stream what the mask allows."""
    seq = len(blocked)
    content = ~blocked | np.eye(seq, dtype=bool)
    reach = np.eye(seq, dtype=bool)  # content of layer 0 = the inputs
    for _ in range(layers - 1):
        reach = (content.astype(int) @ reach.astype(int)) > 0
    return ((~blocked).astype(int) @ reach.astype(int)) > 0


def leaks(blocked: np.ndarray, rank: np.ndarray, targets: np.ndarray, layers: int = 3) -> bool:
    """Whether some target's query stream reads a target at or after it in the factorisation order."""
    reach = reachable(blocked, layers)
    for t in np.flatnonzero(targets):
        for u in np.flatnonzero(targets):
            if rank[u] >= rank[t] and reach[t, u]:
                return True
    return False


# A factorisation order of TEXT's 9 positions, written by hand: "on" (4) first, then [CLS], [SEP], ...
ORDER = [4, 0, 8, 2, 6, 1, 3, 7, 5]


def tiny_xlnet(tokenizer, *, causal: bool = False):
    """A tiny random PermutationLM (XLNet + LM head) over the tiny vocabulary; weights large enough
    (initializer_range 0.5) that the attention is far from uniform."""
    spec = {"preset": "xlnet-tiny", "vocab_size": tokenizer.vocab_size, "hidden_size": 16, "num_heads": 2}
    config = xlnet.model_config(
        {**spec, "intermediate_size": 32, "dropout": 0.0, "attention_dropout": 0.0, "initializer_range": 0.5}
        | {"causal": causal}
    )
    torch.manual_seed(0)
    return xlnet.build(config).eval()
