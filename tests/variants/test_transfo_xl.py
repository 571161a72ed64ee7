"""Transformer-XL: relative attention against a loop written from the paper's formula, segment-level recurrence
against one long pass, the receptive field of a limited memory, causality, stopped gradients, training."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertzoo.errors import ConfigError
from bertzoo.models.transfo_xl import TransfoXL, stream_nll
from bertzoo.nn.relative_attention import RelativeSelfAttention, relative_distances, relative_sinusoids
from bertzoo.variants.transfo_xl import PRESETS, model_config

VOCAB = 50


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**overrides) -> TransfoXL:
    # init_std 0.2, not 0.02: attention far from uniform, so that far tokens and positions visibly matter.
    fields = dict(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=2, attention_head_size=16)
    fields.update(intermediate_size=64, mem_len=16, dropout=0.0, attention_dropout=0.0, initializer_range=0.2)
    torch.manual_seed(0)
    return TransfoXL(model_config({**fields, **overrides})).eval()


def ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def run_segments(model: TransfoXL, tokens: torch.Tensor, seg: int) -> tuple[list[torch.Tensor], list]:
    """Logits of each segment of length `seg`, processed in order with the memory carried along."""
    mems, logits = None, []
    for start in range(0, tokens.size(1), seg):
        out = model(tokens[:, start : start + seg], mems)
        logits.append(out.logits)
        mems = out.mems
    return logits, mems


# --- the attention against the formula -----------------------------------------------------------


def sinusoid(distance: float, dim: int) -> torch.Tensor:
    """The paper's R_d: sin(d / 10000^(2k/dim)) for k < dim/2, then the cosines, in float64."""
    angles = [distance / 10000 ** (2 * k / dim) for k in range(dim // 2)]
    return torch.tensor([math.sin(a) for a in angles] + [math.cos(a) for a in angles], dtype=torch.float64)


def naive_attention(attn: RelativeSelfAttention, x, memory, clamp_len=None):
    """Scores and output from score(i, j) = ((q_i + u).k_j + (q_i + v).W_R R_{i - j}) / sqrt(d_head), one pair
    at a time, positions counted over [memory; x]. Returns the scores (-inf where masked) and the output."""
    h, dh = attn.num_heads, attn.head_dim
    w = {name: p.detach().double() for name, p in attn.named_parameters()}
    wq, wk, wv = w["qkv.weight"].split(h * dh)
    full = torch.cat([memory, x], dim=1).double()
    batch, k_len, d_model = full.shape
    m = memory.size(1)
    q_len = k_len - m
    scores = torch.full((batch, h, q_len, k_len), float("-inf"), dtype=torch.float64)
    for b in range(batch):
        for head in range(h):
            rows = slice(head * dh, (head + 1) * dh)
            for i in range(q_len):
                q = wq[rows] @ full[b, m + i]
                for j in range(m + i + 1):  # keys after the query stay -inf
                    distance = m + i - j
                    if clamp_len is not None:
                        distance = min(distance, clamp_len)
                    k = wk[rows] @ full[b, j]
                    r = w["r.weight"][rows] @ sinusoid(distance, d_model)
                    content = (q + w["u"][head]) @ k
                    position = (q + w["v"][head]) @ r
                    scores[b, head, i, j] = (content + position) / math.sqrt(dh)
    probs = scores.softmax(dim=-1)
    values = (full @ wv.T).view(batch, k_len, h, dh).transpose(1, 2)  # (batch, heads, k_len, head_dim)
    ctx = (probs @ values).transpose(1, 2).reshape(batch, q_len, h * dh)
    return scores, ctx @ w["out.weight"].T


def random_attention(seed: int = 0) -> RelativeSelfAttention:
    torch.manual_seed(seed)
    attn = RelativeSelfAttention(hidden_size=8, num_heads=2, head_dim=3).eval()
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(std=0.5)  # u and v start at zero; make every term count
    return attn


def module_attention(attn, x, memory, clamp_len=None):
    m, s = memory.size(1), x.size(1)
    pos = relative_sinusoids(relative_distances(m + s, clamp_len), x.size(-1))
    mask = torch.ones(s, m + s, dtype=torch.bool).tril(diagonal=m)
    out, scores = attn(x, pos, memory, mask, need_weights="scores")
    return scores, out


def test_relative_attention_matches_the_formula_with_memory() -> None:
    attn = random_attention()
    torch.manual_seed(1)
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 3, 8)
    want_scores, want_out = naive_attention(attn, x, memory)
    scores, out = module_attention(attn, x, memory)
    visible = torch.isfinite(want_scores)
    assert visible.sum() == 2 * 2 * (4 * 3 + 4 * 5 / 2)  # memory all visible, current causal
    torch.testing.assert_close(scores.double()[visible], want_scores[visible], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.double(), want_out, atol=1e-5, rtol=0)


def test_clamp_len_uses_the_clamped_embedding_beyond_it() -> None:
    attn = random_attention(seed=2)
    torch.manual_seed(3)
    x, memory = torch.randn(1, 4, 8), torch.randn(1, 4, 8)  # distances up to 7
    want_scores, want_out = naive_attention(attn, x, memory, clamp_len=2)
    scores, out = module_attention(attn, x, memory, clamp_len=2)
    visible = torch.isfinite(want_scores)
    torch.testing.assert_close(scores.double()[visible], want_scores[visible], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.double(), want_out, atol=1e-5, rtol=0)
    # The clamp is not a no-op here, and a clamp at the longest distance is one.
    _, unclamped = module_attention(attn, x, memory)
    assert (unclamped - out).abs().max() > 1e-3
    _, at_longest = module_attention(attn, x, memory, clamp_len=7)
    torch.testing.assert_close(at_longest, unclamped, atol=0, rtol=0)


def test_clamp_len_through_the_model() -> None:
    tokens = ids(2, 12)
    free = tiny()(tokens).logits
    torch.testing.assert_close(tiny(clamp_len=11)(tokens).logits, free, atol=0, rtol=0)
    assert (tiny(clamp_len=3)(tokens).logits - free).abs().max() > 1e-4


# --- recurrence ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mem_len", [10, 16])  # 2 L and more
def test_recurrence_with_enough_memory_equals_one_pass(mem_len: int) -> None:
    model, tokens, seg = tiny(mem_len=mem_len), ids(2, 15), 5
    whole = model(tokens).logits
    pieces, mems = run_segments(model, tokens, seg)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, atol=1e-5, rtol=0)
    assert len(mems) == 2 and all(m.shape == (2, min(mem_len, 15), 32) for m in mems)
    # The memory is the layer input of the last positions: layer 0's is the scaled word embedding.
    want = model.embed(tokens[:, -mems[0].size(1) :]) * math.sqrt(32)
    torch.testing.assert_close(mems[0], want, atol=1e-6, rtol=0)


def test_one_layer_with_one_segment_of_memory_sees_exactly_the_previous_segment() -> None:
    """With mem_len = L and one layer, segment 3 reads the embeddings of segment 2 and nothing else: its logits
    are those of a pass over segments 2-3 alone."""
    model, tokens, seg = tiny(num_layers=1, mem_len=5), ids(2, 15), 5
    pieces, _ = run_segments(model, tokens, seg)
    alone = model(tokens[:, seg:]).logits[:, seg:]
    torch.testing.assert_close(pieces[2], alone, atol=1e-5, rtol=0)
    assert (pieces[2] - model(tokens[:, 2 * seg :]).logits).abs().max() > 1e-4  # the memory does matter


def test_limited_memory_reaches_back_n_layer_segments() -> None:
    """With mem_len = L, layer l's memory of segment s depends on segments s - l .. s, so a 2-layer model's
    segment 3 depends on segments 1-3 (the context grows with depth) and not at all on segment 0."""
    model, tokens, seg = tiny(num_layers=2, mem_len=5), ids(1, 20), 5
    base = run_segments(model, tokens, seg)[0][3]
    far, near = tokens.clone(), tokens.clone()
    far[0, 2] = (far[0, 2] + 1) % VOCAB  # segment 0
    near[0, 7] = (near[0, 7] + 1) % VOCAB  # segment 1
    assert torch.equal(run_segments(model, far, seg)[0][3], base)
    assert (run_segments(model, near, seg)[0][3] - base).abs().max() > 1e-4


def test_mem_len_zero_keeps_no_memory() -> None:
    model, tokens = tiny(mem_len=0), ids(1, 10)
    first = model(tokens[:, :5])
    assert all(m.size(1) == 0 for m in first.mems)
    torch.testing.assert_close(model(tokens[:, 5:], first.mems).logits, model(tokens[:, 5:]).logits)


# --- causality and gradients --------------------------------------------------------------------


def test_a_future_token_leaves_earlier_logits_unchanged() -> None:
    model, tokens = tiny(), ids(2, 10)
    mems = model(ids(2, 6, seed=5)).mems
    changed = tokens.clone()
    changed[:, 6] = (changed[:, 6] + 1) % VOCAB
    for memory in (None, mems):
        before, after = model(tokens, memory).logits, model(changed, memory).logits
        torch.testing.assert_close(after[:, :6], before[:, :6], atol=1e-6, rtol=0)
        assert (after[:, 6:] - before[:, 6:]).abs().max() > 1e-4


def test_gradient_stops_at_the_memory() -> None:
    model = tiny(dropout=0.0).train()
    first, second = ids(2, 6, seed=2), ids(2, 6, seed=3)
    mems = model(first).mems
    assert all(not m.requires_grad and m.grad_fn is None for m in mems)

    def grads(memory) -> list[torch.Tensor]:
        model.zero_grad()
        logits = model(second, memory).logits
        F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), second[:, 1:].reshape(-1)).backward()
        return [p.grad.clone() for p in model.parameters()]

    with torch.no_grad():  # a memory that cannot carry a gradient, built independently of update_mems
        constant = model(first).mems
    for got, want in zip(grads(mems), grads(constant), strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


# --- presets and training -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_build_and_run(name: str) -> None:
    config = model_config({"preset": name, "vocab_size": VOCAB, "dropout": 0.0})
    model = TransfoXL(config).eval()
    hidden, logits, mems = model(ids(1, 4))
    assert hidden.shape == (1, 4, config.hidden_size) and logits.shape == (1, 4, VOCAB)
    assert len(mems) == config.num_layers
    assert model(ids(1, 3), mems).mems[0].shape == (1, 7, config.hidden_size)


def test_mini_preset_sizes_and_bad_configs() -> None:
    mini = model_config({"preset": "transfo-xl-mini"})
    assert (mini.num_layers, mini.hidden_size, mini.num_heads, mini.intermediate_size) == (4, 256, 4, 1024)
    assert (mini.causal, mini.norm, mini.hidden_act, mini.position) == (True, "post", "relu", "none")
    with pytest.raises(ConfigError, match="not a Transformer-XL preset"):
        model_config({"preset": "transfo-xl-huge"})
    with pytest.raises(ConfigError, match="mem_len"):
        model_config({"mem_len": -1})
    with pytest.raises(ConfigError, match="model.causal=False"):
        TransfoXL(model_config({"causal": False}))
    with pytest.raises(ConfigError, match="sin/cos"):
        TransfoXL(model_config({"hidden_size": 33, "num_heads": 3}))


def test_a_tiny_lm_learns_a_repeated_sequence_across_segments() -> None:
    torch.manual_seed(0)
    period = torch.randperm(VOCAB)[:7]
    stream = period.repeat(6)[None, :40]  # (1, 40)
    model = tiny(mem_len=8, dropout=0.1).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    seg = 8

    def step() -> float:
        mems, total = None, 0.0
        optimizer.zero_grad()
        for start in range(0, stream.size(1), seg):
            chunk = stream[:, start : start + seg + 1]  # one token past the segment: its last target
            logits, mems = model(chunk[:, :seg], mems)[1:]
            loss = F.cross_entropy(logits[0, : chunk.size(1) - 1], chunk[0, 1:])
            loss.backward()  # per segment: the memory is detached, so each graph is its own
            total += loss.item()
        optimizer.step()
        return total / math.ceil(stream.size(1) / seg)

    first = step()
    for _ in range(120):
        last = step()
    assert first > 3.0 and last < 0.1, (first, last)


def test_stream_nll_with_a_long_memory_equals_one_pass():
    """Evaluation with more memory than training (mem_len 16 in the model, 40 here): streaming a 21-token
    sequence in segments of 5 scores every next token exactly as one causal pass over all of it."""
    model = tiny(mem_len=4)
    tokens = ids(2, 21, seed=5)
    total, count = stream_nll(model, tokens, segment_len=5, mem_len=40)
    with torch.no_grad():
        logits = model(tokens[:, :-1]).logits
    expected = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum").item()
    assert count == 2 * 20
    assert total == pytest.approx(expected, rel=1e-5)
    # With the model's own 4 positions of memory the context is shorter, and the score differs.
    short, _ = stream_nll(model, tokens, segment_len=5)
    assert abs(short - expected) > 1e-3


def test_stream_nll_without_memory_scores_segments_independently():
    model = tiny()
    tokens = ids(1, 13, seed=6)
    total, count = stream_nll(model, tokens, segment_len=4, mem_len=0)
    expected = 0.0
    with torch.no_grad():
        for start in range(0, 12, 4):
            segment, targets = tokens[:, start : start + 4], tokens[:, start + 1 : start + 5]
            logits = model(segment).logits[:, : targets.size(1)]
            expected += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
    assert count == 12
    assert total == pytest.approx(expected, rel=1e-5)
