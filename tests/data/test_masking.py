"""Counter-based randomness, MLM selection/corruption statistics and the pretraining collator."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX, Batch, pad_batch
from bertzoo.config import MaskingConfig
from bertzoo.data import rng
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.masking import SELECTORS, corrupt, mask_tokens, num_to_select, select_tokens
from bertzoo.data.tokens.tokenizer import SpecialIds
from bertzoo.errors import ConfigError

VOCAB = 30000
SPECIAL = SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
SPECIAL_IDS = np.array(sorted(SPECIAL))


# -- rng ----------------------------------------------------------------------------------------


def test_uniform_distribution():
    u = rng.uniform(1234, 0, np.arange(2000)[:, None], np.arange(512)[None, :], "test")
    assert u.shape == (2000, 512) and u.dtype == np.float64
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.002
    assert abs(u.var() - 1 / 12) < 0.001
    counts = np.bincount((u * 100).astype(int).ravel(), minlength=100)
    expected = u.size / 100
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 160  # 99 degrees of freedom: the 99.99th percentile is about 150
    # Neighbouring positions and neighbouring examples are uncorrelated.
    c = u - 0.5
    assert abs((c[:, 1:] * c[:, :-1]).mean()) / c.var() < 0.01
    assert abs((c[1:] * c[:-1]).mean()) / c.var() < 0.01


def test_uniform_is_a_pure_function_of_its_key():
    idx = np.array([5, 17, 3])[:, None]
    pos = np.arange(64)[None, :]
    a = rng.uniform(7, 2, idx, pos, "s")
    assert np.array_equal(a, rng.uniform(7, 2, idx, pos, "s"))
    # Computing a row alone or positions in another shape gives the same numbers.
    assert np.array_equal(a[1], rng.uniform(7, 2, 17, np.arange(64), "s"))
    assert np.array_equal(a[:, :10], rng.uniform(7, 2, idx, np.arange(10)[None, :], "s"))
    for other in (
        rng.uniform(8, 2, idx, pos, "s"),
        rng.uniform(7, 3, idx, pos, "s"),
        rng.uniform(7, 2, idx + 1, pos, "s"),
        rng.uniform(7, 2, idx, pos, "t"),
        rng.uniform(2, 7, idx, pos, "s"),  # swapping seed and epoch is another key
    ):
        assert not np.isclose(a, other).any()


def test_streams_are_independent():
    a = rng.uniform(0, 0, np.arange(500)[:, None], np.arange(200)[None, :], 1)
    b = rng.uniform(0, 0, np.arange(500)[:, None], np.arange(200)[None, :], 2)
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.01
    assert rng.stream_id("mlm/select") == rng.stream_id("mlm/select") != rng.stream_id("mlm/action")


def test_integers_and_keyed_generator():
    x = rng.integers(3, 0, np.arange(100_000), 0, 10, "i")
    assert x.dtype == np.int64 and x.min() == 0 and x.max() == 9
    counts = np.bincount(x, minlength=10)
    assert np.all(np.abs(counts - 10_000) < 500)
    g1, g2 = rng.KeyedRNG(1, 2, 3), rng.KeyedRNG(1, 2, 3)
    assert isinstance(g1, np.random.Generator)
    assert np.array_equal(g1.random(5), g2.random(5))
    assert not np.array_equal(rng.KeyedRNG(1, 2, 3).random(5), rng.KeyedRNG(1, 2, 4).random(5))
    assert not np.array_equal(rng.KeyedRNG(1, 2, 3).random(5), rng.KeyedRNG(1, 2, 3, "other").random(5))
    assert rng.KeyedRNG(-1, 0, 0).random() == rng.KeyedRNG(2**64 - 1, 0, 0).random()


# -- selection ----------------------------------------------------------------------------------


def _random_batch(n_rows, length, seed):
    """Rows of [CLS] tokens [SEP] tokens [SEP] + padding, random lengths, a few [UNK]s."""
    r = np.random.default_rng(seed)
    ids = r.integers(1000, VOCAB, size=(n_rows, length))
    lengths = r.integers(8, length + 1, size=n_rows)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = SPECIAL.pad
    ids[:, 0] = SPECIAL.cls
    ids[np.arange(n_rows), lengths - 1] = SPECIAL.sep
    ids[np.arange(n_rows), lengths // 2] = SPECIAL.sep
    ids[r.random(ids.shape) < 0.01] = SPECIAL.unk
    ids[np.arange(length)[None, :] >= lengths[:, None]] = SPECIAL.pad
    return ids, lengths


def test_select_exact_count_per_row():
    ids, lengths = _random_batch(300, 128, 0)
    special = np.isin(ids, SPECIAL_IDS)
    u = rng.uniform(0, 0, np.arange(300)[:, None], np.arange(128)[None, :], "sel")
    sel = select_tokens(ids, special, u, 0.15)
    n_cand = (~special).sum(1)
    assert np.array_equal(sel.sum(1), np.maximum(1, np.round(n_cand * 0.15)).astype(int))
    assert not (sel & special).any()
    capped = select_tokens(ids, special, u, 0.15, max_predictions=5)
    assert capped.sum(1).max() == 5 and not (capped & ~sel).any()  # the cap keeps the lowest keys
    assert SELECTORS["token"] is select_tokens


def test_num_to_select_edge_cases():
    assert num_to_select(np.array([0, 1, 3, 7, 10, 100]), 0.15).tolist() == [0, 1, 1, 1, 2, 15]
    assert num_to_select(np.array([200]), 0.15, max_predictions=20).tolist() == [20]


def test_masking_statistics_over_many_tokens():
    ids, lengths = _random_batch(2000, 128, 1)
    special = np.isin(ids, SPECIAL_IDS)
    assert (~special).sum() > 100_000
    replacement = np.setdiff1d(np.arange(VOCAB), SPECIAL_IDS)
    corrupted, labels = mask_tokens(
        ids,
        special,
        seed=3,
        epoch=0,
        index=np.arange(len(ids)),
        config=MaskingConfig(),
        mask_id=SPECIAL.mask,
        replacement_ids=replacement,
    )
    selected = labels != IGNORE_INDEX
    assert abs(selected.sum() / (~special).sum() - 0.15) < 0.005
    assert not (selected & special).any()  # specials and padding are never selected
    assert np.array_equal(labels[selected], ids[selected])
    assert np.array_equal(corrupted[~selected], ids[~selected])
    as_mask = corrupted[selected] == SPECIAL.mask
    kept = corrupted[selected] == ids[selected]
    random = ~as_mask & ~kept
    n = selected.sum()
    assert abs(as_mask.sum() / n - 0.8) < 0.01
    assert abs(random.sum() / n - 0.1) < 0.01
    assert abs(kept.sum() / n - 0.1) < 0.01
    assert not np.isin(corrupted[selected][random], SPECIAL_IDS).any()
    # Random replacements spread over the vocabulary.
    assert len(np.unique(corrupted[selected][random])) > 0.9 * random.sum()


def test_corrupt_groups_share_one_decision():
    r = np.random.default_rng(0)
    ids = r.integers(1000, VOCAB, size=(400, 60))
    selected = np.zeros_like(ids, dtype=bool)
    selected[:, 10:40] = True
    groups = np.broadcast_to((np.arange(60) // 5) * 5, ids.shape)  # spans of 5, keyed by first position
    u_action = r.random(ids.shape)
    u_token = r.random(ids.shape)
    replacement = np.arange(1000, VOCAB)
    out, labels = corrupt(
        ids, selected, u_action, u_token, mask_id=SPECIAL.mask, replacement_ids=replacement, groups=groups
    )
    action = np.where(out == SPECIAL.mask, 0, np.where(out == ids, 2, 1))[:, 10:40].reshape(400, 6, 5)
    assert np.all(action == action[:, :, :1])  # every span: one action for all its tokens
    share = np.bincount(action[:, :, 0].ravel(), minlength=3) / action[:, :, 0].size
    assert abs(share[0] - 0.8) < 0.03 and abs(share[1] - 0.1) < 0.03
    # One decision per row by broadcasting (B, 1).
    out_row, _ = corrupt(ids, selected, u_action[:, :1], u_token, mask_id=SPECIAL.mask, replacement_ids=replacement)
    row_action = np.where(out_row == SPECIAL.mask, 0, np.where(out_row == ids, 2, 1))[:, 10:40]
    assert np.all(row_action == row_action[:, :1])
    assert np.array_equal(labels, np.where(selected, ids, IGNORE_INDEX))


def test_corrupt_rates_are_parameters():
    r = np.random.default_rng(1)
    ids = r.integers(1000, VOCAB, size=(200, 100))
    selected = np.ones_like(ids, dtype=bool)
    out, _ = corrupt(
        ids,
        selected,
        r.random(ids.shape),
        r.random(ids.shape),
        mask_id=SPECIAL.mask,
        replacement_ids=np.arange(1000, VOCAB),
        replace_mask=0.5,
        replace_random=0.5,
    )
    assert abs((out == SPECIAL.mask).mean() - 0.5) < 0.02
    assert (out == ids).mean() < 0.01


# -- collator -----------------------------------------------------------------------------------


def _examples(n, seed, epoch=0):
    r = np.random.default_rng(seed)
    out = []
    for i in range(n):
        la, lb = r.integers(1, 60, size=2)
        ids = np.concatenate([[SPECIAL.cls], r.integers(1000, VOCAB, la), [SPECIAL.sep], r.integers(1000, VOCAB, lb)])
        ids = np.append(ids, SPECIAL.sep)
        types = np.zeros(len(ids), np.int64)
        types[la + 2 :] = 1
        out.append(
            {
                "input_ids": ids,
                "token_type_ids": types,
                "next_sentence_label": i % 2,
                "index": 1000 + i,
                "epoch": epoch,
            }
        )
    return out


@pytest.fixture(scope="module")
def collator():
    return PretrainingCollator(SPECIAL, MaskingConfig(), seed=5, vocab_size=VOCAB)


def test_collator_batch_fields(collator):
    examples = _examples(13, 0)
    batch = collator(examples)
    assert isinstance(batch, Batch)
    longest = max(len(e["input_ids"]) for e in examples)
    assert batch.input_ids.shape == (13, -(-longest // 8) * 8)
    for t in (batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.labels):
        assert t.dtype == torch.int64 and t.shape == batch.input_ids.shape
    assert batch.example_index.tolist() == [e["index"] for e in examples]
    assert batch.next_sentence_label.tolist() == [i % 2 for i in range(13)]
    for row, e in enumerate(examples):
        n = len(e["input_ids"])
        assert batch.attention_mask[row, :n].all() and not batch.attention_mask[row, n:].any()
        assert (batch.input_ids[row, n:] == SPECIAL.pad).all()
        assert (batch.labels[row, n:] == IGNORE_INDEX).all()
        assert batch.token_type_ids[row, :n].tolist() == e["token_type_ids"].tolist()
        selected = batch.labels[row] != IGNORE_INDEX
        assert batch.labels[row][selected].tolist() == e["input_ids"][selected[:n].numpy()].tolist()
        assert not np.isin(e["input_ids"][selected[:n].numpy()], SPECIAL_IDS).any()
    assert batch.num_tokens == sum(len(e["input_ids"]) for e in examples)


def test_same_example_same_mask_in_any_batch(collator):
    examples = _examples(40, 1)
    full = collator(examples)
    # A different composition and order, with a much longer neighbour changing the padding.
    long_one = _examples(1, 2)[0] | {
        "input_ids": np.full(200, 5000),
        "token_type_ids": np.zeros(200, np.int64),
    }
    subset = [examples[7], long_one, examples[3], examples[31]]
    part = collator(subset)
    for row_part, k in ((0, 7), (2, 3), (3, 31)):
        n = len(examples[k]["input_ids"])
        assert part.input_ids[row_part, :n].tolist() == full.input_ids[k, :n].tolist()
        assert part.labels[row_part, :n].tolist() == full.labels[k, :n].tolist()
    # Another epoch or seed gives another mask.
    other_epoch = collator([e | {"epoch": 1} for e in examples])
    assert not torch.equal(other_epoch.labels, full.labels)
    other_seed = PretrainingCollator(SPECIAL, MaskingConfig(), seed=6, vocab_size=VOCAB)(examples)
    assert not torch.equal(other_seed.labels, full.labels)


def test_collator_max_predictions_and_tokenizer(synthetic_tokenizer):
    col = PretrainingCollator(synthetic_tokenizer, MaskingConfig(mask_prob=0.5, max_predictions=3), seed=0)
    ids = np.concatenate([[synthetic_tokenizer.cls_id], np.arange(10, 60), [synthetic_tokenizer.sep_id]])
    batch = col([{"input_ids": ids, "index": i} for i in range(4)])
    assert ((batch.labels != IGNORE_INDEX).sum(1) == 3).all()
    assert batch.next_sentence_label is None and not batch.token_type_ids.any()
    assert not np.isin(col.replacement_ids, synthetic_tokenizer.special_ids).any()
    assert len(col.replacement_ids) == synthetic_tokenizer.vocab_size - 5


def test_collator_errors():
    with pytest.raises(ConfigError, match="needs vocab_size"):
        PretrainingCollator(SPECIAL, MaskingConfig(), seed=0)
    col = PretrainingCollator(SPECIAL, MaskingConfig(), seed=0, vocab_size=VOCAB)
    from bertzoo.errors import DataError

    with pytest.raises(DataError, match="need an 'index'"):
        col([{"input_ids": np.array([101, 5000, 102])}])
    with pytest.raises(DataError, match="outside the vocabulary"):
        col([{"input_ids": np.array([101, VOCAB + 5, 102]), "index": 0}])


def test_pad_batch():
    out, lengths = pad_batch([np.array([1, 2, 3]), np.array([4])], pad_id=9, pad_to_multiple_of=4)
    assert out.tolist() == [[1, 2, 3, 9], [4, 9, 9, 9]] and lengths.tolist() == [3, 1]


def test_collator_speed(collator):
    examples = []
    for e in _examples(32, 3):
        ids = np.resize(e["input_ids"], 128)
        examples.append(e | {"input_ids": ids, "token_type_ids": np.zeros(128, np.int64)})
    collator(examples)
    t = time.perf_counter()
    for _ in range(50):
        batch = collator(examples)
    per_batch = (time.perf_counter() - t) / 50
    assert batch.input_ids.shape == (32, 128)
    assert per_batch < 0.02, f"collating 32x128 took {per_batch * 1e3:.1f} ms"


# -- rarity-weighted selection (data.masking.frequency_power) ----------------------------------------


def test_equal_weights_leave_the_mask_unchanged(collator):
    examples = _examples(30, 0)
    weighted = PretrainingCollator(
        SPECIAL, MaskingConfig(), seed=5, vocab_size=VOCAB, token_weights=np.full(VOCAB, 3.0)
    )
    plain, same = collator(examples), weighted(examples)
    assert torch.equal(plain.labels, same.labels) and torch.equal(plain.input_ids, same.input_ids)


def test_weighted_selection_follows_the_weights():
    # Rows of 50 "common" (id 2000) and 50 "rare" (id 3000) tokens, one selected per row: the first
    # draw of weighted sampling picks a rare token with probability 9 * 50 / (9 * 50 + 1 * 50) = 0.9.
    weights = np.ones(VOCAB)
    weights[3000] = 9.0
    col = PretrainingCollator(SPECIAL, MaskingConfig(mask_prob=0.01), seed=1, vocab_size=VOCAB, token_weights=weights)
    ids = np.concatenate([[SPECIAL.cls], np.full(50, 2000), np.full(50, 3000), [SPECIAL.sep]])
    batch = col([{"input_ids": ids, "index": i} for i in range(3000)])
    picked = batch.labels[batch.labels != IGNORE_INDEX]
    assert len(picked) == 3000  # the budget is still round(mask_prob * candidates) = 1 per row
    share = float((picked == 3000).float().mean())
    assert abs(share - 0.9) < 0.02, share
    # Uniform selection on the same rows: half and half.
    plain = PretrainingCollator(SPECIAL, MaskingConfig(mask_prob=0.01), seed=1, vocab_size=VOCAB)
    uniform = plain([{"input_ids": ids, "index": i} for i in range(3000)]).labels
    assert abs(float((uniform[uniform != IGNORE_INDEX] == 3000).float().mean()) - 0.5) < 0.03


def test_weighted_selection_errors():
    for bad in (-0.5, 2.5, float("nan")):
        with pytest.raises(ConfigError, match="frequency_power"):
            MaskingConfig(frequency_power=bad)
    with pytest.raises(ConfigError, match="positive"):
        PretrainingCollator(SPECIAL, MaskingConfig(), seed=0, vocab_size=VOCAB, token_weights=np.zeros(VOCAB))
    with pytest.raises(ConfigError, match="one per vocabulary id"):
        PretrainingCollator(SPECIAL, MaskingConfig(), seed=0, vocab_size=VOCAB, token_weights=np.ones(10))
    ids = np.array([[101, 5, 6, 102]])
    with pytest.raises(ConfigError, match="token-level selection only"):
        mask_tokens(
            ids,
            ids >= 101,
            seed=0,
            epoch=0,
            index=np.array([0]),
            config=MaskingConfig(),
            mask_id=103,
            replacement_ids=np.arange(5, 50),
            selector="whole_word",
            starts=np.ones_like(ids, dtype=bool),
            position_weights=np.ones(ids.shape),
        )
