"""How a pretraining run's weights begin, in one place: `begin` builds the run's module and starts every weight.

The starts, in the order they apply:

- random: the family's own initialisation, seeded by `train.seed` (the same weights every time);
- a checkpoint (`init`: a bertzoo or Hugging Face directory, `hf:ORG/NAME`, `builtin:NAME`): its family and shape
  become the run's; every tensor of the run's module that the checkpoint holds is loaded, the heads it lacks are
  built fresh (SpanBERT's boundary head, ELECTRA's generator, a masked-LM head beside a bare encoder);
- count-based word tables (`word_embedding_init: ppmi-svd`): PPMI + SVD vectors of the shards, for word tables the
  checkpoint did not supply;
- the unigram masked-LM bias (`mlm_bias_init: unigram`, and always for a fresh head on a loaded encoder): the log
  token frequencies of the shards, for output biases the checkpoint did not supply;
- the local relative bias (`relative_bias_init: local`, T5): half the heads pointed at their neighbours, for
  relative-position tables the checkpoint did not supply.

`begin` returns the module and a `Start`: which tensors were loaded, which built fresh and which of the checkpoint's
were ignored, and what each count-based start did. The run logs it and writes it into `run_config.json`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.config import ModelConfig, PretrainConfig
from bertzoo.errors import CheckpointError, ConfigError, DataError

# Model fields a run may set on top of a checkpoint's config: they change no tensor's shape or meaning (dropout,
# the initialisation of fresh parts, ERNIE 2.0's task-embedding table, which starts fresh, and the pooler, which
# a run may drop). Any other field must equal the checkpoint's.
COMPATIBLE_FIELDS = frozenset(
    {"dropout", "attention_dropout", "initializer_range", "task_type_vocab_size", "pooler", "variant"}
)
# Fields that name a size instead of setting one: the checkpoint's shape replaces them.
SIZE_NAMES = frozenset({"preset"})


@dataclass
class Start:
    """Where the weights of a run's module came from."""

    checkpoint: str = ""  # the `init` it was given ("" = random)
    resolved: str = ""  # the local directory it resolved to
    family: str = ""  # the checkpoint's family
    loaded: list[str] = field(default_factory=list)  # the module's tensors read from the checkpoint
    fresh: list[str] = field(default_factory=list)  # built fresh (the family's initialisation, or a start below)
    ignored: list[str] = field(default_factory=list)  # the checkpoint's tensors the module has no place for
    steps: list[str] = field(default_factory=list)  # what each start did, in order, one line each

    def note(self, line: str) -> None:
        self.steps.append(line)

    def lines(self) -> list[str]:
        """What the log shows: one line per kind of weight, tensors grouped by layer pattern."""
        if not self.checkpoint:  # the family's own initialisation (train.seed), and any count-based starts
            return [f"start: {step}" for step in self.steps]
        out = [f"start: {self.checkpoint} ({self.family}) -> {len(self.loaded)} tensors loaded"]
        for what, names in (("built fresh", self.fresh), ("ignored", self.ignored)):
            if names:
                out.append(f"start: {what}: {', '.join(grouped(names))}")
        return out + [f"start: {step}" for step in self.steps]

    def as_dict(self) -> dict[str, Any]:
        """The record `run_config.json` keeps (tensor names grouped by layer pattern)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("loaded", "fresh", "ignored"):
            out[key] = grouped(out[key])
        return out


def grouped(names: list[str]) -> list[str]:
    """Tensor names with layer numbers folded: `encoder.stack.layers.{0-5}.ffn.up.weight` once, not six times."""
    groups: dict[str, list[int]] = {}
    for name in names:
        match = re.search(r"\.(\d+)\.", name)
        key = name if match is None else name[: match.start()] + ".{}." + name[match.end() :]
        groups.setdefault(key, []).append(-1 if match is None else int(match.group(1)))
    out = []
    for key, numbers in groups.items():
        if numbers == [-1]:
            out.append(key)
        else:
            lo, hi = min(numbers), max(numbers)
            out.append(key.replace("{}", str(lo) if lo == hi else f"{{{lo}-{hi}}}"))
    return out


def encoder_prefix(keys: Any) -> str:
    """Where the backbone's tensors sit in a module or checkpoint: ELECTRA's discriminator is its encoder."""
    return "discriminator.encoder." if any(k.startswith("discriminator.encoder.") for k in keys) else "encoder."


def begin(
    cfg: PretrainConfig, variant: Any, tokenizer: Any, corpus: Any, train_counts: Callable[[], np.ndarray]
) -> tuple[nn.Module, Start]:
    """The run's trainable module with every weight started, and the record of where each came from."""
    start = Start(checkpoint=cfg.init)
    checkpoint = None
    if cfg.init:
        checkpoint = _read_init(cfg, variant, corpus, start)
        model_cfg = _continued_config(cfg, variant, checkpoint[1], start)
        if tokenizer.vocab_size > model_cfg.vocab_size:
            raise CheckpointError(
                f"the run's tokenizer has {tokenizer.vocab_size} tokens but init {cfg.init} embeds only "
                f"{model_cfg.vocab_size}; prepare the shards with its own tokenizer (bertzoo prepare --tokenizer "
                f"{cfg.init})"
            )
    else:
        model_cfg = _scratch_config(cfg, variant, tokenizer)
    objective = _build(cfg, variant, model_cfg, tokenizer)
    loaded: set[str] = set()
    if checkpoint is not None:
        loaded = _load(objective, checkpoint[2], start)
        _zero_added_embeddings(objective, loaded, start)
    _start_word_tables(cfg, objective, corpus, tokenizer, loaded, start)
    _start_output_biases(cfg, objective, train_counts, loaded, start)
    if cfg.relative_bias_init == "local":
        _start_local_bias(objective, cfg.variant, loaded, start)
    return objective, start


# --- the model config ---------------------------------------------------------------------------------------------


def _scratch_config(cfg: PretrainConfig, variant: Any, tokenizer: Any) -> ModelConfig:
    """A from-scratch model's config, checked against the run's tokenizer and data.max_seq_len."""
    from bertzoo.variants import scratch_config

    model_cfg = scratch_config(variant, cfg.model, tokenizer)
    if model_cfg.vocab_size != tokenizer.vocab_size:
        raise ConfigError(
            f"model.vocab_size={model_cfg.vocab_size} but the run's tokenizer has {tokenizer.vocab_size} "
            "tokens; remove model.vocab_size (it defaults to the tokenizer's) or re-prepare the shards"
        )
    _check_length(cfg, model_cfg)
    return model_cfg


def _check_length(cfg: PretrainConfig, model_cfg: ModelConfig) -> None:
    if model_cfg.position != "none" and cfg.data.max_seq_len > model_cfg.max_position:
        raise ConfigError(
            f"data.max_seq_len={cfg.data.max_seq_len} exceeds model.max_position={model_cfg.max_position}; "
            "lower data.max_seq_len or raise model.max_position"
        )
    if cfg.data.max_seq_len < 8:
        raise ConfigError(f"data.max_seq_len={cfg.data.max_seq_len} is too short; use at least 8")


def _read_init(
    cfg: PretrainConfig, variant: Any, corpus: Any, start: Start
) -> tuple[dict[str, Any], ModelConfig, dict[str, torch.Tensor]]:
    """(raw config, config, tensors) of the `init` checkpoint, checked against the run's family and shards."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.loading import read_checkpoint, resolve
    from bertzoo.variants import get_variant

    directory = resolve(cfg.init)
    raw, config, state, _ = read_checkpoint(directory)
    start.resolved, start.family = str(directory), config.variant
    theirs = get_variant(config.variant)
    if not _same_backbone(variant, theirs, config):
        raise ConfigError(
            f"init {cfg.init} is a {theirs.title} checkpoint, which a {variant.title} run cannot continue (variant: "
            f"{cfg.variant}); set variant: {config.variant} or start from a {variant.title} checkpoint"
        )
    try:
        ckpt_tokenizer = Tokenizer.load(directory)
    except Exception:  # no tokenizer files, or ones bertzoo cannot read: the shards cannot be checked against it
        raise CheckpointError(
            f"init {cfg.init}: {directory} has no tokenizer bertzoo can read, so the shards cannot be checked "
            "against it; copy the tokenizer files of the checkpoint into that directory"
        ) from None
    try:
        corpus.check_tokenizer(ckpt_tokenizer)
    except DataError:
        raise DataError(
            f"data.shards {corpus.path} were not prepared with the tokenizer of init {cfg.init}: its ids would mean "
            f"other tokens; run bertzoo prepare --tokenizer {cfg.init} and pass the new shards"
        ) from None
    return raw, config, state


def _same_backbone(run: Any, checkpoint: Any, config: ModelConfig) -> bool:
    """Whether a run of family `run` can hold the backbone of a checkpoint of family `checkpoint`: the same
    backbone class and config class, and the same attention direction (a GPT's causal stack is no BERT)."""
    if run.encoder_class is not checkpoint.encoder_class or run.config_class is not checkpoint.config_class:
        return False
    own = run.model_config({"preset": next(iter(run.presets))})
    return (own.causal, own.is_encoder_decoder) == (config.causal, config.is_encoder_decoder)


def _continued_config(cfg: PretrainConfig, variant: Any, config: ModelConfig, start: Start) -> ModelConfig:
    """The checkpoint's config with what the run's `model:` block may add (COMPATIBLE_FIELDS); any other field
    set to another value than the checkpoint's is a contradiction."""
    import dataclasses

    changes = {}
    for key, value in cfg.model.items():
        if key in SIZE_NAMES:
            start.note(f"model.{key} {value!r} not used: the size is the checkpoint's")
            continue
        if not hasattr(config, key):
            raise ConfigError(f"model.{key} is not a field of a {variant.title} model; remove it")
        if key == "variant" or key in COMPATIBLE_FIELDS or getattr(config, key) == value:
            if key != "variant":
                changes[key] = value
            continue
        raise ConfigError(
            f"model.{key}={value!r} contradicts init {cfg.init}, whose {key} is {getattr(config, key)!r}; remove "
            f"model.{key} (the checkpoint sets the architecture)"
        )
    model_cfg = dataclasses.replace(config, **changes)
    _check_length(cfg, model_cfg)
    return model_cfg


# --- building and loading -----------------------------------------------------------------------------------------


def _build(cfg: PretrainConfig, variant: Any, model_cfg: ModelConfig, tokenizer: Any) -> nn.Module:
    """The family's pretraining module, initialised from train.seed: a run restarted before its first checkpoint
    (or run in a long-lived process) starts from the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed)
        objective = variant.build(model_cfg, objective=variant.objective(cfg), **cfg.objective_args)
        if variant.use_tokenizer is not None:
            variant.use_tokenizer(objective, tokenizer)
    return objective


def _load(objective: nn.Module, state: dict[str, torch.Tensor], start: Start) -> set[str]:
    """Copy every tensor of `state` the objective has a place for (by name, or under the objective's encoder
    prefix for the checkpoint's encoder tensors); record what was loaded, fresh and ignored. A tensor whose place
    has another shape is a CheckpointError."""
    from bertzoo.io import missing_and_unexpected

    own = objective.state_dict()
    theirs, ours = encoder_prefix(state), encoder_prefix(own)
    picked: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for name, tensor in own.items():
        source = name if name in state else None
        if source is None and name.startswith(ours) and theirs + name[len(ours) :] in state:
            source = theirs + name[len(ours) :]
        if source is None:
            continue
        if state[source].shape != tensor.shape:
            raise CheckpointError(
                f"init {start.checkpoint}: {source} has shape {tuple(state[source].shape)} where the run's model has "
                f"{tuple(tensor.shape)} ({name}); the checkpoint does not fit this family's model"
            )
        picked[name] = state[source]
        used.add(source)
    if not any(name.startswith(ours) for name in picked):
        raise CheckpointError(
            f"init {start.checkpoint}: {start.resolved} holds no encoder weights this model can use; pass the "
            "directory of a model (a run's final/, a checkpoint, a Hugging Face model)"
        )
    objective.load_state_dict(picked, strict=False)
    missing, _ = missing_and_unexpected(objective, set(picked))
    start.loaded = sorted(picked)
    start.fresh = sorted(missing)
    start.ignored = sorted(set(state) - used)
    return set(picked)


def _zero_added_embeddings(objective: nn.Module, loaded: set[str], start: Start) -> None:
    """A table added to the inputs of a loaded encoder (ERNIE 2.0's task embedding) starts at zero, so that at step
    0 the loaded model computes exactly what the checkpoint did."""
    for name, tensor in objective.state_dict().items():
        if name not in loaded and name.endswith("embeddings.task_type.weight"):
            with torch.no_grad():
                tensor.zero_()
            start.note(f"{name} starts at zero: the loaded encoder's outputs are unchanged at step 0")


# --- count-based starts -------------------------------------------------------------------------------------------


def _start_word_tables(
    cfg: PretrainConfig, objective: nn.Module, corpus: Any, tokenizer: Any, loaded: set[str], start: Start
) -> None:
    """`word_embedding_init: ppmi-svd` for the word tables that neither the checkpoint nor an ELECTRA generator
    run supplied."""
    if cfg.word_embedding_init != "ppmi-svd":
        return
    from bertzoo.data.tokens.word_vectors import word_tables

    generator = getattr(objective, "generator_loaded", False)
    if generator or any(name.endswith("embeddings.word.weight") for name in loaded):
        source = "the generator checkpoint" if generator else "the checkpoint"
        start.note(f"word_embedding_init skipped: {source} supplies the word tables")
        return
    if not word_tables(objective):
        raise ConfigError(
            f"word_embedding_init: ppmi-svd needs a word table, which the {cfg.variant} model has "
            "none of; remove word_embedding_init"
        )
    start.note(init_word_vectors(objective, corpus, tokenizer.vocab_size, tokenizer.special_ids, cfg))


def _start_output_biases(
    cfg: PretrainConfig, objective: nn.Module, train_counts: Callable[[], np.ndarray], loaded: set[str], start: Start
) -> None:
    """The unigram start of masked-LM output biases: asked for by `mlm_bias_init: unigram`, and always for a head
    built fresh on a loaded encoder (a zero bias would spend the first steps learning frequencies through the
    loaded word table). Biases the checkpoint or an ELECTRA generator run supplied stay."""
    from bertzoo.models.heads import MaskedLMHead

    wanted = cfg.mlm_bias_init == "unigram" or bool(loaded)
    if not wanted:
        return
    if getattr(objective, "generator_loaded", False):
        start.note("mlm_bias_init skipped: the generator checkpoint supplies the masked-LM head")
        return
    heads = [(n, m) for n, m in objective.named_modules() if isinstance(m, MaskedLMHead)]
    fresh = [m for n, m in heads if f"{n}.decoder.bias" not in loaded]
    if cfg.mlm_bias_init == "unigram" and not heads:
        raise ConfigError(
            f"mlm_bias_init: unigram needs a masked-LM output bias, which the {cfg.variant} model has none of "
            "(a GPT head is the tied word table alone); remove mlm_bias_init"
        )
    if fresh:
        set_unigram_bias(fresh, train_counts())
        start.note(f"masked-LM output bias: log unigram frequencies of the shards ({len(fresh)} head(s))")
    elif heads:
        start.note("masked-LM output bias: the checkpoint's")


def set_unigram_bias(heads: list[nn.Module], counts: np.ndarray) -> None:
    """Set the decoder bias of each masked-LM head to the log of the add-one smoothed unigram distribution of
    `counts`.

    A zero bias makes the first few hundred steps learn token frequencies, and with a decoder tied to the input
    embeddings most of that lands in the embeddings: every rare word is pushed the same way (docs/pretraining.md).
    Starting from the frequencies leaves the embeddings free to learn context.
    """
    probs = (counts.astype(np.float64) + 1.0) / (counts.sum() + len(counts))
    for head in heads:
        with torch.no_grad():
            head.decoder.bias.copy_(torch.from_numpy(np.log(probs)).to(head.decoder.bias.dtype))


def _start_local_bias(objective: nn.Module, variant: str, loaded: set[str], start: Start) -> None:
    """`relative_bias_init: local`: every relative-position table of `objective` (T5: one per stack) the
    checkpoint did not supply starts with half its heads pointed at their nearest neighbours."""
    from bertzoo.nn import RelativePositionBias

    named = [(n, m) for n, m in objective.named_modules() if isinstance(m, RelativePositionBias)]
    if not named:
        raise ConfigError(
            f"relative_bias_init: local needs relative-position tables, which the {variant} model has none of "
            "(T5's model.relative_buckets); remove relative_bias_init"
        )
    tables = [m for n, m in named if not any(k.startswith(f"{n}.") for k in loaded)]
    if not tables:
        start.note("relative_bias_init: local skipped: the checkpoint supplies the relative-position tables")
        return
    offsets = [table.start_local() for table in tables]
    start.note(f"relative bias: heads pointed at key - query offsets {offsets} (one list per stack)")


def init_word_vectors(objective: nn.Module, corpus: Any, vocab_size: int, special_ids: np.ndarray, cfg: Any) -> str:
    """Start every word table of `objective` from PPMI + SVD vectors of the training shards
    (bertzoo.data.tokens.word_vectors); the same on every process (the SVD is seeded by train.seed). Returns the
    line that says what it did."""
    from bertzoo.data.tokens.word_vectors import cooccurrence, load_word_vectors, ppmi, svd_vectors, word_tables

    tables = word_tables(objective)
    began = time.perf_counter()
    matrix = ppmi(cooccurrence(document_chunks(corpus), vocab_size, cfg.word_embedding_window, special_ids))
    rows = torch.unique(matrix.indices()[0])
    if len(rows) == 0:
        raise ConfigError(
            "word_embedding_init: ppmi-svd found no word pairs in data.shards (documents of one "
            "token?); remove word_embedding_init or use a larger corpus"
        )
    vectors = svd_vectors(matrix, max(t.embedding_dim for t in tables), seed=cfg.train.seed)
    for table in tables:
        load_word_vectors(table, vectors, rows)
    return (
        f"word vectors: PPMI + SVD of {matrix.values().numel():,} word pairs (window {cfg.word_embedding_window}), "
        f"{len(rows):,} of {vocab_size:,} rows set in {time.perf_counter() - began:.1f} s"
    )


# Count-based vectors stop improving long before a pretraining corpus ends, and counting takes time and memory
# in proportion to the tokens read: a larger corpus is sampled in whole chunks spread evenly over it.
WORD_VECTOR_TOKENS = 1 << 26  # ~67M tokens: well under a minute of counting


def document_chunks(corpus: Any, tokens_per_chunk: int = 1 << 22, max_tokens: int = WORD_VECTOR_TOKENS):
    """(token ids, document id per token) of whole documents, about `tokens_per_chunk` tokens at a time; when the
    corpus has more than `max_tokens`, evenly spaced chunks of about that many in all."""
    doc_starts = corpus.sentence_offsets[corpus.doc_offsets[:-1]]  # global token offset of each document
    doc_ends = corpus.sentence_offsets[corpus.doc_offsets[1:]]
    bounds, first = [], 0
    while first < corpus.num_docs:
        last = max(first + 1, int(np.searchsorted(doc_ends, doc_starts[first] + tokens_per_chunk, side="right")))
        bounds.append((first, last))
        first = last
    if corpus.num_tokens > max_tokens:
        keep = np.linspace(0, len(bounds) - 1, max(1, max_tokens // tokens_per_chunk)).round().astype(int)
        bounds = [bounds[i] for i in np.unique(keep)]
    for first, last in bounds:
        begin_at, end = int(doc_starts[first]), int(doc_ends[last - 1])
        yield (
            corpus.token_range(begin_at, end),
            np.repeat(np.arange(first, last), doc_ends[first:last] - doc_starts[first:last]),
        )
