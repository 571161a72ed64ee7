"""Drawing attention groups: the offline HTML page (head view + model view) and PNG heat maps.

The page is `page.html` with `style.css`, `view.js` and the groups as JSON inlined into it, so the written file
works offline, from a file: no server, no network.
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from torch import nn

from bertzoo.errors import ConfigError
from bertzoo.visualize.views import AttentionGroup, attention_groups

__all__ = ["attention_html", "attention_png", "page_data", "render_html", "render_png", "require_matplotlib"]

# The head view draws no line for a weight below this (it would be invisible: opacity = weight).
MIN_LINE = 0.001
PLOT_HINT = "PNG output needs matplotlib; install it with pip install 'bertzoo[plot]'"


@cache
def _part(name: str) -> str:
    """One of the page's files shipped beside this module (page.html, style.css, view.js)."""
    return files("bertzoo.visualize").joinpath(name).read_text(encoding="utf-8")


def _pick(groups: list[AttentionGroup], group: int | str) -> int:
    if isinstance(group, str):
        names = [g.name for g in groups]
        if group not in names:
            raise ConfigError(f"no attention group {group!r}; this model has {', '.join(names)}")
        return names.index(group)
    if not 0 <= group < len(groups):
        raise ConfigError(f"attention group {group} is out of range: this model has {len(groups)}")
    return group


def _check_layer_head(g: AttentionGroup, layer: int | None, head: int | None) -> None:
    if (layer is None) != (head is None):
        raise ConfigError("give both a layer and a head (--layer L --head H), or neither for every layer and head")
    if layer is not None and not 0 <= layer < g.num_layers:
        raise ConfigError(f"layer {layer} is out of range: the model has {g.num_layers} layers (0..{g.num_layers - 1})")
    if head is not None and not 0 <= head < g.num_heads:
        raise ConfigError(f"head {head} is out of range: the model has {g.num_heads} heads (0..{g.num_heads - 1})")


# --- the page -----------------------------------------------------------------------------------------


def page_data(
    groups: list[AttentionGroup],
    *,
    title: str = "",
    text: str = "",
    pair: str | None = None,
    target: str | None = None,
    group: int | str = 0,
    layer: int | None = None,
    head: int | None = None,
) -> dict[str, Any]:
    """What the page embeds as JSON (also what the tests read back)."""
    if not groups:
        raise ConfigError("no attention groups to draw")
    index = _pick(groups, group)
    _check_layer_head(groups[index], layer, head)
    return {
        "title": title,
        "text": text,
        "pair": pair,
        "target": target,
        "min_line": MIN_LINE,
        "initial": {"group": index, "layer": layer or 0, "head": head or 0},
        "groups": [g.to_json() for g in groups],
    }


def _script_json(data: dict[str, Any]) -> str:
    """JSON safe inside a <script> element: no "</script>", no "<!--" whatever the tokens hold."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(groups: list[AttentionGroup], **kwargs: Any) -> str:
    """The self-contained page for `groups` (keyword arguments: `page_data`'s). No network: the script,
    the styles and the data are inline."""
    data = page_data(groups, **kwargs)
    title = "Attention" + (f": {data['title']}" if data["title"] else "")
    return (
        _part("page.html")
        .replace("%TITLE%", html.escape(title))
        .replace("%STYLE%", _part("style.css"))
        .replace("%SCRIPT%", _part("view.js"))
        .replace("%DATA%", _script_json(data))
    )


def attention_html(
    model: nn.Module,
    tokenizer,
    text: str,
    pair: str | None = None,
    *,
    target: str | None = None,
    order: list[int] | None = None,
    title: str = "",
    layer: int | None = None,
    head: int | None = None,
) -> str:
    """An offline HTML page showing `model`'s attention on `text` (and `pair`, or an encoder-decoder's
    `target`; `order`: XLNet's, see `attention_groups`): a head view (tokens in
    two columns linked by lines whose opacity is the weight; layer and head selectable; hovering a token
    shows its links only) and a model view (every layer x head as a small heat map; click to select)."""
    groups = attention_groups(model, tokenizer, text, pair, target=target, order=order)
    title = title or type(model).__name__
    return render_html(groups, title=title, text=text, pair=pair, target=target, layer=layer, head=head)


# --- PNG ----------------------------------------------------------------------------------------------


def require_matplotlib():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(PLOT_HINT) from None
    return Figure


def render_png(
    groups: list[AttentionGroup],
    path: str | Path,
    *,
    group: int | str = 0,
    layer: int | None = None,
    head: int | None = None,
    inches: float = 6.0,
    cell_inches: float = 1.2,
    dpi: int = 100,
) -> Path:
    """A PNG heat map of one layer and head (`inches` square, token labels on both axes), or with neither
    a grid of every layer x head (`cell_inches` per map). The image is exactly that size x `dpi` pixels.
    `path` is a .png file, or a directory to write `layer{L}_head{H}.png` / `all_heads.png` into (named
    `{group}_layer{L}_head{H}.png` / `{group}_all_heads.png` when there are several groups, spaces in the
    group's name as underscores: `query_stream_all_heads.png`)."""
    Figure = require_matplotlib()
    g = groups[_pick(groups, group)]
    _check_layer_head(g, layer, head)
    path = Path(path)
    if path.suffix.lower() != ".png":
        prefix = "" if len(groups) == 1 else f"{g.name.replace(' ', '_')}_"  # several groups, side by side
        path = path / (prefix + (f"layer{layer}_head{head}.png" if layer is not None else "all_heads.png"))
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = "" if len(groups) == 1 else f" ({g.name})"
    if layer is not None:
        fig = Figure(figsize=(inches, inches), dpi=dpi, layout="constrained")
        ax = fig.add_subplot()
        image = ax.imshow(g.weights[layer, head], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks(range(len(g.keys)), g.keys, rotation=90, fontsize=8)
        ax.set_yticks(range(len(g.queries)), g.queries, fontsize=8)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_title(f"layer {layer}, head {head}{suffix}")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    else:
        size = (cell_inches * g.num_heads + 0.6, cell_inches * g.num_layers + 0.6)
        fig = Figure(figsize=size, dpi=dpi, layout="constrained")
        axes = fig.subplots(g.num_layers, g.num_heads, squeeze=False)
        for layer_index in range(g.num_layers):
            for head_index in range(g.num_heads):
                ax = axes[layer_index][head_index]
                ax.imshow(g.weights[layer_index, head_index], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if layer_index == 0:
                    ax.set_title(f"head {head_index}", fontsize=8)
                if head_index == 0:
                    ax.set_ylabel(f"layer {layer_index}", fontsize=8)
        fig.suptitle(f"attention, every layer and head{suffix}", fontsize=9)
    fig.savefig(path, dpi=dpi)
    return path


def attention_png(
    model: nn.Module,
    tokenizer,
    text: str,
    path: str | Path,
    pair: str | None = None,
    *,
    target: str | None = None,
    order: list[int] | None = None,
    layer: int | None = None,
    head: int | None = None,
    group: int | str = 0,
    **kwargs: Any,
) -> Path:
    """A PNG heat map of `model`'s attention on `text`: one layer and head, or every one as a grid
    (`render_png`); needs matplotlib (`pip install 'bertzoo[plot]'`)."""
    require_matplotlib()  # before running the model
    groups = attention_groups(model, tokenizer, text, pair, target=target, order=order)
    return render_png(groups, path, group=group, layer=layer, head=head, **kwargs)
