"""Fused attention without a mask tensor, and packed (unpadded) attention against the padded path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertzoo.config import ModelConfig
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.nn import attend, causal_mask
from bertzoo.nn.masks import CAUSAL, document_positions, drop_full
from bertzoo.nn.unpad import Packing


def tiny(**kw) -> Encoder:
    torch.manual_seed(0)
    fields = dict(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position=16)
    return Encoder(ModelConfig(**fields, dropout=0.0, attention_dropout=0.0, **kw)).eval()


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every call to SDPA, its keyword arguments."""
    calls: list[dict] = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


def test_no_padding_passes_no_mask(recorded: list[dict]) -> None:
    model = tiny(unpad=False)
    ids = torch.randint(1, 50, (3, 7))
    out = model(ids, torch.ones(3, 7, dtype=torch.long)).last_hidden_state
    assert len(recorded) == 2 and all(c["attn_mask"] is None for c in recorded)
    # The same layers with the all-True mask handed to SDPA explicitly: the masked kernel.
    x = model.embeddings(ids)
    full = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    for layer in model.stack.layers:
        x = layer(x, full).hidden
    torch.testing.assert_close(out, x, atol=1e-6, rtol=0)
    assert recorded[-1]["attn_mask"] is full


def test_causal_uses_is_causal(recorded: list[dict]) -> None:
    model = tiny(causal=True, pad_token_id=None)
    ids = torch.randint(1, 50, (2, 6))
    out = model(ids).last_hidden_state
    assert [c["is_causal"] for c in recorded] == [True, True]
    assert all(c.get("attn_mask") is None for c in recorded)
    x = model.embeddings(ids)
    for layer in model.stack.layers:
        x = layer(x, causal_mask(6)[None, None]).hidden
    torch.testing.assert_close(out, x, atol=1e-6, rtol=0)


def test_causal_sentinel_with_weights_materialises() -> None:
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
    out, probs = attend(q, k, v, CAUSAL, need_weights=True)
    # Hand-worked: the first query sees only the first key, so its weight there is 1.
    assert probs[0, 0, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(out, attend(q, k, v, causal_mask(5))[0], atol=1e-6, rtol=0)


def test_drop_full() -> None:
    assert drop_full(torch.ones(2, 1, 1, 3, dtype=torch.bool)) is None
    partial = torch.tensor([[True, False]])
    assert drop_full(partial) is partial


def test_packing_indices_and_round_trip() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    p = Packing.from_mask(mask)
    assert p.indices.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert p.offsets.tolist() == [0, 3, 4, 8] and p.lengths == (3, 1, 4)
    x = torch.arange(12.0).view(3, 4, 1)
    packed = p.pack(x)
    assert packed.flatten().tolist() == [0.0, 1.0, 2.0, 4.0, 8.0, 9.0, 10.0, 11.0]
    back = p.unpack(packed)
    assert back.flatten().tolist() == [0, 1, 2, 0, 4, 0, 0, 0, 8, 9, 10, 11]


@pytest.mark.parametrize("backend", ["split", "nested", "padded"])
def test_packed_attention_equals_masked(backend: str) -> None:
    torch.manual_seed(2)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    q, k, v = torch.randn(3, 3, 2, 5, 4).unbind(0)  # (batch, heads, seq, dim)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool()[:, None, None])
    p = Packing.from_mask(mask, backend)

    def pack(t: torch.Tensor) -> torch.Tensor:
        return p.pack(t.transpose(1, 2))

    out = p.unpack(p.attend(pack(q), pack(k), pack(v))).transpose(1, 2)
    real = mask.bool()[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out[real], expected[real], atol=1e-6, rtol=0)


def test_one_real_token_attends_to_itself_only() -> None:
    # A row with a single real token: its context is its own value vector, whatever the others hold.
    p = Packing.from_mask(torch.tensor([[1, 0, 0], [1, 1, 1]]))
    v = torch.arange(4 * 2 * 3, dtype=torch.float).view(4, 2, 3)
    out = p.attend(torch.randn(4, 2, 3), torch.randn(4, 2, 3), v)
    torch.testing.assert_close(out[0], v[0])


def test_unpad_config_rejects_nonsense() -> None:
    with pytest.raises(ConfigError, match="model.unpad"):
        ModelConfig(unpad="sometimes")
    with pytest.raises(ConfigError, match="unpad_attention"):
        ModelConfig(unpad_attention="magic")


def test_document_positions_restart() -> None:
    docs = torch.tensor([[0, 0, 0, 1, 1, 2], [4, 4, 4, 4, 4, 4]])
    assert document_positions(docs).tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]]


def test_packing_splits_documents() -> None:
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    docs = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 0, 0, 0]])
    assert Packing.from_mask(mask, document_ids=docs).lengths == (2, 2, 2)
