"""Unit-level permutation LM (XLNet's objective over ERNIE's units): a target unit's tokens are predicted
together (none sees another), units keep an autoregressive order among themselves with no leak through any
number of layers, one token per unit reproduces the token-level collator exactly, and XLNet pretrains on gold
People's Daily entities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import load_pretrain_config
from bertzoo.data.pretraining.collate_plm import PermutationLMCollator, unit_index
from bertzoo.data.tokens.unit_flags import ENTITY_START, WORD_START
from bertzoo.errors import ConfigError

from helpers.xlnet import SPECIAL, VOCAB, examples, leaks

pytestmark = pytest.mark.usefixtures("one_thread")


def with_entities(n: int, length: int, seed: int = 0) -> list[dict]:
    """test_xlnet's [CLS] a [SEP] b [SEP] blocks, each body token a word, runs of 1-4 tokens one entity."""
    r = np.random.default_rng(seed + 100)
    out = []
    for ex in examples(n, length, seed):
        ids = ex["input_ids"]
        flags = np.full(len(ids), WORD_START, dtype=np.uint8)
        i = 0
        while i < len(ids):
            flags[i] |= ENTITY_START
            i += int(r.integers(1, 5))
        out.append({**ex, "unit_flags": flags})
    return out


def expected_units(example: dict) -> np.ndarray:
    """The entity of each token, computed here from the flags: specials alone, a new unit after one."""
    ids, flags = np.asarray(example["input_ids"]), example["unit_flags"]
    special = ids < 5
    unit, current = np.zeros(len(ids), dtype=np.int64), -1
    for p in range(len(ids)):
        if special[p] or (p and special[p - 1]) or flags[p] & ENTITY_START:
            current += 1
        unit[p] = current
    return unit


def test_unit_index_makes_specials_units_of_their_own():
    starts = np.array([0, 0, 1, 0, 0, 0, 1, 0], dtype=bool)
    special = np.array([1, 0, 0, 0, 1, 0, 0, 1], dtype=bool)
    assert unit_index(starts, special).tolist() == [0, 1, 2, 2, 3, 4, 5, 6]


def test_a_target_unit_is_predicted_together_and_units_are_ordered_without_leaks():
    collate = PermutationLMCollator(
        SPECIAL, vocab_size=VOCAB, seed=1, pad_to_multiple_of=1, plm_probability=1 / 3, max_span_length=2, unit="entity"
    )
    exs = with_entities(16, 30)
    batch = collate(exs)
    perm = batch.extra["perm_mask"].bool().numpy()
    multi_token_targets = 0
    for row, ex in enumerate(exs):
        n = len(ex["input_ids"])
        unit = expected_units(ex)
        real = batch.labels[row] != IGNORE_INDEX
        where = batch.extra["target_mapping"][row, real].argmax(-1).numpy()
        targets = np.zeros(n, dtype=bool)
        targets[where] = True
        blocked = perm[row, :n, :n]
        for u in np.unique(unit[targets]):
            members = np.flatnonzero(unit == u)
            assert targets[members].all()  # the whole unit, or none of it
            assert blocked[np.ix_(members, members)].all()  # no member sees another (or itself)
            multi_token_targets += len(members) > 1
        # between two target units exactly one sees the other: an order of units
        t = np.flatnonzero(targets)
        other = unit[t][:, None] != unit[t][None, :]
        sees = ~blocked[np.ix_(t, t)]
        assert np.array_equal((sees | sees.T)[other], np.ones(int(other.sum()), dtype=bool))
        assert not (sees & sees.T)[other].any()
        # the unit's place: how many target tokens it sees; no target reads a unit at or after its own
        rank = np.zeros(n, dtype=np.int64)
        rank[t] = sees.sum(1)
        assert not leaks(blocked, rank, targets, layers=3)
    assert multi_token_targets > 5  # the test saw entities of several tokens


def test_one_token_per_unit_is_the_token_level_collator():
    """Without `##` pieces or flags every token is a word: unit=whole_word draws exactly the token-level batch."""
    exs = examples(8, 24, seed=3)
    token = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=5, pad_to_multiple_of=1)(exs)
    word = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=5, pad_to_multiple_of=1, unit="whole_word")(exs)
    for key in ("perm_mask", "target_mapping"):
        assert torch.equal(token.extra[key], word.extra[key])
    assert torch.equal(token.labels, word.labels)
    # ...and entities of several tokens change it
    entity = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=5, pad_to_multiple_of=1, unit="entity")
    assert not torch.equal(entity(with_entities(8, 24, seed=3)).extra["perm_mask"], token.extra["perm_mask"])


def test_about_one_unit_in_k_is_a_target():
    collate = PermutationLMCollator(SPECIAL, vocab_size=VOCAB, seed=0, pad_to_multiple_of=1, unit="entity")
    exs = with_entities(64, 60)
    batch = collate(exs)
    chosen = total = 0
    for row, ex in enumerate(exs):
        unit = expected_units(ex)
        real = batch.labels[row] != IGNORE_INDEX
        where = batch.extra["target_mapping"][row, real].argmax(-1).numpy()
        chosen += len(np.unique(unit[where]))
        total += len(np.unique(unit[np.asarray(ex["input_ids"]) >= 5]))
    assert 0.6 / 6 < chosen / total < 1.4 / 6


def test_bad_unit_options_are_refused(synthetic_shards, tmp_path):
    from bertzoo.train.pretrain import build_pretraining

    with pytest.raises(ConfigError, match="objective_args.unit must be one of: token, whole_word, phrase, entity"):
        PermutationLMCollator(SPECIAL, vocab_size=VOCAB, unit="sentence")
    cfg = load_pretrain_config(
        None,
        {
            "variant": "xlnet",
            "model": {"preset": "xlnet-tiny", "hidden_size": 32, "intermediate_size": 64},
            "objective_args": {"unit": "entity"},
            "data.shards": str(synthetic_shards),
            "data.max_seq_len": 32,
            "train.output_dir": str(tmp_path / "run"),
        },
    )
    with pytest.raises(ConfigError, match="set data.input_format: doc_sentences"):
        build_pretraining(cfg)


def test_xlnet_pretrains_over_gold_entities(tmp_path):
    """Gold People's Daily entities (江泽民 is one unit of three characters) reach the batches, and a few steps
    of XLNet train on them."""
    from bertzoo.data.tokens.annotate import prepare_segmented_shards
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
    from bertzoo.train.pretrain import build_pretraining, pretrain

    lines = ["江/nr  泽民/nr  在/p  北京/ns  发表/v  新年/t  讲话/n  。/w"] * 6
    tagged = tmp_path / "tagged.txt"
    tagged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *sorted(set("江泽民在北京发表新年讲话。"))]) + "\n", encoding="utf-8")
    tok = Tokenizer.from_vocab(vocab)
    prepare_segmented_shards(str(tagged), tok, tmp_path / "shards", progress=False)
    overrides = {
        "variant": "xlnet",
        "model": {"preset": "xlnet-tiny", "hidden_size": 32, "intermediate_size": 64, "dropout": 0.0},
        "objective_args": {"unit": "entity", "plm_probability": 0.4, "max_span_length": 1},
        "data.shards": str(tmp_path / "shards"),
        "data.lexicon": str(tagged),
        "data.input_format": "doc_sentences",
        "data.max_seq_len": 16,
        "data.short_seq_prob": 0.0,
        "train.output_dir": str(tmp_path / "run"),
        "train.batch_size": 6,
        "train.max_steps": 4,
        "train.log_every": 1,
        "train.save_every": 0,
        "train.threads": 1,
    }
    cfg = load_pretrain_config(None, overrides)
    _, dataset, collator, _ = build_pretraining(cfg)
    exs = [dataset[i] for i in range(len(dataset))]
    assert all("unit_flags" in e for e in exs)
    batch = collator(exs)
    jiang = [tok.token_to_id(c) for c in "江泽民"]
    seen_together = 0
    for row in range(len(exs)):
        ids = batch.input_ids[row].tolist()
        start = ids.index(jiang[0])
        assert ids[start : start + 3] == jiang
        real = batch.labels[row] != IGNORE_INDEX
        where = set(batch.extra["target_mapping"][row, real].argmax(-1).tolist())
        picked = [p in where for p in range(start, start + 3)]
        assert all(picked) or not any(picked)
        seen_together += all(picked)
    assert seen_together >= 1
    summary = pretrain(cfg)
    assert summary["steps"] == 4 and np.isfinite(summary["final_metrics"]["loss"])
