"""Encoder-decoder pretraining collators (T5 objectives, MASS): exact structures on hand-built examples
and statistics over many keyed examples. Expected values are written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from bertzoo.batch import IGNORE_INDEX
from bertzoo.data.pretraining.collate_seq2seq import (
    DeshuffleCollator,
    IIDMaskCollator,
    MassCollator,
    PrefixLMCollator,
    SpanCorruptionCollator,
    random_spans_noise_mask,
    seq2seq_collator,
    span_corruption,
)
from bertzoo.data.rng import KeyedRNG
from bertzoo.errors import ConfigError, DataError

# pad, unk, cls, sep, mask = 0..4; text tokens from 10; EOS (when used) is 5.
PAD, UNK, CLS, SEP, MASK, EOS = 0, 1, 2, 3, 4, 5
SPECIAL = (PAD, UNK, CLS, SEP, MASK)
VOCAB = 200  # sentinels 199, 198, ... (num_sentinels 100: ids 100..199)


def ex(tokens, index: int, epoch: int = 0) -> dict:
    return {"input_ids": np.asarray(tokens, dtype=np.int64), "index": index, "epoch": epoch}


def rows(tensor) -> list[list[int]]:
    return tensor.tolist()


# ---------------------------------------------------------------------------------------------
# Span corruption: structure
# ---------------------------------------------------------------------------------------------


def test_span_corruption_structure_by_hand():
    tokens = np.arange(10, 20)  # 10 11 12 13 14 15 16 17 18 19
    mask = np.array([0, 0, 1, 1, 0, 0, 0, 1, 0, 0], dtype=bool)
    inputs, targets = span_corruption(tokens, mask, vocab_size=100)
    assert inputs.tolist() == [10, 11, 99, 14, 15, 16, 98, 18, 19]
    assert targets.tolist() == [99, 12, 13, 98, 17, 97]  # sentinel + span for each span, then a final sentinel


def test_span_corruption_starting_and_ending_with_noise():
    tokens = np.arange(10, 16)
    mask = np.array([1, 0, 0, 1, 1, 1], dtype=bool)
    inputs, targets = span_corruption(tokens, mask, vocab_size=50)
    assert inputs.tolist() == [49, 11, 12, 48]
    assert targets.tolist() == [49, 10, 48, 13, 14, 15, 47]


def test_span_corruption_batch_contract():
    """T5's fields: encoder padded with pad, labels with -100, decoder input = labels shifted right from
    the pad id (T5's decoder start) with -100 -> pad, decoder mask 1 at real positions, EOS at the ends."""
    c = SpanCorruptionCollator(SPECIAL, 0, vocab_size=VOCAB, eos_id=EOS, pad_to_multiple_of=1)
    batch = c([ex(range(10, 30), 0), ex(range(10, 18), 1)])
    ids, labels = rows(batch.input_ids), rows(batch.labels)
    dec, dec_mask = rows(batch.extra["decoder_input_ids"]), rows(batch.extra["decoder_attention_mask"])
    lengths = batch.attention_mask.sum(1).tolist()
    for r in range(2):
        n_in = lengths[r]
        assert ids[r][n_in - 1] == EOS and all(t == PAD for t in ids[r][n_in:])
        n_out = sum(dec_mask[r])
        assert labels[r][n_out - 1] == EOS and all(t == IGNORE_INDEX for t in labels[r][n_out:])
        # Hugging Face's shift: the whole padded row moves (the position after the last label holds it).
        assert dec[r] == [PAD] + [PAD if t == IGNORE_INDEX else t for t in labels[r][:-1]]
        # 20 tokens: 3 noise tokens; 8 tokens: round(1.2) = 1 noise token.
        noise = [t for t in labels[r][:n_out] if 10 <= t < 30]
        assert len(noise) == (3 if r == 0 else 1)
        sentinels = [t for t in labels[r][:n_out] if t >= 100]
        assert sentinels == list(range(199, 199 - len(sentinels), -1))
        # Input = the text with each span replaced by its sentinel (the same sentinels, in order).
        assert [t for t in ids[r][:n_in] if t >= 100] == sentinels[:-1]
        assert sorted([t for t in ids[r][:n_in] if 10 <= t < 30] + noise) == list(range(10, 30 if r == 0 else 18))
    assert batch.token_type_ids is None and batch.example_index.tolist() == [0, 1]


def test_drop_special_removes_bert_markers():
    c = PrefixLMCollator(SPECIAL, 0, vocab_size=VOCAB, pad_to_multiple_of=1)
    batch = c([ex([CLS, 10, 11, SEP, 12, SEP, PAD], 0)])
    text = [t for t in batch.input_ids[0].tolist() + batch.labels[0].tolist() if t != IGNORE_INDEX]
    assert text == [10, 11, 12]


def test_upstream_mask_never_starts_with_noise_and_always_ends_with_it():
    """The bug being fixed: T5's unrolled interleaving (clean, noise, ..., clean, noise)."""
    for i in range(200):
        mask = random_spans_noise_mask(20, 0.15, 3.0, KeyedRNG(0, 0, i), roll=False)
        assert not mask[0] and mask[-1] and mask.sum() == 3


def test_span_corruption_statistics_on_short_inputs():
    """Rolled: every position about equally likely to be noise (first and last included), density
    exactly round(0.15 L) / L, mean span about 3."""
    length, n = 20, 4000
    c = SpanCorruptionCollator(SPECIAL, 123, vocab_size=VOCAB, pad_to_multiple_of=1)
    noise = np.zeros((n, length))
    for start in range(0, n, 500):
        batch = c([ex(range(10, 10 + length), i) for i in range(start, start + 500)])
        for r, label_row in enumerate(batch.labels.tolist()):
            for t in label_row:
                if 10 <= t < 10 + length:
                    noise[start + r, t - 10] = 1
    assert (noise.sum(1) == 3).all()  # round(20 * 0.15) noise tokens in every example
    rate = noise.mean(0)
    assert np.abs(rate - 0.15).max() < 0.035, rate
    assert 0.1 < rate[0] < 0.2 and 0.1 < rate[-1] < 0.2  # first token sometimes noise, last sometimes clean

    length, n = 40, 2000  # 6 noise tokens in round(6 / 3) = 2 spans; a span wraps in 4/40 of the examples
    runs, first_and_last = [], 0
    for i in range(n):
        mask = random_spans_noise_mask(length, 0.15, 3.0, KeyedRNG(7, 0, i))
        starts = mask & ~np.concatenate([[False], mask[:-1]])
        runs.append(starts.sum())
        first_and_last += bool(mask[0] and mask[-1])
    mean_span = 6 * n / sum(runs)
    assert 2.7 < mean_span < 3.0, mean_span
    assert 0.07 < first_and_last / n < 0.13


def test_span_corruption_is_keyed_by_example_not_batch():
    c = SpanCorruptionCollator(SPECIAL, 5, vocab_size=VOCAB, pad_to_multiple_of=1)
    alone = c([ex(range(10, 40), 7)])
    mixed = c([ex(range(10, 90), 3), ex(range(10, 40), 7)])
    n = int(alone.attention_mask.sum())
    assert mixed.input_ids[1, :n].tolist() == alone.input_ids[0, :n].tolist()
    m = int(alone.extra["decoder_attention_mask"].sum())
    assert mixed.labels[1, :m].tolist() == alone.labels[0, :m].tolist()
    other_epochs = [c([ex(range(10, 40), 7, epoch=e)]).labels[0].tolist() for e in range(1, 6)]
    assert any(o != alone.labels[0].tolist() for o in other_epochs)


def test_sentinel_room_is_checked():
    SpanCorruptionCollator(SPECIAL, 0, vocab_size=105)  # ids 5..104 are free for 100 sentinels
    with pytest.raises(ConfigError, match="no room for 100 sentinels above the special id 4"):
        SpanCorruptionCollator(SPECIAL, 0, vocab_size=104)
    with pytest.raises(ConfigError, match="no room for 100 sentinels above the special id 5"):
        SpanCorruptionCollator(SPECIAL, 0, vocab_size=105, eos_id=EOS)
    c = SpanCorruptionCollator(SPECIAL, 0, vocab_size=VOCAB, num_sentinels=2, pad_to_multiple_of=1)
    with pytest.raises(ConfigError, match="needs .* sentinels, more than num_sentinels=2"):
        c([ex(range(10, 90), 0)])  # 12 noise tokens in 4 spans: 5 sentinels
    with pytest.raises(DataError, match="sentinel ids"):
        c([ex([10, 11, 198, 12], 0)])


def test_a_tokenizer_without_sentinel_tokens_needs_ids_of_their_own(synthetic_tokenizer):
    size = synthetic_tokenizer.vocab_size
    with pytest.raises(ConfigError, match=f"set vocab_size to the tokenizer's {size} \\+ 100"):
        SpanCorruptionCollator(synthetic_tokenizer, 0)
    c = SpanCorruptionCollator(synthetic_tokenizer, 0, vocab_size=size + 100, pad_to_multiple_of=1)
    assert c.eos_id is None  # a WordPiece vocabulary has no </s>
    batch = c([{"input_ids": np.array(synthetic_tokenizer.encode_batch(["ab ba ab ba ab ba"])[0]), "index": 0}])
    assert batch.labels[0, 0].item() == size + 99  # <extra_id_0>


def test_too_short_examples_are_left_out_and_a_batch_of_only_those_refused():
    c = SpanCorruptionCollator(SPECIAL, 0, vocab_size=VOCAB)
    batch = c([ex([10], 4), ex([10, 11, 12, 13], 5)])
    assert batch.example_index.tolist() == [5] and batch.input_ids.size(0) == 1
    with pytest.raises(DataError, match="fewer than 2 text token"):
        c([ex([10], 4)])


# ---------------------------------------------------------------------------------------------
# Prefix LM, deshuffling, BERT-style
# ---------------------------------------------------------------------------------------------


def test_prefix_lm_splits_everywhere_and_keeps_the_text():
    c = PrefixLMCollator(SPECIAL, 1, vocab_size=VOCAB, eos_id=EOS, pad_to_multiple_of=1)
    splits = set()
    for i in range(300):
        batch = c([ex([10, 11, 12, 13, 14, 15], i)])
        inputs = batch.input_ids[0].tolist()
        labels = batch.labels[0].tolist()
        assert inputs[-1] == EOS and labels[-1] == EOS
        assert inputs[:-1] + labels[:-1] == [10, 11, 12, 13, 14, 15]
        splits.add(len(inputs) - 1)
    assert splits == {1, 2, 3, 4, 5}


def test_deshuffle_permutes_the_input_and_targets_the_original():
    c = DeshuffleCollator(SPECIAL, 2, vocab_size=VOCAB, pad_to_multiple_of=1)
    orders = set()
    for i in range(50):
        batch = c([ex([10, 11, 12, 13, 14], i)])
        assert batch.labels[0].tolist() == [10, 11, 12, 13, 14]
        assert sorted(batch.input_ids[0].tolist()) == [10, 11, 12, 13, 14]
        orders.add(tuple(batch.input_ids[0].tolist()))
    assert len(orders) > 20


def test_iid_masking_targets_the_whole_sequence_with_bert_80_10_10():
    c = IIDMaskCollator(SPECIAL, 3, vocab_size=VOCAB, eos_id=EOS, pad_to_multiple_of=1)
    text = list(range(10, 50))  # 40 tokens: round(0.15 * 40) = 6 selected
    actions = {"mask": 0, "random": 0, "kept": 0}
    for i in range(500):
        batch = c([ex(text, i)])
        assert batch.labels[0].tolist() == [*text, EOS]  # the whole original sequence, not the masked tokens
        inputs = batch.input_ids[0].tolist()
        assert inputs[-1] == EOS and len(inputs) == 41
        changed = [(a, b) for a, b in zip(inputs[:-1], text, strict=True) if a != b]
        actions["mask"] += sum(a == MASK for a, _ in changed)
        actions["random"] += sum(a != MASK for a, _ in changed)
        assert all(a not in (PAD, CLS, SEP, EOS, UNK) for a, _ in changed)
        assert len(changed) <= 6
    total = 500 * 6
    assert abs(actions["mask"] / total - 0.8) < 0.03
    # A random replacement equals the original 1 time in 194, so "kept" is about 10%: random is just under.
    assert abs(actions["random"] / total - 0.1) < 0.02


# ---------------------------------------------------------------------------------------------
# MASS
# ---------------------------------------------------------------------------------------------


def mass(k, **kwargs) -> MassCollator:
    return MassCollator(SPECIAL, 4, vocab_size=VOCAB, k=k, pad_to_multiple_of=1, **kwargs)


def test_mass_k1_is_single_token_prediction():
    c = mass(1, replace_mask=1.0, replace_random=0.0)
    text = [10, 11, 12, 13, 14, 15, 16, 17]
    for i in range(40):
        batch = c([ex(text, i)])
        (pos,) = batch.extra["decoder_position_ids"][0].tolist()
        assert batch.extra["decoder_input_ids"].tolist() == [[MASK]]  # nothing from the source
        assert batch.labels.tolist() == [[text[pos]]]
        expected = list(text)
        expected[pos] = MASK
        assert batch.input_ids[0].tolist() == expected


def test_mass_k_full_is_a_left_to_right_lm():
    c = mass(8, replace_mask=1.0, replace_random=0.0)
    batch = c([ex([10, 11, 12, 13, 14, 15, 16, 17], 0)])
    assert batch.input_ids.tolist() == [[MASK] * 8]
    assert batch.extra["decoder_input_ids"].tolist() == [[MASK, 10, 11, 12, 13, 14, 15, 16]]
    assert batch.labels.tolist() == [[10, 11, 12, 13, 14, 15, 16, 17]]
    assert batch.extra["decoder_position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert mass(1.0)([ex([10, 11, 12], 0)]).labels.tolist() == [[10, 11, 12]]


def test_mass_span_structure_and_statistics():
    """Half the sentence by default; starts 20% at 0, 20% at the end, 60% in between; 80/10/10 inside
    the span, the rest of the source untouched."""
    c = mass(0.5, decoder_start_token_id=CLS)
    text = list(range(10, 30))  # 20 tokens, k = 10: starts 0..10
    starts = np.zeros(11)
    masked = replaced = 0
    n = 3000
    for begin in range(0, n, 500):
        batch = c([ex(text, i) for i in range(begin, begin + 500)])
        for r in range(500):
            pos = batch.extra["decoder_position_ids"][r].tolist()
            s = pos[0]
            assert pos == list(range(s, s + 10))
            starts[s] += 1
            assert batch.labels[r].tolist() == text[s : s + 10]
            assert batch.extra["decoder_input_ids"][r].tolist() == [CLS, *text[s : s + 9]]
            inputs = batch.input_ids[r].tolist()
            assert inputs[:s] == text[:s] and inputs[s + 10 :] == text[s + 10 :]
            masked += sum(t == MASK for t in inputs[s : s + 10])
            replaced += sum(t not in (MASK, o) for t, o in zip(inputs[s : s + 10], text[s : s + 10], strict=True))
    share = starts / n
    assert abs(share[0] - 0.2) < 0.03 and abs(share[10] - 0.2) < 0.03
    assert np.abs(share[1:10] - 0.6 / 9).max() < 0.025
    assert abs(masked / (10 * n) - 0.8) < 0.02 and abs(replaced / (10 * n) - 0.1) < 0.015


def test_mass_refuses_bad_k():
    for bad in (0, 1.5, -0.2, True, "half"):
        with pytest.raises(ConfigError, match="objective_args.k"):
            mass(bad)


# ---------------------------------------------------------------------------------------------
# By name
# ---------------------------------------------------------------------------------------------


def test_objectives_by_name():
    c = seq2seq_collator("mass", SPECIAL, 0, vocab_size=VOCAB, k=2)
    assert isinstance(c, MassCollator) and c.k == 2
    with pytest.raises(ConfigError, match="unknown seq2seq objective 'bert'; choose one of: span_corruption"):
        seq2seq_collator("bert", SPECIAL, 0, vocab_size=VOCAB)
    with pytest.raises(ConfigError, match="objective_args.k is not an argument of the deshuffle objective"):
        seq2seq_collator("deshuffle", SPECIAL, 0, vocab_size=VOCAB, k=2)
    with pytest.raises(ConfigError, match="noise_density must be a number in \\(0, 1\\)"):
        seq2seq_collator("span_corruption", SPECIAL, 0, vocab_size=VOCAB, noise_density=1.5)
