"""ELECTRA: replaced-token detection semantics, sampling statistics, sharing, two-stage training,
save/load, Hugging Face parity and an end-to-end pretraining run with exact resume."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import load_pretrain_config
from bertzoo.errors import ConfigError
from bertzoo.hub import export_hf, load_encoder, load_pretraining
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.electra import (
    SAMPLE_UNIFORM,
    Discriminator,
    Electra,
    replace_tokens,
    sample_from_logits,
)
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.electra import PRESETS, build, generator_config, model_config

from helpers.parity import CASES, assert_parity, perturb, token_inputs, transformers

VOCAB = 61
TINY = dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)
TINY_E = dict(TINY, embedding_size=16)  # factorized embeddings: each model projects E -> its hidden size


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def masked_batch(seed: int = 0, b: int = 4, s: int = 12) -> Batch:
    """Random tokens, some padding, ~1/3 of the real tokens selected (most replaced by [MASK]=4)."""
    g = torch.Generator().manual_seed(seed)
    original = torch.randint(5, VOCAB, (b, s), generator=g)
    am = torch.ones_like(original)
    am[0, 9:] = 0
    original[0, 9:] = 0
    selected = (torch.rand(b, s, generator=g) < 0.35) & am.bool()
    selected[:, 0] = False
    selected[1, 3] = True
    keep = torch.rand(b, s, generator=g) < 0.2  # a few selected tokens stay unchanged in the input
    input_ids = torch.where(selected & ~keep, torch.full_like(original, 4), original)
    labels = torch.where(selected, original, torch.full_like(original, IGNORE_INDEX))
    uniform = torch.rand(b, s, generator=g)
    return Batch(
        input_ids=input_ids,
        attention_mask=am,
        token_type_ids=torch.zeros_like(original),
        labels=labels,
        extra={SAMPLE_UNIFORM: uniform},
    )


def tiny_electra(seed: int = 0, **kwargs) -> Electra:
    torch.manual_seed(seed)
    return build(model_config(TINY_E), **kwargs)


# --- the objective's semantics --------------------------------------------------------------


def test_labels_are_one_exactly_where_the_sample_differs_even_if_the_original_comes_back():
    batch = masked_batch()
    selected = batch.labels != IGNORE_INDEX
    original = torch.where(selected, batch.labels, batch.input_ids)
    t = 7
    original[1, 3] = t  # a masked position whose original token is the one the generator will sample
    batch.labels[1, 3] = t
    model = tiny_electra().eval()
    with torch.no_grad():
        model.generator.mlm_head.decoder.bias[t] = 1e4  # the generator samples t with probability 1
        hidden = model.generator.encoder(batch.input_ids, batch.attention_mask).last_hidden_state
        fake = model.replace(batch, model.generator.mlm_head(hidden, selected), selected)
    assert torch.equal(fake.original, original)
    assert torch.equal(fake.input_ids, torch.where(selected, torch.full_like(original, t), original))
    expected = selected & (original != t)
    assert torch.equal(fake.labels, expected)
    assert not fake.labels[1, 3] and selected[1, 3]  # sampled back the original: labelled original
    assert expected.sum() > 3 and not fake.labels[~selected].any()  # unmasked tokens are never "replaced"


def test_replace_tokens_restores_kept_and_randomised_positions():
    batch = masked_batch(seed=1)
    selected = batch.labels != IGNORE_INDEX
    batch.input_ids[selected] = 5  # whatever the collator put there, the original comes from labels
    sampled = batch.labels[selected].clone()
    sampled[::2] = (sampled[::2] + 1 - 5) % (VOCAB - 5) + 5  # every other sample differs from the original
    fake = replace_tokens(batch, sampled)
    assert torch.equal(fake.input_ids[selected], sampled)
    assert torch.equal(fake.labels[selected], sampled != batch.labels[selected])
    assert int(fake.labels.sum()) == len(sampled[::2])


def test_sampler_inverts_the_cdf_exactly_and_never_draws_impossible_tokens():
    logits = torch.log(torch.tensor([[0.25, 0.25, 0.5], [0.5, 0.0, 0.5]]))  # exact binary fractions
    rows = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    u = torch.tensor([0.0, 0.2499, 0.25, 0.5, 0.4999, 0.5, 0.9999999])
    assert sample_from_logits(logits[rows], u).tolist() == [0, 0, 1, 2, 0, 2, 2]


def test_sampler_frequencies_match_the_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, generator=g) * 2
    n = 20000
    u = torch.rand(3, n, generator=g)
    samples = sample_from_logits(logits.repeat_interleave(n, 0), u.reshape(-1)).reshape(3, n)
    probs = torch.softmax(logits, -1)
    freq = F.one_hot(samples, 6).float().mean(1)
    sigma = (probs * (1 - probs) / n).sqrt()
    assert ((freq - probs).abs() <= 4.5 * sigma + 1e-4).all(), (freq, probs)


def test_loss_is_mlm_plus_fifty_times_mean_bce_over_real_tokens():
    batch = masked_batch(seed=2)
    model = tiny_electra(seed=2).eval()
    assert model.rtd_weight == 50.0
    out = model(batch)
    selected = batch.labels != IGNORE_INDEX
    with torch.no_grad():
        hidden = model.generator.encoder(batch.input_ids, batch.attention_mask).last_hidden_state
        mlm_logits = model.generator.mlm_head(hidden, selected)
        fake = model.replace(batch, mlm_logits, selected)
        logits = model.discriminator.logits(fake.input_ids, batch.attention_mask, batch.token_type_ids)
    real = batch.attention_mask.bool()
    mlm = F.cross_entropy(mlm_logits, batch.labels[selected])
    rtd = F.binary_cross_entropy_with_logits(logits[real], fake.labels[real].float())
    torch.testing.assert_close(out.loss, mlm + 50.0 * rtd)
    torch.testing.assert_close(out.metrics["rtd_loss"], rtd)
    pred, pos = logits[real] > 0, fake.labels[real]
    torch.testing.assert_close(out.metrics["rtd_acc"], (pred == pos).float().mean())
    assert out.counts["rtd_loss"] == real.sum() and out.counts["mlm_loss"] == selected.sum()
    torch.testing.assert_close(out.metrics["replaced_share"], pos.float().mean())
    tp = (pred & pos).sum().float()
    torch.testing.assert_close(out.metrics["rtd_recall"], tp / pos.sum())
    torch.testing.assert_close(out.metrics["rtd_precision"], tp / pred.sum().clamp(min=1))


def test_no_gradient_flows_from_the_discriminator_into_the_generator():
    batch = masked_batch(seed=3)
    grads = {}
    for weight in (50.0, 0.0):
        model = tiny_electra(seed=3, rtd_weight=weight).eval()  # eval: no dropout, same samples
        model(batch).loss.backward()
        grads[weight] = {n: p.grad for n, p in model.generator.named_parameters() if "embeddings" not in n}
        disc_grad = model.discriminator.encoder.stack.layers[0].ffn.up.weight.grad
        assert (disc_grad.abs().sum() > 0) == (weight > 0)
    assert grads[50.0].keys() == grads[0.0].keys() and len(grads[50.0]) > 10
    for name, g in grads[50.0].items():
        torch.testing.assert_close(g, grads[0.0][name], msg=name)


def test_embeddings_are_shared_and_the_generator_is_smaller():
    model = tiny_electra()
    gen, disc = model.generator.encoder.embeddings, model.discriminator.encoder.embeddings
    for name in ("word", "position", "token_type", "norm"):
        assert getattr(gen, name) is getattr(disc, name)
    assert gen.project is not disc.project  # each model lifts E to its own width
    assert gen.project.weight.shape == (8, 16) and disc.project.weight.shape == (32, 16)
    assert model.generator.mlm_head.decoder.weight is disc.word.weight
    assert model.generator.mlm_head.dense.weight.shape == (16, 8)  # the MLM head projects back to E
    # One optimizer step keeps them one tensor.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(masked_batch()).loss.backward()
    opt.step()
    assert gen.word.weight.data_ptr() == disc.word.weight.data_ptr()


def test_disentangled_sharing_keeps_the_rtd_gradient_out_of_the_generators_table():
    """DeBERTaV3's E_D = sg(E_G) + delta: both start equal, RTD moves delta only, the generator's table only
    the masked LM (its gradient the same with or without RTD); position/segment/LayerNorm stay shared."""
    batch = masked_batch(seed=4)
    grads = {}
    for weight in (50.0, 0.0):
        model = tiny_electra(seed=4, rtd_weight=weight, embedding_sharing="disentangled").eval()
        gen, disc = model.generator.encoder.embeddings, model.discriminator.encoder.embeddings
        assert disc.word.shared is gen.word and model.generator.mlm_head.decoder.weight is gen.word.weight
        for name in ("position", "token_type", "norm"):
            assert getattr(gen, name) is getattr(disc, name)
        ids = batch.input_ids
        assert torch.equal(disc.word(ids), gen.word(ids)) and not disc.word.delta.any()
        model(batch).loss.backward()
        grads[weight] = gen.word.weight.grad.clone()
        assert (disc.word.delta.grad.abs().sum() > 0) == (weight > 0)
    torch.testing.assert_close(grads[50.0], grads[0.0], rtol=0, atol=0)
    plain = tiny_electra(seed=4).eval()  # the paper's sharing: RTD does reach the one table
    plain(batch).loss.backward()
    assert not torch.allclose(plain.discriminator.encoder.embeddings.word.weight.grad, grads[0.0])


def test_disentangled_checkpoint_stores_the_merged_table_and_loads_back_exactly(tmp_path):
    model = tiny_electra(seed=8, embedding_sharing="disentangled").eval()
    word = model.discriminator.encoder.embeddings.word
    with torch.no_grad():
        word.delta.normal_(0, 0.3)
    merged = model.generator.encoder.embeddings.word.weight.detach() + word.delta.detach()
    model.save_pretrained(tmp_path / "ckpt")
    stored = load_file(tmp_path / "ckpt" / "model.safetensors")
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["embedding_sharing"] == "disentangled"
    assert torch.equal(stored["discriminator.encoder.embeddings.word.weight"], merged)
    assert not any(k.endswith("word.delta") for k in stored)
    again = load_pretraining(tmp_path / "ckpt").eval()
    assert again.embedding_sharing == "disentangled"
    assert torch.equal(again.discriminator.encoder.embeddings.word.delta, word.delta)
    batch = masked_batch(seed=8)
    torch.testing.assert_close(again(batch).loss, model(batch).loss, rtol=0, atol=0)
    # Every loader sees an ordinary discriminator with the merged table.
    encoder = load_encoder(tmp_path / "ckpt").eval()
    assert isinstance(encoder.embeddings.word, torch.nn.Embedding)
    assert torch.equal(encoder.embeddings.word.weight, merged)
    ids, am = batch.input_ids, batch.attention_mask
    torch.testing.assert_close(
        encoder(ids, am).last_hidden_state, model.discriminator.encoder(ids, am).last_hidden_state, rtol=0, atol=0
    )


@pytest.mark.parametrize(
    "preset,hidden,heads,inter,width",
    [("electra-small", 64, 1, 256, 128), ("electra-base", 256, 4, 1024, 768), ("electra-large", 256, 4, 1024, 1024)],
)
def test_generator_sizes_follow_the_paper(preset, hidden, heads, inter, width):
    """Table 6 of the paper: generator 1/4 (small, large) or 1/3 (base) of the discriminator's width."""
    disc = model_config({"preset": preset})
    gen = generator_config(disc, {"electra-base": 1 / 3}.get(preset, 0.25))
    assert (gen.hidden_size, gen.num_heads, gen.intermediate_size, gen.num_layers) == (
        hidden,
        heads,
        inter,
        12 * (1 + (preset == "electra-large")),
    )
    assert (gen.embedding_size or gen.hidden_size) == width == (disc.embedding_size or disc.hidden_size)
    assert not disc.pooler


def electra_count(p: dict, vocab: int = 30522) -> int:
    """Discriminator encoder parameters from the architecture's formula (not from our modules)."""
    h, i, L, e = p["hidden_size"], p["intermediate_size"], p["num_layers"], p.get("embedding_size", p["hidden_size"])
    emb = vocab * e + 512 * e + 2 * e + 2 * e + ((e * h + h) if e != h else 0)
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return emb + L * layer


@pytest.mark.parametrize("preset,paper", [("electra-small", 14e6), ("electra-base", 110e6)])
def test_discriminator_parameter_counts(preset, paper):
    n = Encoder(model_config({"preset": preset})).num_parameters()
    assert n == electra_count(PRESETS[preset])
    assert abs(n - paper) / paper < 0.04  # the paper rounds: small 13.5M ("14M"), base 108.9M ("110M")


def test_every_preset_builds_and_trains_a_step_at_tiny_width():
    for name, preset in PRESETS.items():
        spec = {"preset": name, **TINY}
        if "embedding_size" in preset:
            spec["embedding_size"] = 16
        torch.manual_seed(0)
        model = build(model_config(spec))
        out = model(masked_batch())
        out.loss.backward()
        assert torch.isfinite(out.loss)
        assert model.discriminator.rtd_head.prediction.weight.grad is not None
        assert model.generator.mlm_head.dense.weight.grad is not None


def test_objective_args_are_validated():
    cfg = model_config(TINY_E)
    with pytest.raises(ConfigError, match="generator_size"):
        build(cfg, generator_sise=0.5)
    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        build(cfg, generator_size=1.5)
    with pytest.raises(ConfigError, match="joint"):
        build(cfg, stage="both")
    with pytest.raises(ConfigError, match="generator_checkpoint"):
        build(cfg, stage="discriminator")
    with pytest.raises(ConfigError, match="embedding_sharing"):
        build(cfg, embedding_sharing="tied")
    with pytest.raises(ConfigError, match="stage joint"):
        build(cfg, stage="generator", embedding_sharing="disentangled")
    with pytest.raises(ConfigError, match="electra"):
        build(cfg, objective="mlm+nsp")
    mlm = build(cfg, objective="mlm")
    assert isinstance(mlm, MaskedLM) and mlm.nsp_head is None


def test_rtd_prior_starts_the_logit_at_the_replaced_share():
    cfg = model_config(TINY_E)
    torch.manual_seed(0)
    model = build(cfg, rtd_prior=0.15)
    # log(0.15 / 0.85), written out: a discriminator at init says "replaced" with probability 0.15.
    assert model.discriminator.rtd_head.prediction.bias.item() == pytest.approx(-1.734601055)
    torch.manual_seed(0)
    plain = build(cfg)
    assert plain.discriminator.rtd_head.prediction.bias.item() == 0.0  # Google's init unless asked
    for key, value in plain.state_dict().items():  # only that bias differs
        if key != "discriminator.rtd_head.prediction.bias":
            torch.testing.assert_close(model.state_dict()[key], value, msg=key)
    for bad in (0.0, 1.0, True, "0.15"):
        with pytest.raises(ConfigError, match="rtd_prior"):
            build(cfg, rtd_prior=bad)
    with pytest.raises(ConfigError, match="rtd_prior"):
        build(cfg, objective="mlm", rtd_prior=0.15)


# --- two-stage training ------------------------------------------------------------------------


def test_two_stage_training(tmp_path):
    batch = masked_batch(seed=4)
    stage1 = tiny_electra(seed=4, stage="generator", generator_size=1.0)
    trainable = {n for n, p in stage1.named_parameters(remove_duplicate=False) if p.requires_grad}
    assert all(n.startswith("generator.") or ".embeddings." in n for n in trainable)
    assert "discriminator.encoder.embeddings.word.weight" in trainable  # shared with the generator
    assert "discriminator.rtd_head.dense.weight" not in trainable
    out = stage1(batch)
    assert "rtd_loss" not in out.metrics and torch.equal(out.loss, out.metrics["mlm_loss"])
    out.loss.backward()
    with torch.no_grad():
        for p in stage1.parameters():
            if p.grad is not None:
                p -= 0.5 * p.grad
    stage1.save_pretrained(tmp_path / "gen")

    stage2 = build(model_config(TINY_E), stage="discriminator", generator_checkpoint=str(tmp_path / "gen"))
    gen_before = {k: v.clone() for k, v in stage2.generator.state_dict().items()}
    for k, v in stage1.generator.state_dict().items():
        assert torch.equal(gen_before[k], v), k
    # Same size: the discriminator starts as a copy of the trained generator's encoder ...
    for k, v in stage2.generator.encoder.state_dict().items():
        assert torch.equal(stage2.discriminator.encoder.state_dict()[k], v), k
    # ... with its own embeddings, and the generator frozen.
    assert stage2.discriminator.encoder.embeddings.word is not stage2.generator.encoder.embeddings.word
    assert not any(p.requires_grad for p in stage2.generator.parameters())
    out = stage2(batch)
    assert out.loss.requires_grad
    torch.testing.assert_close(out.loss, 50.0 * out.metrics["rtd_loss"])
    out.loss.backward()
    assert all(p.grad is None for p in stage2.generator.parameters())
    assert stage2.discriminator.encoder.embeddings.word.weight.grad is not None

    stage2.save_pretrained(tmp_path / "disc")
    again = load_pretraining(tmp_path / "disc")
    assert again.stage == "discriminator" and not again.shared_embeddings
    for k, v in stage2.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k


def test_two_stage_with_a_smaller_generator_copies_the_embedding_block_only(tmp_path):
    tiny_electra(seed=5, stage="generator").save_pretrained(tmp_path / "gen")
    model = build(model_config(TINY_E), stage="discriminator", generator_checkpoint=str(tmp_path / "gen"))
    copied = model.init_discriminator_from_generator()
    assert sorted(copied) == sorted(
        f"embeddings.{n}" for n in ("word.weight", "position.weight", "token_type.weight", "norm.weight", "norm.bias")
    )


# --- save / load / Hugging Face ------------------------------------------------------------------


def test_sample_temperature_flattens_the_generators_samples_and_is_kept_in_checkpoints(tmp_path):
    """T > 1 draws from softmax(logits / T): with one token far ahead, T = 1 always draws it and a large T
    draws almost uniformly. The setting survives save/load; nonsense values are refused."""
    batch = masked_batch(seed=2, b=16, s=12)
    selected = batch.labels != IGNORE_INDEX
    n = int(selected.sum())
    logits = torch.zeros(n, VOCAB)
    logits[:, 7] = 12.0  # p(7) = e^12 / (e^12 + VOCAB - 1) > 0.999 at T = 1
    plain, hot = tiny_electra(seed=1), tiny_electra(seed=1, sample_temperature=1e4)
    assert set(plain.replace(batch, logits, selected).input_ids[selected].tolist()) == {7}
    drawn = hot.replace(batch, logits, selected).input_ids[selected]
    assert (drawn == 7).float().mean() < 0.2 and len(set(drawn.tolist())) > 10
    hot.save_pretrained(tmp_path / "ckpt")
    assert load_pretraining(tmp_path / "ckpt").sample_temperature == 1e4
    for bad in (0, -1.0, "hot", True):
        with pytest.raises(ConfigError, match="sample_temperature"):
            tiny_electra(sample_temperature=bad)


def test_save_load_round_trip_and_load_encoder_returns_the_discriminator(tmp_path):
    model = tiny_electra(seed=6).eval()
    model.save_pretrained(tmp_path / "ckpt")
    raw = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert raw["objective"] == "electra" and raw["generator"]["hidden_size"] == 8
    stored = load_file(tmp_path / "ckpt" / "model.safetensors")
    assert sum(v.shape == (VOCAB, 16) for v in stored.values()) == 1  # the shared table is stored once
    again = load_pretraining(tmp_path / "ckpt").eval()
    assert isinstance(again, Electra) and again.generator_config == model.generator_config
    assert again.generator.encoder.embeddings.word is again.discriminator.encoder.embeddings.word
    for k, v in model.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k
    batch = masked_batch(seed=6)
    torch.testing.assert_close(again(batch).loss, model(batch).loss, rtol=0, atol=0)
    encoder = load_encoder(tmp_path / "ckpt")
    assert encoder.config.hidden_size == 32 and encoder.pooler is None
    for k, v in model.discriminator_encoder().state_dict().items():
        assert torch.equal(encoder.state_dict()[k], v), k
    assert isinstance(Electra.from_pretrained(str(tmp_path / "ckpt")), Electra)


def hf_inputs(seed=0):
    batch = token_inputs(VOCAB, seed=seed)
    return batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]


def tiny_hf(cls_name, seed=0, **fields):
    """A tiny transformers ELECTRA of `cls_name` (the harness's sizes, or `fields`), every weight perturbed."""
    config = transformers.ElectraConfig(**{**CASES["electra"].fields, "vocab_size": VOCAB, **fields})
    torch.manual_seed(seed)
    return perturb(getattr(transformers, cls_name)(config), seed)


@pytest.mark.parametrize("embedding", [16, 32])  # with and without the E -> hidden projection
def test_hf_discriminator_imports_with_its_loss_and_exports_as_electra_for_pretraining(tmp_path, embedding):
    hf = tiny_hf("ElectraForPreTraining", embedding_size=embedding)
    hf.save_pretrained(tmp_path / "hf")
    ids, am, tt = hf_inputs()
    disc = load_pretraining(tmp_path / "hf").eval()
    assert isinstance(disc, Discriminator)
    batch = {"input_ids": ids, "attention_mask": am, "token_type_ids": tt}
    assert_parity(disc, hf, batch)
    base = transformers.ElectraModel.from_pretrained(tmp_path / "hf").eval()
    assert_parity(load_encoder(tmp_path / "hf").eval(), base, batch)
    labels = torch.randint(0, 2, ids.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref_loss = hf(input_ids=ids, attention_mask=am, token_type_ids=tt, labels=labels).loss
        loss = disc(Batch(input_ids=ids, attention_mask=am, token_type_ids=tt, labels=labels)).loss
    torch.testing.assert_close(loss, ref_loss, atol=1e-6, rtol=0)
    export_hf(disc, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    assert_parity(disc, transformers.ElectraForPreTraining.from_pretrained(tmp_path / "out").eval(), batch)
    base = transformers.AutoModel.from_pretrained(export_hf(disc.encoder, tmp_path / "enc")).eval()
    assert type(base).__name__ == "ElectraModel"
    assert_parity(disc.encoder, base, batch)


def test_hf_generator_imports_tied_and_exports_as_electra_for_masked_lm(tmp_path):
    hf = tiny_hf("ElectraForMaskedLM", hidden_size=8, num_attention_heads=1, intermediate_size=16, seed=1)
    hf.save_pretrained(tmp_path / "hf")
    gen = load_pretraining(tmp_path / "hf").eval()
    assert isinstance(gen, MaskedLM) and gen.mlm_head.decoder.weight is gen.encoder.word_embeddings.weight
    batch = token_inputs(VOCAB, seed=1)
    assert_parity(gen, hf, batch)
    export_hf(gen, tmp_path / "out")
    back = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
    assert type(back).__name__ == "ElectraForMaskedLM"
    assert_parity(gen, back, batch)


def test_joint_objective_exports_both_models_and_joins_them_back(tmp_path):
    model = tiny_electra(seed=7).eval()
    export_hf(model, tmp_path / "hf")
    disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "hf" / "generator").eval()
    ids, am, tt = hf_inputs(seed=7)
    sel = am.bool()
    with torch.no_grad():
        torch.testing.assert_close(
            disc(input_ids=ids, attention_mask=am, token_type_ids=tt).logits[sel],
            model.discriminator.logits(ids, am, tt)[sel],
            atol=1e-5,
            rtol=0,
        )
        hidden = model.generator.encoder(ids, am, tt).last_hidden_state
        torch.testing.assert_close(
            gen(input_ids=ids, attention_mask=am, token_type_ids=tt).logits[sel],
            model.generator.mlm_head(hidden, sel),
            atol=1e-5,
            rtol=0,
        )
    joined = Electra.from_parts(load_pretraining(tmp_path / "hf" / "generator"), load_pretraining(tmp_path / "hf"))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(joined.state_dict()[k], v, atol=0, rtol=0, msg=k)


def test_disentangled_objective_exports_the_merged_discriminator(tmp_path):
    model = tiny_electra(seed=5, embedding_sharing="disentangled").eval()
    with torch.no_grad():
        model.discriminator.encoder.embeddings.word.delta.normal_(0, 0.3)
    export_hf(model, tmp_path / "hf")
    disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ids, am, tt = hf_inputs(seed=5)
    with torch.no_grad():
        torch.testing.assert_close(
            disc(input_ids=ids, attention_mask=am, token_type_ids=tt).logits[am.bool()],
            model.discriminator.logits(ids, am, tt)[am.bool()],
            atol=1e-5,
            rtol=0,
        )


# --- the assembled pipeline ---------------------------------------------------------------------


def tiny_run_config(shards, out, **overrides):
    values = {
        "model": {"preset": "electra-mini", **{k: v for k, v in TINY_E.items() if k != "vocab_size"}},
        "data.shards": str(shards),
        "data.max_seq_len": 48,
        "train.output_dir": str(out),
        "train.batch_size": 8,
        "train.max_steps": 6,
        "train.lr": 1e-3,
        "train.warmup_steps": 2,
        "train.log_every": 2,
        "train.save_every": 3,
        "train.precision": "fp32",
        "train.threads": 1,
    }
    values.update(overrides)
    return load_pretrain_config("configs/pretrain/electra-mini.yaml", values)


def test_collator_keys_sampling_noise_by_example_not_by_batch(synthetic_shards, tmp_path):
    from bertzoo.train.pretrain import build_pretraining

    _, dataset, collator, _ = build_pretraining(tiny_run_config(synthetic_shards, tmp_path))
    dataset.set_epoch(0)
    ex = [dataset[i] for i in range(4)]
    a = collator(ex)
    b = collator([ex[2], ex[3], ex[0]])
    n = int(a.attention_mask[2].sum())
    assert torch.equal(a.extra[SAMPLE_UNIFORM][2, :n], b.extra[SAMPLE_UNIFORM][0, :n])
    assert "next_sentence_label" not in ex[0]  # ELECTRA trains on single segments
    later = collator([{**ex[2], "epoch": 1}])
    assert not torch.equal(later.extra[SAMPLE_UNIFORM][0, :n], a.extra[SAMPLE_UNIFORM][2, :n])


@pytest.mark.parametrize("sharing", ["shared", "disentangled"])
def test_pretraining_from_the_config_resumes_exactly(synthetic_shards, tmp_path, sharing):
    """6 steps straight == 3 steps, a SIGTERM, then a resume (the generator's samples included)."""
    from bertzoo.engine.loop import Trainer
    from bertzoo.train.pretrain import build_pretraining, pretrain

    args = {"objective_args.embedding_sharing": sharing}
    straight = pretrain(tiny_run_config(synthetic_shards, tmp_path / "a", **args))
    assert straight["steps"] == 6
    cfg = tiny_run_config(synthetic_shards, tmp_path / "b", **args)
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    assert isinstance(objective, Electra) and objective.generator_config.hidden_size == 8

    def stop(trainer, step):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    first = Trainer(objective, dataset, collator, cfg.train, save_extra=tokenizer.save, callbacks=[stop]).train()
    assert first["steps"] == 3
    resumed = pretrain(tiny_run_config(synthetic_shards, tmp_path / "b", **args), resume="auto")
    assert resumed["steps"] == 6
    a = load_file(tmp_path / "a" / "final" / "model.safetensors")
    b = load_file(tmp_path / "b" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), key
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    logged = set().union(*rows)
    assert {"mlm_acc", "rtd_acc", "rtd_precision", "rtd_recall", "replaced_share"} <= logged
    # The saved run is a discriminator to fine-tune.
    assert load_encoder(tmp_path / "a" / "final").config.hidden_size == 32


def test_two_stage_pretraining_runs_from_the_config(synthetic_shards, tmp_path, capsys):
    from bertzoo.train.pretrain import pretrain

    args = {"objective_args.generator_size": 1.0, "train.max_steps": 3, "train.save_every": 3}
    pretrain(tiny_run_config(synthetic_shards, tmp_path / "gen", **args, **{"objective_args.stage": "generator"}))
    second = {
        "objective_args.stage": "discriminator",
        "objective_args.generator_checkpoint": str(tmp_path / "gen" / "final"),
    }
    summary = pretrain(tiny_run_config(synthetic_shards, tmp_path / "disc", **args, **second))
    assert summary["steps"] == 3
    # The config's word_embedding_init (ppmi-svd) and mlm_bias_init (unigram) started the generator run; here
    # the tables and the generator's masked-LM bias come from it.
    out = capsys.readouterr().err
    assert "word_embedding_init skipped" in out and "mlm_bias_init skipped" in out
    gen = load_pretraining(tmp_path / "gen" / "final")
    disc = load_pretraining(tmp_path / "disc" / "final")
    assert gen.stage == "generator" and disc.stage == "discriminator"
    for k, v in gen.generator.state_dict().items():  # the generator stayed frozen
        assert torch.equal(disc.generator.state_dict()[k], v), k
    moved = disc.discriminator.encoder.stack.layers[0].ffn.up.weight
    assert not torch.equal(moved, gen.generator.encoder.stack.layers[0].ffn.up.weight)  # it trained from there
