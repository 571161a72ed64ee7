"""XLNet (Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for Language Understanding"):
two-stream relative attention with Transformer-XL memory (`bertzoo.models.xlnet.XLNet`), pretrained as a
permutation LM (`bertzoo.objectives.plm.PermutationLM`) on span-based partial-prediction targets
(`bertzoo.data.pretraining.collate_plm`).

Built from the shared parts: the word table of `Embeddings` (no absolute positions, no segment table, no
norm), post-norm layers with the shared `FeedForward` and LayerNorm, relative position scores from
`bertzoo.nn.relative_attention` plus XLNet's relative segment term (`bertzoo.nn.two_stream`). No pooler:
a classifier reads the last token's state (technique.pooling=last).

Hugging Face: `xlnet` (XLNetModel and XLNetLMHeadModel, both ways). The attention tensors are stored in
transformers' (hidden, heads, head_dim) layout, so the key map is names only. Refused in one line:
bi_data (two position tables per batch half), activations other than gelu / gelu_new / relu, d_head other
than d_model / n_head. untie_r is read either way: transformers keeps per-layer biases whatever it says.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import HFFamily, TensorMap
from bertzoo.models.xlnet import XLNet, XLNetConfig, layout_problems
from bertzoo.objectives.plm import PermutationLM
from bertzoo.variants.family import Family

# The paper's base and large (vocabulary of its 32,000 SentencePiece pieces; pretraining sets vocab_size
# from the tokenizer); mini is CPU-sized, tiny for tests.
PRESETS: dict[str, dict[str, Any]] = {
    "xlnet-tiny": {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128},
    "xlnet-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "xlnet-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "xlnet-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}
# What every XLNet shares: relative positions and segments only, post-norm, no pooler, no padding row
# (transformers' word table has none).
DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000,
    "position": "none",
    "type_vocab_size": 0,
    "embedding_norm": False,
    "pooler": False,
    "norm": "post",
    "pad_token_id": None,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
}

OBJECTIVES = ("plm",)
DEFAULT_OBJECTIVE = "plm"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="xlnet", family="XLNet", defaults=DEFAULTS, cls=XLNetConfig)


def build(config: ModelConfig, objective: str = DEFAULT_OBJECTIVE, **args: Any) -> PermutationLM:
    """The pretraining module: XLNet + the tied LM head of the permutation LM. `args` (objective_args)
    belong to the collator (plm_probability, max_span_length, unit), which checks them."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for XLNet; choose one of: {', '.join(OBJECTIVES)}")
    return PermutationLM(XLNet(config))


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module an XLNet pretraining checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return PermutationLM(XLNet(config))


def model_defaults(tokenizer: Any) -> dict[str, Any]:
    """No padding row in the word table (transformers' XLNet has none; padding is masked as keys)."""
    return {"pad_token_id": None}


INPUT_FORMATS = ("full_sentences", "doc_sentences")  # the first is the default


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Packed blocks of running text up to max_seq_len (GPT's `full_sentences` recipe by default, or
    `doc_sentences`); the collator draws the factorisation order and the targets. A unit-level PLM
    (`objective_args.unit`) reads blocks of one document with the shards' unit flags (ERNIE's: words,
    phrases, entities from `data.lexicon`)."""
    from bertzoo.data.pretraining.examples import one_of_formats

    unit = cfg.objective_args.get("unit", "token")
    if unit == "token":
        return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "XLNet")
    from bertzoo.data.pretraining.collate_units import UnitDataset
    from bertzoo.variants.ernie import unit_flags

    if (cfg.data.input_format or INPUT_FORMATS[0]) != "doc_sentences" or cfg.data.tokens_per_batch:
        raise ConfigError(
            f"objective_args.unit={unit!r} reads the shards' unit flags, laid out over blocks of one document: "
            "set data.input_format: doc_sentences (and no data.tokens_per_batch)"
        )
    inner = one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "XLNet")
    return UnitDataset(inner, unit_flags(corpus, cfg.data.lexicon), seed=cfg.train.seed)


def collator(cfg: PretrainConfig, tokenizer):
    """Permutation-LM targets (`bertzoo.data.pretraining.collate_plm`), objective_args as its options."""
    from bertzoo.data.pretraining.collate_plm import PermutationLMCollator

    return PermutationLMCollator(
        tokenizer, seed=cfg.train.seed, pad_to_multiple_of=cfg.data.pad_to_multiple_of, **cfg.objective_args
    )


# --- Hugging Face interop: XLNetModel / XLNetLMHeadModel ---------------------------------------------

# (Hugging Face name under `layer.{i}.`, ours under `encoder.layers.{i}.`), every tensor a rename.
_LAYER_KEYS: tuple[tuple[str, str], ...] = (
    *((f"rel_attn.{n}", f"attention.{n}") for n in "qkvor"),
    ("rel_attn.r_w_bias", "attention.content_bias"),
    ("rel_attn.r_r_bias", "attention.position_bias"),
    ("rel_attn.r_s_bias", "attention.segment_bias"),
    ("rel_attn.seg_embed", "attention.segment_embed"),
    *((f"rel_attn.layer_norm.{p}", f"attention_norm.{p}") for p in ("weight", "bias")),
    *((f"ff.layer_1.{p}", f"ffn.up.{p}") for p in ("weight", "bias")),
    *((f"ff.layer_2.{p}", f"ffn.down.{p}") for p in ("weight", "bias")),
    *((f"ff.layer_norm.{p}", f"ffn_norm.{p}") for p in ("weight", "bias")),
)
HEAD_PREFIX = "lm_loss."


def tensor_map(config: ModelConfig, hf_state: Mapping[str, torch.Tensor] | None = None) -> TensorMap:
    """Every XLNet tensor for `config`, Hugging Face keys (without `transformer.`) to ours. The head's
    weight is the word table unless config.tie_word_embeddings is false (transformers ties it the same way)."""
    pairs: TensorMap = [
        (("word_embedding.weight",), "encoder.embeddings.word.weight"),
        (("mask_emb",), "encoder.mask_emb"),
    ]
    for i in range(config.num_layers):
        pairs += [((f"layer.{i}.{hf}",), f"encoder.layers.{i}.{ours}") for hf, ours in _LAYER_KEYS]
    pairs.append(((HEAD_PREFIX + "bias",), "lm_head.decoder.bias"))
    if not config.tie_word_embeddings:
        pairs.append(((HEAD_PREFIX + "weight",), "lm_head.decoder.weight"))
    return pairs


# Hugging Face XLNetConfig key -> (ModelConfig field, kind, default: XLNetConfig's).
XLNET_CONFIG_FIELDS: dict[str, tuple[str, str, Any]] = {
    "vocab_size": ("vocab_size", "size", 32000),
    "d_model": ("hidden_size", "size", 1024),
    "n_layer": ("num_layers", "size", 24),
    "n_head": ("num_heads", "size", 16),
    "d_inner": ("intermediate_size", "size", 4096),
    "dropout": ("dropout", "probability", 0.1),
    "layer_norm_eps": ("layer_norm_eps", "positive", 1e-12),
    "initializer_range": ("initializer_range", "non-negative", 0.02),
    "tie_word_embeddings": ("tie_word_embeddings", "bool", True),
}
TABLE_FIELDS = frozenset(ours for ours, _, _ in XLNET_CONFIG_FIELDS.values())


def _int(raw: dict[str, Any], key: str, default: int) -> int:
    """An integer field that may be null or negative (transformers' "off"): its value, or `default`."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"config.json: {key} must be an integer or null, got {value!r:.60}; fix the file")
    return value


def _read_fields(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The attention type, memory, clamping and activation; refuses what this model does not compute."""
    act = hf_keys.hf_value(raw, "ff_activation", "string", "gelu")
    if act not in hf_keys.HF_ACTIVATIONS:
        raise CheckpointError(f"config.json: ff_activation={act!r} is not supported; supported: gelu, gelu_new, relu")
    attn_type = hf_keys.hf_value(raw, "attn_type", "string", "bi")
    if attn_type not in ("bi", "uni"):
        raise CheckpointError(f"config.json: attn_type={attn_type!r} is not supported; supported: bi, uni")
    if hf_keys.hf_value(raw, "bi_data", "bool", False):
        raise CheckpointError("config.json: bi_data=true (a second position table for half the batch) is not supported")
    hf_keys.hf_value(raw, "untie_r", "bool", True)  # checked only: transformers' layers hold their own biases
    d_head = _int(raw, "d_head", fields["hidden_size"] // fields["num_heads"])
    if fields["hidden_size"] % fields["num_heads"] or d_head != fields["hidden_size"] // fields["num_heads"]:
        raise CheckpointError(
            f"config.json: d_head={d_head} with d_model={fields['hidden_size']} and n_head={fields['num_heads']} is "
            "not supported; XLNet's heads split d_model evenly"
        )
    # mem_len absent is XLNetConfig's default 512; null (or 0) keeps every position, as transformers does.
    mem_len = _int(raw, "mem_len", 0) if "mem_len" in raw else 512
    reuse_len = _int(raw, "reuse_len", 0)
    if mem_len < 0 or reuse_len < 0:
        raise CheckpointError(f"config.json: mem_len={mem_len} and reuse_len={reuse_len} must be >= 0 or null")
    return {
        **{k: v for k, v in DEFAULTS.items() if k not in TABLE_FIELDS},
        "hidden_act": hf_keys.HF_ACTIVATIONS[act],
        "attention_dropout": fields["dropout"],
        "causal": attn_type == "uni",
        "same_length": hf_keys.hf_value(raw, "same_length", "bool", False),
        "clamp_len": max(_int(raw, "clamp_len", -1), 0),  # transformers: <= 0 is no clamping
        "mem_len": mem_len,
        "reuse_len": reuse_len,
    }


HF = HFFamily(
    model_type="xlnet",
    variant="xlnet",
    base="transformer.",
    encoder_keys=(),
    qkv=None,
    tied_copies=frozenset({HEAD_PREFIX + "weight"}),
    read_fields=_read_fields,
    architectures={"BertModel": "XLNetModel", "XLNetLMHeadModel": "XLNetLMHeadModel"},
    config_fields=XLNET_CONFIG_FIELDS,
    pretraining_classes=frozenset({"XLNetLMHeadModel"}),
    tensor_map=tensor_map,
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face XLNetConfig dict; CheckpointError listing what transformers' XLNet cannot hold."""
    problems = layout_problems(config)
    if config.attention_head_size not in (None, config.hidden_size // config.num_heads):
        problems.append(f"attention_head_size={config.attention_head_size} (its heads split d_model evenly)")
    if problems:
        raise CheckpointError(
            f"cannot export to the Hugging Face 'xlnet' architecture: the model has {'; '.join(problems)}; "
            "keep the bertzoo format (save_pretrained) for this model"
        )
    return {
        "model_type": "xlnet",
        "architectures": [hf_keys.hf_architecture(HF, a) for a in architectures or ["XLNetLMHeadModel"]],
        "vocab_size": config.vocab_size,
        "d_model": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "d_head": config.head_dim,
        "d_inner": config.intermediate_size,
        "ff_activation": hf_keys.OUR_ACTIVATIONS[config.hidden_act],
        "attn_type": "uni" if config.causal else "bi",
        "bi_data": False,
        "clamp_len": config.clamp_len or -1,
        "same_length": config.same_length,
        "mem_len": config.mem_len or None,
        "reuse_len": config.reuse_len or None,
        "untie_r": True,
        "dropout": config.dropout,
        "layer_norm_eps": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": config.tie_word_embeddings,
    }


def export_hf(module: nn.Module, directory: str | Path) -> Path | None:
    """The exporter's hook: a PermutationLM as XLNetLMHeadModel, a bare XLNet as XLNetModel; None for any
    other module (not XLNet's)."""
    if isinstance(module, PermutationLM):
        state, arch = module.state_dict(), "XLNetLMHeadModel"
    elif isinstance(module, XLNet):
        state, arch = {f"encoder.{k}": v for k, v in module.state_dict().items()}, "BertModel"
    else:
        return None
    config = module.config
    hf_config = config_to_hf(config, [arch])
    hf_state = hf_keys.state_to_hf(state, config, HF)
    if arch == "XLNetLMHeadModel":  # the backbone sits under `transformer.` in the heads model
        hf_state = {k if k.startswith(HEAD_PREFIX) else HF.base + k: v for k, v in hf_state.items()}
    return io.write_model_dir(directory, hf_state, hf_config)


FAMILY = Family(
    name="xlnet",
    title="XLNet",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    config_class=XLNetConfig,
    defaults=DEFAULTS,
    encoder_class=XLNet,
    pretraining_classes=(PermutationLM,),
    pretraining_model=pretraining_model,
    collator=collator,
    model_defaults=model_defaults,
    export_hf=export_hf,
    attention="two-stream",
    hf=(HF,),
    config_to_hf=config_to_hf,
)
