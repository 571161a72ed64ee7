"""UniLM: the four self-attention masks, the LM-type mix, the collator, training, and BERT/HF interop.

Expected masks are written out by hand (1 = the query of that row may attend the key of that column).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig, ModelConfig
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.collate_unilm import (
    LM_TYPES,
    UniLMCollator,
    check_shares,
    choose_lm_types,
    lm_attention_masks,
    ngram_starts,
)
from bertzoo.errors import ConfigError
from bertzoo.nn.masks import seq2seq_mask
from bertzoo.variants import unilm

# pad, unk, cls, sep, mask = 0..4; ordinary tokens from 5.
PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = (0, 1, 2, 3, 4)
VOCAB = 99
TINY = {"vocab_size": VOCAB, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64, "max_position": 64}


def t(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


# Row length 4 in a padded width of 5; for seq2seq the source is 2 tokens ([CLS] a), the target 2.
BI = t([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 1]])
L2R = t([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 1]])
R2L = t([[1, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]])
S2S = t([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 1]])
HAND = {"bidirectional": BI, "left_to_right": L2R, "right_to_left": R2L, "seq2seq": S2S}


def tiny_config(**overrides) -> ModelConfig:
    return unilm.model_config({"preset": "unilm-tiny", **TINY, **overrides})


def pair(index: int, a: list[int], b: list[int], epoch: int = 0) -> dict:
    """A segment-pair example `[CLS] a [SEP] b [SEP]` as the dataset yields it."""
    ids = np.array([CLS, *a, SEP, *b, SEP], dtype=np.int64)
    types = np.array([0] * (len(a) + 2) + [1] * (len(b) + 1), dtype=np.int64)
    return {"input_ids": ids, "token_type_ids": types, "index": index, "epoch": epoch}


def collator(mask_prob: float = 0.15, seed: int = 0, **kwargs) -> UniLMCollator:
    return UniLMCollator(
        SPECIAL, MaskingConfig(mask_prob=mask_prob), seed, vocab_size=VOCAB, pad_to_multiple_of=1, **kwargs
    )


def only(lm: str) -> dict[str, float]:
    return {lm: 1.0}


def random_examples(n: int, seed: int = 0, start: int = 0) -> list[dict]:
    g = np.random.default_rng(seed)

    def segment() -> list[int]:
        return g.integers(5, VOCAB, g.integers(1, 9)).tolist()

    return [pair(start + i, segment(), segment()) for i in range(n)]


# --- masks ---------------------------------------------------------------------------------------


def test_seq2seq_mask_by_hand():
    got = seq2seq_mask(torch.tensor([2, 3, 6]), torch.tensor([4, 6, 6]), 6)
    expected = t(
        [
            # source [CLS] a | target b [SEP] | 2 padding
            [1, 1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 1, 0],
            [0, 0, 0, 0, 0, 1],
        ]
    )
    assert got.shape == (3, 6, 6) and got.dtype == torch.bool
    assert torch.equal(got[0], expected)
    # No padding, a 3-token source: the source block is full, the target is causal after it.
    assert torch.equal(
        got[1],
        t(
            [
                [1, 1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [1, 1, 1, 1, 0, 0],
                [1, 1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1, 1],
            ]
        ),
    )
    assert got[2].all()  # the source is the whole row: bidirectional
    with pytest.raises(ValueError, match="source_length <= length"):
        seq2seq_mask(torch.tensor([5]), torch.tensor([4]), 6)
    with pytest.raises(ValueError, match="seq_len=3"):
        seq2seq_mask(torch.tensor([1]), torch.tensor([4]), 3)


@pytest.mark.parametrize("lm", LM_TYPES)
def test_each_lm_type_mask_by_hand(lm):
    lm_type = torch.tensor([LM_TYPES.index(lm)])
    got = lm_attention_masks(lm_type, torch.tensor([2]), torch.tensor([4]), 5)
    assert torch.equal(got[0], HAND[lm])


def test_lm_masks_agree_with_seq2seq_mask_on_random_lengths():
    """Bidirectional, left-to-right and seq2seq are `seq2seq_mask` with source = length, 0 and the
    source; right-to-left is the transpose of left-to-right, padded rows included."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 12, (64,), generator=g)
    source = (torch.rand(64, generator=g) * (lengths + 1)).long().clamp(max=lengths)
    l2r = seq2seq_mask(torch.zeros_like(lengths), lengths, 12)
    expected = {
        "bidirectional": seq2seq_mask(lengths, lengths, 12),
        "left_to_right": l2r,
        "right_to_left": l2r.transpose(1, 2),
        "seq2seq": seq2seq_mask(source, lengths, 12),
    }
    for i, lm in enumerate(LM_TYPES):
        assert torch.equal(lm_attention_masks(torch.full((64,), i), source, lengths, 12), expected[lm]), lm
    mixed = torch.randint(0, 4, (64,), generator=g)
    got = lm_attention_masks(mixed, source, lengths, 12)
    for row in range(64):
        assert torch.equal(got[row], expected[LM_TYPES[int(mixed[row])]][row])


def test_collator_masks_and_segment_ids_per_lm_type():
    """One example `[CLS] a [SEP] | b [SEP]` (source 3, target 2) beside a longer one, each LM type forced."""
    examples = [pair(0, [11], [12]), pair(1, [13, 14, 15], [16, 17])]
    src = t([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    expected = {
        "bidirectional": (torch.ones(5, 5, dtype=torch.bool), [0, 0, 0, 1, 1]),
        "left_to_right": (torch.ones(5, 5, dtype=torch.bool).tril(), [2, 2, 2, 2, 2]),
        "right_to_left": (torch.ones(5, 5, dtype=torch.bool).triu(), [3, 3, 3, 3, 3]),
        "seq2seq": (src, [4, 4, 4, 5, 5]),
    }
    own = torch.eye(8, dtype=torch.bool)
    for lm, (mask, segments) in expected.items():
        batch = collator(lm_shares=only(lm))(examples)
        pattern = batch.extra["attention_pattern"]
        assert pattern.shape == (2, 8, 8) and pattern.dtype == torch.bool
        assert torch.equal(pattern[0, :5, :5], mask), lm
        assert not pattern[0, :5, 5:].any()  # real queries never see padding
        assert torch.equal(pattern[0, 5:], own[5:])  # a padded query sees only itself
        assert batch.token_type_ids[0].tolist() == [*segments, 0, 0, 0], lm
        assert batch.extra["lm_type"].tolist() == [LM_TYPES.index(lm)] * 2
        assert batch.attention_mask.shape == (2, 8) and batch.num_tokens == 13
        assert batch.next_sentence_label is None
    # segments="pair" keeps BERT's 0/1 for every LM type.
    batch = collator(lm_shares=only("left_to_right"), segments="pair")(examples)
    assert batch.token_type_ids[1].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]


def test_lm_type_shares_over_many_examples():
    n = 30_000
    types = choose_lm_types(7, 0, np.arange(n), check_shares(None))
    counts = np.bincount(types, minlength=4) / n
    # Binomial standard error is <= 0.003 here; 0.01 is more than three of them.
    np.testing.assert_allclose(counts, [1 / 3, 1 / 6, 1 / 6, 1 / 3], atol=0.01)
    custom = check_shares({"bidirectional": 0.5, "seq2seq": 0.5})
    counts = np.bincount(choose_lm_types(7, 0, np.arange(n), custom), minlength=4) / n
    assert counts[1] == counts[2] == 0 and abs(counts[0] - 0.5) < 0.01
    # The collator draws the same mix.
    c = collator()
    drawn = np.concatenate([c(random_examples(200, seed=s, start=200 * s)).extra["lm_type"].numpy() for s in range(15)])
    np.testing.assert_allclose(np.bincount(drawn, minlength=4) / len(drawn), [1 / 3, 1 / 6, 1 / 6, 1 / 3], atol=0.03)


def test_lm_type_and_masking_are_keyed_by_seed_epoch_index():
    examples = random_examples(24)
    c = collator(mask_prob=0.3)
    whole = c(examples)
    # The same examples in other batches and orders get the same LM type, mask and corruption.
    part = c(examples[16:] + examples[5:9])
    for row, i in enumerate([*range(16, 24), *range(5, 9)]):
        n = len(examples[i]["input_ids"])
        assert part.extra["lm_type"][row] == whole.extra["lm_type"][i]
        assert torch.equal(part.input_ids[row, :n], whole.input_ids[i, :n])
        assert torch.equal(part.labels[row, :n], whole.labels[i, :n])
        assert torch.equal(part.extra["attention_pattern"][row, :n, :n], whole.extra["attention_pattern"][i, :n, :n])
        assert torch.equal(part.token_type_ids[row, :n], whole.token_type_ids[i, :n])
    again = collator(mask_prob=0.3)(examples)
    assert torch.equal(again.extra["attention_pattern"], whole.extra["attention_pattern"])
    assert torch.equal(again.input_ids, whole.input_ids)
    # Another epoch or seed draws again.
    other_epoch = c([{**e, "epoch": 1} for e in examples])
    other_seed = collator(mask_prob=0.3, seed=1)(examples)
    assert not torch.equal(other_epoch.extra["lm_type"], whole.extra["lm_type"])
    assert not torch.equal(other_seed.extra["lm_type"], whole.extra["lm_type"])


def test_ngram_units_and_token_masking_without_ngrams():
    starts = ngram_starts(3, np.zeros(400, dtype=np.int64), np.arange(400), 60, 0.2, 3)
    assert starts[:, 0].all()
    lengths = []
    for row in starts:
        first = np.flatnonzero(row)
        lengths += np.diff(first).tolist()  # complete units (the last one may run off the row)
    lengths = np.array(lengths)
    assert set(lengths.tolist()) == {1, 2, 3}
    assert abs((lengths > 1).mean() - 0.2) < 0.02 and abs((lengths == 2).mean() - 0.1) < 0.015
    # Without n-grams the masking is BERT's token masking, draw for draw.
    examples = random_examples(16)
    ours = collator(mask_prob=0.3, ngram_prob=0.0)(examples)
    bert = PretrainingCollator(SPECIAL, MaskingConfig(mask_prob=0.3), 0, vocab_size=VOCAB, pad_to_multiple_of=1)(
        examples
    )
    assert torch.equal(ours.input_ids, bert.input_ids) and torch.equal(ours.labels, bert.labels)
    # With n-grams every masked run is whole n-grams: some runs are longer than one token.
    batch = collator(mask_prob=0.3, ngram_prob=1.0)(random_examples(64, seed=1))
    selected = (batch.labels != IGNORE_INDEX).numpy()
    assert selected.any()
    padded = np.pad(selected, ((0, 0), (1, 1)))
    run_starts = np.flatnonzero((padded[:, 1:] & ~padded[:, :-1]).ravel())
    run_ends = np.flatnonzero((~padded[:, 1:] & padded[:, :-1]).ravel())
    assert (run_ends - run_starts).max() >= 2


def test_padding_is_never_attended_and_padded_queries_stay_finite():
    """Real outputs do not depend on what sits in the padding, for every LM type, and no output is NaN."""
    torch.manual_seed(0)
    model = unilm.build(tiny_config()).eval()
    examples = random_examples(12, seed=3)
    for lm in LM_TYPES:
        batch = collator(lm_shares=only(lm))(examples)
        pattern = batch.extra["attention_pattern"]
        real = batch.attention_mask.bool()
        assert not (pattern & real[:, :, None] & ~real[:, None, :]).any()
        noisy = batch.input_ids.masked_fill(~real, 50)
        with torch.no_grad():
            a = model.encoder(batch.input_ids, pattern, batch.token_type_ids).last_hidden_state
            b = model.encoder(noisy, pattern, batch.token_type_ids).last_hidden_state
            loss = model(batch).loss
        assert torch.isfinite(a).all() and torch.isfinite(loss), lm
        torch.testing.assert_close(a[real], b[real], rtol=0, atol=1e-6)


def test_the_model_attends_by_the_pattern():
    """Through the whole model: changing later tokens leaves a left-to-right prefix unchanged, changing
    earlier ones a right-to-left suffix, and changing the target leaves the seq2seq source unchanged."""
    torch.manual_seed(0)
    model = unilm.build(tiny_config()).eval()
    base = [pair(0, [10, 11, 12], [13, 14, 15])]  # source = 5 positions, target 4
    changed_end = [pair(0, [10, 11, 12], [13, 40, 41])]  # positions 6, 7 differ
    changed_start = [pair(0, [42, 11, 12], [13, 14, 15])]  # position 1 differs

    def hidden(examples, lm):
        batch = collator(lm_shares=only(lm))(examples)
        ids = torch.from_numpy(examples[0]["input_ids"])[None]  # unmasked: only the pattern and segments
        with torch.no_grad():
            return model.encoder(ids, batch.extra["attention_pattern"], batch.token_type_ids).last_hidden_state[0]

    torch.testing.assert_close(hidden(base, "left_to_right")[:6], hidden(changed_end, "left_to_right")[:6])
    torch.testing.assert_close(hidden(base, "seq2seq")[:6], hidden(changed_end, "seq2seq")[:6])
    torch.testing.assert_close(hidden(base, "right_to_left")[2:], hidden(changed_start, "right_to_left")[2:])
    assert not torch.allclose(hidden(base, "bidirectional")[:6], hidden(changed_end, "bidirectional")[:6])
    assert not torch.allclose(hidden(base, "seq2seq")[6:], hidden(changed_start, "seq2seq")[6:])


# --- configuration errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "shares,message",
    [
        ({"bidirectional": 0.5, "seq2seq": 0.4}, "sum to 1"),
        ({"bidirectional": 1.5, "seq2seq": -0.5}, ">= 0"),
        ({"bidirectional": "half", "seq2seq": 0.5}, "must be a number"),
        ({"forward": 1.0}, "unknown LM type 'forward'"),
        ([0.5, 0.5], "must be a mapping"),
    ],
)
def test_bad_shares(shares, message):
    with pytest.raises(ConfigError, match=message):
        check_shares(shares)
    with pytest.raises(ConfigError, match=message):
        unilm.build(tiny_config(), lm_shares=shares)


def test_bad_objective_args():
    cfg = tiny_config()
    with pytest.raises(ConfigError, match="unknown objective_args key nsp"):
        unilm.build(cfg, nsp=True)
    with pytest.raises(ConfigError, match="ngram_prob"):
        unilm.build(cfg, ngram_prob=1.5)
    with pytest.raises(ConfigError, match="segments"):
        unilm.build(cfg, segments="per_type")
    with pytest.raises(ConfigError, match="type_vocab_size=2"):
        unilm.build(tiny_config(type_vocab_size=2))
    assert unilm.build(tiny_config(type_vocab_size=2), segments="pair").encoder.config.type_vocab_size == 2
    with pytest.raises(ConfigError, match="not available for UniLM"):
        unilm.build(cfg, "mlm+nsp")
    with pytest.raises(ConfigError, match="strategy"):
        UniLMCollator(SPECIAL, MaskingConfig(strategy="span"), 0, vocab_size=VOCAB)


# --- training and the command line ----------------------------------------------------------


def unilm_run_config(shards, out, **train):
    from helpers.pretrain import tiny_config as bert_tiny_config

    cfg = bert_tiny_config(shards, out, **train)
    cfg.variant = "unilm"
    cfg.objective = ""
    cfg.model = {"preset": "unilm-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}
    return cfg


def test_thirty_steps_lower_the_loss(synthetic_shards, tmp_path):
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.train.pretrain import build_pretraining, pretrain

    torch.set_num_threads(1)
    cfg = unilm_run_config(synthetic_shards, tmp_path / "run", max_steps=30, save_every=0, precision="fp32", lr=3e-3)
    objective, dataset, collate, _ = build_pretraining(cfg)
    assert objective.encoder.config.type_vocab_size == 6 and objective.nsp_head is None
    example = dataset[0]
    assert (example["token_type_ids"] == 1).any() and "next_sentence_label" in example  # consecutive pairs
    held_out = [collate([dataset[i] for i in range(s, s + 16)]) for s in range(len(dataset) - 48, len(dataset), 16)]
    assert {int(x) for b in held_out for x in b.extra["lm_type"]} == {0, 1, 2, 3}

    def loss(model) -> float:
        model.eval()
        with torch.no_grad():
            return float(np.mean([float(model(b).metrics["mlm_loss"]) for b in held_out]))

    before = loss(objective)
    summary = pretrain(cfg)
    assert summary["steps"] == 30
    after = loss(MaskedLM.from_pretrained(str(tmp_path / "run" / "final")))
    assert after < before - 0.2, (before, after)  # 6.37 -> 6.02 when written


def test_cli_pretrain_with_the_unilm_config(synthetic_shards, tmp_path, capsys):
    from bertzoo.cli import main

    common = [
        "pretrain",
        "configs/pretrain/unilm-mini.yaml",
        "--model.preset",
        "unilm-tiny",
        "--model.hidden_size",
        "32",
        "--model.num_heads",
        "2",
        "--model.intermediate_size",
        "64",
        "--data.shards",
        str(synthetic_shards),
        "--data.max_seq_len",
        "48",
        "--train.batch_size",
        "4",
        "--train.threads",
        "1",
        "--train.precision",
        "fp32",
    ]
    code = main([*common, "--train.output_dir", str(tmp_path / "ok"), "--train.max_steps", "3"])
    assert code == 0
    assert (tmp_path / "ok" / "final" / "model.safetensors").is_file()
    capsys.readouterr()
    code = main(
        [*common, "--train.output_dir", str(tmp_path / "bad"), "--objective_args.lm_shares.bidirectional", "0.9"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "lm_shares must sum to 1" in err[0]


# --- a UniLM checkpoint is a BERT checkpoint ---------------------------------------------------


def four_d(batch) -> torch.Tensor:
    return batch.extra["attention_pattern"][:, None]  # (batch, 1, seq, seq), as transformers takes it


def mixed_batch():
    """Eight padded examples of all four LM types (indices 32..39 draw 0 1 3 1 1 0 0 2 under seed 0)."""
    batch = collator(mask_prob=0.2)(random_examples(8, seed=5, start=32))
    assert set(batch.extra["lm_type"].tolist()) == {0, 1, 2, 3}
    return batch


def test_save_load_as_bert_and_hf_parity_with_a_4d_mask(tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertzoo.hub import export_hf, load_encoder, load_pretraining

    torch.manual_seed(0)
    model = unilm.build(tiny_config()).eval()
    batch = mixed_batch()
    model.save_pretrained(str(tmp_path / "m"))
    loaded = load_pretraining(tmp_path / "m").eval()
    assert type(loaded).__name__ == "MaskedLM" and loaded.config.variant == "unilm"
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch).loss, model(batch).loss, rtol=0, atol=0)
    real = batch.attention_mask.bool()
    encoder = load_encoder(tmp_path / "m").eval()
    export_hf(model, tmp_path / "hf")
    assert transformers.AutoConfig.from_pretrained(tmp_path / "hf").model_type == "bert"
    for impl in ("sdpa", "eager"):
        hf_mlm = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf", attn_implementation=impl).eval()
        hf_base = transformers.BertModel.from_pretrained(tmp_path / "hf", attn_implementation=impl).eval()
        mask = four_d(batch)
        if impl == "eager":  # eager attention adds the mask: 0 = keep, most negative = drop
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        with torch.no_grad():
            ours = model.encode(batch).last_hidden_state
            logits = model.mlm_head(ours)
            theirs = hf_base(input_ids=batch.input_ids, attention_mask=mask, token_type_ids=batch.token_type_ids)
            their_logits = hf_mlm(
                input_ids=batch.input_ids, attention_mask=mask, token_type_ids=batch.token_type_ids
            ).logits
            reloaded = encoder(batch.input_ids, batch.extra["attention_pattern"], batch.token_type_ids)
        torch.testing.assert_close(theirs.last_hidden_state[real], ours[real], rtol=0, atol=1e-5)
        torch.testing.assert_close(their_logits[real], logits[real], rtol=0, atol=1e-5)
        torch.testing.assert_close(reloaded.last_hidden_state[real], ours[real], rtol=0, atol=1e-5)


def test_hf_bert_imports_and_attends_by_a_4d_mask(tmp_path):
    """The other way: a random transformers BertModel with 6 segment rows, imported, equals itself
    under the UniLM masks."""
    transformers = pytest.importorskip("transformers")
    from bertzoo.hub import load_encoder

    torch.manual_seed(1)
    hf = transformers.BertModel(
        transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            type_vocab_size=6,
        )
    ).eval()
    hf.save_pretrained(tmp_path)
    encoder = load_encoder(tmp_path).eval()
    assert encoder.config.type_vocab_size == 6
    batch = mixed_batch()
    real = batch.attention_mask.bool()
    with torch.no_grad():
        theirs = hf(input_ids=batch.input_ids, attention_mask=four_d(batch), token_type_ids=batch.token_type_ids)
        ours = encoder(batch.input_ids, batch.extra["attention_pattern"], batch.token_type_ids)
    torch.testing.assert_close(ours.last_hidden_state[real], theirs.last_hidden_state[real], rtol=0, atol=1e-5)
