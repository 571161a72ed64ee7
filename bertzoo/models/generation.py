"""One incremental decoder for every generative model: greedy, sampling and beam search over a key/value
cache, with stop tokens.

The search (`generate`) knows nothing about architectures. It talks to a *decoding*: an object that
encodes the prompt (`start`), feeds one chosen token per row (`step`), both returning next-token logits,
and reorders its state for beam search (`reorder`). Two decodings live here:

* `CausalDecoding`: a left-to-right model (GPT) over its own prompt;
* `MaskPredictDecoding`: a bidirectional encoder decoding with UniLM's sequence-to-sequence mask: the
  source attends to itself in both directions, each target token to the source and the target to its
  left, and the next token is read from a [MASK] placed after the last one.

* `EncoderDecoderDecoding`: an encoder-decoder (T5, MASS) encodes the source once and feeds the decoder
  one token per step, from its start token, with a self-attention cache and the source's cross-attention
  keys and values projected once.

Prompts may be padded on either side: rows are moved to the right (left padding) and positions count real
tokens only, so a padded row decodes exactly as it would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from bertzoo.config import GenerationConfig
from bertzoo.errors import ConfigError
from bertzoo.nn.kv_cache import KVCache

__all__ = [
    "CausalDecoding",
    "Decoding",
    "EncoderDecoderDecoding",
    "GenerationOutput",
    "Generates",
    "MaskPredictDecoding",
    "generate",
    "left_align",
]


@dataclass
class GenerationOutput:
    """What `generate` returns: the new tokens only (not the prompt), one row per prompt."""

    sequences: torch.Tensor  # (batch, steps) ids; pad_token_id after a row's stop token
    lengths: torch.Tensor  # (batch,) tokens generated per row, its stop token included
    scores: torch.Tensor | None = None  # (batch,) beam search: the length-normalised log-probability


class Decoding(Protocol):
    """The model side of decoding. `start` and `step` return next-token logits (batch, vocab)."""

    encoder: torch.nn.Module  # the module put in eval mode while decoding
    max_positions: int  # the longest prompt + generated sequence the model can hold
    # Optional `separate_target = True` (an encoder-decoder): the prompt (source) and the generated tokens
    # have positions of their own, each bounded by max_positions.

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor: ...

    def step(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def reorder(self, index: torch.Tensor) -> None: ...


def left_align(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Move every row's real tokens to the right end (left padding), keeping their order: generation
    appends after the last real token of every row at once."""
    if attention_mask is None:
        return input_ids, torch.ones_like(input_ids, dtype=torch.bool)
    mask = attention_mask.bool()
    # A stable sort on "is real" puts the padding first and the real tokens after it, in order.
    order = torch.argsort(mask.to(torch.int8), dim=1, stable=True)
    return input_ids.gather(1, order), mask.gather(1, order)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """(batch, seq) position ids counting real tokens only (left padding gets 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


class CausalDecoding:
    """Decoding of a causal encoder (`config.causal`) with a next-token head, e.g. GPT's tied LM head."""

    def __init__(self, encoder: torch.nn.Module, head: Callable[[torch.Tensor], torch.Tensor]) -> None:
        if not encoder.config.causal:
            raise ConfigError("causal decoding needs a left-to-right model (config.causal); this one is bidirectional")
        self.encoder = encoder
        self.head = head
        self.max_positions = encoder.embeddings.max_position
        self.offset = encoder.config.position_offset

    def _run(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # Without padding every key is real: no mask beyond the causal one (SDPA's cheapest path).
        out = self.encoder(
            ids, self.keys if self.padded else None, position_ids=positions + self.offset, cache=self.cache, pool=False
        )
        return self.head(out.last_hidden_state[:, -1])  # (batch, vocab)

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
        self.cache = KVCache(self.encoder.config.num_layers, capacity=input_ids.size(1) + new_tokens)
        self.keys = attention_mask  # (batch, past) True at real keys
        self.padded = not bool(attention_mask.all())
        positions = _positions(attention_mask)
        self.next_position = positions[:, -1] + 1  # (batch,)
        return self._run(input_ids, positions)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.padded:
            self.keys = torch.cat([self.keys, self.keys.new_ones(len(tokens), 1)], dim=1)
        positions = self.next_position[:, None]
        self.next_position = self.next_position + 1
        return self._run(tokens[:, None], positions)

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder(index)
        self.keys = self.keys.index_select(0, index)
        self.next_position = self.next_position.index_select(0, index)


class MaskPredictDecoding:
    """UniLM's sequence-to-sequence decoding with a bidirectional encoder and a masked-LM head.

    The prompt is the source (`[CLS] source [SEP]`), encoded once with full attention among its real
    tokens. Every step feeds the token just chosen and a [MASK] after it, both with the target segment
    id: the token's keys join the cache, the [MASK] sees the source, the target so far and itself, its
    prediction is the next token, and it is dropped from the cache. That is the mask UniLM fine-tunes
    with, so decoding sees what training showed it.
    """

    def __init__(
        self,
        encoder: torch.nn.Module,
        head: Callable[[torch.Tensor], torch.Tensor],
        mask_token_id: int,
        target_type_id: int = 1,
        source_type_id: int = 0,
    ) -> None:
        if encoder.config.causal:
            raise ConfigError("mask-predict decoding needs a bidirectional encoder; this model is causal")
        self.encoder = encoder
        self.head = head
        self.mask_id = mask_token_id
        self.type_id = target_type_id if encoder.config.type_vocab_size > target_type_id else 0
        self.source_type_id = source_type_id
        # The [MASK] after the last target token takes one more position.
        self.max_positions = encoder.embeddings.max_position - 1
        self.offset = encoder.config.position_offset

    def _run(self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.encoder(ids, mask, types, positions + self.offset, cache=self.cache, pool=False)
        return out.last_hidden_state  # (batch, new, hidden)

    def _predict(self, token: torch.Tensor | None) -> torch.Tensor:
        """Feed [token, MASK] (or [MASK] alone first), read the [MASK], forget its keys. `self.keys` marks
        the real cached keys; the new positions are all real, and only the [MASK] sees the [MASK]."""
        b = len(self.next_position)
        masks = torch.full((b, 1), self.mask_id, dtype=torch.long, device=self.keys.device)
        ids = masks if token is None else torch.cat([token[:, None], masks], dim=1)  # (batch, new)
        n = ids.size(1)
        keys = torch.cat([self.keys, self.keys.new_ones(b, n)], dim=1)  # (batch, cached + new)
        visible = keys[:, None, None, :].expand(b, 1, n, keys.size(1)).clone()  # (batch, 1, new, keys)
        visible[:, :, : n - 1, -1] = False  # the chosen token does not see the [MASK] after it
        positions = self.next_position[:, None] + torch.arange(n, device=ids.device)
        hidden = self._run(ids, torch.full_like(ids, self.type_id), positions, visible)
        self.cache.truncate(self.cache.length - 1)  # the [MASK]'s keys never serve a later query
        if token is not None:
            self.keys = keys[:, :-1]  # the chosen token's keys stay
            self.next_position = self.next_position + 1
        return self.head(hidden[:, -1])

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
        self.cache = KVCache(self.encoder.config.num_layers, capacity=input_ids.size(1) + new_tokens + 1)
        self.keys = attention_mask
        positions = _positions(attention_mask)
        self._run(input_ids, torch.full_like(input_ids, self.source_type_id), positions, attention_mask)
        self.next_position = positions[:, -1] + 1
        return self._predict(None)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._predict(tokens)

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder(index)
        self.keys = self.keys.index_select(0, index)
        self.next_position = self.next_position.index_select(0, index)


class EncoderDecoderDecoding:
    """Decoding of an encoder-decoder (`bertzoo.models.encdec.EncoderDecoder`) with a next-token head over the
    decoder's states (T5's tied LM head, with its output scaling). The prompt is the source: `start`
    encodes it once (positions count real tokens, for models with a position table) and feeds the
    decoder start token; every step feeds the token just chosen. The target has its own positions, so
    `max_positions` bounds the source and the target alike (unbounded for T5's relative positions)."""

    def __init__(self, model: torch.nn.Module, head: Callable[[torch.Tensor], torch.Tensor]) -> None:
        config = model.config
        if not config.is_encoder_decoder or config.decoder_start_token_id is None:
            raise ConfigError("encoder-decoder decoding needs a model with a decoder and a decoder_start_token_id")
        self.encoder = model  # the module put in eval mode
        self.model = model
        self.head = head
        self.max_positions = model.encoder.embeddings.max_position
        self.offset = config.position_offset
        self.separate_target = True  # the source and the target each count positions from the start

    def _run(self, tokens: torch.Tensor) -> torch.Tensor:
        out = self.model.decode(tokens[:, None], self.context, self.source_mask, cache=self.cache)
        self.context = None  # its cross-attention keys and values are in the cache now
        return self.head(out.last_hidden_state[:, -1])  # (batch, vocab)

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
        config = self.model.config
        positions = _positions(attention_mask) + self.offset
        self.context = self.model.encode(input_ids, attention_mask, positions).last_hidden_state
        self.source_mask = attention_mask  # (batch, source) True at real tokens
        self.cache = KVCache(config.num_decoder_layers, capacity=new_tokens)
        first = torch.full((input_ids.size(0),), config.decoder_start_token_id, device=input_ids.device)
        return self._run(first)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._run(tokens)

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder(index)
        self.source_mask = self.source_mask.index_select(0, index)


def _fit_prompt(
    input_ids: torch.Tensor, mask: torch.Tensor, room: int, config: GenerationConfig, *, separate: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check (or, with truncate_prompt, cut from the left) left-aligned prompts against the room the
    position table leaves after max_new_tokens (`separate`: an encoder-decoder's source, whose room is
    the whole table)."""
    longest = int(mask.sum(1).max())
    if longest <= room:
        return input_ids[:, input_ids.size(1) - longest :], mask[:, mask.size(1) - longest :]
    if room < 1:
        raise ConfigError(
            f"max_new_tokens={config.max_new_tokens} leaves no room for a prompt in the model's position table; "
            "lower max_new_tokens"
        )
    if not config.truncate_prompt:
        if separate:
            raise ConfigError(
                f"a source of {longest} tokens exceeds the encoder's {room} positions; shorten the source, or set "
                "truncate_prompt to keep its last tokens"
            )
        raise ConfigError(
            f"a prompt of {longest} tokens plus max_new_tokens={config.max_new_tokens} exceeds the model's "
            f"{room + config.max_new_tokens} positions; shorten the prompt, lower max_new_tokens, or set "
            "truncate_prompt to keep its last tokens"
        )
    return input_ids[:, -room:], mask[:, -room:]


def _filter(logits: torch.Tensor, config: GenerationConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus) on (batch, vocab) logits: filtered ones become -inf."""
    logits = logits / config.temperature
    if config.top_k and config.top_k < logits.size(-1):
        kth = logits.topk(config.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the tokens ranked above it already reach top_p (the top one always stays).
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= config.top_p
        logits = logits.masked_fill(drop_sorted.scatter(1, order, drop_sorted), float("-inf"))
    return logits


def _hold_back(logits: torch.Tensor, eos: torch.Tensor, step: int, config: GenerationConfig) -> torch.Tensor:
    """Forbid the stop tokens before min_new_tokens."""
    if step < config.min_new_tokens:
        logits = logits.index_fill(-1, eos, float("-inf"))
    return logits


def _greedy_or_sample(decoding: Decoding, logits: torch.Tensor, config: GenerationConfig) -> GenerationOutput:
    b = logits.size(0)
    device = logits.device
    eos = torch.tensor(config.eos_token_ids, dtype=torch.long, device=device)
    generator = None
    if config.do_sample:
        generator = torch.Generator(device=device).manual_seed(config.seed)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    lengths = torch.full((b,), config.max_new_tokens, dtype=torch.long, device=device)
    chosen = []
    for t in range(config.max_new_tokens):
        logits = _hold_back(logits.float(), eos, t, config)
        if config.do_sample:
            probs = _filter(logits, config).softmax(-1)
            token = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            token = logits.argmax(-1)
        token = token.masked_fill(done, config.pad_token_id)
        chosen.append(token)
        if len(eos):
            stops = torch.isin(token, eos) & ~done
            lengths = torch.where(stops, t + 1, lengths)
            done = done | stops
            # One host sync per step, only when stopping is possible at all.
            if bool(done.all()):
                break
        if t + 1 < config.max_new_tokens:
            logits = decoding.step(token)
    return GenerationOutput(torch.stack(chosen, dim=1), lengths)


def _beam_search(decoding: Decoding, logits: torch.Tensor, config: GenerationConfig) -> GenerationOutput:
    """Beam search with length normalisation: a finished hypothesis scores sum(log p) / length **
    length_penalty (length = its tokens, the stop token included). A row stops once it holds num_beams
    finished hypotheses and its best live beam, even kept at its current length, cannot beat the worst of
    them (transformers' default `early_stopping=False` rule)."""
    b, vocab = logits.shape
    k = config.num_beams
    device = logits.device
    eos = set(config.eos_token_ids)
    eos_t = torch.tensor(config.eos_token_ids, dtype=torch.long, device=device)
    decoding.reorder(torch.arange(b, device=device).repeat_interleave(k))
    logp = logits.float().log_softmax(-1).repeat_interleave(k, dim=0)  # (batch * k, vocab)
    beam_scores = torch.zeros(b, k, device=device)
    beam_scores[:, 1:] = float("-inf")  # at step 0 the k beams are one prompt: expand the first only
    history = torch.empty(b * k, 0, dtype=torch.long, device=device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    row_done = [False] * b
    penalty = config.length_penalty

    def add(row: int, score: float, tokens: list[int]) -> None:
        hyps = finished[row]
        hyps.append((score / len(tokens) ** penalty, tokens))
        hyps.sort(key=lambda h: -h[0])
        del hyps[k:]

    for t in range(config.max_new_tokens):
        if len(eos_t):
            logp = _hold_back(logp, eos_t, t, config)
        cand = (beam_scores.view(-1, 1) + logp).view(b, k * vocab)
        top_scores, top_idx = cand.topk(2 * k, dim=-1)  # (batch, 2k): enough to keep k live after stops
        src_beam, tok = top_idx // vocab, top_idx % vocab
        next_scores = torch.full((b, k), float("-inf"), device=device)
        next_src = torch.zeros(b, k, dtype=torch.long, device=device)
        next_tok = torch.full((b, k), config.pad_token_id, dtype=torch.long, device=device)
        scores_l, src_l, tok_l = top_scores.tolist(), src_beam.tolist(), tok.tolist()
        hist_l = history.tolist()
        for row in range(b):
            if row_done[row]:
                continue
            kept = 0
            for rank in range(2 * k):
                score, s, w = scores_l[row][rank], src_l[row][rank], tok_l[row][rank]
                if score == float("-inf"):
                    break
                if w in eos:
                    if rank < k:  # a stop among the k best is a finished hypothesis
                        add(row, score, hist_l[row * k + s] + [w])
                    continue
                next_scores[row, kept], next_src[row, kept], next_tok[row, kept] = score, s, w
                kept += 1
                if kept == k:
                    break
            hyps = finished[row]
            best_live = float(next_scores[row, 0])
            if len(hyps) == k and hyps[-1][0] >= best_live / (t + 1) ** penalty:
                row_done[row] = True
        last = t + 1 == config.max_new_tokens
        if all(row_done) or last:
            if last:
                for row in range(b):
                    if not row_done[row]:
                        for j in range(k):
                            if next_scores[row, j] > float("-inf"):
                                src = row * k + int(next_src[row, j])
                                add(row, float(next_scores[row, j]), hist_l[src] + [int(next_tok[row, j])])
            break
        index = (torch.arange(b, device=device)[:, None] * k + next_src).view(-1)
        history = torch.cat([history.index_select(0, index), next_tok.view(-1, 1)], dim=1)
        beam_scores = next_scores
        decoding.reorder(index)
        logp = decoding.step(next_tok.view(-1)).float().log_softmax(-1)
    best = [max(hyps, key=lambda h: h[0]) if hyps else (float("-inf"), []) for hyps in finished]
    width = max(1, max(len(tokens) for _, tokens in best))
    sequences = torch.full((b, width), config.pad_token_id, dtype=torch.long, device=device)
    for row, (_, tokens) in enumerate(best):
        sequences[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long, device=device)
    lengths = torch.tensor([len(tokens) for _, tokens in best], dtype=torch.long, device=device)
    scores = torch.tensor([score for score, _ in best], device=device)
    return GenerationOutput(sequences, lengths, scores)


class Generates:
    """`model.generate(...)` for a module that says how it decodes (`decoding()`): one method for every
    generative model. Returns the new tokens only."""

    def decoding(self) -> Decoding:
        raise NotImplementedError

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        config: GenerationConfig | None = None,
        **overrides: Any,
    ) -> GenerationOutput:
        """Continue the prompts (`generate`): greedy unless the config or keywords say otherwise."""
        return generate(self.decoding(), input_ids, attention_mask, config, **overrides)


@torch.inference_mode()
def generate(
    decoding: Decoding,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    config: GenerationConfig | None = None,
    **overrides: Any,
) -> GenerationOutput:
    """Continue each prompt row of `input_ids` (batch, seq) with up to `max_new_tokens` tokens.

    `config` fields may be overridden by keyword (`generate(d, ids, max_new_tokens=20)`). The model runs
    in eval mode and is put back as it was."""
    config = replace(config or GenerationConfig(), **overrides) if overrides else (config or GenerationConfig())
    if input_ids.dim() != 2 or input_ids.size(1) == 0:
        raise ConfigError(f"prompts must be a (batch, seq) tensor with seq >= 1, got shape {tuple(input_ids.shape)}")
    ids, mask = left_align(input_ids, attention_mask)
    if not bool(mask.any(1).all()):
        raise ConfigError("a prompt has no real tokens (its attention_mask is all zero); give every row a token")
    separate = bool(getattr(decoding, "separate_target", False))
    if separate:
        # The decoder holds its start token and all generated tokens but the last, which is not fed back.
        if config.max_new_tokens > decoding.max_positions:
            raise ConfigError(
                f"max_new_tokens={config.max_new_tokens} exceeds the decoder's {decoding.max_positions} positions; "
                "lower max_new_tokens"
            )
        room = decoding.max_positions
    else:
        room = decoding.max_positions - config.max_new_tokens
    ids, mask = _fit_prompt(ids, mask, room, config, separate=separate)
    module = decoding.encoder
    was_training = module.training
    module.eval()
    try:
        logits = decoding.start(ids, mask, config.max_new_tokens)
        if config.num_beams > 1:
            return _beam_search(decoding, logits, config)
        return _greedy_or_sample(decoding, logits, config)
    finally:
        module.train(was_training)
