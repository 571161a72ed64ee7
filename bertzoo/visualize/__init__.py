"""Attention you can look at: an offline HTML page (head view + model view) and PNG heat maps.

The data model is a list of named **attention groups**. A group is one kind of attention in a model:
its query tokens, its key tokens, and a (layers, heads, queries, keys) array of probabilities (each
row sums to 1, except a row that can see no key at all: it is all zeros and the group's `note` says so).
An encoder has one group ("self-attention", bidirectional), a decoder-only model (GPT) one causal group
(lower-triangular); the page and the PNGs draw any list of groups, so an encoder-decoder has "encoder",
"decoder" and "cross" groups and XLNet its two streams without touching the drawing code.

How a model becomes groups: `BUILDERS` is the one explicit table of builders, tried in order; each
takes `(model, tokenizer, text, pair, target, order)` and returns the groups, or None when the model is
not its kind. An encoder reads `[CLS] text [SEP] (pair [SEP])` and gives one group. An encoder-decoder
(T5) reads `text` as the source and `target` on the decoder side (shifted right after its start token)
and gives three: `encoder` (bidirectional, source x source), `decoder` (causal, target x target) and
`cross` (target tokens as queries, source tokens as keys). XLNet reads what its tasks read (the
tokenizer's `encode(text, pair)`, segment ids included) and gives two: `content stream` (one run
without a factorisation order: bidirectional, or causal for attn_type "uni") and `query stream` (kind
"query-stream": a second run where every position is predicted in the factorisation order `order`, by
default left to right, so each query sees only the tokens before it in that order and never itself; the
content stream of that run is restricted to the order too, as in pretraining, so nothing leaks through
the layers). A query that sees no token (the first in the order) has an empty row: the model would spread
it evenly over every key, which means nothing.

Python API: `attention_groups`, `attention_html`, `attention_png`; `render_html` / `render_png` draw
groups already computed (the CLI computes them once for both). `bertzoo attention` is the command.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.config import ModelConfig
from bertzoo.data.pretraining.collate_seq2seq import end_token_id
from bertzoo.errors import ConfigError, DataError
from bertzoo.models.encdec import EncoderDecoder
from bertzoo.models.encoder import Encoder
from bertzoo.models.xlnet import XLNet, stream_masks

__all__ = [
    "AttentionGroup",
    "BUILDERS",
    "attention_groups",
    "attention_html",
    "attention_png",
    "find_encoder_decoder",
    "find_xlnet",
    "render_html",
    "render_png",
    "require_matplotlib",
]

# "query-stream": XLNet's query stream, whose queries see the tokens before them in a factorisation order and
# never themselves (no diagonal, and not lower-triangular unless the order is left to right).
KINDS = ("bidirectional", "causal", "cross", "query-stream")
# Weights are written to the page with this many decimals (the JSON stays small; 5e-5 is invisible).
DECIMALS = 4
# The head view draws no line for a weight below this (it would be invisible: opacity = weight).
MIN_LINE = 0.001
# How the decoder's first input (its start token, T5's pad id) is labelled: the pad token's name would
# read as padding.
START_LABEL = "<start>"
PLOT_HINT = "PNG output needs matplotlib; install it with pip install 'bertzoo[plot]'"


@dataclass
class AttentionGroup:
    """One kind of attention of a model: `weights[layer, head, q, k]` is how much query token q
    attends to key token k (probabilities, each row sums to 1; a query that may see no key has a row of
    zeros, which `note` explains). `note` is shown on the page under the group's kind."""

    name: str
    kind: str  # one of KINDS
    queries: list[str]
    keys: list[str]
    weights: np.ndarray  # (layers, heads, len(queries), len(keys)) float32
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"attention group kind must be one of {KINDS}, got {self.kind!r}")
        self.weights = np.asarray(self.weights, dtype=np.float32)
        expected = (len(self.queries), len(self.keys))
        if self.weights.ndim != 4 or self.weights.shape[2:] != expected:
            raise ValueError(
                f"weights of group {self.name!r} must be (layers, heads, {expected[0]}, {expected[1]}), "
                f"got {self.weights.shape}"
            )

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_heads(self) -> int:
        return self.weights.shape[1]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "queries": self.queries,
            "keys": self.keys,
            "layers": self.num_layers,
            "heads": self.num_heads,
            "weights": np.round(self.weights.astype(np.float64), DECIMALS).tolist(),
            "note": self.note,
        }


# --- from a model to groups ---------------------------------------------------------------------------


def display_token(tokenizer, token_id: int) -> str:
    """A token as a reader wants to see it: byte-level BPE's "Ġ" and SentencePiece's "▁" word markers
    dropped (WordPiece's "##" kept: it says the piece continues a word)."""
    token = tokenizer.id_to_token(int(token_id))
    if token is None:
        return f"<{int(token_id)}>"
    kind = getattr(tokenizer, "kind", "wordpiece")
    if kind == "bpe":
        token = token.replace("\u0120", " ").replace("\u010a", "\\n").strip() or token
    elif kind == "unigram":
        token = token.replace("\u2581", " ").strip() or token
    return token


def find_encoder(model: nn.Module) -> Encoder:
    """The Encoder of a model: the model itself, or the `.encoder` every bertzoo objective and task model
    has (MaskedLM, CausalLM, ELECTRA's discriminator, TaskModel). Anything else has no attention outputs."""
    if isinstance(model, Encoder):
        return model
    inner = getattr(model, "encoder", None)
    if isinstance(inner, Encoder):
        return inner
    raise ConfigError(
        f"a {type(model).__name__} has no attention outputs bertzoo can read; pass a bertzoo Encoder or a model "
        "holding one as .encoder (a task model, MaskedLM, CausalLM, ELECTRA)"
    )


def _checked_text(text: str, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"the {what} is empty; pass some text to look at")
    return text


def _check_length(ids: list[int], encoder: Encoder, what: str) -> None:
    limit = encoder.embeddings.max_position  # effectively unlimited without a position table (T5)
    if len(ids) > limit:
        raise DataError(
            f"the {what} is {len(ids)} tokens long with its special tokens; this model accepts at most {limit}; "
            "shorten it"
        )


def _stacked(attentions: tuple[torch.Tensor, ...] | None, model: nn.Module) -> np.ndarray:
    """(layers, heads, queries, keys) of the first (only) row, from one tensor per layer."""
    if not attentions or any(a is None for a in attentions):
        raise ConfigError(f"this {type(model).__name__} returned no attention probabilities; it has no attention view")
    return torch.stack([a[0].float() for a in attentions]).cpu().numpy()


def _in_eval_mode(module: nn.Module, run: Callable[[], Any]) -> Any:
    """`run()` with `module` in eval mode (no dropout on the weights) and without autograd; the caller's
    mode is restored."""
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode():
            return run()
    finally:
        module.train(was_training)


def _refuse_order(model: nn.Module, order: list[int] | None) -> None:
    if order is not None:
        raise ConfigError(
            f"a factorisation order (--order) is for XLNet's query stream; this {type(model).__name__} has none: "
            "drop --order"
        )


def _encoder_groups(
    model: nn.Module, tokenizer, text: str, pair: str | None, target: str | None, order: list[int] | None
) -> list[AttentionGroup] | None:
    """One group for an encoder: "self-attention", bidirectional, or causal for a decoder-only model (GPT).
    The input is what the model reads in fine-tuning: [CLS] text [SEP] (pair [SEP])."""
    encoder = find_encoder(model)
    if target is not None:
        raise ConfigError(
            f"a target text (--target) is for encoder-decoder models (T5); this {type(model).__name__} reads one "
            "sequence: drop --target (a second segment is --pair)"
        )
    _refuse_order(model, order)
    encoded = tokenizer.encode(text, pair)
    ids = list(encoded.ids)
    _check_length(ids, encoder, "text")
    device = next(encoder.parameters()).device
    input_ids = torch.tensor([ids], device=device)
    type_ids = None
    if encoder.config.type_vocab_size > 1:
        type_ids = torch.tensor([encoded.type_ids], device=device)
    out = _in_eval_mode(
        encoder, lambda: encoder(input_ids, token_type_ids=type_ids, output_attentions=True, pool=False)
    )
    weights = _stacked(out.attentions, model)  # (layers, heads, seq, seq)
    tokens = [display_token(tokenizer, i) for i in ids]
    kind = "causal" if encoder.config.causal else "bidirectional"
    return [AttentionGroup("self-attention", kind, tokens, tokens, weights)]


def find_encoder_decoder(model: nn.Module) -> EncoderDecoder | None:
    """The bertzoo `EncoderDecoder` of a model: the model itself (T5's `EncoderDecoderLM`), or one it holds
    as a submodule or a plain attribute (a fine-tuned seq2seq task model keeps its LM outside its module
    tree, beside the LM's own modules); None for a model without a decoder. Any other model with a
    `.decoder` module is refused: showing its encoder alone would hide half of it."""
    if isinstance(model, EncoderDecoder):
        return model
    if not isinstance(model, nn.Module):
        return None
    for held in (*model.children(), *vars(model).values()):
        if isinstance(held, EncoderDecoder):
            return held
    if isinstance(getattr(model, "decoder", None), nn.Module):
        raise ConfigError(
            f"a {type(model).__name__} has a decoder that is not a bertzoo EncoderDecoder; bertzoo reads the "
            "attention of its own encoder-decoders (T5) only: look at its encoder instead (pass model.encoder)"
        )
    return None


def _end_token_ids(config: ModelConfig, tokenizer) -> list[int]:
    """The token a T5 source and target end with in training (`end_token_id`); MASS pretraining appends
    nothing."""
    return [end_token_id(tokenizer)] if config.variant == "t5" else []


def _encoder_decoder_groups(
    model: nn.Module, tokenizer, text: str, pair: str | None, target: str | None, order: list[int] | None
) -> list[AttentionGroup] | None:
    """Three groups for an encoder-decoder (T5): `encoder` over the source (`text` and the end token),
    `decoder` (causal) over the decoder's input and `cross` from the decoder's input to the source. The
    decoder's input is what teacher forcing feeds it: the target (`target` and the end token) shifted
    right after `config.decoder_start_token_id`, i.e. the start token then the target's text tokens;
    each of its rows is the position that predicts the next target token."""
    encdec = find_encoder_decoder(model)
    if encdec is None:
        return None
    name = type(model).__name__
    _refuse_order(model, order)
    if pair is not None:
        raise ConfigError(
            f"an encoder-decoder ({name}) reads one source text: give the decoder's text as the target "
            "(--target), not as a pair (--pair)"
        )
    if target is None:
        raise ConfigError(
            f"an encoder-decoder ({name}) needs a target text for its decoder: add --target TEXT (target= in Python)"
        )
    config = encdec.config
    if config.decoder_start_token_id is None:
        raise ConfigError(f"this {name} has no decoder_start_token_id in its config; its decoder cannot start")
    end = _end_token_ids(encdec.config, tokenizer)
    source = [*tokenizer.encode_batch([text])[0], *end]
    # shift_right(target + end): the start token, then every target token but the last (the end token).
    decoder_ids = [config.decoder_start_token_id, *tokenizer.encode_batch([target])[0]]
    _check_length(source, encdec.encoder, "text")
    _check_length(decoder_ids, encdec.encoder, "target text")
    device = next(encdec.parameters()).device
    out = _in_eval_mode(
        encdec,
        lambda: EncoderDecoder.seq2seq(  # the bare encoder-decoder: no LM head to run
            encdec,
            torch.tensor([source], device=device),
            decoder_input_ids=torch.tensor([decoder_ids], device=device),
            output_attentions=True,
        ),
    )
    src = [display_token(tokenizer, i) for i in source]
    tgt = [START_LABEL] + [display_token(tokenizer, i) for i in decoder_ids[1:]]
    return [
        AttentionGroup("encoder", "bidirectional", src, src, _stacked(out.encoder_attentions, model)),
        AttentionGroup("decoder", "causal", tgt, tgt, _stacked(out.decoder_attentions, model)),
        AttentionGroup("cross", "cross", tgt, src, _stacked(out.cross_attentions, model)),
    ]


def find_xlnet(model: nn.Module) -> XLNet | None:
    """The bertzoo XLNet backbone of a model: the model itself, or the `.encoder` its pretraining objective
    (PermutationLM) and task models hold; None for any other model."""
    if isinstance(model, XLNet):
        return model
    inner = getattr(model, "encoder", None)
    return inner if isinstance(inner, XLNet) else None


def _checked_order(order: Any, tokens: list[str]) -> list[int]:
    """`order` as a list of positions, checked to be a permutation of 0..len(tokens)-1."""
    n = len(tokens)
    try:
        positions = [int(p) for p in order]
        ok = all(not isinstance(p, bool) and int(p) == p for p in order) and sorted(positions) == list(range(n))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        shown = " ".join(f"{i}:{t}" for i, t in enumerate(tokens))
        raise DataError(
            f"the factorisation order must list every position 0..{n - 1} once (the input is {n} tokens: {shown}); "
            f"got {order!r:.200}"
        )
    return positions


def order_mask(order: list[int]) -> torch.Tensor:
    """(seq, seq) float perm_mask of a factorisation order (`order[r]` is the position predicted r-th):
    1 where query i may not see key j, i.e. where j does not come before i in the order (itself included)."""
    rank = torch.empty(len(order), dtype=torch.long)
    rank[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return (rank[None, :] >= rank[:, None]).float()


def _xlnet_groups(
    model: nn.Module, tokenizer, text: str, pair: str | None, target: str | None, order: list[int] | None
) -> list[AttentionGroup] | None:
    """XLNet's two streams on what its tasks read (`tokenizer.encode(text, pair)`, with segment ids):
    `content stream`, a run without a factorisation order (every token sees every token, or the tokens up to
    it when the model is causal), and `query stream`, a second run with `perm_mask` stating `order` (default
    0..seq-1, left to right) and `target_mapping` predicting every position, rows in position order. Rows
    of the query stream that can see no key are set to zero (the model spreads them evenly over all keys)."""
    xlnet = find_xlnet(model)
    if xlnet is None:
        return None
    name = type(model).__name__
    if target is not None:
        raise ConfigError(
            f"a target text (--target) is for encoder-decoder models (T5); this {name} (XLNet) reads one sequence: "
            "drop --target (a second segment is --pair)"
        )
    encoded = tokenizer.encode(text, pair)
    ids = list(encoded.ids)
    tokens = [display_token(tokenizer, i) for i in ids]
    natural = order is None
    order = list(range(len(ids))) if natural else _checked_order(order, tokens)
    config = xlnet.config
    device = next(xlnet.parameters()).device
    input_ids = torch.tensor([ids], device=device)
    type_ids = torch.tensor([encoded.type_ids], device=device)
    perm_mask = order_mask(order).to(device)[None]  # (1, seq, seq)
    target_mapping = torch.eye(len(ids), device=device)[None]  # (1, seq, seq): predict every position

    def run() -> tuple[Any, Any]:
        content = xlnet(input_ids, token_type_ids=type_ids, output_attentions=True)
        query = xlnet(
            input_ids,
            token_type_ids=type_ids,
            perm_mask=perm_mask,
            target_mapping=target_mapping,
            output_attentions=True,
        )
        return content, query

    content, query = _in_eval_mode(xlnet, run)
    content_weights = _stacked(content.attentions, model)  # (layers, heads, seq, seq)
    query_weights = _stacked(query.query_attentions, model)  # (layers, heads, seq, seq): row = predicted position
    # The keys each query may see, by the model's own rule (the order, and the causal one for attn_type "uni").
    _, visible = stream_masks(
        1, len(ids), 0, device, perm_mask=perm_mask, causal=config.causal, same_length=config.same_length
    )
    blind = ~visible[0, 0].any(-1).cpu().numpy()  # (seq,) True: the query sees no key
    query_weights[:, :, blind, :] = 0.0
    how = (
        "left to right (the natural order)"
        if natural
        else "in the factorisation order " + " ".join(str(p) for p in order) + " (positions from 0)"
    )
    note = (
        f"Row i is position i predicted {how}, every token predicted: its query sees only the tokens before it "
        "in that order, never its own."
    )
    if blind.any():
        who = ", ".join(f"{tokens[i]} (position {i})" for i in np.flatnonzero(blind))
        note += f" Empty rows: {who} can see no token (the model would spread its weight evenly over all keys)."
    content_kind = "causal" if config.causal else "bidirectional"
    return [
        AttentionGroup("content stream", content_kind, tokens, tokens, content_weights),
        AttentionGroup("query stream", "query-stream", tokens, tokens, query_weights, note=note),
    ]


# Tried in order; the first builder that returns groups wins (an explicit table, no registration). The
# encoder-decoder comes first: T5's model also holds an Encoder as .encoder, which the last would read.
# XLNet's backbone is not an Encoder: the encoder builder would refuse it.
BUILDERS = (_encoder_decoder_groups, _xlnet_groups, _encoder_groups)


def attention_groups(
    model: nn.Module,
    tokenizer,
    text: str,
    pair: str | None = None,
    *,
    target: str | None = None,
    order: list[int] | None = None,
) -> list[AttentionGroup]:
    """The attention groups of `model` on `text` (and `pair`, an encoder's or XLNet's second segment; an
    encoder-decoder needs `target`, the decoder's text; `order`, XLNet's factorisation order for its query
    stream: every token position once, the first predicted first; default left to right). Empty text, text
    longer than the model accepts, a missing or misplaced target or order and models without attention
    outputs are one-line BertzooErrors."""
    _checked_text(text, "text")
    if pair is not None:
        _checked_text(pair, "pair text")
    if target is not None:
        _checked_text(target, "target text")
    for build in BUILDERS:
        groups = build(model, tokenizer, text, pair, target, order)
        if groups is not None:
            return groups
    raise ConfigError(f"a {type(model).__name__} has no attention outputs bertzoo can read")


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
        _PAGE.replace("%TITLE%", html.escape(title))
        .replace("%STYLE%", _STYLE)
        .replace("%SCRIPT%", _SCRIPT)
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


# --- the page's parts (inline: the page works offline, from a file) ------------------------------------

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%STYLE%</style>
</head>
<body>
<header>
  <h1>%TITLE%</h1>
  <p id="about"></p>
</header>
<nav id="controls">
  <label>Attention <select id="group"></select></label>
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
  <span id="kind"></span>
</nav>
<p id="note"></p>
<main>
  <section id="head-view">
    <h2>Head view</h2>
    <p class="hint">Each line joins a query token (left) to a key token (right); its opacity is the attention
    weight. Hover a token to see only its lines.</p>
    <p id="status">&nbsp;</p>
    <svg id="head-svg" role="img" aria-label="head view"></svg>
  </section>
  <section id="model-view">
    <h2>Model view</h2>
    <p class="hint">Every layer (rows) and head (columns): query tokens down, key tokens across, darker =
    more attention. Click one to show it in the head view.</p>
    <div id="grid"></div>
  </section>
</main>
<script type="application/json" id="attention-data">%DATA%</script>
<script>%SCRIPT%</script>
</body>
</html>
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 18px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 8px 0 4px; }
#about { margin: 0 0 8px; color: #555; font-size: 13px; }
#controls { display: flex; gap: 16px; align-items: center; font-size: 14px; margin-bottom: 8px; flex-wrap: wrap; }
#kind { color: #555; font-size: 13px; }
#note { color: #555; font-size: 13px; margin: 0 0 8px; max-width: 900px; }
#note:empty { display: none; }
main { display: flex; gap: 32px; align-items: flex-start; flex-wrap: wrap; }
.hint { color: #666; font-size: 12px; max-width: 420px; margin: 0 0 4px; }
#status { font-size: 12px; font-family: ui-monospace, monospace; min-height: 1.2em; margin: 0 0 4px; }
#head-svg { font-family: ui-monospace, monospace; font-size: 13px; }
#head-svg text.tok { cursor: pointer; fill: #222; }
#head-svg text.tok.active { fill: #c01818; font-weight: bold; }
#head-svg text.col { fill: #777; font-size: 11px; }
#head-svg line.link { stroke-width: 2; }
#head-svg.focus line.link { display: none; }
#head-svg.focus line.link.on { display: inline; stroke-width: 3; }
#grid { display: grid; gap: 4px; align-items: center; justify-items: center; font-size: 11px; color: #555; }
#grid canvas.thumb { cursor: pointer; image-rendering: pixelated; outline: 1px solid #ccc; outline-offset: 1px; }
#grid canvas.thumb.selected { outline: 3px solid #c01818; outline-offset: 2px; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var svg = $("head-svg");
  var NS = svg.namespaceURI;
  var ROW = 22, TOP = 28, GAP = 150, THUMB = 72, CHAR = 8;
  var state = { group: data.initial.group, layer: data.initial.layer, head: data.initial.head, lines: [], thumbs: [] };

  function group() { return data.groups[state.group]; }
  function matrix() { return group().weights[state.layer][state.head]; }
  function headColour(h, n) { return "hsl(" + Math.round(360 * h / Math.max(n, 1)) + ",70%,38%)"; }
  // White (0) to dark blue (1), linear in the weight: the model view's cells.
  function ramp(a) {
    return "rgb(" + Math.round(255 - 247 * a) + "," + Math.round(255 - 207 * a) + "," + Math.round(255 - 148 * a) + ")";
  }
  function make(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    parent.appendChild(e);
    return e;
  }
  function fill(select, n, label, value) {
    select.innerHTML = "";
    for (var i = 0; i < n; i++) { select.appendChild(new Option(label + " " + i, String(i))); }
    select.value = String(value);
  }
  function width(tokens) {
    var longest = 4;
    tokens.forEach(function (t) { longest = Math.max(longest, t.length); });
    return CHAR * longest + 12;
  }

  function drawHeadView() {
    var g = group(), w = matrix();
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    svg.classList.remove("focus");
    var left = width(g.queries), right = width(g.keys);
    var x1 = left + 6, x2 = left + 6 + GAP;
    var rows = Math.max(g.queries.length, g.keys.length);
    svg.setAttribute("width", left + GAP + right + 12);
    svg.setAttribute("height", TOP + ROW * rows + 8);
    var y = function (i) { return TOP + ROW * i + ROW / 2; };
    make("text", { x: left, y: 14, "text-anchor": "end", "class": "col" }, svg).textContent = "queries";
    make("text", { x: x2 + 6, y: 14, "class": "col" }, svg).textContent = "keys";
    var links = make("g", { stroke: headColour(state.head, g.heads) }, svg);
    state.lines = [];
    for (var i = 0; i < g.queries.length; i++) {
      for (var j = 0; j < g.keys.length; j++) {
        var a = w[i][j];
        if (a < data.min_line) { continue; }
        state.lines.push(make("line", {
          x1: x1, y1: y(i), x2: x2, y2: y(j), "stroke-opacity": a, "class": "link", "data-q": i, "data-k": j
        }, links));
      }
    }
    g.queries.forEach(function (t, i) { token(t, "q", i, left, y(i) + 4, "end"); });
    g.keys.forEach(function (t, j) { token(t, "k", j, x2 + 6, y(j) + 4, "start"); });
    $("status").textContent = "\u00a0";
  }

  function token(text, side, index, x, y, anchor) {
    var t = make("text", { x: x, y: y, "text-anchor": anchor, "class": "tok " + side, "data-i": index }, svg);
    t.textContent = text;
    t.addEventListener("mouseenter", function () { focus(side, index, t); });
    t.addEventListener("mouseleave", unfocus);
  }

  function focus(side, index, element) {
    var g = group(), w = matrix();
    svg.classList.add("focus");
    element.classList.add("active");
    var attr = side === "q" ? "data-q" : "data-k";
    state.lines.forEach(function (line) { line.classList.toggle("on", line.getAttribute(attr) === String(index)); });
    var row = side === "q" ? w[index] : w.map(function (r) { return r[index]; });
    var names = side === "q" ? g.keys : g.queries;
    var order = row.map(function (a, j) { return j; }).sort(function (p, q) { return row[q] - row[p]; });
    var best = order.slice(0, 3).map(function (j) { return names[j] + " " + row[j].toFixed(3); });
    var who = side === "q" ? "query " : "key ";
    var verb = side === "q" ? " attends to: " : " is attended by: ";
    // An empty row or column (XLNet's query stream: a query that sees no token, a key no query sees).
    if (row.every(function (a) { return a === 0; })) {
      verb = side === "q" ? " attends to nothing" : " is attended by nothing";
      best = [];
    }
    $("status").textContent = who + index + " " + (side === "q" ? g.queries : g.keys)[index] + verb + best.join(", ");
  }

  function unfocus() {
    svg.classList.remove("focus");
    svg.querySelectorAll("text.active").forEach(function (t) { t.classList.remove("active"); });
    state.lines.forEach(function (line) { line.classList.remove("on"); });
    $("status").textContent = "\u00a0";
  }

  function drawModelView() {
    var g = group(), grid = $("grid");
    grid.innerHTML = "";
    grid.style.gridTemplateColumns = "auto repeat(" + g.heads + ", auto)";
    grid.appendChild(document.createElement("span"));
    for (var h = 0; h < g.heads; h++) {
      var label = document.createElement("span");
      label.textContent = "head " + h;
      grid.appendChild(label);
    }
    var cell = Math.max(1, Math.floor(THUMB / Math.max(g.queries.length, g.keys.length)));
    state.thumbs = [];
    for (var l = 0; l < g.layers; l++) {
      var name = document.createElement("span");
      name.textContent = "layer " + l;
      grid.appendChild(name);
      for (h = 0; h < g.heads; h++) { grid.appendChild(thumb(g, l, h, cell)); }
    }
    markSelected();
  }

  function thumb(g, l, h, cell) {
    var c = document.createElement("canvas");
    c.width = g.keys.length * cell;
    c.height = g.queries.length * cell;
    c.className = "thumb";
    c.title = "layer " + l + ", head " + h;
    c.setAttribute("data-layer", l);
    c.setAttribute("data-head", h);
    c.setAttribute("data-cell", cell);
    var ctx = c.getContext("2d"), w = g.weights[l][h];
    for (var i = 0; i < g.queries.length; i++) {
      for (var j = 0; j < g.keys.length; j++) {
        ctx.fillStyle = ramp(w[i][j]);
        ctx.fillRect(j * cell, i * cell, cell, cell);
      }
    }
    c.addEventListener("click", function () { select(l, h); });
    state.thumbs.push(c);
    return c;
  }

  function markSelected() {
    state.thumbs.forEach(function (c) {
      var layer = c.getAttribute("data-layer"), head = c.getAttribute("data-head");
      c.classList.toggle("selected", layer === String(state.layer) && head === String(state.head));
    });
  }

  function select(layer, head) {
    state.layer = layer;
    state.head = head;
    $("layer").value = String(layer);
    $("head").value = String(head);
    drawHeadView();
    markSelected();
  }

  function selectGroup(index) {
    state.group = index;
    var g = group();
    state.layer = Math.min(state.layer, g.layers - 1);
    state.head = Math.min(state.head, g.heads - 1);
    fill($("layer"), g.layers, "layer", state.layer);
    fill($("head"), g.heads, "head", state.head);
    var kinds = {
      bidirectional: "bidirectional: every token attends to every token",
      causal: "causal: each token attends to itself and the tokens before it",
      cross: "cross-attention: target tokens (queries) attend to source tokens (keys)",
      "query-stream": "query stream: each position is predicted from the tokens before it in the factorisation " +
        "order, never from its own token"
    };
    $("kind").textContent = g.name + " \u2014 " + (kinds[g.kind] || g.kind);
    $("note").textContent = g.note || "";
    drawModelView();
    drawHeadView();
  }

  var about = "text: \u201c" + data.text + "\u201d";
  if (data.pair !== null) { about += "  pair: \u201c" + data.pair + "\u201d"; }
  if (data.target != null) { about += "  target: \u201c" + data.target + "\u201d"; }
  $("about").textContent = about;
  var groups = $("group");
  data.groups.forEach(function (g, i) { groups.appendChild(new Option(g.name, String(i))); });
  groups.value = String(state.group);
  groups.disabled = data.groups.length < 2;
  groups.addEventListener("change", function () { selectGroup(Number(groups.value)); });
  $("layer").addEventListener("change", function () { select(Number($("layer").value), state.head); });
  $("head").addEventListener("change", function () { select(state.layer, Number($("head").value)); });
  selectGroup(state.group);
  document.body.setAttribute("data-ready", "1");
})();
"""
