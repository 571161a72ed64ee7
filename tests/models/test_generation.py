"""The decoding module: cached decoding equals recomputing the whole prefix every step, greedy output
equals transformers' `generate` on the same weights, beam search finds the best sequence when its beam
holds every prefix, sampling filters do what they say, and contradicting settings are refused."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from bertzoo.config import GenerationConfig, ModelConfig
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.models.generation import MaskPredictDecoding, _filter, generate, left_align
from bertzoo.models.heads import MaskedLMHead
from bertzoo.variants import gpt

VOCAB = 50
TINY = {"vocab_size": VOCAB, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "max_position": 64}


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def perturb(module: torch.nn.Module, seed: int, scale: float = 0.3) -> None:
    """Move parameters off their initial values, with logits spread wide enough that argmax has no ties."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def tiny_gpt(norm: str = "pre", seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = gpt.build(gpt.model_config({**TINY, "vocab_size": vocab, "norm": norm, "intermediate_size": 128}))
    perturb(model, seed)
    return model.eval()


@torch.no_grad()
def full_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Next-token logits after `ids` (1, seq), recomputing every position (no cache)."""
    return model.logits(ids)[:, -1].float()


def naive_greedy(model, prompt: list[int], steps: int, eos: int | None = None) -> list[int]:
    ids = list(prompt)
    out = []
    for _ in range(steps):
        token = int(full_logits(model, torch.tensor([ids])).argmax())
        out.append(token)
        ids.append(token)
        if token == eos:
            break
    return out


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_cached_greedy_equals_recomputing_every_step(norm):
    model = tiny_gpt(norm)
    prompts = [[3, 7, 9, 11, 2], [5, 6, 8, 10, 12]]
    got = model.generate(torch.tensor(prompts), max_new_tokens=12).sequences
    for row, prompt in enumerate(prompts):
        assert got[row].tolist() == naive_greedy(model, prompt, 12)


def test_padded_prompts_decode_as_they_would_alone():
    model = tiny_gpt()
    short, long = [4, 8, 15], [16, 23, 42, 7, 9, 1]
    alone = [model.generate(torch.tensor([p]), max_new_tokens=8).sequences[0].tolist() for p in (short, long)]
    # Right padding on one row, left padding on the other: both are realigned before decoding.
    ids = torch.tensor([short + [0, 0, 0], long])
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1] * 6])
    got = model.generate(ids, mask, max_new_tokens=8).sequences
    assert got.tolist() == alone
    left = torch.tensor([[0, 0, 0] + short, long])
    left_mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])
    assert model.generate(left, left_mask, max_new_tokens=8).sequences.tolist() == alone


def test_left_align_keeps_token_order():
    ids = torch.tensor([[1, 2, 0, 0], [0, 3, 4, 5]])
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1]])
    aligned, m = left_align(ids, mask)
    assert aligned[m].tolist() == [1, 2, 3, 4, 5]
    assert m.tolist() == [[False, False, True, True], [False, True, True, True]]


def test_stop_tokens_end_rows_and_pad_after():
    model = tiny_gpt()
    prompt = [3, 7, 9]
    free = naive_greedy(model, prompt, 10)
    stop = free[3]  # a token greedy emits at step 3 (maybe earlier too)
    first = free.index(stop)
    out = model.generate(torch.tensor([prompt, prompt]), max_new_tokens=10, eos_token_ids=[stop], pad_token_id=1)
    assert out.lengths.tolist() == [first + 1, first + 1]
    assert out.sequences[0, : first + 1].tolist() == free[: first + 1]
    assert (out.sequences[:, first + 1 :] == 1).all()


def test_min_new_tokens_holds_the_stop_token_back():
    model = tiny_gpt()
    prompt = [3, 7, 9]
    stop = naive_greedy(model, prompt, 1)[0]
    out = model.generate(torch.tensor([prompt]), max_new_tokens=6, eos_token_ids=[stop], min_new_tokens=3)
    assert stop not in out.sequences[0, :3].tolist()
    assert out.lengths[0] >= 3


@pytest.mark.parametrize("model_type", ["gpt2", "openai-gpt"])
def test_greedy_equals_transformers_generate(tmp_path, model_type):
    transformers = pytest.importorskip("transformers")
    from bertzoo.hub import export_hf

    model = tiny_gpt("pre" if model_type == "gpt2" else "post")
    export_hf(model, tmp_path)
    cls = transformers.GPT2LMHeadModel if model_type == "gpt2" else transformers.OpenAIGPTLMHeadModel
    hf = cls.from_pretrained(tmp_path).eval()
    prompts = torch.tensor([[3, 7, 9, 11, 2], [5, 6, 8, 10, 12], [1, 1, 4, 9, 16]])
    with torch.no_grad():
        ref = hf.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=30,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
            eos_token_id=None,
        )[:, prompts.size(1) :]
    ours = model.generate(prompts, max_new_tokens=30).sequences
    assert torch.equal(ours, ref)


@torch.no_grad()
def sequence_logprob(model, prompt: list[int], tokens: list[int]) -> float:
    logits = model.logits(torch.tensor([prompt + tokens]))[0].double().log_softmax(-1)
    return sum(float(logits[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens))


def test_beam_search_with_a_full_beam_finds_the_best_sequence():
    """With every prefix in the beam (width vocab^(steps-1)) beam search is exhaustive: its answer is the
    brute-force best of all sequences, scored by length-normalised log-probability with a stop token."""
    vocab, steps, eos, alpha = 4, 3, 2, 0.7
    model = tiny_gpt(vocab=vocab, seed=3)
    prompt = [1, 3, 0]
    best, best_seq = -math.inf, None
    for n in range(1, steps + 1):
        for seq in itertools.product(range(vocab), repeat=n):
            if eos in seq[:-1] or (n < steps and seq[-1] != eos):
                continue  # a sequence ends at its first stop token or at the length limit
            score = sequence_logprob(model, prompt, list(seq)) / n**alpha
            if score > best:
                best, best_seq = score, list(seq)
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=steps,
        num_beams=vocab ** (steps - 1),
        eos_token_ids=[eos],
        length_penalty=alpha,
    )
    got = out.sequences[0, : int(out.lengths[0])].tolist()
    assert got == best_seq
    assert float(out.scores[0]) == pytest.approx(best, abs=1e-4)


def test_beam_search_of_width_one_is_greedy_and_rows_are_independent():
    model = tiny_gpt(seed=1)
    prompts = torch.tensor([[3, 7, 9], [5, 6, 8]])
    beams = model.generate(prompts, max_new_tokens=6, num_beams=4).sequences
    for row in range(2):
        alone = model.generate(prompts[row : row + 1], max_new_tokens=6, num_beams=4).sequences
        assert beams[row].tolist() == alone[0].tolist()
    narrow = model.generate(prompts, max_new_tokens=6, num_beams=1).sequences
    assert narrow[0].tolist() == naive_greedy(model, [3, 7, 9], 6)


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    model = tiny_gpt()
    prompts = torch.tensor([[3, 7, 9], [5, 6, 8]])
    a = model.generate(prompts, max_new_tokens=10, do_sample=True, seed=5).sequences
    b = model.generate(prompts, max_new_tokens=10, do_sample=True, seed=5).sequences
    c = model.generate(prompts, max_new_tokens=10, do_sample=True, seed=6).sequences
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    greedy = model.generate(prompts, max_new_tokens=10).sequences
    assert torch.equal(model.generate(prompts, max_new_tokens=10, do_sample=True, top_k=1, seed=9).sequences, greedy)


def test_filters_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    keep = lambda **kw: torch.isfinite(_filter(logits, GenerationConfig(do_sample=True, **kw)))[0].tolist()  # noqa: E731
    assert keep(top_k=2) == [True, True, False, False]
    # Nucleus 0.7: 0.5 alone is below, 0.5 + 0.3 reaches it, the rest are dropped.
    assert keep(top_p=0.7) == [True, True, False, False]
    assert keep(top_p=0.4) == [True, False, False, False]
    assert keep(top_p=0.85) == [True, True, True, False]
    scaled = _filter(logits, GenerationConfig(do_sample=True, temperature=2.0)).softmax(-1)[0]
    expected = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    assert torch.allclose(scaled, expected / expected.sum(), atol=1e-6)


def test_sampling_frequencies_follow_the_distribution():
    """Many rows sampled from one next-token distribution match it (a loose chi-square-sized bound)."""
    model = tiny_gpt(vocab=6, seed=2)
    prompt = torch.tensor([[1, 3, 0]]).repeat(4000, 1)
    probs = full_logits(model, prompt[:1]).softmax(-1)[0]
    first = model.generate(prompt, max_new_tokens=1, do_sample=True, seed=0).sequences[:, 0]
    freq = torch.bincount(first, minlength=6).double() / len(first)
    assert torch.allclose(freq, probs.double(), atol=0.03)


@pytest.mark.parametrize(
    "settings, fragment",
    [
        ({"num_beams": 3, "do_sample": True}, "contradict"),
        ({"temperature": 0.7}, "do_sample=false"),
        ({"top_p": 0.9}, "do_sample=false"),
        ({"do_sample": True, "top_p": 0.0}, "top_p"),
        ({"do_sample": True, "temperature": 0.0}, "temperature"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"min_new_tokens": 3}, "eos_token_ids"),
        ({"min_new_tokens": 9, "max_new_tokens": 4, "eos_token_ids": [1]}, "min_new_tokens"),
    ],
)
def test_contradicting_settings_are_refused(settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        GenerationConfig(**settings)


def test_prompt_longer_than_the_position_table():
    model = tiny_gpt()  # 64 positions
    prompt = torch.arange(60)[None] % VOCAB
    with pytest.raises(ConfigError, match="truncate_prompt"):
        model.generate(prompt, max_new_tokens=10)
    out = model.generate(prompt, max_new_tokens=10, truncate_prompt=True)
    assert out.sequences[0].tolist() == naive_greedy(model, prompt[0, -54:].tolist(), 10)
    with pytest.raises(ConfigError, match="no real tokens"):
        model.generate(prompt[:, :4], torch.zeros(1, 4), max_new_tokens=2)


def test_mask_predict_decoding_equals_recomputing_with_the_seq2seq_mask():
    """UniLM decoding with the cache equals, step by step, a full forward pass over
    [source, target so far, MASK] with the sequence-to-sequence mask, read at the [MASK]."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    encoder = Encoder(config)
    head = MaskedLMHead(32, VOCAB, tied_weight=encoder.word_embeddings.weight)
    perturb(encoder, 0)
    perturb(head, 1)
    encoder.eval()
    mask_id = 4
    source = [2, 10, 11, 12, 13, 3]

    def reference(steps: int) -> list[int]:
        target: list[int] = []
        for _ in range(steps):
            ids = source + target + [mask_id]
            n, s = len(ids), len(source)
            visible = torch.zeros(n, n, dtype=torch.bool)
            visible[:, :s] = True  # everything sees the source
            for q in range(s, n):
                visible[q, s : q + 1] = True  # targets (and the mask) see the target up to themselves
            types = torch.tensor([[0] * s + [1] * (n - s)])
            with torch.no_grad():
                hidden = encoder(torch.tensor([ids]), visible[None], types, pool=False).last_hidden_state
            target.append(int(head(hidden[0, -1]).argmax()))
        return target

    decoding = MaskPredictDecoding(encoder, head, mask_id)
    out = generate(decoding, torch.tensor([source]), max_new_tokens=7)
    assert out.sequences[0].tolist() == reference(7)
    # Padded sources (left or right) decode as they would alone.
    padded = torch.tensor([source + [0, 0], [2, 20, 21, 3, 0, 0, 0, 0]])
    mask = (torch.arange(8)[None] < torch.tensor([[6], [4]])).long()
    both = generate(MaskPredictDecoding(encoder, head, mask_id), padded, mask, max_new_tokens=5).sequences
    assert both[0].tolist() == reference(5)
    alone = generate(MaskPredictDecoding(encoder, head, mask_id), torch.tensor([[2, 20, 21, 3]]), max_new_tokens=5)
    assert both[1].tolist() == alone.sequences[0].tolist()
    beams = generate(MaskPredictDecoding(encoder, head, mask_id), padded, mask, max_new_tokens=5, num_beams=3)
    assert beams.sequences.shape[0] == 2
