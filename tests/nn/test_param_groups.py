"""The weight-decay rule (`bertzoo.nn.param_groups`) as the plain optimizer groups and the layer-wise
learning-rate decay groups both apply it: by hand-known parameter names of a tiny encoder."""

from __future__ import annotations

import torch
from torch import nn

from bertzoo.config import ModelConfig
from bertzoo.engine.optim import param_groups
from bertzoo.models.encoder import Encoder
from bertzoo.nn.param_groups import decay_split, is_norm
from bertzoo.tasks.techniques import layerwise_lr_groups

# A one-layer encoder's parameters, written out by hand: matrices (word/position/segment embeddings
# included) are decayed; biases and LayerNorm weights are not.
DECAYED = {
    "embeddings.word.weight",
    "embeddings.position.weight",
    "embeddings.token_type.weight",
    "stack.layers.0.attention.qkv.weight",
    "stack.layers.0.attention.out.weight",
    "stack.layers.0.ffn.up.weight",
    "stack.layers.0.ffn.down.weight",
    "pooler.dense.weight",
}
NOT_DECAYED = {
    "embeddings.norm.weight",
    "embeddings.norm.bias",
    "stack.layers.0.attention.qkv.bias",
    "stack.layers.0.attention.out.bias",
    "stack.layers.0.attention_residual.norm.weight",
    "stack.layers.0.attention_residual.norm.bias",
    "stack.layers.0.ffn.up.bias",
    "stack.layers.0.ffn.down.bias",
    "stack.layers.0.ffn_residual.norm.weight",
    "stack.layers.0.ffn_residual.norm.bias",
    "pooler.dense.bias",
}


def tiny_encoder() -> Encoder:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, max_position=16)
    return Encoder(config)


def split_names(groups: list[dict]) -> tuple[set[str], set[str]]:
    """(names in groups with weight decay, names in groups without), checking no name repeats."""
    decayed: list[str] = []
    plain: list[str] = []
    for g in groups:
        (decayed if g["weight_decay"] > 0 else plain).extend(g["param_names"])
    assert len(decayed + plain) == len(set(decayed + plain))
    return set(decayed), set(plain)


def test_plain_optimizer_groups_split_by_known_names() -> None:
    groups = param_groups(tiny_encoder(), weight_decay=0.01)
    assert split_names(groups) == (DECAYED, NOT_DECAYED)
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]


def test_layerwise_lr_groups_split_by_the_same_names() -> None:
    groups = layerwise_lr_groups(tiny_encoder(), base_lr=1e-3, decay=0.5, weight_decay=0.01)
    assert split_names(groups) == (DECAYED, NOT_DECAYED)
    # One layer: the embeddings at decay**1, the layer and the pooler at the base rate.
    for g in groups:
        for name in g["param_names"]:
            assert g["lr_scale"] == (0.5 if name.startswith("embeddings.") else 1.0), name


def test_decay_split_dedupes_shared_and_skips_frozen_unless_asked() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.LayerNorm(4), nn.Linear(4, 10))
    model[2].weight = model[0].weight  # tied, as a masked-LM decoder is: listed once, first name
    model[1].requires_grad_(False)
    live = decay_split(model)
    assert [(name, decayed) for name, _, decayed in live] == [("0.weight", True), ("2.bias", False)]
    everything = decay_split(model, include_frozen=True)
    assert [(name, decayed) for name, _, decayed in everything] == [
        ("0.weight", True),
        ("1.weight", False),
        ("1.bias", False),
        ("2.bias", False),
    ]


def test_is_norm_knows_custom_norms_by_class_name() -> None:
    class RMSNorm(nn.Module):
        pass

    assert is_norm(nn.LayerNorm(4)) and is_norm(RMSNorm()) and is_norm(nn.BatchNorm1d(4))
    assert not is_norm(nn.Linear(4, 4))
