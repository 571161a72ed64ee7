"""ERNIE (Baidu; Sun et al. 2019) knowledge masking, and ERNIE 2.0's task embedding and continual
multi-task pretraining.

* ERNIE 1.0: BERT's encoder trained with masked LM whose masking moves through three stages:
  basic-level (single tokens: characters for Chinese), phrase-level (phrases and words masked
  whole) and entity-level (named entities masked whole). The default schedule spends a third of
  training on each (`DEFAULT_STAGES`); `objective_args.stages` changes it, e.g.
  `[{strategy: token, start: 0}, {strategy: entity, start: 0.5}]`.
* ERNIE 2.0: a task embedding (`model.task_type_vocab_size`) and `objective_args.tasks`, a list of
  tasks introduced one after another (`start` = fraction of training); once introduced a task stays
  in the mix, so earlier tasks are replayed while new ones are learned. Each example is assigned one
  active task (uniformly, keyed by (seed, epoch, index)) and carries its task id. The tasks
  available here are masked-LM tasks with different masking (token, whole_word, phrase, entity,
  span); ERNIE 2.0's sentence- and document-level tasks are not implemented.

Word, phrase and entity boundaries come from the shards' unit flags (`bertzoo.data.segment`):
`data.lexicon` names the annotation source (`builtin:peoples-daily` gold tags, a `word/TAG` file, a
lexicon, `jieba`) and is applied (and stored beside the shards) on first use; empty = jieba when
installed, else characters. The stage of an example is a function of its (epoch, index) and the
run's batch geometry, so resumed runs continue the schedule exactly.

Hugging Face: model_type "ernie" (ErnieModel / ErnieForPreTraining / ErnieForMaskedLM), with the
task embedding when `use_task_id` is set.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from bertzoo.config import ModelConfig, PretrainConfig, preset_config, resolve_batching
from bertzoo.convert import normalise_hf_keys
from bertzoo.errors import ConfigError
from bertzoo.model import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.train.distributed import dist_info
from bertzoo.variants import bert

# BERT-base shapes (the released ERNIE 1.0 Chinese model has an 18k vocabulary and 513 positions;
# the vocabulary size here always comes from the tokenizer). ERNIE 2.0 adds a 3-row task embedding.
PRESETS: dict[str, dict[str, Any]] = {
    "ernie-tiny": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512},
    "ernie-mini": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
    "ernie-1.0-base": {
        "num_layers": 12,
        "hidden_size": 768,
        "num_heads": 12,
        "intermediate_size": 3072,
        "max_position": 513,
        "hidden_act": "relu",
    },
    "ernie-2.0-mini": {
        "num_layers": 4,
        "hidden_size": 256,
        "num_heads": 4,
        "intermediate_size": 1024,
        "task_type_vocab_size": 3,
    },
    "ernie-2.0-base": {
        "num_layers": 12,
        "hidden_size": 768,
        "num_heads": 12,
        "intermediate_size": 3072,
        "task_type_vocab_size": 3,
    },
    "ernie-2.0-large": {
        "num_layers": 24,
        "hidden_size": 1024,
        "num_heads": 16,
        "intermediate_size": 4096,
        "task_type_vocab_size": 3,
    },
}

OBJECTIVES = ("mlm", "mlm+nsp")
DEFAULT_OBJECTIVE = "mlm"
HF_MODEL_TYPE = "ernie"
# ERNIE 1.0's three stages, a third of training each.
DEFAULT_STAGES: list[dict[str, Any]] = [
    {"strategy": "token", "start": 0.0},
    {"strategy": "phrase", "start": 1 / 3},
    {"strategy": "entity", "start": 2 / 3},
]


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields)."""
    return preset_config(spec, PRESETS, variant="ernie", family="ERNIE")


def schedule(objective_args: dict[str, Any], default_strategy: str = "token"):
    """The masking schedule: `tasks` (ERNIE 2.0, replayed), else `stages`, else a single stage when
    `data.masking.strategy` is set to something other than token, else `DEFAULT_STAGES`."""
    from bertzoo.data.unit_collate import Schedule

    unknown = set(objective_args) - {"stages", "tasks"}
    if unknown:
        raise ConfigError(f"unknown ERNIE objective_args {sorted(unknown)}; use stages or tasks")
    if objective_args.get("tasks"):
        return Schedule.from_spec(objective_args["tasks"], replay=True)
    if objective_args.get("stages"):
        return Schedule.from_spec(objective_args["stages"])
    if default_strategy != "token":
        return Schedule.from_spec([{"strategy": default_strategy, "start": 0.0}])
    return Schedule.from_spec(DEFAULT_STAGES)


def build(
    config: ModelConfig,
    objective: str = DEFAULT_OBJECTIVE,
    stages: list[Any] | None = None,
    tasks: list[Any] | None = None,
) -> MaskedLM:
    """The pretraining module: encoder (+ task embedding) + MLM head (+ NSP head). `stages`/`tasks`
    are validated here (they drive the data side: `examples`)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not available for ERNIE; choose one of: {', '.join(OBJECTIVES)}")
    plan = schedule({"stages": stages, "tasks": tasks})
    if plan.replay:
        top = max(s.task_id for s in plan.stages)
        if top >= config.task_type_vocab_size:
            raise ConfigError(
                f"objective_args.tasks uses task id {top} but model.task_type_vocab_size="
                f"{config.task_type_vocab_size}; set it to at least {top + 1} (e.g. preset ernie-2.0-mini)"
            )
    return MaskedLM(Encoder(config), sentence_task="nsp" if objective == "mlm+nsp" else None)


def unit_flags(corpus, annotations: str):
    """The shards' unit flags for `annotations` (data.lexicon), computed and stored on first use."""
    from bertzoo.data.segment import AnnotationMismatch, annotate_shards, load_unit_flags

    flags = load_unit_flags(corpus)
    wanted = annotations or "auto"
    if flags is not None and (wanted == "auto" or flags.annotations == wanted):
        return flags
    try:
        return annotate_shards(corpus, wanted)
    except AnnotationMismatch as exc:
        # Gold annotations fit only shards made from that corpus (e.g. not separate held-out shards).
        warnings.warn(f"{exc}; segmenting {corpus.path} automatically instead", stacklevel=2)
        return annotate_shards(corpus, "auto")


def examples(cfg: PretrainConfig, corpus, tokenizer):
    """Single segments (NSP pairs with objective mlm+nsp) with unit flags and each example's stage."""
    from bertzoo.data.examples import NspDataset
    from bertzoo.data.unit_collate import UnitDataset

    objective = cfg.objective or DEFAULT_OBJECTIVE
    inner = NspDataset(
        corpus,
        tokenizer,
        max_seq_len=cfg.data.max_seq_len,
        seed=cfg.train.seed,
        short_seq_prob=cfg.data.short_seq_prob,
        nsp_random_prob=cfg.data.nsp_random_prob,
        nsp=objective == "mlm+nsp",
    )
    world = dist_info().world_size
    train_cfg = resolve_batching(cfg.train, world)
    return UnitDataset(
        inner,
        unit_flags(corpus, cfg.data.lexicon),
        schedule=schedule(cfg.objective_args, cfg.data.masking.strategy),
        seed=cfg.train.seed,
        global_batch=cfg.train.batch_size * world,
        grad_accum=train_cfg.grad_accum,
        max_steps=cfg.train.max_steps,
        epochs=cfg.train.epochs,
    )


def collator(cfg: PretrainConfig, tokenizer):
    """Unit masking; each example's strategy comes from the schedule (examples without one, such as
    held-out evaluation batches, use `data.masking.strategy`)."""
    from bertzoo.data.unit_collate import UnitMaskingCollator

    return UnitMaskingCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        strategy=cfg.data.masking.strategy,
    )


# --- Hugging Face interop: BERT's key map under the `ernie.` prefix, plus the task embedding -------

_TASK_KEY = ("embeddings.task_type_embeddings.weight", "encoder.embeddings.task_type.weight")


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face ErnieConfig dict."""
    config = bert.config_from_hf(raw)
    config.variant = "ernie"
    config.task_type_vocab_size = int(raw.get("task_type_vocab_size", 3)) if raw.get("use_task_id") else 0
    return config


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face ErnieConfig dict (architectures named Bert... become Ernie...)."""
    out = bert.config_to_hf(config, [a.replace("Bert", "Ernie", 1) for a in architectures or ["ErnieModel"]])
    out["model_type"] = "ernie"
    out["use_task_id"] = config.task_type_vocab_size > 0
    out["task_type_vocab_size"] = config.task_type_vocab_size or 3
    return out


def state_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF ERNIE tensors -> bertzoo keys; returns (state, unused HF keys)."""
    src = normalise_hf_keys(state, prefix="ernie.")
    out, unused = bert.state_from_hf(src, config)
    if _TASK_KEY[0] in src:
        out[_TASK_KEY[1]] = src[_TASK_KEY[0]]
        unused = [k for k in unused if k != _TASK_KEY[0]]
    return out, unused


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys -> HF ERNIE keys (`ernie.` where BERT heads models use `bert.`)."""
    prefix = "ernie." if prefix == "bert." else prefix
    out = bert.state_to_hf(state, config, prefix=prefix)
    if _TASK_KEY[1] in state:
        out[prefix + _TASK_KEY[0]] = state[_TASK_KEY[1]].contiguous()
    return out
