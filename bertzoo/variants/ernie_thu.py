"""ERNIE from Tsinghua (Zhang et al. 2019, "ERNIE: Enhanced Language Representation with Informative
Entities"): BERT whose top layers fuse knowledge-graph entity vectors (`bertzoo.models.ernie_thu.ErnieThu`), pretrained
with masked LM (+ NSP) and the denoising entity auto-encoder (`bertzoo.objectives.knowledge.KnowledgeLM`).

* Entities: `objective_args.entities` names a `bertzoo kg-embed` directory (TransE vectors of WordNet, ...,
  docs/knowledge.md). A fresh model copies its table into a frozen input table and sets `model.num_entities`;
  a saved checkpoint holds the table in its weights (config.json has num_entities > 0) and the entity list
  beside them (entities.json, the lexicon task text is linked with).
* Data: BERT's examples (single segments for mlm+dea, NSP pairs for mlm+nsp+dea) with the shards' entity
  links (`bertzoo.knowledge.linking`: each mention's entity at its first token), token masking as BERT's and
  the dEA corruption of the alignments (`bertzoo.data.pretraining.collate_entities`): `objective_args.entity_replace`
  (0.05) and `entity_mask` (0.15) of the aligned positions get another entity or none.
* Fine-tuning: the backbone is an `ErnieThu` (an Encoder subclass); `bertzoo finetune`, `evaluate` and
  `predict` link task batches with the model's own entity list (`link_task_entities`, its `Family.prepare_task`:
  `extra["entity_ids"]` feeds the entity stream); batches without links run the knowledge layers as BERT layers.
* Hugging Face has no ERNIE-THU: an export writes the token stream as BERT (BertModel / BertForMaskedLM /
  BertForPreTraining) with a warning, which equals the model run without entities.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.variants.bert as bert
from bertzoo.config import ModelConfig, PretrainConfig, preset_config
from bertzoo.data.pretraining.collate_entities import ENTITY_MASK, ENTITY_REPLACE, EntityMaskingCollator, check_shares
from bertzoo.errors import ConfigError
from bertzoo.io import read_entities
from bertzoo.models.ernie_thu import ErnieThu, ErnieThuConfig
from bertzoo.objectives.knowledge import KnowledgeLM
from bertzoo.tasks.base import link_entities
from bertzoo.variants.family import Family

# The paper's base model: 6 T-encoder + 6 K-encoder layers of BERT-base, 100-wide TransE entity vectors with 4
# heads. mini (BERT-mini's shape, the top 2 of 4 layers fusing) trains on a CPU; tiny (1 + 1) is for tests. The
# knowledge layers are the top half of the stack unless model.knowledge_layers says otherwise (`model_config`).
PRESETS: dict[str, dict[str, Any]] = {
    "ernie-thu-tiny": {
        "num_layers": 2,
        "hidden_size": 128,
        "num_heads": 2,
        "intermediate_size": 512,
    },
    "ernie-thu-mini": {
        "num_layers": 4,
        "hidden_size": 256,
        "num_heads": 4,
        "intermediate_size": 1024,
    },
    "ernie-thu-base": {
        "num_layers": 12,
        "hidden_size": 768,
        "num_heads": 12,
        "intermediate_size": 3072,
    },
}
DEFAULTS: dict[str, Any] = {"entity_size": 100, "entity_heads": 4}

# "mlm" and "mlm+nsp" are the paper's "w/o dEA" ablation: the entities are fused, uncorrupted, and not predicted.
OBJECTIVES = ("mlm+dea", "mlm+nsp+dea", "mlm", "mlm+nsp")
DEFAULT_OBJECTIVE = "mlm+dea"
ARGS = ("entities", "entity_replace", "entity_mask")


def model_config(spec: dict[str, Any]) -> ModelConfig:
    """A ModelConfig from `{"preset": name, **overrides}` (or plain fields); without `knowledge_layers` the top
    half of the layers (at least one) fuse entities, the paper's 6 of 12."""
    spec = dict(spec)
    if "knowledge_layers" not in spec:
        layers = spec.get("num_layers", PRESETS.get(spec.get("preset"), {}).get("num_layers", ModelConfig.num_layers))
        if isinstance(layers, int) and layers > 0:
            spec["knowledge_layers"] = max(1, layers // 2)
    return preset_config(spec, PRESETS, variant="ernie-thu", family="ERNIE-THU", defaults=DEFAULTS, cls=ErnieThuConfig)


def _uses_dea(objective: str) -> bool:
    return objective.endswith("+dea")


def _sentence_task(objective: str) -> str | None:
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"objective={objective!r} is not available for ERNIE-THU; choose one of: {', '.join(OBJECTIVES)}"
        )
    return "nsp" if "+nsp" in objective else None


def _entities_dir(entities: Any) -> Path:
    """The kg-embed directory of objective_args.entities, which the data recipe needs."""
    if not entities:
        raise ConfigError(
            "ERNIE-THU needs objective_args.entities: a `bertzoo kg-embed` directory (e.g. runs/kg/wordnet)"
        )
    return Path(entities)


def build(
    config: ModelConfig,
    objective: str = DEFAULT_OBJECTIVE,
    entities: str | None = None,
    entity_replace: float = ENTITY_REPLACE,
    entity_mask: float = ENTITY_MASK,
) -> KnowledgeLM:
    """The pretraining module, its frozen entity table read from the kg-embed directory `entities` (its size
    sets num_entities; its width must be model.entity_size). The shares are validated here and used by the
    collator. Without `entities` the table is random (config.num_entities rows) or absent (0): a module to load
    weights into, or one that never sees an entity; a pretraining run's data recipe refuses to go without."""
    from bertzoo.knowledge.graphs import load_entity_embeddings

    sentence_task = _sentence_task(objective)
    check_shares(entity_replace, entity_mask)
    if not entities:
        return KnowledgeLM(ErnieThu(config), sentence_task=sentence_task, dea=_uses_dea(objective))
    directory = Path(entities)
    table, _, entity_list = load_entity_embeddings(directory)
    count, width = table.shape
    if width != config.entity_size:
        raise ConfigError(
            f"the entity vectors in {directory} are {width} wide but model.entity_size={config.entity_size}; "
            f"set model.entity_size: {width}"
        )
    if config.num_entities not in (0, count):
        raise ConfigError(
            f"model.num_entities={config.num_entities} but {directory} holds {count} entities; remove "
            "model.num_entities (it follows the table)"
        )
    config = dataclasses.replace(config, num_entities=int(count))
    model = KnowledgeLM(ErnieThu(config), sentence_task=sentence_task, dea=_uses_dea(objective))
    model.encoder.set_entity_table(table)
    model.encoder.set_side_data("entities", entity_list)  # saved beside the weights: fine-tuning links with it
    return model


def pretraining_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The (empty) module an ERNIE-THU pretraining checkpoint loads into (bertzoo.loading.load_pretraining)."""
    objective = raw.get("objective") or (
        ("mlm+nsp" if "nsp_head.classifier.weight" in state else "mlm")
        + ("+dea" if any(k.startswith("dea_head.") for k in state) else "")
    )
    return KnowledgeLM(ErnieThu(config), sentence_task=_sentence_task(objective), dea=_uses_dea(objective))


def _args(cfg: PretrainConfig) -> dict[str, Any]:
    unknown = set(cfg.objective_args) - set(ARGS)
    if unknown:
        raise ConfigError(f"unknown ERNIE-THU objective_args {sorted(unknown)}; use {', '.join(ARGS)}")
    return cfg.objective_args


def examples(cfg: PretrainConfig, corpus, tokenizer, *, world_size: int = 1):
    """BERT's examples (NSP pairs with mlm+nsp+dea, else single segments) with their `entity_ids`: the shards'
    entity links to the KG of objective_args.entities, linked once and stored beside the shards."""
    from bertzoo.knowledge.linking import EntityDataset, entity_sidecar

    nsp = _sentence_task(cfg.objective or DEFAULT_OBJECTIVE) is not None
    inner = bert.examples(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, nsp=nsp)), corpus, tokenizer)
    return EntityDataset(inner, entity_sidecar(corpus, _entities_dir(_args(cfg).get("entities"))))


def collator(cfg: PretrainConfig, tokenizer) -> EntityMaskingCollator:
    """BERT's token masking plus the dEA corruption of the entity alignments (none without dEA: the paper's
    "w/o dEA" ablation fuses every aligned entity as it is)."""
    args = _args(cfg)
    dea = _uses_dea(cfg.objective or DEFAULT_OBJECTIVE)
    if not dea and any(args.get(k) for k in ("entity_replace", "entity_mask")):
        raise ConfigError(
            f"objective_args.entity_replace and entity_mask corrupt entities for dEA, which objective="
            f"{cfg.objective!r} does not have; set both to 0 (or remove them) or use objective mlm+dea"
        )
    if cfg.data.masking.strategy != "token":
        raise ConfigError(
            f"ERNIE-THU masks tokens as BERT does; data.masking.strategy={cfg.data.masking.strategy!r} is not "
            "available for it (remove it)"
        )
    count = len(read_entities(_entities_dir(args.get("entities")), ConfigError)[0]["entities"])
    return EntityMaskingCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        num_entities=count,
        entity_replace=args.get("entity_replace", ENTITY_REPLACE) if dea else 0.0,
        entity_mask=args.get("entity_mask", ENTITY_MASK) if dea else 0.0,
    )


# --- Hugging Face: no ERNIE-THU class; the token stream exports as BERT ----------------------------

# BERT's names (`HF.variant` is "bert", so importing a BertModel stays BERT, as for SpanBERT); the entity
# modules have no Hugging Face key and are left out.
HF = bert.HF


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """BERT's config for the token stream, with a warning that the entity fusion is dropped."""
    if config.knowledge_layers or config.num_entities:
        warnings.warn(
            "transformers has no ERNIE-THU: exporting the token stream as BERT; the entity table, the entity "
            "attention and fusion weights and the dEA head are dropped (the export computes the model without "
            "entity input)",
            stacklevel=2,
        )
    return bert.config_to_hf(config, architectures)


def link_task_entities(task: Any, encoder: nn.Module, tokenizer: Any) -> bool:
    """Link the task's batches to the backbone's own knowledge graph when it fuses entities and knows its entity
    list (an ERNIE-THU model pretrained with one: `ErnieThu.entity_list`, kept beside its weights). Returns
    whether it did; a backbone without either runs as it is (ERNIE-THU's knowledge layers as BERT layers)."""
    if not encoder.config.knowledge_layers or not encoder.config.num_entities:
        return False
    entity_list = getattr(encoder, "entity_list", None)
    if entity_list is None:
        warnings.warn(
            "the model has an entity table but no entities.json beside its weights, so task text is not linked and "
            "its knowledge layers run as BERT layers; copy the entities.json of its kg-embed directory into the "
            "model directory",
            stacklevel=2,
        )
        return False
    from bertzoo.knowledge.linking import EntityLinker

    link_entities(task, EntityLinker(tokenizer, entity_list))
    return True


FAMILY = Family(
    name="ernie-thu",
    title="ERNIE-THU",
    presets=PRESETS,
    model_config=model_config,
    objectives=OBJECTIVES,
    default_objective=DEFAULT_OBJECTIVE,
    build=build,
    examples=examples,
    config_class=ErnieThuConfig,
    defaults=DEFAULTS,
    encoder_class=ErnieThu,
    pretraining_classes=(KnowledgeLM,),
    pretraining_model=pretraining_model,
    collator=collator,
    prepare_task=link_task_entities,
    hf=(HF,),
    config_to_hf=config_to_hf,
)
