"""UniLM (Dong et al. 2019, "Unified Language Model Pre-training for Natural Language Understanding and
Generation"): BERT's encoder trained as a masked LM under four self-attention masks, mixed per batch.

The data recipe is `bertzoo.data.pretraining.collate_unilm` (masks, shares, n-gram masking, segment ids): each
example is a pair of consecutive segments of one document and draws its LM type (bidirectional 1/3,
left-to-right 1/6, right-to-left 1/6, sequence-to-sequence 1/3) from (seed, epoch, index). The
objective is `MaskedLM` without a sentence-pair task; it attends by the batch's per-example pattern.

`objective_args` (all optional; the collator reads them, `build` checks them before any training):

    lm_shares   {bidirectional, left_to_right, right_to_left, seq2seq}: shares summing to 1 (paper's mix)
    segments    per_lm (default: segment ids 0/1, 2, 3, 4/5 per LM type; type_vocab_size 6) | pair (0/1)
    ngram_prob  share of masked units that are n-grams (0.2, the paper's bigram/trigram masking; 0 = BERT's)
    max_ngram   longest masked n-gram (3)

Left out from the paper: NSP for the bidirectional LM (the seq2seq and unidirectional LMs need true
continuations, so every pair here is one; RoBERTa found NSP unnecessary) and initialisation from BERT
(start from a BERT checkpoint by converting it; `segments: pair` keeps its 2 segment rows).

A UniLM checkpoint is a BERT checkpoint: Hugging Face export and import go through BERT's key map
(`BertModel`, `BertForMaskedLM`), as SpanBERT's do; a Hugging Face import is a BERT.
"""

from __future__ import annotations

from typing import Any

import bertzoo.variants.bert as bert
from bertzoo.config import ModelConfig, PretrainConfig, check_objective_args, preset_config
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.family import Family

# BERT's sizes. The paper's UniLM is BERT-large; base and the small ones are for smaller budgets.
PRESETS: dict[str, dict[str, Any]] = {
    "unilm-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "unilm-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "unilm-base": {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072},
    "unilm-large": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096},
}
# Six segment rows: the ids of segments="per_lm" (bertzoo.data.pretraining.collate_unilm.PER_LM_SEGMENT_IDS).
DEFAULTS: dict[str, Any] = {"type_vocab_size": 6}

OBJECTIVES = ("mlm",)
DEFAULT_OBJECTIVE = "mlm"
OBJECTIVE_ARGS = ("lm_shares", "segments", "ngram_prob", "max_ngram")


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields); 6 segment rows by default."""
    return preset_config(spec, PRESETS, variant="unilm", family="UniLM", defaults=DEFAULTS)


def options(args: dict[str, Any]) -> dict[str, Any]:
    """The collator's keyword arguments from `objective_args`, checked (one-line ConfigError)."""
    from bertzoo.data.pretraining.collate_unilm import SEGMENTS, check_ngrams, check_shares

    check_objective_args(args, OBJECTIVE_ARGS, "UniLM")
    segments = args.get("segments", "per_lm")
    if segments not in SEGMENTS:
        raise ConfigError(f"objective_args.segments={segments!r}; choose one of: {', '.join(SEGMENTS)}")
    ngram_prob, max_ngram = args.get("ngram_prob", 0.2), args.get("max_ngram", 3)
    check_ngrams(ngram_prob, max_ngram)
    check_shares(args.get("lm_shares"))
    return {
        "lm_shares": args.get("lm_shares"),
        "segments": segments,
        "ngram_prob": ngram_prob,
        "max_ngram": max_ngram,
    }


def build(config: ModelConfig, objective: str = DEFAULT_OBJECTIVE, **args: Any) -> MaskedLM:
    """The pretraining module: encoder + MLM head. `args` are the collator's `objective_args`, checked
    here so a bad value stops the run before any data is read."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for UniLM; choose one of: {', '.join(OBJECTIVES)}")
    if options(args)["segments"] == "per_lm" and config.type_vocab_size < 6:
        raise ConfigError(
            f"objective_args.segments=per_lm uses segment ids 0-5 but model.type_vocab_size={config.type_vocab_size}; "
            "set model.type_vocab_size: 6 or objective_args.segments: pair"
        )
    return MaskedLM(Encoder(config), sentence_task=None)


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Pairs of consecutive segments of one document, never swapped: the source and target of the
    seq2seq LM, one text for the unidirectional ones (ALBERT's plan with swap probability 0: unlike
    BERT's NSP plan, it never pairs a segment with another document's)."""
    from bertzoo.data.pretraining.examples import SopDataset

    if cfg.data.input_format:
        raise ConfigError(
            f"data.input_format={cfg.data.input_format!r}: UniLM always reads consecutive segment pairs; remove it"
        )
    return SopDataset(
        corpus,
        tokenizer,
        cfg.data.max_seq_len,
        seed=cfg.train.seed,
        short_seq_prob=cfg.data.short_seq_prob,
        swap_prob=0.0,
    )


def collator(cfg: PretrainConfig, tokenizer):
    """`UniLMCollator` with the run's masking and `objective_args`."""
    from bertzoo.data.pretraining.collate_unilm import UniLMCollator

    return UniLMCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        **options(cfg.objective_args),
    )


# --- Hugging Face interop: the BERT architecture ---------------------------------------------

# A UniLM checkpoint is a BERT checkpoint (this family is not `HF.variant`, so an import is a BERT):
# export writes BertModel / BertForMaskedLM keys and a BertConfig with its type_vocab_size.
HF = bert.HF
config_to_hf = bert.config_to_hf


FAMILY = Family(
    name="unilm",
    title="UniLM",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    defaults=DEFAULTS,
    collator=collator,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
