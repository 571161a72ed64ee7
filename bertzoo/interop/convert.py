"""Hugging Face <-> bertzoo, by family: the dispatch from a config to its variant's Hugging Face
names, and the exporters that write Hugging Face directories.

The names themselves are data in each variant (`HF`, a `bertzoo.interop.hf_keys.HFFamily`) and the code
that applies them is `bertzoo.interop.hf_keys`; this module only picks the family (by `model_type` on the
way in, by `ModelConfig.variant` on the way out). Reading directories is `bertzoo.loading`.

It sits above the variants and below the loader (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
from bertzoo.config import ModelConfig
from bertzoo.errors import CheckpointError
from bertzoo.interop.hf_keys import is_hf_config
from bertzoo.interop.model_card import write_model_card
from bertzoo.models.encoder import Encoder
from bertzoo.nn.adapter import has_adapters
from bertzoo.variants import config_class, get_variant, hf_family, hf_family_of, hf_variant

__all__ = [
    "HF_TASK_HEADS",
    "config_from_hf",
    "config_to_hf",
    "export_finetuned_hf",
    "export_hf",
    "find_head",
    "hf_task_of",
    "is_hf_config",
    "state_from_hf",
    "state_to_hf",
]


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a Hugging Face config dict (its `model_type` picks the family); any missing or
    ill-typed field is a CheckpointError naming it."""
    family = hf_family(raw.get("model_type"))
    return hf_keys.config_from_hf(raw, family, config_class(family.variant))


def config_to_hf(config: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    """A Hugging Face config dict for an exported bertzoo model."""
    return hf_variant(config.variant).config_to_hf(config, architectures)


def state_from_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF tensors -> bertzoo keys (`encoder.` prefix for the backbone, heads by objective).
    Returns (state, HF keys that were not used)."""
    return hf_keys.state_from_hf(state, config, hf_family_of(config))


def state_to_hf(state: dict[str, torch.Tensor], config: ModelConfig, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """bertzoo keys -> HF keys; `prefix` is the base-model prefix ("bert." for heads models, "" for the base)."""
    return hf_keys.state_to_hf(state, config, hf_family_of(config), prefix=prefix)


def _write(directory: str | Path, hf_state: dict[str, torch.Tensor], hf_config: dict[str, Any]) -> Path:
    return io.write_model_dir(directory, hf_state, hf_config)


def export_hf(module: nn.Module, directory: str | Path) -> Path:
    """Write a Hugging Face directory: BertForPreTraining (or BertForMaskedLM when there is no NSP
    head) for a MaskedLM, BertModel for an Encoder, a fine-tuned task model (one with `head_config`)
    as the matching `BertFor...` head class (see `export_finetuned_hf`), each under the names of
    the model's family (RobertaModel, AlbertForPreTraining, ...). A model card (README.md) goes beside it."""
    written = _export(module, directory)
    write_model_card(written)  # never fails the export: a warning says what went wrong
    return written


def _export(module: nn.Module, directory: str | Path) -> Path:
    """`export_hf` without the model card."""
    # A fine-tuned text-to-text model is its encoder-decoder LM (T5ForConditionalGeneration).
    lm = getattr(module, "lm", None)
    if hasattr(module, "head_config") and isinstance(getattr(lm, "config", None), ModelConfig):
        module = lm
    elif hasattr(module, "head_config") and hasattr(module, "encoder"):
        return _export_finetuned(module, directory)
    config = getattr(module, "config", None)
    if not isinstance(config, ModelConfig):
        raise CheckpointError(f"{type(module).__name__} is not a bertzoo model; nothing to export")
    own = get_variant(config.variant).export_hf
    if own is not None:  # a family's own modules (ELECTRA's discriminator and joint objective)
        written = own(module, directory)
        if written is not None:
            return Path(written)
    if has_adapters(module):
        raise CheckpointError(
            "the model has adapters, which the Hugging Face BERT architecture has no place for; "
            "save it with save_pretrained (bertzoo format) instead"
        )
    if isinstance(module, Encoder):
        state, prefix, arch = {f"encoder.{k}": v for k, v in module.state_dict().items()}, "", "BertModel"
    else:
        state, prefix = module.state_dict(), "bert."
        arch = "BertForPreTraining" if getattr(module, "nsp_head", None) is not None else "BertForMaskedLM"
    hf_config = config_to_hf(config, [arch])
    hf_config["tie_word_embeddings"] = bool(config.tie_word_embeddings)
    if not config.pooler:
        hf_config["add_pooling_layer"] = False
    return _write(directory, state_to_hf(state, config, prefix=prefix), hf_config)


# task name -> (Hugging Face class, head module class name, our head attribute -> HF key prefix, reads pooler)
_CLASSIFIER = {"classifier": "classifier"}
HF_TASK_HEADS: dict[str, tuple[str, str, dict[str, str], bool]] = {
    "classification": ("BertForSequenceClassification", "ClassificationHead", _CLASSIFIER, True),
    "token_classification": ("BertForTokenClassification", "TokenClassificationHead", _CLASSIFIER, False),
    "qa": ("BertForQuestionAnswering", "SpanHead", {"qa": "qa_outputs"}, False),
    "multiple_choice": ("BertForMultipleChoice", "ClassificationHead", _CLASSIFIER, True),
}
# The tasks whose Hugging Face classes import as bertzoo fine-tuned models (the others load as encoders).
HF_IMPORTED_TASKS = ("classification", "token_classification")
HF_PROBLEM = {
    "single_label": "single_label_classification",
    "multi_label": "multi_label_classification",
    "regression": "regression",
}


def hf_task_of(raw: dict[str, Any]) -> str | None:
    """The bertzoo task of a Hugging Face config.json whose first architecture is its family's sequence or
    token classifier (BertForSequenceClassification, DistilBertForTokenClassification, ...: the family's
    `architectures` names `HF_TASK_HEADS`' BERT classes); None for any other model."""
    archs = raw.get("architectures") or []
    if not is_hf_config(raw) or not archs:
        return None
    family = hf_family(raw.get("model_type"))
    for task in HF_IMPORTED_TASKS:
        if family.architectures.get(HF_TASK_HEADS[task][0]) == archs[0]:
            return task
    return None


def find_head(model: nn.Module, class_name: str) -> tuple[str, nn.Module]:
    """(name, module) of the one head of class `class_name` outside the encoder."""
    found = [
        (name, m)
        for name, m in model.named_modules()
        if type(m).__name__ == class_name and not name.startswith("encoder.") and name != "encoder"
    ]
    if len(found) != 1:
        raise CheckpointError(
            f"expected one {class_name} in the task model, found {len(found)}; only the standard task heads export"
        )
    return found[0]


def _unexportable(model: nn.Module, head_class: str, reads_pooler: bool) -> str | None:
    """What the task model has that the Hugging Face class would silently compute differently."""
    if has_adapters(model):
        return "adapters inside the encoder"
    if getattr(model, "feature_layers", 0):
        return f"a mix of the top {model.feature_layers} layers (feature-based head)"
    if reads_pooler and getattr(model, "pooling", "cls") != "cls":
        # The classifier reads the mean of the token vectors or the last token; Hugging Face's the pooled [CLS].
        what = "the mean of the token vectors" if model.pooling == "mean" else "the last token's vector"
        return (
            f"technique.pooling={model.pooling} ({what}), where Hugging Face's classifier "
            "reads the pooled [CLS] vector; re-train with technique.pooling=cls to export"
        )
    if (getattr(model, "head_config", None) or {}).get("pair_orders") == "both":
        return "pairs read in both orders (technique.pair_orders=both), where Hugging Face's reads one sequence"
    if reads_pooler and model.encoder.pooler is None:
        return "a classifier on [CLS] without a pooler (Hugging Face's reads the pooler)"
    if getattr(find_head(model, head_class)[1], "lstm", None) is not None:
        return "a BiLSTM tagger head"
    return None


def export_finetuned_hf(model: nn.Module, directory: str | Path) -> Path:
    """Write a fine-tuned task model as a Hugging Face `BertFor<Task>` directory (`bert.*` encoder keys
    plus the head's `classifier.*` / `qa_outputs.*`), under its family's names (`DistilBertFor<Task>`,
    whose `pre_classifier` is the encoder's relu pooler, ...), with `num_labels`, `id2label`, `label2id`
    and `problem_type` in config.json, loadable by `transformers.AutoModelFor<Task>`.

    Only heads Hugging Face has exactly export: a plain linear head on the pooled [CLS] vector
    (sequence classification, multiple choice) or on every token (token classification, QA). Mean
    pooling, feature mixes, BiLSTM taggers and adapters raise CheckpointError saying so. A model card
    (README.md) goes beside it.
    """
    written = _export_finetuned(model, directory)
    write_model_card(written)
    return written


def _export_finetuned(model: nn.Module, directory: str | Path) -> Path:
    """`export_finetuned_hf` without the model card."""
    head_cfg = dict(getattr(model, "head_config", {}) or {})
    task = head_cfg.get("task", "")
    if task not in HF_TASK_HEADS:
        raise CheckpointError(f"task {task!r} has no Hugging Face export; exportable tasks: {', '.join(HF_TASK_HEADS)}")
    if model.encoder.config.causal:
        return _export_causal_classifier(model, directory, head_cfg)
    arch, head_class, key_map, reads_pooler = HF_TASK_HEADS[task]
    config = model.encoder.config
    name = hf_family_of(config).architectures.get(arch, arch)  # the family's own class, for messages
    what = _unexportable(model, head_class, reads_pooler)
    if what is not None:
        raise CheckpointError(
            f"cannot export to {name}: the model has {what}, which the Hugging Face architecture cannot "
            "represent; keep the bertzoo format (save_pretrained) for this model"
        )
    head_name, _ = find_head(model, head_class)
    state = model.state_dict()
    allowed = tuple(f"{head_name}.{ours}." for ours in key_map)
    extra = [k for k in state if not k.startswith("encoder.") and not k.startswith(allowed)]
    if extra:
        raise CheckpointError(
            f"cannot export to {name}: parameters outside the encoder and the linear head ({', '.join(extra[:5])}); "
            "keep the bertzoo format for this model"
        )
    enc_state = {k: v for k, v in state.items() if k.startswith("encoder.")}
    if not reads_pooler:  # these Hugging Face classes build their base model without a pooler
        enc_state = {k: v for k, v in enc_state.items() if not k.startswith("encoder.pooler.")}
    hf_config = config_to_hf(config, [arch])
    hf_state = state_to_hf(enc_state, config, prefix="bert.")
    for ours, hf in key_map.items():
        for part in ("weight", "bias"):
            hf_state[f"{hf}.{part}"] = state[f"{head_name}.{ours}.{part}"].contiguous()
    if task in ("classification", "token_classification"):
        num_labels = int(state[f"{head_name}.classifier.weight"].shape[0])
        hf_config.update(_label_fields(head_cfg, num_labels, with_problem=task == "classification"))
    hf_config["classifier_dropout"] = None
    return _write(directory, hf_state, hf_config)


# A causal layout's family (by model_type) -> its sequence classifier: a bias-free `score` on the last non-pad token.
CAUSAL_CLASSIFIERS = {"openai-gpt": "OpenAIGPTForSequenceClassification", "gpt2": "GPT2ForSequenceClassification"}


def _export_causal_classifier(model: nn.Module, directory: str | Path, head_cfg: dict[str, Any]) -> Path:
    """A fine-tuned GPT classifier as transformers' GPT2ForSequenceClassification (OpenAIGPT... for the
    post-norm layout): `transformer.*` plus `score.weight`, which reads the last token that is not the pad
    id, our extract token. Whatever it would compute differently is refused in one line."""
    config = model.encoder.config
    family = hf_family_of(config)
    arch = CAUSAL_CLASSIFIERS.get(family.model_type, f"a {family.model_type} classifier")
    task = head_cfg.get("task")
    pad = config.pad_token_id if config.pad_token_id is not None else head_cfg.get("pad_token_id")
    head = getattr(getattr(model, "head", None), "classifier", None)
    if task != "classification":
        what = f"a {task} head on a left-to-right model (Hugging Face's GPT classes hold sequence classification only)"
    elif has_adapters(model):
        what = "adapters inside the encoder"
    elif getattr(model, "feature_layers", 0):
        what = f"a mix of the top {model.feature_layers} layers (feature-based head)"
    elif getattr(model, "pooling", "") != "last":
        what = f"technique.pooling={model.pooling}, where {arch} reads the last token"
    elif head_cfg.get("pair_orders") == "both":
        what = f"pairs read in both orders (technique.pair_orders=both), where {arch} reads one sequence"
    elif not isinstance(head, nn.Linear) or head.bias is not None:
        what = "a classifier with a bias, where its score layer has none"
    elif pad is None:
        what = "no pad token id, which it needs to find each row's last token"
    elif family.model_type not in CAUSAL_CLASSIFIERS:
        what = f"the {family.model_type} layout"
    else:
        what = None
    if what is not None:
        raise CheckpointError(
            f"cannot export to {arch}: the model has {what}; keep the bertzoo format (save_pretrained) for this model"
        )
    enc_state = {k: v for k, v in model.state_dict().items() if k.startswith("encoder.")}
    hf_state = state_to_hf(enc_state, config, prefix="transformer.")
    hf_state["score.weight"] = head.weight.detach().contiguous()
    # The variant names its base and LM classes only; the sequence classifier is set here.
    hf_config = {**config_to_hf(config), "architectures": [arch], "pad_token_id": int(pad)}
    hf_config.update(_label_fields(head_cfg, int(head.weight.shape[0]), with_problem=True))
    return _write(directory, hf_state, hf_config)


def _label_fields(head_cfg: dict[str, Any], num_labels: int, with_problem: bool) -> dict[str, Any]:
    """A Hugging Face config's label entries for a head of `num_labels` outputs: the saved label names (or
    LABEL_i when they do not match), and for sequence classification the problem type."""
    labels = [str(x) for x in head_cfg.get("labels") or []]
    if len(labels) != num_labels:
        labels = [f"LABEL_{i}" for i in range(num_labels)]
    fields: dict[str, Any] = {
        "num_labels": num_labels,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
    }
    if with_problem:
        problem = head_cfg.get("problem") or ("regression" if num_labels == 1 else "single_label")
        fields["problem_type"] = HF_PROBLEM.get(problem, "single_label_classification")
    return fields
