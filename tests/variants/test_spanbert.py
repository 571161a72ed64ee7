"""SpanBERT: span length statistics, span placement, the span boundary objective, training, save/load."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig, ModelConfig, load_pretrain_config
from bertzoo.data.pretraining.masking import mask_tokens, sample_span_lengths, unit_bounds
from bertzoo.data.tokens.tokenizer import SpecialIds
from bertzoo.objectives.span import SpanBoundaryLM, label_runs
from bertzoo.variants import spanbert

VOCAB = 30000
SPECIAL = SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
SPECIAL_IDS = np.array(sorted(SPECIAL))
TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)


def reference_pmf(p=0.2, max_span=10):
    """P(L = l) of the geometric distribution truncated at max_span, written out independently."""
    w = [p * (1 - p) ** (length - 1) for length in range(1, max_span + 1)]
    return np.array(w) / sum(w)


def test_drawn_span_lengths_follow_the_truncated_geometric():
    u = np.random.default_rng(0).random(200_000)
    lengths = sample_span_lengths(u, 0.2, 10)
    assert lengths.min() == 1 and lengths.max() == 10
    pmf = reference_pmf()
    counts = np.bincount(lengths, minlength=11)[1:]
    chi2 = ((counts - pmf * len(u)) ** 2 / (pmf * len(u))).sum()
    assert chi2 < 33  # 9 degrees of freedom: the 99.99th percentile is about 33.7
    assert abs(lengths.mean() - 3.8) < 0.02  # the paper's mean span length (3.797 exactly)
    assert abs((pmf * np.arange(1, 11)).sum() - 3.797) < 0.001


def long_word_rows(n_rows=40, length=4096, seed=1):
    """Two segments per row plus padding; words of 1-3 tokens."""
    r = np.random.default_rng(seed)
    ids = r.integers(1000, VOCAB, size=(n_rows, length))
    ids[:, 0] = SPECIAL.cls
    ids[:, length // 2] = SPECIAL.sep
    ids[:, length - 40] = SPECIAL.sep
    ids[:, length - 39 :] = SPECIAL.pad
    starts = r.random((n_rows, length)) < 0.55
    return ids, starts


def spans_of(selection):
    """(row, first, last) of every span, from the selection's groups."""
    out = []
    for row in range(selection.selected.shape[0]):
        for g in np.unique(selection.groups[row][selection.selected[row]]):
            out.append((row, int(g), int(selection.ends[row, g])))
    return out


def test_realised_spans_are_whole_words_within_segments_with_mean_3_8():
    ids, starts = long_word_rows()
    special = np.isin(ids, SPECIAL_IDS)
    _, out_labels, sel = mask_tokens(
        ids,
        special,
        seed=5,
        epoch=0,
        index=np.arange(len(ids)),
        config=MaskingConfig(),
        mask_id=SPECIAL.mask,
        replacement_ids=np.arange(1000, VOCAB),
        selector="span",
        starts=starts,
        return_selection=True,
    )
    boundary, first, last = unit_bounds(starts, special)
    n_cand = (~special).sum(1)
    assert abs(sel.selected.sum() / n_cand.sum() - 0.15) < 0.002
    assert (sel.selected.sum(1) <= np.rint(n_cand * 0.15)).all()
    words = []
    for row, a, b in spans_of(sel):
        assert not special[row, a : b + 1].any()  # never crosses [SEP] or padding
        assert sel.selected[row, a : b + 1].all()
        assert first[row, a] == a and last[row, b] == b  # starts and ends on word boundaries
        assert (sel.groups[row, a : b + 1] == a).all() and (sel.ends[row, a : b + 1] == b).all()
        words.append(int(boundary[row, a : b + 1].sum()))
    words = np.array(words)
    assert words.min() >= 1 and words.max() <= 10
    assert abs(words.mean() - 3.8) < 0.15, words.mean()
    # The histogram of realised lengths follows the distribution (the last span of each row is cut
    # to the budget, which shifts a little mass to short spans).
    hist = np.bincount(words, minlength=11)[1:] / len(words)
    assert np.abs(hist - reference_pmf()).max() < 0.02
    # Spans never overlap, so the selected positions are exactly the union of the spans.
    covered = sum(b - a + 1 for _, a, b in spans_of(sel))
    assert covered == sel.selected.sum()
    assert np.array_equal(out_labels != IGNORE_INDEX, sel.selected)


def test_short_rows_still_fill_the_budget():
    r = np.random.default_rng(3)
    ids = r.integers(1000, VOCAB, size=(500, 24))
    ids[:, 0], ids[:, 11], ids[:, 23] = SPECIAL.cls, SPECIAL.sep, SPECIAL.sep
    starts = np.ones(ids.shape, dtype=bool)
    special = np.isin(ids, SPECIAL_IDS)
    _, labels = mask_tokens(
        ids,
        special,
        seed=0,
        epoch=0,
        index=np.arange(500),
        config=MaskingConfig(),
        mask_id=SPECIAL.mask,
        replacement_ids=np.arange(1000, VOCAB),
        selector="span",
        starts=starts,
    )
    assert ((labels != IGNORE_INDEX).sum(1) == 3).all()  # round(0.15 * 21) = 3 in every row


def test_one_80_10_10_decision_per_span(synthetic_tokenizer, synthetic_docs):
    from bertzoo.data.pretraining.collate_units import UnitMaskingCollator

    col = UnitMaskingCollator(synthetic_tokenizer, MaskingConfig(), seed=2, strategy="span", span_targets=True)
    examples = [
        {"input_ids": np.array(synthetic_tokenizer.encode(d).ids[:128]), "index": i}
        for i, d in enumerate(synthetic_docs[:400])
    ]
    batch = col(examples)
    start, end = batch.extra["span_start"].numpy(), batch.extra["span_end"].numpy()
    sel = (batch.labels != IGNORE_INDEX).numpy()
    assert np.array_equal(start >= 0, sel) and np.array_equal(end >= 0, sel)
    ids, labels = batch.input_ids.numpy(), batch.labels.numpy()
    action = np.where(ids == synthetic_tokenizer.mask_id, 0, np.where(ids == labels, 2, 1))
    first_actions = []
    for row in range(len(examples)):
        for s in np.unique(start[row][sel[row]]):
            acts = action[row, s : end[row, s] + 1]
            # [MASK] all or none; a random replacement may draw the original token by chance.
            assert (acts == 0).all() or not (acts == 0).any()
            first_actions.append(0 if acts[0] == 0 else (1 if (acts == 1).any() else 2))
    share = np.bincount(first_actions, minlength=3) / len(first_actions)
    assert abs(share[0] - 0.8) < 0.04 and abs(share[1] - 0.1) < 0.03


def span_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 97, (2, 16), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    # Row 0: spans [3, 5] and [6, 7] (adjacent, each with its own boundaries); row 1: [10, 12].
    labels[0, 3:8] = ids[0, 3:8]
    labels[1, 10:13] = ids[1, 10:13]
    start = torch.full_like(ids, -1)
    end = torch.full_like(ids, -1)
    start[0, 3:6], end[0, 3:6] = 3, 5
    start[0, 6:8], end[0, 6:8] = 6, 7
    start[1, 10:13], end[1, 10:13] = 10, 12
    batch = Batch(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
    batch.labels = labels
    batch.extra = {"span_start": start, "span_end": end}
    return batch


def test_sbo_loss_is_the_paper_formula():
    torch.manual_seed(0)
    model = spanbert.build(ModelConfig(**TINY, variant="spanbert")).eval()
    b = span_batch()
    out = model(b)
    hidden = model.encoder(b.input_ids, b.attention_mask, b.token_type_ids).last_hidden_state
    head = model.sbo_head
    rows, cols, lefts, rights, rels = [], [], [], [], []
    for row, spans in ((0, [(3, 5), (6, 7)]), (1, [(10, 12)])):
        for s, e in spans:
            for i in range(s, e + 1):
                rows.append(row)
                cols.append(i)
                lefts.append(hidden[row, s - 1])
                rights.append(hidden[row, e + 1])
                rels.append(i - s)
    x = torch.cat([torch.stack(lefts), torch.stack(rights), head.position.weight[rels]], dim=-1)
    h = F.layer_norm(
        F.gelu(x @ head.dense1.weight.T + head.dense1.bias), (32,), head.norm1.weight, head.norm1.bias, 1e-12
    )
    h = F.layer_norm(
        F.gelu(h @ head.dense2.weight.T + head.dense2.bias), (32,), head.norm2.weight, head.norm2.bias, 1e-12
    )
    logits = h @ model.encoder.embeddings.word.weight.T + head.decoder.bias  # tied decoder
    targets = b.input_ids[rows, cols]
    sbo = F.cross_entropy(logits, targets)
    mlm_logits = model.mlm_head(hidden)[b.labels != IGNORE_INDEX]
    mlm = F.cross_entropy(mlm_logits, b.labels[b.labels != IGNORE_INDEX])
    torch.testing.assert_close(out.metrics["sbo_loss"], sbo)
    torch.testing.assert_close(out.loss, mlm + sbo)
    assert out.counts["sbo_loss"].item() == 8
    assert head.decoder.weight is model.encoder.embeddings.word.weight


def test_sbo_weight_scales_only_the_boundary_term():
    b = span_batch()
    torch.manual_seed(0)
    plain = spanbert.build(ModelConfig(**TINY, variant="spanbert")).eval()
    torch.manual_seed(0)
    weighted = spanbert.build(ModelConfig(**TINY, variant="spanbert"), sbo_weight=0.25).eval()
    a, w = plain(b), weighted(b)
    torch.testing.assert_close(w.metrics["sbo_loss"], a.metrics["sbo_loss"])  # same weights, same terms
    torch.testing.assert_close(w.loss, a.metrics["mlm_loss"] + 0.25 * a.metrics["sbo_loss"])
    assert w.terms["sbo"][1] == 0.25 and a.terms["sbo"][1] == 1.0
    for bad in (-1.0, float("nan"), "0.1", True):
        with pytest.raises(Exception, match="sbo_weight"):
            spanbert.build(ModelConfig(**TINY, variant="spanbert"), sbo_weight=bad)


def test_spans_from_label_runs_when_the_batch_has_none():
    b = span_batch()
    start, end = label_runs(b.labels != IGNORE_INDEX)
    sel = b.labels != IGNORE_INDEX
    # Row 0's two adjacent spans are one run of masked tokens; row 1 is the same span.
    assert start[0][sel[0]].tolist() == [3] * 5 and end[0][sel[0]].tolist() == [7] * 5
    assert start[1][sel[1]].tolist() == [10] * 3 and end[1][sel[1]].tolist() == [12] * 3
    torch.manual_seed(0)
    model = spanbert.build(ModelConfig(**TINY, variant="spanbert")).eval()
    with_extra = model(b).metrics["sbo_loss"]
    b.extra = {}
    without = model(b).metrics["sbo_loss"]
    assert torch.isfinite(without) and not torch.equal(with_extra, without)


def test_mlm_only_objective_and_bad_objective():
    model = spanbert.build(ModelConfig(**TINY, variant="spanbert"), objective="mlm")
    assert model.sbo_head is None and "sbo_loss" not in model(span_batch()).metrics
    with pytest.raises(Exception, match="mlm\\+sbo"):
        spanbert.build(ModelConfig(**TINY), objective="mlm+nsp")


def test_every_preset_trains_a_step_and_round_trips(tmp_path):
    from bertzoo.hub import export_hf, load_encoder

    for name in spanbert.PRESETS:
        cfg = spanbert.model_config(
            {"preset": name, "vocab_size": 97, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64}
        )
        model = spanbert.build(cfg)
        out = model(span_batch())
        out.loss.backward()
        assert torch.isfinite(out.loss) and model.sbo_head.dense1.weight.grad is not None
    torch.manual_seed(0)
    model = spanbert.build(ModelConfig(**TINY, variant="spanbert"), sbo_max_positions=12).eval()
    model.save_pretrained(str(tmp_path / "m"))
    loaded = SpanBoundaryLM.from_pretrained(str(tmp_path / "m")).eval()
    assert loaded.sbo_head.position.num_embeddings == 12
    b = span_batch()
    torch.testing.assert_close(model(b).loss, loaded(b).loss, rtol=0, atol=0)
    enc = load_encoder(tmp_path / "m").eval()
    torch.testing.assert_close(enc(b.input_ids).last_hidden_state, model.encoder(b.input_ids).last_hidden_state)
    # Hugging Face: SpanBERT is a BERT model; the export drops the SBO head and loads in transformers.
    transformers = pytest.importorskip("transformers")
    export_hf(model, tmp_path / "hf")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        ours = model.mlm_head(model.encoder(b.input_ids, b.attention_mask).last_hidden_state)
        theirs = hf(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def tiny_run_config(shards, tmp_path, **overrides):
    """spanbert-mini.yaml at tiny width: 4 steps of 8 x 64 on `shards`, logged every step, one thread."""
    torch.set_num_threads(1)
    values = {
        "model": {"preset": "spanbert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64},
        "data.shards": str(shards),
        "data.max_seq_len": 64,
        "train.output_dir": str(tmp_path / "run"),
        "train.batch_size": 8,
        "train.max_steps": 4,
        "train.log_every": 1,
        "train.save_every": 0,
        "train.precision": "fp32",
    }
    return load_pretrain_config("configs/pretrain/spanbert-mini.yaml", {**values, **overrides})


def test_pretraining_end_to_end(synthetic_shards, tmp_path):
    from bertzoo.engine.loop import Trainer
    from bertzoo.train.pretrain import build_pretraining

    cfg = tiny_run_config(synthetic_shards, tmp_path)
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    assert isinstance(objective, SpanBoundaryLM) and objective.objective_name == "mlm+sbo"
    example = dataset[0]
    assert "next_sentence_label" not in example and (example["token_type_ids"] == 0).all()  # single segments
    batch = collator([dataset[i] for i in range(8)])
    assert (batch.extra["span_start"] >= 0).sum() == (batch.labels != IGNORE_INDEX).sum() > 0
    summary = Trainer(objective, dataset, collator, cfg.train, progress=False).train()
    assert summary["steps"] == 4
    assert np.isfinite(summary["final_metrics"]["sbo_loss"]) and np.isfinite(summary["final_metrics"]["mlm_loss"])


def test_sbo_start_leaves_the_encoder_to_masked_lm_until_then():
    b = span_batch()
    torch.manual_seed(0)
    late = spanbert.build(ModelConfig(**TINY, variant="spanbert"), sbo_start=0.5).eval()  # eval: no dropout draws
    mlm_only = spanbert.build(ModelConfig(**TINY, variant="spanbert"), objective="mlm").eval()
    mlm_only.load_state_dict({k: v for k, v in late.state_dict().items() if not k.startswith("sbo_head.")})
    late.set_progress(0.25)
    before = late(b)
    before.loss.backward()
    reference = mlm_only(b)
    reference.loss.backward()
    torch.testing.assert_close(before.loss, reference.loss)
    assert before.terms["sbo"][1] == 0.0 and torch.isfinite(before.metrics["sbo_loss"])
    # The encoder's gradient is masked LM's alone; the SBO head has a gradient (of zeros), as DDP needs.
    for (name, p), q in zip(late.encoder.named_parameters(), mlm_only.encoder.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert late.sbo_head.dense1.weight.grad is not None and not late.sbo_head.dense1.weight.grad.any()
    late.set_progress(0.5)
    after = late(b)
    torch.testing.assert_close(after.loss, after.metrics["mlm_loss"] + after.metrics["sbo_loss"])
    for bad in (1.0, -0.1, "half"):
        with pytest.raises(Exception, match="sbo_start"):
            spanbert.build(ModelConfig(**TINY, variant="spanbert"), sbo_start=bad)


def test_trainer_starts_sbo_at_its_fraction_of_training(synthetic_shards, tmp_path):
    import json

    from bertzoo.engine.loop import Trainer
    from bertzoo.train.pretrain import build_pretraining

    cfg = tiny_run_config(synthetic_shards, tmp_path, **{"objective_args.sbo_start": 0.5})
    objective, dataset, collator, _ = build_pretraining(cfg)
    Trainer(objective, dataset, collator, cfg.train, progress=False).train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "sbo_loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:  # steps 1-2 are at progress 0 and 0.25, before SBO's start; 3-4 at 0.5 and 0.75
        expected = r["mlm_loss"] + (r["sbo_loss"] if r["step"] > 2 else 0.0)
        assert r["loss"] == pytest.approx(expected, rel=1e-5), r
