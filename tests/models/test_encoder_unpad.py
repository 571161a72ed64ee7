"""Unpadded execution equals the padded path for every encoder family: outputs, pooled vectors, task losses and
gradients, on mixed-length batches (a full-length row and a row with one real token)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertzoo.models.encoder import Encoder
from bertzoo.variants import get_variant

SIZES = dict(vocab_size=60, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position=24)
FAMILIES = ["bert", "roberta", "albert", "ernie", "spanbert", "electra", "distilbert"]
LENGTHS = [12, 1, 7, 4]  # row 0 is full length, row 1 has one real token


def family_encoder(name: str) -> Encoder:
    extra = {"embedding_size": 8} if name == "albert" else {}
    config = get_variant(name).model_config({**SIZES, **extra, "dropout": 0.0, "attention_dropout": 0.0})
    torch.manual_seed(0)
    return Encoder(config)


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    seq = max(LENGTHS)
    mask = (torch.arange(seq)[None] < torch.tensor(LENGTHS)[:, None]).long()
    ids = torch.randint(3, 60, (len(LENGTHS), seq), generator=g) * mask
    types = (torch.arange(seq)[None] >= 3).long().expand_as(ids) * mask
    return ids, mask, types


def run(model: Encoder, unpad: bool, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor | None):
    """Encoder outputs and the fine-tuning losses a classifier, a tagger and a span extractor would compute."""
    model.config.unpad = unpad
    model.zero_grad()
    out = model(ids, mask, types, output_hidden_states=True)
    real = mask.bool()
    g = torch.Generator().manual_seed(2)
    width = out.last_hidden_state.size(-1)
    w_cls, w_tag, w_span = (torch.randn(width, n, generator=g) for n in (3, 5, 2))
    labels = torch.randint(0, 5, ids.shape, generator=g)
    sentence = out.pooler_output if out.pooler_output is not None else out.last_hidden_state[:, 0]
    cls_loss = F.cross_entropy(sentence @ w_cls, torch.tensor([0, 1, 2, 1]))
    tag_loss = F.cross_entropy((out.last_hidden_state @ w_tag)[real], labels[real])
    span = (out.last_hidden_state @ w_span).masked_fill(~real[..., None], float("-inf"))  # QA's start/end logits
    span_loss = F.cross_entropy(span[..., 0], torch.tensor([5, 0, 6, 2])) + F.cross_entropy(
        span[..., 1], torch.tensor([9, 0, 6, 3])
    )
    loss = cls_loss + tag_loss + span_loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, loss.detach(), grads


@pytest.mark.parametrize("name", FAMILIES)
def test_unpadded_equals_padded(name: str) -> None:
    model = family_encoder(name)
    ids, mask, types = batch()
    types = types if model.config.type_vocab_size > 1 else None
    padded, loss_p, grads_p = run(model, False, ids, mask, types)
    packed, loss_u, grads_u = run(model, True, ids, mask, types)
    real = mask.bool()
    torch.testing.assert_close(packed.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=0)
    for a, b in zip(packed.hidden_states, padded.hidden_states, strict=True):
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=0)
    if padded.pooler_output is not None:
        torch.testing.assert_close(packed.pooler_output, padded.pooler_output, atol=1e-5, rtol=0)
    torch.testing.assert_close(loss_u, loss_p, atol=1e-5, rtol=0)
    assert grads_u.keys() == grads_p.keys() and len(grads_p) > 10
    for n in grads_p:
        torch.testing.assert_close(grads_u[n], grads_p[n], atol=1e-5, rtol=0, msg=n)
    assert (packed.last_hidden_state[~real] == 0).all()  # the padding is scattered back as zeros


def test_auto_unpads_only_with_enough_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    model = family_encoder("bert")
    seen: list[object] = []
    stack_forward = model.stack.forward

    def spy(x: torch.Tensor, mask: object = None, **kw: object):
        seen.append(mask)
        return stack_forward(x, mask, **kw)

    monkeypatch.setattr(model.stack, "forward", spy)
    ids, mask, types = batch()
    model(ids, mask)  # about half padding: packed
    model(ids, torch.ones_like(mask))  # no padding: padded, with no mask at all
    model.config.unpad = False
    model(ids, mask)
    assert type(seen[0]).__name__ == "Packing" and seen[1] is None and seen[2].dtype == torch.bool


def test_relative_positions_keep_the_padded_path() -> None:
    config = get_variant("bert").model_config({**SIZES, "relative_buckets": 8, "position": "none", "unpad": True})
    model = Encoder(config)
    ids, mask, _ = batch()
    assert not model._unpads(mask, None, False)


@pytest.mark.parametrize("unpad", [True, False])
def test_packed_documents_are_kept_apart(unpad: bool) -> None:
    model = family_encoder("roberta").eval()
    model.config.unpad = unpad
    g = torch.Generator().manual_seed(3)
    doc_a, doc_b = torch.randint(3, 60, (5,), generator=g), torch.randint(3, 60, (4,), generator=g)
    pad = torch.full((3,), model.config.pad_token_id)
    row = torch.cat([doc_a, doc_b, pad])[None]
    mask = (torch.arange(12) < 9).long()[None]
    docs = torch.tensor([[0] * 5 + [1] * 4 + [0] * 3])
    with torch.no_grad():
        packed = model(row, mask, document_ids=docs).last_hidden_state[0]
        other = model(torch.cat([doc_a.flip(0), doc_b, pad])[None], mask, document_ids=docs).last_hidden_state[0]
        alone = model(doc_b[None]).last_hidden_state[0]  # doc B as its own sequence, positions from the start
    torch.testing.assert_close(packed[5:9], alone, atol=1e-6, rtol=0)  # positions restart, nothing of A is seen
    torch.testing.assert_close(other[5:9], packed[5:9], atol=1e-6, rtol=0)  # changing A leaves B unchanged
    assert not torch.allclose(other[:5], packed[:5])


@pytest.mark.parametrize("name", ["bert", "distilbert"])
def test_cls_only_top_layer(name: str) -> None:
    # A [CLS] classifier's savings (top_queries=1) on packed tokens: the same [CLS] state, pooled vector, gradients.
    model = family_encoder(name)
    ids, mask, _ = batch()
    results = []
    for unpad in (False, True):
        model.config.unpad = unpad
        model.zero_grad()
        out = model(ids, mask, top_queries=1)
        sentence = out.pooler_output if out.pooler_output is not None else out.last_hidden_state[:, 0]
        (sentence**2).sum().backward()
        results.append(
            (out.last_hidden_state, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    (h_p, g_p), (h_u, g_u) = results
    assert h_u.shape == h_p.shape == (4, 1, 16)
    torch.testing.assert_close(h_u, h_p, atol=1e-5, rtol=0)
    assert g_u.keys() == g_p.keys()
    for n in g_p:
        torch.testing.assert_close(g_u[n], g_p[n], atol=1e-5, rtol=0, msg=n)
