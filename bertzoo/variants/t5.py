"""T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer"): an encoder-decoder (`bertzoo.models.encdec.EncoderDecoder`) trained as a sequence-to-sequence LM
(`bertzoo.objectives.seq2seq_lm.EncoderDecoderLM`).

Built from the shared parts with T5's options: pre-norm layers with a final norm per stack, the norm
scale-only RMS (`norm_kind="rms"`, eps 1e-6), no bias in any linear, no absolute positions but a relative
position bias of 32 buckets up to distance 128 per stack (bidirectional in the encoder, unidirectional in
the decoder) shared by all its layers, no 1/sqrt(d) in attention (`attention_scale=1.0`: the
initialisation holds it), dropout also inside the feed-forward and after each final norm. The feed-forward
is ReLU (T5 v1.0, `feed_forward_proj="relu"`) or GEGLU with tanh-GELU (v1.1, `"gated-gelu"`). One word
table serves encoder and decoder; the LM head is tied to it and reads the decoder's output times
d_model ** -0.5 (v1.0), or is its own matrix without the scaling (v1.1). The decoder starts from the pad
id 0; sentinels `<extra_id_i>` count down from the end of the vocabulary (`<extra_id_0>` = vocab_size - 1,
`bertzoo.data.pretraining.collate_seq2seq`). The word table has no padding row: id 0 is the decoder's start token,
which must learn.

`initializer_range` is transformers' `initializer_factor` here (1.0): T5 initialises each matrix with a
standard deviation scaled by its fan-in (`init_t5_weights`), the embeddings with 1.0.

Hugging Face: `t5` (T5ForConditionalGeneration both ways, T5Model and T5EncoderModel on import,
T5EncoderModel for a bare encoder on export). Its q, k, v are fused into our projection (k, v of the
cross-attention too); heads may be narrower or wider than d_model / num_heads (`d_kv`,
`attention_head_size`). transformers 5.x ties the head unless the checkpoint holds a different
`lm_head.weight`, and scales by `scale_decoder_outputs` (older configs: `tie_word_embeddings`); both are
read that way and written so that both 4.x and 5.x read them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
from bertzoo.config import ModelConfig, preset_config
from bertzoo.errors import CheckpointError, ConfigError
from bertzoo.interop.hf_keys import REQUIRED, HFFamily, TensorMap
from bertzoo.models.encdec import EncoderDecoder, EncoderDecoderConfig
from bertzoo.models.encoder import Encoder
from bertzoo.nn import CrossAttention, FeedForward, RelativePositionBias, RMSNorm, SelfAttention
from bertzoo.nn.adapter import has_adapters
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.variants.family import Family

# The paper's small and base (t5-small: 60M parameters, t5-base: 220M, with the 32,128-piece vocabulary);
# mini and tiny are CPU-sized (tiny for tests).
PRESETS: dict[str, dict[str, Any]] = {
    "t5-tiny": {"num_layers": 2, "num_decoder_layers": 2, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128},
    "t5-mini": {
        "num_layers": 4,
        "num_decoder_layers": 4,
        "hidden_size": 256,
        "num_heads": 4,
        "intermediate_size": 1024,
    },
    "t5-small": {
        "num_layers": 6,
        "num_decoder_layers": 6,
        "hidden_size": 512,
        "num_heads": 8,
        "intermediate_size": 2048,
        "attention_head_size": 64,
    },
    "t5-base": {
        "num_layers": 12,
        "num_decoder_layers": 12,
        "hidden_size": 768,
        "num_heads": 12,
        "intermediate_size": 3072,
        "attention_head_size": 64,
    },
}
# What every T5 shares (v1.0's layout unless a preset or override says otherwise).
DEFAULTS: dict[str, Any] = {
    "vocab_size": 32128,
    "norm": "pre",
    "norm_kind": "rms",
    "layer_norm_eps": 1e-6,
    "linear_bias": False,
    "position": "none",
    "type_vocab_size": 0,
    "embedding_norm": False,
    "pooler": False,
    "pad_token_id": None,  # no padding row: id 0 (pad) is also the decoder's start token
    "hidden_act": "relu",
    "ffn_gated": False,
    "inner_dropout": True,
    "attention_scale": 1.0,
    "relative_buckets": 32,
    "relative_max_distance": 128,
    "decoder_start_token_id": 0,
    "tie_word_embeddings": True,
    "scale_decoder_outputs": True,
    "initializer_range": 1.0,  # transformers' initializer_factor
}
PAD_ID = 0

# The model is the same for every T5 pretraining objective; the name picks the data recipe
# (`bertzoo.data.pretraining.collate_seq2seq.OBJECTIVES`), and objective_args are that collator's arguments.
OBJECTIVES = ("span_corruption", "prefix_lm", "deshuffle", "iid_mask")
DEFAULT_OBJECTIVE = "span_corruption"
# T5's vocabulary ends in 100 sentinels; a run appends them to the shards' tokenizer (`run_tokenizer`).
NUM_SENTINELS = 100
INPUT_FORMATS = ("full_sentences", "doc_sentences")  # the first is the default


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="t5", family="T5", defaults=DEFAULTS, cls=EncoderDecoderConfig)


def init_t5_weights(model: nn.Module, factor: float) -> None:
    """transformers' T5 initialisation (`T5PreTrainedModel._init_weights`): N(0, factor * s) with s =
    (d_model * d_kv) ** -0.5 for queries, d_model ** -0.5 for keys, values, the first feed-forward
    matrices and the relative bias, (heads * d_kv) ** -0.5 for attention outputs, d_ff ** -0.5 for the
    last feed-forward matrix, 1 for the word table and an own LM head; norms at `factor`."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (SelfAttention, CrossAttention)):
                inner = module.num_heads * module.head_dim
                d_model = module.out.weight.size(0)
                q = module.qkv.weight[:inner] if isinstance(module, SelfAttention) else module.q.weight
                kv = module.qkv.weight[inner:] if isinstance(module, SelfAttention) else module.kv.weight
                q.normal_(0.0, factor * (d_model * module.head_dim) ** -0.5)
                kv.normal_(0.0, factor * d_model**-0.5)
                module.out.weight.normal_(0.0, factor * inner**-0.5)
            elif isinstance(module, FeedForward):
                for linear in (module.up, module.gate):
                    if linear is not None:
                        linear.weight.normal_(0.0, factor * linear.weight.size(1) ** -0.5)
                module.down.weight.normal_(0.0, factor * module.down.weight.size(1) ** -0.5)
            elif isinstance(module, RelativePositionBias):
                d_model = model.config.hidden_size
                module.weight.normal_(0.0, factor * d_model**-0.5)
            elif isinstance(module, RMSNorm):
                module.weight.fill_(factor)
        model.word_embeddings.weight.normal_(0.0, factor)
        head = getattr(model, "lm_head", None)
        if head is not None and head.decoder.weight is not model.word_embeddings.weight:
            head.decoder.weight.normal_(0.0, factor)


def build(config: ModelConfig, objective: str = DEFAULT_OBJECTIVE, **args: Any) -> EncoderDecoderLM:
    """The pretraining module: encoder-decoder + LM head, initialised as T5 is. `args` (objective_args)
    belong to the objective's data recipe (`collator`), which checks them; the model takes none."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for T5; choose one of: {', '.join(OBJECTIVES)}")
    if not config.is_encoder_decoder:
        raise ConfigError("a T5 model has a decoder; set model.num_decoder_layers")
    model = EncoderDecoderLM(config)
    init_t5_weights(model, config.initializer_range)
    return model


def num_sentinels(cfg: Any) -> int:
    """The run's sentinel count: objective_args.num_sentinels (span corruption's), else T5's 100."""
    n = cfg.objective_args.get("num_sentinels", NUM_SENTINELS)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"objective_args.num_sentinels must be an integer >= 1, got {n!r}")
    return n


def run_tokenizer(cfg: Any, tokenizer: Any) -> Any:
    """The shards' tokenizer with T5's sentinels `<extra_id_{n-1}>` .. `<extra_id_0>` appended, so
    `<extra_id_0>` is the last id (T5's layout), whatever the objective: one vocabulary for every T5
    objective and for fine-tuning. The run saves this tokenizer with the model."""
    from bertzoo.data.pretraining.collate_seq2seq import SENTINEL_TOKEN

    n = num_sentinels(cfg)
    return tokenizer.with_special_tokens([SENTINEL_TOKEN.format(i) for i in reversed(range(n))])


def model_defaults(tokenizer: Any) -> dict[str, Any]:
    """No padding row in the word table (the pad id is the decoder's start token, which must learn)."""
    return {"pad_token_id": None, "decoder_start_token_id": tokenizer.pad_id}


def examples(cfg: Any, corpus: Any, tokenizer: Any, *, world_size: int = 1) -> Any:
    """Packed blocks of running text up to data.max_seq_len tokens (GPT's `full_sentences` recipe by
    default, or `doc_sentences`): T5 packs C4 text into fixed-length examples before noising them."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "T5")


def collator(cfg: Any, tokenizer: Any) -> Any:
    """The objective's noise (`bertzoo.data.pretraining.collate_seq2seq`) with objective_args as its arguments; the
    blocks' [CLS]/[SEP] are dropped and each input and target ends with `end_token_id`."""
    from bertzoo.data.pretraining.collate_seq2seq import end_token_id, seq2seq_collator

    objective = cfg.objective or DEFAULT_OBJECTIVE
    args = dict(cfg.objective_args)
    if objective != "span_corruption":
        args.pop("num_sentinels", None)  # the vocabulary keeps them (run_tokenizer); only this noise uses them
    return seq2seq_collator(
        objective,
        tokenizer,
        cfg.train.seed,
        eos_id=end_token_id(tokenizer),
        decoder_start_token_id=tokenizer.pad_id,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        **args,
    )


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a T5 checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return EncoderDecoderLM(config)


# --- Hugging Face interop: T5ForConditionalGeneration / T5Model / T5EncoderModel ----------------------

# (Hugging Face sublayer of a block, ours) for the sublayers every block has; `{s}` is the stack.
_ATTENTION = (
    ("layer.0.SelfAttention.o", "attention.out"),
    ("layer.0.layer_norm", "attention_residual.norm"),
)
# A decoder block's cross-attention is layer.1 and its feed-forward layer.2; an encoder's feed-forward is layer.1.
_CROSS = (
    ("layer.1.EncDecAttention.q", "cross.q"),
    ("layer.1.EncDecAttention.o", "cross.out"),
    ("layer.1.layer_norm", "cross_residual.norm"),
)


def _ffn(index: int, gated: bool) -> tuple[tuple[str, str], ...]:
    first = (("wi_0", "up"), ("wi_1", "gate")) if gated else (("wi", "up"),)
    return (
        *((f"layer.{index}.DenseReluDense.{hf}", f"ffn.{ours}") for hf, ours in (*first, ("wo", "down"))),
        (f"layer.{index}.layer_norm", "ffn_residual.norm"),
    )


def _stack(side: str, layers: int, config: ModelConfig) -> TensorMap:
    """The TensorMap of one stack (`side`: encoder or decoder)."""
    decoder = side == "decoder"
    sublayers = (*_ATTENTION, *(_CROSS if decoder else ()), *_ffn(2 if decoder else 1, config.ffn_gated))
    pairs: TensorMap = []
    for i in range(layers):
        hf_block, ours = f"{side}.block.{i}", f"{side}.stack.layers.{i}"
        attention = f"{hf_block}.layer.0.SelfAttention"
        pairs.append((tuple(f"{attention}.{n}.weight" for n in "qkv"), f"{ours}.attention.qkv.weight"))
        if decoder:
            cross = f"{hf_block}.layer.1.EncDecAttention"
            pairs.append(((f"{cross}.k.weight", f"{cross}.v.weight"), f"{ours}.cross.kv.weight"))
        pairs.extend(((f"{hf_block}.{hf}.weight",), f"{ours}.{mine}.weight") for hf, mine in sublayers)
    pairs.append(
        ((f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",), f"{side}.relative_bias.weight")
    )
    pairs.append(((f"{side}.final_layer_norm.weight",), f"{side}.final_norm.weight"))
    return pairs


def tensor_map(config: ModelConfig, hf_state: Mapping[str, torch.Tensor] | None = None) -> TensorMap:
    """Every T5 tensor for `config`, Hugging Face keys to ours. On import (`hf_state` given) the head's
    tying follows the checkpoint, as in transformers 5.x: an `lm_head.weight` that differs from the word
    table is an own head, anything else (absent or equal) the tied one."""
    if hf_state is not None:
        head, word = hf_state.get("lm_head.weight"), hf_state.get("shared.weight")
        config.tie_word_embeddings = head is None or (word is not None and torch.equal(head, word))
    pairs: TensorMap = [(("shared.weight",), "encoder.embeddings.word.weight")]
    pairs += _stack("encoder", config.num_layers, config)
    pairs += _stack("decoder", config.num_decoder_layers, config)
    if not config.tie_word_embeddings:
        pairs.append((("lm_head.weight",), "lm_head.decoder.weight"))
    return pairs


# Hugging Face T5Config key -> (ModelConfig field, kind, default: T5Config's).
T5_CONFIG_FIELDS: dict[str, tuple[str, str, Any]] = {
    "vocab_size": ("vocab_size", "size", REQUIRED),
    "d_model": ("hidden_size", "size", REQUIRED),
    "num_layers": ("num_layers", "size", REQUIRED),
    "num_heads": ("num_heads", "size", REQUIRED),
    "d_ff": ("intermediate_size", "size", REQUIRED),
    "d_kv": ("attention_head_size", "size", 64),
    "relative_attention_num_buckets": ("relative_buckets", "size", 32),
    "relative_attention_max_distance": ("relative_max_distance", "size", 128),
    "dropout_rate": ("dropout", "probability", 0.1),
    "layer_norm_epsilon": ("layer_norm_eps", "positive", 1e-6),
    "initializer_factor": ("initializer_range", "non-negative", 1.0),
}


TABLE_FIELDS = frozenset(ours for ours, _, _ in T5_CONFIG_FIELDS.values())


def _read_fields(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The T5 layout, the feed-forward kind, the decoder's depth and start, the head's output scaling."""
    proj = hf_keys.hf_value(raw, "feed_forward_proj", "string", "relu")
    gated, _, name = proj.rpartition("-")
    if gated not in ("", "gated") or name not in hf_keys.HF_ACTIVATIONS:
        raise CheckpointError(
            f"config.json: feed_forward_proj={proj!r} is not supported; supported: relu, gelu, gated-gelu, gated-relu"
        )
    # transformers reads "gated-gelu" as the tanh approximation (gelu_new), plain "gelu" as exact.
    act = "gelu_tanh" if proj == "gated-gelu" else hf_keys.HF_ACTIVATIONS[name]
    pad = hf_keys.hf_value(raw, "pad_token_id", "count", PAD_ID)
    start = hf_keys.hf_value(raw, "decoder_start_token_id", "count", pad)
    if start >= fields["vocab_size"]:
        raise CheckpointError(f"config.json: decoder_start_token_id={start} is outside the vocabulary; fix the file")
    tie = hf_keys.hf_value(raw, "tie_word_embeddings", "bool", True)
    return {
        **{k: v for k, v in DEFAULTS.items() if k not in TABLE_FIELDS},
        "num_decoder_layers": hf_keys.hf_value(raw, "num_decoder_layers", "size", fields["num_layers"]),
        "attention_dropout": fields["dropout"],
        "hidden_act": act,
        "ffn_gated": bool(gated),
        "decoder_start_token_id": start,
        # transformers 5.x writes scale_decoder_outputs; before it, a tied head meant a scaled one.
        "scale_decoder_outputs": hf_keys.hf_value(raw, "scale_decoder_outputs", "bool", tie),
        "tie_word_embeddings": tie,  # the checkpoint's tensors decide on import (tensor_map)
    }


HF = HFFamily(
    model_type="t5",
    variant="t5",
    base="",
    encoder_keys=(),
    qkv=None,
    # Copies of the word table (older checkpoints store them) and a bias transformers ignores.
    tied_copies=frozenset(
        {
            "encoder.embed_tokens.weight",
            "decoder.embed_tokens.weight",
            "lm_head.weight",
            "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
        }
    ),
    read_fields=_read_fields,
    architectures={"BertModel": "T5EncoderModel", "T5ForConditionalGeneration": "T5ForConditionalGeneration"},
    config_fields=T5_CONFIG_FIELDS,
    pretraining_classes=frozenset({"T5ForConditionalGeneration"}),
    tensor_map=tensor_map,
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face T5Config dict; CheckpointError listing what transformers' T5 cannot hold."""
    problems = []
    for name, want in (
        ("norm", "pre"),
        ("norm_kind", "rms"),
        ("linear_bias", False),
        ("position", "none"),
        ("embedding_norm", False),
        ("type_vocab_size", 0),
        ("share", "none"),
        ("causal", False),
        ("pooler", False),
        ("attention_scale", 1.0),
        ("position_offset", 0),
    ):
        if getattr(config, name) != want:
            problems.append(f"{name}={getattr(config, name)!r} (it has {want!r})")
    if not config.relative_buckets:
        problems.append("no relative position bias (relative_buckets=0)")
    if config.embedding_size and config.embedding_size != config.hidden_size:
        problems.append(f"factorized embeddings (embedding_size={config.embedding_size})")
    if not config.is_encoder_decoder:
        problems.append("no decoder (num_decoder_layers=0)")
    if config.ffn_gated and config.hidden_act == "gelu":
        problems.append("a gated exact GELU (its gated-gelu is the tanh approximation)")
    if problems:
        raise CheckpointError(
            f"cannot export to the Hugging Face 't5' architecture: the model has {'; '.join(problems)}; "
            "keep the bertzoo format (save_pretrained) for this model"
        )
    act = hf_keys.OUR_ACTIVATIONS[config.hidden_act]
    return {
        "model_type": "t5",
        "architectures": [hf_keys.hf_architecture(HF, a) for a in architectures or ["T5ForConditionalGeneration"]],
        "vocab_size": config.vocab_size,
        "d_model": config.hidden_size,
        "d_kv": config.head_dim,
        "d_ff": config.intermediate_size,
        "num_layers": config.num_layers,
        "num_decoder_layers": config.num_decoder_layers,
        "num_heads": config.num_heads,
        "relative_attention_num_buckets": config.relative_buckets,
        "relative_attention_max_distance": config.relative_max_distance,
        "dropout_rate": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_factor": config.initializer_range,
        "feed_forward_proj": ("gated-gelu" if act == "gelu_new" else f"gated-{act}") if config.ffn_gated else act,
        "is_encoder_decoder": True,
        "pad_token_id": PAD_ID,
        "decoder_start_token_id": config.decoder_start_token_id,
        # 4.x reads both from tie_word_embeddings; 5.x ties by the tensors and scales by scale_decoder_outputs.
        "tie_word_embeddings": config.tie_word_embeddings,
        "scale_decoder_outputs": config.scale_decoder_outputs,
    }


def export_hf(module: nn.Module, directory: str | Path) -> Path | None:
    """The exporter's hook: an EncoderDecoderLM (or a bare EncoderDecoder, whose head would be the tied
    one) as T5ForConditionalGeneration, a T5 `Encoder` as T5EncoderModel. None: not a T5 module."""
    if isinstance(module, EncoderDecoder):
        state, arch = module.state_dict(), "T5ForConditionalGeneration"
        if not isinstance(module, EncoderDecoderLM) and not module.config.tie_word_embeddings:
            raise CheckpointError(
                "the encoder-decoder has no LM head of its own to export; export its EncoderDecoderLM"
            )
    elif isinstance(module, Encoder):
        state, arch = {f"encoder.{k}": v for k, v in module.state_dict().items()}, "BertModel"
    else:
        return None
    if has_adapters(module):
        raise CheckpointError(
            "the model has adapters, which the Hugging Face T5 architecture has no place for; "
            "save it with save_pretrained (bertzoo format) instead"
        )
    config = module.config
    hf_config = config_to_hf(config, [arch])
    hf_state = hf_keys.state_to_hf(state, config, HF)
    return io.write_model_dir(directory, hf_state, hf_config)


FAMILY = Family(
    name="t5",
    title="T5",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    config_class=EncoderDecoderConfig,
    defaults=DEFAULTS,
    pretraining_classes=(EncoderDecoderLM, EncoderDecoder),
    pretraining_model=pretraining_model,
    collator=collator,
    model_defaults=model_defaults,
    run_tokenizer=run_tokenizer,
    export_hf=export_hf,
    attention="encoder-decoder",
    ends_sequences=True,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
