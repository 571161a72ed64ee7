"""DistilBERT and Hugging Face transformers, both ways at 1e-5: DistilBertModel, DistilBertForMaskedLM and
the DistilBertFor<Task> classes (pre_classifier = our encoder's relu pooler); what the exporter refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertzoo import io, loading
from bertzoo.batch import Batch
from bertzoo.cli import main
from bertzoo.config import FinetuneConfig, to_plain
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.hub import convert_directory, export_hf, load_encoder
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants import distilbert

from helpers.parity import close, perturb

transformers = pytest.importorskip("transformers")

VOCAB = 99
HF_TINY = {"vocab_size": VOCAB, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 37, "max_position_embeddings": 64}
OURS_TINY = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 37,
    "max_position": 64,
}


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def inputs(vocab: int = VOCAB, seed: int = 0, shape: tuple[int, ...] = (3, 13)) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and a padding mask: the second row (of the last dimension's rows) ends in padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[..., 1, 8:] = 0
    return ids, mask


def tiny_hf(cls_name: str, seed: int = 0, **fields):
    torch.manual_seed(seed)
    return perturb(getattr(transformers, cls_name)(transformers.DistilBertConfig(**{**HF_TINY, **fields})), seed)


def tokenizer_dir(tmp_path: Path) -> Path:
    from helpers.finetune import write_task_files

    return Path(write_task_files(tmp_path / "data")["tokenizer"])


# --- Hugging Face -> bertzoo --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls_name", ["DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification"]
)
def test_import_gives_the_hidden_states_of_transformers(tmp_path, cls_name) -> None:
    hf = tiny_hf(cls_name)
    hf.save_pretrained(tmp_path)
    encoder = load_encoder(tmp_path).eval()
    assert encoder.config.variant == "distilbert" and encoder.embeddings.token_type is None
    # Only the sequence classifier has a pre_classifier, which becomes the encoder's relu pooler.
    assert encoder.config.pooler is (cls_name == "DistilBertForSequenceClassification")
    assert encoder.config.pooler_act == "relu"
    ids, mask = inputs()
    sel = mask.bool()
    base = hf if cls_name == "DistilBertModel" else hf.distilbert
    with torch.no_grad():
        ref = base(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        ours = encoder(ids, mask, output_hidden_states=True)
    for theirs, mine in zip(ref.hidden_states, ours.hidden_states, strict=True):  # the embeddings, every layer
        close(mine[sel], theirs[sel])
    close(ours.last_hidden_state[sel], ref.last_hidden_state[sel])


@pytest.mark.parametrize("tie", [True, False])
def test_masked_lm_imports_with_equal_logits(tmp_path, tie) -> None:
    hf = tiny_hf("DistilBertForMaskedLM", seed=1, tie_word_embeddings=tie)
    hf.save_pretrained(tmp_path)
    kind, model = loading.load(tmp_path)
    assert kind == loading.PRETRAINING and type(model) is MaskedLM
    model.eval()
    assert model.nsp_head is None and model.config.tie_word_embeddings is tie
    ids, mask = inputs(seed=1)
    sel = mask.bool()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        out = model.encoder(ids, mask)
        close(model.mlm_head(out.last_hidden_state, sel), ref[sel])


@pytest.mark.parametrize(
    ("cls_name", "task", "labels"),
    [
        ("DistilBertForSequenceClassification", "classification", ["neg", "pos", "mixed"]),
        ("DistilBertForTokenClassification", "token_classification", ["O", "B-PER", "I-PER"]),
    ],
)
def test_classifiers_convert_to_finetuned_models_with_equal_logits(tmp_path, cls_name, task, labels) -> None:
    hf = tiny_hf(
        cls_name,
        seed=2,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )
    src = tmp_path / "hf"
    hf.save_pretrained(src)
    from bertzoo.data.tokens.tokenizer import Tokenizer

    Tokenizer.load(tokenizer_dir(tmp_path)).save(src)  # a task model needs its tokenizer
    with pytest.raises(CheckpointError, match="convert it first"):
        loading.load(src)  # as for BertForSequenceClassification
    summary = convert_directory(src, tmp_path / "ours", "hf", "bertzoo")
    assert summary["kind"] == f"fine-tuned {task}" and summary["architecture"] == cls_name
    _, model, _ = loading.load_finetuned(tmp_path / "ours")
    assert model.head_config["labels"] == labels
    # The sequence classifier's pre_classifier is the encoder's relu pooler; the tagger has none.
    assert model.encoder.config.pooler is (task == "classification") and model.encoder.config.pooler_act == "relu"
    ids, mask = inputs(seed=2)
    sel = mask.bool() if task == "token_classification" else slice(None)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        close(model(Batch(input_ids=ids, attention_mask=mask)).logits[sel], ref[sel])


def test_sinusoidal_positions_import_exactly_as_their_stored_table(tmp_path) -> None:
    """transformers 5.x stores (and trains) the sinusoidal table like a learned one: its checkpoint's table,
    not a recomputed one, is what it reads."""
    hf = tiny_hf("DistilBertModel", seed=3, sinusoidal_pos_embds=True)
    hf.save_pretrained(tmp_path / "hf")
    encoder = load_encoder(tmp_path / "hf").eval()
    assert encoder.config.position == "learned"
    ids, mask = inputs(seed=3)
    sel = mask.bool()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        close(encoder(ids, mask).last_hidden_state[sel], ref[sel])
    export_hf(encoder, tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["sinusoidal_pos_embds"] is False
    reloaded = transformers.AutoModel.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        close(reloaded(input_ids=ids, attention_mask=mask).last_hidden_state[sel], ref[sel])


# --- bertzoo -> Hugging Face --------------------------------------------------------------------------


def test_encoder_exports_as_distilbert_model_without_its_pooler(tmp_path) -> None:
    torch.manual_seed(4)
    config = distilbert.model_config({**OURS_TINY, "pooler": True})  # a fine-tuned relu pre_classifier
    encoder = perturb(Encoder(config), seed=4)
    export_hf(encoder, tmp_path)
    assert "pre_classifier.weight" not in io.read_weights(tmp_path)
    hf = transformers.AutoModel.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == "DistilBertModel"
    ids, mask = inputs(seed=4)
    sel = mask.bool()
    with torch.no_grad():
        close(hf(input_ids=ids, attention_mask=mask).last_hidden_state[sel], encoder(ids, mask).last_hidden_state[sel])


@pytest.mark.parametrize("tie", [True, False])
def test_masked_lm_exports_with_equal_logits(tmp_path, tie) -> None:
    torch.manual_seed(5)
    model = perturb(distilbert.build(distilbert.model_config({**OURS_TINY, "tie_word_embeddings": tie})), seed=5)
    export_hf(model, tmp_path)
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == "DistilBertForMaskedLM"
    assert (hf.vocab_projector.weight is hf.distilbert.embeddings.word_embeddings.weight) is tie
    ids, mask = inputs(seed=5)
    sel = mask.bool()
    with torch.no_grad():
        ours = model.mlm_head(model.encoder(ids, mask).last_hidden_state, sel)
        close(hf(input_ids=ids, attention_mask=mask).logits[sel], ours)


def task_model(tmp_path: Path, task: str, labels: list[str], **technique):
    """A DistilBERT task model as `bertzoo finetune` builds it from `model_config` (a relu pooler added
    for the [CLS] classifiers), every weight perturbed; with its tokenizer and config."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.tasks import TASKS
    from bertzoo.train.finetune import build_encoder, build_model

    tok_dir = tokenizer_dir(tmp_path)
    tok = Tokenizer.load(tok_dir)
    spec = {"variant": "distilbert", "preset": "distilbert-mini", **OURS_TINY}
    del spec["vocab_size"]  # the tokenizer's
    cfg = FinetuneConfig(task=task, model_config=spec, tokenizer=str(tok_dir))
    cfg.data.labels = labels
    cfg.data.max_seq_len = 32
    for key, value in technique.items():
        setattr(cfg.technique, key, value)
    model = build_model(TASKS[task](cfg, tok), build_encoder(cfg, tok), cfg)
    return perturb(model, seed=6), tok, cfg


@pytest.mark.parametrize(
    ("task", "auto", "labels"),
    [
        ("classification", "AutoModelForSequenceClassification", ["neg", "pos", "mixed"]),
        ("token_classification", "AutoModelForTokenClassification", ["PER", "LOC"]),
        ("multiple_choice", "AutoModelForMultipleChoice", []),
        ("qa", "AutoModelForQuestionAnswering", []),
    ],
)
def test_every_task_head_exports_with_equal_logits(tmp_path, task, auto, labels) -> None:
    model, tok, _ = task_model(tmp_path, task, labels)
    pooled = task in ("classification", "multiple_choice")
    assert (model.encoder.pooler is not None) is pooled and model.encoder.config.pooler_act == "relu"
    export_hf(model, tmp_path / "hf")
    hf = getattr(transformers, auto).from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__.startswith("DistilBertFor")
    ids, mask = inputs(tok.vocab_size, seed=6, shape=(2, 3, 9) if task == "multiple_choice" else (3, 9))
    with torch.no_grad():
        ours = model(Batch(input_ids=ids, attention_mask=mask)).logits
        out = hf(input_ids=ids, attention_mask=mask)
    sel = mask.bool()
    if task == "qa":
        close(torch.stack([out.start_logits, out.end_logits], dim=-1)[sel], ours[sel])
    elif task == "token_classification":
        close(out.logits[sel], ours[sel])
        assert hf.config.id2label == dict(enumerate(model.head_config["labels"]))  # O, B-PER, I-PER, ...
    else:
        close(out.logits, ours)
    if task == "classification":
        assert hf.config.id2label == dict(enumerate(labels)) and hf.config.label2id == {"neg": 0, "pos": 1, "mixed": 2}
        assert hf.config.problem_type == "single_label_classification"


def saved_finetuned(tmp_path: Path, **technique) -> tuple[Path, torch.nn.Module]:
    """What `bertzoo finetune` leaves in model/: the model, its tokenizer, its fine-tuning config."""
    model, tok, cfg = task_model(tmp_path, "classification", ["neg", "pos", "mixed"], **technique)
    src = tmp_path / "model"
    model.save_pretrained(src)
    tok.save(src)
    (src / io.FINETUNE_CONFIG).write_text(json.dumps(to_plain(cfg)), encoding="utf-8")
    return src, model


def test_cli_convert_round_trip_of_a_finetuned_classifier(tmp_path, capsys) -> None:
    src, model = saved_finetuned(tmp_path)
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(src), str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "DistilBertForSequenceClassification"
    assert hf.config.id2label == {0: "neg", 1: "pos", 2: "mixed"}
    ids, mask = inputs(31, seed=7)
    with torch.no_grad():
        ours = model(Batch(input_ids=ids, attention_mask=mask)).logits
        close(hf(input_ids=ids, attention_mask=mask).logits, ours)
    assert main(["convert", "--from", "hf", "--to", "bertzoo", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    _, back, _ = loading.load_finetuned(tmp_path / "back")
    assert back.head_config["labels"] == ["neg", "pos", "mixed"]
    with torch.no_grad():
        close(back(Batch(input_ids=ids, attention_mask=mask)).logits, ours)
    capsys.readouterr()


def test_cli_convert_refuses_a_mean_pooled_classifier_in_one_line(tmp_path, capsys) -> None:
    src, _ = saved_finetuned(tmp_path, pooling="mean")
    capsys.readouterr()
    code = main(["convert", "--from", "bertzoo", "--to", "hf", str(src), str(tmp_path / "hf")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "DistilBertForSequenceClassification" in err[0] and "technique.pooling=mean" in err[0]
    assert not (tmp_path / "hf" / "config.json").exists()


# --- what does not export -----------------------------------------------------------------------------


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"type_vocab_size": 2}, ["type_vocab_size=2"]),
        ({"norm": "pre"}, ["norm='pre'"]),
        ({"type_vocab_size": 2, "norm": "pre", "layer_norm_eps": 1e-5}, ["type_vocab_size=2", "norm='pre'", "1e-05"]),
        ({"embedding_size": 16}, ["factorized embeddings"]),
        ({"share": "all"}, ["share='all'"]),
        ({"position": "sinusoidal"}, ["position='sinusoidal'"]),
    ],
)
def test_export_refuses_what_distilbert_cannot_hold_in_one_line(tmp_path, fields, expected) -> None:
    encoder = Encoder(distilbert.model_config({**OURS_TINY, **fields}))
    with pytest.raises(CheckpointError) as exc:
        export_hf(encoder, tmp_path / "out")
    text = one_line(exc)
    assert "'distilbert'" in text and all(e in text for e in expected), text
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_pooler_hugging_face_computes_differently_is_refused(tmp_path) -> None:
    from bertzoo.variants import bert

    tanh = distilbert.model_config({**OURS_TINY, "pooler": True, "pooler_act": "tanh"})
    with pytest.raises(CheckpointError, match="tanh pooler.*pre_classifier is relu"):
        distilbert.config_to_hf(tanh, ["BertForSequenceClassification"])
    assert distilbert.config_to_hf(tanh)["architectures"] == ["DistilBertModel"]  # not exported there
    relu_bert = bert.model_config({**OURS_TINY, "pooler_act": "relu"})
    with pytest.raises(CheckpointError, match="relu pooler"):
        export_hf(Encoder(relu_bert), tmp_path / "bert")
    with pytest.raises(CheckpointError, match="no next-sentence head"):
        distilbert.config_to_hf(distilbert.model_config(OURS_TINY), ["BertForPreTraining"])


def test_defaults_and_objectives() -> None:
    config = distilbert.model_config({"preset": "distilbert-base"})
    assert (config.num_layers, config.hidden_size, config.num_heads, config.intermediate_size) == (6, 768, 12, 3072)
    assert (config.type_vocab_size, config.pooler, config.pooler_act) == (0, False, "relu")
    # The paper's 66M parameters (BERT-base's embeddings without segments, 6 layers, no pooler).
    assert abs(Encoder(config).num_parameters() - 66e6) / 66e6 < 0.01
    with pytest.raises(ConfigError, match="not available for DistilBERT"):
        distilbert.build(config, "mlm+nsp")
