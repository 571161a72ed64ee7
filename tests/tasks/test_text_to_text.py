"""Text-to-text fine-tuning as T5 does it: task prefixes (data.source_prefix), multi-task mixtures with
examples-proportional mixing (data.mixture), adapters, frozen encoders and gradual unfreezing on an
encoder-decoder, and the bad input refused in one line: a label the tokenizer cannot write, a target or
a generation longer than the decoder's position table."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
import torch
import yaml

from bertzoo.data.tasks.mixture import Mixture
from bertzoo.engine.sampler import LengthBucketSampler, ResumableBatchSampler
from bertzoo.errors import ConfigError, DataError
from bertzoo.nn.adapter import AdaptedLinear, Adapter
from bertzoo.tasks.seq2seq import Seq2SeqTask
from bertzoo.tasks.seq2seq_models import EncoderDecoderTaskModel
from bertzoo.tasks.techniques import GradualUnfreezing, apply_techniques

from helpers.seq2seq import MAPPING, WORDS, mapping_examples, tiny_gpt, tiny_t5, write_jsonl
from helpers.seq2seq import t5_run_config as run_config
from helpers.tasks import make_cfg, small_tokenizer

PREFIX_WORDS = ["summarize", "colour", "size"]
# A second task over the same sources: the prefix alone says which target is wanted.
SIZES = {"red": "small dog", "green": "big bird", "blue": "the cat sleeps"}


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def tok(tmp_path):
    (tmp_path / "tok").mkdir()
    return small_tokenizer(tmp_path / "tok", [*WORDS, *PREFIX_WORDS])


def ids(tok, text: str) -> list[int]:
    return [tok.token_to_id(w) for w in text.split()]


def size_examples(n: int, seed: int) -> list[dict]:
    """The sources of `mapping_examples`, the target chosen by the colour from SIZES."""
    out = []
    for ex in mapping_examples(n, seed):
        colour = next(w for w in ex["text"].split() if w in SIZES)
        out.append({"text": ex["text"], "target": SIZES[colour]})
    return out


def colour_of(text: str) -> str:
    return next(w for w in text.split() if w in MAPPING)


# ------------------------------------------------------------------------------------ task prefixes


def test_the_prefix_starts_the_encoder_input_and_the_single_stack_source(tok):
    colon = tok.token_to_id(":")
    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6, "source_prefix": "summarize: "})
    task = Seq2SeqTask(cfg, tok)
    task.build(tiny_t5(tok))
    row = task.featurize([{"text": "the red cat", "target": "dog"}], "train")[0]
    assert row["input_ids"].tolist() == [tok.token_to_id("summarize"), colon, *ids(tok, "the red cat"), tok.special.sep]
    assert row["labels"].tolist() == [*ids(tok, "dog"), tok.special.sep]  # the target has no prefix

    single = Seq2SeqTask(
        make_cfg("seq2seq", data={"max_seq_len": 24, "max_target_len": 6, "source_prefix": "summarize: "}), tok
    )
    single.build(tiny_gpt(tok.vocab_size))
    row = single.featurize([{"text": "the red cat", "target": "dog"}], "train")[0]
    s = tok.special
    summarize = tok.token_to_id("summarize")
    assert row["input_ids"].tolist() == [
        s.cls,
        summarize,
        colon,
        *ids(tok, "the red cat"),
        s.sep,
        *ids(tok, "dog"),
        s.sep,
    ]
    assert row["source_len"] == 7


def test_prediction_reads_the_prefix_too(tok, monkeypatch):
    import bertzoo.tasks.seq2seq as seq2seq
    from bertzoo.models.generation import GenerationOutput

    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6, "source_prefix": "summarize: "})
    task = Seq2SeqTask(cfg, tok)
    model = task.build(tiny_t5(tok))
    seen = []

    def fake_generate(decoding, input_ids, attention_mask, config):
        seen.append(input_ids[attention_mask.bool()].tolist())
        return GenerationOutput(sequences=torch.tensor([ids(tok, "dog")]), lengths=torch.tensor([1]))

    monkeypatch.setattr(seq2seq, "generate", fake_generate)
    assert task.predict(model, [{"text": "red cat"}]) == [{"prediction": "dog"}]
    assert seen == [[tok.token_to_id("summarize"), tok.token_to_id(":"), *ids(tok, "red cat"), tok.special.sep]]


# ------------------------------------------------------------------------------------ mixing rates


@pytest.mark.parametrize(
    ("settings", "counts"),
    [
        ({}, [30, 10, 5]),  # examples-proportional, no limit: every example once
        ({"limit": 20}, [20, 10, 5]),  # the large task capped at K = 20
        # K = 20, T = 2: rates ∝ sqrt(20), sqrt(10), sqrt(5) = 4.4721, 3.1623, 2.2361 (sum 9.8705); an epoch of
        # 35 gives quotas 15.858, 11.213, 7.929: floors 15, 11, 7 and the 2 left to the largest remainders.
        ({"limit": 20, "temperature": 2.0}, [16, 11, 8]),
        # Fixed rates 1:1:2 of 45: quotas 11.25, 11.25, 22.5: floors 11, 11, 22 and the 1 left to the third.
        ({"rates": [1.0, 1.0, 2.0]}, [11, 11, 23]),
    ],
)
def test_epoch_counts_follow_t5s_rates(settings, counts):
    groups = [np.arange(0, 30), np.arange(30, 40), np.arange(40, 45)]
    mixture = Mixture.build(groups, ["a", "b", "c"], **settings)
    assert mixture.counts == counts
    assert mixture.size == sum(counts)


def test_a_capped_task_meets_every_example_before_repeating_and_an_upsampled_one_repeats_evenly():
    groups = [np.arange(0, 30), np.arange(30, 40), np.arange(40, 45)]
    mixture = Mixture.build(groups, ["a", "b", "c"], limit=20, temperature=2.0)  # 16, 11, 8 per epoch
    first, second = mixture.epoch_indices(0, 0), mixture.epoch_indices(0, 1)
    a = [i for i in [*first, *second] if i < 30]
    assert len(a) == 32 and sorted(a[:30]) == list(range(30))  # a whole pass of 30, then 2 of the next
    c = Counter(int(i) for i in first if i >= 40)
    assert sorted(c.values()) == [1, 1, 2, 2, 2]  # 8 of 5 examples: each once or twice
    b = Counter(int(i) for i in first if 30 <= i < 40)
    assert sorted(b.values()) == [1] * 9 + [2]
    assert np.array_equal(mixture.epoch_indices(0, 1), second)  # (seed, epoch) alone decide
    assert not np.array_equal(mixture.epoch_indices(1, 1), second)


# ------------------------------------------------------------------------------------ mixtures


def mixture_files(tmp_path, sizes: dict[str, int]) -> list[dict]:
    """A mixture of files: `colour` (MAPPING) and `size` (SIZES), the same kind of sources."""
    make = {"colour": mapping_examples, "size": size_examples}
    return [
        {
            "name": name,
            "train": write_jsonl(tmp_path / f"{name}-train.jsonl", make[name](n, 0)),
            "dev": write_jsonl(tmp_path / f"{name}-dev.jsonl", make[name](12, 1)),
            "prefix": f"{name}: ",
        }
        for name, n in sizes.items()
    ]


def test_each_task_gets_its_prefix_and_its_share_of_every_epoch(tmp_path, tok):
    mixture = mixture_files(tmp_path, {"colour": 30, "size": 10})
    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6, "mixture": mixture, "mixture_limit": 20})
    task = Seq2SeqTask(cfg, tok)
    task.build(tiny_t5(tok))
    examples = task.load("train")
    assert Counter(e["task"] for e in examples) == {"colour": 30, "size": 10}
    ds = task.featurize(examples, "train")
    colon = tok.token_to_id(":")
    for e, i in ((examples[0], 0), (examples[-1], len(examples) - 1)):
        assert ds[i]["input_ids"][:2].tolist() == [tok.token_to_id(e["task"]), colon]
        assert ds[i]["input_ids"][2:-1].tolist() == ids(tok, e["text"])
    assert ds.selection.counts == [20, 10]

    makers = (
        lambda: ResumableBatchSampler(30, 8, seed=3, drop_last=False, selection=ds.selection),
        lambda: LengthBucketSampler(ds.lengths, 8, seed=3, drop_last=False, selection=ds.selection),
    )
    for make in makers:
        sampler = make()
        for epoch in (0, 1, 2):
            sampler.set_epoch(epoch)
            served = [i for batch in sampler for i in batch]
            assert Counter(examples[i]["task"] for i in served) == {"colour": 20, "size": 10}, epoch
        # Resumed in the middle of an epoch: the rest of it is what the uninterrupted sampler serves.
        sampler.set_epoch(4)
        batches = list(sampler)
        sampler.set_epoch(4)
        sampler.skip(2)
        again = make()
        again.load_state_dict(sampler.state_dict())
        assert list(again) == batches[2:]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"dataset": "builtin:wiki-titles"}, "data.dataset and data.mixture"),
        ({"source_prefix": "x: "}, "each task's prefix"),
        ({"mixture": [{"dataset": "builtin:wiki-titles", "train": "a.jsonl"}]}, "has both"),
        ({"mixture": [{"prefix": "x: "}]}, "has neither"),
        ({"mixture": [{"train": "a/t.jsonl"}, {"train": "b/t.jsonl"}]}, "'t' is taken"),
        ({"mixture": [{"train": "a.jsonl", "name": "a b"}]}, "letters, digits"),
        ({"mixture": [{"train": "a.jsonl", "rate": 1.0}, {"train": "b.jsonl"}]}, "every task or on none"),
        ({"mixture": [{"train": "a.jsonl", "rate": 1.0}], "mixture_temperature": 2.0}, "with fixed rates"),
        ({"mixture_limit": 0}, "mixture_limit must be >= 1"),
        ({"mixture_temperature": 0.0}, "mixture_temperature must be > 0"),
        ({"mixture": [{"dataset": "builtin:wiki-titles", "dev": "d.jsonl"}]}, "own dev and test"),
    ],
)
def test_mixture_settings_that_cannot_work_are_refused(tok, data, match):
    base = {"mixture": [{"train": "a.jsonl"}, {"train": "b.jsonl"}]}
    with pytest.raises(ConfigError, match=match):
        Seq2SeqTask(make_cfg("seq2seq", data={**base, **data}), tok)


def test_text_to_text_options_are_refused_by_other_tasks(tok):
    from bertzoo.tasks import get_task

    for data in ({"source_prefix": "x: "}, {"mixture": [{"train": "a.jsonl"}]}):
        with pytest.raises(ConfigError, match="task: seq2seq"):
            get_task(make_cfg("classification", data=data), tok)


def cli(capsys, *args: str) -> tuple[int, list[str]]:
    from bertzoo.cli import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_two_task_mixture_is_learned_scored_per_task_and_reloaded(tmp_path, tok, capsys):
    """Two tasks over the same sources, told apart by their prefixes alone: the model must read them.
    48 + 24 examples, the larger capped at 30: an epoch is 30 + 24 = 54 examples, 4 batches of 16, so 25
    epochs are 100 steps (all 72 would be 5 batches)."""
    from bertzoo.loading import load_finetuned

    data = {"mixture": mixture_files(tmp_path, {"colour": 48, "size": 24}), "mixture_limit": 30}
    config = run_config(tmp_path, tok, data, epochs=25, eval_every=50)
    code, err = cli(capsys, "finetune", config)
    assert code == 0, err
    out = tmp_path / "run"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 100
    dev = json.loads((out / "report.json").read_text())["dev"]
    metrics = dev["metrics"]
    for key in ("exact_match", "rougeL", "loss"):
        assert metrics[key] == pytest.approx((metrics[f"colour_{key}"] + metrics[f"size_{key}"]) / 2)
    assert metrics["colour_exact_match"] >= 0.9 and metrics["size_exact_match"] >= 0.9, metrics
    assert dev["report"]["tasks"] == {"colour": {"examples": 12}, "size": {"examples": 12}}

    task, model, _ = load_finetuned(out / "model")
    sources = [e["text"] for e in mapping_examples(12, 1)]
    colour = task.predict(model, [{"task": "colour", "text": s} for s in sources])
    size = task.predict(model, [{"task": "size", "text": s} for s in sources])
    hits = [
        sum(p["prediction"] == table[colour_of(s)] for p, s in zip(preds, sources, strict=True))
        for preds, table in ((colour, MAPPING), (size, SIZES))
    ]
    assert [h / 12 for h in hits] == [metrics["colour_exact_match"], metrics["size_exact_match"]]
    assert Counter(s["task"] for s in dev["report"]["samples"]) == {"colour": 12, "size": 12}

    # `bertzoo evaluate` scores each task's own dev split again; a file names no task: refused.
    code, _ = cli(capsys, "evaluate", str(out / "model"), "--split", "dev", "--out", str(tmp_path / "e.json"))
    assert code == 0
    assert json.loads((tmp_path / "e.json").read_text())["metrics"] == pytest.approx(metrics, rel=1e-5)
    file = write_jsonl(tmp_path / "more.jsonl", mapping_examples(4, 2))
    code, err = cli(capsys, "evaluate", str(out / "model"), "--data", file)
    assert code == 2 and len(err) == 1 and "mixture of tasks" in err[0], err
    # `bertzoo predict`: each input names its task; one without is refused in one line.
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"task": "size", "text": sources[0]}])
    code, _ = cli(capsys, "predict", str(out / "model"), "--input", inputs, "--output", str(tmp_path / "p.jsonl"))
    assert code == 0
    assert json.loads((tmp_path / "p.jsonl").read_text()) == size[0]
    inputs = write_jsonl(tmp_path / "bad.jsonl", [{"text": sources[0]}])
    code, err = cli(capsys, "predict", str(out / "model"), "--input", inputs, "--output", str(tmp_path / "q.jsonl"))
    assert code == 2 and len(err) == 1 and "bad.jsonl:1" in err[0] and "colour, size" in err[0], err


def test_the_prefix_is_saved_with_the_model_and_applied_on_reload(tmp_path, tok, capsys):
    from bertzoo.loading import load_finetuned

    data = {
        "train": write_jsonl(tmp_path / "train.jsonl", mapping_examples(48, 0)),
        "dev": write_jsonl(tmp_path / "dev.jsonl", mapping_examples(16, 1)),
        "source_prefix": "summarize: ",
    }
    code, err = cli(capsys, "finetune", run_config(tmp_path, tok, data, max_steps=30))
    assert code == 0, err
    out = tmp_path / "run"
    dev = json.loads((out / "report.json").read_text())["dev"]
    task, model, _ = load_finetuned(out / "model")
    assert task.cfg.data.source_prefix == "summarize: "
    sources = [e["text"] for e in mapping_examples(16, 1)]
    reloaded = [p["prediction"] for p in task.predict(model, [{"text": s} for s in sources])]
    assert reloaded == [s["prediction"] for s in dev["report"]["samples"]]
    # The reloaded task's prompts start with the prefix (a model this simple might answer without it).
    start = [tok.token_to_id("summarize"), tok.token_to_id(":")]
    assert all(p[:2].tolist() == start for p in task._prompts(task.sources([{"text": s} for s in sources])))


# ------------------------------------------------------------------------------ techniques on T5


def trainable(model) -> set[str]:
    return {name for name, p in model.named_parameters() if p.requires_grad}


def t5_task_model(tok, **fields) -> EncoderDecoderTaskModel:
    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6})
    return Seq2SeqTask(cfg, tok).build(tiny_t5(tok, **fields))


def test_adapters_go_into_both_stacks_and_only_they_and_the_norms_train(tok):
    model = t5_task_model(tok, num_layers=2, num_decoder_layers=2)
    done = apply_techniques(model, make_cfg("seq2seq", technique={"adapter_size": 4}).technique)
    assert done == {"adapters": 8}
    adapter = [
        f"{p}.adapter.{a}.{w}"
        for p in ("attention.out", "ffn.down")
        for a in ("down", "up")
        for w in ("weight", "bias")
    ]
    expected = {
        *(f"encoder.stack.layers.{i}.{name}" for i in (0, 1) for name in adapter),
        *(f"decoder.stack.layers.{i}.{name}" for i in (0, 1) for name in adapter),
        *(f"encoder.stack.layers.{i}.{n}_residual.norm.weight" for i in (0, 1) for n in ("attention", "ffn")),
        *(f"decoder.stack.layers.{i}.{n}_residual.norm.weight" for i in (0, 1) for n in ("attention", "cross", "ffn")),
        "encoder.final_norm.weight",
        "decoder.final_norm.weight",
    }
    assert trainable(model) == expected
    assert not isinstance(model.decoder.stack.layers[0].cross.out, AdaptedLinear)  # none after cross-attention


def test_freeze_encoder_trains_the_decoder_and_an_untied_head(tok):
    model = t5_task_model(tok, num_layers=1, num_decoder_layers=1, tie_word_embeddings=False)
    apply_techniques(model, make_cfg("seq2seq", technique={"freeze_encoder": True}).technique)
    layer = "decoder.stack.layers.0."
    expected = {
        *(layer + n for n in ("attention.qkv.weight", "attention.out.weight", "attention_residual.norm.weight")),
        *(layer + n for n in ("cross.q.weight", "cross.kv.weight", "cross.out.weight", "cross_residual.norm.weight")),
        *(layer + n for n in ("ffn.up.weight", "ffn.down.weight", "ffn_residual.norm.weight")),
        "decoder.final_norm.weight",
        "decoder.relative_bias.weight",
        "lm_head.decoder.weight",
    }
    assert trainable(model) == expected  # the word table, shared with the encoder, stays frozen


def parts(model) -> set[str]:
    out = set()
    for name in trainable(model):
        m = re.match(r"(encoder|decoder)\.stack\.layers\.(\d+)\.", name)
        out.add(f"{m.group(1)}{m.group(2)}" if m else "embeddings" if ".embeddings." in name else name)
    return out


def test_gradual_unfreezing_goes_down_the_decoder_then_down_the_encoder(tok):
    model = t5_task_model(tok, num_layers=2, num_decoder_layers=3)
    schedule = apply_techniques(model, make_cfg("seq2seq", technique={"gradual_unfreezing": True}).technique)[
        "schedule"
    ]
    head = {
        "encoder.final_norm.weight",
        "decoder.final_norm.weight",
        "encoder.relative_bias.weight",
        "decoder.relative_bias.weight",
    }
    expected = [
        head,
        head | {"decoder2"},
        head | {"decoder2", "decoder1"},
        head | {"decoder2", "decoder1", "decoder0"},
        head | {"decoder2", "decoder1", "decoder0", "encoder1"},
        head | {"decoder2", "decoder1", "decoder0", "encoder1", "encoder0"},
        head | {"decoder2", "decoder1", "decoder0", "encoder1", "encoder0", "embeddings"},  # the tied word table
        head | {"decoder2", "decoder1", "decoder0", "encoder1", "encoder0", "embeddings"},
    ]
    assert parts(model) == expected[0]
    for epoch, want in enumerate(expected):
        schedule.apply(epoch)
        assert parts(model) == want, epoch
    schedule.apply(1)
    assert parts(model) == expected[1]  # the epoch alone decides (resume-safe)
    untied = t5_task_model(tok, num_layers=1, num_decoder_layers=1, tie_word_embeddings=False)
    GradualUnfreezing(untied).apply(0)
    assert "lm_head.decoder.weight" in trainable(untied)  # an own LM head is head


def test_gradual_unfreezing_in_a_run_moves_only_what_was_unfrozen(tmp_path, tok, capsys):
    """Two epochs: the head, then the decoder's top layer as well; nothing below it moves."""
    from bertzoo.config import FinetuneConfig, from_dict
    from bertzoo.engine.weights import load_weights
    from bertzoo.train.finetune import build_encoder

    data = {"train": write_jsonl(tmp_path / "train.jsonl", mapping_examples(32, 0))}
    config = run_config(tmp_path, tok, data, {"gradual_unfreezing": True}, epochs=2, max_steps=1000)
    code, err = cli(capsys, "finetune", config)
    assert code == 0, err
    cfg = from_dict(FinetuneConfig, yaml.safe_load(open(config, encoding="utf-8")))
    before = build_encoder(cfg, tok).state_dict()  # the run's random init: the same seed
    after = EncoderDecoderTaskModel(build_encoder(cfg, tok))
    load_weights(after, tmp_path / "run" / "model" / "model.safetensors")
    moved = {k for k, v in after.state_dict().items() if not torch.equal(v, before[k])}
    assert any(k.startswith("decoder.stack.layers.1.") for k in moved)
    assert {"decoder.final_norm.weight", "encoder.final_norm.weight"} <= moved
    assert not [k for k in moved if k.startswith(("decoder.stack.layers.0.", "encoder.stack.", "encoder.embeddings."))]


def test_adapters_learn_a_new_mapping_on_a_trained_model_and_reload_with_it(tmp_path, tok, capsys):
    """A T5 fine-tuned whole on the colour mapping learns the size mapping (the same sources, other
    targets) through adapters alone: its own weights stay as they were, and it reloads with its adapters."""
    from bertzoo.loading import load_encoder_decoder, load_finetuned

    first = {
        "train": write_jsonl(tmp_path / "colour.jsonl", mapping_examples(48, 0)),
        "dev": write_jsonl(tmp_path / "colour-dev.jsonl", mapping_examples(16, 1)),
    }
    code, err = cli(capsys, "finetune", run_config(tmp_path, tok, first, output_dir=str(tmp_path / "pre")))
    assert code == 0, err
    base = load_encoder_decoder(tmp_path / "pre" / "model").state_dict()

    data = {
        "train": write_jsonl(tmp_path / "size.jsonl", size_examples(48, 0)),
        "dev": write_jsonl(tmp_path / "size-dev.jsonl", size_examples(16, 1)),
    }
    config = run_config(tmp_path, tok, data, {"adapter_size": 16}, max_steps=80, lr=1e-2)
    cfg = yaml.safe_load(open(config, encoding="utf-8"))
    del cfg["model_config"]
    cfg["model"] = str(tmp_path / "pre" / "model")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    code, err = cli(capsys, "finetune", config)
    assert code == 0, err
    out = tmp_path / "run"
    report = json.loads((out / "report.json").read_text())
    assert report["dev"]["metrics"]["exact_match"] >= 0.9, report["dev"]["metrics"]
    trained = report["trainable_parameters"]
    assert trained["trainable"] < 0.25 * trained["total"]

    task, model, _ = load_finetuned(out / "model")
    assert sum(isinstance(m, Adapter) for m in model.decoder.modules()) == 4
    assert sum(isinstance(m, Adapter) for m in model.encoder.modules()) == 4
    state = model.state_dict()
    kept = [k for k in base if not re.search(r"norm\.(weight|bias)$", k)]  # all but the norms
    assert kept and [k for k in kept if not torch.equal(state[k], base[k])] == []
    sources = [e["text"] for e in size_examples(16, 1)]
    reloaded = [p["prediction"] for p in task.predict(model, [{"text": s} for s in sources])]
    assert reloaded == [s["prediction"] for s in report["dev"]["report"]["samples"]]
    # The weights load as an EncoderDecoderLM with its adapters (to fine-tune again or to decode).
    lm = EncoderDecoderTaskModel(load_encoder_decoder(out / "model")).eval()
    batch = task.collate([task.featurize([{"text": sources[0], "target": "big cat"}], "x")[0]])
    with torch.no_grad():
        assert torch.equal(lm(batch).loss, model(batch).loss)
    # Hugging Face's T5 has no place for adapters: refused in one line.
    code, err = cli(capsys, "convert", "--from", "bertzoo", "--to", "hf", str(out / "model"), str(tmp_path / "hf"))
    assert code == 2 and len(err) == 1 and "adapters" in err[0], err


# ------------------------------------------------------------------------------------ bad input


def test_a_label_the_tokenizer_cannot_write_is_refused_in_one_line(tmp_path, tok, capsys):
    rows = [{**e, "target": "猫 runs"} if "red" in e["text"].split() else e for e in mapping_examples(48, 0)]
    data = {"train": write_jsonl(tmp_path / "train.jsonl", rows)}
    code, err = cli(capsys, "finetune", run_config(tmp_path, tok, data))
    assert code == 2 and len(err) == 1, err
    assert "'猫 runs'" in err[0] and "'猫'" in err[0] and "vocabulary" in err[0] and "change the label" in err[0]
    assert not (tmp_path / "run" / "model").exists()


def test_free_text_with_an_unknown_word_is_a_warning(tok):
    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6})
    task = Seq2SeqTask(cfg, tok)
    task.build(tiny_t5(tok))
    rows = [{"text": "the red cat", "target": t} for t in ("big cat", "a dog", "猫 sings", "small bird")]
    with pytest.warns(UserWarning, match="1 of 4 training targets"):
        task.featurize(rows, "train")
    task.featurize(rows, "dev")  # only training targets are checked


@pytest.mark.parametrize(
    ("data", "generation", "shown"),
    [
        ({"max_seq_len": 8, "max_target_len": 10}, {"max_new_tokens": 6}, "data.max_target_len=10"),
        ({"max_seq_len": 8, "max_target_len": 6}, {"max_new_tokens": 12}, "generation.max_new_tokens=12"),
    ],
)
def test_a_target_longer_than_masss_position_table_is_refused_in_one_line(
    tmp_path, tok, capsys, data, generation, shown
):
    data = {"train": write_jsonl(tmp_path / "train.jsonl", mapping_examples(8, 0)), **data}
    path = run_config(tmp_path, tok, data)
    cfg = yaml.safe_load(open(path, encoding="utf-8"))
    cfg["model_config"] = {"variant": "mass", "preset": "mass-tiny", "max_position": 8}
    cfg["generation"] = generation
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    code, err = cli(capsys, "finetune", path)
    assert code == 2 and len(err) == 1, err
    assert shown in err[0] and "max_position=8" in err[0]


def test_an_encoder_decoder_generates_a_full_table_of_source_and_of_target():
    """The source and the target have positions of their own: a source filling MASS's table leaves the
    target its whole table too (it used to be refused as if both shared one)."""
    from bertzoo.models.generation import generate
    from bertzoo.variants import mass

    torch.manual_seed(0)
    model = mass.build(mass.model_config({"preset": "mass-tiny", "vocab_size": 50, "max_position": 16})).eval()
    source = torch.randint(5, 50, (1, 16))
    assert generate(model.decoding(), source, max_new_tokens=16).sequences.shape == (1, 16)
    with pytest.raises(ConfigError, match="max_new_tokens=17 exceeds the decoder's 16 positions"):
        generate(model.decoding(), source, max_new_tokens=17)
    with pytest.raises(ConfigError, match="a source of 17 tokens exceeds the encoder's 16 positions"):
        generate(model.decoding(), torch.randint(5, 50, (1, 17)), max_new_tokens=2)


def test_a_mixture_task_without_training_examples_is_refused(tmp_path, tok):
    mixture = mixture_files(tmp_path, {"colour": 8, "size": 4})
    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6, "mixture": mixture})
    task = Seq2SeqTask(cfg, tok)
    task.build(tiny_t5(tok))
    examples = [e for e in task.load("train") if e["task"] == "colour"]
    with pytest.raises(DataError, match="'size' has no training examples"):
        task.featurize(examples, "train")
