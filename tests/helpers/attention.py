"""A tiny model whose attention we control, for the attention-view tests (plain and in a browser).

Layer 0, head 0 attends to the token "mat" from every query that can see it: its queries are a constant
vector and its keys read one embedding dimension that is +1 for "mat" and -1 for every other token.
A causal copy of the model attends only to earlier tokens, and to "mat" once it is visible. The other
heads have large random weights, so their maps vary.
"""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "."]
TEXT = "the cat sat on the mat ."  # [CLS] the cat sat on the mat . [SEP]: "mat" is position 6
MAT = 6
TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]


def tiny_tokenizer(directory: Path):
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vocab.txt"
    path.write_text("".join(t + "\n" for t in [*SPECIAL_TOKENS, *WORDS]), encoding="utf-8")
    return Tokenizer.from_vocab(path)


def tiny_model(tokenizer, *, causal: bool = False, max_position: int = 16):
    from bertzoo import Encoder, ModelConfig

    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=8,
        num_layers=2,
        num_heads=2,
        intermediate_size=16,
        max_position=max_position,
        dropout=0.0,
        attention_dropout=0.0,
        initializer_range=0.5,
        causal=causal,
    )
    torch.manual_seed(0)
    model = Encoder(config).eval()
    mat = tokenizer.token_to_id("mat")
    hidden, head_dim = config.hidden_size, config.head_dim
    with torch.no_grad():
        emb = model.embeddings
        emb.word.weight[:, 0] = -1.0
        emb.word.weight[mat, 0] = 1.0
        for table in (emb.position, emb.token_type):
            weight = getattr(table, "weight", None)
            if weight is not None:
                weight[:, 0] = 0.0
        qkv = model.stack.layers[0].attention.qkv  # rows: q (heads x head_dim), k, v
        qkv.weight[:head_dim] = 0.0
        qkv.bias[:head_dim] = 0.0
        qkv.bias[0] = 8.0  # head 0's queries: a constant vector along its first dimension
        qkv.weight[hidden : hidden + head_dim] = 0.0
        qkv.bias[hidden : hidden + head_dim] = 0.0
        qkv.weight[hidden, 0] = 1.0  # head 0's keys: the "is it mat" dimension of the embeddings
    return model


def save_tiny_model(directory: Path, *, causal: bool = False) -> Path:
    tokenizer = tiny_tokenizer(directory)
    tiny_model(tokenizer, causal=causal).save_pretrained(directory)
    tokenizer.save(directory)
    return directory


def reference_attention(model, tokenizer, text: str = TEXT, pair: str | None = None) -> torch.Tensor:
    """(layers, heads, seq, seq) straight from the encoder."""
    encoded = tokenizer.encode(text, pair)
    with torch.no_grad():
        out = model(
            torch.tensor([encoded.ids]), token_type_ids=torch.tensor([encoded.type_ids]), output_attentions=True
        )
    return torch.stack([a[0] for a in out.attentions])
