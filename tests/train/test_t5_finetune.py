"""T5 fine-tuned on the seq2seq task: source and target as two sequences ending in the end token, the
decoder's teacher-forced loss, a small mapping learned, every part of a pretrained T5 (bertzoo or Hugging
Face) kept, random init as T5's, save / reload with the same predictions, layer-wise lr decay over both
stacks, options that do not apply refused, and the CLI end to end."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from bertzoo.batch import IGNORE_INDEX
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.tasks.seq2seq import Seq2SeqTask
from bertzoo.tasks.seq2seq_models import EncoderDecoderTaskModel

from helpers.seq2seq import WORDS, mapping_examples, t5_run_config, tiny_t5, write_jsonl
from helpers.tasks import make_cfg, small_tokenizer, train_steps

# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def tokenizer(directory, words=WORDS):
    directory.mkdir(parents=True, exist_ok=True)
    return small_tokenizer(directory, words)


@pytest.fixture()
def tok(tmp_path):
    return tokenizer(tmp_path / "tok")


def task_for(tok, **data) -> Seq2SeqTask:
    cfg = make_cfg("seq2seq", data={"max_seq_len": 16, "max_target_len": 6, **data}, generation={"max_new_tokens": 6})
    return Seq2SeqTask(cfg, tok)


def ids(tok, text: str) -> list[int]:
    return [tok.token_to_id(w) for w in text.split()]


@pytest.mark.parametrize("eos", [False, True])
def test_source_and_target_are_two_sequences_ending_in_the_end_token(tmp_path, eos):
    """No [CLS]; `</s>` ends both where the vocabulary has it ([SEP] otherwise); the model's decoder
    input is the target shifted right after the start token."""
    tok = tokenizer(tmp_path / "tok", [*WORDS, "</s>"] if eos else WORDS)
    end = tok.token_to_id("</s>") if eos else tok.special.sep
    assert end is not None
    task = task_for(tok)
    model = task.build(tiny_t5(tok))
    assert isinstance(model, EncoderDecoderTaskModel)
    rows = task.featurize([{"text": "the red cat", "target": "dog"}, {"text": "a dog", "target": "big cat"}], "x")
    assert rows[0]["input_ids"].tolist() == [*ids(tok, "the red cat"), end]
    assert rows[0]["labels"].tolist() == [*ids(tok, "dog"), end]
    batch = task.collate([rows[0], rows[1]])
    assert batch.input_ids[1, :3].tolist() == [*ids(tok, "a dog"), end]
    assert batch.attention_mask[:, :4].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert batch.labels[0, :3].tolist() == [*ids(tok, "dog"), end, IGNORE_INDEX]
    assert batch.labels[1, :4].tolist() == [*ids(tok, "big cat"), end, IGNORE_INDEX]
    decoder_input = model.lm.decoder_inputs(batch)[0]
    assert decoder_input[1, :3].tolist() == [tok.pad_id, *ids(tok, "big cat")]
    assert task.generation_config().eos_token_ids == [end]
    # Decoding stops at the end token and leaves it out of the text (here `</s>` is no special token).
    steps = []

    def dog_then_end(hidden: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*hidden.shape[:-1], tok.vocab_size)
        logits[..., end if steps else tok.token_to_id("dog")] = 1.0
        steps.append(1)
        return logits

    model.lm.lm_logits = dog_then_end
    assert task.predict(model, [{"text": "red cat"}]) == [{"prediction": "dog"}]
    assert len(steps) == 2


def test_long_sources_and_targets_are_cut_not_refused(tok):
    task = task_for(tok, max_seq_len=10, max_target_len=4)  # a single stack would need 4 + 4 more positions
    task.build(tiny_t5(tok))
    row = task.featurize([{"text": " ".join(["cat"] * 40), "target": " ".join(["dog"] * 20)}], "train")[0]
    assert row["input_ids"].tolist() == [tok.token_to_id("cat")] * 9 + [tok.special.sep]
    assert row["labels"].tolist() == [tok.token_to_id("dog")] * 3 + [tok.special.sep]


def test_the_loss_is_the_decoders_cross_entropy_over_the_target(tok):
    """Recomputed from the LM's logits with a decoder input written out by hand."""
    task = task_for(tok)
    lm = tiny_t5(tok, seed=1)
    model = task.build(lm)
    rows = task.featurize([{"text": "the red cat", "target": "dog"}, {"text": "a dog", "target": "big cat"}], "x")
    batch = task.collate([rows[0], rows[1]])
    with torch.no_grad():
        out = model(batch)
    sep, pad = tok.special.sep, tok.pad_id
    total, n = 0.0, 0
    for source, target in (("the red cat", "dog"), ("a dog", "big cat")):
        src = torch.tensor([[*ids(tok, source), sep]])
        gold = [*ids(tok, target), sep]
        with torch.no_grad():
            logits = lm.seq2seq(src, None, torch.tensor([[pad, *gold[:-1]]])).logits[0]
        total += float(F.cross_entropy(logits, torch.tensor(gold), reduction="sum"))
        n += len(gold)
    assert float(out.loss) == pytest.approx(total / n, rel=1e-5)
    assert float(out.metrics["target_loss"]) == pytest.approx(total / n, rel=1e-5)
    assert int(out.counts["target_loss"]) == n == model.loss_counts(batch)["target"]


@pytest.mark.parametrize("variant", ["t5", "mass"])
def test_a_source_dependent_mapping_is_learned(tok, variant):
    """48 examples, 60 steps: an untrained model matches nothing, the trained one nearly every dev target
    (it must read the colour in the source and stop after two or three words). MASS too: the same task
    model over a post-norm encoder-decoder with position tables, decoding from [MASK]."""
    from bertzoo.train.finetune import build_encoder, build_model

    spec = {"variant": variant, "preset": f"{variant}-tiny", "dropout": 0.0, "attention_dropout": 0.0}
    cfg = make_cfg("seq2seq", model_config=spec, data={"max_seq_len": 16, "max_target_len": 6})
    cfg.generation.max_new_tokens = 6
    task = Seq2SeqTask(cfg, tok)
    model = build_model(task, build_encoder(cfg, tok), cfg)
    assert isinstance(model, EncoderDecoderTaskModel)
    train = task.featurize(mapping_examples(48, 0), "train")
    dev = mapping_examples(30, 1)
    before = task.evaluate(model, dev, task.featurize(dev, "dev")).metrics
    losses = train_steps(task, model, train, steps=60, lr=3e-3, batch_size=16)
    model.eval()
    result = task.evaluate(model, dev, task.featurize(dev, "dev"))
    assert not any(m.training for m in model.modules())  # decoding put the model back as it was
    assert before["exact_match"] == 0.0
    assert result.metrics["exact_match"] >= 0.9, result.metrics
    assert sum(losses[-5:]) < 0.2 * sum(losses[:5])
    assert result.metrics["loss"] < 0.2 * before["loss"]
    # model.generate on a source gives what evaluation decoded.
    source = torch.from_numpy(task.featurize([{"text": dev[0]["text"]}], "predict")[0]["input_ids"])[None]
    out = model.generate(source, config=task.generation_config())
    tokens = out.sequences[0, : int(out.lengths[0])].tolist()
    assert tokens[-1] == tok.special.sep
    assert tok.decode(tokens) == result.predictions[0]["prediction"] == dev[0]["target"]


def test_a_t5_pretraining_directory_is_fine_tuned_whole(tmp_path, tok):
    """build_encoder hands seq2seq the EncoderDecoderLM: every tensor of the task model, the decoder's
    and the LM head's included, is the saved one."""
    from bertzoo.train.finetune import build_encoder, build_model

    lm = tiny_t5(tok, seed=7, tie_word_embeddings=False, scale_decoder_outputs=False)  # v1.1: its own head
    lm.save_pretrained(tmp_path / "pre")
    tok.save(tmp_path / "pre")
    saved = {k: v.clone() for k, v in lm.state_dict().items()}
    cfg = make_cfg("seq2seq", model=str(tmp_path / "pre"), data={"max_seq_len": 16, "max_target_len": 6})
    task = Seq2SeqTask(cfg, tok)
    model = build_model(task, build_encoder(cfg, tok), cfg)
    state = model.state_dict()
    assert state.keys() == saved.keys()
    for key, value in saved.items():
        assert torch.equal(state[key], value), key
    assert torch.equal(model.decoder.stack.layers[1].cross.kv.weight, lm.decoder.stack.layers[1].cross.kv.weight)
    assert torch.equal(model.lm_head.decoder.weight, lm.lm_head.decoder.weight)
    # Another task reads the encoder alone.
    from bertzoo.models.encoder import Encoder

    encoder = build_encoder(make_cfg("classification", model=str(tmp_path / "pre")), tok)
    assert type(encoder) is Encoder


def test_a_hugging_face_t5_directory_loads_whole_and_an_encoder_alone_is_refused(tmp_path, tok):
    from bertzoo.hub import export_hf
    from bertzoo.train.finetune import build_encoder

    lm = tiny_t5(tok, seed=3)
    export_hf(lm, tmp_path / "hf")
    tok.save(tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["T5ForConditionalGeneration"]
    cfg = make_cfg("seq2seq", model=str(tmp_path / "hf"), data={"max_seq_len": 16, "max_target_len": 6})
    loaded = build_encoder(cfg, tok)
    assert isinstance(loaded, EncoderDecoderLM)
    for key, value in lm.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key

    export_hf(lm.encoder, tmp_path / "enc")  # T5EncoderModel: no decoder to generate with
    tok.save(tmp_path / "enc")
    with pytest.raises(CheckpointError, match="no decoder"):
        build_encoder(make_cfg("seq2seq", model=str(tmp_path / "enc")), tok)


def test_random_init_is_t5s_and_positions_do_not_limit_t5(tok):
    from bertzoo.train.finetune import build_encoder

    spec = {"variant": "t5", "preset": "t5-tiny", "num_decoder_layers": 3}
    cfg = make_cfg("seq2seq", model_config=spec, data={"max_seq_len": 2048, "max_target_len": 600})
    model = build_encoder(cfg, tok)
    assert isinstance(model, EncoderDecoderLM)
    assert len(model.decoder.stack.layers) == 3 and model.config.decoder_start_token_id is not None
    # T5 draws the word table from N(0, 1) (initializer_factor 1.0), not BERT's N(0, 0.02).
    assert 0.9 < float(model.word_embeddings.weight.detach().std()) < 1.1
    # The same seed gives the same model; the position check applies where there is a position table.
    again = build_encoder(cfg, tok)
    assert torch.equal(again.decoder.stack.layers[0].cross.q.weight, model.decoder.stack.layers[0].cross.q.weight)
    table = {**spec, "position": "learned", "max_position": 32}
    with pytest.raises(ConfigError, match="data.max_target_len=40"):
        build_encoder(make_cfg("seq2seq", model_config=table, data={"max_seq_len": 32, "max_target_len": 40}), tok)


def test_layer_lr_decay_runs_over_both_stacks(tok):
    """2 encoder and 3 decoder layers at decay 0.5: each stack decays from its own top layer, the shared
    word table (the bottom of both) sits one step below the deeper one's bottom layer."""
    from bertzoo.tasks.techniques import layerwise_lr_groups

    model = task_for(tok).build(tiny_t5(tok, num_layers=2, num_decoder_layers=3))
    lr = {name: g["lr"] for g in layerwise_lr_groups(model, 1.0, 0.5, 0.01) for name in g["param_names"]}
    expected = {
        "encoder.embeddings.word.weight": 0.125,
        "encoder.stack.layers.0.attention.qkv.weight": 0.5,
        "encoder.stack.layers.1.ffn.down.weight": 1.0,
        "decoder.stack.layers.0.cross.q.weight": 0.25,
        "decoder.stack.layers.1.attention.qkv.weight": 0.5,
        "decoder.stack.layers.2.ffn.up.weight": 1.0,
        "decoder.final_norm.weight": 1.0,
        "encoder.relative_bias.weight": 1.0,
    }
    assert {k: lr[k] for k in expected} == expected
    assert len(lr) == len({id(p) for p in model.parameters()})


@pytest.mark.parametrize(
    ("technique", "match"),
    [
        ({"lm_weight": 0.3}, "technique.lm_weight"),
        ({"target_mask_prob": 0.5}, "technique.target_mask_prob"),
        ({"pooling": "mean"}, "technique.pooling"),
        ({"feature_layers": 2}, "technique.feature_layers"),
    ],
)
def test_options_that_do_not_apply_to_an_encoder_decoder_are_refused(tok, technique, match):
    from bertzoo.tasks.techniques import apply_techniques

    cfg = make_cfg("seq2seq", technique=technique, data={"max_seq_len": 16, "max_target_len": 6})
    with pytest.raises(ConfigError, match=match):
        model = Seq2SeqTask(cfg, tok).build(tiny_t5(tok))
        apply_techniques(model, cfg.technique)


def test_the_defaults_and_lm_weight_off_are_accepted(tok):
    from bertzoo.tasks.techniques import apply_techniques

    for technique in ({}, {"lm_weight": 0.0}, {"layer_lr_decay": 0.8}):
        cfg = make_cfg("seq2seq", technique=technique, data={"max_seq_len": 16, "max_target_len": 6})
        model = Seq2SeqTask(cfg, tok).build(tiny_t5(tok))
        assert apply_techniques(model, cfg.technique) == {}


def run_config(tmp_path, tok, **technique) -> str:
    """`t5_run_config` on the mapping task (48 training, 16 dev examples)."""
    data = {
        "train": write_jsonl(tmp_path / "train.jsonl", mapping_examples(48, 0)),
        "dev": write_jsonl(tmp_path / "dev.jsonl", mapping_examples(16, 1)),
    }
    return t5_run_config(tmp_path, tok, data, technique)


def test_cli_finetune_then_reload_evaluate_and_predict_the_same(tmp_path, tok):
    from bertzoo.cli import main
    from bertzoo.loading import load_encoder_decoder, load_finetuned

    out = tmp_path / "run"
    assert main(["finetune", run_config(tmp_path, tok)]) == 0
    report = json.loads((out / "report.json").read_text())
    dev = report["dev"]
    assert dev["metrics"]["exact_match"] >= 0.9, dev["metrics"]
    task, model, _ = load_finetuned(out / "model")
    assert isinstance(model, EncoderDecoderTaskModel)
    rows = mapping_examples(16, 1)
    reloaded = task.predict(model, [{"text": r["text"]} for r in rows])
    # report.json keeps the predictions the model made before it was saved.
    assert [r["prediction"] for r in reloaded] == [s["prediction"] for s in dev["report"]["samples"]]
    assert main(["evaluate", str(out / "model"), "--split", "dev", "--out", str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())["metrics"]
    assert evaluated == pytest.approx(dev["metrics"], rel=1e-5)
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"id": 7, "text": rows[0]["text"]}, {"text": rows[1]["text"]}])
    assert main(["predict", str(out / "model"), "--input", inputs, "--output", str(tmp_path / "pred.jsonl")]) == 0
    predicted = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert predicted == [{"id": 7, "prediction": reloaded[0]["prediction"]}, {"prediction": reloaded[1]["prediction"]}]
    # The fine-tuned weights are an EncoderDecoderLM's: the model can start another fine-tuning.
    lm = load_encoder_decoder(out / "model")
    assert torch.equal(lm.decoder.stack.layers[0].cross.q.weight, model.decoder.stack.layers[0].cross.q.weight)
    # ... and exports as the Hugging Face T5ForConditionalGeneration it is, with the same logits.
    transformers = pytest.importorskip("transformers")
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(out / "model"), str(tmp_path / "hf")]) == 0
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    dec = torch.tensor([[lm.config.decoder_start_token_id, 9, 10]])
    with torch.no_grad():
        ours = lm.eval().seq2seq(ids, torch.ones_like(ids), dec).logits
        theirs = hf(input_ids=ids, decoder_input_ids=dec).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_cli_refuses_an_option_that_does_not_apply_in_one_line(tmp_path, tok, capsys):
    from bertzoo.cli import main

    assert main(["finetune", run_config(tmp_path, tok, target_mask_prob=0.5)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "technique.target_mask_prob" in err[0], err
    assert not (tmp_path / "run" / "model").exists()
