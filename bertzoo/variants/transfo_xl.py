"""Transformer-XL (Dai et al. 2019): relative attention with segment-level recurrence (`bertzoo.models.transfo_xl`),
pretrained as a causal LM read in segments that carry memory (`bertzoo.objectives.recurrent_lm`).

Data: GPT's packed blocks of contiguous text (`data.input_format: full_sentences`, the default); a block of
`data.max_seq_len` tokens is cut into segments of `objective_args.segment_len`. `objective_args.memory: false`
trains the same model without recurrence (the baseline of the paper's ablations).

Hugging Face: transformers removed Transformer-XL in 5.0; `config_to_hf` / `config_from_hf` /
`state_dict_to_hf` / `state_dict_from_hf` translate to and from the 4.x `TransfoXLLMHeadModel` (tested
against 4.57 in its own environment, tests/interop/test_transfo_xl_hf.py), for the layout this model holds: one
plain softmax (no adaptive cutoffs), embeddings as wide as the model, post-norm or `pre_lnorm`, attention
type 0, no same_length. Anything else is refused in one line.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.models.transfo_xl import TransfoXL, TransfoXLConfig
from bertzoo.objectives.recurrent_lm import RecurrentLM
from bertzoo.variants.family import Family

# tiny for tests, mini for a CPU; base and large are the paper's WikiText-103 sizes (their adaptive softmax and
# embeddings are left out: one plain softmax over the tokenizer's vocabulary).
PRESETS: dict[str, dict[str, Any]] = {
    "transfo-xl-tiny": {
        "num_layers": 2,
        "hidden_size": 64,
        "num_heads": 2,
        "attention_head_size": 32,
        "intermediate_size": 256,
        "mem_len": 64,
    },
    "transfo-xl-mini": {
        "num_layers": 4,
        "hidden_size": 256,
        "num_heads": 4,
        "attention_head_size": 64,
        "intermediate_size": 1024,
        "mem_len": 128,
    },
    "transfo-xl-base": {
        "num_layers": 16,
        "hidden_size": 410,
        "num_heads": 10,
        "attention_head_size": 41,
        "intermediate_size": 2100,
        "mem_len": 150,
    },
    "transfo-xl-large": {
        "num_layers": 18,
        "hidden_size": 1024,
        "num_heads": 16,
        "attention_head_size": 64,
        "intermediate_size": 4096,
        "mem_len": 384,
    },
}
# Every Transformer-XL: causal, post-norm, ReLU, relative positions only (max_position is not read), no
# segments, no pooler, the word table tied to the softmax.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000,
    "causal": True,
    "norm": "post",
    "position": "none",
    "type_vocab_size": 0,
    "pooler": False,
    "embedding_norm": False,
    "pad_token_id": None,
    "hidden_act": "relu",
    "layer_norm_eps": 1e-5,
}

OBJECTIVES = ("clm",)
DEFAULT_OBJECTIVE = "clm"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(
        spec, PRESETS, variant="transfo-xl", family="Transformer-XL", defaults=DEFAULTS, cls=TransfoXLConfig
    )


def build(config: ModelConfig, objective: str = DEFAULT_OBJECTIVE, **args: Any) -> RecurrentLM:
    """The pretraining module: TransfoXL read in segments with memory. objective_args: `segment_len`
    (tokens per segment, default 64) and `memory` (default true)."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for Transformer-XL; choose one of: {', '.join(OBJECTIVES)}"
        )
    unknown = sorted(set(args) - {"segment_len", "memory"})
    if unknown:
        raise ConfigError(
            f"unknown objective_args for Transformer-XL: {', '.join(unknown)}; it takes segment_len and memory"
        )
    return RecurrentLM(TransfoXL(config), **args)


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a Transformer-XL pretraining checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return RecurrentLM(TransfoXL(config), segment_len=raw.get("segment_len", 64), memory=raw.get("memory", True))


INPUT_FORMATS = ("full_sentences", "doc_sentences")  # the first is the default


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Packed blocks of running text up to max_seq_len (GPT's `full_sentences` recipe by default)."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "Transformer-XL")


def collator(cfg: PretrainConfig, tokenizer):
    """Padding without masking: the targets of a causal LM are its inputs."""
    from bertzoo.data.pretraining.collate_mlm import CausalLMCollator

    return CausalLMCollator(tokenizer, pad_to_multiple_of=cfg.data.pad_to_multiple_of)


# --- Hugging Face's TransfoXLModel / TransfoXLLMHeadModel (transformers <= 4.57; removed in 5.x) ---
HF_REQUIRED = {"div_val": 1, "attn_type": 0, "same_length": False, "sample_softmax": -1}

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


def config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """A Transformer-XL `ModelConfig` as the fields of transformers' TransfoXLConfig (per-layer u and v: untie_r)."""
    head = config.attention_head_size or config.hidden_size // config.num_heads
    return {
        "model_type": "transfo-xl",
        "vocab_size": config.vocab_size,
        "cutoffs": [],
        "d_model": config.hidden_size,
        "d_embed": config.hidden_size,
        "n_head": config.num_heads,
        "d_head": head,
        "d_inner": config.intermediate_size,
        "n_layer": config.num_layers,
        "mem_len": config.mem_len,
        "clamp_len": config.clamp_len,  # both: 0 = no clamping
        "dropout": config.dropout,
        "dropatt": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "init_std": config.initializer_range,
        "pre_lnorm": config.norm == "pre",
        "untie_r": True,
        "tie_word_embeddings": True,
        "adaptive": True,
        "tie_projs": [False],
        **HF_REQUIRED,
    }


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """transformers' TransfoXLConfig fields -> a `ModelConfig`, or CheckpointError naming what it cannot hold."""
    defaults = {"div_val": 4, "attn_type": 0, "same_length": True, "sample_softmax": -1}
    for key, wanted in HF_REQUIRED.items():
        if hf.get(key, defaults[key]) != wanted:
            raise CheckpointError(
                f"Transformer-XL with {key}={hf.get(key, defaults[key])!r} is not supported (needs {wanted!r})"
            )
    if hf.get("cutoffs"):
        raise CheckpointError(f"Transformer-XL with an adaptive softmax (cutoffs {hf['cutoffs']}) is not supported")
    if hf.get("d_embed", hf["d_model"]) != hf["d_model"]:
        raise CheckpointError("Transformer-XL with d_embed != d_model (projected embeddings) is not supported")
    return model_config(
        {
            "vocab_size": hf["vocab_size"],
            "num_layers": hf["n_layer"],
            "hidden_size": hf["d_model"],
            "num_heads": hf["n_head"],
            "attention_head_size": hf["d_head"],
            "intermediate_size": hf["d_inner"],
            "mem_len": hf.get("mem_len", 0) or 0,
            "clamp_len": max(0, hf.get("clamp_len", 0)),  # HF: 0 or less = no clamping, as ours
            "dropout": hf.get("dropout", 0.1),
            "attention_dropout": hf.get("dropatt", 0.0),
            "layer_norm_eps": hf.get("layer_norm_epsilon", 1e-5),
            "initializer_range": hf.get("init_std", 0.02),
            "norm": "pre" if hf.get("pre_lnorm", False) else "post",
        }
    )


def state_dict_to_hf(model: TransfoXL) -> dict[str, torch.Tensor]:
    """Our weights under TransfoXLLMHeadModel's names (the tied output weight written out too)."""
    ours = model.state_dict()
    out = {"transformer.word_emb.emb_layers.0.weight": ours["embed.weight"]}
    for i in range(model.config.num_layers):
        for key, hf_key in _LAYER_KEYS.items():
            out[f"transformer.layers.{i}.{hf_key}"] = ours[f"layers.{i}.{key}"]
    out["crit.out_layers.0.weight"] = ours["embed.weight"]
    out["crit.out_layers.0.bias"] = ours["lm_bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def state_dict_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """TransfoXLModel or TransfoXLLMHeadModel weights -> our names. Shared u and v (untie_r false) are copied
    into every layer; a model without an LM head gets a zero output bias."""
    try:
        return _from_hf(state, config)
    except KeyError as missing:
        raise CheckpointError(f"not a Transformer-XL checkpoint of this size: no weight {missing}") from None


def _from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    prefix = "transformer." if any(k.startswith("transformer.") for k in state) else ""
    out = {"embed.weight": state[f"{prefix}word_emb.emb_layers.0.weight"]}
    for i in range(config.num_layers):
        for key, hf_key in _LAYER_KEYS.items():
            name = f"{prefix}layers.{i}.{hf_key}"
            if name not in state and hf_key.endswith(("r_w_bias", "r_r_bias")):
                name = f"{prefix}{hf_key.split('.')[-1]}"  # untie_r false: one pair for the whole model
            out[f"layers.{i}.{key}"] = state[name]
    out["lm_bias"] = state.get("crit.out_layers.0.bias", torch.zeros(config.vocab_size))
    return out


FAMILY = Family(
    name="transfo-xl",
    title="Transformer-XL",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    config_class=TransfoXLConfig,
    defaults=DEFAULTS,
    encoder_class=TransfoXL,
    pretraining_classes=(RecurrentLM,),
    pretraining_model=pretraining_model,
    collator=collator,
    attention=None,
    config_to_hf=config_to_hf,
)
