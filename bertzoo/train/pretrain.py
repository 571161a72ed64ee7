"""Pretraining, assembled: shards -> examples -> masking collator -> objective -> Trainer."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import PretrainConfig, to_plain
from bertzoo.errors import ConfigError
from bertzoo.train.start import Start, begin


def assemble(cfg: PretrainConfig) -> tuple[torch.nn.Module, Any, Any, Any, Start]:
    """(objective, dataset, collator, tokenizer, start) for a pretraining config, validated before any
    training starts: vocabulary and sequence length must fit the model. Every weight begins in
    `bertzoo.train.start.begin` (random, a checkpoint, count-based starts); `start` records where each came from.

    A variant module may define `examples(cfg, corpus, tokenizer, world_size=...)` and
    `collator(cfg, tokenizer)` for its own data recipe; otherwise BERT's (NSP pairs or single
    segments, token masking) is used. `run_tokenizer(cfg, tokenizer)` may extend the shards' tokenizer
    at the end (T5's sentinels; the run saves the extended one) and `model_defaults(tokenizer)` give
    model fields that follow the tokenizer (T5's decoder start id) before the generic ones.
    `build(model_config, objective, **cfg.objective_args)` makes the trainable module, and
    `use_tokenizer(module, tokenizer)` fills what it takes from the vocabulary (ELMo's character table).
    """
    from bertzoo.data.tokens.shards import ShardedCorpus
    from bertzoo.engine.distributed import is_main
    from bertzoo.engine.progress import say
    from bertzoo.variants import get_variant

    if not cfg.data.shards:
        raise ConfigError("data.shards is not set; run `bertzoo prepare` and pass --data.shards DIR")
    variant = get_variant(cfg.variant)
    corpus = ShardedCorpus(cfg.data.shards)
    tokenizer = corpus.tokenizer()
    corpus.check_tokenizer(tokenizer)  # a replaced shards/tokenizer/ would feed the model ids it cannot embed
    if variant.run_tokenizer is not None:
        tokenizer = variant.run_tokenizer(cfg, tokenizer)

    @functools.cache
    def train_counts() -> np.ndarray:
        """Training-token frequencies, streamed over the shards once however many uses need them."""
        return unigram_counts(corpus, tokenizer.vocab_size, tokenizer.special_ids)

    objective, start = begin(cfg, variant, tokenizer, corpus, train_counts)
    dataset = pretraining_examples(cfg, corpus, tokenizer)
    collator = _make_collator(cfg, variant, tokenizer, train_counts)
    # Said once the whole run is known to be valid (a bad setting is one error line), on stderr with the run's
    # other messages: stdout is the summary's.
    if is_main():
        for line in start.lines():
            say(line)
    return objective, dataset, collator, tokenizer, start


def build_pretraining(cfg: PretrainConfig) -> tuple[torch.nn.Module, Any, Any, Any]:
    """(objective, dataset, collator, tokenizer) of a pretraining config (`assemble` without the start record)."""
    return assemble(cfg)[:4]


def _make_collator(cfg: PretrainConfig, variant: Any, tokenizer: Any, train_counts: Callable[[], np.ndarray]) -> Any:
    """The run's collator: the variant's own, unit masking for a non-token strategy, else BERT's token masking."""
    from bertzoo.data.pretraining.collate_mlm import PretrainingCollator

    power = cfg.data.masking.frequency_power
    if power and (variant.collator is not None or cfg.data.masking.strategy != "token"):
        raise ConfigError(
            f"data.masking.frequency_power works with token-level masking in BERT's collator, not with the "
            f"{cfg.variant} variant's own data recipe or strategy {cfg.data.masking.strategy!r}; set it to 0"
        )
    if variant.collator is not None:
        return variant.collator(cfg, tokenizer)
    if cfg.data.masking.strategy != "token":
        # Whole-word, span, phrase or entity masking needs unit boundaries (WordPiece `##` at least).
        from bertzoo.data.pretraining.collate_units import UnitMaskingCollator

        return UnitMaskingCollator(
            tokenizer,
            cfg.data.masking,
            seed=cfg.train.seed,
            pad_to_multiple_of=cfg.data.pad_to_multiple_of,
            strategy=cfg.data.masking.strategy,
        )
    return PretrainingCollator(
        tokenizer,
        cfg.data.masking,
        seed=cfg.train.seed,
        pad_to_multiple_of=cfg.data.pad_to_multiple_of,
        selector=cfg.data.masking.strategy,
        token_weights=masking_weights(train_counts(), power) if power else None,
    )


def masking_weights(counts: np.ndarray, power: float) -> np.ndarray:
    """Selection weight per vocabulary id from training counts, (count + 1) ** -power: rarer tokens are masked
    more often, so more of the predictions are content words, which need the document's context."""
    return (counts.astype(np.float64) + 1.0) ** -power


def pretraining_examples(cfg: PretrainConfig, corpus, tokenizer):
    """The family's data recipe over `corpus` for this run's number of processes."""
    from bertzoo.engine.distributed import dist_info
    from bertzoo.variants import get_variant

    return get_variant(cfg.variant).examples(cfg, corpus, tokenizer, world_size=dist_info().world_size)


def unigram_counts(corpus, vocab_size: int, special_ids: np.ndarray) -> np.ndarray:
    """Token frequencies over a shard corpus, special tokens zeroed (streamed shard by shard)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for s0 in range(0, corpus.num_sentences, 1 << 20):
        s1 = min(corpus.num_sentences, s0 + (1 << 20))
        counts += np.bincount(np.asarray(corpus.tokens(s0, s1), dtype=np.int64), minlength=vocab_size)[:vocab_size]
    counts[special_ids] = 0
    return counts


def fixed_eval_batches(cfg: PretrainConfig, tokenizer, collator, shards: str | None = None) -> list[Batch]:
    """A fixed held-out set: epoch-0 examples of the eval shards (or of `shards`), masked once (same every
    time)."""
    from bertzoo.data.tokens.shards import ShardedCorpus

    corpus = ShardedCorpus(shards or cfg.data.eval_shards)
    corpus.check_tokenizer(tokenizer)
    # Held-out examples follow the variant's own recipe (RoBERTa: one segment; ALBERT: SOP pairs).
    dataset = pretraining_examples(cfg, corpus, tokenizer)
    dataset.set_epoch(0)
    bs = cfg.train.batch_size
    n = min(len(dataset), cfg.data.eval_batches * bs)
    return [collator([dataset[i] for i in range(start, min(n, start + bs))]) for start in range(0, n, bs)]


def scored_labels(batches: list[Batch], causal: bool = False) -> np.ndarray:
    """The targets the objective is scored on, flattened: the labels that are not IGNORE_INDEX, for a causal
    LM those of positions 1.. only (position t predicts t + 1; the first token is never predicted)."""
    targets = (b.labels[:, 1:] if causal else b.labels for b in batches)
    return torch.cat([t[t != IGNORE_INDEX] for t in targets]).numpy()


def with_predicted_specials(
    counts: np.ndarray, batches: list[Batch], special_ids: np.ndarray, causal: bool = True
) -> np.ndarray:
    """`counts` (corpus tokens, specials zeroed) plus the special tokens an LM is trained to predict (a causal
    LM's [SEP] at document and block ends, [UNK]; T5's sentinels and end token), each at its rate per
    ordinary target in `batches` of training data: without them the baseline would give them add-one
    probabilities and look far too weak."""
    seen = np.bincount(scored_labels(batches, causal=causal), minlength=len(counts))
    ordinary = max(1, int(seen.sum() - seen[special_ids].sum()))
    out = counts.astype(np.float64)
    out[special_ids] = seen[special_ids] * (counts.sum() / ordinary)
    return out


def make_mlm_evaluator(
    batches: list[Batch], train_counts: np.ndarray | None = None, *, causal: bool = False, name: str = ""
) -> tuple[Callable[[torch.nn.Module], dict[str, float]], dict[str, float]]:
    """An eval_fn for the Trainer plus the unigram baseline on the same scored positions (masked ones, or
    for a causal LM every next token: `scored_labels`).

    The baseline predicts from training-set token frequencies (add-one smoothed): its accuracy is
    that of always guessing the most frequent token, its loss the unigram cross-entropy, named like the
    objective's metrics (`unigram_mlm_*`, or `unigram_lm_*` for a causal LM; `name` overrides).
    """
    baseline: dict[str, float] = {}
    if train_counts is not None:
        labels = scored_labels(batches, causal)
        probs = (train_counts + 1) / (train_counts.sum() + len(train_counts))
        name = name or ("lm" if causal else "mlm")
        loss = float(-np.log(probs[labels]).mean())
        baseline = {
            f"unigram_{name}_acc": float((labels == int(train_counts.argmax())).mean()),
            f"unigram_{name}_loss": loss,
            f"unigram_{name}_ppl": math.exp(min(loss, 50.0)),
        }

    def evaluate(objective: torch.nn.Module) -> dict[str, float]:
        device = next(objective.parameters()).device
        totals: dict[str, float] = {}
        weights: dict[str, float] = {}
        for batch in batches:
            out = objective(batch.to(device))
            for key, value in out.metrics.items():
                w = float(out.counts.get(key, 1))
                totals[key] = totals.get(key, 0.0) + float(value) * w
                weights[key] = weights.get(key, 0.0) + w
        result = {f"eval_{k}": totals[k] / weights[k] for k in totals if weights[k] > 0}
        # Masked-LM, next-token (causal LM) and the biLM's forward / backward perplexity: exp of the loss over
        # all scored tokens (a mean of per-batch perplexities is not the perplexity of the set).
        for name in ("mlm", "lm", "fwd", "bwd"):
            if f"eval_{name}_loss" in result:
                result[f"eval_{name}_ppl"] = math.exp(min(result[f"eval_{name}_loss"], 50.0))
        return result

    return evaluate, baseline


def pretrain(cfg: PretrainConfig, resume: str | None = None) -> dict[str, Any]:
    """Run (or resume) a pretraining job; returns the trainer's summary (plus the unigram baseline
    and final held-out metrics when `data.eval_shards` is set)."""
    from bertzoo.data.tokens.shards import ShardedCorpus
    from bertzoo.engine.loop import Trainer
    from bertzoo.objectives.seq2seq_lm import EncoderDecoderLM

    objective, dataset, collator, tokenizer, start = assemble(cfg)
    eval_fn, baseline = None, {}
    if cfg.data.eval_shards:
        batches = fixed_eval_batches(cfg, tokenizer, collator)
        corpus = ShardedCorpus(cfg.data.shards)
        counts = unigram_counts(corpus, tokenizer.vocab_size, tokenizer.special_ids)
        # Objectives scored on every next token (a causal LM, Transformer-XL's segments, a biLM's forward LM)
        # declare `predicts_next_token`: their baseline is the next-token one (a biLM's backward LM's targets
        # differ by one token per block, the first, not the last).
        causal = bool(getattr(objective, "predicts_next_token", False))
        seq2seq = isinstance(objective, EncoderDecoderLM)
        if causal or seq2seq:
            # Both predict tokens that never occur in the corpus text: separators, T5's sentinels and end
            # token (every id past the shards' vocabulary is one of the run tokenizer's additions).
            added = np.arange(corpus.vocab_size, tokenizer.vocab_size, dtype=np.int64)
            train_batches = fixed_eval_batches(cfg, tokenizer, collator, shards=cfg.data.shards)
            specials = np.concatenate([tokenizer.special_ids, added])
            counts = with_predicted_specials(counts, train_batches, specials, causal=causal)
        eval_fn, baseline = make_mlm_evaluator(batches, counts, causal=causal, name="lm" if seq2seq else "")
    run_config = {**to_plain(cfg), "start": start.as_dict()}
    trainer = Trainer(
        objective,
        dataset,
        collator,
        cfg.train,
        save_extra=tokenizer.save,
        run_config=run_config,
        eval_fn=eval_fn,
        num_workers=cfg.data.num_workers,
        eval_at_start=bool(cfg.init),  # a checkpoint's gap to this corpus, seen before training
    )
    summary = trainer.train(resume=resume)
    if baseline:
        summary["baseline"] = baseline
    from bertzoo.engine.distributed import is_main
    from bertzoo.io import write_atomic

    # A resume of a finished run trains nothing; keep the summary of the run that did the work.
    if is_main() and summary.get("steps_this_session", 1) > 0:
        write_atomic(Path(cfg.train.output_dir) / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
        if summary.get("final_dir"):
            # final/'s README.md with the summary's held-out metrics and baseline (never fails the run).
            from bertzoo.interop.model_card import write_model_card

            resolved = {k: summary.get(k) for k in ("device", "precision", "cpu_capability")}
            write_model_card(summary["final_dir"], run_config={**run_config, "resolved": resolved}, summary=summary)
    return summary
