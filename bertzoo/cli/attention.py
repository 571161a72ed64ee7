"""`bertzoo attention MODEL --text T`: an offline HTML page (head view, model view) and PNG heat maps of a
model's attention (bertzoo.visualize)."""

from __future__ import annotations

import argparse
import sys

from bertzoo.cli.common import non_negative_int
from bertzoo.errors import ConfigError


def position_list(text: str) -> list[int]:
    """An argparse `type` for `--order`: token positions "4,0,8,2" (or space-separated)."""
    return [non_negative_int(p) for p in text.replace(",", " ").split()]


def add_parser(sub) -> None:
    at = sub.add_parser(
        "attention",
        help="look at a model's attention: an offline HTML page (head view, model view) and PNG heat maps",
    )
    at.add_argument("model", help="model directory (bertzoo, fine-tuned or Hugging Face), builtin:NAME or hf:ID")
    at.add_argument("--text", required=True, help="the text to run the model on")
    at.add_argument("--pair", default=None, help="a second segment: [CLS] text [SEP] pair [SEP]")
    at.add_argument("--target", default=None, help="an encoder-decoder's (T5's) decoder text; --text is its source")
    at.add_argument("--out", "-o", default=None, help="write the HTML page here (e.g. view.html)")
    at.add_argument("--png", default=None, help="write PNG heat maps: a .png file or a directory (needs matplotlib)")
    at.add_argument("--layer", type=non_negative_int, default=None, help="layer (from 0): one heat map with --head")
    at.add_argument("--head", type=non_negative_int, default=None, help="head (from 0): one heat map with --layer")
    at.add_argument(
        "--order",
        type=position_list,
        default=None,
        metavar="POS,POS,...",
        help="XLNet: the query stream's factorisation order, every token position once (default: left to right)",
    )
    at.add_argument("--device", default="cpu", help="cpu, auto, cuda, cuda:N")
    at.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.engine.devices import resolve_device
    from bertzoo.io import write_atomic
    from bertzoo.loading import load, load_encoder, read_config, resolve
    from bertzoo.visualize import attention_groups, render_html, render_png, require_matplotlib

    if not args.out and not args.png:
        raise ConfigError("bertzoo attention: say what to write: --out view.html and/or --png DIR_OR_FILE")
    if args.png:
        require_matplotlib()  # a missing matplotlib is reported before the model loads
    directory = resolve(args.model)
    # An encoder-decoder loads whole (its decoder has attention too); anything else as its encoder.
    model = load(directory)[1] if read_config(directory)[1].is_encoder_decoder else load_encoder(directory)
    model = model.to(resolve_device(args.device))
    tokenizer = Tokenizer.load(directory)
    groups = attention_groups(model, tokenizer, args.text, args.pair, target=args.target, order=args.order)
    if args.out:
        texts = {"text": args.text, "pair": args.pair, "target": args.target}
        page = render_html(groups, title=args.model, layer=args.layer, head=args.head, **texts)
        write_atomic(args.out, page)
        print(f"attention page -> {args.out}", file=sys.stderr)
    if args.png:
        # A directory gets every group's maps (an encoder-decoder has three); a .png file the first group's.
        many = not args.png.lower().endswith(".png")
        for index in range(len(groups)) if many else [0]:
            path = render_png(groups, args.png, group=index, layer=args.layer, head=args.head)
            print(f"heat map{'' if args.layer is not None else 's'} -> {path}", file=sys.stderr)
    return 0
