"""bertzoo.nn.linear_ce: the chunked projection + cross-entropy against torch's own F.linear + F.cross_entropy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertzoo.nn.linear_ce import linear_cross_entropy


def inputs(bias: bool = True, rows: int = 37, width: int = 16, vocab: int = 50, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, width, generator=g, requires_grad=True)
    w = torch.randn(vocab, width, generator=g).mul_(0.3).requires_grad_()
    b = torch.randn(vocab, generator=g).requires_grad_() if bias else None
    t = torch.randint(0, vocab, (rows,), generator=g)
    return h, w, b, t


def reference(h, w, b, t):
    logits = F.linear(h, w, b)
    return F.cross_entropy(logits, t), int((logits.argmax(-1) == t).sum())


@pytest.mark.parametrize("chunk", [1, 5, 37, 100])
@pytest.mark.parametrize("bias", [True, False])
def test_loss_count_and_gradients_equal_torchs(chunk: int, bias: bool) -> None:
    h, w, b, t = inputs(bias)
    loss, correct = linear_cross_entropy(h, w, b, t, chunk=chunk)
    loss.backward()
    got = [h.grad, w.grad] + ([b.grad] if bias else [])
    h2, w2, b2, _ = inputs(bias)
    ref, ref_correct = reference(h2, w2, b2, t)
    ref.backward()
    want = [h2.grad, w2.grad] + ([b2.grad] if bias else [])
    assert loss.item() == pytest.approx(ref.item(), abs=1e-5)
    assert int(correct) == ref_correct
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def test_the_incoming_gradient_scales_and_a_tied_weight_accumulates() -> None:
    h, w, _, t = inputs(bias=False)
    loss, _ = linear_cross_entropy(h, w, None, t, chunk=8)
    (3.0 * loss + w.sum()).backward()  # the weight also used elsewhere, as a tied word table is
    h2, w2, _, _ = inputs(bias=False)
    ref, _ = reference(h2, w2, None, t)
    (3.0 * ref + w2.sum()).backward()
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=1e-6)


def test_a_graph_kept_for_a_second_backward_gives_the_same_gradients_again() -> None:
    """The unit-gradient path hands over the gradients formed in the forward: a second backward through the same
    graph (retain_graph) must find them unchanged, so the weight's gradient doubles exactly."""
    h, w, b, t = inputs()
    loss, _ = linear_cross_entropy(h, w, b, t, chunk=8)
    loss.backward(retain_graph=True)
    once = w.grad.clone()
    loss.backward()
    torch.testing.assert_close(w.grad, 2 * once)
    h2, w2, b2, _ = inputs()
    reference(h2, w2, b2, t)[0].backward()
    torch.testing.assert_close(once, w2.grad, rtol=1e-5, atol=1e-6)


def test_no_rows_gives_zero_loss_and_zero_gradients_of_the_right_shapes() -> None:
    h, w, b, t = inputs()
    loss, correct = linear_cross_entropy(h[:0], w, b, t[:0])
    loss.backward()
    assert loss.item() == 0.0 and int(correct) == 0
    assert w.grad.shape == w.shape and not w.grad.any() and not b.grad.any()


def test_without_gradients_only_the_loss_is_computed() -> None:
    h, w, b, t = inputs()
    with torch.no_grad():
        loss, correct = linear_cross_entropy(h, w, b, t, chunk=4)
    assert loss.grad_fn is None
    ref, ref_correct = reference(h.detach(), w.detach(), b.detach(), t)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-5)
    assert int(correct) == ref_correct
    frozen_h = h.detach()  # only the weight trains: no gradient for the rows is formed
    loss, _ = linear_cross_entropy(frozen_h, w, None, t)
    loss.backward()
    assert frozen_h.grad is None and w.grad is not None


def test_under_bf16_autocast_it_follows_the_plain_head() -> None:
    h, w, b, t = inputs(rows=64, width=32, vocab=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = linear_cross_entropy(h, w, b, t, chunk=16)
    loss.backward()
    h2, w2, b2, _ = inputs(rows=64, width=32, vocab=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = F.cross_entropy(F.linear(h2, w2, b2).float(), t)
    ref.backward()
    assert loss.dtype == torch.float32 and w.grad.dtype == torch.float32
    assert loss.item() == pytest.approx(ref.item(), rel=1e-2)
    for a, e in ((h.grad, h2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        assert torch.nn.functional.cosine_similarity(a.flatten(), e.flatten(), dim=0) > 0.999


def test_shapes_are_checked() -> None:
    h, w, b, t = inputs()
    with pytest.raises(ValueError, match="rows"):
        linear_cross_entropy(h[None], w, b, t)


def test_the_default_chunking_covers_every_row() -> None:
    h, w, b, t = inputs(rows=1100, width=8, vocab=20)  # three default chunks of at most 512 rows
    loss, correct = linear_cross_entropy(h, w, b, t)
    loss.backward()
    h2, w2, b2, _ = inputs(rows=1100, width=8, vocab=20)
    ref, ref_correct = reference(h2, w2, b2, t)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), abs=1e-5) and int(correct) == ref_correct
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-6)


def test_a_decoding_steps_few_rows_get_the_same_logits_by_the_transposed_product() -> None:
    """LMHead without targets: for a few CPU rows and no gradient it computes weight @ rows.T (faster there);
    the logits are F.linear's to float rounding, with and without a bias, and the path is skipped when a
    gradient must flow or the rows are many."""
    from bertzoo.models.heads import FEW_ROWS, LMHead, few_rows

    torch.manual_seed(0)
    for bias in (False, True):
        head = LMHead(16, 300, bias=bias)
        if bias:
            torch.nn.init.normal_(head.decoder.bias)
        for rows in (1, 4, FEW_ROWS):
            hidden = torch.randn(rows, 16)
            with torch.no_grad():
                assert few_rows(hidden)
                got = head(hidden)
            want = F.linear(hidden, head.decoder.weight, head.decoder.bias)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not few_rows(torch.randn(FEW_ROWS + 1, 16))
    assert not few_rows(torch.randn(2, 3, 16))  # (batch, seq, hidden): a training forward, not a step
    assert not few_rows(torch.randn(2, 16, requires_grad=True))
    hidden = torch.randn(2, 16, requires_grad=True)
    head(hidden).sum().backward()  # the usual path keeps its gradient
    assert hidden.grad is not None
