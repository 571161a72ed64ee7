"""T5 and Hugging Face transformers, both ways at 1e-5: T5ForConditionalGeneration (ReLU and gated-GELU,
tied and untied heads, heads of d_kv != d_model / num_heads) imported and exported through the hub
functions and `bertzoo convert`, T5EncoderModel, the relative position buckets, attention weights, the
loss, greedy and beam-search generation; what the importer and exporter refuse."""

from __future__ import annotations

import json

import pytest
import torch

from bertzoo import loading
from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.errors import CheckpointError
from bertzoo.hub import convert_directory, export_hf, load_encoder, load_pretraining
from bertzoo.interop.convert import config_from_hf
from bertzoo.models.encoder import Encoder
from bertzoo.nn import relative_position_bucket
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.variants import hf_families, t5

from helpers.parity import close, import_with, movable, perturb, swaps

transformers = pytest.importorskip("transformers")

VOCAB = 80
HF_TINY = {
    "vocab_size": VOCAB,
    "d_model": 32,
    "d_kv": 12,  # 3 heads of 12: an inner width of 36, not d_model
    "d_ff": 40,
    "num_layers": 2,
    "num_decoder_layers": 3,
    "num_heads": 3,
    "decoder_start_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 0,
}
# (feed_forward_proj, tie_word_embeddings): T5 v1.0 is relu + tied, v1.1 gated-gelu + untied.
LAYOUTS = [("relu", True), ("gated-gelu", False), ("relu", False), ("gated-gelu", True)]


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_hf(
    proj: str = "relu",
    tie: bool = True,
    seed: int = 0,
    cls: str = "T5ForConditionalGeneration",
    scale: float = 0.05,
    **fields,
):
    """A tiny random transformers T5 in eval mode, every parameter moved off its initial value by N(0,
    scale) (an untied head gets its own values, so tying it by mistake shows)."""
    config = transformers.T5Config(**{**HF_TINY, "feed_forward_proj": proj, "tie_word_embeddings": tie, **fields})
    config._attn_implementation = "eager"  # attention weights come back only from the eager path
    torch.manual_seed(seed)
    model = perturb(getattr(transformers, cls)(config), seed, scale)
    if not tie:
        g = torch.Generator().manual_seed(seed + 1000)
        model.lm_head.weight = torch.nn.Parameter(torch.randn(model.lm_head.weight.shape, generator=g) * 0.2)
    return model.eval()


def inputs(seed: int = 0, batch: int = 3, length: int = 11, target: int = 12):
    """Source ids with padding in the second row, and labels with IGNORE_INDEX at the end of the first. The
    targets reach distances of 8 and more, where the decoder's one-way buckets differ from two-way ones."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    labels = torch.randint(2, VOCAB, (batch, target), generator=g)
    labels[0, 9:] = IGNORE_INDEX
    return ids, mask, labels


@torch.no_grad()
def assert_same(hf, ours: EncoderDecoderLM, seed: int = 0) -> None:
    """Encoder and decoder states of every layer, attention weights, logits and loss equal at 1e-5."""
    ids, mask, labels = inputs(seed)
    ref = hf(input_ids=ids, attention_mask=mask, labels=labels, output_hidden_states=True, output_attentions=True)
    batch = Batch(ids, mask, labels=labels)
    dec, _, _ = ours.decoder_inputs(batch)
    out = ours.seq2seq(ids, mask, dec, output_hidden_states=True, output_attentions=True)
    real = mask.bool()
    close(out.encoder_last_hidden_state[real], ref.encoder_last_hidden_state[real])
    # The residual stream between the layers grows to tens (no norm acts on it): there 1e-5 is relative.
    for a, b in zip(out.encoder_hidden_states, ref.encoder_hidden_states, strict=True):
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)
    for a, b in zip(out.decoder_hidden_states, ref.decoder_hidden_states, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    close(out.last_hidden_state, ref.decoder_hidden_states[-1])
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for a, b in zip(getattr(out, name), getattr(ref, name), strict=True):
            if name == "encoder_attentions":  # the rows of real queries (padded ones attend anywhere)
                a, b = a.transpose(1, 2)[real], b.transpose(1, 2)[real]
            close(a, b)
    close(out.logits, ref.logits)
    close(ours(batch).loss, ref.loss)


# --- the parts against transformers' --------------------------------------------------------------


@pytest.mark.parametrize(("bidirectional", "buckets", "distance"), [(True, 32, 128), (False, 32, 128), (True, 8, 20)])
def test_relative_buckets_equal_transformers_on_a_grid(bidirectional, buckets, distance) -> None:
    from transformers.models.t5.modeling_t5 import T5Attention

    grid = torch.arange(-300, 301)[:, None] + torch.arange(0, 5)[None, :] * 61  # every distance in [-300, 544]
    ours = relative_position_bucket(grid, bidirectional, buckets, distance)
    ref = T5Attention._relative_position_bucket(grid, bidirectional, buckets, distance)
    assert torch.equal(ours, ref)
    assert int(ours.min()) == 0 and int(ours.max()) == buckets - 1


# --- Hugging Face -> bertzoo ------------------------------------------------------------------------


@pytest.mark.parametrize(("proj", "tie"), LAYOUTS)
def test_import_t5_for_conditional_generation(tmp_path, proj, tie) -> None:
    hf = tiny_hf(proj, tie)
    hf.save_pretrained(tmp_path)
    kind, model = loading.load(tmp_path)
    assert kind == "pretraining" and isinstance(model, EncoderDecoderLM)
    c = model.config
    assert (c.ffn_gated, c.tie_word_embeddings, c.scale_decoder_outputs) == (proj != "relu", tie, tie)
    assert c.hidden_act == ("relu" if proj == "relu" else "gelu_tanh") and c.head_dim == 12
    assert (model.lm_head.decoder.weight is model.encoder.embeddings.word.weight) == tie
    assert_same(hf, model.eval())
    # The encoder alone: the same numbers from load_encoder.
    encoder = load_encoder(tmp_path).eval()
    ids, mask, _ = inputs(1)
    with torch.no_grad():
        close(encoder(ids, mask).last_hidden_state, hf.encoder(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_import_t5_encoder_model(tmp_path) -> None:
    hf = tiny_hf("gated-gelu", True, seed=2, cls="T5EncoderModel")
    hf.save_pretrained(tmp_path)
    kind, encoder = loading.load(tmp_path)
    assert kind == "encoder" and isinstance(encoder, Encoder)
    ids, mask, _ = inputs(2)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        ours = encoder.eval()(ids, mask, output_hidden_states=True)
    real = mask.bool()
    for a, b in zip(ours.hidden_states, ref.hidden_states, strict=True):
        close(a[real], b[real])


def test_an_untied_head_equal_to_the_word_table_imports_tied(tmp_path) -> None:
    hf = tiny_hf("relu", True, seed=3)
    hf.save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "model.safetensors")
    state["lm_head.weight"] = state["shared.weight"].clone()  # older checkpoints store the tied copy
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    model = load_pretraining(tmp_path)
    assert model.config.tie_word_embeddings and model.lm_head.decoder.weight is model.word_embeddings.weight


# --- bertzoo -> Hugging Face --------------------------------------------------------------------------


@pytest.mark.parametrize(("proj", "tie"), LAYOUTS)
def test_export_reloads_in_transformers_with_the_same_outputs(tmp_path, proj, tie) -> None:
    spec = {"preset": "t5-tiny", "vocab_size": VOCAB, "hidden_size": 32, "num_heads": 3, "attention_head_size": 12}
    spec |= {"intermediate_size": 40, "num_decoder_layers": 3, "tie_word_embeddings": tie, "scale_decoder_outputs": tie}
    if proj != "relu":
        spec |= {"ffn_gated": True, "hidden_act": "gelu_tanh"}
    torch.manual_seed(4)
    model = t5.build(t5.model_config(spec))
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    model.eval()
    model.save_pretrained(tmp_path / "ours")
    report = convert_directory(tmp_path / "ours", tmp_path / "hf", "bertzoo", "hf")
    assert report["architecture"] == "T5ForConditionalGeneration" and report["kind"] == "pretraining"
    raw = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert raw["feed_forward_proj"] == proj and raw["d_kv"] == 12 and raw["num_decoder_layers"] == 3
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf", attn_implementation="eager").eval()
    assert (hf.lm_head.weight.data_ptr() == hf.shared.weight.data_ptr()) == tie
    assert hf.config.scale_decoder_outputs == tie
    assert_same(hf, model, seed=5)
    # And back: the exported directory converts to the same model.
    convert_directory(tmp_path / "hf", tmp_path / "again", "hf", "bertzoo")
    again = load_pretraining(tmp_path / "again")
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


def test_a_t5_encoder_exports_as_t5_encoder_model(tmp_path) -> None:
    hf = tiny_hf("relu", True, seed=6)
    hf.save_pretrained(tmp_path / "src")
    encoder = load_encoder(tmp_path / "src").eval()
    export_hf(encoder, tmp_path / "enc")
    assert json.loads((tmp_path / "enc" / "config.json").read_text())["architectures"] == ["T5EncoderModel"]
    reloaded = transformers.T5EncoderModel.from_pretrained(tmp_path / "enc").eval()
    ids, mask, _ = inputs(6)
    with torch.no_grad():
        close(encoder(ids, mask).last_hidden_state, reloaded(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_state_to_hf_and_back_is_the_identity() -> None:
    from bertzoo.interop.convert import state_from_hf, state_to_hf

    model = t5.build(t5.model_config({"preset": "t5-tiny", "vocab_size": VOCAB, "ffn_gated": True}))
    state = model.state_dict()
    hf_state = state_to_hf(state, model.config)
    assert hf_state["encoder.block.0.layer.0.SelfAttention.q.weight"].shape == (64, 64)
    assert "decoder.block.1.layer.1.EncDecAttention.v.weight" in hf_state and "lm_head.weight" not in hf_state
    back, unused = state_from_hf(hf_state, model.config)
    expected = {k for k in state if k != "lm_head.decoder.weight"}  # the tied head is the word table
    assert set(back) == expected and unused == []
    for key in expected:
        assert torch.equal(back[key], state[key]), key


# --- generation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("proj", "tie"), [("relu", True), ("gated-gelu", False)])
def test_greedy_and_beam_search_equal_transformers_generate(tmp_path, proj, tie) -> None:
    hf = tiny_hf(proj, tie, seed=7, scale=0.5, num_decoder_layers=2)  # transformers' cache needs equal depths
    hf.save_pretrained(tmp_path)
    model = load_pretraining(tmp_path).eval()
    ids, mask, _ = inputs(7)
    settings = {"max_new_tokens": 12, "pad_token_id": 0}
    for beams in (1, 3):
        with torch.no_grad():
            ref = hf.generate(
                input_ids=ids, attention_mask=mask, do_sample=False, num_beams=beams, eos_token_id=1, **settings
            )
        ours = model.generate(ids, mask, num_beams=beams, eos_token_ids=[1], **settings).sequences
        ref = ref[:, 1:]  # transformers' rows begin with the decoder start token
        width = max(ref.size(1), ours.size(1))
        ours, ref = (torch.nn.functional.pad(t, (0, width - t.size(1)), value=0) for t in (ours, ref))
        assert torch.equal(ours, ref), (beams, ours.tolist(), ref.tolist())
        assert len(set(ref.flatten().tolist())) > 4  # varied tokens: the comparison can fail


# --- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"d_model": None}, "has no d_model"),
        ({"feed_forward_proj": "gated-swish"}, "feed_forward_proj='gated-swish'"),
        ({"feed_forward_proj": 3}, "feed_forward_proj must be a string"),
        ({"d_kv": 0}, "d_kv must be a positive integer"),
        ({"decoder_start_token_id": 500}, "decoder_start_token_id=500"),
        ({"dropout_rate": 1.5}, "dropout_rate"),
    ],
)
def test_a_damaged_t5_config_is_one_checkpoint_error(edit, message) -> None:
    raw = {"model_type": "t5", **HF_TINY, "feed_forward_proj": "relu", **edit}
    with pytest.raises(CheckpointError, match=message):
        config_from_hf({k: v for k, v in raw.items() if v is not None})


def test_config_from_hf_reads_t5_defaults_and_the_scaling_rule() -> None:
    raw = {"model_type": "t5", "vocab_size": VOCAB, "d_model": 32, "num_layers": 2, "num_heads": 4, "d_ff": 40}
    c = config_from_hf(raw)
    assert (c.num_decoder_layers, c.head_dim, c.relative_buckets, c.layer_norm_eps) == (2, 64, 32, 1e-6)
    assert c.scale_decoder_outputs and c.decoder_start_token_id == 0 and c.pad_token_id is None
    assert not config_from_hf({**raw, "tie_word_embeddings": False}).scale_decoder_outputs  # 4.x's v1.1 configs
    assert not config_from_hf({**raw, "scale_decoder_outputs": False}).scale_decoder_outputs  # 5.x writes it


def test_the_exporter_refuses_what_t5_cannot_hold(tmp_path) -> None:
    base = {"preset": "t5-tiny", "vocab_size": VOCAB}
    for fields, message in (
        ({"norm_kind": "layernorm"}, "norm_kind='layernorm'"),
        ({"linear_bias": True}, "linear_bias=True"),
        ({"attention_scale": None}, "attention_scale=None"),
        ({"ffn_gated": True, "hidden_act": "gelu"}, "gated exact GELU"),
    ):
        model = t5.build(t5.model_config({**base, **fields}))
        with pytest.raises(CheckpointError, match=message):
            export_hf(model, tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("proj", "tie"), [("relu", True), ("gated-gelu", False)])
def test_gradients_equal_transformers(tmp_path, proj, tie) -> None:
    """Training sees what transformers' T5 sees: the loss's gradients into the relative-position tables (the only
    position signal), the word table (tied head or not) and the LM head equal transformers' at 1e-5."""
    hf = tiny_hf(proj, tie)
    hf.save_pretrained(tmp_path)
    _, ours = loading.load(tmp_path)
    ours.eval()
    ids, mask, labels = inputs(2)
    hf(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    ours(Batch(ids, mask, labels=labels)).loss.backward()
    pairs = {
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": ours.encoder.relative_bias.weight,
        "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": ours.decoder.relative_bias.weight,
        "shared.weight": ours.encoder.embeddings.word.weight,
        "lm_head.weight": ours.lm_head.decoder.weight,
    }
    theirs = dict(hf.named_parameters(remove_duplicate=False))
    for name, param in pairs.items():
        assert float(param.grad.abs().max()) > 1e-4, name  # the loss reaches it
        close(param.grad, theirs[name].grad)


@pytest.mark.parametrize(("proj", "tie"), [("gated-gelu", False)])
def test_every_swap_in_the_tensor_map_breaks_parity(tmp_path, proj, tie) -> None:
    """T5's tensor list with two same-shaped entries exchanged (the stacks' projections, norms, the relative
    tables, the untied head) imports a model that fails `assert_same`; the list as it is passes."""
    hf = tiny_hf(proj, tie, seed=3)
    hf.save_pretrained(tmp_path)
    family = hf_families()["t5"]
    ours = import_with(tmp_path, family)
    assert_same(hf, ours)
    shapes = {k: v.shape for k, v in ours.state_dict().items()}
    moved: set[str] = set()
    for what, mutated in swaps(family, ours.config, shapes):
        with pytest.raises(AssertionError):
            assert_same(hf, import_with(tmp_path, mutated))
        moved.update(what.split(" <-> "))
    assert moved and movable(family, ours.config, shapes) <= moved
