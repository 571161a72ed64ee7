"""Distillation: the losses by hand, the teacher kept out of training, general and task distillation
end to end (DistilBERT and TinyBERT), the teacher cache and its keys, resume, and the refusals."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bertzoo.batch import Batch
from bertzoo.config import DistillConfig, ModelConfig, StudentConfig, from_dict
from bertzoo.errors import BertzooError, ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.distill import (
    Distiller,
    attention_score_loss,
    cosine_loss,
    hidden_state_loss,
    soft_target_loss,
    spread_layers,
    uniform_layer_map,
)
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.train.students import encoder_from_teacher

TEACHER = {"hidden_size": 32, "num_layers": 4, "num_heads": 4, "intermediate_size": 64, "max_position": 64}


def tiny_teacher(vocab_size: int, seed: int = 0, **fields) -> MaskedLM:
    torch.manual_seed(seed)
    return MaskedLM(Encoder(ModelConfig(vocab_size=vocab_size, **{**TEACHER, **fields})), sentence_task=None)


# --- losses, by hand --------------------------------------------------------------------------------


def test_soft_target_loss_is_kl_times_t_squared():
    s = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    t = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    for temp in (1.0, 2.0):
        p = [[math.exp(v / temp) for v in row] for row in t.tolist()]
        q = [[math.exp(v / temp) for v in row] for row in s.tolist()]
        kl = 0.0
        for pr, qr in zip(p, q, strict=True):
            zp, zq = sum(pr), sum(qr)
            kl += sum((a / zp) * math.log((a / zp) / (b / zq)) for a, b in zip(pr, qr, strict=True))
        want = kl / 2 * temp * temp
        assert soft_target_loss(s, t, temp).item() == pytest.approx(want, rel=1e-5)
    assert soft_target_loss(t, t, 2.0).item() == pytest.approx(0.0, abs=1e-6)


def test_cosine_loss_skips_padding():
    s = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    t = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [-1.0, 2.0]]])
    mask = torch.tensor([[1, 1, 0]])
    # token 0: cos 1 -> 0; token 1: cos 0 -> 1; token 2 is padding
    assert cosine_loss(s, t, mask).item() == pytest.approx(0.5)


def test_attention_loss_zeroes_pairs_with_padding():
    s = torch.zeros(1, 1, 3, 3)
    t = torch.zeros(1, 1, 3, 3)
    t[0, 0, 0, 1] = 2.0  # a real pair: counted
    t[0, 0, 0, 2] = 100.0  # key 2 is padding: ignored
    t[0, 0, 2, 0] = 100.0  # query 2 is padding: ignored
    mask = torch.tensor([[1, 1, 0]])
    assert attention_score_loss(s, t, mask).item() == pytest.approx(4.0 / 4)  # 4 real pairs, one head


def test_hidden_loss_projects_the_student():
    proj = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    s = torch.tensor([[[1.0, 2.0], [9.0, 9.0]]])
    t = torch.tensor([[[1.0, 2.0, 4.0], [0.0, 0.0, 0.0]]])
    mask = torch.tensor([[1, 0]])
    # projected token 0 = (1, 2, 3): squared error 1 over 3 values
    assert hidden_state_loss(s, t, proj, mask).item() == pytest.approx(1.0 / 3)


def test_layer_maps():
    assert spread_layers(12, 6) == [0, 2, 4, 7, 9, 11]
    assert spread_layers(6, 3) == [0, 2, 5]
    assert spread_layers(6, 1) == [0]
    assert uniform_layer_map(12, 4) == [0, 3, 6, 9, 12]
    with pytest.raises(ConfigError, match="multiple"):
        uniform_layer_map(6, 4)
    with pytest.raises(ConfigError, match="cannot be taken"):
        spread_layers(4, 6)


# --- attention scores -------------------------------------------------------------------------------


def test_attention_scores_are_the_pre_softmax_logits():
    enc = tiny_teacher(50).encoder.eval()
    ids = torch.tensor([[2, 7, 9, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    out = enc(ids, mask, output_attentions="scores", output_hidden_states=True)
    probs = enc(ids, mask, output_attentions=True).attentions
    layer = enc.stack.layer(0)
    x = out.hidden_states[0]
    q, k, _ = layer.attention.qkv(x).view(1, 5, 3, 4, 8).permute(2, 0, 3, 1, 4)
    want = q @ k.transpose(-1, -2) / math.sqrt(8)
    torch.testing.assert_close(out.attentions[0], want, atol=1e-5, rtol=1e-5)
    # the probabilities are the masked softmax of the same scores
    masked = out.attentions[1].masked_fill(~mask.bool()[:, None, None, :], float("-inf")).softmax(-1)
    torch.testing.assert_close(probs[1], masked, atol=1e-6, rtol=1e-5)


# --- students from the teacher ----------------------------------------------------------------------


def test_student_from_teacher_layers_computes_the_chosen_layers():
    teacher = tiny_teacher(60).encoder.eval()
    student, layers = encoder_from_teacher(teacher, StudentConfig(num_layers=2, layers=[0, 2], variant="bert"))
    assert layers == [0, 2] and student.config.num_layers == 2
    ids = torch.tensor([[2, 11, 12, 13, 3]])
    x = teacher.embeddings(ids)
    x = teacher.stack.layer(0)(x).hidden
    x = teacher.stack.layer(2)(x).hidden
    torch.testing.assert_close(student.eval()(ids).last_hidden_state, x, atol=1e-6, rtol=1e-5)


def test_distilbert_student_folds_token_type_zero_into_positions():
    teacher = tiny_teacher(60).encoder.eval()
    student, _ = encoder_from_teacher(teacher, StudentConfig(layers=[0, 3], variant="distilbert"))
    assert student.embeddings.token_type is None and student.config.variant == "distilbert"
    ids = torch.tensor([[2, 11, 12, 3]])
    torch.testing.assert_close(
        student.eval().embeddings(ids), teacher.embeddings(ids, torch.zeros_like(ids)), atol=1e-6, rtol=1e-5
    )


def test_student_layers_outside_the_teacher_are_refused():
    with pytest.raises(ConfigError, match="does not have"):
        encoder_from_teacher(tiny_teacher(60).encoder, StudentConfig(layers=[0, 7], variant="bert"))


# --- the objective ----------------------------------------------------------------------------------


def _mlm_batch(vocab: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (4, 12), generator=g)
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    ids[1, 9:] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    labels[:, 5] = ids[:, 5]
    ids[:, 3] = 4  # [MASK]
    return Batch(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=labels)


def test_teacher_is_frozen_unsaved_and_in_eval_mode():
    teacher = tiny_teacher(40, seed=1)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student = MaskedLM(
        encoder_from_teacher(teacher.encoder, StudentConfig(num_layers=2, variant="bert"))[0], sentence_task=None
    )
    d = Distiller(student, teacher, {"ce": 5.0, "mlm": 2.0, "cos": 1.0}, temperature=2.0)
    assert not any(k.startswith(("teacher", "_teacher")) for k in d.state_dict())
    assert {id(p) for p in d.parameters()} == {id(p) for p in student.parameters()}
    d.train()
    assert not teacher.training and student.training
    opt = torch.optim.SGD(d.parameters(), lr=0.5)
    out = d(_mlm_batch(40))
    out.loss.backward()
    opt.step()
    assert set(out.metrics) >= {"ce_loss", "mlm_loss", "cos_loss", "loss"}
    want = 5.0 * out.metrics["ce_loss"] + 2.0 * out.metrics["mlm_loss"] + 1.0 * out.metrics["cos_loss"]
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-5)
    for k, v in teacher.state_dict().items():
        assert v.equal(before[k]), k
    assert all(p.grad is None for p in teacher.parameters())


def test_the_students_own_losses_alone_never_run_the_teacher():
    """A baseline without distillation (mlm or hard only) costs one model's forward, not two."""
    teacher = tiny_teacher(40, seed=1)
    calls = []
    teacher.encoder.register_forward_hook(lambda *a: calls.append(1))
    student = MaskedLM(
        encoder_from_teacher(teacher.encoder, StudentConfig(num_layers=2, variant="bert"))[0], sentence_task=None
    )
    out = Distiller(student, teacher, {"mlm": 1.0, "cos": 0.0}).train()(_mlm_batch(40))
    assert set(out.metrics) == {"mlm_loss", "mlm_acc", "loss"} and not calls
    Distiller(student, teacher, {"mlm": 1.0, "cos": 1.0}).train()(_mlm_batch(40))
    assert calls  # the hook sees the teacher when a term reads it


def test_distilbert_terms_match_an_independent_computation():
    teacher = tiny_teacher(40, seed=1).eval()
    torch.manual_seed(3)
    student = MaskedLM(
        Encoder(ModelConfig(vocab_size=40, **{**TEACHER, "num_layers": 2, "dropout": 0.0, "attention_dropout": 0.0})),
        sentence_task=None,
    )
    batch = _mlm_batch(40)
    out = Distiller(student, teacher, {"ce": 1.0, "cos": 1.0}, temperature=2.0)(batch)
    sel = batch.labels != -100
    hs = student.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids).last_hidden_state
    ht = teacher.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids).last_hidden_state
    ls, lt = student.mlm_head(hs, sel), teacher.mlm_head(ht, sel)
    kl = F.kl_div(F.log_softmax(ls / 2, -1), F.softmax(lt / 2, -1), reduction="sum") / ls.size(0) * 4
    real = batch.attention_mask.bool()
    cos = (1 - F.cosine_similarity(hs[real], ht[real], dim=-1)).mean()
    assert out.metrics["ce_loss"].item() == pytest.approx(kl.item(), rel=1e-4)
    assert out.metrics["cos_loss"].item() == pytest.approx(cos.item(), rel=1e-4)


def test_tinybert_terms_use_the_uniform_map_and_a_projection():
    teacher = tiny_teacher(40, seed=1).eval()
    torch.manual_seed(4)
    student = Encoder(ModelConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=4, intermediate_size=32))
    d = Distiller(student, teacher, {"attn": 1.0, "hidden": 1.0}, layer_map=uniform_layer_map(4, 2))
    assert d.projection is not None and d.projection.weight.shape == (32, 16)
    batch = _mlm_batch(40)
    out = d.eval()(batch)
    s = student.eval()(batch.input_ids, batch.attention_mask, batch.token_type_ids, output_hidden_states=True,
                       output_attentions="scores")  # fmt: skip
    t = teacher.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, output_hidden_states=True,
                        output_attentions="scores")  # fmt: skip
    m = batch.attention_mask.bool()
    hidden = sum(
        ((d.projection(s.hidden_states[i])[m] - t.hidden_states[j][m]) ** 2).mean() for i, j in [(0, 0), (1, 2), (2, 4)]
    )
    pairs = (m[:, None, :, None] & m[:, None, None, :]).float()
    n_pairs = float(pairs.sum()) * 4  # heads
    attn = sum(((s.attentions[i] - t.attentions[j]) * pairs).pow(2).sum() / n_pairs for i, j in [(0, 1), (1, 3)])
    assert out.metrics["hidden_loss"].item() == pytest.approx(hidden.item(), rel=1e-4)
    assert out.metrics["attn_loss"].item() == pytest.approx(attn.item(), rel=1e-4)


def test_mismatches_are_refused_in_one_line():
    teacher = tiny_teacher(40)
    narrow = Encoder(ModelConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=4, intermediate_size=32))
    with pytest.raises(ConfigError, match="cos loss"):
        Distiller(narrow, teacher, {"cos": 1.0})
    two_heads = Encoder(ModelConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32))
    with pytest.raises(ConfigError, match="heads"):
        Distiller(two_heads, teacher, {"attn": 1.0}, layer_map=[0, 2, 4])
    with pytest.raises(ConfigError, match="unknown loss term"):
        Distiller(narrow, teacher, {"kd": 1.0})
    other_vocab = MaskedLM(Encoder(ModelConfig(vocab_size=41, **TEACHER)), sentence_task=None)
    with pytest.raises(ConfigError, match="same vocabulary"):
        Distiller(other_vocab, teacher, {"ce": 1.0})(_mlm_batch(40))
    encoder_teacher = tiny_teacher(40).encoder
    with pytest.raises(ConfigError, match="teacher's logits"):
        Distiller(MaskedLM(Encoder(ModelConfig(vocab_size=40, **TEACHER)), sentence_task=None), encoder_teacher,
                  {"ce": 1.0})(_mlm_batch(40))  # fmt: skip


def test_config_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="unknown config key student.depth"):
        from_dict(DistillConfig, {"student": {"depth": 3}})
    with pytest.raises(ConfigError, match=r"phases\[0\].loss.attn must be a number"):
        from_dict(DistillConfig, {"phases": [{"loss": {"attn": "much"}}]})


# --- end to end -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlm_teacher_dir(synthetic_tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher") / "mlm"
    teacher = tiny_teacher(synthetic_tokenizer.vocab_size, seed=5)
    teacher.save_pretrained(out)
    synthetic_tokenizer.save(out)
    return out


def _general_cfg(shards, teacher, out, **over) -> DistillConfig:
    data = {
        "method": "distilbert",
        "stage": "general",
        "teacher": str(teacher),
        "student": {"num_layers": 2, "variant": "bert"},
        "data": {"shards": str(shards), "max_seq_len": 32},
        "train": {"output_dir": str(out), "batch_size": 8, "max_steps": 6, "lr": 1e-3, "log_every": 2,
                  "save_every": 3, "threads": 1, "precision": "fp32"},
    }  # fmt: skip
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return from_dict(DistillConfig, data)


def test_general_distilbert_writes_a_loadable_student(synthetic_shards, mlm_teacher_dir, tmp_path):
    from bertzoo.loading import load_pretraining
    from bertzoo.train.distill import distill

    report = distill(_general_cfg(synthetic_shards, mlm_teacher_dir, tmp_path / "run"))
    assert report["layers_from_teacher"] == [0, 3]
    assert report["phases"]["distill"]["steps"] == 6
    student = load_pretraining(tmp_path / "run" / "model")
    assert isinstance(student, MaskedLM) and student.config.num_layers == 2
    rows = [json.loads(x) for x in (tmp_path / "run" / "distill" / "metrics.jsonl").read_text().splitlines()]
    assert any("ce_loss" in r and "cos_loss" in r and "mlm_loss" in r for r in rows)
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["student_parameters"] < saved["teacher_parameters"]
    for model_dir in ("model", "distill/final"):  # the student and the loop's final/ both carry a model card
        card = (tmp_path / "run" / model_dir / "README.md").read_text()
        assert card.startswith("---\n") and "library_name: bertzoo" in card, model_dir


def test_general_tinybert_trains_a_narrow_student_and_resumes_exactly(synthetic_shards, mlm_teacher_dir, tmp_path):
    from bertzoo.train.distill import distill

    student = {"init": "random", "model_config": {"hidden_size": 16, "num_layers": 2, "num_heads": 4,
                                                  "intermediate_size": 32, "max_position": 64}}  # fmt: skip
    a = distill(_general_cfg(synthetic_shards, mlm_teacher_dir, tmp_path / "a", method="tinybert", student=student))
    assert set(a["phases"]) == {"intermediate"}
    files = sorted(p.name for p in (tmp_path / "a" / "intermediate" / "final").iterdir())
    assert "distill_state.safetensors" in files  # W_h saved beside the student
    # a constant rate: 3 steps, then resumed to 6, is the straight run (W_h and data position restored)
    const = {"schedule": "constant"}
    a = distill(_general_cfg(synthetic_shards, mlm_teacher_dir, tmp_path / "c", method="tinybert", student=student,
                             train=const))  # fmt: skip
    cfg = _general_cfg(synthetic_shards, mlm_teacher_dir, tmp_path / "b", method="tinybert", student=student,
                       train={**const, "max_steps": 3})  # fmt: skip
    distill(cfg)
    cfg = _general_cfg(synthetic_shards, mlm_teacher_dir, tmp_path / "b", method="tinybert", student=student,
                       train=const)  # fmt: skip
    assert distill(cfg, resume="auto")["phases"]["intermediate"]["steps_this_session"] == 3
    wa = load_file(tmp_path / "c" / "model" / "model.safetensors")
    wb = load_file(tmp_path / "b" / "model" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=0)


def test_general_refusals(synthetic_shards, mlm_teacher_dir, tmp_path, small_vocab_teacher):
    from bertzoo.train.distill import distill

    with pytest.raises(ConfigError, match="tokens and the teacher"):
        distill(_general_cfg(synthetic_shards, small_vocab_teacher, tmp_path / "x"))
    with pytest.raises(ConfigError, match="general distillation has none"):
        distill(_general_cfg(synthetic_shards, mlm_teacher_dir, tmp_path / "y", phases=[{"loss": {"hard": 1.0}}]))
    with pytest.raises(ConfigError, match="teacher is not set"):
        distill(from_dict(DistillConfig, {}))


@pytest.fixture(scope="module")
def small_vocab_teacher(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher") / "small"
    tiny_teacher(30).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def task_teacher(tmp_path_factory) -> dict:
    """A tiny classifier fine-tuned by bertzoo (4 layers, 4 heads) on the synthetic JSONL task."""
    from bertzoo.train.finetune import finetune

    from helpers.finetune import tiny_finetune_config, write_task_files

    root = tmp_path_factory.mktemp("task-teacher")
    paths = write_task_files(root / "data")
    cfg = tiny_finetune_config(paths, root / "run", epochs=4, threads=1)
    cfg.model_config.update(num_layers=4, num_heads=4)
    finetune(cfg)
    return {"model": root / "run" / "model", "paths": paths, "root": root}


def _task_cfg(teacher, out, **over) -> DistillConfig:
    data = {
        "method": "distilbert",
        "stage": "task",
        "teacher": str(teacher),
        "student": {"num_layers": 2, "variant": "bert"},
        "train": {"output_dir": str(out), "epochs": 2, "batch_size": 16, "lr": 3e-3, "log_every": 5,
                  "save_every": 0, "threads": 1, "device": "cpu", "seed": 3, "precision": "fp32"},
    }  # fmt: skip
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return from_dict(DistillConfig, data)


def test_task_distilbert_student_is_a_finetuned_model(task_teacher, tmp_path):
    from bertzoo.loading import load_finetuned
    from bertzoo.train.distill import distill
    from bertzoo.train.evaluate import evaluate_model

    report = distill(_task_cfg(task_teacher["model"], tmp_path / "run"))
    assert report["layers_from_teacher"] == [0, 3]
    assert {"teacher_dev", "student_dev", "teacher_test", "student_test"} <= set(report)
    assert report["teacher_cache"]["reused"] is False
    task, model, _ = load_finetuned(tmp_path / "run" / "model")
    assert model.encoder.config.num_layers == 2
    result, _ = evaluate_model(tmp_path / "run" / "model", split="test")
    assert result.metrics["accuracy"] == pytest.approx(report["student_test"]["accuracy"])
    manifest = json.loads((tmp_path / "run" / "teacher_cache" / "manifest.json").read_text())
    assert manifest["shape"] == [240, 3]


def test_the_student_pools_as_its_teacher_unless_told(task_teacher, tmp_path):
    """A mean-pooled teacher gives a mean-pooled student (its head was trained on that vector); an explicit
    technique.pooling wins."""
    from bertzoo.loading import load_finetuned
    from bertzoo.train.distill import distill
    from bertzoo.train.finetune import finetune

    from helpers.finetune import tiny_finetune_config

    cfg = tiny_finetune_config(task_teacher["paths"], tmp_path / "teacher", epochs=1, threads=1)
    cfg.technique.pooling = "mean"
    finetune(cfg)
    teacher = tmp_path / "teacher" / "model"
    distill(_task_cfg(teacher, tmp_path / "inherit", train={"epochs": 1}))
    distill(_task_cfg(teacher, tmp_path / "cls", train={"epochs": 1}, technique={"pooling": "cls"}))
    assert load_finetuned(tmp_path / "inherit" / "model")[0].cfg.technique.pooling == "mean"
    assert load_finetuned(tmp_path / "cls" / "model")[0].cfg.technique.pooling == "cls"
    # the task teacher of the other tests pools [CLS] (auto), and so do its students
    assert load_finetuned(task_teacher["model"])[0].cfg.technique.pooling in ("auto", "cls")


def test_cached_teacher_logits_train_the_same_student(task_teacher, tmp_path):
    from bertzoo.train.distill import distill

    no_dropout = {"student": {"num_layers": 2, "variant": "bert"}}
    a = distill(_task_cfg(task_teacher["model"], tmp_path / "a", teacher_cache="off", **no_dropout))
    b = distill(_task_cfg(task_teacher["model"], tmp_path / "b", **no_dropout))
    assert "teacher_cache" not in a and b["teacher_cache"]["reused"] is False
    wa = load_file(tmp_path / "a" / "model" / "model.safetensors")
    wb = load_file(tmp_path / "b" / "model" / "model.safetensors")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5)
    # a second run reads the cache it finds, when teacher and data are the same
    c = distill(_task_cfg(task_teacher["model"], tmp_path / "c", teacher_cache=str(tmp_path / "b" / "teacher_cache")))
    assert c["teacher_cache"]["reused"] is True


def test_a_stale_cache_is_refused(task_teacher, tmp_path):
    from bertzoo.train.distill import distill

    cache = tmp_path / "cache"
    distill(_task_cfg(task_teacher["model"], tmp_path / "a", teacher_cache=str(cache), train={"epochs": 1}))
    manifest = json.loads((cache / "manifest.json").read_text())
    (cache / "manifest.json").write_text(json.dumps({**manifest, "teacher_sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="this run's teacher"):
        distill(_task_cfg(task_teacher["model"], tmp_path / "b", teacher_cache=str(cache)))
    (cache / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="this run's data"):  # fewer training examples: other data
        distill(_task_cfg(task_teacher["model"], tmp_path / "c", teacher_cache=str(cache),
                          data={"max_train_examples": 100}))  # fmt: skip


def test_task_tinybert_runs_intermediate_then_prediction(task_teacher, tmp_path):
    from bertzoo.train.distill import distill

    student = {"init": "random", "model_config": {"hidden_size": 16, "num_layers": 2, "num_heads": 4,
                                                  "intermediate_size": 32, "max_position": 64}}  # fmt: skip
    report = distill(_task_cfg(task_teacher["model"], tmp_path / "run", method="tinybert", student=student))
    assert list(report["phases"]) == ["intermediate", "prediction"]
    inter = tmp_path / "run" / "intermediate"
    rows = [json.loads(x) for x in (inter / "metrics.jsonl").read_text().splitlines()]
    assert any("attn_loss" in r and "hidden_loss" in r for r in rows) and not any("ce_loss" in r for r in rows)
    head_after_inter = load_file(inter / "final" / "model.safetensors")["head.classifier.weight"]
    final = load_file(tmp_path / "run" / "model" / "model.safetensors")["head.classifier.weight"]
    assert not head_after_inter.equal(final)  # the prediction phase trained the head
    assert (inter / "final" / "distill_state.safetensors").is_file()
    # only the prediction phase evaluates (and so picks a best/); no teacher cache: the intermediate phase reads
    # hidden states and attention, the prediction phase was the only logit reader and it did use one
    assert not any("eval_accuracy" in r for r in rows) and not (inter / "best").exists()
    assert report["phases"]["prediction"]["best_metric"]["name"] == "eval_accuracy"


def test_a_run_without_soft_targets_computes_no_teacher_cache(task_teacher, tmp_path):
    from bertzoo.train.distill import distill

    report = distill(_task_cfg(task_teacher["model"], tmp_path / "run", phases=[{"name": "ft", "loss": {"hard": 1.0}}]))
    assert "teacher_cache" not in report and not (tmp_path / "run" / "teacher_cache").exists()
    assert report["student_test"]["accuracy"] > 0


def test_task_distillation_on_augmented_data(task_teacher, tmp_path):
    """augment.copies new examples per training example, proposed by a masked LM of the teacher's vocabulary."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.train.distill import distill

    tokenizer = Tokenizer.load(task_teacher["paths"]["tokenizer"])
    mlm_dir = tmp_path / "mlm"
    tiny_teacher(tokenizer.vocab_size, seed=2).save_pretrained(mlm_dir)
    augment = {"model": str(mlm_dir), "copies": 2, "replace_prob": 0.5}
    report = distill(_task_cfg(task_teacher["model"], tmp_path / "run", augment=augment, train={"epochs": 1}))
    assert report["examples"]["train"] == 240 * 3
    with pytest.raises(ConfigError, match="augment.model is not"):
        distill(_task_cfg(task_teacher["model"], tmp_path / "x", augment={"copies": 2}))


def test_cos_on_a_cls_classifier_reads_every_position(task_teacher, tmp_path):
    """A [CLS] classifier's top layer computes [CLS] alone; the cos term still compares every real token."""
    from bertzoo.train.distill import distill

    phases = [{"name": "distill", "loss": {"ce": 1.0, "hard": 1.0, "cos": 1.0}}]
    report = distill(_task_cfg(task_teacher["model"], tmp_path / "run", phases=phases, train={"epochs": 1}))
    rows = [json.loads(x) for x in (tmp_path / "run" / "distill" / "metrics.jsonl").read_text().splitlines()]
    cos = [r["cos_loss"] for r in rows if "cos_loss" in r]
    # The term is there and trains: the student's states turn towards the teacher's (0.045 -> 0.026 measured).
    assert len(cos) >= 2 and cos[0] > 0 and cos[-1] < 0.8 * cos[0]
    assert set(report["student_test"]) >= {"accuracy", "loss"}


def test_a_phase_freezes_what_it_never_reads():
    from bertzoo.train.distill import _freeze_unread

    class TaskLike(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder(ModelConfig(vocab_size=30, **TEACHER))
            self.head = torch.nn.Linear(32, 3)

    model = TaskLike()
    frozen = _freeze_unread(model, {"attn": 1.0, "hidden": 1.0})
    want = {id(p) for p in [*model.head.parameters(), *model.encoder.pooler.parameters()]}
    assert {id(p) for p in frozen} == want and not any(p.requires_grad for p in frozen)
    assert all(p.requires_grad for n, p in model.encoder.named_parameters() if not n.startswith("pooler."))
    assert _freeze_unread(TaskLike(), {"attn": 1.0, "ce": 1.0}) == []  # logits read: everything trains


def test_task_refusals(task_teacher, mlm_teacher_dir, tmp_path):
    from bertzoo.train.distill import distill

    with pytest.raises(BertzooError, match="not a fine-tuned"):
        distill(_task_cfg(mlm_teacher_dir, tmp_path / "a"))
    other = {"init": "random", "model_config": {"hidden_size": 16, "num_layers": 2, "num_heads": 4,
                                                "intermediate_size": 32, "vocab_size": 500}}  # fmt: skip
    with pytest.raises(ConfigError, match="one vocabulary"):
        distill(_task_cfg(task_teacher["model"], tmp_path / "b", student=other))
    with pytest.raises(ConfigError, match="multiple"):
        three = {"hidden_size": 16, "num_layers": 3, "num_heads": 4, "intermediate_size": 32}
        distill(_task_cfg(task_teacher["model"], tmp_path / "c", method="tinybert",
                          student={"init": "random", "model_config": three}))  # fmt: skip
    with pytest.raises(ConfigError, match="general-distillation term"):
        distill(_task_cfg(task_teacher["model"], tmp_path / "d", phases=[{"loss": {"mlm": 1.0}}]))


def test_cli_distill_errors_exit_2(tmp_path, capsys):
    from bertzoo.cli import main

    config = tmp_path / "d.yaml"
    config.write_text("stage: task\nteacher: /nonexistent/model\n", encoding="utf-8")
    assert main(["distill", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nonexistent" in err[0]
    config.write_text("stage: task\nteacher: x\nstudent: {depth: 2}\n", encoding="utf-8")
    assert main(["distill", str(config)]) == 2
    assert "student.depth" in capsys.readouterr().err


# --- torchrun ---------------------------------------------------------------------------------------


def _torchrun(config: Path, nproc: int, *extra: str) -> subprocess.CompletedProcess:
    from helpers.loop import free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    extra = (*extra, "--train.device", "cpu")  # gloo on the CPU, also where one GPU is visible
    if nproc == 1:
        cmd = [sys.executable, "-m", "bertzoo", "distill", str(config), *extra]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--master_port={free_port()}", "-m", "bertzoo", "distill", str(config), *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _losses(metrics: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, metrics.read_text().splitlines()) if "loss" in r]


def test_two_processes_distil_like_one(synthetic_shards, mlm_teacher_dir, task_teacher, tmp_path):
    """DDP: general (DistilBERT) and task (TinyBERT, two phases, cached logits, augmented copies) distillation
    with 2 processes of half the batch follow the 1-process curves; only rank 0 writes the caches and the
    student."""
    import yaml

    from bertzoo.data.tokens.tokenizer import Tokenizer

    augmenter = tmp_path / "augmenter"
    tiny_teacher(Tokenizer.load(task_teacher["paths"]["tokenizer"]).vocab_size, seed=2).save_pretrained(augmenter)

    no_dropout = {"dropout": 0.0, "attention_dropout": 0.0}
    general = to_dict(_general_cfg(synthetic_shards, mlm_teacher_dir, "x"))
    general["train"].update(max_steps=4, log_every=1, save_every=0)
    general["student"] = {"init": "random", "model_config": {**TEACHER, "num_layers": 2, **no_dropout}}
    task = to_dict(_task_cfg(task_teacher["model"], "x", method="tinybert"))
    task["student"] = {"init": "random", "model_config": {**TEACHER, "num_layers": 2, **no_dropout}}
    task["phases"] = [{"name": "intermediate", "loss": {"attn": 1.0, "hidden": 1.0}, "train": {"max_steps": 3}},
                      {"name": "prediction", "loss": {"ce": 1.0}, "train": {"max_steps": 3}}]  # fmt: skip
    task["train"].update(log_every=1, bucket_by_length=False)
    task["technique"]["head_dropout"] = 0.0  # dropout draws differ per process
    task["train"].pop("epochs")
    task["augment"] = {"model": str(augmenter), "copies": 1}
    for name, cfg, phase in (("general", general, "distill"), ("task", task, "prediction")):
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        one, two = tmp_path / f"{name}-one", tmp_path / f"{name}-two"
        _torchrun(config, 1, "--train.output_dir", str(one), "--train.batch_size", "8")
        _torchrun(config, 2, "--train.output_dir", str(two), "--train.batch_size", "4")
        a, b = _losses(one / phase / "metrics.jsonl"), _losses(two / phase / "metrics.jsonl")
        assert len(a) == len(b) >= 3 and b == pytest.approx(a, rel=1e-4), name
        wa, wb = load_file(one / "model" / "model.safetensors"), load_file(two / "model" / "model.safetensors")
        assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-4
    for cache in ("teacher_cache", "augment_cache"):
        assert (tmp_path / "task-two" / cache / "manifest.json").is_file()


def to_dict(cfg) -> dict:
    from bertzoo.config import to_plain

    return to_plain(cfg)


def test_augmented_copies_are_cached_and_a_stale_cache_is_refused(task_teacher, tmp_path):
    """A second run with the same augmenter, data and settings reads the copies back (the same examples, even
    without the teacher's soft targets); another augmenter or other settings is an error naming the fix."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.train.distill import distill

    tokenizer = Tokenizer.load(task_teacher["paths"]["tokenizer"])
    mlm_dir, other_dir = tmp_path / "mlm", tmp_path / "other"
    tiny_teacher(tokenizer.vocab_size, seed=2).save_pretrained(mlm_dir)
    tiny_teacher(tokenizer.vocab_size, seed=3).save_pretrained(other_dir)
    cache = tmp_path / "copies"
    augment = {"model": str(mlm_dir), "copies": 2, "replace_prob": 0.5, "cache": str(cache)}
    data = {"max_train_examples": 60}
    first = distill(_task_cfg(task_teacher["model"], tmp_path / "a", augment=augment, data=data, train={"epochs": 1}))
    assert first["augment_cache"] == {"path": str(cache), "reused": False}
    written = [json.loads(line) for line in (cache / "examples.jsonl").read_text().splitlines()]
    assert len(written) == 60 * 3 and [e.get("augmented", 0) for e in written[60:63]] == [1, 2, 1]
    assert sum(e["text"] != written[i // 2]["text"] for i, e in enumerate(written[60:])) > 60  # copies differ
    hard_only = [{"name": "ft", "loss": {"hard": 1.0}}]
    second = distill(_task_cfg(task_teacher["model"], tmp_path / "b", augment=augment, data=data,
                               phases=hard_only, train={"epochs": 1}))  # fmt: skip
    assert second["augment_cache"]["reused"] is True and second["examples"]["train"] == 180
    # the default cache lives in the run's own directory
    own = distill(_task_cfg(task_teacher["model"], tmp_path / "c", augment={**augment, "cache": "auto"}, data=data,
                            phases=hard_only, train={"epochs": 1}))  # fmt: skip
    assert own["augment_cache"] == {"path": str(tmp_path / "c" / "augment_cache"), "reused": False}
    assert (tmp_path / "c" / "augment_cache" / "examples.jsonl").read_text() == (cache / "examples.jsonl").read_text()
    for change, word in (({"model": str(other_dir)}, "this run's augmenter"), ({"copies": 3}, "this run's settings")):
        with pytest.raises(ConfigError, match=word):
            distill(_task_cfg(task_teacher["model"], tmp_path / "d", augment={**augment, **change}, data=data))
    with pytest.raises(ConfigError, match="this run's data"):
        distill(_task_cfg(task_teacher["model"], tmp_path / "e", augment=augment, data={"max_train_examples": 50}))
