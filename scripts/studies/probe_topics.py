"""How much topic information do a model's frozen features carry? A linear probe per layer.

Mean-pools every layer's hidden states (embeddings = layer 0) over the real tokens of wiki-topics
texts, standardises them, fits a logistic regression (scikit-learn) on a fixed subset of the train
split and scores it on the dev split; then the same for the same architecture from random init.
Fine-tuning changes the features; this measures what pretraining put there before it does.

    python scripts/studies/probe_topics.py runs/recipe_study/combined/pretrain/final [--examples 2000]
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np
import torch

from bertzoo.data.tasks.builtin import load_builtin_task
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder
from bertzoo.models.encoder import Encoder
from bertzoo.precision import cpu_capability


def layer_features(encoder: Encoder, tokenizer: Tokenizer, texts: list[str], max_len: int) -> np.ndarray:
    """(layers + 1, n, hidden): mean over real tokens of every hidden state."""
    encoder.eval()
    chunks = []
    for start in range(0, len(texts), 128):
        ids = [tokenizer.encode(t).ids[:max_len] for t in texts[start : start + 128]]
        width = max(map(len, ids))
        input_ids = torch.zeros(len(ids), width, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        with torch.no_grad():
            states = encoder(input_ids, attention_mask=mask, output_hidden_states=True).hidden_states
        weights = mask.unsqueeze(-1).float()
        chunks.append(torch.stack([(h * weights).sum(1) / weights.sum(1) for h in states]))
    return torch.cat(chunks, 1).numpy()


def probe(encoder: Encoder, tokenizer: Tokenizer, train: list[dict], dev: list[dict], max_len: int) -> list[float]:
    """Dev accuracy of a logistic regression on each layer's frozen features."""
    from sklearn.linear_model import LogisticRegression

    labels = {name: i for i, name in enumerate(sorted({e["label"] for e in train}))}
    y_train = np.array([labels[e["label"]] for e in train])
    y_dev = np.array([labels[e["label"]] for e in dev])
    x_train = layer_features(encoder, tokenizer, [e["text"] for e in train], max_len)
    x_dev = layer_features(encoder, tokenizer, [e["text"] for e in dev], max_len)
    scores = []
    for a, b in zip(x_train, x_dev, strict=True):
        mu, sd = a.mean(0), a.std(0) + 1e-6
        clf = LogisticRegression(max_iter=3000).fit((a - mu) / sd, y_train)
        scores.append(round(float(clf.score((b - mu) / sd, y_dev)), 4))
    return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a bertzoo or Hugging Face model directory (its tokenizer inside)")
    ap.add_argument("--examples", type=int, default=2000, help="wiki-topics training examples (fixed subset)")
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0, help="random init's seed")
    args = ap.parse_args()
    train = load_builtin_task("wiki-topics", "train")
    random.Random(0).shuffle(train)
    train = train[: args.examples]
    dev = load_builtin_task("wiki-topics", "dev")
    encoder, tokenizer = load_encoder(args.model), Tokenizer.load(args.model)
    pretrained = probe(encoder, tokenizer, train, dev, args.max_len)
    torch.manual_seed(args.seed)
    random_init = probe(Encoder(encoder.config), tokenizer, train, dev, args.max_len)
    print(f"CPU {cpu_capability()}; dev accuracy of a linear probe per layer (0 = embeddings)")
    print(f"{'layer':>6} {'pretrained':>11} {'random init':>12}")
    for layer, (p, r) in enumerate(zip(pretrained, random_init, strict=True)):
        print(f"{layer:>6} {p:>11.3f} {r:>12.3f}")
    ratio = pretrained[-1] / random_init[-1] if random_init[-1] else float("nan")
    print(json.dumps({"pretrained": pretrained, "random_init": random_init, "ratio": round(ratio, 4)}))


if __name__ == "__main__":
    main()
