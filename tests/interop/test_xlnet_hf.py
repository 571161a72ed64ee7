"""XLNet and Hugging Face transformers, both ways at 1e-5 on tiny random models built here: XLNetLMHeadModel
(bi and uni attention, clamp_len, same_length, tied and untied heads) and XLNetModel imported through the
loaders and exported through `bertzoo convert`; content stream, query stream under perm_mask +
target_mapping, attention weights, LM logits, and memory across two segments; what is refused."""

from __future__ import annotations

import json

import pytest
import torch

from bertzoo import loading
from bertzoo.errors import CheckpointError
from bertzoo.hub import convert_directory, export_hf, load_encoder, load_pretraining
from bertzoo.interop.convert import config_from_hf
from bertzoo.models.xlnet import XLNet
from bertzoo.objectives.plm import PermutationLM
from bertzoo.variants import hf_families, xlnet

from helpers.parity import import_with, movable, perturb, swaps

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 60
HF_TINY = {"vocab_size": VOCAB, "d_model": 32, "n_layer": 2, "n_head": 4, "d_inner": 48, "mem_len": 6}
# (attn_type, clamp_len, same_length, tie_word_embeddings)
LAYOUTS = [("bi", -1, False, True), ("uni", -1, False, True), ("bi", 3, False, False), ("uni", 2, True, True)]


def tiny_hf(cls: str = "XLNetLMHeadModel", seed: int = 0, **fields):
    """A tiny random transformers XLNet in eval mode, every parameter moved off its init by N(0, 0.1) (an
    untied head gets its own values, so tying it by mistake shows)."""
    config = transformers.XLNetConfig(**{**HF_TINY, **fields})
    torch.manual_seed(seed)
    model = perturb(getattr(transformers, cls)(config), seed, scale=0.1)
    if not config.tie_word_embeddings:
        g = torch.Generator().manual_seed(seed + 1000)
        model.lm_loss.weight = torch.nn.Parameter(torch.randn(model.lm_loss.weight.shape, generator=g) * 0.2)
    return model.eval()


def inputs(seed: int = 0, batch: int = 2, seq: int = 9, predict: int = 3) -> dict[str, torch.Tensor]:
    """Three segments in the second row, padding at its end, a random perm_mask and one-hot targets."""
    g = torch.Generator().manual_seed(seed)
    types = torch.zeros(batch, seq, dtype=torch.long)
    types[0, 4:] = 1
    types[1, 3:] = 1
    types[1, 6:] = 2
    mask = torch.ones(batch, seq)
    mask[1, 7:] = 0
    perm = (torch.rand(batch, seq, seq, generator=g) < 0.4).float()
    mapping = torch.zeros(batch, predict, seq)
    for b in range(batch):
        where = torch.randperm(seq, generator=g)[:predict]
        mapping[b, torch.arange(predict), where] = 1.0
    return {"attention_mask": mask, "token_type_ids": types, "perm_mask": perm, "target_mapping": mapping}


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def rows(ids: torch.Tensor, extra: dict[str, torch.Tensor], one_by_one: bool):
    """The batch, or each row alone: transformers' "uni" attention adds the padding and permutation masks in
    place into a mask without a batch dimension, which fails for more than one row."""
    if not one_by_one:
        yield ids, extra
        return
    for b in range(ids.size(0)):
        yield ids[b : b + 1], {k: v[b : b + 1] for k, v in extra.items()}


@torch.no_grad()
def assert_same(hf, ours: PermutationLM, seed: int = 0) -> None:
    """Both streams at every layer, attention weights and logits equal, with and without the query stream."""
    batch = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(seed + 100))
    full = inputs(seed)
    content_only = {k: full[k] for k in ("attention_mask", "token_type_ids")}
    for ids, extra in (*rows(batch, full, ours.config.causal), *rows(batch, content_only, ours.config.causal)):
        ref = hf(ids, **extra, output_hidden_states=True, output_attentions=True, use_mems=False)
        logits, out = ours.logits(ids, **extra, output_hidden_states=True, output_attentions=True)
        close(logits, ref.logits)
        # Without attention maps the query stream is scored at the predicted positions only (one_hot_rows).
        close(ours.logits(ids, **extra)[0], ref.logits)
        if "target_mapping" in extra:  # transformers interleaves the streams: (h0, g0, h1, g1, ...)
            close(torch.stack(out.hidden_states), torch.stack(ref.hidden_states[0::2]))
            close(torch.stack(out.query_hidden_states), torch.stack(ref.hidden_states[1::2]))
            for (ref_h, ref_g), a_h, a_g in zip(ref.attentions, out.attentions, out.query_attentions, strict=True):
                close(a_h, ref_h)
                close(a_g, ref_g)
        else:
            close(torch.stack(out.hidden_states), torch.stack(ref.hidden_states))
            for a, b in zip(out.attentions, ref.attentions, strict=True):
                close(a, b)


@torch.no_grad()
def assert_same_memory(hf, ours: PermutationLM, seed: int = 0) -> None:
    """Two segments, the second reading the first's memory: logits and the memory itself (transformers keeps
    it sequence-first) equal; the query stream of the second segment too."""
    g = torch.Generator().manual_seed(seed + 200)
    first, second = torch.randint(0, VOCAB, (2, 8), generator=g), torch.randint(0, VOCAB, (2, 5), generator=g)
    ref1 = hf(first, use_mems=True)
    logits1, out1 = ours.logits(first, use_mems=True)
    close(logits1, ref1.logits)
    kept = ours.config.reuse_len or 8  # of the first segment's 8 positions
    kept = min(kept, ours.config.mem_len or kept)
    for a, b in zip(out1.mems, ref1.mems, strict=True):
        assert a.shape == (2, kept, 32) and not a.requires_grad
        close(a, b.transpose(0, 1))
    extra = inputs(seed, seq=5, predict=2)
    del extra["attention_mask"]
    if ours.config.causal:  # see `rows`: transformers' "uni" attention takes no perm_mask for two rows
        del extra["perm_mask"]
    ref2 = hf(second, mems=ref1.mems, use_mems=True, **extra)
    logits2, out2 = ours.logits(second, mems=out1.mems, use_mems=True, **extra)
    close(logits2, ref2.logits)
    for a, b in zip(out2.mems, ref2.mems, strict=True):
        close(a, b.transpose(0, 1))


# --- Hugging Face -> bertzoo ------------------------------------------------------------------------


@pytest.mark.parametrize(("attn_type", "clamp", "same", "tie"), LAYOUTS)
def test_import_xlnet_lm_head_model(tmp_path, attn_type, clamp, same, tie) -> None:
    hf = tiny_hf(attn_type=attn_type, clamp_len=clamp, same_length=same, tie_word_embeddings=tie)
    hf.save_pretrained(tmp_path)
    kind, model = loading.load(tmp_path)
    assert kind == "pretraining" and isinstance(model, PermutationLM)
    c = model.config
    assert (c.causal, c.clamp_len, c.same_length, c.mem_len) == (attn_type == "uni", max(clamp, 0), same, 6)
    assert (model.lm_head.decoder.weight is model.word_embeddings.weight) == tie
    model.eval()
    assert_same(hf, model)
    assert_same_memory(hf, model)


def test_import_xlnet_model_as_the_backbone(tmp_path) -> None:
    hf = tiny_hf("XLNetModel", seed=1, mem_len=None)
    hf.save_pretrained(tmp_path)
    kind, model = loading.load(tmp_path)
    assert kind == "encoder" and isinstance(model, XLNet)
    assert isinstance(load_encoder(tmp_path), XLNet) and model.config.mem_len == 0
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    extra = inputs(1)
    with torch.no_grad():
        ref = hf(ids, **extra, use_mems=True)
        out = model.eval()(ids, **extra, use_mems=True)
    close(out.query_hidden_state, ref.last_hidden_state)  # transformers returns the query stream when it runs
    for a, b in zip(out.mems, ref.mems, strict=True):  # mem_len null: the whole segment is kept
        close(a, b.transpose(0, 1))


def test_reuse_len_keeps_the_first_positions_as_memory(tmp_path) -> None:
    hf = tiny_hf(seed=2, reuse_len=4, mem_len=10)
    hf.save_pretrained(tmp_path)
    model = load_pretraining(tmp_path).eval()
    assert model.config.reuse_len == 4
    assert_same_memory(hf, model, seed=2)


# --- bertzoo -> Hugging Face --------------------------------------------------------------------------


@pytest.mark.parametrize(("causal", "tie"), [(False, True), (True, False)])
def test_export_reloads_in_transformers_with_the_same_outputs(tmp_path, causal, tie) -> None:
    spec = {"preset": "xlnet-tiny", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48}
    spec |= {"causal": causal, "tie_word_embeddings": tie, "mem_len": 6, "clamp_len": 4 if causal else 0}
    torch.manual_seed(3)
    model = xlnet.build(xlnet.model_config(spec))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    model.eval()
    model.save_pretrained(tmp_path / "ours")
    report = convert_directory(tmp_path / "ours", tmp_path / "hf", "bertzoo", "hf")
    assert report["architecture"] == "XLNetLMHeadModel" and report["kind"] == "pretraining"
    raw = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert raw["attn_type"] == ("uni" if causal else "bi") and raw["d_model"] == 32 and raw["mem_len"] == 6
    hf = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert (hf.lm_loss.weight.data_ptr() == hf.transformer.word_embedding.weight.data_ptr()) == tie
    assert_same(hf, model, seed=4)
    assert_same_memory(hf, model, seed=4)
    # And back: the exported directory converts to the same model.
    convert_directory(tmp_path / "hf", tmp_path / "again", "hf", "bertzoo")
    again = load_pretraining(tmp_path / "again")
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


def test_a_bare_xlnet_exports_as_xlnet_model(tmp_path) -> None:
    torch.manual_seed(5)
    encoder = XLNet(xlnet.model_config({"preset": "xlnet-tiny", "vocab_size": VOCAB})).eval()
    export_hf(encoder, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["XLNetModel"]
    hf = transformers.XLNetModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(5))
    extra = {k: v for k, v in inputs(5).items() if k in ("attention_mask", "token_type_ids")}
    with torch.no_grad():
        close(encoder(ids, **extra).last_hidden_state, hf(ids, **extra).last_hidden_state)


# --- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"bi_data": True}, "bi_data=true"),
        ({"ff_activation": "silu"}, "ff_activation='silu'"),
        ({"attn_type": "tri"}, "attn_type='tri'"),
        ({"d_head": 4}, "d_head=4"),
        ({"mem_len": -3}, "mem_len=-3"),
        ({"clamp_len": 1.5}, "clamp_len must be an integer"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_a_config_xlnet_cannot_hold_is_one_checkpoint_error(edit, message) -> None:
    with pytest.raises(CheckpointError, match=message):
        config_from_hf({"model_type": "xlnet", **HF_TINY, **edit})


def test_config_from_hf_reads_transformers_defaults() -> None:
    c = config_from_hf({"model_type": "xlnet", "vocab_size": VOCAB})
    assert (c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size) == (1024, 24, 16, 4096)
    assert (c.mem_len, c.clamp_len, c.causal, c.pad_token_id, c.layer_norm_eps) == (512, 0, False, None, 1e-12)
    assert config_from_hf({"model_type": "xlnet", "untie_r": False, "ff_activation": "gelu_new"}).hidden_act == (
        "gelu_tanh"
    )


def test_the_exporter_refuses_what_xlnet_cannot_hold() -> None:
    config = xlnet.model_config({"preset": "xlnet-tiny", "vocab_size": VOCAB, "attention_head_size": 8})
    with pytest.raises(CheckpointError, match="attention_head_size=8"):
        xlnet.config_to_hf(config)


def test_every_swap_in_the_tensor_map_breaks_parity(tmp_path) -> None:
    """XLNet's tensor list with two same-shaped entries exchanged (the q/k/v/o projections, the u, v and segment
    biases, the norms, the head's bias) imports a model that fails `assert_same`; the list as it is passes."""
    hf = tiny_hf("XLNetLMHeadModel", seed=3, tie_word_embeddings=False)
    hf.save_pretrained(tmp_path)
    family = hf_families()["xlnet"]
    ours = import_with(tmp_path, family)
    assert_same(hf, ours)
    shapes = {k: v.shape for k, v in ours.state_dict().items()}
    moved: set[str] = set()
    for what, mutated in swaps(family, ours.config, shapes):
        with pytest.raises(AssertionError):
            assert_same(hf, import_with(tmp_path, mutated))
        moved.update(what.split(" <-> "))
    assert moved and movable(family, ours.config, shapes) <= moved
