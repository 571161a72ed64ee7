"""The run configs: one dataclass per concern of a pretraining, fine-tuning or distillation run, as the YAML
files in `configs/` write them, and the functions that read those files."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bertzoo.config.parse import apply_overrides, from_dict, load_yaml
from bertzoo.errors import ConfigError

Precision = Literal["auto", "fp32", "bf16", "fp16"]  # auto: bf16 where the hardware runs it natively and faster
TrackerName = Literal["tensorboard", "wandb", "mlflow"]  # experiment trackers (bertzoo.engine.trackers)


@dataclass
class MaskingConfig:
    """Masked-LM corruption: which positions are selected and how they are replaced."""

    strategy: str = "token"  # selection: token | whole_word | span | phrase | entity (see masking.SELECTORS)
    mask_prob: float = 0.15  # share of non-special tokens selected for prediction
    replace_mask: float = 0.8  # of the selected: replaced by [MASK]
    replace_random: float = 0.1  # of the selected: replaced by a random token; the rest is kept
    max_predictions: int | None = None  # cap per sequence (BERT used 20 at length 128)
    span_p: float = 0.2  # span strategy: geometric length distribution parameter (SpanBERT)
    max_span: int = 10  # span strategy: longest span, in words
    static_copies: int = 0  # 0 = dynamic masking; N = static masks, N copies per example (RoBERTa's baseline)
    # Token selection weighted by rarity: a token is drawn with weight (training count + 1) ** -power,
    # still exactly mask_prob of each row. 0 = uniform (BERT); > 0 favours content words over function words.
    frequency_power: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"data.masking.mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.replace_mask < 0 or self.replace_random < 0 or self.replace_mask + self.replace_random > 1.0:
            raise ConfigError(
                "data.masking.replace_mask + data.masking.replace_random must be within [0, 1], got "
                f"{self.replace_mask} + {self.replace_random}"
            )
        if self.max_predictions is not None and self.max_predictions < 1:
            raise ConfigError(f"data.masking.max_predictions must be >= 1 or null (no cap), got {self.max_predictions}")
        if not 0.0 <= self.frequency_power <= 2.0:
            raise ConfigError(
                f"data.masking.frequency_power must be in [0, 2] (0 = uniform selection), got {self.frequency_power}"
            )
        if self.span_p <= 0 or self.span_p > 1 or self.max_span < 1:
            raise ConfigError(
                f"data.masking.span_p must be in (0, 1] and max_span >= 1, got {self.span_p} and {self.max_span}"
            )


@dataclass
class DataConfig:
    """Where pretraining data comes from and how examples are built."""

    shards: str = ""  # directory written by `bertzoo prepare`
    max_seq_len: int = 128
    short_seq_prob: float = 0.1  # BERT: sometimes use a shorter target length
    nsp: bool = True
    nsp_random_prob: float = 0.5  # share of NotNext pairs
    # "" = the variant's default; segment_pair (BERT NSP), sentence_order (ALBERT SOP),
    # full_sentences / doc_sentences (RoBERTa), single (one segment per example)
    input_format: str = ""
    # full_sentences: keep the documents packed into one example apart (block-diagonal attention, positions
    # restarting at each document) instead of letting them attend to each other as RoBERTa does.
    document_boundaries: bool = False
    tokens_per_batch: int = 0  # doc_sentences: vary the batch size to keep tokens per batch constant
    lexicon: str = ""  # phrase/entity masking: a lexicon or annotation file (ERNIE)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    num_workers: int = 0
    pad_to_multiple_of: int = 8
    eval_shards: str = ""  # held-out shards for MLM evaluation every train.eval_every steps
    eval_batches: int = 20  # batches of train.batch_size evaluated (a fixed set: same masks each time)


@dataclass
class TrainConfig:
    """The optimisation loop shared by pretraining, fine-tuning and distillation."""

    output_dir: str = "runs/pretrain"
    seed: int = 42
    batch_size: int = 32  # examples per micro-batch (per process)
    grad_accum: int = 1
    # Examples per optimizer step over all processes; when set, grad_accum is derived from it
    # (global / (batch_size x processes)) so the optimisation stays the same at any world size.
    global_batch_size: int | None = None
    distributed: Literal["ddp", "fsdp"] = "ddp"  # several processes: replicate (DDP) or shard (FSDP2 fully_shard)
    max_steps: int = 1000  # optimizer steps
    max_minutes: float | None = None  # stop (and checkpoint) after this wall time
    lr: float = 1e-4
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    warmup_steps: int = 0
    warmup_ratio: float = 0.0  # used when warmup_steps is 0
    schedule: Literal["linear", "constant", "cosine", "wsd"] = "linear"
    decay_ratio: float = 0.2  # wsd: share of all steps spent decaying to 0 at the end
    # "time": warmup and decay follow the share of max_minutes spent (over all sessions of the run) or of max_steps,
    # whichever is further, so the rate reaches its end when the first of the two caps does. "auto": "time" when
    # max_minutes is set (and warmup is a ratio), else "steps": a time budget is used well by default.
    schedule_clock: Literal["auto", "steps", "time"] = "auto"
    clip_norm: float | None = 1.0
    precision: Precision = "auto"  # resolved by bertzoo.precision from the device
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    compile: bool = False
    activation_checkpointing: bool = False  # recompute each layer in backward: less memory, ~30% more compute
    log_every: int = 10
    save_every: int = 500
    keep_last: int = 3
    eval_every: int = 0
    threads: int | None = None  # torch intra-op threads on CPU; None keeps torch's default
    epochs: float | None = None  # when set, max_steps = ceil(epochs * batches per epoch / grad_accum)
    eval_batch_size: int | None = None  # defaults to batch_size
    bucket_by_length: bool = False  # group similar lengths into batches (fine-tuning, inference)
    metric_for_best: str = ""  # eval metric that picks the best checkpoint (e.g. eval_accuracy); "" = eval loss
    greater_is_better: bool | None = None  # None: inferred (loss -> lower is better, else higher)
    early_stopping_patience: int = 0  # evaluations without improvement before stopping; 0 = off
    # Experiment trackers that also get the metrics, the run config and the summary (docs/trackers.md).
    report_to: list[TrackerName] = field(default_factory=list)
    # MLflow's experiment and W&B's project; "" = MLFLOW_EXPERIMENT_NAME / WANDB_PROJECT, else the output dir's name
    tracker_project: str = ""

    def __post_init__(self) -> None:
        # The rest is checked against the device by the trainer; a seed is wrong on any machine.
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"train.seed must be in [0, 2**63), got {self.seed}")

    @property
    def clock(self) -> Literal["steps", "time"]:
        """What the learning-rate schedule follows: `schedule_clock`, with "auto" as "time" when the run has a time
        budget (and its warmup is a ratio) and "steps" otherwise."""
        if self.schedule_clock != "auto":
            return self.schedule_clock
        return "time" if self.max_minutes is not None and self.warmup_steps == 0 else "steps"


@dataclass
class PretrainConfig:
    """A whole pretraining run, as read from `configs/pretrain/*.yaml`."""

    variant: str = "bert"
    objective: str = ""  # "" = the variant's default objective
    objective_args: dict[str, Any] = field(default_factory=dict)  # variant-specific (e.g. ELECTRA's generator size)
    model: dict[str, Any] = field(default_factory=dict)  # a preset name under "preset" plus overrides
    # Masked-LM output bias at step 0: "zero" (BERT) or "unigram" (log training-token frequencies, so the
    # model starts where the unigram phase of training would take it)
    mlm_bias_init: Literal["zero", "unigram"] = "zero"
    # Word tables at step 0: "random" (BERT) or "ppmi-svd" (count-based vectors of the training shards,
    # bertzoo.data.tokens.word_vectors: seconds of work that give the embeddings the topic structure masked-LM training
    # takes far longer to find); word pairs are counted up to word_embedding_window tokens apart.
    word_embedding_init: Literal["random", "ppmi-svd"] = "random"
    word_embedding_window: int = 5
    # Relative-position tables (T5) at step 0: "random" (T5's N(0, d_model ** -0.5)) or "local" (half the heads
    # pointed at their nearest neighbours, bertzoo.nn.relative.RelativePositionBias.start_local).
    relative_bias_init: Literal["random", "local"] = "random"
    # A checkpoint to continue from (bertzoo.train.start): a bertzoo or Hugging Face model directory, hf:ORG/NAME or
    # builtin:NAME. Its family and size become the model's ("" = build the model from scratch).
    init: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if self.word_embedding_window < 1:
            raise ConfigError(f"word_embedding_window must be at least 1 token, got {self.word_embedding_window}")


@dataclass
class GenerationConfig:
    """How a generative model decodes (bertzoo.models.generation): greedy by default, sampling with
    `do_sample`, beam search with `num_beams` > 1. Field names are transformers' GenerationConfig's."""

    max_new_tokens: int = 32
    min_new_tokens: int = 0  # the stop tokens are forbidden before this many tokens
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0  # nucleus sampling: 1.0 = no filter
    num_beams: int = 1
    length_penalty: float = 1.0  # beam score = sum log p / length ** length_penalty
    eos_token_ids: list[int] = field(default_factory=list)  # stop tokens (generated, then the row stops)
    pad_token_id: int = 0  # fills a row after it stopped
    seed: int = 0  # sampling draws from a generator seeded with it: the same call gives the same text
    # A prompt that leaves no room for max_new_tokens in the position table: an error, or with
    # truncate_prompt its oldest tokens are dropped (the rightmost ones are kept).
    truncate_prompt: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"generation.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ConfigError(
                f"generation.min_new_tokens={self.min_new_tokens} must be between 0 and "
                f"max_new_tokens={self.max_new_tokens}"
            )
        if self.min_new_tokens and not self.eos_token_ids:
            raise ConfigError("generation.min_new_tokens is set but there are no eos_token_ids to hold back; drop one")
        if self.num_beams < 1:
            raise ConfigError(f"generation.num_beams must be >= 1, got {self.num_beams}")
        if self.num_beams > 1 and self.do_sample:
            raise ConfigError(
                "generation.num_beams > 1 and do_sample=true contradict: beam search is deterministic; "
                "set num_beams=1 to sample or do_sample=false to search"
            )
        sampling = {"temperature": self.temperature != 1.0, "top_k": self.top_k != 0, "top_p": self.top_p != 1.0}
        if not self.do_sample and any(sampling.values()):
            name = next(k for k, v in sampling.items() if v)
            raise ConfigError(
                f"generation.{name} only applies when sampling, but do_sample=false; set do_sample=true or drop {name}"
            )
        if self.temperature <= 0:
            raise ConfigError(
                f"generation.temperature must be > 0 (use do_sample=false for greedy), got {self.temperature}"
            )
        if self.top_k < 0:
            raise ConfigError(f"generation.top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"generation.top_p must be in (0, 1], got {self.top_p}")
        if any(t < 0 for t in self.eos_token_ids) or self.pad_token_id < 0:
            raise ConfigError("generation token ids must be >= 0")


TaskName = Literal["classification", "token_classification", "qa", "multiple_choice", "seq2seq", "embedding"]
Problem = Literal["single_label", "multi_label", "regression"]


@dataclass
class MixtureTaskConfig:
    """One dataset of a multi-task text-to-text mixture (`data.mixture`; task: seq2seq)."""

    # Names the task in metrics (`<name>_rougeL`, ...) and in `bertzoo predict` inputs ({"task": name}).
    # Default: the built-in dataset's name, else the train file's stem. Letters, digits, _ . - only.
    name: str = ""
    dataset: str = ""  # builtin:NAME (a seq2seq dataset), or the files below
    train: str = ""
    dev: str = ""
    test: str = ""
    prefix: str = ""  # prepended to every source of this task (T5's "summarize: ")
    # A fixed mixing weight instead of the examples-proportional rate (set it on every task or on none;
    # weights are normalised).
    rate: float | None = None


@dataclass
class TaskDataConfig:
    """Where fine-tuning data comes from and how it is featurized."""

    dataset: str = ""  # builtin:wiki-topics | builtin:peoples-daily-ner | builtin:chinese-sentiment; "" = files
    train: str = ""
    dev: str = ""
    test: str = ""
    # parquet, arrow and disk (a dataset directory) are read through `datasets`, as is any `hf-dataset:` spec
    format: Literal["auto", "csv", "tsv", "jsonl", "conll", "squad", "swag", "disk", "parquet", "arrow"] = "auto"
    text_column: str = "text"
    text_pair_column: str = ""  # set for sentence-pair tasks
    label_column: str = "label"
    target_column: str = "target"  # seq2seq: the text to generate
    max_target_len: int = 32  # seq2seq: target tokens kept in training, the stop token included
    labels: list[str] = field(default_factory=list)  # fixed label order; default: sorted labels seen in train
    max_seq_len: int = 128
    doc_stride: int = 128  # overlap between windows of a long QA context / NER sentence (NER: <= half a window)
    max_query_len: int = 64  # QA
    max_answer_len: int = 30  # QA: longest predicted answer, in tokens
    n_best: int = 20  # QA: candidate starts/ends considered
    label_scheme: Literal["BIO", "IOBES"] = "BIO"  # token classification
    num_workers: int = 0
    # Train on a fixed random subset of this many examples (learning curves, quick comparisons); the
    # subset depends on the data only, not on train.seed, so runs with different seeds see the same one.
    max_train_examples: int | None = None
    # seq2seq: text prepended to every source before tokenisation (T5's task prefix, e.g. "summarize: ").
    source_prefix: str = ""
    # seq2seq: several datasets fine-tuned as one text-to-text model (T5's multi-task mixing), each with its
    # own prefix; replaces dataset/train/dev/test. Each epoch draws every task's share by its mixing rate.
    mixture: list[MixtureTaskConfig] = field(default_factory=list)
    # T5's examples-proportional mixing: a task's rate is proportional to min(examples, mixture_limit)
    # (None: no limit) raised to 1 / mixture_temperature (1 = proportional; larger evens the tasks out).
    mixture_limit: int | None = None
    mixture_temperature: float = 1.0


@dataclass
class LoraConfig:
    """LoRA (Hu et al. 2021): W + (alpha / r) B A beside each targeted linear layer; only A, B and the head train."""

    r: int = 0  # rank of the update; 0 = off
    alpha: float = 16.0  # the update is scaled by alpha / r
    dropout: float = 0.0  # dropout on the LoRA branch's input
    # Names of linear layers (the last part of the module path, or a longer dotted tail) that get LoRA.
    # Empty: every attention and feed-forward projection (qkv, q, kv, out, up, gate, down that the model has).
    target_modules: list[str] = field(default_factory=list)


@dataclass
class TechniqueConfig:
    """Fine-tuning techniques from the reference articles."""

    layer_lr_decay: float = 1.0  # lr of layer l = lr * decay^(L - l); 1.0 = off
    freeze_encoder: bool = False  # feature-based use: only the head trains
    feature_layers: int = 0  # feature-based: read the top-k layers (0 = last hidden state only)
    feature_mix: Literal["weighted", "concat"] = "weighted"
    feature_head: Literal["linear", "bilstm"] = "linear"
    adapter_size: int = 0  # bottleneck adapters in every layer (0 = off); only adapters + head train
    lora: LoraConfig = field(default_factory=LoraConfig)  # low-rank updates (r = 0: off); only LoRA + head train
    gradual_unfreezing: bool = False  # unfreeze one more layer (top down) each epoch
    # LP-FT (Kumar et al. 2022): the first N epochs train the head on the frozen encoder (a linear probe), then
    # everything trains, starting from a head that already reads the pretrained features. 0 = off.
    head_first_epochs: int = 0
    head_dropout: float = 0.1
    # Sentence vector of classification / multiple choice: the pooled [CLS] (BERT's choice), the mean of
    # the last layer over real tokens (better when no sentence-level task trained [CLS]), or the last real
    # token's state (GPT's extract token: in a left-to-right model only it has seen the whole input).
    # auto: cls on a bidirectional encoder, last on a causal one (cls there is refused).
    pooling: Literal["auto", "cls", "mean", "last"] = "auto"
    # Sentence pairs: encode (A, B) only, or also (B, A) and add the two sentence vectors (GPT's similarity,
    # symmetric in A and B). auto: both for regression (similarity scores) on a causal encoder, else one.
    pair_orders: Literal["auto", "one", "both"] = "auto"
    # A left-to-right (causal) model: task loss + lm_weight x next-token LM loss on the input (GPT's lambda):
    # on the source in seq2seq, on every input sequence in classification and multiple choice (training only).
    lm_weight: float = 0.5
    # seq2seq with a bidirectional model: share of target tokens masked and predicted (UniLM's 0.7).
    target_mask_prob: float = 0.7


@dataclass
class EmbeddingConfig:
    """Contrastive fine-tuning of a bi-encoder (task: embedding): how the two sides are scored and trained."""

    # auto: cosent for scored pairs (STS), mnrl (in-batch negatives, plus each example's hard negative) otherwise.
    loss: Literal["auto", "mnrl", "cosent"] = "auto"
    scale: float = 20.0  # cosine x scale are the logits: 1 / temperature (sentence-transformers' 20)
    normalize: bool = True  # the saved model gives unit vectors (cosine = dot product)
    # mnrl: also pick each query out of the batch for its document (the loss averaged over both directions).
    symmetric: bool = False
    # mnrl under torchrun: the negatives are every process's batch, so the run trains as one process with the global
    # batch would (false: each process's own batch only, as sentence-transformers does by default).
    gather: bool = True


@dataclass
class FinetuneConfig:
    """A whole fine-tuning run, as read from `configs/finetune/*.yaml`."""

    task: TaskName = "classification"
    problem: Problem = "single_label"  # classification only
    model: str = ""  # bertzoo or Hugging Face directory to start from
    model_config: dict[str, Any] = field(default_factory=dict)  # from scratch: {"preset": ..., ...}
    tokenizer: str = ""  # defaults to the model directory
    data: TaskDataConfig = field(default_factory=TaskDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    technique: TechniqueConfig = field(default_factory=TechniqueConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)  # seq2seq: how eval decodes
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)  # task: embedding


@dataclass
class StudentConfig:
    """Where a distillation student's weights start (exactly one way)."""

    # teacher_layers: the teacher's embeddings, the `layers` chosen (DistilBERT's initialisation) and,
    # in task distillation, its head; model: a directory / builtin: / hf: model (e.g. a general-distilled
    # student); random: `model_config` ({preset: tinybert-4l-312} or plain fields, with `variant`).
    init: Literal["teacher_layers", "model", "random"] = "teacher_layers"
    num_layers: int = 0  # teacher_layers: how many (0 = half the teacher's, rounded up)
    layers: list[int] = field(default_factory=list)  # teacher_layers: which, 0-based ([] = spread evenly)
    variant: str = "distilbert"  # teacher_layers: the student's family (distilbert has no token types)
    model: str = ""
    model_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class AugmentConfig:
    """TinyBERT's data augmentation: a masked LM proposes replacements for single-piece words."""

    model: str = ""  # a masked LM with the teacher's vocabulary; "" = no augmentation
    copies: int = 0  # augmented examples per training example (TinyBERT: 20)
    replace_prob: float = 0.4  # each single-piece word is replaced with this probability
    candidates: int = 15  # a replacement is drawn from the masked LM's top-k
    batch_size: int = 64
    seed: int = 0
    # The augmented set on disk, keyed by the augmenter's weights, the examples and the settings above ("auto":
    # output_dir/augment_cache, "off", or a directory that runs sharing the same copies name alike).
    cache: str = "auto"


@dataclass
class PhaseConfig:
    """One training run of a distillation: its loss weights and its own train settings."""

    name: str = "distill"
    loss: dict[str, float] = field(default_factory=dict)  # {} = the method's defaults
    train: dict[str, Any] = field(default_factory=dict)  # overrides of the top-level `train`


@dataclass
class DistillConfig:
    """A whole distillation, as read from `configs/distill/*.yaml` (bertzoo.train.distill)."""

    method: Literal["distilbert", "tinybert"] = "distilbert"
    # general: on raw text shards (the teacher a masked LM or an encoder); task: on a fine-tuned teacher's
    # task data (the teacher a fine-tuned task model directory).
    stage: Literal["general", "task"] = "general"
    teacher: str = ""
    student: StudentConfig = field(default_factory=StudentConfig)
    phases: list[PhaseConfig] = field(default_factory=list)  # [] = the method's phases for the stage
    temperature: float = 0.0  # 0 = the method's (DistilBERT 2, TinyBERT 1)
    layer_map: list[int] = field(default_factory=list)  # teacher layer (1-based) per student layer; [] = uniform
    # Task stage: teacher logits cached on disk, keyed by the teacher's weights and the data ("auto":
    # output_dir/teacher_cache, "off", or a directory).
    teacher_cache: str = "auto"
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    # general: a pretraining `data` section (shards, eval_shards, max_seq_len, masking); task: overrides of
    # the teacher's fine-tuning data section (e.g. max_train_examples).
    data: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    technique: TechniqueConfig = field(default_factory=TechniqueConfig)  # the student task model's


def resolve_batching(cfg: TrainConfig, world_size: int) -> TrainConfig:
    """`cfg` with `grad_accum` derived from `global_batch_size` for this many processes.

    A copy when anything changes; the same object otherwise (so calling it twice is harmless).
    """
    if cfg.global_batch_size is None:
        return cfg
    per_step = cfg.batch_size * world_size
    if cfg.global_batch_size < 1 or cfg.global_batch_size % per_step:
        raise ConfigError(
            f"train.global_batch_size={cfg.global_batch_size} is not a positive multiple of train.batch_size "
            f"x processes = {cfg.batch_size} x {world_size} = {per_step}; change one of them"
        )
    accum = cfg.global_batch_size // per_step
    if cfg.grad_accum not in (1, accum):
        raise ConfigError(
            f"train.grad_accum={cfg.grad_accum} contradicts train.global_batch_size={cfg.global_batch_size} "
            f"(which needs {accum} with {world_size} process(es) of batch {cfg.batch_size}); set only one of them"
        )
    return cfg if cfg.grad_accum == accum else dataclasses.replace(cfg, grad_accum=accum)


def load_pretrain_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> PretrainConfig:
    """Read a pretraining YAML file, apply dotted overrides, validate."""
    data = load_yaml(path) if path is not None else {}
    apply_overrides(data, overrides or {})
    return from_dict(PretrainConfig, data)


def load_finetune_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> FinetuneConfig:
    """Read a fine-tuning YAML file, apply dotted overrides, validate."""
    data = load_yaml(path) if path is not None else {}
    apply_overrides(data, overrides or {})
    return from_dict(FinetuneConfig, data)


def load_distill_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> DistillConfig:
    """Read a distillation YAML file, apply dotted overrides, validate."""
    data = load_yaml(path) if path is not None else {}
    apply_overrides(data, overrides or {})
    return from_dict(DistillConfig, data)


def check_objective_args(args: dict[str, Any], allowed: tuple[str, ...], who: str) -> None:
    """One-line ConfigError naming the first `objective_args` key that `who` (a family, or a family's
    objective) does not take, and what it does take."""
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        takes = f"{who} accepts: {', '.join(allowed)}" if allowed else f"{who} takes none; remove them"
        raise ConfigError(f"unknown objective_args key {unknown[0]}; {takes}")
