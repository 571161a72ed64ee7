"""From a model to attention groups: what `bertzoo attention` draws (`bertzoo.visualize.page`).

The data model is a list of named **attention groups**. A group is one kind of attention in a model:
its query tokens, its key tokens, and a (layers, heads, queries, keys) array of probabilities (each
row sums to 1, except a row that can see no key at all: it is all zeros and the group's `note` says so).
An encoder has one group ("self-attention", bidirectional), a decoder-only model (GPT) one causal group
(lower-triangular); the page and the PNGs draw any list of groups, so an encoder-decoder has "encoder",
"decoder" and "cross" groups and XLNet its two streams without touching the drawing code.

How a model becomes groups: its family names one of the `VIEWS` (`Family.attention`), each a function of
`(model, tokenizer, text, pair, target, order, ends)`. The encoder view reads `[CLS] text [SEP] (pair [SEP])`
and gives one group. The encoder-decoder view (T5, MASS) reads `text` as the source and `target` on the
decoder side (shifted right after its start token) and gives three: `encoder` (bidirectional, source x
source), `decoder` (causal, target x target) and `cross` (target tokens as queries, source tokens as keys);
a family whose data recipe ends each sequence with the end token (`Family.ends_sequences`: T5) shows it too.
The two-stream view (XLNet) reads what its tasks read (the tokenizer's `encode(text, pair)`, segment ids
included) and gives two: `content stream` (one run without a factorisation order: bidirectional, or causal
for attn_type "uni") and `query stream` (kind "query-stream": a second run where every position is
predicted in the factorisation order `order`, by default left to right, so each query sees only the tokens
before it in that order and never itself; the content stream of that run is restricted to the order too, as
in pretraining, so nothing leaks through the layers). A query that sees no token (the first in the order)
has an empty row: the model would spread it evenly over every key, which means nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
from bertzoo.variants import get_variant
from bertzoo.variants.family import AttentionView

__all__ = ["VIEWS", "AttentionGroup", "attention_groups", "find_encoder", "find_encoder_decoder", "find_xlnet"]

# "query-stream": XLNet's query stream, whose queries see the tokens before them in a factorisation order and
# never themselves (no diagonal, and not lower-triangular unless the order is left to right).
KINDS = ("bidirectional", "causal", "cross", "query-stream")
# Weights are written to the page with this many decimals (the JSON stays small; 5e-5 is invisible).
DECIMALS = 4
# How the decoder's first input (its start token, T5's pad id) is labelled: the pad token's name would
# read as padding.
START_LABEL = "<start>"


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


def encoder_view(
    model: nn.Module, tokenizer, text: str, pair: str | None, target: str | None, order: list[int] | None, ends: bool
) -> list[AttentionGroup]:
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


def encoder_decoder_view(
    model: nn.Module, tokenizer, text: str, pair: str | None, target: str | None, order: list[int] | None, ends: bool
) -> list[AttentionGroup]:
    """Three groups for an encoder-decoder (T5): `encoder` over the source (`text` and the end token),
    `decoder` (causal) over the decoder's input and `cross` from the decoder's input to the source. The
    decoder's input is what teacher forcing feeds it: the target (`target` and the end token) shifted
    right after `config.decoder_start_token_id`, i.e. the start token then the target's text tokens;
    each of its rows is the position that predicts the next target token."""
    encdec = find_encoder_decoder(model)
    if encdec is None:  # an encoder-decoder's encoder alone (T5EncoderModel)
        return encoder_view(model, tokenizer, text, pair, target, order, ends)
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
    end = [end_token_id(tokenizer)] if ends else []  # T5 ends sources and targets with it; MASS adds nothing
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


def two_stream_view(
    model: nn.Module, tokenizer, text: str, pair: str | None, target: str | None, order: list[int] | None, ends: bool
) -> list[AttentionGroup]:
    """XLNet's two streams on what its tasks read (`tokenizer.encode(text, pair)`, with segment ids):
    `content stream`, a run without a factorisation order (every token sees every token, or the tokens up to
    it when the model is causal), and `query stream`, a second run with `perm_mask` stating `order` (default
    0..seq-1, left to right) and `target_mapping` predicting every position, rows in position order. Rows
    of the query stream that can see no key are set to zero (the model spreads them evenly over all keys)."""
    xlnet = find_xlnet(model)
    if xlnet is None:
        raise ConfigError(f"a {type(model).__name__} holds no XLNet backbone; its two streams cannot be read")
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


# The views a family can name (`Family.attention`), one per kind of model.
VIEWS: dict[AttentionView, Callable[..., list[AttentionGroup]]] = {
    "encoder": encoder_view,
    "encoder-decoder": encoder_decoder_view,
    "two-stream": two_stream_view,
}


def _config_of(model: nn.Module) -> ModelConfig:
    """The config of the model (or of the backbone a task or pretraining model holds), which names its family."""
    for inner in (model, getattr(model, "encoder", None), find_encoder_decoder(model)):
        config = getattr(inner, "config", None)
        if isinstance(config, ModelConfig):
            return config
    raise ConfigError(f"a {type(model).__name__} has no attention outputs bertzoo can read")


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
    family = get_variant(_config_of(model).variant)
    if family.attention is None:
        raise ConfigError(
            f"a {family.title} model ({type(model).__name__}) has no attention outputs bertzoo can read: it has no "
            "attention layers to draw"
        )
    return VIEWS[family.attention](model, tokenizer, text, pair, target, order, family.ends_sequences)
