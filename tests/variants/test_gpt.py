"""GPT and GPT-2: the causal stack, the next-token objective, and numerical parity with Hugging Face's
OpenAIGPT* / GPT2* classes in both directions (tiny random models built here; nothing is downloaded)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from bertzoo import loading
from bertzoo.batch import Batch
from bertzoo.config import ModelConfig
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.hub import export_hf, load_encoder, load_pretraining
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.clm import CausalLM, lm_labels, perplexity
from bertzoo.variants import gpt

from helpers.parity import perturb

VOCAB = 99
TINY = {"vocab_size": VOCAB, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "max_position": 64}
# (Hugging Face model_type, our layout, FFN width): GPT-1's FFN is always 4x; GPT-2's n_inner is free.
LAYOUTS = {"openai-gpt": ("post", 128), "gpt2": ("pre", 48)}


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask) of 3 x 17 with the second row right-padded after 10 tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 17), generator=g)
    am = torch.ones_like(ids)
    am[1, 10:] = 0
    return ids, am


def tiny_model(model_type: str, seed: int = 0) -> CausalLM:
    norm, ffn = LAYOUTS[model_type]
    torch.manual_seed(seed)
    model = gpt.build(gpt.model_config({**TINY, "norm": norm, "intermediate_size": ffn}))
    perturb(model, seed)
    return model.eval()


def tiny_hf(model_type: str, cls: str, seed: int = 0):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    sizes = {"vocab_size": VOCAB, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4}
    if model_type == "gpt2":
        cfg = transformers.GPT2Config(**sizes, n_inner=48, bos_token_id=None, eos_token_id=None)
    else:
        cfg = transformers.OpenAIGPTConfig(**sizes)
    hf = getattr(transformers, cls)(cfg)
    perturb(hf, seed)
    return hf.eval()


HF_CLASSES = {"openai-gpt": ("OpenAIGPTModel", "OpenAIGPTLMHeadModel"), "gpt2": ("GPT2Model", "GPT2LMHeadModel")}


def assert_same_outputs(ref, ours_hidden, sel: torch.Tensor) -> None:
    """Every hidden state (embeddings, each layer; the last after GPT-2's ln_f) at the real tokens."""
    assert len(ref.hidden_states) == len(ours_hidden)
    for a, b in zip(ref.hidden_states, ours_hidden, strict=True):
        torch.testing.assert_close(b[sel], a[sel], atol=1e-5, rtol=0)


# --- the model ------------------------------------------------------------------------------------


def test_presets_have_the_published_layouts_and_parameter_counts() -> None:
    configs = {name: gpt.model_config({"preset": name}) for name in gpt.PRESETS}
    shapes = {n: (c.num_layers, c.hidden_size, c.num_heads, c.intermediate_size) for n, c in configs.items()}
    assert shapes == {
        "gpt": (12, 768, 12, 3072),
        "gpt2": (12, 768, 12, 3072),
        "gpt-mini": (4, 256, 4, 1024),
        "gpt-tiny": (2, 128, 2, 512),
    }
    assert (configs["gpt"].norm, configs["gpt"].max_position) == ("post", 512)
    assert (configs["gpt2"].norm, configs["gpt2"].max_position) == ("pre", 1024)
    for c in configs.values():
        assert c.causal and not c.embedding_norm and not c.pooler and c.type_vocab_size == 0
        assert c.pad_token_id is None and c.tie_word_embeddings
    with torch.device("meta"):  # sizes only: no 124M-parameter allocation
        counts = {name: Encoder(configs[name]).num_parameters() for name in ("gpt", "gpt2")}
    # Hugging Face's openai-gpt and gpt2 (small) hold exactly these many parameters.
    assert counts == {"gpt": 116_534_784, "gpt2": 124_439_808}
    enc = Encoder(gpt.model_config({"preset": "gpt2", "num_layers": 1, "hidden_size": 32, "num_heads": 4}))
    assert enc.embeddings.norm is None and enc.embeddings.token_type is None and enc.final_norm is not None
    assert enc.embeddings.word.padding_idx is None


@pytest.mark.parametrize("model_type", sorted(LAYOUTS))
def test_a_position_never_sees_the_tokens_after_it(model_type) -> None:
    model = tiny_model(model_type)
    ids, _ = inputs()
    i = 7
    changed = ids.clone()
    changed[:, i + 1 :] = (changed[:, i + 1 :] + 1 + torch.arange(changed.size(1) - i - 1)) % VOCAB
    with torch.no_grad():
        a = model.encoder(ids, output_hidden_states=True)
        b = model.encoder(changed, output_hidden_states=True)
    for x, y in zip(a.hidden_states, b.hidden_states, strict=True):
        torch.testing.assert_close(y[:, : i + 1], x[:, : i + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(a.last_hidden_state[:, i + 1 :], b.last_hidden_state[:, i + 1 :], atol=1e-3)


def test_padding_changes_nothing_at_real_tokens_and_left_padding_stays_finite() -> None:
    model = tiny_model("gpt2")
    ids, am = inputs()
    with torch.no_grad():
        padded = model.encoder(ids, am).last_hidden_state
        alone = model.encoder(ids[1:2, :10]).last_hidden_state
        torch.testing.assert_close(padded[1, :10], alone[0], atol=1e-6, rtol=0)
        # Left padding: the first queries have no real key before them; each still sees itself.
        left = torch.ones_like(am)
        left[0, :4] = 0
        out = model.encoder(ids, left).last_hidden_state
    assert torch.isfinite(out).all()


# --- the objective --------------------------------------------------------------------------------


def test_clm_loss_is_next_token_cross_entropy_over_real_tokens() -> None:
    model = tiny_model("gpt2")
    ids, am = inputs(seed=3)
    batch = Batch(input_ids=ids, attention_mask=am)
    with torch.no_grad():
        out = model(batch)
        logits = model.logits(ids, am)  # (batch, seq, vocab)
    # Independently: shift by hand, keep pairs whose target is a real token.
    pred, target, real = logits[:, :-1], ids[:, 1:], am[:, 1:].bool()
    expected = F.cross_entropy(pred[real], target[real])
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)
    n = int(real.sum())
    assert n == 2 * 16 + 9
    assert int(out.counts["lm_loss"]) == n == model.loss_counts(batch)["lm"]
    acc = (pred[real].argmax(-1) == target[real]).float().mean()
    torch.testing.assert_close(out.metrics["lm_acc"], acc)
    assert set(out.terms) == {"lm"} and out.metrics["loss"] == out.loss
    # The targets are the inputs: labels a masked-LM collator left in the batch are not read.
    with torch.no_grad():
        again = model(Batch(input_ids=ids, attention_mask=am, labels=torch.zeros_like(ids)))
    assert again.loss == out.loss
    assert lm_labels(ids, am)[1, 10:].eq(-100).all()


def test_clm_loss_trains_and_perplexity_is_exp_of_the_mean_loss() -> None:
    model = tiny_model("openai-gpt").train()
    ids, am = inputs()
    out = model(Batch(input_ids=ids, attention_mask=am))
    out.loss.backward()
    assert model.encoder.embeddings.word.weight.grad is not None
    assert model.lm_head.decoder.weight is model.encoder.embeddings.word.weight  # tied
    assert perplexity(out.loss) == pytest.approx(math.exp(out.loss.item()), rel=1e-6)
    assert perplexity(math.log(VOCAB)) == pytest.approx(VOCAB)  # a uniform guess over the vocabulary
    assert perplexity(1e4) == math.inf  # overflow is infinity, not an exception


def test_build_refuses_what_gpt_is_not() -> None:
    with pytest.raises(ConfigError, match="clm"):
        gpt.build(gpt.model_config(TINY), "mlm")
    with pytest.raises(ConfigError, match="causal"):
        gpt.build(gpt.model_config({**TINY, "causal": False}))
    with pytest.raises(ValueError, match="causal=True"):
        CausalLM(Encoder(ModelConfig(**TINY)))


# --- Hugging Face, both directions ----------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(LAYOUTS))
def test_import_tiny_random_hf_models(tmp_path, model_type) -> None:
    base_cls, lm_cls = HF_CLASSES[model_type]
    hf = tiny_hf(model_type, lm_cls)
    hf.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == model_type
    kind, model = loading.load(tmp_path)
    assert kind == "pretraining" and isinstance(model, CausalLM)
    assert model.config.norm == LAYOUTS[model_type][0]
    model.eval()
    for ids, am in (inputs(1), (inputs(2)[0], None)):
        sel = am.bool() if am is not None else torch.ones_like(ids, dtype=torch.bool)
        labels = lm_labels(ids, am)
        with torch.no_grad():
            ref = hf(input_ids=ids, attention_mask=am, labels=labels, output_hidden_states=True)
            ours = model.encoder(ids, am, output_hidden_states=True)
            out = model(Batch(input_ids=ids, attention_mask=am))
        assert_same_outputs(ref, ours.hidden_states, sel)
        torch.testing.assert_close(model.lm_head(ours.last_hidden_state)[sel], ref.logits[sel], atol=1e-5, rtol=0)
        # Hugging Face's own loss (it shifts the labels inside) is ours.
        torch.testing.assert_close(out.loss, ref.loss, atol=1e-5, rtol=0)
    # The base class: a bare encoder, same numbers.
    base = tiny_hf(model_type, base_cls, seed=4)
    base.save_pretrained(tmp_path / "base")
    enc = load_encoder(tmp_path / "base").eval()
    assert loading.load(tmp_path / "base")[0] == "encoder"
    ids, am = inputs(5)
    with torch.no_grad():
        ref = base(input_ids=ids, attention_mask=am, output_hidden_states=True)
        ours = enc(ids, am, output_hidden_states=True)
    assert_same_outputs(ref, ours.hidden_states, am.bool())


@pytest.mark.parametrize("model_type", sorted(LAYOUTS))
def test_export_reloads_in_transformers_with_the_same_outputs(tmp_path, model_type) -> None:
    transformers = pytest.importorskip("transformers")
    model = tiny_model(model_type, seed=6)
    export_hf(model, tmp_path / "lm")
    raw = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert raw["model_type"] == model_type and raw["architectures"] == [HF_CLASSES[model_type][1]]
    ids, am = inputs(7)
    sel = am.bool()
    with torch.no_grad():
        ours = model.encoder(ids, am, output_hidden_states=True)
        logits = model.lm_head(ours.last_hidden_state)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "lm").eval()
    assert type(reloaded).__name__ == HF_CLASSES[model_type][1]
    assert reloaded.lm_head.weight.data_ptr() == reloaded.get_input_embeddings().weight.data_ptr()  # re-tied
    with torch.no_grad():
        ref = reloaded(input_ids=ids, attention_mask=am, output_hidden_states=True)
    assert_same_outputs(ref, ours.hidden_states, sel)
    torch.testing.assert_close(ref.logits[sel], logits[sel], atol=1e-5, rtol=0)
    # The encoder alone exports as the base class.
    export_hf(model.encoder, tmp_path / "base")
    base = transformers.AutoModel.from_pretrained(tmp_path / "base").eval()
    assert type(base).__name__ == HF_CLASSES[model_type][0]
    with torch.no_grad():
        ref = base(input_ids=ids, attention_mask=am, output_hidden_states=True)
    assert_same_outputs(ref, ours.hidden_states, sel)
    # And back: the exported directory imports to the same model.
    again = load_pretraining(tmp_path / "lm").eval()
    with torch.no_grad():
        torch.testing.assert_close(again.logits(ids, am)[sel], logits[sel], atol=1e-6, rtol=0)


@pytest.mark.parametrize("model_type", sorted(LAYOUTS))
def test_state_to_hf_and_back_is_the_identity(model_type) -> None:
    from bertzoo.interop.convert import state_from_hf, state_to_hf

    model = tiny_model(model_type)
    state = model.state_dict()
    hf_state = state_to_hf(state, model.config, prefix="transformer.")
    assert hf_state["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D: (in, out)
    back, unused = state_from_hf(hf_state, model.config)
    expected = {k for k in state if k != "lm_head.decoder.weight"}  # the tied head is the word table
    assert set(back) == expected and unused == []
    for key in expected:
        assert torch.equal(back[key], state[key]), key


def test_exporters_refuse_what_the_other_architecture_would_compute_differently(tmp_path) -> None:
    shared = gpt.build(gpt.model_config({**TINY, "share": "all"}))
    with pytest.raises(CheckpointError, match="share='all'"):
        export_hf(shared, tmp_path / "a")
    wide = gpt.build(gpt.model_config({**TINY, "norm": "post", "intermediate_size": 48}))
    with pytest.raises(CheckpointError, match=r"openai-gpt.*intermediate_size=48 \(it is 4 x hidden_size\)"):
        export_hf(wide, tmp_path / "b")
    from bertzoo.variants import bert

    causal_bert = Encoder(bert.model_config({**TINY, "causal": True}))
    with pytest.raises(CheckpointError, match="causal attention"):
        export_hf(causal_bert, tmp_path / "c")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("model_type", "edit", "message"),
    [
        ("gpt2", {"n_embd": None}, "has no n_embd"),
        ("gpt2", {"n_head": 5}, "divisible"),
        ("gpt2", {"n_inner": -1}, "n_inner must be a positive integer"),
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=true"),
        ("gpt2", {"tie_word_embeddings": False}, "tie_word_embeddings=false"),
        ("openai-gpt", {"afn": "swish"}, "afn='swish' is not supported"),
        ("openai-gpt", {"n_positions": "512"}, "n_positions must be a positive integer"),
    ],
)
def test_a_damaged_gpt_config_is_one_checkpoint_error(model_type, edit, message) -> None:
    from bertzoo.interop.convert import config_from_hf

    raw = {"model_type": model_type, "vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, **edit}
    with pytest.raises(CheckpointError, match=message):
        config_from_hf({k: v for k, v in raw.items() if v is not None})


# --- bertzoo's own format -------------------------------------------------------------------------


def test_save_pretrained_and_from_pretrained_round_trip(tmp_path) -> None:
    model = tiny_model("openai-gpt", seed=8)
    model.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["objective"] == "clm" and raw["variant"] == "gpt" and raw["causal"] is True
    loaded = CausalLM.from_pretrained(tmp_path).eval()
    assert loaded.lm_head.decoder.weight is loaded.encoder.embeddings.word.weight
    kind, also = loading.load(tmp_path)
    assert kind == "pretraining" and isinstance(also, CausalLM)
    ids, am = inputs(9)
    with torch.no_grad():
        torch.testing.assert_close(loaded.logits(ids, am), model.logits(ids, am), atol=0, rtol=0)
        enc = Encoder.from_pretrained(tmp_path).eval()
        torch.testing.assert_close(enc(ids, am).last_hidden_state, model.encoder(ids, am).last_hidden_state)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
