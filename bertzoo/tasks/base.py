"""What every fine-tuning task provides. A task turns raw examples into features, builds the model
(an objective: encoder + head + loss), and evaluates/predicts with its own post-processing.

The runner (`bertzoo.train.finetune`) only talks to this interface, so classification, NER,
extractive QA and multiple choice share one training loop, one CLI and one report format.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import FinetuneConfig, ModelConfig
from bertzoo.data.tasks.mixture import Mixture
from bertzoo.errors import ConfigError
from bertzoo.models.heads import LMHead
from bertzoo.nn.masks import masked_mean
from bertzoo.nn.scalar_mix import ScalarMix
from bertzoo.objectives.clm import causal_lm_loss, lm_labels

POOLINGS = ("auto", "cls", "mean", "last")


def poolable(encoder: nn.Module) -> bool:
    """Whether `encoder` has (or can be given) a pooler on [CLS]: an Encoder. A backbone that cannot states
    `poolable = False` (XLNet, whose layout and transformers' XLNetModel have none)."""
    return bool(getattr(encoder, "poolable", True))


def output_width(encoder: nn.Module) -> int:
    """Width of each layer state a backbone hands a task: `config.hidden_size`, or the backbone's own
    `output_size` where they differ (ELMo: [forward; backward], 2 x hidden_size)."""
    return int(getattr(encoder, "output_size", encoder.config.hidden_size))


def resolve_pooling(pooling: str, encoder: nn.Module) -> str:
    """The sentence vector a task model on `encoder` reads for `technique.pooling`: `auto` is the backbone's
    own choice where it names one (`auto_pooling`: ELMo's mean), else the pooled [CLS] of a bidirectional
    encoder and the last real token of a causal one (GPT's extract token) or of one without a pooler
    (`poolable` False: XLNet, whose own sequence summary reads its last token; there `cls` is the state of
    [CLS] itself). `cls` on a causal encoder is a ConfigError: its first token has seen only itself."""
    if pooling not in POOLINGS:
        raise ConfigError(f"technique.pooling={pooling!r} is not allowed; choose one of: {', '.join(POOLINGS)}")
    causal = bool(getattr(encoder.config, "causal", False))
    if pooling == "auto":
        own = getattr(encoder, "auto_pooling", None)
        return own or ("last" if causal or not poolable(encoder) else "cls")
    if pooling == "cls" and causal:
        raise ConfigError(
            "technique.pooling=cls on a left-to-right (causal) model reads a token that has seen only itself; "
            "use technique.pooling=last (the extract token, what auto picks) or mean"
        )
    return pooling


def last_token(seq: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """(batch, dim) state of each row's rightmost real token ((batch, seq, dim) in, 2-D padding mask)."""
    if mask is None:
        return seq[:, -1]
    positions = torch.arange(mask.size(-1), device=mask.device)
    last = (positions * mask.bool()).argmax(-1)  # the rightmost 1: right or left padding alike
    return seq[torch.arange(seq.size(0), device=seq.device), last]


def pool_states(seq: torch.Tensor, mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """(batch, dim) sentence vectors of (batch, seq, dim) states: the mean over real tokens, the last real token or
    the first ([CLS]) one, for `pooling` "mean", "last" or "cls"."""
    if pooling == "mean":
        return masked_mean(seq, mask)
    if pooling == "last":
        return last_token(seq, mask)
    return seq[:, 0]


class LMTerm(NamedTuple):
    """The auxiliary next-token loss of a causal task model: its mean, metrics and their counts."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]
    counts: dict[str, torch.Tensor]


class Features(NamedTuple):
    """What `TaskModel.features` gives the head: sequence features, the sentence vector, the LM term."""

    sequence: torch.Tensor  # (rows, seq, feature_dim)
    sentence: torch.Tensor  # (rows, feature_dim)
    lm: LMTerm | None  # None unless training a causal model with lm_weight > 0 on a labelled batch


class FeatureDataset:
    """Featurized examples in memory: `__getitem__(i)` -> dict of numpy arrays plus `index`/`epoch`.

    `lengths` (tokens per feature) lets the sampler bucket by length; `example_ids` maps features
    back to raw examples (QA windows: many features per example). `selection` (a multi-task mixture,
    `bertzoo.data.tasks.mixture.Mixture`) picks the features each training epoch draws; None: all of them.
    """

    def __init__(
        self,
        features: list[dict[str, Any]],
        lengths: Sequence[int],
        example_ids: Sequence[int],
        selection: Mixture | None = None,
    ) -> None:
        self.features = features
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.example_ids = np.asarray(example_ids, dtype=np.int64)
        self.selection = selection
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.features[i], "index": i, "epoch": self.epoch}


@dataclass
class EvalResult:
    """Metrics (flat, JSON-able floats) plus task-specific report material."""

    metrics: dict[str, float]
    predictions: list[dict[str, Any]] = field(default_factory=list)  # one per raw example
    report: dict[str, Any] = field(default_factory=dict)  # e.g. confusion matrix, per-label table


class TaskModel(nn.Module):
    """Base of every fine-tuning model: an encoder plus a task head; the subclass's forward owns the loss.

    `encode()` gives the representation the head reads: the last hidden state by default, or (the
    feature-based approach of the BERT paper) a weighted or concatenated mix of the top
    `feature_layers` layers. `feature_dim` is that representation's width, for sizing heads.

    `reads_sequence = False` declares that forward uses only the sentence vector (`encode()[1]`);
    with `pooling="cls"` the top layer then runs for [CLS] alone (`Encoder(top_queries=1)`) and the
    sequence features `encode()` returns hold that one position. `pooling="mean"` makes the sentence
    vector the mean of the sequence features over real tokens instead of the pooled [CLS], and
    `pooling="last"` the state of the last real token (see `resolve_pooling`; `auto` picks it for a causal
    encoder, where only that token has seen the whole input, and for one without a pooler: XLNet, see `poolable`).

    On a causal encoder with `lm_weight` > 0, `features()` also gives GPT's auxiliary next-token loss over
    the input tokens, with the LM head tied to the word embeddings; a subclass adds it with `with_lm`.
    A task whose head reads every token's state sets `causal_refusal` to the reason it refuses causal encoders.
    """

    reads_sequence: bool = True
    causal_refusal: str = ""

    def __init__(
        self,
        encoder: nn.Module,
        feature_layers: int = 0,
        feature_mix: str = "weighted",
        pooling: str = "auto",
        lm_weight: float = 0.0,
    ) -> None:
        super().__init__()
        refusal = getattr(encoder, "task_refusal", "")  # a backbone the task code cannot read says why
        if refusal:
            raise ConfigError(refusal)
        c = encoder.config
        self.causal = bool(getattr(c, "causal", False))
        if self.causal and self.causal_refusal:
            raise ConfigError(self.causal_refusal)
        self.encoder = encoder
        self.feature_layers = feature_layers
        self.feature_mix = feature_mix
        self.poolable = poolable(encoder)
        self.pooling = resolve_pooling(pooling, encoder)
        # What a backbone keeps for pretraining alone (`task_unused`: XLNet's query-stream start, ELMo's softmax):
        # no task runs it, and a parameter left without a gradient would stall DDP.
        for name in getattr(encoder, "task_unused", ()):
            getattr(encoder, name).requires_grad_(False)
        hidden = c.hidden_size
        if feature_layers > c.num_layers + 1:
            raise ConfigError(
                f"technique.feature_layers={feature_layers} but the model has {c.num_layers + 1} layers to read "
                f"(the embeddings and {c.num_layers} layers); set it to at most {c.num_layers + 1}"
            )
        width = output_width(encoder)
        self.mix = ScalarMix(feature_layers) if feature_layers and feature_mix == "weighted" else None
        self.feature_dim = width * feature_layers if feature_layers and feature_mix == "concat" else width
        self.head_config: dict[str, Any] = {}
        if lm_weight < 0:
            raise ConfigError(f"technique.lm_weight must be >= 0, got {lm_weight}")
        # Only a left-to-right model has a next-token loss; on a bidirectional one lm_weight means nothing.
        self.lm_weight = float(lm_weight) if self.causal else 0.0
        self.lm_head: LMHead | None = None
        if self.lm_weight > 0:
            if not c.tie_word_embeddings or (c.embedding_size and c.embedding_size != hidden):
                raise ConfigError(
                    "technique.lm_weight > 0 needs an LM head tied to the word embeddings (GPT's), which this model "
                    "does not have; set technique.lm_weight=0"
                )
            # Tied: no new weights, the head is the pretrained word table (so nothing to initialise or load).
            self.lm_head = LMHead(hidden, c.vocab_size, tied_weight=encoder.word_embeddings.weight)

    def encode(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(sequence features (batch, seq, feature_dim), sentence vector (batch, feature_dim)).

        input_ids may carry extra leading dims (multiple choice: (batch, choices, seq)); they are
        flattened here, and callers reshape the results.
        """
        features = self.features(batch, with_lm=False)
        return features.sequence, features.sentence

    def features(self, batch: Batch, rows: torch.Tensor | None = None, *, with_lm: bool = True) -> Features:
        """`encode()` plus the auxiliary LM term (see the class doc). `rows` (any shape that flattens to the
        flattened batch's rows, bool) marks the real sequences: padded choices are left out of the LM loss."""
        ids = batch.input_ids.reshape(-1, batch.input_ids.size(-1))
        mask = batch.attention_mask.reshape(ids.shape) if batch.attention_mask is not None else None
        types = batch.token_type_ids.reshape(ids.shape) if batch.token_type_ids is not None else None
        pooled = self.poolable and self.pooling == "cls" and not self.feature_layers
        # An Encoder's savings: the top layer for [CLS] alone, and an unread pooler not run (DDP would wait for
        # its gradients). A backbone without a pooler (XLNet) takes neither and computes every position.
        extra = {"top_queries": 1 if pooled and not self.reads_sequence else None, "pool": pooled}
        # Entity links (ERNIE from Tsinghua), when the task's batches carry them (`link_entities`).
        links = batch.extra.get("entity_ids")
        side = {"entity_ids": links.reshape(ids.shape)} if links is not None else {}
        out = self.encoder(
            ids, mask, types, output_hidden_states=bool(self.feature_layers), **side, **(extra if self.poolable else {})
        )
        if not self.feature_layers:
            seq = out.last_hidden_state
        else:
            top = out.hidden_states[-self.feature_layers :]
            seq = self.mix(top) if self.mix is not None else torch.cat(top, dim=-1)
        if pooled and out.pooler_output is not None:
            sentence = out.pooler_output  # plain fine-tuning on [CLS] reads the pooler, as BERT's classifiers do
        else:  # a feature mix and a backbone without a pooler read [CLS] itself
            sentence = pool_states(seq, mask, self.pooling)
        lm = None
        # Training only: GPT's L3 = L2 + lambda L1 is what is optimised; evaluation scores the task alone.
        if with_lm and self.lm_head is not None and self.training and batch.labels is not None:
            labels = lm_labels(ids, mask)
            if rows is not None:
                labels = labels.masked_fill(~rows.reshape(-1, 1).bool(), IGNORE_INDEX)
            # The LM head reads the top layer, as in pretraining, whatever feature mix the task head reads.
            loss, metrics, counts = causal_lm_loss(out.last_hidden_state, labels, self.lm_head, "lm")
            lm = LMTerm(loss, metrics, counts)
        return Features(seq, sentence, lm)

    def with_lm(
        self, loss: torch.Tensor, metrics: dict[str, torch.Tensor], counts: dict[str, torch.Tensor], lm: LMTerm | None
    ) -> torch.Tensor:
        """task loss + lm_weight x LM loss (GPT's L3); logs `task_loss`, `lm_loss` and `lm_acc` beside `loss`.
        Returns the task loss unchanged when there is no LM term."""
        if lm is None:
            return loss
        metrics["task_loss"] = loss.detach()
        counts["task_loss"] = torch.ones((), device=loss.device)
        metrics.update(lm.metrics)
        counts.update(lm.counts)
        return loss + self.lm_weight * lm.loss

    @property
    def config(self) -> ModelConfig:
        """The encoder's config (what config.json holds besides the `task` head config)."""
        return self.encoder.config

    def checkpoint_fields(self) -> dict[str, Any]:
        """The head config saved in config.json under `task`. `save_pretrained` and `from_pretrained`
        (the fine-tuned model in a directory written with its tokenizer and finetune_config.json, as
        `bertzoo finetune` does, in eval mode) are attached by bertzoo.loading."""
        return {"task": self.head_config}


class Task(ABC):
    """A fine-tuning task. Subclasses set `name` and `default_metric` (the key, without the `eval_`
    prefix, that picks the best checkpoint; higher is better unless it ends in `loss`)."""

    name: str = ""
    default_metric: str = "loss"
    # True: the task generates with a decoder, so an encoder-decoder (T5) is fine-tuned whole and `build`
    # receives its `EncoderDecoderLM`; otherwise `build` gets an `Encoder` (an encoder-decoder's encoder).
    uses_decoder: bool = False

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer

    @abstractmethod
    def load(self, split: str) -> list[dict[str, Any]]:
        """Raw examples of `split` ("train", "dev", "test") from the configured dataset or files.
        Also fixes the label set on the first call (train split), see `label_names`."""

    @abstractmethod
    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        """Tokenize examples into model features (labels aligned; -100 where ignored)."""

    @abstractmethod
    def collate(self, features: list[dict[str, Any]]) -> Batch:
        """Pad a list of features into a Batch (dynamic padding to the longest in the batch)."""

    @abstractmethod
    def build(self, encoder: nn.Module) -> nn.Module:
        """The trainable module: forward(batch) -> ObjectiveOutput with `loss`, `metrics`, `logits`."""

    @abstractmethod
    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        """Run the model over `features` and score against the raw examples' gold labels."""

    @abstractmethod
    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Predictions for raw (unlabelled) examples, one dict per example, JSON-able."""

    def label_names(self) -> list[str]:
        """Label vocabulary in index order (empty for tasks without labels, e.g. QA)."""
        return []

    def head_config(self) -> dict[str, Any]:
        """Everything needed to rebuild the head when loading a fine-tuned model (saved in config.json)."""
        return {"task": self.name, "labels": self.label_names()}


def link_entities(task: Task, linker: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Make every batch the task collates (training, evaluation, prediction) carry `extra["entity_ids"]`,
    `linker(input_ids)`: the entity links a knowledge-fusing backbone (ERNIE from Tsinghua) reads. Linking
    the padded batch serves every task layout alike (pairs, choices, QA windows): special and padding
    tokens never link."""
    collate = task.collate

    def linked(features: list[dict[str, Any]]) -> Batch:
        batch = collate(features)
        batch.extra["entity_ids"] = linker(batch.input_ids)
        return batch

    task.collate = linked  # type: ignore[method-assign]


def batched_logits(
    model: nn.Module, dataset: FeatureDataset, collate, batch_size: int, device: torch.device | str | None = None
) -> list[np.ndarray]:
    """Logits for every feature, in dataset order, computed in length-sorted batches (little padding)
    under inference mode. Per-token logits keep the batch's padded length; callers trim with
    `dataset.lengths` when they need to.

    Objectives return `loss=None` when the batch carries no labels, so this also serves prediction.
    """
    if device is None:
        device = next(model.parameters()).device
    order = np.argsort(dataset.lengths, kind="stable")
    out: list[np.ndarray | None] = [None] * len(dataset)
    was_training = model.training
    if was_training:  # switching walks every module: skipped for a model already in eval mode (a server's)
        model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                batch = collate([dataset[int(i)] for i in chunk]).to(device)
                logits = model(batch).logits.float().cpu().numpy()
                for j, i in enumerate(chunk):
                    out[int(i)] = logits[j]
    finally:
        if was_training:
            model.train()
    return out  # type: ignore[return-value]
