"""XLNet's two attention streams in the attention view: a `content stream` group (a run without a
factorisation order) and a `query stream` group (a run predicting every position in a factorisation
order: left to right by default, or the order given), each equal to the model's own `attentions` /
`query_attentions`; the query stream never gives weight to its own token or to one after it in the order,
and a query that sees nothing is an empty row. `bertzoo attention` on a saved XLNet writes both. In a
browser: tests/visualize/test_visualize_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from bertzoo.cli import main
from bertzoo.errors import ConfigError, DataError
from bertzoo.models.xlnet import XLNet
from bertzoo.tasks.classification import ClassificationTask
from bertzoo.visualize import attention_groups, attention_html, render_png

from helpers.attention import TEXT, TOKENS, save_tiny_model, tiny_tokenizer
from helpers.tasks import make_cfg
from helpers.xlnet import ORDER, tiny_xlnet

pytestmark = pytest.mark.usefixtures("one_thread")

DATA_SCRIPT = re.compile(r'<script type="application/json" id="attention-data">(.*?)</script>', re.S)
PAIR = "the dog ran"
PAIR_TOKENS = [*TOKENS, "the", "dog", "ran", "[SEP]"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_xlnet(tokenizer)


def embedded(page: str) -> dict:
    (block,) = DATA_SCRIPT.findall(page)
    return json.loads(block)


def direct(model, tokenizer, text=TEXT, pair=None, order=None) -> tuple[np.ndarray, np.ndarray]:
    """(content, query) attention straight from the backbone: (layers, heads, seq, seq) each. The query
    stream's perm_mask is written out pair by pair: query i may see key j iff j comes before i in `order`."""
    encoded = tokenizer.encode(text, pair)
    ids, types = torch.tensor([encoded.ids]), torch.tensor([encoded.type_ids])
    n = ids.size(1)
    order = list(range(n)) if order is None else order
    perm = torch.ones(1, n, n)
    for i in range(n):
        for j in range(n):
            if order.index(j) < order.index(i):
                perm[0, i, j] = 0.0
    with torch.no_grad():
        content = model.encoder(ids, token_type_ids=types, output_attentions=True)
        query = model.encoder(
            ids, token_type_ids=types, perm_mask=perm, target_mapping=torch.eye(n)[None], output_attentions=True
        )
    stack = lambda probs: torch.stack([p[0] for p in probs]).numpy()  # noqa: E731
    return stack(content.attentions), stack(query.query_attentions)


def test_two_groups_with_their_shapes_kinds_and_tokens(model, tokenizer) -> None:
    content, query = attention_groups(model, tokenizer, TEXT)
    assert (content.name, content.kind) == ("content stream", "bidirectional")
    assert (query.name, query.kind) == ("query stream", "query-stream")
    for group in (content, query):
        assert group.queries == group.keys == TOKENS
        assert group.weights.shape == (2, 2, len(TOKENS), len(TOKENS))
    content, query = attention_groups(model, tokenizer, TEXT, pair=PAIR)  # A [SEP] B [SEP], as its tasks read
    assert content.queries == query.keys == PAIR_TOKENS and query.weights.shape[2:] == (13, 13)


def test_the_content_stream_is_bidirectional_and_every_row_sums_to_one(model, tokenizer) -> None:
    for pair in (None, PAIR):
        (content, _) = attention_groups(model, tokenizer, TEXT, pair=pair)
        np.testing.assert_allclose(content.weights.sum(-1), 1.0, atol=1e-5)
        above = np.triu(np.ones(content.weights.shape[-2:], dtype=bool), k=1)
        assert content.weights[..., above].max() > 0.1  # tokens read tokens after them


def test_left_to_right_the_query_stream_is_strictly_lower_triangular(model, tokenizer) -> None:
    _, query = attention_groups(model, tokenizer, TEXT)
    n = len(TOKENS)
    for i in range(n):
        for j in range(i, n):  # itself and every later token: nothing
            assert np.all(query.weights[:, :, i, j] == 0.0), (i, j)
    assert np.all(query.weights[:, :, 0, :] == 0.0)  # [CLS] is predicted first: it sees nothing, an empty row
    np.testing.assert_allclose(query.weights[:, :, 1:].sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(query.weights[:, :, 1, 0], 1.0, atol=1e-6)  # "the" sees [CLS] alone
    assert "left to right" in query.note and "[CLS] (position 0) can see no token" in query.note


def test_a_given_order_hides_itself_and_every_later_token(model, tokenizer) -> None:
    _, query = attention_groups(model, tokenizer, TEXT, order=ORDER)
    rank = {position: r for r, position in enumerate(ORDER)}
    n = len(TOKENS)
    for i in range(n):
        for j in range(n):
            if rank[j] >= rank[i]:
                assert np.all(query.weights[:, :, i, j] == 0.0), (i, j)
            elif rank[i] - rank[j] == 1:
                assert np.all(query.weights[:, :, i, j] > 0.0), (i, j)  # the token just before it is read
    seen = [i for i in range(n) if i != 4]
    assert np.all(query.weights[:, :, 4] == 0.0)  # "on" comes first: an empty row
    np.testing.assert_allclose(query.weights[:, :, seen].sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(query.weights[:, :, 0, 4], 1.0, atol=1e-6)  # [CLS] comes second: it sees "on" alone
    assert "4 0 8 2 6 1 3 7 5" in query.note and "on (position 4) can see no token" in query.note
    _, natural = attention_groups(model, tokenizer, TEXT)
    assert np.abs(natural.weights - query.weights).max() > 0.1  # the order changes what is shown


@pytest.mark.parametrize(("pair", "order"), [(None, None), (None, ORDER), (PAIR, None)])
def test_the_weights_are_the_models_own(model, tokenizer, pair, order) -> None:
    content, query = attention_groups(model, tokenizer, TEXT, pair=pair, order=order)
    want_content, want_query = direct(model, tokenizer, pair=pair, order=order)
    np.testing.assert_allclose(content.weights, want_content, atol=1e-6)
    first = 0 if order is None else order[0]
    others = [i for i in range(want_query.shape[2]) if i != first]
    np.testing.assert_allclose(query.weights[:, :, others], want_query[:, :, others], atol=1e-6)
    # The first query in the order sees no key; the model spreads it evenly over all of them, which the view
    # does not show as attention.
    np.testing.assert_allclose(want_query[:, :, first], 1.0 / want_query.shape[-1], atol=1e-6)


def test_a_prediction_never_depends_on_its_own_token_or_a_later_one(model, tokenizer) -> None:
    """Through both layers: changing "mat" (position 6) leaves the query rows of every position predicted
    before it, and its own, as they were; a later one changes."""
    rank = {position: r for r, position in enumerate(ORDER)}
    _, query = attention_groups(model, tokenizer, TEXT, order=ORDER)
    _, changed = attention_groups(model, tokenizer, TEXT.replace("mat", "dog"), order=ORDER)
    same = [i for i in range(len(TOKENS)) if rank[i] <= rank[6]]
    later = [i for i in range(len(TOKENS)) if rank[i] > rank[6]]
    np.testing.assert_allclose(changed.weights[:, :, same], query.weights[:, :, same], atol=1e-6)
    assert np.abs(changed.weights[1][:, later] - query.weights[1][:, later]).max() > 1e-3


def test_a_causal_xlnet_has_a_causal_content_stream_and_its_rule_empties_rows(tokenizer) -> None:
    model = tiny_xlnet(tokenizer, causal=True)
    content, query = attention_groups(model, tokenizer, TEXT)
    assert content.kind == "causal"
    above = np.triu(np.ones(content.weights.shape[-2:], dtype=bool), k=1)
    assert np.all(content.weights[..., above] == 0.0)
    np.testing.assert_allclose(query.weights, direct(model, tokenizer)[1] * (np.arange(9) > 0)[:, None], atol=1e-6)
    # Right to left, the causal rule (no key after the query) and the order (no key before it) leave nothing.
    _, backwards = attention_groups(model, tokenizer, TEXT, order=list(range(8, -1, -1)))
    assert np.all(backwards.weights == 0.0) and "[SEP] (position 8) can see no token" in backwards.note


def test_a_task_model_the_bare_backbone_and_the_objective_give_the_same_groups(model, tokenizer) -> None:
    task = ClassificationTask(make_cfg("classification", data={"labels": ["a", "b"]}), tokenizer)
    held = task.build(model.encoder)
    expected = attention_groups(model, tokenizer, TEXT, order=ORDER)
    for other in (model.encoder, held):
        got = attention_groups(other, tokenizer, TEXT, order=ORDER)
        for g, e in zip(got, expected, strict=True):
            assert (g.name, g.kind, g.note) == (e.name, e.kind, e.note)
            np.testing.assert_array_equal(g.weights, e.weights)
    model.train()
    attention_groups(model, tokenizer, TEXT)
    assert model.training and model.encoder.training  # the mode is restored
    model.eval()


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ([0, 1, 2], "must list every position 0..8 once (the input is 9 tokens: 0:[CLS] 1:the"),
        ([0, 1, 2, 3, 4, 5, 6, 7, 7], "got [0, 1, 2, 3, 4, 5, 6, 7, 7]"),
        ([0, 1, 2, 3, 4, 5, 6, 7, 9], "must list every position 0..8 once"),
        ("012345678", "must list every position 0..8 once"),
    ],
)
def test_a_bad_order_is_one_line(model, tokenizer, order, message) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        attention_groups(model, tokenizer, TEXT, order=order)


def test_an_order_without_xlnet_and_a_target_with_xlnet_are_refused(model, tokenizer, tmp_path) -> None:
    from bertzoo.loading import load_encoder

    encoder = load_encoder(save_tiny_model(tmp_path / "bert"))
    with pytest.raises(ConfigError, match=re.escape("a factorisation order (--order) is for XLNet's query stream")):
        attention_groups(encoder, tokenizer, TEXT, order=list(range(9)))
    with pytest.raises(ConfigError, match=re.escape("drop --target")):
        attention_groups(model, tokenizer, TEXT, target="the dog")


def test_the_page_holds_both_streams_and_the_note(model, tokenizer, tmp_path) -> None:
    data = embedded(attention_html(model, tokenizer, TEXT, order=ORDER, title="xlnet"))
    content, query = data["groups"]
    assert (content["name"], query["name"], query["kind"]) == ("content stream", "query stream", "query-stream")
    assert content["note"] == "" and "4 0 8 2 6 1 3 7 5" in query["note"]
    assert np.array(query["weights"])[:, :, 4].max() == 0.0  # the empty row stays empty on the page
    groups = attention_groups(model, tokenizer, TEXT)
    paths = [render_png(groups, tmp_path, group=i, layer=1, head=0) for i in range(2)]
    assert [p.name for p in paths] == ["content_stream_layer1_head0.png", "query_stream_layer1_head0.png"]


@pytest.fixture(scope="module")
def xlnet_dir(tokenizer, tmp_path_factory) -> Path:
    """The tiny XLNet saved as a pretraining checkpoint (what `bertzoo pretrain` writes) with its tokenizer."""
    directory = tmp_path_factory.mktemp("xlnet")
    tiny_xlnet(tokenizer).save_pretrained(directory)
    tokenizer.save(directory)
    return directory


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_both_streams_to_the_page_and_pngs(model, tokenizer, xlnet_dir, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "view.html", tmp_path / "png"
    assert main(["attention", str(xlnet_dir), "--text", TEXT, "--out", str(out), "--png", str(png)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "content stream" in page and "query stream" in page
    content, query = embedded(page)["groups"]
    assert (content["name"], query["name"]) == ("content stream", "query stream")
    want_content, want_query = direct(model, tokenizer)
    want_query[:, :, 0] = 0.0
    np.testing.assert_allclose(np.array(content["weights"]), want_content, atol=6e-5)
    np.testing.assert_allclose(np.array(query["weights"]), want_query, atol=6e-5)
    assert is_png(png / "content_stream_all_heads.png") and is_png(png / "query_stream_all_heads.png")
    assert "attention page ->" in capsys.readouterr().err
    # --order: the query stream in that order.
    order = ",".join(str(p) for p in ORDER)
    assert main(["attention", str(xlnet_dir), "--text", TEXT, "--order", order, "--out", str(out)]) == 0
    query = embedded(out.read_text(encoding="utf-8"))["groups"][1]
    want_query = direct(model, tokenizer, order=ORDER)[1]
    want_query[:, :, 4] = 0.0
    np.testing.assert_allclose(np.array(query["weights"]), want_query, atol=6e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--order", "0,1"], "must list every position 0..8 once"),
        (["--order", "0,-1"], "must be an integer >= 0"),
        (["--order", "0,x"], "expected an integer, got 'x'"),
        (["--target", "the dog"], "drop --target"),
    ],
)
def test_cli_bad_xlnet_input_is_one_line_exit_2(xlnet_dir, tmp_path, capsys, args, message) -> None:
    assert main(["attention", str(xlnet_dir), "--text", TEXT, *args, "--out", str(tmp_path / "v.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "v.html").exists()


def test_cli_order_on_an_encoder_is_one_line_exit_2(tmp_path, capsys) -> None:
    bert = save_tiny_model(tmp_path / "bert")
    argv = ["attention", str(bert), "--text", TEXT, "--order", "0 1 2 3 4 5 6 7 8", "--out", str(tmp_path / "v.html")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is for XLNet's query stream" in err


def test_the_backbone_is_read_through_load_encoder(xlnet_dir) -> None:
    from bertzoo.loading import load_encoder

    assert isinstance(load_encoder(xlnet_dir), XLNet)  # what `bertzoo attention` hands the builders
