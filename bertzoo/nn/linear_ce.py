"""The vocabulary projection and its cross-entropy in one pass over chunks of rows.

A language model's head multiplies every predicting position by the whole vocabulary; computed the plain way
the (rows, vocab) logits are held for the backward pass, log-softmax keeps another copy, and the backward fills
a zeroed gradient of that size. Here each chunk of rows is projected, its loss and its gradients with respect to
the rows, the weight and the bias are computed at once (softmax - one-hot is the gradient of the logits), and the
logits are dropped before the next chunk: the head never holds more than one chunk's logits, and the backward pass
is a multiplication by the incoming scalar. The result equals `F.cross_entropy(F.linear(h, W, b), t)` (mean over
the rows) up to float rounding, under autocast too (the products run in its dtype, the softmax in fp32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Rows per chunk: 512 (fastest of 128-1024 for GPT-mini's 8k vocabulary, one AVX2 thread, 2026-11-28: the head's
# forward + backward 0.72-0.80 s against 1.01 s unfused for 1,800 rows; at 32k x 512 wide all were within
# noise of unfused), fewer when a chunk's fp32 logits would pass 16M elements (64 MB; large vocabularies).
CHUNK_ROWS = 512
CHUNK_ELEMENTS = 1 << 24


def _chunked(hidden, weight, bias, targets, chunk: int, need: tuple[bool, bool, bool]):  # noqa: ANN001, ANN202
    """(mean loss, correct count, grad_h, grad_w, grad_b) over chunks of rows; each gradient only where `need`
    says (of the mean loss: the caller scales by the incoming gradient)."""
    n = hidden.size(0)
    need_h, need_w, need_b = need
    grad_h = torch.empty_like(hidden) if need_h else None
    grad_w = None  # the first chunk's product becomes it: a fresh zeroed vocabulary-sized buffer costs page faults
    grad_b = torch.zeros(weight.size(0), dtype=torch.float32, device=weight.device) if need_b else None
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    in_place = hidden.dtype == torch.float32 and not torch.is_autocast_enabled(hidden.device.type)
    correct = torch.zeros((), dtype=torch.long, device=hidden.device)
    for start in range(0, n, chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        logits = F.linear(h, weight, bias).float()
        # One row maximum serves the log-sum-exp and the accuracy (an argmax pass cost ~2% of a GPT-mini step).
        top = logits.amax(-1)
        picked = logits.gather(1, t[:, None]).squeeze(1)
        # exp(logits - max), in the logits' own storage: the log-sum-exp's terms, and the softmax once divided
        # by their sum (one exp pass per chunk, not one here and another for the gradient)
        e = logits.sub_(top[:, None]).exp_()
        norm = e.sum(-1)
        total += (top + norm.log() - picked).sum()
        correct += (picked >= top).sum()  # the target holds the row's largest logit (a tie counts as right)
        if not any(need):
            continue
        # d(mean loss)/d(logits) = (softmax - one-hot) / n
        g = e.div_((norm * n)[:, None])
        g[torch.arange(t.numel(), device=g.device), t] -= 1.0 / n
        if need_h:
            grad_h[start : start + chunk] = (g.to(weight.dtype) @ weight).to(hidden.dtype)
        if need_w:
            if grad_w is not None and in_place:
                grad_w.addmm_(g.t(), h)  # accumulated where it lies, no vocabulary-sized temporary
            else:
                part = (g.t().to(h.dtype) @ h).float()
                grad_w = part if grad_w is None else grad_w.add_(part)
        if need_b:
            grad_b += g.sum(0)
    if need_w and grad_w is None:  # no rows at all
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    return total / max(n, 1), correct, grad_h, grad_w, grad_b


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk):  # noqa: ANN001, ANN205 - autograd's signature
        need = tuple(ctx.needs_input_grad[:3])
        loss, correct, *grads = _chunked(hidden, weight, bias, targets, chunk, need)
        ctx.save_for_backward(*(g if g is not None else torch.empty(0) for g in grads))
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):  # noqa: ANN001, ANN205 - autograd's signature
        # the gradients were formed in the forward pass; the chain rule only scales them. A loss taken as it is
        # (gradient exactly 1, read without a device sync on the CPU) hands them over unscaled: a vocabulary-sized
        # product would be a fresh buffer, whose page faults cost more than the multiplication.
        unit = grad_loss.device.type == "cpu" and bool(grad_loss == 1)
        return (
            *(((g if unit else g * grad_loss).to(dtype) if need else None)
              for g, dtype, need in zip(ctx.saved_tensors, ctx.dtypes, ctx.needs_input_grad[:3], strict=True)),
            None,
            None,
        )  # fmt: skip


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy of `hidden @ weight.T + bias` against `targets`, number of rows whose largest logit is
    the target's, a tie counted). hidden: (rows, width); weight: (vocab, width); targets: (rows,) of class ids, none
    ignored (select the predicting rows first). `chunk`: rows per pass (default: 512, fewer for vocabularies over
    32k)."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be (rows, width) and targets (rows,); got {tuple(hidden.shape)} and "
                         f"{tuple(targets.shape)}")  # fmt: skip
    rows = chunk or max(1, min(CHUNK_ROWS, CHUNK_ELEMENTS // weight.size(0)))
    if not torch.is_grad_enabled():  # evaluation: no gradient work at all
        loss, correct, *_ = _chunked(hidden, weight, bias, targets, rows, (False, False, False))
        return loss, correct
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, rows)
