"""Attention you can look at: an offline HTML page (head view + model view) and PNG heat maps.

`views` turns a model and a text into attention groups, by the view its family names; `page` draws groups as
the page (`page.html`, `style.css`, `view.js`, shipped beside it) and as PNGs. Python API: `attention_groups`,
`attention_html`, `attention_png`; `render_html` / `render_png` draw groups already computed (the CLI computes
them once for both). `bertzoo attention` is the command.
"""

from bertzoo.visualize.page import attention_html, attention_png, page_data, render_html, render_png, require_matplotlib
from bertzoo.visualize.views import VIEWS, AttentionGroup, attention_groups, find_encoder_decoder, find_xlnet

__all__ = [
    "VIEWS",
    "AttentionGroup",
    "attention_groups",
    "attention_html",
    "attention_png",
    "find_encoder_decoder",
    "find_xlnet",
    "page_data",
    "render_html",
    "render_png",
    "require_matplotlib",
]
