"""XLNet as parts, model, data and objective: the relative attention with its segment term against a
per-pair reference, the stream masks, memory as a one-pass equivalence, the permutation-LM collator's
statistics, and leakage (no target reads a target that comes at or after it in its factorisation order,
through any number of layers; transformers' collator rule does leak). Hugging Face parity: test_xlnet_hf.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.data.pretraining.collate_plm import PermutationLMCollator, factorisation_mask, sample_spans
from bertzoo.data.rng import KeyedRNG
from bertzoo.errors import ConfigError
from bertzoo.models.xlnet import XLNet, XLNetOutput, stream_masks
from bertzoo.nn.relative_attention import signed_distances
from bertzoo.nn.two_stream import TwoStreamAttention
from bertzoo.variants import VARIANTS, xlnet

from helpers.xlnet import SPECIAL, VOCAB, examples, leaks

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**fields) -> xlnet.ModelConfig:
    spec = {"preset": "xlnet-tiny", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "dropout": 0.0}
    return xlnet.model_config({**spec, "attention_dropout": 0.0, **fields})


# --- presets and the variant table ------------------------------------------------------------------


def test_presets_have_the_papers_sizes_and_the_variant_is_registered() -> None:
    assert VARIANTS["xlnet"] is xlnet.FAMILY
    base = xlnet.model_config({"preset": "xlnet-base"})
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    assert base.vocab_size == 32000 and base.position == "none" and not base.pooler
    large = xlnet.model_config({"preset": "xlnet-large"})
    assert (large.num_layers, large.hidden_size, large.num_heads, large.intermediate_size) == (24, 1024, 16, 4096)
    mini = xlnet.model_config({"preset": "xlnet-mini"})
    assert (mini.num_layers, mini.hidden_size, mini.num_heads, mini.intermediate_size) == (4, 256, 4, 1024)


def test_a_layout_xlnet_cannot_compute_is_refused() -> None:
    with pytest.raises(ConfigError, match="norm='pre'"):
        XLNet(tiny(norm="pre"))
    with pytest.raises(ConfigError, match="objective='mlm'"):
        xlnet.build(tiny(), "mlm")
    with pytest.raises(ConfigError, match="mem_len must be >= 0"):
        tiny(mem_len=-1)


# --- parts ------------------------------------------------------------------------------------------


def test_signed_distances_clamp_both_sides() -> None:
    assert signed_distances(3, -2).tolist() == [3, 2, 1, 0, -1, -2]
    assert signed_distances(4, -3, clamp_len=2).tolist() == [2, 2, 2, 1, 0, -1, -2, -2]


def sinusoid(d: float, dim: int) -> torch.Tensor:
    """The paper's sin | cos embedding of one distance, written out."""
    freq = [1 / 10000 ** (2 * k / dim) for k in range(dim // 2)]
    return torch.tensor([math.sin(d * f) for f in freq] + [math.cos(d * f) for f in freq])


@torch.no_grad()
def test_two_stream_attention_equals_the_per_pair_formula() -> None:
    """score(i, j) = ((q_i + u).k_j + (q_i + v).W_R R(mem + i - j) + (q_i + s).e[seg_i != seg_j]) / sqrt(d),
    computed pair by pair over [memory; x] with a two-sided clamped table, for both streams."""
    torch.manual_seed(0)
    hidden, heads, d, b, seq, mem, clamp = 8, 2, 3, 2, 4, 3, 3
    att = TwoStreamAttention(hidden, heads, d).eval()
    for p in att.parameters():
        p.normal_(0.0, 0.5)
    x, memory, g = torch.randn(b, seq, hidden), torch.randn(b, mem, hidden), torch.randn(b, seq, hidden)
    segs = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 2]])
    different = segs[:, :, None] != torch.nn.functional.pad(segs, (mem, 0))[:, None, :]
    mask = torch.rand(b, 1, seq, mem + seq) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    top = mem + seq - 1
    pos = torch.stack([sinusoid(t, hidden) for t in signed_distances(top, -(seq - 1), clamp).tolist()])
    out_h, out_g, _ = att(x, g, pos, top=top, memory=memory, different=different, content_mask=mask, query_mask=mask)

    full = torch.cat([memory, x], 1)
    expected = {}
    for name, stream in (("h", x), ("g", g)):
        out = torch.zeros(b, seq, hidden)
        for bi in range(b):
            for n in range(heads):
                q = stream[bi] @ att.q[:, n]  # (seq, d)
                k, v = full[bi] @ att.k[:, n], full[bi] @ att.v[:, n]
                scores = torch.empty(seq, mem + seq)
                for i in range(seq):
                    for j in range(mem + seq):
                        dist = max(-clamp, min(clamp, mem + i - j))
                        r = sinusoid(dist, hidden) @ att.r[:, n]
                        e = att.segment_embed[int(different[bi, i, j]), n]
                        scores[i, j] = (
                            (q[i] + att.content_bias[n]) @ k[j]
                            + (q[i] + att.position_bias[n]) @ r
                            + (q[i] + att.segment_bias[n]) @ e
                        ) / math.sqrt(d)
                scores = scores.masked_fill(~mask[bi, 0], -math.inf)
                out[bi] += (scores.softmax(-1) @ v) @ att.o[:, n].T
        expected[name] = out
    torch.testing.assert_close(out_h, expected["h"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_g, expected["g"], atol=1e-5, rtol=1e-5)

    # The query stream asked at some positions only (rows gathered), the last row of the second batch empty:
    # each row is the per-pair formula's row at its position, an empty one reads nothing (zeros).
    positions = torch.tensor([[3, 0, 2], [1, 3, 0]])
    present = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    g_rows = g.gather(1, positions[..., None].expand(-1, -1, hidden))
    none_h, rows_g, _ = att(
        x, g_rows, pos, top=top, memory=memory, different=different, content_mask=mask, query_mask=mask,
        query_rows=(positions, present), content=False,
    )  # fmt: skip
    assert none_h is None
    want = expected["g"].gather(1, positions[..., None].expand(-1, -1, hidden)) * present[..., None]
    torch.testing.assert_close(rows_g, want, atol=1e-5, rtol=1e-5)


def test_stream_masks_content_sees_itself_query_does_not() -> None:
    perm = torch.tensor([[[1, 1, 0], [0, 1, 1], [0, 0, 0]]])  # 1 = may not attend
    content, query = stream_masks(1, 3, 1, torch.device("cpu"), perm_mask=perm)
    # key 0 is memory: always visible
    assert query[0, 0].int().tolist() == [[1, 0, 0, 1], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert content[0, 0].int().tolist() == [[1, 1, 0, 1], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert stream_masks(1, 3, 0, torch.device("cpu")) == (None, None)


def test_causal_masks_with_memory_and_same_length() -> None:
    _, plain = stream_masks(1, 3, 2, torch.device("cpu"), causal=True)
    assert plain[0, 0].int().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    _, same = stream_masks(1, 3, 2, torch.device("cpu"), causal=True, same_length=True)
    assert same[0, 0].int().tolist() == [[1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]


# --- the model --------------------------------------------------------------------------------------


@torch.no_grad()
def test_causal_memory_equals_one_pass_over_both_segments() -> None:
    """Left to right, reading segment 2 with segment 1's memory is reading the whole text at once (relative
    positions make the memory's states valid); the memory carries no gradient."""
    torch.manual_seed(1)
    model = XLNet(tiny(causal=True, mem_len=16)).eval()
    ids = torch.randint(5, VOCAB, (2, 11))
    whole = model(ids).last_hidden_state
    first = model(ids[:, :6], use_mems=True)
    second = model(ids[:, 6:], mems=first.mems, use_mems=True)
    torch.testing.assert_close(first.last_hidden_state, whole[:, :6], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second.last_hidden_state, whole[:, 6:], atol=1e-5, rtol=1e-5)
    assert [m.shape[1] for m in second.mems] == [11, 11]
    # A short memory forgets: the second segment no longer equals the one pass.
    short = XLNet(tiny(causal=True, mem_len=2))
    short.load_state_dict(model.state_dict())
    forgetful = short.eval()(ids[:, 6:], mems=short(ids[:, :6], use_mems=True).mems)
    assert not torch.allclose(forgetful.last_hidden_state, whole[:, 6:], atol=1e-3)


def test_memory_stops_gradients() -> None:
    torch.manual_seed(2)
    model = XLNet(tiny(mem_len=8))
    ids = torch.randint(5, VOCAB, (1, 5))
    first = model(ids, use_mems=True)
    assert all(not m.requires_grad for m in first.mems)
    model(ids, mems=first.mems).last_hidden_state.sum().backward()
    assert model.embeddings.word.weight.grad is not None


# --- permutation-LM data ----------------------------------------------------------------------------


def test_spans_cover_about_one_in_k_tokens_and_respect_the_longest_span() -> None:
    rng = np.random.default_rng(0)
    draws = [sample_spans(120, rng, 1 / 6, 5) for _ in range(200)]
    assert 0.15 < np.mean(draws) < 0.18  # E[span] / E[int(span * 6)] = 3 / 18
    runs = np.concatenate([np.diff(np.flatnonzero(np.diff(np.r_[0, d.astype(int), 0])))[::2] for d in draws])
    # One span per context; two may touch across a context boundary, never three.
    assert runs.max() <= 10 and np.mean(runs <= 5) > 0.95
    assert abs(np.mean(sample_spans(600, rng, 1 / 3, 1)) - 1 / 3) < 1e-9  # spans of 1 in contexts of 3


def transformers_rule(rank: np.ndarray, targets: np.ndarray, functional: np.ndarray) -> np.ndarray:
    """DataCollatorForPermutationLanguageModeling's perm mask (transformers 4.x/5.x), for comparison."""
    index = np.where(~targets & ~functional, -1, rank)
    return (index[:, None] <= index[None, :]) & targets[None, :]


def test_no_target_ever_reads_a_later_target_and_transformers_rule_does() -> None:
    found_upstream_leak = False
    for seed in range(40):
        rng = KeyedRNG(0, 0, seed, "test")
        seq = 16
        functional = np.zeros(seq, dtype=bool)
        functional[[0, 7, 15]] = True
        targets = sample_spans(seq, rng, 1 / 3, 3) & ~functional
        rank = rng.permutation(seq)
        blocked = factorisation_mask(rank, targets, functional)
        assert not blocked[~targets & ~functional][:, ~targets & ~functional].any()  # context sees context
        assert not leaks(blocked, rank, targets), seed
        found_upstream_leak |= leaks(transformers_rule(rank, targets, functional), rank, targets)
    assert found_upstream_leak  # the check above can fail: it catches transformers' rule


def test_collator_batches_are_keyed_and_consistent() -> None:
    collate = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=3, pad_to_multiple_of=1)
    exs = examples(6, 24)
    batch = collate(exs)
    ids, labels = batch.input_ids, batch.labels
    mapping, perm = batch.extra["target_mapping"], batch.extra["perm_mask"]
    assert mapping.shape == (6, labels.size(1), ids.size(1)) and perm.shape == (6, ids.size(1), ids.size(1))
    for row in range(6):
        real = labels[row] != IGNORE_INDEX
        where = mapping[row, real].argmax(-1)
        assert torch.equal(mapping[row, real].sum(-1), torch.ones(int(real.sum())))  # one-hot
        assert not mapping[row, ~real].any()
        assert torch.equal(labels[row, real], ids[row, where])  # labels are the inputs (which stay unmasked)
        assert bool((ids[row, where] > 4).all())  # never a special token or padding
        assert bool(perm[row, where, where].all())  # a target's query stream never sees its own token
    assert torch.equal(ids, torch.nn.utils.rnn.pad_sequence([torch.tensor(e["input_ids"]) for e in exs], True))
    # The same example gets the same targets in another batch; another seed draws others.
    alone = collate([exs[4]])
    assert torch.equal(alone.extra["perm_mask"][0], perm[4, : alone.input_ids.size(1), : alone.input_ids.size(1)])
    other = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=4, pad_to_multiple_of=1)([exs[4]])
    assert not torch.equal(other.extra["perm_mask"], alone.extra["perm_mask"])


def test_collator_refuses_bad_options() -> None:
    with pytest.raises(ConfigError, match="plm_probability"):
        PermutationLMCollator(SPECIAL, vocab_size=VOCAB, plm_probability=0.0)
    with pytest.raises(ConfigError, match="max_span_length"):
        PermutationLMCollator(SPECIAL, vocab_size=VOCAB, max_span_length=0)


@torch.no_grad()
def test_the_model_reads_no_target_at_or_after_it_in_the_order() -> None:
    """Changing a target's token changes no prediction at or before it in the order (its own included),
    and does change a later one's: the masks hold through the whole stack, padding and all."""
    torch.manual_seed(4)
    model = xlnet.build(tiny(num_layers=3)).eval()
    collate = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=5, plm_probability=1 / 3)
    batch = collate(examples(2, 20, seed=1))
    inputs = {k: batch.extra[k] for k in ("perm_mask", "target_mapping")}
    logits, _ = model.logits(batch.input_ids, attention_mask=batch.attention_mask, **inputs)
    perm, mapping = batch.extra["perm_mask"], batch.extra["target_mapping"]
    changed_later = 0
    for row in range(2):
        predicted = [int(p) for p in mapping[row].argmax(-1)[batch.labels[row] != IGNORE_INDEX]]
        for target in predicted:
            ids = batch.input_ids.clone()
            ids[row, target] = 5 + (int(ids[row, target]) - 4) % (VOCAB - 5)  # another ordinary token
            new, _ = model.logits(ids, attention_mask=batch.attention_mask, **inputs)
            for m, other in enumerate(predicted):
                same = torch.allclose(new[row, m], logits[row, m], atol=1e-6)
                if perm[row, other, target]:  # `target` is at or after `other` in the order
                    assert same, (row, target, other)
                else:
                    changed_later += not same
    assert changed_later > 0


# --- objective --------------------------------------------------------------------------------------


def test_plm_loss_is_the_cross_entropy_of_the_query_stream_and_it_learns() -> None:
    torch.manual_seed(6)
    model = xlnet.build(tiny())
    batch = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=1)(examples(4, 16, seed=2))
    model.eval()
    out = model(batch)
    logits, _ = model.logits(
        batch.input_ids,
        attention_mask=batch.attention_mask,
        token_type_ids=batch.token_type_ids,
        perm_mask=batch.extra["perm_mask"],
        target_mapping=batch.extra["target_mapping"],
    )
    real = batch.labels != IGNORE_INDEX
    manual = torch.nn.functional.cross_entropy(logits[real], batch.labels[real])
    torch.testing.assert_close(out.loss, manual)
    assert out.counts["plm_loss"] == model.loss_counts(batch)["plm"] == int(real.sum())
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model(batch).loss.item()
    for _ in range(30):
        optimizer.zero_grad()
        model(batch).loss.backward()
        optimizer.step()
    assert model(batch).loss.item() < first - 1.0


def test_the_query_stream_at_the_targets_only_equals_the_scattered_one() -> None:
    """The PLM loss path (query stream scored at the predicted rows, top layer's content stream skipped) gives
    the loss and gradients of the scattered path that transformers' layout takes (output_attentions=True),
    on collator batches whose rows predict different numbers of tokens (empty mapping rows)."""
    torch.manual_seed(7)
    model = xlnet.build(tiny()).eval()
    batch = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=3)(examples(4, 16, seed=5))
    mapping = batch.extra["target_mapping"]
    assert (mapping.sum(-1) == 0).any(), "the batch should have an empty mapping row"
    inputs = {
        "attention_mask": batch.attention_mask,
        "token_type_ids": batch.token_type_ids,
        "perm_mask": batch.extra["perm_mask"],
        "target_mapping": mapping,
    }
    real = batch.labels != IGNORE_INDEX

    def loss_and_grads(**kwargs) -> tuple[torch.Tensor, list[torch.Tensor], XLNetOutput]:
        model.zero_grad()
        logits, out = model.logits(batch.input_ids, **inputs, **kwargs)
        loss = torch.nn.functional.cross_entropy(logits[real], batch.labels[real])
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None], out

    ref_loss, ref_grads, ref_out = loss_and_grads(output_attentions=True)
    loss, grads, out = loss_and_grads(top_content=False)
    assert ref_out.last_hidden_state is not None and out.last_hidden_state is None
    torch.testing.assert_close(loss, ref_loss, atol=1e-6, rtol=1e-6)
    # Every parameter the scattered path trains gets the same gradient (the top layer's content-only
    # parameters, its content stream's norms and feed-forward, get none from either: they feed nothing read).
    assert len(grads) == len(ref_grads)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    model.zero_grad()
    model(batch).loss.backward()  # the objective takes the fast path
    torch.testing.assert_close(model(batch).loss.detach(), ref_loss, atol=1e-6, rtol=1e-6)


# --- pretraining ------------------------------------------------------------------------------------


def test_pretrain_runs_the_shipped_recipe_and_reloads(synthetic_shards, tmp_path) -> None:
    """The shipped config with a tiny model: held-out permutation-LM loss falls below the unigram baseline,
    and the final checkpoint loads back as a PermutationLM that exports to Hugging Face."""
    import json

    from bertzoo.config import load_pretrain_config
    from bertzoo.hub import export_hf, load_pretraining
    from bertzoo.objectives.plm import PermutationLM
    from bertzoo.train.pretrain import pretrain

    from helpers.pretrain import tiny_config

    shipped = load_pretrain_config("configs/pretrain/xlnet-mini.yaml")
    cfg = tiny_config(synthetic_shards, tmp_path / "run", max_steps=200, eval_every=200, lr=3e-3)
    cfg.variant, cfg.objective, cfg.objective_args = shipped.variant, shipped.objective, shipped.objective_args
    cfg.model = {"preset": "xlnet-tiny", "hidden_size": 32, "intermediate_size": 64, "dropout": 0.0}
    cfg.data.short_seq_prob = 0.0
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "eval_plm_loss" in r][-1]
    assert last["eval_plm_loss"] < summary["baseline"]["unigram_mlm_loss"]
    final = sorted(p for p in (tmp_path / "run").iterdir() if p.is_dir() and (p / "config.json").is_file())[-1]
    model = load_pretraining(final)
    assert isinstance(model, PermutationLM) and model.config.pad_token_id is None
    export_hf(model, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["XLNetLMHeadModel"]


def test_a_batch_labelled_per_position_predicts_each_target_from_the_context_alone() -> None:
    from bertzoo.objectives.plm import targets_from_labels

    labels = torch.tensor([[-100, 7, -100, 9], [6, -100, -100, -100]])
    perm, mapping, compact = targets_from_labels(labels)
    assert compact.tolist() == [[7, 9], [6, -100]]
    assert mapping.tolist() == [[[0, 1, 0, 0], [0, 0, 0, 1]], [[1, 0, 0, 0], [0, 0, 0, 0]]]
    assert perm[0].tolist() == [[0, 1, 0, 1]] * 4 and perm[1].tolist() == [[1, 0, 0, 0]] * 4
