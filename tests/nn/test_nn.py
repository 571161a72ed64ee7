"""Model parts: shapes, masks, equivalences between the fused and explicit attention paths."""

from __future__ import annotations

import math

import pytest
import torch

from bertzoo.nn import (
    Embeddings,
    SelfAttention,
    TransformerLayer,
    TransformerStack,
    attend,
    causal_mask,
    prefix_lm_mask,
    sinusoid_table,
    to_attention_mask,
)


def naive_attention(q, k, v, mask):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("need_weights", [False, True])
def test_attend_matches_naive_softmax(need_weights):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    out, probs = attend(q, k, v, mask, need_weights=need_weights)
    torch.testing.assert_close(out, naive_attention(q, k, v, mask), atol=1e-5, rtol=1e-5)
    if need_weights:
        assert probs.shape == (2, 3, 5, 5)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 5))
        assert (probs[~mask.expand(2, 3, 5, 5)] == 0).all()


def test_additive_bias_is_added_to_scores():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    bias = torch.randn(1, 2, 4, 4)
    out, _ = attend(q, k, v, None, bias)
    ref = ((q @ k.transpose(-1, -2) / math.sqrt(8) + bias).softmax(-1)) @ v
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_padding_mask_makes_padded_keys_irrelevant():
    torch.manual_seed(0)
    attn = SelfAttention(16, 4).eval()
    x = torch.randn(1, 6, 16)
    pad = torch.tensor([[1, 1, 1, 1, 0, 0]])
    y1, _ = attn(x, to_attention_mask(pad))
    x2 = x.clone()
    x2[:, 4:] = torch.randn(1, 2, 16) * 100  # garbage in padded slots
    y2, _ = attn(x2, to_attention_mask(pad))
    torch.testing.assert_close(y1[:, :4], y2[:, :4])


def test_causal_mask_blocks_the_future():
    torch.manual_seed(0)
    attn = SelfAttention(16, 2).eval()
    x = torch.randn(1, 5, 16)
    y1, _ = attn(x, causal_mask(5))
    x2 = x.clone()
    x2[:, 3:] += 10
    y2, _ = attn(x2, causal_mask(5))
    torch.testing.assert_close(y1[:, :3], y2[:, :3])
    assert not torch.allclose(y1[:, 3:], y2[:, 3:])


def test_mask_shapes_and_prefix_mask():
    m = prefix_lm_mask(torch.tensor([2, 0]), 4)
    assert m.shape == (2, 1, 4, 4)
    # Example 0: keys 0-1 visible to everyone; after that causal.
    expected0 = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m[0, 0], expected0)
    assert torch.equal(m[1, 0], causal_mask(4))
    assert to_attention_mask(torch.ones(3, 7)).shape == (3, 1, 1, 7)
    assert to_attention_mask(torch.ones(3, 5, 7)).shape == (3, 1, 5, 7)
    additive = torch.zeros(1, 1, 1, 3)
    additive[..., 2] = torch.finfo(torch.float32).min
    assert to_attention_mask(additive).tolist() == [[[[True, True, False]]]]
    with pytest.raises(ValueError):
        to_attention_mask(torch.ones(3))


def test_memory_keys_are_attended():
    """Transformer-XL style memory: queries see memory + current segment."""
    torch.manual_seed(0)
    attn = SelfAttention(16, 2).eval()
    mem, x = torch.randn(1, 3, 16), torch.randn(1, 4, 16)
    with_mem, _ = attn(x, None, memory=mem)
    # Same as attending over the concatenation and keeping the last 4 queries.
    full, _ = attn(torch.cat([mem, x], 1))
    torch.testing.assert_close(with_mem, full[:, 3:], atol=1e-5, rtol=1e-5)


def test_sinusoid_table_formula():
    t = sinusoid_table(50, 16)
    pos, i = 7, 3
    assert t[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert t[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)


def test_embeddings_factorized_and_position_limit():
    emb = Embeddings(100, 64, embedding_size=16, max_position=10).eval()
    out = emb(torch.randint(0, 100, (2, 10)))
    assert out.shape == (2, 10, 64)
    assert emb.word.weight.shape == (100, 16)
    with pytest.raises(ValueError, match="exceeds the position table"):
        emb(torch.randint(0, 100, (2, 11)))
    sin = Embeddings(100, 32, position="sinusoidal", max_position=10)
    assert "position.table" not in sin.state_dict()  # fixed table is not a parameter


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_layer_residual_structure(norm):
    torch.manual_seed(0)
    layer = TransformerLayer(16, 2, 32, dropout=0.0, attention_dropout=0.0, norm=norm).eval()
    x = torch.randn(2, 5, 16)
    y = layer(x).hidden
    a = layer.attention_residual
    f = layer.ffn_residual
    if norm == "post":
        h = a.norm(x + layer.attention(x)[0])
        ref = f.norm(h + layer.ffn(h))
    else:
        h = x + layer.attention(a.norm(x))[0]
        ref = h + layer.ffn(f.norm(h))
    torch.testing.assert_close(y, ref)


def test_cross_attention_layer_reads_context():
    torch.manual_seed(0)
    layer = TransformerLayer(16, 2, 32, cross_attention=True, cross_kv_size=8).eval()
    x, ctx = torch.randn(2, 5, 16), torch.randn(2, 7, 8)
    y1 = layer(x, context=ctx).hidden
    y2 = layer(x, context=ctx + 1).hidden
    assert y1.shape == (2, 5, 16)
    assert not torch.allclose(y1, y2)


@pytest.mark.parametrize("share,expected_layers", [("none", 4), ("all", 1), ("attention", 4), ("ffn", 4)])
def test_stack_sharing(share, expected_layers):
    def make():
        return TransformerLayer(16, 2, 32)

    stack = TransformerStack(make, 4, share)
    assert len(stack.layers) == expected_layers
    distinct = {id(p) for p in stack.parameters()}
    one_layer = sum(p.numel() for p in make().parameters())
    n = sum(p.numel() for p in stack.parameters() if id(p) in distinct)
    if share == "all":
        assert n == one_layer
    elif share == "none":
        assert n == 4 * one_layer
    else:
        assert one_layer < n < 4 * one_layer
        first = stack.layers[0]
        part = first.attention if share == "attention" else first.ffn
        assert all((layer.attention if share == "attention" else layer.ffn) is part for layer in stack.layers)
    x = torch.randn(1, 3, 16)
    out, hidden, _ = stack(x, output_hidden_states=True)
    assert len(hidden) == 5 and hidden[-1] is out


def test_activation_checkpointing_gives_the_same_loss_and_gradients():
    """Recomputing layers in backward changes memory, not numbers (dropout off)."""

    def make():
        torch.manual_seed(0)
        return TransformerStack(lambda: TransformerLayer(16, 2, 32, dropout=0.0, attention_dropout=0.0), 3).train()

    x = torch.randn(2, 5, 16)
    plain, ckpt = make(), make()
    ckpt.gradient_checkpointing = True
    for stack in (plain, ckpt):
        stack(x)[0].square().mean().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_checkpointing_switch_reaches_every_stack(synthetic_shards, tmp_path):
    from bertzoo.config import load_pretrain_config
    from bertzoo.nn import enable_activation_checkpointing
    from bertzoo.objectives.electra import Electra  # two stacks: generator and discriminator
    from bertzoo.train.pretrain import pretrain
    from bertzoo.variants.electra import build, model_config

    model = build(model_config({"preset": "electra-mini", "vocab_size": 50}))
    assert isinstance(model, Electra) and enable_activation_checkpointing(model) == 2
    cfg = load_pretrain_config(None, {"model": {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2,
                                                "intermediate_size": 64}, "data.shards": str(synthetic_shards),
                                      "data.max_seq_len": 32, "train.max_steps": 2, "train.batch_size": 4,
                                      "train.output_dir": str(tmp_path), "train.threads": 1,
                                      "train.activation_checkpointing": True})  # fmt: skip
    assert pretrain(cfg)["steps"] == 2
