"""The contract of a model family: everything the rest of bertzoo asks a family, in one typed record.

A family is one recipe file in `bertzoo/variants/` that ends with `FAMILY = Family(...)`, plus its model in
`bertzoo/models/` (when the shared `Encoder` is not enough), built from the parts in `bertzoo/nn/`,
`bertzoo/objectives/` and `bertzoo/data/`. The pretraining recipe, the loader, the Hugging Face converter,
the fine-tuning recipe and the attention view read a family only through these fields; none of them names a
family. docs/adding-a-family.md walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from bertzoo.config import ModelConfig, PretrainConfig
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM

# How `bertzoo attention` reads a family's model (bertzoo.visualize.views): one self-attention group over the
# input (encoders and decoder-only models), the encoder / decoder / cross groups of an encoder-decoder, or
# XLNet's content and query streams.
AttentionView = Literal["encoder", "encoder-decoder", "two-stream"]


def masked_lm_model(raw: dict[str, Any], config: ModelConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The empty pretraining module of a BERT-like checkpoint: an `Encoder` with the masked-LM head, and the
    NSP or SOP head its `objective` (or its weights) name. `mlm+contrast` (BERT's halves contrast) has no
    weights of its own: it loads as the masked LM it is."""
    objective = raw.get("objective") or ("mlm+nsp" if "nsp_head.classifier.weight" in state else "mlm")
    sentence_task = {"mlm+nsp": "nsp", "mlm+sop": "sop"}.get(objective)
    return MaskedLM(Encoder(config), sentence_task=sentence_task)


def no_model_defaults(tokenizer: Any) -> dict[str, Any]:
    """A family that takes nothing from the run's tokenizer but its size and padding id."""
    return {}


@dataclass(frozen=True)
class Family:
    """One model family: who it is, its model config, its pretraining module and its data recipe, then the
    optional hooks, each defaulting to what BERT-like families share."""

    # --- who it is ------------------------------------------------------------------------------------
    name: str  # `ModelConfig.variant` and the `variant:` of a run config (like Hugging Face's model_type)
    title: str  # how messages name it ("Transformer-XL")
    # --- its model --------------------------------------------------------------------------------------
    presets: Mapping[str, Mapping[str, Any]]  # sizes by preset name (`model.preset`)
    model_config: Callable[[dict[str, Any]], ModelConfig]  # {"preset": name, **fields} -> its config
    # --- pretraining --------------------------------------------------------------------------------------
    objectives: tuple[str, ...]  # the `objective:` values it accepts
    default_objective: str
    # (config, objective, **objective_args) -> the pretraining module (backbone + heads, the loss in forward)
    build: Callable[..., nn.Module]
    # (run config, corpus, tokenizer, *, world_size) -> its pretraining examples
    examples: Callable[..., Any]
    # --- optional: the defaults BERT-like families share ---------------------------------------------------
    config_class: type[ModelConfig] = ModelConfig  # what its config.json loads as (a subclass with its own fields)
    defaults: Mapping[str, Any] = field(default_factory=dict)  # fields of every model of the family, before a preset
    encoder_class: Callable[[ModelConfig], nn.Module] = Encoder  # its backbone: what `load_encoder` builds
    # The run config's objective when it names none, if that depends on the run (BERT: mlm+nsp or, with
    # data.nsp false, mlm); None: `default_objective`.
    objective_of: Callable[[PretrainConfig], str] | None = None
    # The classes whose `from_pretrained` loads its pretraining checkpoints (the first is what they load as).
    pretraining_classes: tuple[type[nn.Module], ...] = (MaskedLM,)
    # (raw config.json, config, tensors) -> the empty module a pretraining checkpoint loads into
    pretraining_model: Callable[[dict[str, Any], ModelConfig, dict[str, torch.Tensor]], nn.Module] = masked_lm_model
    collator: Callable[[PretrainConfig, Any], Any] | None = None  # (run config, tokenizer); None: masked LM's
    model_defaults: Callable[[Any], dict[str, Any]] = no_model_defaults  # config fields from the run's tokenizer
    # (run config, tokenizer) -> the tokenizer pretraining uses (T5 adds its sentinel tokens)
    run_tokenizer: Callable[[PretrainConfig, Any], Any] | None = None
    # (module, tokenizer): what a freshly built module takes from the tokenizer (ELMo's character table)
    use_tokenizer: Callable[[nn.Module, Any], None] | None = None
    check_finetune: Callable[[Any], None] | None = None  # ConfigError for what its backbone cannot fine-tune on
    # (task, backbone, tokenizer): what a task on its backbone needs from it (ERNIE-THU links the task's text to
    # its entity list); returns whether it changed the task. Called in fine-tuning and when a model is loaded.
    prepare_task: Callable[[Any, nn.Module, Any], bool] | None = None
    # --- Hugging Face -----------------------------------------------------------------------------------
    hf: tuple[HFFamily, ...] = ()  # its Hugging Face architectures as data (imported when `.variant` is `name`)
    hf_family_for: Callable[[ModelConfig], HFFamily] | None = None  # which of several `hf` a config exports to
    config_to_hf: Callable[[ModelConfig, list[str] | None], dict[str, Any]] | None = None
    export_hf: Callable[[nn.Module, Any], Any] | None = None  # (module, directory): its own exporter, if any
    # --- looking at it ----------------------------------------------------------------------------------
    attention: AttentionView | None = "encoder"  # None: its model has no attention to draw (ELMo)
    # Its data recipe ends every source and target with the tokenizer's end token (T5), so the attention view
    # of an encoder-decoder shows it too.
    ends_sequences: bool = False

    def objective(self, cfg: PretrainConfig) -> str:
        """The objective a pretraining run of this family trains: the config's, else the family's default."""
        if cfg.objective:
            return cfg.objective
        return self.objective_of(cfg) if self.objective_of is not None else self.default_objective

    def hf_family(self, config: ModelConfig) -> HFFamily:
        """The Hugging Face architecture a model of `config` converts to."""
        return self.hf_family_for(config) if self.hf_family_for is not None else self.hf[0]
