"""Sequence-to-sequence fine-tuning: a source text mapped to a target text that the model generates.

An encoder-decoder (T5, MASS) is fine-tuned whole (`Task.uses_decoder`: the runner builds the task on
its `EncoderDecoderLM`, pretrained encoder, decoder and LM head): the encoder reads `source </s>`, the
decoder predicts `target </s>` token by token from the source and the target tokens before it (teacher
forcing: its input is the target shifted right after `decoder_start_token_id`), with the mean
cross-entropy over the target tokens. The end token is `</s>` where the vocabulary has one (T5's), else
[SEP], as in T5 pretraining. Source and target are two sequences: `data.max_seq_len` bounds the source
and `data.max_target_len` the target, each with its end token.

A single stack reads `[CLS] source [SEP] target [SEP]` (segment 0 for the source, 1 for the target);
the model decides how it learns the target:

* a left-to-right model (GPT, `config.causal`) predicts each target token from the ones before it,
  the final [SEP] included so it learns to stop, plus `technique.lm_weight` (GPT's lambda, 0.5) times
  the language-model loss on the source, the auxiliary objective of the GPT paper;
* a bidirectional encoder (BERT, UniLM) attends with UniLM's sequence-to-sequence mask (the source
  sees the source, a target token the source and the target up to itself) and predicts the target
  tokens replaced by [MASK], each with probability `technique.target_mask_prob` (0.7, UniLM's
  fine-tuning rate), the final [SEP] included, with its masked-LM head.

Evaluation and prediction generate from the source (`source </s>` into the encoder, or the prompt
`[CLS] source [SEP]`) with `bertzoo.models.generation` (the `generation` section of the config; greedy by
default) until the end token, and score the decoded text with ROUGE, BLEU and exact match
(`bertzoo.metrics.generation`).

Task prefixes and mixtures (T5's text-to-text multi-task setup): `data.source_prefix` is prepended to
every source before tokenisation (T5's "summarize: "), for every kind of model; `data.mixture` lists
several datasets, each with its own `prefix`, fine-tuned as one model. Every example then carries its
task's name (`task`); each training epoch draws every task's share by T5's examples-proportional
mixing (`bertzoo.data.tasks.mixture`: rates by `data.mixture_limit` and `data.mixture_temperature`, or fixed
`rate`s), and evaluation scores each task apart (`<task>_rougeL`, ...) and reports the mean over the
tasks under the plain names (`rougeL`: what picks the best model). Both are saved with the model's
config, so `bertzoo predict` and `bertzoo evaluate` apply the same prefixes (a mixture model's predict
inputs name their task: {"task": ..., "text": ...}).

A training target that the tokenizer can only write with its unknown token can never be generated
right. Where the training targets form a label set (classification as text: at most half as many
distinct targets as examples, per task) such a label is refused, naming it; in free text (titles,
summaries) the few such targets are counted in a warning.

Techniques that read a sentence vector or feature layers do not apply to any of these models and are
refused, as are `technique.lm_weight` and `technique.target_mask_prob` on an encoder-decoder (it has no
source LM loss and masks no target tokens).

The task models themselves (`Seq2SeqModel`, `EncoderDecoderTaskModel`) are in `bertzoo.tasks.seq2seq_models`.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import FinetuneConfig, GenerationConfig, MixtureTaskConfig, TaskDataConfig, TechniqueConfig
from bertzoo.data.pretraining.collate_seq2seq import end_token_id
from bertzoo.data.rng import uniform
from bertzoo.data.tasks.mixture import Mixture
from bertzoo.data.text.corpus import BUILTIN_PREFIX
from bertzoo.errors import ConfigError, DataError
from bertzoo.metrics.generation import generation_metrics
from bertzoo.models.generation import generate
from bertzoo.nn.masks import seq2seq_mask
from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM
from bertzoo.tasks.base import EvalResult, FeatureDataset, Task
from bertzoo.tasks.common import (
    attention_from_lengths,
    eval_batch_size,
    example_index,
    labels_present,
    load_split,
    pad_2d,
)
from bertzoo.tasks.seq2seq_models import EncoderDecoderTaskModel, Seq2SeqModel, segment_ids

__all__ = ["Seq2SeqTask", "mixture_names"]

DEFAULT_METRIC = "rougeL"
SAMPLES = 20  # decoded examples kept in the evaluation report (per task of a mixture)
TASK_KEY = "task"  # the field of an example (and of a predict input) that names its mixture task
_TASK_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a name goes into metric keys and CSV headers
_DEFAULTS = TechniqueConfig()
# Options of a head that reads a sentence vector or feature layers: no seq2seq model has one.
_UNREAD = {
    "feature_layers": _DEFAULTS.feature_layers,
    "feature_head": _DEFAULTS.feature_head,
    "pooling": _DEFAULTS.pooling,
    "pair_orders": _DEFAULTS.pair_orders,
}
# Options of the single-stack models (name -> values an encoder-decoder accepts: its default, which it
# cannot tell from one written out, or off; what the option does).
_SINGLE_STACK_ONLY = {
    "lm_weight": ((_DEFAULTS.lm_weight, 0.0), "adds GPT's language-model loss on the source of a left-to-right model"),
    "target_mask_prob": ((_DEFAULTS.target_mask_prob,), "masks target tokens for a bidirectional encoder (UniLM)"),
}


def _entry_name(entry: MixtureTaskConfig) -> str:
    if entry.name:
        return entry.name
    if entry.dataset:
        return entry.dataset.removeprefix(BUILTIN_PREFIX)
    return Path(entry.train).stem


def mixture_names(data: TaskDataConfig) -> list[str]:
    """The task names of `data.mixture` (empty without one), after checking the mixture: each task one
    source of data (a built-in dataset or files), a unique name, fixed rates on every task or none, and
    nothing set that the mixture replaces."""
    if not data.mixture:
        return []
    replaced = [k for k in ("dataset", "train", "dev", "test", "source_prefix") if getattr(data, k)]
    if replaced:
        key = replaced[0]
        what = "each task's prefix (data.mixture[i].prefix)" if key == "source_prefix" else "its tasks' data"
        raise ConfigError(f"data.{key} and data.mixture are both set; the mixture holds {what}: remove data.{key}")
    names: list[str] = []
    for i, entry in enumerate(data.mixture):
        where = f"data.mixture[{i}]"
        if bool(entry.dataset) == bool(entry.train):
            has = "both" if entry.dataset else "neither"
            raise ConfigError(f"{where} needs one of dataset (builtin:NAME) and train (a file), it has {has}")
        if entry.dataset and (entry.dev or entry.test):
            raise ConfigError(f"{where}: the built-in {entry.dataset} has its own dev and test splits; remove dev/test")
        name = _entry_name(entry)
        if not _TASK_NAME.fullmatch(name):
            raise ConfigError(f"{where}: task name {name!r} may hold letters, digits, '_', '.' and '-' only; set name")
        if name in names:
            raise ConfigError(f"{where}: task name {name!r} is taken by another task; give each task its own name")
        names.append(name)
    fixed = [entry.rate is not None for entry in data.mixture]
    if any(fixed) and not all(fixed):
        raise ConfigError("data.mixture: set rate on every task or on none (none: examples-proportional mixing)")
    if any(entry.rate is not None and entry.rate <= 0 for entry in data.mixture):
        raise ConfigError("data.mixture: every rate must be > 0")
    if all(fixed) and (data.mixture_limit is not None or data.mixture_temperature != 1.0):
        raise ConfigError(
            "data.mixture_limit and data.mixture_temperature shape examples-proportional rates; with fixed rates "
            "remove them"
        )
    if data.mixture_limit is not None and data.mixture_limit < 1:
        raise ConfigError(f"data.mixture_limit must be >= 1 or null (no limit), got {data.mixture_limit}")
    if not data.mixture_temperature > 0:
        t = data.mixture_temperature
        raise ConfigError(f"data.mixture_temperature must be > 0 (1 = examples-proportional), got {t}")
    return names


class Seq2SeqTask(Task):
    """Text-to-text generation; see the module doc. Examples are {"text": source, "target": target}
    (files: `data.text_column` and `data.target_column`)."""

    name = "seq2seq"
    default_metric = DEFAULT_METRIC
    uses_decoder = True

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        super().__init__(cfg, tokenizer)
        d, t = cfg.data, cfg.technique
        if d.max_target_len < 2:
            raise ConfigError(f"data.max_target_len must be >= 2 (a token and the stop token), got {d.max_target_len}")
        if d.max_seq_len < 2:
            raise ConfigError(f"data.max_seq_len must be >= 2 (a token and the end token), got {d.max_seq_len}")
        if not 0.0 < t.target_mask_prob <= 1.0:
            raise ConfigError(f"technique.target_mask_prob must be in (0, 1], got {t.target_mask_prob}")
        if t.lm_weight < 0:
            raise ConfigError(f"technique.lm_weight must be >= 0, got {t.lm_weight}")
        for name, default in _UNREAD.items():
            if getattr(t, name) != default:
                raise ConfigError(
                    f"technique.{name}={getattr(t, name)!r} does not apply to seq2seq (the target is generated "
                    "token by token, not read from a sentence vector or feature layers); remove it"
                )
        self.special = tokenizer.special
        # A mixture's task names, in config order, and each task's prefix ("" keys the single task).
        self.task_names = mixture_names(d)
        self.prefixes = {name: e.prefix for name, e in zip(self.task_names, d.mixture, strict=True)} or {
            "": d.source_prefix
        }
        # Fixed by build(): how batches are laid out and labelled, and the token that ends a target.
        self.causal: bool | None = None
        self.encoder_decoder = False
        self.end_id = self.special.sep

    # -- data -----------------------------------------------------------------------------------

    def load(self, split: str) -> list[dict[str, Any]]:
        if not self.task_names:
            return self._load_one(self.cfg.data, split)
        # A mixture: every task's examples of the split, each tagged with its task's name.
        out: list[dict[str, Any]] = []
        for name, entry in zip(self.task_names, self.cfg.data.mixture, strict=True):
            if entry.dataset or getattr(entry, split):
                fields = {"dataset": entry.dataset, "train": entry.train, "dev": entry.dev, "test": entry.test}
                data = dataclasses.replace(self.cfg.data, **fields, mixture=[])
                out.extend({**ex, TASK_KEY: name} for ex in self._load_one(data, split))
        if not out:
            raise ConfigError(f"no task of data.mixture has a {split} split; give a task a {split} file")
        return out

    def _load_one(self, data: TaskDataConfig, split: str) -> list[dict[str, Any]]:
        # Files: the target column is read where classification reads its label.
        cfg = dataclasses.replace(self.cfg, data=dataclasses.replace(data, label_column=data.target_column))
        examples = load_split(cfg, split, "text")
        out = []
        for ex in examples:
            ex = dict(ex)
            if "label" in ex:
                ex["target"] = str(ex.pop("label"))
            out.append(ex)
        if not labels_present(out, "target", "target text"):
            raise DataError(
                f"the {split} split has no target texts (column {self.cfg.data.target_column!r}); "
                "set data.target_column (for unlabelled data use `bertzoo predict`)"
            )
        return out

    def sources(self, examples: list[dict[str, Any]]) -> list[str]:
        """Each example's source as the model reads it: its task prefix, then its text."""
        if not self.task_names:
            return [self.prefixes[""] + e["text"] for e in examples]
        out = []
        for e in examples:
            name = e.get(TASK_KEY)
            if name not in self.prefixes:
                where = e.get("source", "an example")
                raise DataError(
                    f'{where}: the model was fine-tuned on a mixture of tasks; give the input a "{TASK_KEY}" field '
                    f"naming one of: {', '.join(self.task_names)} (got {name!r})"
                )
            out.append(self.prefixes[name] + e["text"])
        return out

    def _groups(self, examples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Example indices by task name ("" for a single task), in the mixture's task order."""
        if not self.task_names:
            return {"": np.arange(len(examples))}
        tasks = np.asarray([e.get(TASK_KEY) for e in examples], dtype=object)
        groups = {name: np.flatnonzero(tasks == name) for name in self.task_names}
        return {name: idx for name, idx in groups.items() if len(idx)}

    def _check_targets(self, examples: list[dict[str, Any]], targets: list[list[int]]) -> None:
        """Training targets the tokenizer writes with its unknown token: refused in a label set (a task
        with at most half as many distinct targets as examples: classification as text), counted in a
        warning in free text (a rare symbol in a title is no reason to stop a run)."""
        unk = self.special.unk
        if unk is None:
            return
        for name, idx in self._groups(examples).items():
            of_task = f" of task {name!r}" if name else ""
            bad = [int(i) for i in idx if unk in targets[i]]
            if not bad:
                continue
            labels = {str(examples[i]["target"]) for i in idx}
            if 2 * len(labels) <= len(idx):
                label = str(examples[bad[0]]["target"])
                words = [w for w in label.split() if unk in self.tokenizer.encode_batch([w])[0]] or [label]
                raise DataError(
                    f"the training label {label!r}{of_task} has words the tokenizer can only write as its unknown "
                    f"token ({', '.join(map(repr, words))}: not in its vocabulary), so the model could never generate "
                    "it; change the label, or use a tokenizer (and a model) whose vocabulary has the word"
                )
            warnings.warn(
                f"{len(bad)} of {len(idx)} training targets{of_task} hold words the tokenizer writes as its unknown "
                f"token (e.g. {examples[bad[0]]['target']!r}); the model cannot generate those words",
                stacklevel=3,
            )

    def _prompts(self, texts: list[str]) -> list[np.ndarray]:
        """What generation starts from: an encoder-decoder's `source </s>` (the source cut to max_seq_len - 1
        tokens), else `[CLS] source [SEP]` (the source cut to what the target leaves of max_seq_len)."""
        if self.encoder_decoder:
            keep = self.cfg.data.max_seq_len - 1
            end = self.end_id
            return [np.asarray([*ids[:keep], end], dtype=np.int64) for ids in self.tokenizer.encode_batch(texts)]
        budget = self.cfg.data.max_seq_len - self.cfg.data.max_target_len - 2
        cls, sep = self.special.cls, self.special.sep
        return [np.asarray([cls, *ids[:budget], sep], dtype=np.int64) for ids in self.tokenizer.encode_batch(texts)]

    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        if not examples:
            raise DataError(f"the {split} split is empty; check the data")
        for ex in examples:
            if not isinstance(ex.get("text"), str) or not ex["text"].strip():
                raise DataError(f"{ex.get('source', split)}: needs a non-empty 'text' (the source) string")
        prompts = self._prompts(self.sources(examples))
        labelled = labels_present(examples, "target", "target text")
        targets = self.tokenizer.encode_batch([str(e["target"]) for e in examples]) if labelled else None
        if targets is not None and split == "train":
            self._check_targets(examples, targets)
        features = []
        for i, prompt in enumerate(prompts):
            if self.encoder_decoder:  # two sequences: the source for the encoder, the target for the decoder
                feature: dict[str, Any] = {"input_ids": prompt, "encoder_decoder": True}
                if targets is not None:
                    body = targets[i][: self.cfg.data.max_target_len - 1]
                    feature["labels"] = np.asarray([*body, self.end_id], dtype=np.int64)
                features.append(feature)
                continue
            if targets is not None:
                body = targets[i][: self.cfg.data.max_target_len - 1]
                ids = np.concatenate([prompt, np.asarray([*body, self.special.sep], dtype=np.int64)])
            else:
                ids = prompt
            features.append({"input_ids": ids, "source_len": len(prompt)})
        lengths = [len(f["input_ids"]) + len(f.get("labels", ())) for f in features]
        selection = None
        if self.task_names and split == "train":  # each epoch draws every task's share by its rate
            groups = self._groups(examples)
            d = self.cfg.data
            fixed = [e.rate for e in d.mixture] if d.mixture[0].rate is not None else None
            missing = [name for name in self.task_names if name not in groups]
            if missing:
                raise DataError(f"mixture task {missing[0]!r} has no training examples; check its data")
            selection = Mixture.build(
                list(groups.values()),
                list(groups),
                limit=d.mixture_limit,
                temperature=d.mixture_temperature,
                rates=fixed,
            )
        return FeatureDataset(features, lengths, range(len(examples)), selection)

    def collate(self, features: list[dict[str, Any]]) -> Batch:
        if self.causal is None:
            raise ConfigError("Seq2SeqTask.collate needs the model first (call build)")
        if bool(features[0].get("encoder_decoder")) != self.encoder_decoder:
            raise ConfigError("these seq2seq features were made for another kind of model; featurize after build")
        if self.encoder_decoder:
            return self._collate_encoder_decoder(features)
        ids, lengths = pad_2d([f["input_ids"] for f in features], self.tokenizer.pad_id)
        source = torch.tensor([int(f["source_len"]) for f in features])
        width = ids.size(1)
        pos = torch.arange(width)[None, :]
        real = pos < torch.from_numpy(lengths)[:, None]
        in_target = (pos >= source[:, None]) & real  # (batch, seq): the target tokens and its [SEP]
        src_type, tgt_type = self.segments
        types = torch.where(pos >= source[:, None], tgt_type, src_type)
        batch = Batch(input_ids=ids, token_type_ids=types, example_index=example_index(features))
        batch.attention_mask = attention_from_lengths(lengths, width)
        if self.causal:
            batch.labels = ids.masked_fill(~in_target, IGNORE_INDEX)
            in_source = (pos >= 1) & (pos < source[:, None])  # [CLS] is never predicted
            batch.extra["source_labels"] = ids.masked_fill(~in_source, IGNORE_INDEX)
            return batch
        chosen = self._mask_positions(features, in_target.numpy())
        batch.labels = ids.masked_fill(~chosen, IGNORE_INDEX)
        batch.input_ids = ids.masked_fill(chosen, self.special.mask)
        batch.extra["attention_pattern"] = seq2seq_mask(source, torch.from_numpy(lengths), width)
        return batch

    def _collate_encoder_decoder(self, features: list[dict[str, Any]]) -> Batch:
        """The source padded for the encoder; the targets (IGNORE_INDEX after each) as labels, which the
        model shifts right into the decoder's input. No decoder padding mask is needed: under the causal
        mask no target token sees the padding after it."""
        ids, lengths = pad_2d([f["input_ids"] for f in features], self.tokenizer.pad_id)
        batch = Batch(input_ids=ids, example_index=example_index(features))
        batch.attention_mask = attention_from_lengths(lengths, ids.size(1))
        if "labels" in features[0]:
            batch.labels = pad_2d([f["labels"] for f in features], IGNORE_INDEX)[0]
        return batch

    def _mask_positions(self, features: list[dict[str, Any]], in_target: np.ndarray) -> torch.Tensor:
        """Each target position with probability target_mask_prob, keyed by (seed, epoch, example); at
        least one per example (its lowest draw), so every example teaches something."""
        index = np.asarray([int(f.get("index", i)) for i, f in enumerate(features)], dtype=np.int64)
        epoch = np.asarray([int(f.get("epoch", 0)) for f in features], dtype=np.int64)
        u = uniform(self.cfg.train.seed, epoch[:, None], index[:, None], np.arange(in_target.shape[1])[None], "s2s")
        u = np.where(in_target, u, np.inf)
        chosen = u < self.cfg.technique.target_mask_prob
        chosen[np.arange(len(u)), u.argmin(1)] = True
        return torch.from_numpy(chosen & in_target)

    # -- model ----------------------------------------------------------------------------------

    def build(self, encoder: nn.Module) -> Seq2SeqModel | EncoderDecoderTaskModel:
        """The task model over `encoder`: an `EncoderDecoderLM` (T5, MASS) as it is, with its decoder and
        LM head; a single stack (GPT, BERT, UniLM) with the matching head (`Seq2SeqModel`)."""
        d, t = self.cfg.data, self.cfg.technique
        model: Seq2SeqModel | EncoderDecoderTaskModel
        if isinstance(encoder, EncoderDecoderLM):
            for name, (accepted, why) in _SINGLE_STACK_ONLY.items():
                if getattr(t, name) not in accepted:
                    raise ConfigError(
                        f"technique.{name}={getattr(t, name)} {why}; an encoder-decoder's decoder predicts every "
                        "target token from the source alone: remove it"
                    )
            self.causal, self.encoder_decoder = False, True
            self.end_id = end_token_id(self.tokenizer)
            model = EncoderDecoderTaskModel(encoder)
        else:
            if d.max_seq_len < d.max_target_len + 4:
                raise ConfigError(
                    f"data.max_seq_len={d.max_seq_len} leaves no room for a source beside "
                    f"data.max_target_len={d.max_target_len} (a single-stack model reads both as one sequence); "
                    "raise max_seq_len or lower max_target_len"
                )
            self.causal, self.encoder_decoder = bool(encoder.config.causal), False
            self.end_id = self.special.sep
            self.segments = segment_ids(encoder.config.type_vocab_size)
            model = Seq2SeqModel(encoder, t.lm_weight, self.special.mask)
        model.head_config = self.head_config()
        return model

    def generation_config(self) -> GenerationConfig:
        """The run's generation settings, stopping at the end token ([SEP], or an encoder-decoder's `</s>`)
        and padding with the tokenizer's pad."""
        g = self.cfg.generation
        return dataclasses.replace(
            g, eos_token_ids=list(g.eos_token_ids or [self.end_id]), pad_token_id=self.tokenizer.pad_id
        )

    # -- evaluation and prediction ----------------------------------------------------------------

    def generate_texts(self, model: Seq2SeqModel | EncoderDecoderTaskModel, texts: list[str]) -> list[str]:
        """Decoded targets for source texts, in order (batches of similar length, little padding)."""
        prompts = self._prompts(texts)
        config = self.generation_config()
        stops = set(config.eos_token_ids)
        device = next(model.parameters()).device
        order = np.argsort([len(p) for p in prompts], kind="stable")
        out: list[str] = [""] * len(prompts)
        bs = eval_batch_size(self.cfg)
        for start in range(0, len(order), bs):
            chunk = order[start : start + bs]
            ids, lengths = pad_2d([prompts[i] for i in chunk], self.tokenizer.pad_id)
            mask = attention_from_lengths(lengths, ids.size(1))
            result = generate(model.decoding(), ids.to(device), mask.to(device), config)
            for j, i in enumerate(chunk):
                tokens = result.sequences[j, : int(result.lengths[j])].tolist()
                if tokens and tokens[-1] in stops:  # the stop token is not text, special or not (`</s>`)
                    tokens = tokens[:-1]
                out[int(i)] = self.tokenizer.decode(tokens)
        return out

    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        """ROUGE, BLEU, exact match and the target loss. A mixture: each under `<task>_<metric>` for every
        task with examples here, and under the plain name their mean over the tasks (every task counts the
        same, as T5's average over its benchmarks)."""
        if not labels_present(examples, "target", "target text"):
            raise DataError("evaluation needs examples with targets; use predict for unlabelled data")
        predictions = self.generate_texts(model, self.sources(examples))
        gold = [str(e["target"]) for e in examples]
        rows = [{"prediction": p, "gold": g} for p, g in zip(predictions, gold, strict=True)]
        per_task: dict[str, dict[str, float]] = {}
        samples: list[dict[str, Any]] = []
        for name, idx in self._groups(examples).items():
            scores = generation_metrics([predictions[i] for i in idx], [gold[i] for i in idx])
            scores["loss"] = self._mean_loss(model, [features[int(i)] for i in idx])
            per_task[name] = {k: float(v) for k, v in scores.items()}
            if name:
                for i in idx:
                    rows[i][TASK_KEY] = name
            # A few decoded examples in report.json: generated text is read, not only scored.
            samples.extend(rows[i] for i in idx[:SAMPLES])
        if not self.task_names:
            return EvalResult(metrics=per_task[""], predictions=rows, report={"samples": samples})
        metrics = {f"{name}_{k}": v for name, scores in per_task.items() for k, v in scores.items()}
        for key in next(iter(per_task.values())):
            metrics[key] = float(np.mean([scores[key] for scores in per_task.values()]))
        counts = {name: {"examples": len(idx)} for name, idx in self._groups(examples).items()}
        report = {"samples": samples, "tasks": counts}
        return EvalResult(metrics=metrics, predictions=rows, report=report)

    def _mean_loss(self, model: nn.Module, features: FeatureDataset | list[dict[str, Any]]) -> float:
        """The target loss over the features, weighted by target tokens (epoch-0 masks)."""
        device = next(model.parameters()).device
        total = weight = 0.0
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                bs = eval_batch_size(self.cfg)
                for start in range(0, len(features), bs):
                    batch = self.collate([features[i] for i in range(start, min(len(features), start + bs))])
                    out = model(batch.to(device))
                    n = float(out.counts["target_loss"])
                    total += float(out.metrics["target_loss"]) * n
                    weight += n
        finally:
            model.train(was_training)
        return total / max(weight, 1.0)

    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in examples:
            if not isinstance(e.get("text"), str) or not e["text"].strip():
                raise DataError(f"{e.get('source', 'an example')}: prediction input needs a non-empty 'text' string")
        if not examples:
            return []
        return [{"prediction": p} for p in self.generate_texts(model, self.sources(examples))]
