"""Transformer-XL (Dai et al. 2019): a causal stack of relative-attention layers with segment-level recurrence.

Each layer attends over [memory; current segment], where its memory is what that layer read as input for the
previous segment(s), kept to the last `mem_len` positions and detached, so gradients stay inside a segment while
the context reaches back n_layer x mem_len positions. The layout is the paper's post-norm one:
x + attention -> LayerNorm, then x + FFN(ReLU) -> LayerNorm. Word embeddings are scaled by sqrt(d_model) and
the LM head is a plain softmax tied to them (the adaptive softmax and embeddings of the WikiText-103 model are
left out, as is `same_length`, which only changes evaluation of very long spans).

Semantics follow transformers' TransfoXLModel (mems hold layer inputs; memory positions are not queries).
The sizes are a `ModelConfig` (variant "transfo-xl", `bertzoo.variants.transfo_xl`): hidden_size is d_model,
attention_head_size d_head, intermediate_size d_inner, mem_len the memory kept per layer (0: none),
clamp_len the longest distinct distance (0: no clamping), attention_dropout the paper's dropatt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.config import ModelConfig
from bertzoo.errors import ConfigError
from bertzoo.nn.ffn import FeedForward
from bertzoo.nn.masks import causal_mask
from bertzoo.nn.relative_attention import RelativeSelfAttention, relative_distances, relative_sinusoids

__all__ = ["TransfoXL", "TransfoXLConfig", "TransfoXLLayer", "TransfoXLOutput", "layout_problems", "stream_nll"]


@dataclass
class TransfoXLConfig(ModelConfig):
    """`ModelConfig` plus segment-level recurrence over relative attention (Transformer-XL; XLNet builds on it)."""

    # Positions of each layer's input kept as memory for the next call with use_mems (0 = all of them,
    # transformers' rule for mem_len None or 0), of which only the first reuse_len of a segment (0 = all).
    mem_len: int = 0
    reuse_len: int = 0
    clamp_len: int = 0  # relative distances beyond +-clamp_len share its sinusoid (0 = no clamping)
    same_length: bool = False  # causal only: every query sees the same number of keys

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("mem_len", "reuse_len", "clamp_len"):
            if getattr(self, name) < 0:
                raise ConfigError(f"model.{name} must be >= 0 (0 = off), got {getattr(self, name)}")


def layout_problems(config: ModelConfig) -> list[str]:
    """What a Transformer-XL cannot be, as phrases (empty: a valid layout). The model is causal, post-norm (or
    the original code's pre-norm), with relative positions only, a word table as wide as the model tied to the
    output, no segments or pooler."""
    c = config
    wanted = {
        "causal": True,
        "position": "none",
        "type_vocab_size": 0,
        "pooler": False,
        "tie_word_embeddings": True,
        "embedding_size": None,
        "norm_kind": "layernorm",
        "ffn_gated": False,
        "relative_buckets": 0,
        "reuse_len": 0,
        "same_length": False,
    }
    problems = [f"model.{k}={getattr(c, k)!r} (needs {v!r})" for k, v in wanted.items() if getattr(c, k) != v]
    if c.hidden_size % 2:
        problems.append(f"an odd model.hidden_size={c.hidden_size} (the sin/cos position table needs an even one)")
    return problems


class TransfoXLOutput(NamedTuple):
    """Unpacks as (hidden, logits, mems)."""

    last_hidden_state: torch.Tensor  # (batch, seq, hidden)
    logits: torch.Tensor | None  # (batch, seq, vocab); None when not asked for
    mems: list[torch.Tensor]  # one (batch, <= mem_len, hidden) per layer, detached


class TransfoXLLayer(nn.Module):
    """Relative attention and a ReLU feed-forward, each added to its input and then normalised (post-norm,
    the paper's layout), or each reading a normalised input and added to the raw one (`norm: pre`, the
    original code's `pre_lnorm`: the memory is normalised with the segment, and no norm follows the stack)."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        head = c.attention_head_size or c.hidden_size // c.num_heads
        self.attn = RelativeSelfAttention(c.hidden_size, c.num_heads, head, c.attention_dropout)
        self.attn_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.ffn = FeedForward(c.hidden_size, c.intermediate_size, c.hidden_act, dropout=c.dropout)
        self.ffn_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)
        self.pre_norm = c.norm == "pre"

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, memory: torch.Tensor | None, mask: torch.Tensor
    ) -> torch.Tensor:
        """x: (batch, seq, hidden); pos: (mem + seq, hidden); memory: (batch, mem, hidden) or None."""
        if self.pre_norm:  # keys and values from the normalised [memory; x], as the original pre_lnorm
            h, _ = self.attn(self.attn_norm(x), pos, None if memory is None else self.attn_norm(memory), mask)
            x = x + self.drop(h)
            return x + self.drop(self.ffn(self.ffn_norm(x)))
        h, _ = self.attn(x, pos, memory, mask)
        x = self.attn_norm(x + self.drop(h))
        return self.ffn_norm(x + self.drop(self.ffn(x)))


class TransfoXL(nn.Module):
    """Embeddings, n_layer `TransfoXLLayer`s and the tied LM head; `forward` carries the memory."""

    # Read by bertzoo.tasks.base.TaskModel: the tasks call an encoder with a padding mask and segments, which a
    # stream model with memory has no use for; refused in one line rather than failing inside forward.
    task_refusal = (
        "a Transformer-XL model is a language model with memory (pretrain it, evaluate it with "
        "bertzoo.models.transfo_xl.stream_nll); the fine-tuning tasks do not read it: fine-tune a GPT or XLNet model"
    )

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        problems = layout_problems(config)
        if problems:
            raise ConfigError(f"a Transformer-XL model cannot have {'; '.join(problems)}; remove those model settings")
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(TransfoXLLayer(c) for _ in range(c.num_layers))
        self.drop = nn.Dropout(c.dropout)
        self.lm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.apply(self._init)

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The word table (tied to the output softmax)."""
        return self.embed

    def _init(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeSelfAttention):
            nn.init.normal_(module.u, std=std)
            nn.init.normal_(module.v, std=std)

    def forward(
        self,
        input_ids: torch.Tensor,
        mems: list[torch.Tensor] | None = None,
        mem_len: int | None = None,
        *,
        with_logits: bool = True,
    ) -> TransfoXLOutput:
        """input_ids: (batch, seq), one segment; mems: the previous call's `mems` (None: no history);
        mem_len: positions of memory to keep for the next call (None: the config's; evaluation may keep
        more than training did). No padding mask: a language-model stream has none (a block padded at its
        end is fine, the attention is causal). `with_logits=False` skips the vocabulary projection
        (`logits` is then None; `lm_logits` applies it to the hidden states a loss needs)."""
        c = self.config
        seq = input_ids.size(1)
        mem = 0 if mems is None else mems[0].size(1)
        device = input_ids.device
        x = self.drop(self.embed(input_ids) * math.sqrt(c.hidden_size))  # (batch, seq, hidden)
        # One position table and one mask for every layer: they depend on lengths only.
        distances = relative_distances(mem + seq, c.clamp_len or None, device)
        pos = self.drop(relative_sinusoids(distances, c.hidden_size).to(x.dtype))  # (mem + seq, hidden)
        mask = causal_mask(seq, mem + seq, device)  # (seq, mem + seq): key j visible to query i iff j <= mem + i
        inputs = []
        for i, layer in enumerate(self.layers):
            inputs.append(x)
            x = layer(x, pos, None if mems is None else mems[i], mask)
        hidden = self.drop(x)
        logits = self.lm_logits(hidden) if with_logits else None  # (batch, seq, vocab)
        return TransfoXLOutput(hidden, logits, self.update_mems(inputs, mems, mem_len))

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits of hidden states (..., hidden): the softmax tied to the word table."""
        return F.linear(hidden, self.embed.weight, self.lm_bias)

    def update_mems(
        self, inputs: list[torch.Tensor], mems: list[torch.Tensor] | None, mem_len: int | None = None
    ) -> list[torch.Tensor]:
        """Per layer: the last `mem_len` positions of [old memory; this segment's layer input], detached so
        that backpropagation stops at the segment boundary (the paper's stop-gradient SG(.))."""
        new = []
        for i, x in enumerate(inputs):
            full = x if mems is None else torch.cat([mems[i], x], dim=1)  # (batch, mem + seq, hidden)
            keep = self.config.mem_len if mem_len is None else mem_len
            start = max(0, full.size(1) - keep)  # not -keep: a memory of 0 must keep nothing
            new.append(full[:, start:].detach())
        return new


@torch.no_grad()
def stream_nll(model: TransfoXL, ids: torch.Tensor, segment_len: int, mem_len: int | None = None) -> tuple[float, int]:
    """Summed next-token negative log-likelihood of a long stream `ids` (batch, n), read in segments of
    `segment_len` carrying `mem_len` positions of memory (None: the model's own; the paper evaluates with a
    longer memory than it trained with). Returns (nll sum, tokens predicted); perplexity = exp(sum / count)."""
    total, count, mems = 0.0, 0, None
    for start in range(0, ids.size(1) - 1, segment_len):
        segment = ids[:, start : start + segment_len]
        targets = ids[:, start + 1 : start + segment_len + 1]
        out = model(segment, mems, mem_len)
        mems = out.mems
        logits = out.logits[:, : targets.size(1)]  # the stream's last token has nothing to predict
        total += F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="sum").item()
        count += targets.numel()
    return total, count
