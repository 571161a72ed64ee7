"""ERNIE (Baidu; Sun et al. 2019) knowledge masking, and ERNIE 2.0's task embedding and continual
multi-task pretraining (Sun et al. 2020).

* ERNIE 1.0: BERT's encoder trained with masked LM whose masking moves through three stages:
  basic-level (single tokens: characters for Chinese), phrase-level (phrases and words masked
  whole) and entity-level (named entities masked whole). The default schedule spends a third of
  training on each (`DEFAULT_STAGES`); `objective_args.stages` changes it, e.g.
  `[{strategy: token, start: 0}, {strategy: entity, start: 0.5}]`.
* ERNIE 2.0: a task embedding (`model.task_type_vocab_size`) and `objective_args.tasks`, a list of
  tasks introduced one after another (`start` = fraction of training); once introduced a task stays
  in the mix, so earlier tasks are replayed while new ones are learned. Each example is assigned one
  active task (uniformly, keyed by (seed, epoch, index)) and carries its task id (its place in the
  list) in `task_type_ids`. A task is either a masking strategy (`{strategy: phrase, start: 0}`:
  token, whole_word, phrase, entity, span) or one of the paper's self-supervised tasks
  (`{task: sentence_reorder, start: 0.5}`, `bertzoo.objectives.auxiliary`): the word-aware
  `capitalization` (needs a cased tokenizer: the shards keep no raw text, so the case comes from
  the token strings) and `token_document`, the structure-aware `sentence_reorder` (into 1..m
  segments, `objective_args.reorder_segments`, default 3) and `sentence_distance`. Masked LM stays
  on every example: a task's example is masked by the entry's own `strategy`, else by one of the
  masking tasks active then, and adds its head's loss. The semantic-aware tasks (discourse
  relation, IR relevance) need labelled or search-log data and are left out.
  `bertzoo pretrain CONFIG --init MODEL` continues an ERNIE 1.0 or BERT checkpoint this way: the
  task embedding and the task heads start fresh.

Word, phrase and entity boundaries come from the shards' unit flags (`bertzoo.data.tokens.annotate`):
`data.lexicon` names the annotation source (`builtin:peoples-daily` gold tags, a `word/TAG` file, a
lexicon, `jieba`) and is applied (and stored beside the shards) on first use; empty = jieba when
installed, else characters. The stage of an example is a function of its (epoch, index) and the
run's batch geometry, so resumed runs continue the schedule exactly.

Hugging Face: model_type "ernie" (ErnieModel / ErnieForPreTraining / ErnieForMaskedLM), with the
task embedding when `use_task_id` is set (the auxiliary task heads have no Hugging Face counterpart).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.variants.bert as bert
from bertzoo.config import ModelConfig, PretrainConfig, preset_config, resolve_batching
from bertzoo.errors import ConfigError
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.auxiliary import MultiTaskLM
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.variants.family import Family, masked_lm_model

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
    from bertzoo.data.pretraining.collate_units import Schedule

    unknown = set(objective_args) - {"stages", "tasks", "reorder_segments"}
    if unknown:
        raise ConfigError(f"unknown ERNIE objective_args {sorted(unknown)}; use stages, tasks or reorder_segments")
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
    reorder_segments: int = 3,
) -> MaskedLM:
    """The pretraining module: encoder (+ task embedding) + MLM head (+ NSP head, or the heads of ERNIE 2.0's
    auxiliary tasks). `stages`/`tasks` are validated here (they drive the data side: `examples`)."""
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
    if plan.tasks:
        if objective != "mlm":
            raise ConfigError(
                f"ERNIE 2.0's tasks {', '.join(plan.tasks)} build their own inputs from single segments; "
                f"use objective mlm, not {objective}"
            )
        return MultiTaskLM(Encoder(config), plan.tasks, reorder_segments=reorder_segments)
    return MaskedLM(Encoder(config), sentence_task="nsp" if objective == "mlm+nsp" else None)


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, Any]) -> MaskedLM:
    """The empty pretraining module of an ERNIE checkpoint: with the auxiliary task heads its config.json lists,
    else BERT-like (`masked_lm_model`)."""
    if raw.get("aux_tasks"):
        return MultiTaskLM(Encoder(config), raw["aux_tasks"], reorder_segments=int(raw.get("reorder_segments", 3)))
    return masked_lm_model(raw, config, state)


def unit_flags(corpus, annotations: str):
    """The shards' unit flags for `annotations` (data.lexicon), computed and stored on first use."""
    from bertzoo.data.tokens.annotate import AnnotationMismatch, annotate_shards
    from bertzoo.data.tokens.unit_sidecar import load_unit_flags

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


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """Single segments (NSP pairs with objective mlm+nsp) with unit flags and each example's stage,
    which follows the optimizer step: hence the run's `world_size`. With auxiliary tasks in the
    schedule, their examples are rebuilt for them (`collate_tasks.TaskDataset`)."""
    from bertzoo.data.pretraining.collate_tasks import TaskDataset
    from bertzoo.data.pretraining.collate_units import UnitDataset
    from bertzoo.data.pretraining.task_examples import TaskExamples

    nsp = (cfg.objective or DEFAULT_OBJECTIVE) == "mlm+nsp"
    inner = bert.examples(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, nsp=nsp)), corpus, tokenizer)
    train_cfg = resolve_batching(cfg.train, world_size)
    plan = schedule(cfg.objective_args, cfg.data.masking.strategy)
    common: dict[str, Any] = {
        "schedule": plan,
        "seed": cfg.train.seed,
        "global_batch": cfg.train.batch_size * world_size,
        "grad_accum": train_cfg.grad_accum,
        "max_steps": cfg.train.max_steps,
        "epochs": cfg.train.epochs,
    }
    if not plan.tasks:
        return UnitDataset(inner, unit_flags(corpus, cfg.data.lexicon), **common)
    builder = TaskExamples(
        corpus,
        tokenizer,
        plan.tasks,
        max_seq_len=cfg.data.max_seq_len,
        seed=cfg.train.seed,
        reorder_segments=int(cfg.objective_args.get("reorder_segments", 3)),
    )
    return TaskDataset(inner, unit_flags(corpus, cfg.data.lexicon), builder=builder, **common)


def collator(cfg: PretrainConfig, tokenizer):
    """Unit masking; each example's strategy comes from the schedule (examples without one, such as
    held-out evaluation batches, use `data.masking.strategy`); with auxiliary tasks, their labels too."""
    from bertzoo.data.pretraining.collate_tasks import TaskCollator
    from bertzoo.data.pretraining.collate_units import UnitMaskingCollator

    common: dict[str, Any] = {
        "seed": cfg.train.seed,
        "pad_to_multiple_of": cfg.data.pad_to_multiple_of,
        "strategy": cfg.data.masking.strategy,
    }
    tasks = schedule(cfg.objective_args, cfg.data.masking.strategy).tasks
    if tasks:
        return TaskCollator(tokenizer, cfg.data.masking, tasks=tasks, **common)
    return UnitMaskingCollator(tokenizer, cfg.data.masking, **common)


# --- Hugging Face interop: BERT's key map under the `ernie.` prefix, plus the task embedding -------


def _task_embedding(raw: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """ERNIE 2.0's task embedding rows, when the checkpoint uses task ids."""
    use = hf_keys.hf_value(raw, "use_task_id", "bool", False)
    return {"task_type_vocab_size": hf_keys.hf_value(raw, "task_type_vocab_size", "size", 3) if use else 0}


HF = HFFamily(
    model_type="ernie",
    variant="ernie",
    base="ernie.",
    encoder_keys=bert.BERT_ENCODER_KEYS + (("embeddings.task_type_embeddings.weight", "embeddings.task_type.weight"),),
    qkv=bert.BERT_QKV,
    head_keys=bert.BERT_HEAD_KEYS,
    untied_decoder=bert.HF.untied_decoder,
    tied_copies=bert.HF.tied_copies,
    read_fields=_task_embedding,
    architectures={name: name.replace("Bert", "Ernie", 1) for name in hf_keys.BERT_CLASSES},
)


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face ErnieConfig dict (architectures named Bert... become Ernie...)."""
    hf_keys.check_exportable(config, "ernie")
    return hf_keys.config_to_hf(
        config,
        HF,
        architectures,
        use_task_id=config.task_type_vocab_size > 0,
        task_type_vocab_size=config.task_type_vocab_size or 3,
    )


FAMILY = Family(
    name="ernie",
    title="ERNIE",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    pretraining_classes=(MaskedLM, MultiTaskLM),
    pretraining_model=pretraining_model,
    examples=examples,
    collator=collator,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
