"""MASS (Song et al. 2019, "MASS: Masked Sequence to Sequence Pre-training for Language Generation"): an
encoder-decoder (`bertzoo.models.encdec.EncoderDecoder`) pretrained by masking one contiguous span of a sentence in
the encoder and predicting that span, left to right, with the decoder (`bertzoo.objectives.seq2seq_lm.
EncoderDecoderLM`; the noise is `bertzoo.data.pretraining.collate_seq2seq.MassCollator`).

The model is the paper's Transformer in BERT's parts (its code is XLM's): post-norm LayerNorm layers with
biases and GELU, learned absolute positions and an embedding LayerNorm, one word and position table for
both stacks, the LM head tied to the word table. The decoder reads the span's tokens shifted right, starting
with [MASK] (what the decoder sees outside the span), at their positions in the sentence
(`decoder_position_ids`), so it knows where in the sentence it writes.

`objective_args` go to the noise: `k` (span length, a fraction of the sentence in (0, 1], default 0.5, the
paper's choice, or a token count), `replace_mask` / `replace_random` (0.8 / 0.1, BERT's rule inside the
span). k = 1 is BERT's masked LM with one prediction, k = the sentence a GPT-like decoder over an empty
source (the paper's figure 3).

transformers has no MASS; BART is the closest layout (post-norm, learned positions, an embedding norm), but
keeps a position table and an embedding norm per stack, so MASS checkpoints stay in the bertzoo format.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.config import ModelConfig, preset_config
from bertzoo.errors import ConfigError
from bertzoo.models.encdec import EncoderDecoder, EncoderDecoderConfig
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.variants.family import Family

# The paper: 6 + 6 layers of 1024 (4096 feed-forward). mini and tiny are CPU-sized (tiny for tests).
PRESETS: dict[str, dict[str, Any]] = {
    "mass-tiny": {
        "num_layers": 2,
        "num_decoder_layers": 2,
        "hidden_size": 64,
        "num_heads": 4,
        "intermediate_size": 128,
    },
    "mass-mini": {
        "num_layers": 4,
        "num_decoder_layers": 4,
        "hidden_size": 256,
        "num_heads": 4,
        "intermediate_size": 1024,
    },
    "mass-base": {
        "num_layers": 6,
        "num_decoder_layers": 6,
        "hidden_size": 1024,
        "num_heads": 8,
        "intermediate_size": 4096,
    },
}
DEFAULTS: dict[str, Any] = {
    "type_vocab_size": 0,  # monolingual: no language or segment embeddings
    "pooler": False,
    "tie_word_embeddings": True,
    "scale_decoder_outputs": False,
    # [MASK] of a bertzoo WordPiece vocabulary; a pretraining run sets its tokenizer's (`model_defaults`).
    "decoder_start_token_id": 4,
}

OBJECTIVES = ("mass",)
DEFAULT_OBJECTIVE = "mass"
INPUT_FORMATS = ("full_sentences", "doc_sentences")  # the first is the default


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="mass", family="MASS", defaults=DEFAULTS, cls=EncoderDecoderConfig)


def model_defaults(tokenizer: Any) -> dict[str, Any]:
    """The decoder starts from [MASK], as in pretraining."""
    return {"decoder_start_token_id": tokenizer.mask_id}


def build(config: ModelConfig, objective: str = DEFAULT_OBJECTIVE, **args: Any) -> EncoderDecoderLM:
    """The pretraining module (BERT's initialisation). `args` belong to the noise (`collator` checks them)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for MASS; choose one of: {', '.join(OBJECTIVES)}")
    if not config.is_encoder_decoder:
        raise ConfigError("a MASS model has a decoder; set model.num_decoder_layers")
    if config.position == "none":
        raise ConfigError("MASS tells the decoder where the span lies by absolute positions; set model.position")
    return EncoderDecoderLM(config)


def examples(cfg: Any, corpus: Any, tokenizer: Any, *, world_size: int = 1) -> Any:
    """Packed blocks of running text up to data.max_seq_len (`full_sentences`, or `doc_sentences`)."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "MASS")


def collator(cfg: Any, tokenizer: Any) -> Any:
    """MASS's noise with objective_args as its arguments (k, replace_mask, replace_random)."""
    from bertzoo.data.pretraining.collate_seq2seq import seq2seq_collator

    return seq2seq_collator(
        "mass", tokenizer, cfg.train.seed, pad_to_multiple_of=cfg.data.pad_to_multiple_of, **cfg.objective_args
    )


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module a MASS checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return EncoderDecoderLM(config)


FAMILY = Family(
    name="mass",
    title="MASS",
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
    attention="encoder-decoder",
)
