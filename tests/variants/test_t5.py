"""T5 as an encoder-decoder of shared parts, without transformers: presets, the relative position buckets,
RMS norm and the attention scale, the loss and its decoder inputs, cached decoding against recomputing,
padding independence, attention outputs, saving and loading, and what the config refuses.
(Parity with transformers' T5 is tests/interop/test_t5_hf.py.)"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertzoo import loading
from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import ModelConfig
from bertzoo.errors import ConfigError
from bertzoo.models.encdec import EncoderDecoder, EncoderDecoderConfig, shift_right
from bertzoo.models.encoder import Encoder
from bertzoo.nn import RMSNorm, attend, relative_position_bucket
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.variants import VARIANTS, t5

from helpers.parity import perturb

VOCAB = 60
TINY = {"vocab_size": VOCAB, "hidden_size": 32, "num_heads": 4, "intermediate_size": 48, "dropout": 0.0}


# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(seed: int = 0, **fields) -> EncoderDecoderLM:
    """A tiny T5 (2 encoder and 3 decoder layers, heads of 12 dims: wider than 32 / 4) in eval mode."""
    torch.manual_seed(seed)
    spec = {"preset": "t5-tiny", **TINY, "num_decoder_layers": 3, "attention_head_size": 12, **fields}
    return t5.build(t5.model_config(spec)).eval()


def source(seed: int = 0, shape: tuple[int, int] = (3, 11)) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    return ids, mask


# --- presets and config ---------------------------------------------------------------------------


def test_presets_have_t5s_layouts_and_parameter_counts() -> None:
    assert VARIANTS["t5"] is t5.FAMILY
    small = t5.model_config({"preset": "t5-small"})
    assert (small.num_layers, small.num_decoder_layers, small.hidden_size, small.num_heads) == (6, 6, 512, 8)
    assert (small.intermediate_size, small.head_dim, small.vocab_size) == (2048, 64, 32128)
    assert (small.relative_buckets, small.relative_max_distance, small.attention_scale) == (32, 128, 1.0)
    assert small.norm_kind == "rms" and not small.linear_bias and small.position == "none"
    assert small.decoder_start_token_id == 0 and small.pad_token_id is None
    # transformers' T5ForConditionalGeneration of the same sizes has exactly these many parameters.
    assert EncoderDecoderLM(small).num_parameters() == 60_506_624
    base = t5.model_config({"preset": "t5-base"})
    assert (base.num_layers, base.num_decoder_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (
        12,
        12,
        768,
        12,
        3072,
    )
    mini = t5.model_config({"preset": "t5-mini"})
    assert (mini.num_layers, mini.num_decoder_layers, mini.hidden_size, mini.num_heads) == (4, 4, 256, 4)
    assert mini.intermediate_size == 1024


def test_t5_parts_have_no_biases_and_one_shared_word_table() -> None:
    model = tiny()
    assert not [name for name, _ in model.named_parameters() if name.endswith(".bias")]
    assert model.lm_head.decoder.weight is model.encoder.embeddings.word.weight
    assert model.encoder.embeddings.word.padding_idx is None  # id 0 is the decoder's start token: it learns
    layer = model.decoder.stack.layers[0]
    assert layer.attention.qkv.weight.shape == (3 * 4 * 12, 32) and layer.cross.kv.weight.shape == (2 * 48, 32)
    assert isinstance(layer.ffn_residual.norm, RMSNorm) and isinstance(model.decoder.final_norm, RMSNorm)
    assert model.encoder.relative_bias.bidirectional and not model.decoder.relative_bias.bidirectional
    gated = tiny(hidden_act="gelu_tanh", ffn_gated=True, tie_word_embeddings=False, scale_decoder_outputs=False)
    assert gated.encoder.stack.layers[0].ffn.gate.weight.shape == (48, 32)
    assert gated.lm_head.decoder.weight is not gated.encoder.embeddings.word.weight


def test_the_initialisation_is_t5s_fan_in_scaling() -> None:
    torch.manual_seed(0)
    model = t5.build(t5.model_config({"preset": "t5-mini", "vocab_size": 2000}))
    attention = model.encoder.stack.layers[0].attention
    inner = 4 * 64
    q, kv = attention.qkv.weight[:inner], attention.qkv.weight[inner:]
    assert q.std().item() == pytest.approx((256 * 64) ** -0.5, rel=0.05)
    assert kv.std().item() == pytest.approx(256**-0.5, rel=0.05)
    assert model.encoder.stack.layers[0].ffn.down.weight.std().item() == pytest.approx(1024**-0.5, rel=0.05)
    assert model.encoder.embeddings.word.weight.std().item() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"norm_kind": "batchnorm"}, "norm_kind"),
        ({"relative_buckets": 2}, "relative_buckets"),
        ({"relative_buckets": 32, "relative_max_distance": 10}, "relative_max_distance"),
        ({"num_decoder_layers": 2}, "decoder_start_token_id"),
        ({"num_decoder_layers": 2, "decoder_start_token_id": 0, "causal": True}, "two-way"),
        ({"decoder_start_token_id": 99}, "outside the vocabulary"),
        ({"attention_scale": 0.0}, "attention_scale"),
        ({"attention_head_size": 0}, "attention_head_size"),
        ({"hidden_size": 30, "num_heads": 4}, "divisible"),
    ],
)
def test_the_config_refuses_what_cannot_be_built(fields, message) -> None:
    with pytest.raises(ConfigError, match=message):
        EncoderDecoderConfig(**{"vocab_size": VOCAB, "hidden_size": 32, "num_heads": 4, **fields})


def test_existing_configs_keep_their_defaults() -> None:
    c = ModelConfig()
    assert (c.norm_kind, c.linear_bias, c.ffn_gated, c.inner_dropout, c.relative_buckets) == (
        "layernorm",
        True,
        False,
        False,
        0,
    )
    assert (
        c.attention_head_size is None and c.attention_scale is None and EncoderDecoderConfig().num_decoder_layers == 0
    )
    assert not c.is_encoder_decoder and not EncoderDecoderConfig().is_encoder_decoder and c.head_dim == 64
    assert ModelConfig(hidden_size=30, num_heads=4, attention_head_size=8).head_dim == 8  # d_kv need not divide


# --- parts ----------------------------------------------------------------------------------------


def test_relative_buckets_by_hand() -> None:
    rp = torch.tensor([0, -1, 1, -7, -8, -15, -16, -200, 7, 200])
    # Bidirectional (the encoder): 16 buckets a side, 8 exact; keys after the query use 16..31.
    assert relative_position_bucket(rp, True, 32, 128).tolist() == [0, 1, 17, 7, 8, 9, 10, 15, 23, 31]
    # Unidirectional (the decoder): keys after the query fold onto bucket 0; 16 exact, 16 logarithmic.
    assert relative_position_bucket(rp, False, 32, 128).tolist() == [0, 1, 0, 7, 8, 15, 16, 31, 0, 0]
    bucket_48 = 16 + int(math.log(48 / 16) / math.log(128 / 16) * 16)
    assert relative_position_bucket(torch.tensor([-48]), False, 32, 128).item() == bucket_48


def test_the_relative_bias_with_a_past_is_the_full_biass_last_rows() -> None:
    bias = tiny().decoder.relative_bias
    full = bias(7)  # (1, heads, 7, 7)
    assert full.shape == (1, 4, 7, 7)
    torch.testing.assert_close(bias(1, past=6), full[:, :, 6:], atol=0, rtol=0)
    torch.testing.assert_close(bias(3, past=4), full[:, :, 4:], atol=0, rtol=0)


def test_attend_scale_is_the_multiplier_of_the_scores() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    bias = torch.randn(1, 3, 5, 5, generator=g)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    expected = (q @ k.transpose(-1, -2) + bias).masked_fill(~mask, float("-inf")).softmax(-1) @ v
    fused, _ = attend(q, k, v, mask, bias, scale=1.0)
    explicit, probs = attend(q, k, v, mask, bias, need_weights=True, scale=1.0)
    # fp32 rounding of a fused kernel against the plain formula: ~1e-6 (1.01e-6 seen on another CPU's SDPA kernel)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=0)
    default, _ = attend(q, k, v, mask, bias)
    torch.testing.assert_close(default, attend(q / math.sqrt(8), k, v, mask, bias, scale=1.0)[0], atol=1e-6, rtol=0)
    assert not torch.allclose(default, fused, atol=1e-3)


def test_rms_norm_scales_without_centring_in_float32() -> None:
    norm = RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 7.0))
    x = torch.randn(4, 6) + 3.0
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), expected, atol=1e-6, rtol=0)
    half = norm(x.bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), expected, atol=0.05, rtol=0.02)


# --- the objective ----------------------------------------------------------------------------------


def test_decoder_inputs_are_the_labels_shifted_right_after_the_start_token() -> None:
    labels = torch.tensor([[5, 6, 7, 1], [8, 9, IGNORE_INDEX, IGNORE_INDEX]])
    assert shift_right(labels, 0, 0).tolist() == [[0, 5, 6, 7], [0, 8, 9, 0]]
    model = tiny()
    ids, mask = source()
    ids, mask, labels = ids[:2], mask[:2], labels
    dec, dec_mask, positions = model.decoder_inputs(Batch(ids, mask, labels=labels))
    assert dec.tolist() == [[0, 5, 6, 7], [0, 8, 9, 0]] and dec_mask is None and positions is None
    given = torch.tensor([[0, 9, 9, 9], [0, 9, 9, 9]])
    assert model.decoder_inputs(Batch(ids, mask, labels=labels, extra={"decoder_input_ids": given}))[0] is given


def test_loss_is_the_mean_cross_entropy_over_labelled_target_tokens() -> None:
    for model in (tiny(), tiny(1, ffn_gated=True, hidden_act="gelu_tanh", tie_word_embeddings=False)):
        ids, mask = source(2)
        labels = torch.randint(2, VOCAB, (3, 6), generator=torch.Generator().manual_seed(3))
        labels[0, 4:] = IGNORE_INDEX
        batch = Batch(ids, mask, labels=labels)
        with torch.no_grad():
            out = model(batch)
            logits = model.seq2seq(ids, mask, shift_right(labels, 0, 0)).logits
        expected = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE_INDEX)
        torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=0)
        assert model.loss_counts(batch) == {"lm": 16} and int(out.counts["lm_loss"]) == 16
        assert set(out.terms) == {"lm"}
        prediction = model(Batch(ids, mask, extra={"decoder_input_ids": shift_right(labels, 0, 0)}))
        assert prediction.loss is None
        torch.testing.assert_close(prediction.logits, logits, atol=1e-5, rtol=0)


def test_the_output_scaling_multiplies_the_decoder_states_before_a_tied_head() -> None:
    scaled, plain = tiny(4), tiny(4, scale_decoder_outputs=False)
    ids, mask = source(4)
    dec = torch.tensor([[0, 5, 6]] * 3)
    with torch.no_grad():
        a, b = scaled.seq2seq(ids, mask, dec), plain.seq2seq(ids, mask, dec)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=0, rtol=0)
    torch.testing.assert_close(a.logits, b.logits * 32**-0.5, atol=1e-5, rtol=1e-5)


def test_training_backpropagates_into_every_parameter() -> None:
    model = tiny(5, ffn_gated=True, hidden_act="gelu_tanh", tie_word_embeddings=False, dropout=0.1).train()
    ids, mask = source(5)
    labels = torch.randint(2, VOCAB, (3, 5))
    model(Batch(ids, mask, labels=labels)).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


# --- decoding -----------------------------------------------------------------------------------------


@torch.no_grad()
def recomputed_greedy(model: EncoderDecoderLM, ids: torch.Tensor, mask: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding by running the whole target prefix through the decoder at every step (no cache)."""
    dec = torch.zeros(ids.size(0), 1, dtype=torch.long)
    for _ in range(steps):
        logits = model.seq2seq(ids, mask, dec).logits[:, -1]
        dec = torch.cat([dec, logits.argmax(-1, keepdim=True)], dim=1)
    return dec[:, 1:]


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal up to float64 rounding: the models compared here run in float64, so a difference of
    computation order leaves no float32 noise to hide a real difference."""
    assert a.dtype == torch.float64
    torch.testing.assert_close(a, b, atol=1e-10 * max(1.0, float(b.abs().max())), rtol=0)


def perturbed(model: torch.nn.Module, seed: int = 0, scale: float = 1.0) -> torch.nn.Module:
    """Every weight moved by N(0, scale) (the harness's `perturb`), then in float64."""
    return perturb(model, seed, scale).double().eval()


@pytest.mark.parametrize("gated", [False, True])
def test_cached_decoding_equals_recomputing_the_whole_prefix(gated) -> None:
    fields = {"ffn_gated": True, "hidden_act": "gelu_tanh", "tie_word_embeddings": False} if gated else {}
    model = perturbed(tiny(6, **fields), 6)
    ids, mask = source(6)
    # Step by step: the cached decoder's logits are the full recomputation's at every position.
    decoding = model.decoding()
    with torch.no_grad():
        steps = [decoding.start(ids, mask.bool(), 8)]
        chosen = [steps[-1].argmax(-1)]
        for _ in range(5):
            steps.append(decoding.step(chosen[-1]))
            chosen.append(steps[-1].argmax(-1))
        dec = torch.cat([torch.zeros(3, 1, dtype=torch.long), torch.stack(chosen[:-1], 1)], 1)
        full = model.seq2seq(ids, mask, dec).logits
    close(torch.stack(steps, 1), full)
    greedy = model.generate(ids, mask, max_new_tokens=9).sequences
    assert torch.equal(greedy, recomputed_greedy(model, ids, mask, 9))
    assert len(set(greedy.flatten().tolist())) > 3  # the test decodes varied tokens, not one repeated


def test_source_padding_changes_no_other_row_and_no_padded_rows_real_outputs() -> None:
    model = perturbed(tiny(7), 7)
    ids, mask = source(7)
    dec = torch.randint(2, VOCAB, (3, 5), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        together = model.seq2seq(ids, mask, dec)
        for row in range(3):
            real = int(mask[row].sum())
            alone = model.seq2seq(ids[row : row + 1, :real], None, dec[row : row + 1])
            close(together.logits[row], alone.logits[0])
            close(together.encoder_last_hidden_state[row, :real], alone.encoder_last_hidden_state[0])
        # Left padding (relative positions: the distances between real tokens do not change).
        left = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids[1:2, :7]], dim=1)
        left_mask = torch.cat([torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 7, dtype=torch.long)], dim=1)
        close(model.seq2seq(left, left_mask, dec[1:2]).logits[0], together.logits[1])
    generated = model.generate(ids, mask, max_new_tokens=6).sequences
    for row in range(3):
        real = int(mask[row].sum())
        assert torch.equal(model.generate(ids[row : row + 1, :real], max_new_tokens=6).sequences[0], generated[row])


def test_beam_search_and_sampling_run_through_the_shared_loop() -> None:
    model = perturbed(tiny(8), 8)
    ids, mask = source(8)
    greedy = model.generate(ids, mask, max_new_tokens=6).sequences
    assert torch.equal(model.generate(ids, mask, max_new_tokens=6, num_beams=1).sequences, greedy)
    beams = model.generate(ids, mask, max_new_tokens=6, num_beams=4)
    assert beams.sequences.shape == (3, 6) and beams.scores is not None
    for row in range(3):
        real = int(mask[row].sum())
        alone = model.generate(ids[row : row + 1, :real], max_new_tokens=6, num_beams=4).sequences[0]
        assert torch.equal(alone, beams.sequences[row])
    # The beam's best is at least as likely as greedy's sequence under the model.
    with torch.no_grad():

        def logp(seq: torch.Tensor) -> torch.Tensor:
            dec = torch.cat([torch.zeros(3, 1, dtype=torch.long), seq[:, :-1]], 1)
            return model.seq2seq(ids, mask, dec).logits.log_softmax(-1).gather(-1, seq[..., None]).sum((1, 2))

        assert bool((logp(beams.sequences) >= logp(greedy) - 1e-5).all())
    a = model.generate(ids, mask, max_new_tokens=6, do_sample=True, seed=3).sequences
    assert torch.equal(a, model.generate(ids, mask, max_new_tokens=6, do_sample=True, seed=3).sequences)
    stop = int(greedy[0, 2])
    stopped = model.generate(ids[:1], mask[:1], max_new_tokens=6, eos_token_ids=[stop])
    assert stopped.sequences[0, : int(stopped.lengths[0])].tolist()[-1] == stop


def test_attention_outputs_of_both_stacks_and_the_cross_attention() -> None:
    model = tiny(9)
    ids, mask = source(9)
    dec = torch.randint(2, VOCAB, (3, 4))
    with torch.no_grad():
        out = model.seq2seq(ids, mask, dec, output_hidden_states=True, output_attentions=True)
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 4
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert torch.equal(out.decoder_hidden_states[-1], out.last_hidden_state)
    assert [a.shape for a in out.encoder_attentions] == [(3, 4, 11, 11)] * 2
    assert [a.shape for a in out.decoder_attentions] == [(3, 4, 4, 4)] * 3
    assert [a.shape for a in out.cross_attentions] == [(3, 4, 4, 11)] * 3
    for probs in (*out.encoder_attentions, *out.decoder_attentions, *out.cross_attentions):
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=1e-5, rtol=0)
    assert float(out.cross_attentions[0][1, :, :, 7:].abs().max()) == 0.0  # source padding is never read
    assert float(out.decoder_attentions[0][..., 0, 1:].abs().max()) == 0.0  # nor a later target token


# --- files --------------------------------------------------------------------------------------------


def test_save_pretrained_and_from_pretrained_round_trip(tmp_path) -> None:
    model = perturbed(tiny(10, ffn_gated=True, hidden_act="gelu_tanh", tie_word_embeddings=False), 10).float()
    model.save_pretrained(tmp_path)
    kind, loaded = loading.load(tmp_path)
    assert kind == "pretraining" and isinstance(loaded, EncoderDecoderLM)
    assert isinstance(EncoderDecoder.from_pretrained(tmp_path), EncoderDecoderLM)
    loaded.eval()
    ids, mask = source(10)
    dec = torch.randint(2, VOCAB, (3, 4))
    with torch.no_grad():
        torch.testing.assert_close(loaded.seq2seq(ids, mask, dec).logits, model.seq2seq(ids, mask, dec).logits)
        encoder = Encoder.from_pretrained(tmp_path).eval()  # T5's encoder alone is an Encoder
        torch.testing.assert_close(encoder(ids, mask).last_hidden_state, model.encode(ids, mask).last_hidden_state)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_build_refuses_what_t5_is_not() -> None:
    with pytest.raises(ConfigError, match="objective"):
        t5.build(t5.model_config({"preset": "t5-tiny"}), objective="mlm")
    with pytest.raises(ConfigError, match="num_decoder_layers"):
        t5.build(t5.model_config({"preset": "t5-tiny", "num_decoder_layers": 0}))
    with pytest.raises(ConfigError, match="pooler"):
        EncoderDecoder(t5.model_config({"preset": "t5-tiny", "pooler": True}))
