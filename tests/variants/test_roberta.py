"""RoBERTa: presets, learned positions from pad + 1, FULL-/DOC-SENTENCES inputs, token-budget
batches, static vs dynamic masking, save/load, pretraining end to end and Hugging Face parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import DataConfig, MaskingConfig, load_pretrain_config
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.examples import DocSentencesDataset, FullSentencesDataset, pretraining_dataset
from bertzoo.data.pretraining.token_batches import TokenBudgetDataset, pack_token_budget
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.engine.loop import Trainer
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.hub import export_hf, load_encoder, load_pretraining
from bertzoo.train.pretrain import build_pretraining
from bertzoo.variants import get_variant, roberta

from helpers.parity import assert_parity, inputs, reference, transformers

CLS, SEP = 2, 3  # the synthetic WordPiece tokenizer's [CLS]/[SEP]: any tokenizer works by role
TINY = {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


@pytest.fixture(scope="module")
def corpus(synthetic_shards) -> ShardedCorpus:
    return ShardedCorpus(synthetic_shards)


def _doc_of_token(corpus, positions):
    doc_token_start = corpus.sentence_offsets[corpus.doc_offsets]
    return np.searchsorted(doc_token_start, positions, side="right") - 1


def _batch(config, seed=0, n=3, seq=17):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (n, seq), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 3:9] = ids[:, 3:9]
    return Batch(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)


# --- model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", list(roberta.PRESETS))
def test_every_preset_builds_and_trains_a_step(preset):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = roberta.model_config({"preset": preset, **TINY, "vocab_size": 99})
    assert (config.variant, config.type_vocab_size, config.layer_norm_eps, config.pooler) == ("roberta", 1, 1e-5, False)
    assert config.position_offset == config.pad_token_id + 1 == 2
    model = roberta.build(config)
    assert model.nsp_head is None and model.objective_name == "mlm"
    before = model.encoder.embeddings.word.weight.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98))
    out = model(_batch(config))
    assert torch.isfinite(out.loss) and set(out.metrics) == {"mlm_loss", "mlm_acc", "loss"}
    out.loss.backward()
    opt.step()
    assert not torch.equal(before, model.encoder.embeddings.word.weight)
    with pytest.raises(ConfigError, match="not available for RoBERTa"):
        roberta.build(config, "mlm+nsp")


def test_positions_start_after_the_padding_id():
    """Rows 0..pad of the position table are never read by real tokens (as in RoBERTa checkpoints)."""
    config = roberta.model_config({**TINY, "vocab_size": 99, "dropout": 0.0, "attention_dropout": 0.0})
    encoder = roberta.build(config).encoder.eval()
    table = encoder.embeddings.position.weight
    assert table.shape[0] == config.max_position + 2
    batch = _batch(config, seq=config.max_position)  # the longest sequence uses the last row
    with torch.no_grad():
        ref = encoder(batch.input_ids).last_hidden_state
        table[:2] += 5.0  # rows 0 and 1 (= pad id): unused
        assert torch.equal(encoder(batch.input_ids).last_hidden_state, ref)
        table[2] += 5.0  # row pad + 1: the first token's position
        changed = encoder(batch.input_ids).last_hidden_state
    assert not torch.allclose(changed, ref)


def test_parameter_counts_match_published(tmp_path):
    transformers = pytest.importorskip("transformers")
    published = {"roberta-base": 125e6, "roberta-large": 355e6}
    for name, figure in published.items():
        config = roberta.model_config({"preset": name})
        hf_config = transformers.RobertaConfig(**roberta.config_to_hf(config, ["BertForMaskedLM"]))
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            ours = roberta.build(config)
            theirs = transformers.RobertaForMaskedLM(hf_config)
        n_ours = sum(p.numel() for p in {id(p): p for p in ours.parameters()}.values())
        assert n_ours == theirs.num_parameters()
        assert abs(n_ours - figure) / figure < 0.02, (name, n_ours)


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(1)
    config = roberta.model_config({**TINY, "vocab_size": 99, "pad_token_id": 1})
    model = roberta.build(config).eval()
    model.save_pretrained(str(tmp_path))
    loaded = load_pretraining(tmp_path).eval()
    assert loaded.config == config and loaded.objective_name == "mlm"
    batch = _batch(config)
    with torch.no_grad():
        assert torch.equal(model(batch).loss, loaded(batch).loss)
    encoder = load_encoder(tmp_path)
    assert encoder.config.position_offset == 2 and encoder.pooler is None


# --- Hugging Face parity -----------------------------------------------------------------------


def test_hf_masked_lm_imports_as_roberta_and_exports_as_its_class(tmp_path):
    hf = reference("roberta", "RobertaForMaskedLM", seed=0)
    hf.save_pretrained(tmp_path / "src")
    model = load_pretraining(tmp_path / "src").eval()
    assert model.config.variant == "roberta" and model.config.max_position == 64 and model.encoder.pooler is None
    assert_parity(model, hf, inputs("roberta"))
    export_hf(model, tmp_path / "out")
    back = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
    assert type(back).__name__ == "RobertaForMaskedLM"
    assert_parity(model, back, inputs("roberta", seed=1))


def test_hf_base_model_keeps_its_pooler(tmp_path):
    hf = reference("roberta", "RobertaModel", seed=1)
    hf.save_pretrained(tmp_path / "src")
    encoder = load_encoder(tmp_path / "src").eval()
    assert encoder.pooler is not None and encoder.config.position_offset == 2
    assert_parity(encoder, hf, inputs("roberta"))
    back = transformers.AutoModel.from_pretrained(export_hf(encoder, tmp_path / "out")).eval()
    assert_parity(encoder, back, inputs("roberta", seed=2))


def test_export_refuses_what_hf_roberta_cannot_hold():
    config = roberta.model_config({**TINY, "vocab_size": 99, "position_offset": 0})
    with pytest.raises(CheckpointError, match="numbers positions from pad_token_id"):
        roberta.config_to_hf(config)
    with pytest.raises(CheckpointError, match="RobertaForSequenceClassification has its own head"):
        roberta.config_to_hf(roberta.model_config(TINY), ["BertForSequenceClassification"])


# --- input formats ----------------------------------------------------------------------------


def test_full_sentences_pack_across_documents_with_separators(corpus):
    ds = FullSentencesDataset(corpus, (CLS, SEP), 64, seed=3)
    plan = ds.plan
    # Every token of the corpus, in order, exactly once.
    assert plan.a[0, 0] == 0 and plan.a[-1, 1] == corpus.num_tokens
    assert np.array_equal(plan.a[1:, 0], plan.a[:-1, 1])
    lengths = ds.example_lengths()
    assert lengths.max() <= 64
    # Packed greedily: the sentence that starts the next example (plus its separator when it starts a
    # document) would not have fitted into this one.
    doc_starts = set(corpus.sentence_offsets[corpus.doc_offsets[:-1]].tolist())
    nxt = plan.a[1:, 0]
    s = np.searchsorted(corpus.sentence_offsets, nxt)
    whole = corpus.sentence_offsets[s] == nxt  # the next example starts a sentence (not a window)
    cost = corpus.sentence_lengths[np.minimum(s, corpus.num_sentences - 1)] + np.isin(nxt, list(doc_starts))
    assert whole.mean() > 0.9 and np.all((lengths[:-1] - 2 + cost > 62)[whole])
    sentence_starts = set(corpus.sentence_offsets.tolist())
    crossing = 0
    for i in range(0, len(ds), 7):
        ex = ds[i]
        ids = ex["input_ids"]
        assert ids[0] == CLS and ids[-1] == SEP and len(ids) == lengths[i] and not ex["token_type_ids"].any()
        sa, ea = plan.a[i]
        inside = sorted(d for d in doc_starts if sa < d < ea)
        crossing += bool(inside)
        # A separator exactly where each document ends inside the example, and nowhere else.
        body = ids[1:-1]
        assert np.count_nonzero(body == SEP) == len(inside)
        assert np.delete(body, np.flatnonzero(body == SEP)).tolist() == corpus.token_range(sa, ea).tolist()
        cut = np.flatnonzero(body == SEP) - np.arange(len(inside))
        assert (cut + sa).tolist() == inside
        # Examples start at a sentence boundary unless they continue a sentence longer than the target.
        assert sa in sentence_starts or ea - sa == 62 or plan.a[i - 1, 1] - plan.a[i - 1, 0] == 62
    assert crossing > 50  # examples do span documents (about one in eight here)
    # RoBERTa mixes in no short sequences: the plan is the same every epoch.
    ds.set_epoch(4)
    assert np.array_equal(ds.plan.a, plan.a) and ds[0]["epoch"] == 4


def test_doc_sentences_stay_inside_one_document(corpus):
    ds = DocSentencesDataset(corpus, (CLS, SEP), 64, seed=3)
    a = ds.plan.a
    assert np.array_equal(_doc_of_token(corpus, a[:, 0]), _doc_of_token(corpus, a[:, 1] - 1))
    lengths = ds.example_lengths()
    assert lengths.max() <= 64
    # Every document's last example is usually short: that is what token-budget batches compensate.
    assert np.mean(lengths < 40) > 0.2
    ex = ds[5]
    assert ex["input_ids"][0] == CLS and ex["input_ids"][-1] == SEP and "next_sentence_label" not in ex


def test_token_budget_bins_keep_tokens_per_batch_constant(corpus):
    doc = DocSentencesDataset(corpus, (CLS, SEP), 64, seed=3)
    budget = 512
    bins = TokenBudgetDataset(doc, budget, seed=3, pad_to_multiple_of=8)
    lengths = doc.example_lengths()
    padded = -(-lengths // 8) * 8
    seen = np.concatenate([bins.bin_indices(i) for i in range(len(bins))])
    assert np.array_equal(np.sort(seen), np.arange(len(doc)))  # every example exactly once per epoch
    sizes, costs, real = [], [], []
    for i in range(len(bins)):
        idx = bins.bin_indices(i)
        sizes.append(len(idx))
        costs.append(len(idx) * padded[idx].max())
        real.append(lengths[idx].sum())
    costs, sizes = np.array(costs), np.array(sizes)
    assert costs.max() <= budget
    assert np.mean(costs[:-1] > budget - 64) > 0.95  # every bin but the last is (nearly) full
    assert sizes.max() > 2 * (budget // 64)  # short examples come many to a batch
    assert np.mean(real) > 0.8 * budget  # and the real tokens per batch stay near the budget
    # The collator flattens bins; one bin per micro-batch.
    batch = PretrainingCollator((0, 1, CLS, SEP, 4), MaskingConfig(), seed=0, vocab_size=corpus.vocab_size)([bins[0]])
    assert batch.input_ids.shape[0] == sizes[0] and batch.input_ids.numel() <= budget
    # Another epoch mixes equal lengths differently; the bin count stays fixed.
    first = [bins.bin_indices(i).tolist() for i in range(len(bins))]
    bins.set_epoch(1)
    assert len(bins) == len(first) and [bins.bin_indices(i).tolist() for i in range(len(bins))] != first
    with pytest.raises(ConfigError, match="smaller than the longest example"):
        pack_token_budget(np.array([10, 70]), 64, seed=0, epoch=0)


def test_input_format_errors(corpus, synthetic_tokenizer, tmp_path):
    with pytest.raises(ConfigError, match="not an input format"):
        pretraining_dataset("paragraphs", corpus, synthetic_tokenizer, DataConfig(), seed=0)
    cfg = load_pretrain_config(None, {"variant": "roberta", "data.input_format": "segment_pair"})
    with pytest.raises(ConfigError, match="not a RoBERTa input format"):
        roberta.examples(cfg, corpus, synthetic_tokenizer)


# --- masking ----------------------------------------------------------------------------------


def test_static_masks_repeat_every_n_epochs_dynamic_masks_do_not(corpus):
    ds = FullSentencesDataset(corpus, (CLS, SEP), 64, seed=3)
    special = (0, 1, CLS, SEP, 4)

    def labels(collator, epoch):
        ds.set_epoch(epoch)
        return collator([ds[i] for i in range(16)]).labels

    static = PretrainingCollator(special, MaskingConfig(static_copies=3), seed=0, vocab_size=corpus.vocab_size)
    masks = [labels(static, e) for e in range(7)]
    for e in range(7):
        for f in range(7):
            assert torch.equal(masks[e], masks[f]) == (e % 3 == f % 3)
    dynamic = PretrainingCollator(special, MaskingConfig(), seed=0, vocab_size=corpus.vocab_size)
    assert not torch.equal(labels(dynamic, 0), labels(dynamic, 3))
    # static_copies=N keys the mask by epoch % N: epoch 5's mask is dynamic masking's epoch 2 mask.
    assert torch.equal(labels(static, 5), labels(dynamic, 2))
    # A static mask still selects ~15% of the tokens with the 80/10/10 corruption.
    ds.set_epoch(0)
    batch = static([ds[i] for i in range(200)])
    chosen = batch.labels != IGNORE_INDEX
    assert abs(chosen.sum().item() / (batch.attention_mask.sum().item() - 400) - 0.15) < 0.01
    with pytest.raises(ConfigError, match="static_copies must be >= 0"):
        PretrainingCollator(special, MaskingConfig(static_copies=-1), seed=0, vocab_size=corpus.vocab_size)


# --- pretraining end to end --------------------------------------------------------------------


def _config(shards, out, **overrides):
    values = {
        "data.shards": str(shards),
        "data.max_seq_len": 48,
        "data.short_seq_prob": 0.0,
        "train.output_dir": str(out),
        "train.batch_size": 8,
        "train.max_steps": 4,
        "train.lr": 1e-3,
        "train.log_every": 2,
        "train.save_every": 4,
        "train.threads": 1,
    }
    values.update(overrides)
    cfg = load_pretrain_config("configs/pretrain/roberta-mini.yaml", values)
    cfg.model = {"preset": "roberta-mini", **TINY}
    return cfg


@pytest.mark.parametrize("fmt", ["full_sentences", "doc_sentences"])
def test_pretraining_runs_from_the_mini_config(synthetic_shards, tmp_path, fmt):
    torch.set_num_threads(1)
    extra = {"data.input_format": fmt}
    if fmt == "doc_sentences":
        extra.update({"data.tokens_per_batch": 384, "train.batch_size": 1})
    cfg = _config(synthetic_shards, tmp_path, **extra)
    assert cfg.variant == "roberta" and cfg.train.adam_beta2 == 0.98
    cfg.train.grad_accum = 2  # the paper's large batches by accumulation (the mini config's CPU recipe takes 1)
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    config = objective.config
    assert config.pad_token_id == tokenizer.pad_id and config.position_offset == tokenizer.pad_id + 1
    assert isinstance(dataset, TokenBudgetDataset) == (fmt == "doc_sentences")
    summary = Trainer(objective, dataset, collator, cfg.train, save_extra=tokenizer.save).train()
    assert summary["steps"] == 4
    final = load_pretraining(tmp_path / "final")
    assert final.config.variant == "roberta" and final.objective_name == "mlm"
    assert get_variant("roberta") is roberta.FAMILY
