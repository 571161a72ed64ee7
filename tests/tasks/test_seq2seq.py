"""Sequence-to-sequence fine-tuning: the layout of features, the labels of a left-to-right model, UniLM's
target masking and attention pattern, learning a small generation task both ways, the pretrained head
carried over, and the CLI end to end."""

from __future__ import annotations

import json
import random

import pytest
import torch

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import ModelConfig
from bertzoo.errors import ConfigError, DataError
from bertzoo.models.encoder import Encoder
from bertzoo.tasks.seq2seq import Seq2SeqTask
from bertzoo.variants import gpt

from helpers.seq2seq import tiny_gpt
from helpers.tasks import make_cfg, small_tokenizer, train_steps

WORDS = ["red", "green", "blue", "cat", "dog", "bird", "runs", "sleeps", "sings", "the", "a", "big", "small"]


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def tok(tmp_path):
    return small_tokenizer(tmp_path, WORDS)


def copy_examples(n: int, seed: int) -> list[dict]:
    """Source: six random words; target: its first two words in reverse order (needs the source, not a
    memorised answer: 13 x 13 targets)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(6)]
        out.append({"text": " ".join(words), "target": f"{words[1]} {words[0]}"})
    return out


def tiny_bert(vocab: int) -> Encoder:
    torch.manual_seed(0)
    return Encoder(
        ModelConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            intermediate_size=128,
            dropout=0.0,
            attention_dropout=0.0,
        )
    )


def task_for(tok, **data) -> Seq2SeqTask:
    cfg = make_cfg("seq2seq", data={"max_seq_len": 24, "max_target_len": 6, **data})
    return Seq2SeqTask(cfg, tok)


def test_features_lay_out_source_then_target(tok):
    task = task_for(tok)
    ds = task.featurize([{"text": "the red cat", "target": "dog"}], "train")
    f = ds[0]
    s = tok.special
    red, cat, dog = (tok.token_to_id(w) for w in ("red", "cat", "dog"))
    assert f["input_ids"].tolist() == [s.cls, tok.token_to_id("the"), red, cat, s.sep, dog, s.sep]
    assert f["source_len"] == 5
    task.build(tiny_bert(tok.vocab_size))
    assert task.collate([f]).token_type_ids[0, :7].tolist() == [0, 0, 0, 0, 0, 1, 1]


def test_a_unilm_model_gets_its_seq2seq_segments(tok):
    """A model with UniLM's six segment rows reads source and target with the ids its seq2seq
    pretraining used (4 and 5), in training and in decoding."""
    task = task_for(tok)
    torch.manual_seed(0)
    encoder = Encoder(
        ModelConfig(
            vocab_size=tok.vocab_size,
            hidden_size=32,
            num_layers=1,
            num_heads=2,
            intermediate_size=64,
            type_vocab_size=6,
        )
    )
    model = task.build(encoder)
    f = task.featurize([{"text": "the red cat", "target": "dog"}], "train")[0]
    assert task.collate([f]).token_type_ids[0, :7].tolist() == [4, 4, 4, 4, 4, 5, 5]
    decoding = model.decoding()
    assert (decoding.source_type_id, decoding.type_id) == (4, 5)


def test_long_sources_and_targets_are_cut_to_fit(tok):
    task = task_for(tok)  # 24 positions, 6 for the target
    ds = task.featurize([{"text": " ".join(["cat"] * 40), "target": " ".join(["dog"] * 20)}], "train")
    ids = ds[0]["input_ids"].tolist()
    assert len(ids) <= 24
    assert ids.count(tok.token_to_id("dog")) == 5  # max_target_len - 1, the stop token takes the last
    assert ids[-1] == tok.special.sep


def test_causal_labels_cover_the_target_and_the_source_separately(tok):
    task = task_for(tok)
    task.build(tiny_gpt(tok.vocab_size))
    ds = task.featurize([{"text": "the red cat", "target": "dog"}, {"text": "a dog", "target": "big cat"}], "train")
    batch = task.collate([ds[0], ds[1]])
    ids = batch.input_ids
    # Row 0: [CLS] the red cat [SEP] | dog [SEP]; the target loss reads positions 5, 6.
    assert (batch.labels[0] != IGNORE_INDEX).nonzero().flatten().tolist() == [5, 6]
    assert batch.labels[0, 5:7].tolist() == ids[0, 5:7].tolist()
    assert (batch.extra["source_labels"][0] != IGNORE_INDEX).nonzero().flatten().tolist() == [1, 2, 3, 4]
    # Row 1 is shorter: nothing past its end is a label.
    assert (batch.labels[1] != IGNORE_INDEX).nonzero().flatten().tolist() == [4, 5, 6]


def test_unilm_masking_keeps_to_the_target_at_the_configured_rate(tok):
    task = task_for(tok)
    task.build(tiny_bert(tok.vocab_size))
    examples = copy_examples(400, 1)
    ds = task.featurize(examples, "train")
    batch = task.collate([ds[i] for i in range(len(ds))])
    types = batch.token_type_ids
    chosen = batch.labels != IGNORE_INDEX
    real = batch.attention_mask.bool()
    assert not (chosen & (types == 0)).any()  # never in the source
    assert (chosen.sum(1) >= 1).all()  # every example predicts something
    assert (batch.input_ids[chosen] == tok.special.mask).all()
    share = float(chosen.sum()) / float(((types == 1) & real).sum())
    assert 0.65 < share < 0.78  # 0.7, plus the forced one for rows that drew none
    # The final [SEP] is a target like any other: often masked.
    last = real.sum(1) - 1
    assert 0.6 < float(chosen[torch.arange(len(last)), last].float().mean()) < 0.85
    again = task.collate([ds[i] for i in range(len(ds))])
    assert torch.equal(again.labels, batch.labels)  # keyed by (seed, epoch, index): repeatable
    ds.set_epoch(1)
    assert not torch.equal(task.collate([ds[i] for i in range(len(ds))]).labels, batch.labels)


def test_unilm_pattern_is_the_seq2seq_mask(tok):
    task = task_for(tok)
    task.build(tiny_bert(tok.vocab_size))
    ds = task.featurize([{"text": "the red", "target": "dog cat"}], "train")
    pattern = task.collate([ds[0]]).extra["attention_pattern"][0].int()
    # [CLS] the red [SEP] | dog cat [SEP] | padding (to a multiple of 8)
    expected = [
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 0, 1],
    ]
    assert pattern.tolist() == expected


@pytest.mark.parametrize("kind", ["gpt", "unilm"])
def test_a_small_generation_task_is_learned(tok, kind):
    """A few hundred steps on 'first two words, reversed' must reach exact match far above chance."""
    task = task_for(tok, max_seq_len=16, max_target_len=4)
    task.cfg.train.seed = 0
    encoder = tiny_gpt(tok.vocab_size) if kind == "gpt" else tiny_bert(tok.vocab_size)
    model = task.build(encoder)
    train = task.featurize(copy_examples(600, 0), "train")
    train_steps(task, model, train, steps=300 if kind == "gpt" else 400, lr=3e-3, batch_size=32)
    dev = copy_examples(60, 1)
    result = task.evaluate(model, dev, task.featurize(dev, "dev"))
    assert result.metrics["exact_match"] > 0.6, result.metrics
    assert result.predictions[0].keys() == {"prediction", "gold"}
    # model.generate on a prompt gives what evaluation decoded.
    prompt = torch.from_numpy(task.featurize([{"text": dev[0]["text"]}], "predict")[0]["input_ids"])[None]
    out = model.generate(prompt, config=task.generation_config())
    assert tok.decode(out.sequences[0, : int(out.lengths[0])].tolist()) == result.predictions[0]["prediction"]


def test_bad_settings(tok):
    with pytest.raises(ConfigError, match="max_target_len"):
        task_for(tok, max_target_len=1)
    with pytest.raises(ConfigError, match="max_seq_len"):  # one sequence holds both (an encoder-decoder has two)
        task_for(tok, max_seq_len=8, max_target_len=6).build(tiny_bert(tok.vocab_size))
    task = task_for(tok)
    with pytest.raises(DataError, match="text"):
        task.featurize([{"text": "  ", "target": "x"}], "train")
    with pytest.raises(ConfigError, match="build"):
        task.collate([task.featurize([{"text": "a", "target": "b"}], "train")[0]])


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_pretrained_masked_lm_head_is_carried_over(tmp_path, tok):
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.train.finetune import build_model

    torch.manual_seed(3)
    pretrained = MaskedLM(tiny_bert(tok.vocab_size), sentence_task=None)
    with torch.no_grad():
        pretrained.mlm_head.dense.weight.normal_()
        pretrained.mlm_head.decoder.bias.uniform_()
    pretrained.save_pretrained(tmp_path / "mlm")
    tok.save(tmp_path / "mlm")
    cfg = make_cfg("seq2seq", model=str(tmp_path / "mlm"))
    from bertzoo.loading import load_encoder

    model = build_model(Seq2SeqTask(cfg, tok), load_encoder(tmp_path / "mlm"), cfg)
    assert torch.equal(model.head.dense.weight, pretrained.mlm_head.dense.weight)
    assert torch.equal(model.head.decoder.bias, pretrained.mlm_head.decoder.bias)
    assert model.head_from_pretraining >= 4


def test_cli_finetune_predict_and_generate(tmp_path, tok):
    from bertzoo.cli import main

    tok.save(tmp_path / "tok")
    train = write_jsonl(tmp_path / "train.jsonl", copy_examples(64, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", copy_examples(16, 1))
    out = tmp_path / "run"
    args = [
        "finetune",
        "--task",
        "seq2seq",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--model_config.variant",
        "gpt",
        "--model_config.preset",
        "gpt-tiny",
        "--data.train",
        train,
        "--data.dev",
        dev,
        "--data.max_seq_len",
        "24",
        "--data.max_target_len",
        "6",
        "--train.max_steps",
        "6",
        "--train.batch_size",
        "8",
        "--train.output_dir",
        str(out),
        "--generation.max_new_tokens",
        "5",
    ]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert {"rougeL", "bleu", "exact_match", "loss"} <= set(report["dev"]["metrics"])
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"text": "red cat runs"}, {"text": "the dog"}])
    target = tmp_path / "gen.jsonl"
    assert main(["generate", str(out / "model"), "--input", inputs, "--output", str(target)]) == 0
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(rows) == 2 and all(isinstance(r["prediction"], str) for r in rows)
    # The same model through `predict`.
    pred = tmp_path / "pred.jsonl"
    assert main(["predict", str(out / "model"), "--input", inputs, "--output", str(pred)]) == 0
    assert [json.loads(line)["prediction"] for line in pred.read_text().splitlines()] == [r["prediction"] for r in rows]


def test_generate_refuses_a_model_that_cannot_generate(tmp_path, tok, capsys):
    from bertzoo.cli import main

    tiny_bert(tok.vocab_size).save_pretrained(tmp_path / "enc")
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"text": "red cat"}])
    code = main(["generate", str(tmp_path / "enc"), "--input", inputs, "--output", str(tmp_path / "o.jsonl")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generate" in err[0]
    assert not (tmp_path / "o.jsonl").exists()


def test_generation_settings_that_contradict_exit_2(tmp_path, tok, capsys):
    from bertzoo.cli import main

    torch.manual_seed(0)
    model = gpt.build(gpt.model_config({"preset": "gpt-tiny", "vocab_size": tok.vocab_size}))
    model.save_pretrained(tmp_path / "lm")
    tok.save(tmp_path / "lm")
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"text": "red cat"}])
    args = ["generate", str(tmp_path / "lm"), "--input", inputs, "--output", str(tmp_path / "o.jsonl")]
    assert main([*args, "--generation.num_beams", "2", "--generation.do_sample", "true"]) == 2
    assert "contradict" in capsys.readouterr().err
    assert main([*args, "--generation.max_new_tokens", "4"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    # The model's own greedy continuation of [CLS] red cat: at most 4 new tokens, stopping at [SEP].
    from bertzoo.config import GenerationConfig

    prompt = torch.tensor([[tok.special.cls, *tok.encode_batch(["red cat"])[0]]])
    settings = GenerationConfig(max_new_tokens=4, eos_token_ids=[tok.special.sep], pad_token_id=tok.pad_id)
    result = model.eval().generate(prompt, torch.ones_like(prompt, dtype=torch.bool), settings)
    n = int(result.lengths[0])
    assert 1 <= n <= 4 and rows[0]["prediction"] == tok.decode(result.sequences[0, :n].tolist())


def test_generate_reads_a_hugging_face_gpt2_directory(tmp_path, tok):
    """A GPT2LMHeadModel directory (with our tokenizer files) generates what the bertzoo model does."""
    pytest.importorskip("transformers")
    from bertzoo.cli import main
    from bertzoo.hub import export_hf

    torch.manual_seed(0)
    model = gpt.build(gpt.model_config({"preset": "gpt-tiny", "vocab_size": tok.vocab_size})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(tmp_path / "ours")
    tok.save(tmp_path / "ours")
    export_hf(model, tmp_path / "hf")
    tok.save(tmp_path / "hf")
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "red cat"}, {"prompt": "the big dog sings"}])
    outs = []
    for name in ("ours", "hf"):
        target = tmp_path / f"{name}.jsonl"
        args = ["generate", str(tmp_path / name), "-i", inputs, "-o", str(target), "--generation.max_new_tokens=6"]
        assert main(args) == 0
        outs.append(target.read_text())
    assert outs[0] == outs[1] and outs[0].count("\n") == 2
