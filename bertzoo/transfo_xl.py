"""Transformer-XL (Dai et al. 2019): a causal stack of relative-attention layers with segment-level recurrence.

Each layer attends over [memory; current segment], where its memory is what that layer read as input for the
previous segment(s), kept to the last `mem_len` positions and detached, so gradients stay inside a segment while
the context reaches back n_layer x mem_len positions. The layout is the paper's post-norm one:
x + attention -> LayerNorm, then x + FFN(ReLU) -> LayerNorm. Word embeddings are scaled by sqrt(d_model) and
the LM head is a plain softmax tied to them (the adaptive softmax and embeddings of the WikiText-103 model are
left out, as is `same_length`, which only changes evaluation of very long spans).

Semantics follow transformers' TransfoXLModel (mems hold layer inputs; memory positions are not queries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.nn.ffn import FeedForward
from bertzoo.nn.masks import causal_mask
from bertzoo.nn.relative_attention import RelativeSelfAttention, relative_distances, relative_sinusoids

__all__ = ["PRESETS", "TransfoXL", "TransfoXLConfig", "TransfoXLLayer", "TransfoXLOutput", "preset", "stream_nll"]


@dataclass
class TransfoXLConfig:
    vocab_size: int = 32000
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    d_head: int = 64
    d_inner: int = 1024
    mem_len: int = 128  # positions of memory kept per layer (0: no recurrence)
    clamp_len: int | None = None  # distances beyond this share its embedding (None: no clamping)
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.mem_len < 0:
            raise ConfigError(f"mem_len must be >= 0, got {self.mem_len}")
        if self.clamp_len is not None and self.clamp_len < 0:
            raise ConfigError(f"clamp_len must be >= 0 or None, got {self.clamp_len}")
        if self.d_model % 2:
            raise ConfigError(f"d_model must be even for the sin/cos position table, got {self.d_model}")


# Sizes only; vocab_size comes from the tokenizer (`preset(name, vocab_size=...)`).
PRESETS: dict[str, TransfoXLConfig] = {
    "transfo-xl-tiny": TransfoXLConfig(n_layer=2, d_model=64, n_head=2, d_head=32, d_inner=256, mem_len=64),
    "transfo-xl-mini": TransfoXLConfig(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024, mem_len=128),
}


def preset(name: str, **overrides) -> TransfoXLConfig:
    """A preset's config with some fields replaced."""
    if name not in PRESETS:
        raise ConfigError(f"unknown Transformer-XL preset {name!r}; choose one of {', '.join(PRESETS)}")
    return replace(PRESETS[name], **overrides)


class TransfoXLOutput(NamedTuple):
    """Unpacks as (hidden, logits, mems)."""

    last_hidden_state: torch.Tensor  # (batch, seq, d_model)
    logits: torch.Tensor  # (batch, seq, vocab)
    mems: list[torch.Tensor]  # one (batch, <= mem_len, d_model) per layer, detached


class TransfoXLLayer(nn.Module):
    """Relative attention and a ReLU feed-forward, each added to its input and then normalised (post-norm)."""

    def __init__(self, c: TransfoXLConfig) -> None:
        super().__init__()
        self.attn = RelativeSelfAttention(c.d_model, c.n_head, c.d_head, c.dropout)
        self.attn_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.ffn = FeedForward(c.d_model, c.d_inner, "relu", dropout=c.dropout)
        self.ffn_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, memory: torch.Tensor | None, mask: torch.Tensor
    ) -> torch.Tensor:
        """x: (batch, seq, d_model); pos: (mem + seq, d_model); memory: (batch, mem, d_model) or None."""
        h, _ = self.attn(x, pos, memory, mask)
        x = self.attn_norm(x + self.drop(h))
        return self.ffn_norm(x + self.drop(self.ffn(x)))


class TransfoXL(nn.Module):
    """Embeddings, n_layer `TransfoXLLayer`s and the tied LM head; `forward` carries the memory."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList(TransfoXLLayer(c) for _ in range(c.n_layer))
        self.drop = nn.Dropout(c.dropout)
        self.lm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeSelfAttention):
            nn.init.normal_(module.u, std=std)
            nn.init.normal_(module.v, std=std)

    def forward(
        self, input_ids: torch.Tensor, mems: list[torch.Tensor] | None = None, mem_len: int | None = None
    ) -> TransfoXLOutput:
        """input_ids: (batch, seq), one segment; mems: the previous call's `mems` (None: no history);
        mem_len: positions of memory to keep for the next call (None: the config's; evaluation may keep
        more than training did). No padding mask: a language-model stream has none."""
        c = self.config
        seq = input_ids.size(1)
        mem = 0 if mems is None else mems[0].size(1)
        device = input_ids.device
        x = self.drop(self.embed(input_ids) * math.sqrt(c.d_model))  # (batch, seq, d_model)
        # One position table and one mask for every layer: they depend on lengths only.
        distances = relative_distances(mem + seq, c.clamp_len, device)
        pos = self.drop(relative_sinusoids(distances, c.d_model).to(x.dtype))  # (mem + seq, d_model)
        mask = causal_mask(seq, mem + seq, device)  # (seq, mem + seq): key j visible to query i iff j <= mem + i
        inputs = []
        for i, layer in enumerate(self.layers):
            inputs.append(x)
            x = layer(x, pos, None if mems is None else mems[i], mask)
        hidden = self.drop(x)
        logits = F.linear(hidden, self.embed.weight, self.lm_bias)  # (batch, seq, vocab)
        return TransfoXLOutput(hidden, logits, self.update_mems(inputs, mems, mem_len))

    def update_mems(
        self, inputs: list[torch.Tensor], mems: list[torch.Tensor] | None, mem_len: int | None = None
    ) -> list[torch.Tensor]:
        """Per layer: the last `mem_len` positions of [old memory; this segment's layer input], detached so
        that backpropagation stops at the segment boundary (the paper's stop-gradient SG(.))."""
        new = []
        for i, x in enumerate(inputs):
            full = x if mems is None else torch.cat([mems[i], x], dim=1)  # (batch, mem + seq, d_model)
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


# --- Hugging Face's TransfoXLModel / TransfoXLLMHeadModel (transformers <= 4.57; removed in 5.x) ---
# Only the layout this model holds: one plain softmax (no adaptive cutoffs), embeddings as wide as the model,
# post-norm, relative attention of type 0, no same_length. Anything else is refused in one line.
HF_REQUIRED = {"div_val": 1, "attn_type": 0, "same_length": False, "pre_lnorm": False, "sample_softmax": -1}

# bertzoo key in one layer -> Hugging Face key under `layers.{i}.`
_LAYER_KEYS = {
    "attn.qkv.weight": "dec_attn.qkv_net.weight",
    "attn.r.weight": "dec_attn.r_net.weight",
    "attn.out.weight": "dec_attn.o_net.weight",
    "attn.u": "dec_attn.r_w_bias",  # content bias
    "attn.v": "dec_attn.r_r_bias",  # position bias
    "attn_norm.weight": "dec_attn.layer_norm.weight",
    "attn_norm.bias": "dec_attn.layer_norm.bias",
    "ffn.up.weight": "pos_ff.CoreNet.0.weight",
    "ffn.up.bias": "pos_ff.CoreNet.0.bias",
    "ffn.down.weight": "pos_ff.CoreNet.3.weight",
    "ffn.down.bias": "pos_ff.CoreNet.3.bias",
    "ffn_norm.weight": "pos_ff.layer_norm.weight",
    "ffn_norm.bias": "pos_ff.layer_norm.bias",
}


def config_to_hf(config: TransfoXLConfig) -> dict:
    """A `TransfoXLConfig` as the fields of transformers' TransfoXLConfig (per-layer u and v: untie_r)."""
    return {
        "model_type": "transfo-xl",
        "vocab_size": config.vocab_size,
        "cutoffs": [],
        "d_model": config.d_model,
        "d_embed": config.d_model,
        "n_head": config.n_head,
        "d_head": config.d_head,
        "d_inner": config.d_inner,
        "n_layer": config.n_layer,
        "mem_len": config.mem_len,
        "clamp_len": config.clamp_len or 0,  # HF: 0 or less = no clamping
        "dropout": config.dropout,
        "dropatt": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "init_std": config.init_std,
        "untie_r": True,
        "tie_word_embeddings": True,
        "adaptive": True,
        "tie_projs": [False],
        **HF_REQUIRED,
    }


def config_from_hf(hf: dict) -> TransfoXLConfig:
    """transformers' TransfoXLConfig fields -> a `TransfoXLConfig`, or CheckpointError naming what it cannot hold."""
    defaults = {"div_val": 4, "attn_type": 0, "same_length": True, "pre_lnorm": False, "sample_softmax": -1}
    for key, wanted in HF_REQUIRED.items():
        if hf.get(key, defaults[key]) != wanted:
            raise CheckpointError(
                f"Transformer-XL with {key}={hf.get(key, defaults[key])!r} is not supported (needs {wanted!r})"
            )
    if hf.get("cutoffs"):
        raise CheckpointError(f"Transformer-XL with an adaptive softmax (cutoffs {hf['cutoffs']}) is not supported")
    if hf.get("d_embed", hf["d_model"]) != hf["d_model"]:
        raise CheckpointError("Transformer-XL with d_embed != d_model (projected embeddings) is not supported")
    clamp = hf.get("clamp_len", 0)
    return TransfoXLConfig(
        vocab_size=hf["vocab_size"],
        n_layer=hf["n_layer"],
        d_model=hf["d_model"],
        n_head=hf["n_head"],
        d_head=hf["d_head"],
        d_inner=hf["d_inner"],
        mem_len=hf.get("mem_len", 0) or 0,
        clamp_len=clamp if clamp > 0 else None,
        dropout=hf.get("dropout", 0.1),
        layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        init_std=hf.get("init_std", 0.02),
    )


def state_dict_to_hf(model: TransfoXL) -> dict[str, torch.Tensor]:
    """Our weights under TransfoXLLMHeadModel's names (the tied output weight written out too)."""
    ours = model.state_dict()
    out = {"transformer.word_emb.emb_layers.0.weight": ours["embed.weight"]}
    for i in range(model.config.n_layer):
        for key, hf_key in _LAYER_KEYS.items():
            out[f"transformer.layers.{i}.{hf_key}"] = ours[f"layers.{i}.{key}"]
    out["crit.out_layers.0.weight"] = ours["embed.weight"]
    out["crit.out_layers.0.bias"] = ours["lm_bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def state_dict_from_hf(state: dict[str, torch.Tensor], config: TransfoXLConfig) -> dict[str, torch.Tensor]:
    """TransfoXLModel or TransfoXLLMHeadModel weights -> our names. Shared u and v (untie_r false) are copied
    into every layer; a model without an LM head gets a zero output bias."""
    try:
        return _from_hf(state, config)
    except KeyError as missing:
        raise CheckpointError(f"not a Transformer-XL checkpoint of this size: no weight {missing}") from None


def _from_hf(state: dict[str, torch.Tensor], config: TransfoXLConfig) -> dict[str, torch.Tensor]:
    prefix = "transformer." if any(k.startswith("transformer.") for k in state) else ""
    out = {"embed.weight": state[f"{prefix}word_emb.emb_layers.0.weight"]}
    for i in range(config.n_layer):
        for key, hf_key in _LAYER_KEYS.items():
            name = f"{prefix}layers.{i}.{hf_key}"
            if name not in state and hf_key.endswith(("r_w_bias", "r_r_bias")):
                name = f"{prefix}{hf_key.split('.')[-1]}"  # untie_r false: one pair for the whole model
            out[f"layers.{i}.{key}"] = state[name]
    out["lm_bias"] = state.get("crit.out_layers.0.bias", torch.zeros(config.vocab_size))
    return out
