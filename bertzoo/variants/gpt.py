"""GPT (Radford et al. 2018) and GPT-2 (Radford et al. 2019): decoder-only, left-to-right Transformers
trained to predict the next token (`bertzoo.objectives.clm.CausalLM`).

Built from the encoder's parts with `causal=True`: learned absolute positions summed with the word
embeddings (no segment table, no LayerNorm over the sum), the LM head tied to the word table, no
pooler. GPT-1 is post-norm (`norm="post"`); GPT-2 moves the LayerNorm before each sublayer and adds
one after the last layer (`norm="pre"`, the encoder's final LayerNorm).

Hugging Face: `openai-gpt` (OpenAIGPTModel / OpenAIGPTLMHeadModel) holds the post-norm layout and
`gpt2` (GPT2Model / GPT2LMHeadModel) the pre-norm one; both store their projections as Conv1D,
(in, out), the transpose of our nn.Linear. Pretraining reads packed blocks of running text (`examples`),
unmasked (`collator`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import REQUIRED, HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.nn.adapter import has_adapters
from bertzoo.objectives.clm import CausalLM
from bertzoo.variants.family import Family

# GPT-1: 12 layers of 768, 512 positions, post-norm (the paper's sizes, vocabulary of its 40,478 BPE
# tokens); GPT-2 small (124M): the same widths, 1024 positions, pre-norm (50,257 tokens). Pretraining
# sets vocab_size from the tokenizer. Both used the tanh approximation of GELU. The minis are CPU-sized
# GPT-2 layouts.
PRESETS: dict[str, dict[str, Any]] = {
    "gpt-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "gpt-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "gpt": {
        "num_layers": 12,
        "hidden_size": 768,
        "num_heads": 12,
        "intermediate_size": 3072,
        "max_position": 512,
        "norm": "post",
        "vocab_size": 40478,
    },
    "gpt2": {
        "num_layers": 12,
        "hidden_size": 768,
        "num_heads": 12,
        "intermediate_size": 3072,
        "max_position": 1024,
        "norm": "pre",
        "vocab_size": 50257,
    },
}
# What every GPT shares, whatever the preset (GPT-2's layout unless a preset says otherwise).
DEFAULTS: dict[str, Any] = {
    "causal": True,
    "embedding_norm": False,
    "type_vocab_size": 0,
    "pooler": False,
    "pad_token_id": None,  # no padding row: every id of a GPT vocabulary is a real token
    "norm": "pre",
    "hidden_act": "gelu_tanh",
    "layer_norm_eps": 1e-5,
    "max_position": 512,
}

OBJECTIVES = ("clm",)
DEFAULT_OBJECTIVE = "clm"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="gpt", family="GPT", defaults=DEFAULTS)


def build(config: ModelConfig, objective: str = "clm", **args: Any) -> CausalLM:
    """The pretraining module: the causal stack + the tied next-token head."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for GPT; choose one of: {', '.join(OBJECTIVES)}")
    if args:
        raise ConfigError(f"GPT takes no objective_args (got {', '.join(sorted(args))}); remove them")
    if not config.causal:
        raise ConfigError("a GPT model attends to the left only; remove model.causal=false")
    return CausalLM(Encoder(config))


INPUT_FORMATS = ("full_sentences", "doc_sentences")  # the first is the default


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Packed blocks of contiguous text, `[CLS] text [SEP] text ... [SEP]`: whole sentences in corpus order
    up to max_seq_len, crossing documents with a [SEP] at each document end (RoBERTa's FULL-SENTENCES
    plan, `data.input_format: full_sentences`, the default), or never crossing one (`doc_sentences`).
    Every corpus token is in exactly one block; nothing is masked (`collator`)."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "GPT")


def collator(cfg: PretrainConfig, tokenizer):
    """Padding without masking: the targets of a causal LM are its inputs."""
    from bertzoo.data.pretraining.collate_mlm import CausalLMCollator

    return CausalLMCollator(tokenizer, pad_to_multiple_of=cfg.data.pad_to_multiple_of)


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a GPT pretraining checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return CausalLM(Encoder(config))


# --- Hugging Face interop: OpenAIGPT* (openai-gpt) and GPT2* (gpt2) --------------------------------

# (Hugging Face key, bertzoo Encoder key) of one block, the same names in both architectures: ln_1 is the
# attention sublayer's LayerNorm (after it in GPT-1, before it in GPT-2), ln_2 the feed-forward one.
BLOCK_KEYS: tuple[tuple[str, str], ...] = tuple(
    (f"h.{{i}}.{hf}.{part}", f"stack.layers.{{i}}.{ours}.{part}")
    for hf, ours in (
        ("attn.c_attn", "attention.qkv"),  # already fused as query | key | value, like ours
        ("attn.c_proj", "attention.out"),
        ("ln_1", "attention_residual.norm"),
        ("mlp.c_fc", "ffn.up"),
        ("mlp.c_proj", "ffn.down"),
        ("ln_2", "ffn_residual.norm"),
    )
    for part in ("weight", "bias")
)
CONV1D = frozenset(f"h.{{i}}.{name}.weight" for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))

# Hugging Face config key -> (ModelConfig field, kind, default), as hf_keys.HF_CONFIG_FIELDS for BERT.
# embd_pdrop is not read: the embeddings use the residual dropout (resid_pdrop), as in our encoder.
GPT_CONFIG_FIELDS: dict[str, tuple[str, str, Any]] = {
    "vocab_size": ("vocab_size", "size", REQUIRED),
    "n_embd": ("hidden_size", "size", REQUIRED),
    "n_layer": ("num_layers", "size", REQUIRED),
    "n_head": ("num_heads", "size", REQUIRED),
    "n_positions": ("max_position", "size", REQUIRED),  # each family states its class's default
    "resid_pdrop": ("dropout", "probability", 0.1),
    "attn_pdrop": ("attention_dropout", "probability", 0.1),
    "layer_norm_epsilon": ("layer_norm_eps", "positive", 1e-5),
    "initializer_range": ("initializer_range", "non-negative", 0.02),
    "tie_word_embeddings": ("tie_word_embeddings", "bool", True),
}
# OpenAIGPT's `afn` names: its "gelu" is the tanh approximation (transformers' gelu_new).
OPENAI_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu"}
OUR_OPENAI_ACTIVATIONS = {ours: hf for hf, ours in OPENAI_ACTIVATIONS.items()}


def _common(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    if not fields["tie_word_embeddings"]:
        raise CheckpointError(
            f"config.json: tie_word_embeddings=false; a Hugging Face {raw.get('model_type')} LM head tied to the "
            "word embeddings is the only one that converts"
        )
    return {
        "causal": True,
        "embedding_norm": False,
        "type_vocab_size": 0,
        "pooler": False,
        "position": "learned",
        # GPT has no padding row; a pad_token_id in a Hugging Face config names an id for batching only.
        "pad_token_id": None,
    }


def _openai_fields(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """GPT-1: post-norm, FFN fixed at 4x the width, activation named by `afn`."""
    afn = hf_keys.hf_value(raw, "afn", "string", "gelu")
    if afn not in OPENAI_ACTIVATIONS:
        raise CheckpointError(f"config.json: afn={afn!r} is not supported; supported: {', '.join(OPENAI_ACTIVATIONS)}")
    return {
        **_common(raw, fields),
        "norm": "post",
        "intermediate_size": 4 * fields["hidden_size"],
        "hidden_act": OPENAI_ACTIVATIONS[afn],
    }


def _gpt2_fields(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """GPT-2: pre-norm with a final LayerNorm; refuses the options our attention does not compute."""
    for key, unsupported in (
        ("scale_attn_weights", False),
        ("scale_attn_by_inverse_layer_idx", True),
        ("add_cross_attention", True),
    ):
        if hf_keys.hf_value(raw, key, "bool", not unsupported) is unsupported:
            raise CheckpointError(f"config.json: {key}={str(unsupported).lower()} is not supported for gpt2")
    hidden = fields["hidden_size"]
    return {
        **_common(raw, fields),
        "norm": "pre",
        "intermediate_size": hf_keys.hf_value(raw, "n_inner", "size", 4 * hidden),
        "hidden_act": hf_keys.hf_value(raw, "activation_function", "activation", "gelu_tanh"),
    }


OPENAI_GPT_HF = HFFamily(
    model_type="openai-gpt",
    variant="gpt",
    base="transformer.",
    encoder_keys=(
        ("tokens_embed.weight", "embeddings.word.weight"),
        ("positions_embed.weight", "embeddings.position.weight"),
        *BLOCK_KEYS,
    ),
    qkv=None,
    tied_copies=frozenset({"lm_head.weight"}),
    config_defaults={"n_positions": 512},
    read_fields=_openai_fields,
    architectures={"BertModel": "OpenAIGPTModel", "OpenAIGPTLMHeadModel": "OpenAIGPTLMHeadModel"},
    transposed=CONV1D,
    config_fields=GPT_CONFIG_FIELDS,
    pretraining_classes=frozenset({"OpenAIGPTLMHeadModel"}),
)
GPT2_HF = HFFamily(
    model_type="gpt2",
    variant="gpt",
    base="transformer.",
    encoder_keys=(
        ("wte.weight", "embeddings.word.weight"),
        ("wpe.weight", "embeddings.position.weight"),
        *BLOCK_KEYS,
        ("ln_f.weight", "final_norm.weight"),
        ("ln_f.bias", "final_norm.bias"),
    ),
    qkv=None,
    tied_copies=frozenset({"lm_head.weight"}),
    config_defaults={"n_positions": 1024},
    read_fields=_gpt2_fields,
    architectures={"BertModel": "GPT2Model", "GPT2LMHeadModel": "GPT2LMHeadModel"},
    transposed=CONV1D,
    config_fields=GPT_CONFIG_FIELDS,
    pretraining_classes=frozenset({"GPT2LMHeadModel"}),
)
HF_FAMILIES = (OPENAI_GPT_HF, GPT2_HF)


def hf_family_for(config: ModelConfig) -> HFFamily:
    """The architecture of a GPT model's layout: post-norm is GPT-1's (openai-gpt), pre-norm GPT-2's."""
    return OPENAI_GPT_HF if config.norm == "post" else GPT2_HF


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face OpenAIGPTConfig or GPT2Config dict (by the layout); CheckpointError listing what
    the class cannot hold. BERT class names from the generic exporter become the family's own."""
    family = hf_family_for(config)
    problems = []
    for name, want in (("causal", True), ("embedding_norm", False), ("position", "learned"), ("share", "none")):
        if getattr(config, name) != want:
            problems.append(f"{name}={getattr(config, name)!r} (it has {want!r})")
    for name, want in (("type_vocab_size", 0), ("position_offset", 0), ("pooler", False)):
        if getattr(config, name) != want:
            problems.append(f"{name}={getattr(config, name)!r} (it has {want!r})")
    if config.embedding_size and config.embedding_size != config.hidden_size:
        problems.append(f"factorized embeddings (embedding_size={config.embedding_size})")
    if not config.tie_word_embeddings:
        problems.append("an LM head not tied to the word embeddings")
    if family is OPENAI_GPT_HF:
        if config.intermediate_size != 4 * config.hidden_size:
            problems.append(f"intermediate_size={config.intermediate_size} (it is 4 x hidden_size)")
        if config.hidden_act not in OUR_OPENAI_ACTIVATIONS:
            problems.append(f"hidden_act={config.hidden_act!r} (it has {', '.join(OUR_OPENAI_ACTIVATIONS)})")
    if problems:
        raise CheckpointError(
            f"cannot export to the Hugging Face {family.model_type!r} architecture: the model has "
            f"{'; '.join(problems)}; keep the bertzoo format (save_pretrained) for this model"
        )
    archs = [hf_keys.hf_architecture(family, a) for a in architectures or ["BertModel"]]
    common = {
        "model_type": family.model_type,
        "architectures": archs,
        "vocab_size": config.vocab_size,
        "n_embd": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_positions": config.max_position,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": True,
        "pad_token_id": config.pad_token_id,
    }
    if family is OPENAI_GPT_HF:
        return {**common, "afn": OUR_OPENAI_ACTIVATIONS[config.hidden_act]}
    return {
        **common,
        "n_inner": config.intermediate_size,
        "activation_function": hf_keys.OUR_ACTIVATIONS[config.hidden_act],
        # GPT2Config's defaults name token 50256 (GPT-2's <|endoftext|>), which only GPT-2's vocabulary has.
        "bos_token_id": None,
        "eos_token_id": None,
    }


def export_hf(module: nn.Module, directory: str | Path) -> Path | None:
    """The exporter's hook: a CausalLM as OpenAIGPTLMHeadModel / GPT2LMHeadModel, its causal Encoder as
    OpenAIGPTModel / GPT2Model (the tied LM head is not written: transformers re-ties it on load).
    None: not a GPT module (the generic exporter reports it)."""
    if isinstance(module, CausalLM):
        state, prefix = module.state_dict(), "transformer."
    elif isinstance(module, Encoder):
        state, prefix = {f"encoder.{k}": v for k, v in module.state_dict().items()}, ""
    else:
        return None
    if has_adapters(module):
        raise CheckpointError(
            "the model has adapters, which the Hugging Face GPT architectures have no place for; "
            "save it with save_pretrained (bertzoo format) instead"
        )
    config = module.config
    family = hf_family_for(config)
    if prefix:
        arch = "OpenAIGPTLMHeadModel" if family is OPENAI_GPT_HF else "GPT2LMHeadModel"
    else:
        arch = "BertModel"
    hf_config = config_to_hf(config, [arch])
    hf_state = hf_keys.state_to_hf(state, config, family, prefix=prefix)
    return io.write_model_dir(directory, hf_state, hf_config)


FAMILY = Family(
    name="gpt",
    title="GPT",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    defaults=DEFAULTS,
    pretraining_classes=(CausalLM,),
    pretraining_model=pretraining_model,
    collator=collator,
    hf_family_for=hf_family_for,
    export_hf=export_hf,
    hf=HF_FAMILIES,
    config_to_hf=config_to_hf,
)
