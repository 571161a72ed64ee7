"""Whole-word masking: selection statistics, one decision per word, WordPiece words, plain BERT."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig, load_pretrain_config
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.collate_units import UnitMaskingCollator
from bertzoo.data.pretraining.masking import SELECTORS, mask_tokens, select_units, unit_bounds
from bertzoo.data.tokens.tokenizer import SpecialIds
from bertzoo.errors import ConfigError

VOCAB = 30000
SPECIAL = SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
SPECIAL_IDS = np.array(sorted(SPECIAL))
REPLACEMENT = np.setdiff1d(np.arange(VOCAB), SPECIAL_IDS)


def word_batch(n_rows: int, length: int, seed: int, max_word: int = 4):
    """[CLS] A [SEP] B [SEP] + padding, words of 1..max_word tokens (starts), random lengths."""
    r = np.random.default_rng(seed)
    ids = r.integers(1000, VOCAB, size=(n_rows, length))
    lengths = r.integers(12, length + 1, size=n_rows)
    ids[:, 0] = SPECIAL.cls
    ids[np.arange(n_rows), lengths // 2] = SPECIAL.sep
    ids[np.arange(n_rows), lengths - 1] = SPECIAL.sep
    ids[np.arange(length)[None, :] >= lengths[:, None]] = SPECIAL.pad
    starts = np.zeros(ids.shape, dtype=bool)
    for row in range(n_rows):
        p = 0
        while p < length:
            starts[row, p] = True
            p += int(r.integers(1, max_word + 1))
    return ids, starts


def words_of(starts, special):
    """(first, last) of every non-special word, computed independently of unit_bounds."""
    out = []
    for row in range(starts.shape[0]):
        first = None
        for p in range(starts.shape[1]):
            boundary = starts[row, p] or special[row, p] or (p > 0 and special[row, p - 1])
            if boundary and first is not None:
                out.append((row, first, p - 1))
                first = None
            if not special[row, p] and first is None:
                first = p
        if first is not None:
            out.append((row, first, starts.shape[1] - 1))
    return out


def test_unit_bounds_match_a_direct_walk():
    ids, starts = word_batch(50, 40, 0)
    special = np.isin(ids, SPECIAL_IDS)
    _, first, last = unit_bounds(starts, special)
    for row, a, b in words_of(starts, special):
        assert (first[row, a : b + 1] == a).all() and (last[row, a : b + 1] == b).all()


def test_whole_words_are_never_split_and_the_budget_holds():
    ids, starts = word_batch(800, 128, 1)
    special = np.isin(ids, SPECIAL_IDS)
    u = np.random.default_rng(2).random(ids.shape)
    sel = select_units(ids, special, u, 0.15, starts=starts)
    words = words_of(starts, special)
    chosen = 0
    for row, a, b in words:
        block = sel.selected[row, a : b + 1]
        assert block.all() or not block.any(), (row, a, b)  # never a part of a word
        if block.all():
            chosen += 1
            assert (sel.groups[row, a : b + 1] == a).all()
    assert not (sel.selected & special).any()
    n_cand = (~special).sum(1)
    budget = np.maximum(1, np.rint(n_cand * 0.15))
    got = sel.selected.sum(1)
    assert (got <= budget).all()
    # Skipping words that would overshoot leaves rows at most a few tokens short.
    assert (budget - got).mean() < 0.5
    assert abs(sel.selected.sum() / n_cand.sum() - 0.15) < 0.005
    # The same as Google's whole-word loop, written out directly: words in key order, each taken
    # whole if it still fits the budget, skipped otherwise.
    for row in range(40):
        mine = [(a, b) for r, a, b in words if r == row]
        left = int(budget[row])
        expect = np.zeros(ids.shape[1], dtype=bool)
        for a, b in sorted(mine, key=lambda w: u[row, w[0]]):
            if b - a + 1 <= left:
                expect[a : b + 1] = True
                left -= b - a + 1
        assert np.array_equal(expect, sel.selected[row])
    assert chosen > 1000


def test_one_decision_per_word_with_80_10_10_shares():
    ids, starts = word_batch(1500, 96, 3)
    special = np.isin(ids, SPECIAL_IDS)
    out, labels, sel = mask_tokens(
        ids,
        special,
        seed=7,
        epoch=0,
        index=np.arange(len(ids)),
        config=MaskingConfig(),
        mask_id=SPECIAL.mask,
        replacement_ids=REPLACEMENT,
        selector="whole_word",
        starts=starts,
        return_selection=True,
    )
    assert np.array_equal(labels != IGNORE_INDEX, sel.selected)
    action = np.where(out == SPECIAL.mask, 0, np.where(out == ids, 2, 1))
    per_word = []
    for row, a, b in words_of(starts, special):
        if sel.selected[row, a]:
            acts = action[row, a : b + 1]
            assert (acts == acts[0]).all()  # [MASK] all, random all, or keep all
            per_word.append(acts[0])
    share = np.bincount(per_word, minlength=3) / len(per_word)
    assert len(per_word) > 5000
    assert abs(share[0] - 0.8) < 0.02 and abs(share[1] - 0.1) < 0.015 and abs(share[2] - 0.1) < 0.015


def test_unit_strategies_need_boundaries():
    ids, _ = word_batch(2, 20, 0)
    with pytest.raises(ConfigError, match="needs unit boundaries"):
        mask_tokens(
            ids,
            np.isin(ids, SPECIAL_IDS),
            seed=0,
            epoch=0,
            index=np.arange(2),
            config=MaskingConfig(),
            mask_id=SPECIAL.mask,
            replacement_ids=REPLACEMENT,
            selector="whole_word",
        )
    assert {"whole_word", "span", "phrase", "entity", "token"} <= set(SELECTORS)


def _wordpiece_examples(tokenizer, docs, n):
    out = []
    for i, doc in enumerate(docs[:n]):
        ids = tokenizer.encode(doc[:400]).ids[:100]
        out.append({"input_ids": np.array(ids), "index": i})
    return out


def test_wordpiece_words_are_masked_whole(synthetic_tokenizer, synthetic_docs):
    """`##` continuation pieces are only ever selected together with the rest of their word."""
    vocab = synthetic_tokenizer.vocab_list()
    col = UnitMaskingCollator(synthetic_tokenizer, MaskingConfig(), seed=1, strategy="whole_word")
    examples = _wordpiece_examples(synthetic_tokenizer, synthetic_docs, 200)
    batch = col(examples)
    sel = (batch.labels != IGNORE_INDEX).numpy()
    multi = 0
    for row, e in enumerate(examples):
        toks = [vocab[i] for i in e["input_ids"]]
        # Words by the `##` rule, independently of the collator.
        p = 1
        while p < len(toks) - 1:
            q = p + 1
            while q < len(toks) - 1 and toks[q].startswith("##"):
                q += 1
            block = sel[row, p:q]
            assert block.all() or not block.any(), toks[p:q]
            multi += int(block.all() and q - p > 1)
            p = q
    assert multi > 50  # multi-piece words do get masked
    # The same examples collated with others, or alone, get the same masks (keyed randomness).
    alone = col(examples[5:6])
    assert torch.equal(
        alone.labels[0, : len(examples[5]["input_ids"])], batch.labels[5, : len(examples[5]["input_ids"])]
    )


def test_token_strategy_matches_the_bert_collator(synthetic_tokenizer, synthetic_docs):
    examples = _wordpiece_examples(synthetic_tokenizer, synthetic_docs, 32)
    a = UnitMaskingCollator(synthetic_tokenizer, MaskingConfig(), seed=4, strategy="token")(examples)
    b = PretrainingCollator(synthetic_tokenizer, MaskingConfig(), seed=4)(examples)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)


@pytest.mark.parametrize("strategy", ["whole_word", "span"])
def test_static_copies_fix_unit_masks_too(synthetic_tokenizer, synthetic_docs, strategy):
    """data.masking.static_copies=N keys unit masks by epoch % N, as for token masking (the unit
    collator used to ignore it and masked dynamically)."""
    examples = _wordpiece_examples(synthetic_tokenizer, synthetic_docs, 32)

    def labels(copies: int, epoch: int) -> torch.Tensor:
        col = UnitMaskingCollator(synthetic_tokenizer, MaskingConfig(static_copies=copies), seed=3, strategy=strategy)
        return col([{**e, "epoch": epoch} for e in examples]).labels

    assert torch.equal(labels(2, 0), labels(2, 4))  # epochs 0 and 4: the same of 2 copies
    assert torch.equal(labels(2, 5), labels(0, 1))  # epoch 5 with 2 copies is dynamic masking's epoch 1
    assert not torch.equal(labels(2, 0), labels(2, 1))  # the 2 copies differ
    assert not torch.equal(labels(0, 0), labels(0, 4))  # dynamic: a new mask every epoch


def test_plain_bert_trains_with_whole_word_masking(synthetic_shards, tmp_path):
    from bertzoo.engine.loop import Trainer
    from bertzoo.train.pretrain import build_pretraining

    torch.set_num_threads(1)
    cfg = load_pretrain_config(
        None,
        {
            "model": {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64},
            "data.shards": str(synthetic_shards),
            "data.max_seq_len": 48,
            "data.masking.strategy": "whole_word",
            "train.output_dir": str(tmp_path / "run"),
            "train.batch_size": 8,
            "train.max_steps": 3,
            "train.log_every": 1,
            "train.save_every": 0,
        },
    )
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    assert isinstance(collator, UnitMaskingCollator) and collator.strategy == "whole_word"
    cont = np.array([t.startswith("##") for t in tokenizer.vocab_list()])
    batch = collator([dataset[i] for i in range(16)])
    sel = (batch.labels != IGNORE_INDEX).numpy()
    ids = batch.input_ids.numpy()
    orig = np.where(sel, batch.labels.numpy(), ids)
    # A selected continuation piece always has its predecessor selected too (same word).
    # (Not after [CLS]/[SEP]: a truncated segment may start inside a word, and specials are never masked.)
    prev_special = np.isin(orig[:, :-1], tokenizer.special_ids)
    follows = cont[orig[:, 1:]] & (batch.attention_mask.numpy()[:, 1:] > 0) & ~prev_special
    assert follows.any() and (sel[:, 1:][follows] == sel[:, :-1][follows]).all()
    summary = Trainer(objective, dataset, collator, cfg.train, progress=False).train()
    assert summary["steps"] == 3 and np.isfinite(summary["final_metrics"]["loss"])
