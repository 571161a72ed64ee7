"""ELMo (Peters et al. 2018, "Deep contextualized word representations"): a character CNN under forward and
backward LSTM language models (`bertzoo.models.elmo.Elmo`), pretrained with the biLM loss
(`bertzoo.objectives.bilm.BidirectionalLM`: the mean of the next-token and previous-token cross-entropies,
one softmax for both directions).

Its sizes are `ElmoConfig`'s fields (char_filters, max_chars, char_embedding_size, highway_layers,
lstm_size) with hidden_size as the LSTM projection and num_layers the LSTM layers of each direction; the
attention fields are not read. The character table is not a setting: it is spelled from the run's
vocabulary (`use_tokenizer`) and saved with the weights as a buffer.

Data: GPT's packed blocks of running text (`full_sentences`: whole sentences in corpus order up to
max_seq_len, a [SEP] at each document end), unmasked. Each direction predicts every token from one side
only, so nothing needs hiding and every token of a block is a target of both LMs (all but the last for the
forward LM, all but the first for the backward one); packing keeps the contexts long and the rows full,
which matters more for an LSTM than for attention because it runs over padding too. The paper trained on
shuffled sentences of the 1B Word Benchmark read as a stream in fixed windows, which packed blocks are
close to (without carrying LSTM states across batches). No Hugging Face counterpart.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.config import FinetuneConfig, ModelConfig, PretrainConfig, TechniqueConfig, preset_config
from bertzoo.errors import ConfigError
from bertzoo.models.elmo import Elmo, ElmoConfig, char_table
from bertzoo.objectives.bilm import BidirectionalLM
from bertzoo.variants.family import Family

# The paper's (and AllenNLP's "original") sizes: 2048 filters, two highway layers, LSTM 4096 -> 512;
# 93.6M parameters without the softmax. mini trains on a CPU; tiny is for tests. Pretraining sets
# vocab_size from the tokenizer.
PRESETS: dict[str, dict[str, Any]] = {
    "elmo": {
        "char_filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "highway_layers": 2,
        "lstm_size": 4096,
        "hidden_size": 512,
    },
    "elmo-mini": {
        "char_filters": [[1, 16], [2, 32], [3, 64], [4, 64], [5, 80]],
        "highway_layers": 1,
        "lstm_size": 512,
        "hidden_size": 128,
    },
    "elmo-tiny": {
        "vocab_size": 64,
        "max_chars": 12,
        "char_embedding_size": 8,
        "char_filters": [[1, 8], [2, 8], [3, 16]],
        "highway_layers": 1,
        "lstm_size": 32,
        "hidden_size": 16,
        "dropout": 0.0,
    },
}
# What every ELMo shares: 50 characters of 16-wide embeddings, two LSTM layers per direction, dropout 0.1;
# no attention, positions, segments or pooler (num_heads 1 only satisfies the Transformer fields' checks).
DEFAULTS: dict[str, Any] = {
    "max_chars": 50,
    "char_embedding_size": 16,
    "num_layers": 2,
    "dropout": 0.1,
    "num_heads": 1,
    "position": "none",
    "type_vocab_size": 0,
    "embedding_norm": False,
    "pooler": False,
}

OBJECTIVES = ("bilm",)
DEFAULT_OBJECTIVE = "bilm"


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="elmo", family="ELMo", defaults=DEFAULTS, cls=ElmoConfig)


def build(config: ModelConfig, objective: str = DEFAULT_OBJECTIVE, **args: Any) -> BidirectionalLM:
    """The pretraining module: ELMo + the biLM loss. Its character table is zeros until `use_tokenizer`
    (or a checkpoint's weights) fills it."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for ELMo; choose one of: {', '.join(OBJECTIVES)}")
    if args:
        raise ConfigError(f"ELMo takes no objective_args (got {', '.join(sorted(args))}); remove them")
    return BidirectionalLM(Elmo(config))


def use_tokenizer(module: BidirectionalLM | Elmo, tokenizer) -> None:
    """Spell the run's vocabulary into the model's character table (`bertzoo.models.elmo.char_table`): of a pretraining
    module, or of a bare Elmo a fine-tuning run builds from `model_config` (random init)."""
    elmo = module if isinstance(module, Elmo) else module.encoder
    with torch.no_grad():
        elmo.char_ids.copy_(char_table(tokenizer.vocab_list(), elmo.config.max_chars))


def check_finetune(cfg: FinetuneConfig) -> None:
    """ConfigError for what a task cannot do on ELMo (called by bertzoo.train.finetune.build_encoder).

    Tasks read ELMo feature-based (bertzoo.tasks.base.TaskModel): the layers it hands out, mixed by
    `technique.feature_layers`. Refused here: seq2seq (it generates through a masked-LM or next-token head
    on a word table, which ELMo has not) and an explicit `technique.lm_weight` (GPT's next-token term; the
    biLM loss is not added to a task). adapter_size, layer_lr_decay and gradual_unfreezing need a
    TransformerStack and refuse in bertzoo.tasks.techniques."""
    if cfg.task == "seq2seq":
        raise ConfigError(
            "task=seq2seq generates through a token-prediction head on a word table, which ELMo has not; "
            "fine-tune ELMo on classification, token_classification, qa or multiple_choice"
        )
    if cfg.technique.lm_weight not in (0.0, TechniqueConfig.lm_weight):
        raise ConfigError(
            f"technique.lm_weight={cfg.technique.lm_weight} adds GPT's next-token loss, which ELMo (bidirectional) "
            "does not take: its biLM loss is not added to a task; remove technique.lm_weight"
        )


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module an ELMo pretraining checkpoint loads into (bertzoo.loading.load_pretraining)."""
    return BidirectionalLM(Elmo(config))


INPUT_FORMATS = ("full_sentences", "doc_sentences")  # the first is the default


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Packed blocks of running text up to max_seq_len (GPT's `full_sentences` recipe by default, or
    `doc_sentences`), every corpus token in exactly one block."""
    from bertzoo.data.pretraining.examples import one_of_formats

    return one_of_formats(cfg, corpus, tokenizer, INPUT_FORMATS, "ELMo")


def collator(cfg: PretrainConfig, tokenizer):
    """Padding without masking: both LMs' targets are the inputs (`bilm_targets` shifts them each way)."""
    from bertzoo.data.pretraining.collate_mlm import CausalLMCollator

    return CausalLMCollator(tokenizer, pad_to_multiple_of=cfg.data.pad_to_multiple_of)


FAMILY = Family(
    name="elmo",
    title="ELMo",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    config_class=ElmoConfig,
    defaults=DEFAULTS,
    encoder_class=Elmo,
    pretraining_classes=(BidirectionalLM,),
    pretraining_model=pretraining_model,
    collator=collator,
    use_tokenizer=use_tokenizer,
    check_finetune=check_finetune,
    attention=None,
)
