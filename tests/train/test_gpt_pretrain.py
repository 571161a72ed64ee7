"""GPT pretraining through the shared trainer: packed unmasked blocks, labels that ignore padding only,
held-out perplexity below a next-token unigram baseline, exact resume, a BPE vocabulary, the CLI, and the
recipes GPT refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig
from bertzoo.errors import ConfigError
from bertzoo.objectives.clm import CausalLM
from bertzoo.train.pretrain import build_pretraining, fixed_eval_batches, pretrain

from helpers.pretrain import assert_resume_is_exact, tiny_config

GPT_TINY = {"preset": "gpt-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


def gpt_config(shards, out, **train):
    cfg = tiny_config(shards, out, **train)
    cfg.variant = "gpt"
    cfg.objective = "clm"
    cfg.model = dict(GPT_TINY)
    cfg.data.short_seq_prob = 0.0
    return cfg


def test_blocks_cover_the_corpus_once_and_are_not_masked(synthetic_shards, tmp_path):
    cfg = gpt_config(synthetic_shards, tmp_path / "run")
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    assert isinstance(objective, CausalLM)
    dataset.set_epoch(0)
    special = set(tokenizer.special_ids.tolist())
    body = [int(t) for i in range(len(dataset)) for t in dataset[i]["input_ids"] if int(t) not in special]
    files = sorted(synthetic_shards.glob("shard_*.tokens.npy"))
    corpus = np.concatenate([np.load(f, allow_pickle=False) for f in files]).astype(np.int64)
    assert body == corpus[~np.isin(corpus, list(special))].tolist()  # every token once, in corpus order
    batch = collator([dataset[i] for i in range(5)])
    assert not (batch.input_ids == tokenizer.special.mask).any()
    real = batch.attention_mask.bool()
    assert torch.equal(batch.labels[real], batch.input_ids[real])
    assert (batch.labels[~real] == IGNORE_INDEX).all()
    assert all(len(dataset[i]["input_ids"]) <= cfg.data.max_seq_len for i in range(len(dataset)))


def test_a_masking_section_changes_nothing(synthetic_shards, tmp_path):
    plain = gpt_config(synthetic_shards, tmp_path / "a")
    wild = gpt_config(synthetic_shards, tmp_path / "b")
    wild.data.masking = MaskingConfig(strategy="span", mask_prob=0.5, static_copies=3)
    batches = []
    for cfg in (plain, wild):
        _, dataset, collator, _ = build_pretraining(cfg)
        dataset.set_epoch(4)  # static_copies would fold this epoch if the collator read it
        batches.append(collator([dataset[i] for i in range(8)]))
    assert batches[0].input_ids.equal(batches[1].input_ids)
    assert batches[0].labels.equal(batches[1].labels)
    assert (batches[1].example_index.numpy() == np.arange(8)).all()


def test_the_unigram_baseline_scores_next_tokens(synthetic_shards, tmp_path):
    """The baseline is scored where the model is (labels[:, 1:]: never the leading [CLS]) and gives the
    [SEP]s it must predict their training rate, recomputed here from the shard files and the blocks."""
    cfg = gpt_config(synthetic_shards, tmp_path / "run", max_steps=2, eval_every=2)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    base = pretrain(cfg)["baseline"]
    _, dataset, collator, tokenizer = build_pretraining(cfg)
    special = tokenizer.special_ids
    files = sorted(synthetic_shards.glob("shard_*.tokens.npy"))
    counts = np.bincount(np.concatenate([np.load(f) for f in files]), minlength=tokenizer.vocab_size).astype(float)
    counts[special] = 0
    dataset.set_epoch(0)
    blocks = [np.asarray(dataset[i]["input_ids"]) for i in range(2 * cfg.train.batch_size)]
    targets = np.concatenate([b[1:] for b in blocks])  # the same blocks, train and held-out alike here
    seen = np.bincount(targets, minlength=tokenizer.vocab_size)
    assert seen[tokenizer.special.sep] >= len(blocks) and seen[tokenizer.special.cls] == 0
    counts[special] = seen[special] * counts.sum() / (len(targets) - seen[special].sum())
    probs = (counts + 1) / (counts.sum() + len(counts))
    assert base["unigram_lm_loss"] == pytest.approx(float(-np.log(probs[targets]).mean()))
    assert base["unigram_lm_acc"] == pytest.approx(float((targets == counts.argmax()).mean()))
    assert base["unigram_lm_ppl"] == pytest.approx(np.exp(base["unigram_lm_loss"]))
    assert len(targets) == sum(
        int((b.labels[:, 1:] != IGNORE_INDEX).sum()) for b in fixed_eval_batches(cfg, tokenizer, collator)
    )


def test_held_out_perplexity_falls_below_the_unigram_baseline(synthetic_shards, tmp_path):
    # 40 steps beat only a baseline that gave [CLS]/[SEP] add-one probabilities; 80 beat the real one by ~0.4.
    cfg = gpt_config(synthetic_shards, tmp_path / "run", max_steps=80, eval_every=40, lr=3e-3)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval_lm_loss" in r]
    assert [r["step"] for r in evals][:2] == [40, 80]
    last = evals[-1]
    assert last["eval_lm_ppl"] == pytest.approx(np.exp(last["eval_lm_loss"]))
    assert last["eval_lm_loss"] < summary["baseline"]["unigram_lm_loss"]
    assert last["eval_lm_ppl"] < summary["baseline"]["unigram_lm_ppl"]


def test_resume_is_exact(synthetic_shards, tmp_path):
    """12 steps straight == the same run stopped (SIGTERM) after step 6, then resumed."""
    assert_resume_is_exact(gpt_config, synthetic_shards, tmp_path)


def test_recipes_gpt_refuses(synthetic_shards, tmp_path):
    cfg = gpt_config(synthetic_shards, tmp_path / "x")
    cfg.data.input_format = "segment_pair"
    with pytest.raises(ConfigError, match="full_sentences"):
        build_pretraining(cfg)
    cfg = gpt_config(synthetic_shards, tmp_path / "y")
    cfg.mlm_bias_init = "unigram"
    with pytest.raises(ConfigError, match="mlm_bias_init"):
        build_pretraining(cfg)


def test_cli_pretrains_the_shipped_config_and_generates(synthetic_shards, tmp_path, capsys):
    from bertzoo.cli import main

    out = tmp_path / "cli"
    args = [
        "pretrain",
        "configs/pretrain/gpt-mini.yaml",
        "--data.shards",
        str(synthetic_shards),
        "--model.num_layers=1",
        "--model.hidden_size=32",
        "--model.num_heads=2",
        "--model.intermediate_size=64",
        "--data.max_seq_len=32",
        "--train.max_steps=3",
        "--train.batch_size=4",
        f"--train.output_dir={out}",
        "--train.threads=1",
    ]
    assert main(args) == 0
    assert (out / "final" / "model.safetensors").is_file()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": 7, "prompt": "the"}\n', encoding="utf-8")
    target = tmp_path / "g.jsonl"
    code = main(
        ["generate", str(out / "final"), "-i", str(prompts), "-o", str(target), "--generation.max_new_tokens=4"]
    )
    assert code == 0
    row = json.loads(target.read_text())
    assert row["id"] == 7 and isinstance(row["prediction"], str)
    capsys.readouterr()
    for bad, says in (("--data.input_format=sentence_order", "GPT input format"), ("--objective=mlm", "clm")):
        assert main([*args[:2], bad, *args[2:]]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err


def test_a_byte_level_bpe_vocabulary(synthetic_docs, tmp_path):
    """GPT-2's tokenizer kind: blocks are `<s> ... </s>` with `</s>` between documents, and training learns."""
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.data.tokens.train_tokenizer import train_bpe

    tokenizer = train_bpe(synthetic_docs[:300], 600)
    shards = tmp_path / "shards"
    prepare_shards(synthetic_docs[:300], tokenizer, shards, progress=False)
    cfg = gpt_config(shards, tmp_path / "run", max_steps=30, lr=3e-3, log_every=5)
    _, dataset, _, tokenizer = build_pretraining(cfg)
    dataset.set_epoch(0)
    ids = [np.asarray(dataset[i]["input_ids"]) for i in range(len(dataset))]
    assert (
        tokenizer.token_to_id("<s>") == tokenizer.special.cls and tokenizer.token_to_id("</s>") == tokenizer.special.sep
    )
    assert all(b[0] == tokenizer.special.cls and b[-1] == tokenizer.special.sep for b in ids)
    assert sum(int((b[1:-1] == tokenizer.special.sep).sum()) for b in ids) + len(ids) >= 300  # a </s> per document
    pretrain(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["lm_loss"] for r in rows if "lm_loss" in r]
    assert losses[-1] < losses[0] - 0.3, losses
