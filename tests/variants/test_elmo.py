"""ELMo: the character table, the biLM's directions, padding, residual and tied softmax, ScalarMix, the
biLM objective, learning, and a safetensors round trip. Tiny models, one thread: seconds in all."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from bertzoo.batch import Batch
from bertzoo.config import ModelConfig, from_dict
from bertzoo.errors import ConfigError
from bertzoo.models.elmo import Elmo, ElmoConfig, char_table
from bertzoo.nn.scalar_mix import ScalarMix
from bertzoo.objectives.bilm import BidirectionalLM
from bertzoo.variants.elmo import model_config

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN"),
]

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(30)] + [f"##p{i}" for i in range(28)]


def preset(name: str, **overrides) -> ModelConfig:
    return model_config({"preset": name, **overrides})


def tiny(seed: int = 0, **overrides) -> Elmo:
    torch.manual_seed(seed)
    return Elmo(preset("elmo-tiny", vocab_size=len(VOCAB), **overrides), VOCAB).eval()


def random_ids(batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, len(VOCAB), (batch, seq), generator=g)


@pytest.mark.parametrize("name", ["elmo-tiny", "elmo-mini"])
def test_small_presets_build_and_give_every_layer_twice_the_width(name: str) -> None:
    model = Elmo(preset(name, vocab_size=len(VOCAB)), VOCAB).eval()
    width = {"elmo-tiny": 16, "elmo-mini": 128}[name]
    out = model(random_ids(2, 5))
    assert len(out.hidden_states) == 3  # token layer + 2 biLSTM layers
    assert all(h.shape == (2, 5, 2 * width) for h in out.hidden_states)
    assert out.forward_states.shape == out.backward_states.shape == (2, 5, width)
    # Layer 0 is the token representation duplicated, [x; x].
    torch.testing.assert_close(out.hidden_states[0][..., :width], out.hidden_states[0][..., width:])
    assert model.char_ids.shape == (len(VOCAB), model.config.max_chars)


def test_paper_preset_has_the_papers_sizes() -> None:
    with torch.device("meta"):  # 93.6M parameters plus a 30522-word softmax: shapes only, no memory
        model = Elmo(preset("elmo"))
    params = dict(model.named_parameters())
    assert params["token_encoder.convs.6.weight"].shape == (1024, 16, 7)
    assert params["token_encoder.highways.1.proj.weight"].shape == (2 * 2048, 2048)
    assert params["token_encoder.projection.weight"].shape == (512, 2048)
    assert params["forward_lstm.layers.0.weight_ih_l0"].shape == (4 * 4096, 512)
    assert params["backward_lstm.layers.1.weight_hr_l0"].shape == (512, 4096)
    assert params["softmax.weight"].shape == (30522, 512)
    # Counted by hand from the paper's sizes: char embeddings (270 ids x 16), 7 convolutions, 2 highway
    # layers, the projection, 4 projected LSTMs (PyTorch keeps two biases); the paper says 93.6M.
    convs = sum(w * 16 * n + n for w, n in [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)])
    highways = 2 * (2048 * 4096 + 4096)
    lstm = 4 * 4096 * (512 + 512 + 2) + 512 * 4096
    expected = 270 * 16 + convs + highways + (2048 * 512 + 512) + 4 * lstm
    assert expected == 93_666_528
    assert sum(p.numel() for n, p in params.items() if not n.startswith("softmax.")) == expected


@pytest.mark.parametrize("name", ["elmo", "elmo-mini", "elmo-tiny"])
def test_configs_survive_json(name: str) -> None:
    config = preset(name)
    assert from_dict(ElmoConfig, json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ConfigError, match="wider than max_chars=3"):
        preset(name, max_chars=3, char_filters=[*config.char_filters, [4, 1]])


def test_char_table_spells_tokens_with_markers_stripping_and_truncation() -> None:
    vocab = ["[PAD]", "ab", "##é", "abcdefghijkl", "[CLS]", "##"]
    # 0 pads, byte b is b + 1, 257/258 begin/end of word, 259 begins a ## piece, 260 + i is special i.
    expected = torch.tensor(
        [
            [257, 260, 258, 0, 0, 0, 0, 0],  # [PAD]: the first reserved special id
            [257, 98, 99, 258, 0, 0, 0, 0],  # "a" = 97, "b" = 98
            [259, 196, 170, 258, 0, 0, 0, 0],  # "é" is the two UTF-8 bytes 0xC3 0xA9; "##" stripped
            [257, 98, 99, 100, 101, 102, 103, 258],  # cut to 8 - 2 bytes, end marker kept
            [257, 262, 258, 0, 0, 0, 0, 0],  # [CLS]: the third special
            [257, 36, 36, 258, 0, 0, 0, 0],  # a bare "##" is an ordinary word of two "#" (35)
        ]
    )
    assert torch.equal(char_table(vocab, max_chars=8), expected)


def test_each_direction_reads_only_its_own_side() -> None:
    model = tiny()
    ids = random_ids(1, 7)
    base = model(ids)
    later = ids.clone()
    later[0, 5] = 5 if ids[0, 5] != 5 else 6  # change the token at position 5
    changed = model(later)
    torch.testing.assert_close(changed.forward_states[:, :5], base.forward_states[:, :5], rtol=0, atol=0)
    assert not torch.allclose(changed.forward_states[:, 5], base.forward_states[:, 5])
    assert not torch.allclose(changed.backward_states[:, :5], base.backward_states[:, :5])

    earlier = ids.clone()
    earlier[0, 1] = 5 if ids[0, 1] != 5 else 6
    changed = model(earlier)
    torch.testing.assert_close(changed.backward_states[:, 2:], base.backward_states[:, 2:], rtol=0, atol=0)
    assert not torch.allclose(changed.backward_states[:, 1], base.backward_states[:, 1])
    assert not torch.allclose(changed.forward_states[:, 2:], base.forward_states[:, 2:])
    # Every layer's halves too: [forward; backward], 16 wide each.
    for h_new, h_old in zip(changed.hidden_states[1:], base.hidden_states[1:], strict=True):
        torch.testing.assert_close(h_new[:, 2:, 16:], h_old[:, 2:, 16:], rtol=0, atol=0)


def test_a_short_row_in_a_padded_batch_gives_its_states_alone() -> None:
    model = tiny()
    long, short = random_ids(1, 7, seed=2), random_ids(1, 4, seed=3)
    pad = torch.zeros(1, 3, dtype=torch.long)  # [PAD] id; anything else must give the same
    ids = torch.cat([long, torch.cat([short, pad + 9], dim=1)])
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    batched = model(ids, mask)
    alone = model(short)
    for h_batch, h_alone in zip(batched.hidden_states, alone.hidden_states, strict=True):
        torch.testing.assert_close(h_batch[1:, :4], h_alone, rtol=0, atol=1e-6)
        assert h_batch[1, 4:].abs().max() == 0
    # The backward LM of the short row starts at its own last token, not at the padding.
    torch.testing.assert_close(batched.backward_states[1:, :4], alone.backward_states, rtol=0, atol=1e-6)
    torch.testing.assert_close(model(long).forward_states, batched.forward_states[:1], rtol=0, atol=1e-6)


def test_both_directions_share_one_softmax_parameter() -> None:
    model = tiny()
    out_shape = (len(VOCAB), model.config.hidden_size)
    assert [n for n, p in model.named_parameters() if p.shape == out_shape] == ["softmax.weight"]
    assert [n for n, p in model.named_parameters() if p.shape == (len(VOCAB),)] == ["softmax.bias"]
    objective = BidirectionalLM(model)
    batch = Batch(random_ids(2, 6))
    for name in ("fwd_loss", "bwd_loss"):
        model.zero_grad()
        out = objective(batch)
        # Each direction's loss alone reaches the one weight and bias.
        torch.autograd.backward(out.terms[name.removesuffix("_loss")][0])
        assert model.softmax.weight.grad.abs().sum() > 0 and model.softmax.bias.grad.abs().sum() > 0


def test_the_second_lstm_layer_adds_its_input_back() -> None:
    model = tiny()
    ids = random_ids(2, 6)
    before = model(ids).hidden_states
    assert not torch.allclose(before[2], before[1])
    # With every weight and bias of an LSTM zero, each gate is sigmoid(0) = 1/2 and the candidate
    # tanh(0) = 0, so the cell stays c = c_prev / 2 + 0 = 0 from c_0 = 0, h = tanh(0) / 2 = 0, and the
    # (zero) projection of h is 0: the layer outputs 0, and a residual layer outputs its input.
    with torch.no_grad():
        for stack in (model.forward_lstm, model.backward_lstm):
            for p in stack.layers[1].parameters():
                p.zero_()
    after = model(ids).hidden_states
    torch.testing.assert_close(after[1], before[1], rtol=0, atol=0)
    torch.testing.assert_close(after[2], after[1], rtol=0, atol=0)


def test_scalar_mix_weights_layers_by_softmax_and_scales_by_gamma() -> None:
    layers = [torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    mix = ScalarMix(3)
    # At the start s = 0: the plain mean of the layers.
    torch.testing.assert_close(mix(layers), (layers[0] + layers[1] + layers[2]) / 3)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.0, 40.0, 0.0]))  # softmax ~ (0, 1, 0): e^-40 ~ 4e-18
        mix.gamma.fill_(2.5)
    torch.testing.assert_close(mix(layers), 2.5 * layers[1])
    with pytest.raises(ValueError, match="3 layers"):
        mix(layers[:2])


def test_bilm_loss_is_the_mean_of_the_shifted_cross_entropies() -> None:
    model = tiny()
    ids = random_ids(2, 6, seed=4)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    out = BidirectionalLM(model)(Batch(ids, mask))
    states = model(ids, mask)
    w, b = model.softmax.weight, model.softmax.bias
    # Row 0 (6 tokens): forward states at 0..4 predict tokens 1..5, backward states at 1..5 tokens 0..4.
    # Row 1 (4 tokens): forward states 0..2 predict tokens 1..3, backward states 1..3 tokens 0..2.
    fwd_h = torch.cat([states.forward_states[0, 0:5], states.forward_states[1, 0:3]])
    fwd_y = torch.cat([ids[0, 1:6], ids[1, 1:4]])
    bwd_h = torch.cat([states.backward_states[0, 1:6], states.backward_states[1, 1:4]])
    bwd_y = torch.cat([ids[0, 0:5], ids[1, 0:3]])
    fwd = F.cross_entropy(fwd_h @ w.T + b, fwd_y)
    bwd = F.cross_entropy(bwd_h @ w.T + b, bwd_y)
    torch.testing.assert_close(out.metrics["fwd_loss"], fwd.detach())
    torch.testing.assert_close(out.metrics["bwd_loss"], bwd.detach())
    torch.testing.assert_close(out.loss, (fwd + bwd) / 2)
    torch.testing.assert_close(out.metrics["fwd_ppl"], fwd.detach().exp())
    torch.testing.assert_close(out.metrics["bwd_ppl"], bwd.detach().exp())
    assert int(out.counts["fwd_loss"]) == int(out.counts["bwd_loss"]) == 8
    assert BidirectionalLM(model).loss_counts(Batch(ids, mask)) == {"fwd": 8, "bwd": 8}


def test_a_tiny_elmo_learns_a_repeated_batch() -> None:
    model = tiny().train()
    objective = BidirectionalLM(model)
    ids = random_ids(2, 8, seed=5)
    mask = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
    batch = Batch(ids, mask)
    optimizer = torch.optim.Adam(objective.parameters(), lr=1e-2)
    first = objective(batch).metrics
    for _ in range(150):
        optimizer.zero_grad()
        out = objective(batch)
        out.loss.backward()
        optimizer.step()
    assert first["fwd_loss"] > 3.5 and first["bwd_loss"] > 3.5  # about ln(64) at the start
    assert out.metrics["fwd_loss"] < 0.3 and out.metrics["bwd_loss"] < 0.3


def test_a_safetensors_round_trip_reproduces_the_outputs(tmp_path) -> None:
    model = tiny()
    path = tmp_path / "model.safetensors"
    save_file(model.state_dict(), str(path))
    # A model built without a vocabulary gets its character table from the file.
    loaded = Elmo(preset("elmo-tiny", vocab_size=len(VOCAB))).eval()
    loaded.load_state_dict(load_file(str(path)))
    assert torch.equal(loaded.char_ids, char_table(VOCAB, loaded.config.max_chars))
    ids, mask = random_ids(2, 6), torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    for a, b in zip(model(ids, mask).hidden_states, loaded(ids, mask).hidden_states, strict=True):
        assert torch.equal(a, b)
