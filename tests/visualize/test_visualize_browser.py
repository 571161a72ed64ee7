"""The attention page in a real browser: headless Chromium (Debian's chromium + chromedriver, driven by
selenium) loads the file, the controls change what is shown, and the screenshot's heat-map pixels are
the model's weights. Nothing is downloaded at test time; without a browser the tests skip, saying why
(`make setup` installs it where apt is usable)."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertzoo.visualize import AttentionGroup, attention_groups, render_html

from helpers.attention import MAT, TEXT, TOKENS, tiny_model, tiny_tokenizer

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")
Image = pytest.importorskip("PIL.Image", reason="needs Pillow (comes with matplotlib)")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _find_browser() -> tuple[str, str]:
    browser = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(
            "needs Chromium and its driver (Debian: apt-get install chromium chromium-driver; `make setup` does it "
            "where apt is usable)"
        )
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = _find_browser()
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must never try to download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def open_page(browser, path: Path, page: str) -> None:
    path.write_text(page, encoding="utf-8")
    browser.get(path.resolve().as_uri())
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1", "the page script failed"


def shown_lines(browser) -> dict[tuple[int, int], float]:
    """(query, key) -> stroke opacity of every head-view line the browser displays."""
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#head-svg line.link'))"
        ".filter(l => getComputedStyle(l).display !== 'none')"
        ".map(l => [+l.dataset.q, +l.dataset.k, +l.getAttribute('stroke-opacity')]);"
    )
    return {(q, k): a for q, k, a in rows}


def expected_lines(weights: np.ndarray, rows=None) -> dict[tuple[int, int], float]:
    rows = range(weights.shape[0]) if rows is None else rows
    return {(q, k): float(weights[q, k]) for q in rows for k in range(weights.shape[1]) if weights[q, k] >= 0.001}


def assert_lines(shown: dict, expected: dict) -> None:
    assert shown.keys() == expected.keys()
    np.testing.assert_allclose([shown[k] for k in expected], list(expected.values()), atol=6e-5)


def thumb_pixels(browser, layer: int, head: int, nq: int, nk: int) -> np.ndarray:
    """Darkness (0 white .. 1 the darkest blue) at the centre of each cell of a model-view heat map,
    read from a screenshot of the page."""
    thumb = browser.find_element(By.CSS_SELECTOR, f'canvas.thumb[data-layer="{layer}"][data-head="{head}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", thumb)
    cell = int(thumb.get_attribute("data-cell"))
    shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    box = browser.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.left, r.top];", thumb)
    left, top = round(box[0]), round(box[1])
    pixels = np.asarray(shot, dtype=np.float64)
    centre = cell // 2
    red = np.array(
        [[pixels[top + i * cell + centre, left + j * cell + centre, 0] for j in range(nk)] for i in range(nq)]
    )
    return (255.0 - red) / 247.0  # the page's ramp: red = 255 - 247 * weight


def test_head_view_lines_follow_the_selected_layer_and_head(browser, tokenizer, tmp_path) -> None:
    model = tiny_model(tokenizer)
    (group,) = attention_groups(model, tokenizer, TEXT)
    open_page(browser, tmp_path / "view.html", render_html([group], title="tiny", text=TEXT))
    tokens = browser.find_elements(By.CSS_SELECTOR, "#head-svg text.tok.q")
    assert [t.text for t in tokens] == TOKENS
    assert_lines(shown_lines(browser), expected_lines(group.weights[0, 0]))  # layer 0, head 0 at first
    # Every query's strongest line goes to "mat" in the head we built.
    assert all(group.weights[0, 0, q, MAT] == max(group.weights[0, 0, q]) for q in range(len(TOKENS)))

    Select(browser.find_element(By.ID, "layer")).select_by_value("1")
    Select(browser.find_element(By.ID, "head")).select_by_value("1")
    assert_lines(shown_lines(browser), expected_lines(group.weights[1, 1]))

    # Hovering a query token shows its lines only, with its weights; leaving shows them all again.
    cat = browser.find_element(By.CSS_SELECTOR, '#head-svg text.tok.q[data-i="2"]')
    ActionChains(browser).move_to_element(cat).perform()
    assert "active" in cat.get_attribute("class")
    assert_lines(shown_lines(browser), expected_lines(group.weights[1, 1], rows=[2]))
    best = int(np.argmax(group.weights[1, 1, 2]))
    assert browser.find_element(By.ID, "status").text.startswith(f"query 2 cat attends to: {TOKENS[best]} ")
    # ... and a key token shows the lines into it.
    key = browser.find_element(By.CSS_SELECTOR, f'#head-svg text.tok.k[data-i="{MAT}"]')
    ActionChains(browser).move_to_element(key).perform()
    shown = shown_lines(browser)
    assert {k for _, k in shown} == {MAT} and len(shown) == int((group.weights[1, 1, :, MAT] >= 0.001).sum())
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    assert_lines(shown_lines(browser), expected_lines(group.weights[1, 1]))

    # Clicking a heat map in the model view selects its layer and head.
    browser.find_element(By.CSS_SELECTOR, 'canvas.thumb[data-layer="0"][data-head="1"]').click()
    assert Select(browser.find_element(By.ID, "layer")).first_selected_option.text == "layer 0"
    assert Select(browser.find_element(By.ID, "head")).first_selected_option.text == "head 1"
    selected = browser.find_elements(By.CSS_SELECTOR, "canvas.thumb.selected")
    assert [(s.get_attribute("data-layer"), s.get_attribute("data-head")) for s in selected] == [("0", "1")]
    assert_lines(shown_lines(browser), expected_lines(group.weights[0, 1]))


def test_the_screenshot_shows_the_weights(browser, tokenizer, tmp_path) -> None:
    model = tiny_model(tokenizer)
    (group,) = attention_groups(model, tokenizer, TEXT)
    open_page(browser, tmp_path / "view.html", render_html([group], text=TEXT))
    n = len(TOKENS)
    for layer, head in [(0, 0), (1, 1), (0, 1)]:
        darkness = thumb_pixels(browser, layer, head, n, n)
        weights = group.weights[layer, head]
        np.testing.assert_allclose(darkness, weights, atol=0.01)
        # Darker cells are heavier weights, wherever the weights differ visibly.
        flat_w, flat_d = weights.ravel(), darkness.ravel()
        apart = np.abs(flat_w[:, None] - flat_w[None, :]) > 0.02
        assert np.all((np.sign(flat_w[:, None] - flat_w[None, :]) == np.sign(flat_d[:, None] - flat_d[None, :]))[apart])
    assert darkness.std() > 0.05  # not a blank map
    assert int(np.argmax(thumb_pixels(browser, 0, 0, n, n).mean(axis=0))) == MAT  # the "mat" column is darkest
    # The head view of layer 0, head 0 on screen: every query's line to "mat" is drawn in the head's colour
    # (red); hovering one query leaves only its line, so far fewer coloured pixels.
    every = coloured_pixels(browser)
    ActionChains(browser).move_to_element(
        browser.find_element(By.CSS_SELECTOR, '#head-svg text.tok.q[data-i="2"]')
    ).perform()
    one = coloured_pixels(browser)
    assert every > 2000 and one < every / 3, (every, one)


def coloured_pixels(browser) -> int:
    """Strongly red pixels of the head view in a screenshot (head 0's lines are hsl(0, 70%, 38%))."""
    svg = browser.find_element(By.ID, "head-svg")
    shot = np.asarray(Image.open(io.BytesIO(svg.screenshot_as_png)).convert("RGB"), dtype=np.int32)
    return int(((shot[..., 0] - shot[..., 1]) > 60).sum())


def test_a_causal_page_draws_no_line_to_a_later_token(browser, tokenizer, tmp_path) -> None:
    (group,) = attention_groups(tiny_model(tokenizer, causal=True), tokenizer, TEXT)
    open_page(browser, tmp_path / "causal.html", render_html([group], text=TEXT))
    assert "causal" in browser.find_element(By.ID, "kind").text
    for layer, head in [(0, 0), (1, 0)]:
        Select(browser.find_element(By.ID, "layer")).select_by_value(str(layer))
        Select(browser.find_element(By.ID, "head")).select_by_value(str(head))
        shown = shown_lines(browser)
        assert shown and all(k <= q for q, k in shown)
        assert_lines(shown, expected_lines(group.weights[layer, head]))
    darkness = thumb_pixels(browser, 1, 0, len(TOKENS), len(TOKENS))
    assert np.all(darkness[np.triu_indices(len(TOKENS), k=1)] < 0.01)  # white above the diagonal


def test_switching_groups_shows_cross_attention(browser, tmp_path) -> None:
    """The hook for encoder-decoders works in the page: a cross group has its own queries and keys."""
    source, target = ["[CLS]", "a", "b", "[SEP]"], ["<s>", "x", "y"]
    cross = np.zeros((2, 1, 3, 4))
    cross[:, 0, [0, 1, 2], [3, 1, 2]] = 1.0  # target token t attends to one source token
    groups = [
        AttentionGroup("encoder", "bidirectional", source, source, np.full((1, 2, 4, 4), 0.25)),
        AttentionGroup("cross", "cross", target, source, cross),
    ]
    open_page(browser, tmp_path / "groups.html", render_html(groups, layer=0, head=1))
    assert len(browser.find_elements(By.CSS_SELECTOR, "canvas.thumb")) == 2
    Select(browser.find_element(By.ID, "group")).select_by_visible_text("cross")
    assert "cross-attention" in browser.find_element(By.ID, "kind").text
    assert [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#head-svg text.tok.q")] == target
    assert [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#head-svg text.tok.k")] == source
    assert shown_lines(browser) == {(0, 3): 1.0, (1, 1): 1.0, (2, 2): 1.0}  # head clamped to the group's 1
    assert Select(browser.find_element(By.ID, "head")).first_selected_option.text == "head 0"
    assert len(browser.find_elements(By.CSS_SELECTOR, "canvas.thumb")) == 2  # 2 layers x 1 head
    assert json.loads(browser.find_element(By.ID, "attention-data").get_attribute("textContent"))["groups"][1][
        "name"
    ] == ("cross")


def test_xlnets_query_stream_draws_no_line_to_itself_or_a_later_token(browser, tokenizer, tmp_path) -> None:
    """XLNet's two groups: the group selector switches from the content stream (lines both ways) to the
    query stream in a given order, whose lines all go to tokens earlier in that order; the query predicted
    first has no line, says so on hover, and is a white row in its heat map."""
    from helpers.xlnet import ORDER, tiny_xlnet

    content, query = attention_groups(tiny_xlnet(tokenizer), tokenizer, TEXT, order=ORDER)
    open_page(browser, tmp_path / "xlnet.html", render_html([content, query], text=TEXT))
    assert browser.find_element(By.ID, "kind").text.startswith("content stream")
    assert not browser.find_element(By.ID, "note").is_displayed()  # the content stream has no note
    shown = shown_lines(browser)
    assert any(k > q for q, k in shown)  # bidirectional: lines to later tokens
    assert_lines(shown, expected_lines(content.weights[0, 0]))

    Select(browser.find_element(By.ID, "group")).select_by_visible_text("query stream")
    assert "each position is predicted from the tokens before it" in browser.find_element(By.ID, "kind").text
    note = browser.find_element(By.ID, "note")
    assert note.is_displayed() and "4 0 8 2 6 1 3 7 5" in note.text
    rank = {position: r for r, position in enumerate(ORDER)}
    for layer, head in [(0, 0), (1, 1)]:
        Select(browser.find_element(By.ID, "layer")).select_by_value(str(layer))
        Select(browser.find_element(By.ID, "head")).select_by_value(str(head))
        shown = shown_lines(browser)
        assert shown and all(rank[k] < rank[q] for q, k in shown)
        assert_lines(shown, expected_lines(query.weights[layer, head]))
    first = ORDER[0]  # "on": it sees no token
    ActionChains(browser).move_to_element(
        browser.find_element(By.CSS_SELECTOR, f'#head-svg text.tok.q[data-i="{first}"]')
    ).perform()
    assert shown_lines(browser) == {}
    assert browser.find_element(By.ID, "status").text == f"query {first} on attends to nothing"
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    darkness = thumb_pixels(browser, 1, 1, len(TOKENS), len(TOKENS))
    np.testing.assert_allclose(darkness, query.weights[1, 1], atol=0.01)
    assert np.all(darkness[first] < 0.01)  # a white row
