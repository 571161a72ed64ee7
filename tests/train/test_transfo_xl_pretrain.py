"""Transformer-XL pretraining through the shared trainer: the segmented objective against one pass over the
block, the no-memory baseline, held-out perplexity below the unigram baseline, reload, exact resume, the shipped
config through the CLI, and the settings it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bertzoo.batch import Batch
from bertzoo.errors import ConfigError
from bertzoo.loading import load_encoder, load_pretraining
from bertzoo.models.transfo_xl import TransfoXL
from bertzoo.objectives.recurrent_lm import RecurrentLM
from bertzoo.tasks.base import TaskModel
from bertzoo.train.pretrain import build_pretraining, pretrain
from bertzoo.variants.transfo_xl import build, model_config

from helpers.pretrain import assert_resume_is_exact, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 40
TXL_TINY = {"preset": "transfo-xl-tiny", "hidden_size": 32, "attention_head_size": 16, "intermediate_size": 64}


def tiny_model(mem_len: int = 64, **fields) -> TransfoXL:
    torch.manual_seed(0)
    config = model_config({**TXL_TINY, "vocab_size": VOCAB, "mem_len": mem_len, "dropout": 0.0, **fields})
    config.attention_dropout = 0.0
    return TransfoXL(config).eval()


def block_batch(batch: int = 2, length: int = 24) -> Batch:
    ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, 19:] = 0  # the second block is padded at its end
    return Batch(input_ids=ids, attention_mask=mask, labels=ids.clone())


def reference_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy over real targets, written out with F.cross_entropy."""
    targets = batch.input_ids[:, 1:].masked_fill(~batch.attention_mask[:, 1:].bool(), -100)
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100)


def test_segments_with_enough_memory_give_the_one_pass_loss() -> None:
    """Memory covering the whole block: the loss read in segments of 5 (with a last short one) equals the loss
    of one pass over the block, which is the exactness of recurrence, here through the objective."""
    model, batch = tiny_model(mem_len=64), block_batch()
    objective = RecurrentLM(model, segment_len=5)
    got = objective(batch)
    with torch.no_grad():
        want = reference_loss(model(batch.input_ids).logits, batch)
    torch.testing.assert_close(got.loss.detach(), want, atol=1e-5, rtol=1e-5)
    real_targets = int(batch.attention_mask[:, 1:].sum())
    assert int(got.counts["lm_loss"]) == real_targets == objective.loss_counts(batch)["lm"]


def test_without_memory_each_segment_stands_alone() -> None:
    model, batch = tiny_model(), block_batch()
    plain = RecurrentLM(model, segment_len=6, memory=False)
    with torch.no_grad():
        logits = torch.cat([model(s).logits for s in batch.input_ids.split(6, dim=1)], dim=1)
        torch.testing.assert_close(plain(batch).loss, reference_loss(logits, batch), atol=1e-5, rtol=1e-5)
        # The memory changes the loss (segments after the first see their predecessors).
        assert abs(float(RecurrentLM(model, segment_len=6)(batch).loss) - float(plain(batch).loss)) > 1e-4


def test_bad_settings_are_refused() -> None:
    config = model_config({**TXL_TINY, "vocab_size": VOCAB, "mem_len": 0})
    with pytest.raises(ConfigError, match="mem_len >= 1"):
        build(config)
    assert not build(config, memory=False).memory  # no recurrence needs no memory
    ok = model_config({**TXL_TINY, "vocab_size": VOCAB})
    for args, says in [
        ({"segment_len": 0}, "segment_len"),
        ({"segment_len": 2.5}, "segment_len"),
        ({"memory": "yes"}, "memory"),
        ({"mem_len": 3}, "unknown objective_args"),
    ]:
        with pytest.raises(ConfigError, match=says):
            build(ok, **args)
    with pytest.raises(ConfigError, match="not available for Transformer-XL"):
        build(ok, objective="mlm")


# --- through the trainer ---------------------------------------------------------------------------------


def txl_config(shards, out, **train):
    cfg = tiny_config(shards, out, **train)
    cfg.variant = "transfo-xl"
    cfg.objective = ""
    cfg.model = {**TXL_TINY, "mem_len": 16}
    cfg.objective_args = {"segment_len": 16}
    cfg.data.short_seq_prob = 0.0
    return cfg


def test_held_out_perplexity_falls_below_the_unigram_baseline_and_reloads(synthetic_shards, tmp_path):
    cfg = txl_config(synthetic_shards, tmp_path / "run", max_steps=60, eval_every=30, lr=3e-3)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "eval_lm_loss" in r][-1]
    assert last["eval_lm_ppl"] == pytest.approx(np.exp(last["eval_lm_loss"]))
    assert last["eval_lm_loss"] < summary["baseline"]["unigram_lm_loss"] - 0.1
    assert isinstance(load_encoder(tmp_path / "run" / "final"), TransfoXL)
    with pytest.raises(ConfigError, match="fine-tuning tasks do not read it"):
        TaskModel(load_encoder(tmp_path / "run" / "final"))
    reloaded = load_pretraining(tmp_path / "run" / "final")
    assert isinstance(reloaded, RecurrentLM) and reloaded.segment_len == 16 and reloaded.memory
    objective, dataset, collator, _ = build_pretraining(cfg)
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(4)])
    objective.load_state_dict(load_file(tmp_path / "run" / "final" / "model.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(reloaded.eval()(batch).loss, objective.eval()(batch).loss, atol=0, rtol=0)


def test_resume_is_exact(synthetic_shards, tmp_path):
    """12 steps straight == the same run stopped (SIGTERM) after step 6, then resumed."""
    assert_resume_is_exact(txl_config, synthetic_shards, tmp_path)


def test_cli_pretrains_the_shipped_config(synthetic_shards, tmp_path, capsys):
    from bertzoo.cli import main

    out = tmp_path / "cli"
    args = [
        "pretrain",
        "configs/pretrain/transformer-xl-mini.yaml",
        "--data.shards",
        str(synthetic_shards),
        "--model.num_layers=1",
        "--model.hidden_size=32",
        "--model.attention_head_size=16",
        "--model.intermediate_size=64",
        "--data.max_seq_len=32",
        "--objective_args.segment_len=8",
        "--train.max_steps=3",
        "--train.batch_size=4",
        f"--train.output_dir={out}",
        "--train.threads=1",
    ]
    assert main(args) == 0
    assert (out / "final" / "model.safetensors").is_file()
    capsys.readouterr()
    for bad, says in (("--model.mem_len=0", "mem_len"), ("--model.pooler=true", "model.pooler")):
        assert main([*args[:2], bad, *args[2:]]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
