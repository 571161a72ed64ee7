"""T5 pretraining through the shared trainer: the shards' tokenizer extended with sentinels, packed blocks
noised by each objective, held-out loss below the unigram baseline, exact resume, a saved model that loads
as the same EncoderDecoderLM and exports to Hugging Face, and the configurations T5 refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertzoo.batch import IGNORE_INDEX
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.train.pretrain import build_pretraining, pretrain

from helpers.pretrain import tiny_config

T5_TINY = {"preset": "t5-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "dropout": 0.0}


def t5_config(shards, out, objective="span_corruption", args=None, **train):
    cfg = tiny_config(shards, out, **train)
    cfg.variant = "t5"
    cfg.objective = objective
    cfg.objective_args = dict(args or {})
    cfg.model = dict(T5_TINY)
    cfg.data.short_seq_prob = 0.0
    return cfg


def test_the_run_tokenizer_appends_sentinels_and_the_model_fits_it(synthetic_shards, synthetic_tokenizer, tmp_path):
    objective, _, _, tokenizer = build_pretraining(t5_config(synthetic_shards, tmp_path / "run"))
    n = synthetic_tokenizer.vocab_size
    assert tokenizer.vocab_size == n + 100
    assert tokenizer.token_to_id("<extra_id_0>") == n + 99 and tokenizer.token_to_id("<extra_id_99>") == n
    assert tokenizer.vocab_list()[:n] == synthetic_tokenizer.vocab_list()  # every shard id reads the same
    assert isinstance(objective, EncoderDecoderLM)
    assert objective.config.vocab_size == n + 100
    assert objective.config.pad_token_id is None  # no padding row: the start token (pad id) must learn
    assert objective.config.decoder_start_token_id == synthetic_tokenizer.pad_id
    assert objective.word_embeddings.padding_idx is None
    # Text never contains a sentinel as an ordinary piece.
    assert tokenizer.tokenize("a <extra_id_0> b")[1] == "<extra_id_0>"


def test_span_corruption_batches_hold_the_block_text_once(synthetic_shards, tmp_path):
    """Input text outside the sentinels + the target spans = the block's text, in order."""
    cfg = t5_config(synthetic_shards, tmp_path / "run")
    _, dataset, collator, tokenizer = build_pretraining(cfg)
    dataset.set_epoch(0)
    examples = [dataset[i] for i in range(6)]
    batch = collator(examples)
    first = tokenizer.vocab_size - 100
    sep = tokenizer.sep_id
    special = set(tokenizer.special_ids.tolist())
    for row, ex in enumerate(examples):
        text = [int(t) for t in ex["input_ids"] if int(t) not in special]
        src = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
        tgt = [t for t in batch.labels[row].tolist() if t != IGNORE_INDEX]
        assert src[-1] == sep and tgt[-1] == sep  # each ends with the end token ([SEP]: no </s> here)
        spans: dict[int, list[int]] = {}
        key = None
        for t in tgt[:-1]:
            if t >= first:
                key = t
                spans[key] = []
            else:
                spans[key].append(t)
        rebuilt = []
        for t in src[:-1]:
            rebuilt.extend(spans[t] if t >= first else [t])
        assert rebuilt == text
        noise = sum(len(s) for s in spans.values())
        assert abs(noise - round(0.15 * len(text))) <= 1
        assert batch.extra["decoder_input_ids"][row, 0] == tokenizer.pad_id


@pytest.mark.parametrize("objective", ["prefix_lm", "deshuffle", "iid_mask"])
def test_the_other_objectives_build_and_take_no_sentinel(synthetic_shards, tmp_path, objective):
    cfg = t5_config(synthetic_shards, tmp_path / "run", objective=objective)
    _, dataset, collator, tokenizer = build_pretraining(cfg)
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(8)])
    first = tokenizer.vocab_size - 100
    assert not (batch.input_ids >= first).any() and not (batch.labels >= first).any()
    assert batch.extra["decoder_input_ids"].shape == batch.labels.shape


def test_objective_args_reach_the_noise_and_typos_are_refused(synthetic_shards, tmp_path):
    dense = t5_config(synthetic_shards, tmp_path / "a", args={"noise_density": 0.5, "mean_noise_span_length": 2})
    _, dataset, collator, _ = build_pretraining(dense)
    dataset.set_epoch(0)
    batch = collator([dataset[i] for i in range(8)])
    plain = t5_config(synthetic_shards, tmp_path / "b")
    _, _, collator_b, _ = build_pretraining(plain)
    batch_b = collator_b([dataset[i] for i in range(8)])
    assert (batch.labels != IGNORE_INDEX).sum() > 2 * (batch_b.labels != IGNORE_INDEX).sum()
    with pytest.raises(ConfigError, match="noise_dense"):
        build_pretraining(t5_config(synthetic_shards, tmp_path / "c", args={"noise_dense": 0.5}))
    with pytest.raises(ConfigError, match="not available for T5"):
        build_pretraining(t5_config(synthetic_shards, tmp_path / "d", objective="mlm"))
    with pytest.raises(ConfigError, match="num_sentinels"):
        build_pretraining(t5_config(synthetic_shards, tmp_path / "e", args={"num_sentinels": 0}))


def test_pretraining_learns_resumes_and_saves_a_t5(synthetic_shards, tmp_path):
    cfg = t5_config(synthetic_shards, tmp_path / "run", max_steps=150, eval_every=150, lr=3e-3)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    summary = pretrain(cfg)
    final = summary["final_eval"] if "final_eval" in summary else summary
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["lm_loss"] for r in rows if "lm_loss" in r]
    assert losses[-1] < losses[0] - 1.0
    evals = [r for r in rows if "eval_lm_loss" in r]
    assert evals and evals[-1]["eval_lm_loss"] < summary["baseline"]["unigram_lm_loss"]
    assert final is not None

    from bertzoo.loading import load_pretraining

    model = load_pretraining(tmp_path / "run" / "final")
    assert isinstance(model, EncoderDecoderLM)
    saved = load_file(tmp_path / "run" / "final" / "model.safetensors")
    key = "decoder.stack.layers.0.cross.q.weight"
    assert torch.equal(model.state_dict()[key], saved[key])
    tok = Tokenizer.load(tmp_path / "run" / "final")
    assert tok.token_to_id("<extra_id_0>") == model.config.vocab_size - 1


def test_the_unigram_baseline_gives_sentinels_and_the_end_token_their_rate(synthetic_shards, tmp_path):
    """Recomputed here from the shard files and the span-corrupted targets: sentinels and [SEP] (the end
    token) are predicted in every example though the corpus text never holds them."""
    from bertzoo.train.pretrain import fixed_eval_batches

    cfg = t5_config(synthetic_shards, tmp_path / "run", max_steps=2, eval_every=2)
    cfg.data.eval_shards = str(synthetic_shards)
    cfg.data.eval_batches = 2
    base = pretrain(cfg)["baseline"]
    _, _, collator, tokenizer = build_pretraining(cfg)
    files = sorted(synthetic_shards.glob("shard_*.tokens.npy"))
    counts = np.bincount(np.concatenate([np.load(f) for f in files]), minlength=tokenizer.vocab_size).astype(float)
    special = np.concatenate([tokenizer.special_ids, np.arange(tokenizer.vocab_size - 100, tokenizer.vocab_size)])
    counts[special] = 0
    batches = fixed_eval_batches(cfg, tokenizer, collator)  # train and held-out shards are the same here
    targets = np.concatenate([b.labels[b.labels != IGNORE_INDEX].numpy() for b in batches])
    seen = np.bincount(targets, minlength=tokenizer.vocab_size)
    assert seen[tokenizer.sep_id] == sum(int(b.labels.size(0)) for b in batches)  # one end token per target
    counts[special] = seen[special] * counts.sum() / (len(targets) - seen[special].sum())
    probs = (counts + 1) / (counts.sum() + len(counts))
    assert base["unigram_lm_loss"] == pytest.approx(float(-np.log(probs[targets]).mean()))
    assert base["unigram_lm_acc"] == pytest.approx(float((targets == counts.argmax()).mean()))


def test_resume_is_exact(synthetic_shards, tmp_path):
    """12 steps straight == the same run stopped (SIGTERM) after step 6, then resumed."""
    from bertzoo.engine.loop import Trainer

    straight = pretrain(t5_config(synthetic_shards, tmp_path / "a", max_steps=12, save_every=6))
    cfg = t5_config(synthetic_shards, tmp_path / "b", max_steps=12, save_every=6)
    objective, dataset, collator, tokenizer = build_pretraining(cfg)

    def stop(trainer, step):
        if step == 5:  # honoured after the next step: a checkpoint at step 6
            os.kill(os.getpid(), signal.SIGTERM)

    first = Trainer(objective, dataset, collator, cfg.train, save_extra=tokenizer.save, callbacks=[stop]).train()
    assert first["steps"] == 6
    resumed = pretrain(t5_config(synthetic_shards, tmp_path / "b", max_steps=12, save_every=6), resume="auto")
    assert straight["steps"] == resumed["steps"] == 12 and resumed["steps_this_session"] == 6
    a = load_file(tmp_path / "a" / "final" / "model.safetensors")
    b = load_file(tmp_path / "b" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].equal(b[k]), k


def test_a_pretrained_t5_exports_to_hugging_face(synthetic_shards, tmp_path):
    transformers = pytest.importorskip("transformers")
    pretrain(t5_config(synthetic_shards, tmp_path / "run", max_steps=4, precision="fp32"))
    from bertzoo.loading import load_pretraining
    from bertzoo.variants.t5 import export_hf

    model = load_pretraining(tmp_path / "run" / "final").eval()
    export_hf(model, tmp_path / "hf")
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(5, model.config.vocab_size - 100, (2, 12)))
    labels = torch.from_numpy(rng.integers(5, model.config.vocab_size, (2, 5)))
    from bertzoo.batch import Batch

    with torch.no_grad():
        ours = model(
            Batch(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                labels=None,
                extra={"decoder_input_ids": torch.cat([torch.zeros(2, 1, dtype=torch.long), labels[:, :-1]], 1)},
            )
        ).logits
        theirs = hf(input_ids=ids, labels=labels).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_the_cli_pretrains_t5_and_refuses_bad_args(synthetic_shards, tmp_path):
    base = [sys.executable, "-m", "bertzoo", "pretrain", "configs/pretrain/t5-mini.yaml",
            "--data.shards", str(synthetic_shards), "--data.max_seq_len", "32", "--train.batch_size", "4",
            "--train.threads", "1", "--model.num_layers", "1", "--model.num_decoder_layers", "1",
            "--model.hidden_size", "32", "--model.num_heads", "2", "--model.intermediate_size", "64"]  # fmt: skip
    ok = subprocess.run([*base, "--train.max_steps", "2", "--train.output_dir", str(tmp_path / "ok")],
                        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (tmp_path / "ok" / "final" / "model.safetensors").is_file()
    # The shipped file is iid_mask with a local start (printed); span corruption's noise is checked on the CLI.
    assert "relative bias: heads pointed at" in ok.stderr
    assert json.loads(ok.stdout)["steps"] == 2  # stdout is the summary alone: the run's messages go to stderr
    bad = subprocess.run([*base, "--objective", "span_corruption", "--objective_args.noise_density", "1.5",
                          "--train.output_dir", str(tmp_path / "bad")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 2
    lines = [x for x in bad.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "noise_density" in lines[0]
    assert not (tmp_path / "bad").exists()


def test_a_local_start_points_half_the_heads_at_their_neighbours(synthetic_shards, tmp_path):
    """`relative_bias_init: local`: with 4 heads and T5's 32 buckets, encoder heads 0 and 1 get log(128) at the
    buckets of offsets -1 and +1 (1 and 17: the bidirectional table spends 16 buckets per side), decoder heads 0
    and 1 at offsets -1 and -2 (buckets 1 and 2); every other entry keeps its random start."""
    cfg = t5_config(synthetic_shards, tmp_path / "run")
    cfg.model.update(num_heads=4, relative_buckets=32, relative_max_distance=128)
    random_start = build_pretraining(cfg)[0]
    cfg.relative_bias_init = "local"
    local = build_pretraining(cfg)[0]
    peak = float(np.log(128))
    for stack, cells in (("encoder", [(1, 0), (17, 1)]), ("decoder", [(1, 0), (2, 1)])):
        before = getattr(random_start, stack).relative_bias.weight.detach().clone()
        after = getattr(local, stack).relative_bias.weight.detach()
        expected = before.clone()
        for bucket, head in cells:
            expected[bucket, head] = peak
        torch.testing.assert_close(after, expected, rtol=0, atol=0)
        assert before.abs().max() < 1.0  # the peaks stand out of T5's N(0, 32 ** -0.5) start
    # The encoder's head 0 now gives its largest score to the token before each query.
    scores = local.encoder.relative_bias(8)[0, 0]
    assert scores.argmax(-1)[1:].tolist() == list(range(7))


def test_a_local_start_needs_a_relative_table(synthetic_shards, tmp_path):
    cfg = tiny_config(synthetic_shards, tmp_path / "run")
    cfg.relative_bias_init = "local"
    with pytest.raises(ConfigError, match="relative_bias_init: local needs relative-position tables"):
        build_pretraining(cfg)
