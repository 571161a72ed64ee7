"""Model cards: the `README.md` in the Hugging Face Hub's format that every model directory bertzoo writes carries.

A card is YAML metadata (`library_name`, `tags`, `language`, `datasets`, `metrics`, `base_model`, `pipeline_tag`)
followed by what the model is, how it was trained, its results and how to load it. It is built from what is at
hand: the directory's `config.json`, the header of its weights and its tokenizer files, plus the run's config and
results when the caller passes them or when they lie beside the directory (`run_config.json`, `report.json`,
`summary.json`); whatever is missing is left out. `write_model_card` never fails the save it is part of.

The module sits with the converters (layer 6): it reads the families' titles and Hugging Face names, and the
training loop, the recipes, `bertzoo convert` and `bertzoo push` above it call it.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import bertzoo.io as io
from bertzoo.interop.card_text import (
    ENCODER,
    FINETUNED,
    PRETRAINING,
    Facts,
    hyperparameters,
    render_body,
    results_table,
    usage_section,
)
from bertzoo.interop.hf_keys import is_hf_config

__all__ = [
    "CARD_FILE",
    "GENERATED",
    "Facts",
    "card_metadata",
    "ensure_model_card",
    "hub_id",
    "read_facts",
    "render_model_card",
    "write_model_card",
]

CARD_FILE = "README.md"
# The first line of a card's body that bertzoo wrote: `ensure_model_card` only rewrites the usage part of those.
GENERATED = "<!-- bertzoo model card -->"
USAGE_BEGIN, USAGE_END = "<!-- bertzoo:usage -->", "<!-- /bertzoo:usage -->"
BUILTIN, HUB = "builtin:", "hf:"

# Languages (ISO 639-1) of the built-in corpora and labelled datasets, by name.
LANGUAGES = {
    "wiki-en": "en",
    "wiki-fr": "fr",
    "wiki-es": "es",
    "peoples-daily": "zh",
    "chinese-sentiment": "zh",
    "peoples-daily-ner": "zh",
    "wiki-topics": "en",
    "wiki-titles": "en",
    "wiki-descriptions": "en",
    "wiki-topic-names": "en",
}
# Built-in starting points that are Hub models (a card's base_model must be a Hub id) and their language.
BUILTIN_HUB_IDS = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
BUILTIN_LANGUAGES = {"all-minilm-l6-v2": "en"}

# A Hugging Face architecture's suffix -> the bertzoo task its head is.
HF_TASKS = {
    "ForSequenceClassification": "classification",
    "ForTokenClassification": "token_classification",
    "ForQuestionAnswering": "qa",
    "ForMultipleChoice": "multiple_choice",
}
HF_PRETRAINING = ("ForPreTraining", "ForMaskedLM", "LMHeadModel", "ForCausalLM", "ForConditionalGeneration")
# The Hub's pipeline of a fine-tuned task; tasks without one get a tag only.
TASK_PIPELINES = {
    "classification": "text-classification",
    "token_classification": "token-classification",
    "qa": "question-answering",
}
TASK_TAGS = {"multiple_choice": "multiple-choice", "seq2seq": "text2text-generation"}


# --- what the directory holds ---------------------------------------------------------------------


def public_path(directory: str | Path) -> str:
    """How users name `directory`: a directory being filled under a temporary name (`bertzoo.io.write_dir_atomic`
    writes `.tmp-final-PID`) by the name it is about to get."""
    path = Path(directory)
    match = re.fullmatch(r"\.tmp-(.+)-\d+", path.name)
    return str(path.with_name(match.group(1)) if match else path)


def _weights_header(directory: Path) -> tuple[list[str], int | None]:
    """(tensor names, parameter count) from model.safetensors' header alone; ([], None) without one."""
    path = directory / io.WEIGHTS
    if not path.is_file():
        return [], None
    from safetensors import safe_open

    keys, total = [], 0
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():
            count = 1
            for size in f.get_slice(key).get_shape():
                count *= size
            keys.append(key)
            total += count
    return keys, total


def _tokenizer(directory: Path) -> str:
    """The tokenizer's kind as the card names it ("WordPiece, lowercased"), or "" without tokenizer files."""
    kind = ""
    tokenizer_json = directory / "tokenizer.json"
    if tokenizer_json.is_file():
        model = (_read(tokenizer_json) or {}).get("model") or {}
        kind = {"WordPiece": "WordPiece", "BPE": "byte-level BPE", "Unigram": "Unigram"}.get(model.get("type"), "")
    elif (directory / "vocab.txt").is_file():
        kind = "WordPiece"
    if kind and (_read(directory / "tokenizer_config.json") or {}).get("do_lower_case"):
        kind += ", lowercased"
    return kind


def _read(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`, or None when it is missing or not one (a card is built from what is there)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def read_facts(directory: str | Path) -> Facts:
    """What a bertzoo or Hugging Face model directory holds: its kind, family, size and tokenizer, read from
    config.json, the weights' header and the tokenizer files (no tensor is loaded)."""
    from bertzoo.variants import VARIANTS, config_class, hf_family

    directory = Path(directory)
    raw, config, family = io.read_config(directory, hf_family, config_class)
    variant = family.variant if family is not None else config.variant
    known = VARIANTS.get(variant)
    keys, parameters = _weights_header(directory)
    facts = Facts(
        path=public_path(directory),
        hf=is_hf_config(raw),
        kind=ENCODER,
        variant=variant,
        title=known.title if known is not None else variant,
        has_hf=bool(known is not None and (known.hf or known.config_to_hf)),  # Transformer-XL exports only
        layers=config.num_layers,
        decoder_layers=int(getattr(config, "num_decoder_layers", 0) or 0),
        hidden=config.hidden_size,
        heads=config.num_heads,
        intermediate=config.intermediate_size,
        vocab=config.vocab_size,
        max_position=config.max_position,
        causal=bool(config.causal),
        parameters=parameters,
        tokenizer=_tokenizer(directory),
    )
    if facts.hf:
        arch = str((raw.get("architectures") or [""])[0])
        facts.architecture = arch
        facts.task = next((task for suffix, task in HF_TASKS.items() if arch.endswith(suffix)), "")
        id2label = raw.get("id2label") or {}
        facts.labels = [str(id2label[k]) for k in sorted(id2label, key=lambda k: int(k))] if facts.task else []
        facts.problem = str(raw.get("problem_type") or "")
        facts.kind = FINETUNED if facts.task else PRETRAINING if arch.endswith(HF_PRETRAINING) else ENCODER
    elif isinstance(raw.get("task"), dict):
        head = raw["task"]
        facts.kind, facts.task = FINETUNED, str(head.get("task", ""))
        facts.labels = [str(x) for x in head.get("labels") or []]
        facts.problem = str(head.get("problem") or "")
    elif raw.get("objective") or any(not k.startswith("encoder.") for k in keys):
        facts.kind, facts.objective = PRETRAINING, str(raw.get("objective") or "")
    return facts


def pipeline_of(facts: Facts) -> str | None:
    """The Hub's pipeline tag for what the directory holds, or None where no pipeline fits it exactly."""
    if facts.kind == FINETUNED:
        return TASK_PIPELINES.get(facts.task)
    if facts.kind == ENCODER:
        return None if facts.decoder_layers else "feature-extraction"
    arch, objective = facts.architecture, facts.objective
    if facts.decoder_layers or facts.variant == "electra":  # text-to-text, or a discriminator: no exact pipeline
        return None
    if facts.causal or objective in ("clm", "plm") or arch.endswith(("LMHeadModel", "ForCausalLM")):
        return "text-generation"
    if objective.startswith("mlm") or arch.endswith(("ForMaskedLM", "ForPreTraining")):
        return "fill-mask"
    return "feature-extraction" if objective == "bilm" else None


# --- what the run says ----------------------------------------------------------------------------


def run_kind(run_config: Mapping[str, Any]) -> str:
    """ "pretraining", "fine-tuning", "distillation" or "" for a run config's dict."""
    if "teacher" in run_config:
        return "distillation"
    if "task" in run_config and "technique" in run_config:
        return "fine-tuning"
    if "variant" in run_config and isinstance(run_config.get("data"), dict):
        return "pretraining"
    return ""


def start_of(run_config: Mapping[str, Any]) -> str:
    """The checkpoint a run started from ("" = random init): a pretraining run's `init`, a fine-tuning run's
    `model`."""
    kind = run_kind(run_config)
    if kind == "pretraining":
        start = run_config.get("start") if isinstance(run_config.get("start"), dict) else {}
        return str(run_config.get("init") or start.get("checkpoint") or "")
    return str(run_config.get("model") or "") if kind == "fine-tuning" else ""


def hub_id(spec: str) -> str | None:
    """The Hub id of a model spec (`hf:ORG/NAME`, a built-in that is a Hub model), or None for a local path: the
    Hub links base_model to its page and refuses what is not a model id (transformers leaves local paths out too)."""
    if spec.startswith(HUB):
        return spec[len(HUB) :] or None
    if spec.startswith(BUILTIN):
        return BUILTIN_HUB_IDS.get(spec[len(BUILTIN) :])
    return None


def _names(spec: str) -> list[str]:
    """Dataset names in a data spec: `builtin:wiki-en:train` -> wiki-en, `hf-dataset:ORG/NAME:config:split` ->
    ORG/NAME, a user's path -> its file name."""
    out = []
    for item in (part.strip() for part in spec.split(",")):
        if item.startswith(BUILTIN):
            out.append(item[len(BUILTIN) :].split(":")[0])
        elif item.startswith("hf-dataset:"):  # a Hub dataset's id (ORG/NAME) is its name on the Hub; a local one's
            name = item[len("hf-dataset:") :].split(":")[0]
            out.append(Path(name).name if Path(name).exists() else name)
        elif item:
            out.append(Path(item).name)
    return out


def datasets_of(run_config: Mapping[str, Any]) -> list[str]:
    """The data a run trained on, by name: the corpus its shards were prepared from (their meta.json records it;
    otherwise the shard directory's name), a built-in dataset, or a training file's name; a mixture's every task."""
    data = run_config.get("data") if isinstance(run_config.get("data"), dict) else {}
    names: list[str] = []
    if data.get("shards"):
        meta = _read(Path(str(data["shards"])) / "meta.json") or {}
        names += _names(str(meta.get("source") or "")) or _names(str(data["shards"]))
    for entry in [data, *(e for e in data.get("mixture") or [] if isinstance(e, dict))]:
        names += _names(str(entry.get("dataset") or entry.get("train") or ""))
    return list(dict.fromkeys(names))


def _card_front_matter(path: Path) -> dict[str, Any]:
    """The YAML metadata of the card in directory `path`, or {} (not a card, or unreadable)."""
    try:
        text = (path / CARD_FILE).read_text(encoding="utf-8")
        if text.startswith("---"):
            data = yaml.safe_load(text.split("---", 2)[1])
            return data if isinstance(data, dict) else {}
    except (OSError, ValueError, IndexError, yaml.YAMLError):
        pass
    return {}


def languages_of(datasets: list[str], start: str) -> list[str]:
    """The model's languages: those of its built-in data, else of its start (a built-in model, or a local
    directory whose own card names them); [] when unknown."""
    found = [LANGUAGES[name] for name in datasets if name in LANGUAGES]
    if not found and start.startswith(BUILTIN):
        found = [BUILTIN_LANGUAGES[name]] if (name := start[len(BUILTIN) :]) in BUILTIN_LANGUAGES else []
    elif not found and start and not start.startswith(HUB):
        language = _card_front_matter(Path(start)).get("language")
        found = [language] if isinstance(language, str) else [str(x) for x in language or []]
    return sorted(dict.fromkeys(found))


# --- the card ------------------------------------------------------------------------------------


@dataclass
class RunFiles:
    """What a card says about training: the run config and the results (each may be empty)."""

    config: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)  # a fine-tuning or distillation report.json
    summary: dict[str, Any] = field(default_factory=dict)  # a pretraining summary (final_metrics, baseline)


def gather_run(
    source: Path,
    run_config: Mapping[str, Any] | None,
    report: Mapping[str, Any] | None,
    summary: Mapping[str, Any] | None,
    metrics: Mapping[str, Any] | None,
) -> RunFiles:
    """The run behind `source`: what the caller passed, else the files a run leaves beside its model directories
    (run_config.json in the run's directory, finetune_config.json inside a fine-tuned model; report.json for
    `model/`, summary.json's final metrics for `final/`). Results passed in are never mixed with files, which
    may be an earlier session's."""
    name = Path(public_path(source)).name
    run_dir = source.parent.parent if source.parent.name == "checkpoints" else source.parent
    config = dict(run_config) if run_config is not None else {}
    if not config:
        config = _read(run_dir / "run_config.json") or _read(source / io.FINETUNE_CONFIG) or {}
    run = RunFiles(config=config, report=dict(report or {}), summary=dict(summary or {}))
    if metrics is not None:
        run.summary = {**run.summary, "final_metrics": dict(metrics)}
    elif report is None and summary is None:
        if name == "model":
            run.report = _read(run_dir / "report.json") or {}
        elif name == "final":
            run.summary = _read(run_dir / "summary.json") or {}
    return run


def card_metadata(facts: Facts, run: RunFiles, metric_names: list[str]) -> dict[str, Any]:
    """The card's YAML metadata: only the fields known, each in the form the Hub reads."""
    pipeline = pipeline_of(facts)
    task_tag = pipeline or TASK_TAGS.get(facts.task) or ("text2text-generation" if facts.decoder_layers else None)
    start = start_of(run.config)
    datasets = datasets_of(run.config)
    meta: dict[str, Any] = {
        # The Hub offers transformers' loading snippet for its own format, bertzoo's name for the bertzoo format.
        "library_name": "transformers" if facts.hf else "bertzoo",
        "tags": list(dict.fromkeys(t for t in ("bertzoo", facts.variant, task_tag) if t)),
        "language": languages_of(datasets, start),
        "datasets": datasets,
        "metrics": metric_names,
        "base_model": hub_id(start) if start else None,
        "pipeline_tag": pipeline,
    }
    return {key: value for key, value in meta.items() if value not in (None, [], "")}


def render_model_card(
    directory: str | Path,
    *,
    run_config: Mapping[str, Any] | None = None,
    report: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    source: str | Path | None = None,
    converted_from: str = "",
    repo_id: str | None = None,
) -> str:
    """The card of model directory `directory` as text (see `write_model_card` for the arguments)."""
    directory = Path(directory)
    facts = read_facts(directory)
    run = gather_run(Path(source) if source is not None else directory, run_config, report, summary, metrics)
    table, metric_names = results_table(run.report, run.summary)
    meta = card_metadata(facts, run, metric_names)
    name = repo_id.split("/")[-1] if repo_id else _display_name(facts.path)
    start = start_of(run.config)
    body = render_body(
        facts,
        name=name,
        kind=run_kind(run.config),
        start=start,
        start_id=hub_id(start) if start else None,
        datasets=meta.get("datasets", []),
        shards=_shard_counts(run.config),
        settings=hyperparameters(run.config, run_kind(run.config), facts.objective),
        config=run.config,
        results=table,
        converted_from=converted_from,
    )
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    usage = usage_section(facts, repo_id)
    return f"---\n{front}---\n\n{GENERATED}\n\n{body}\n{USAGE_BEGIN}\n{usage}{USAGE_END}\n"


def _display_name(path: str) -> str:
    """A card's title: the run's name for a run's model directory (runs/wiki-topics/model -> wiki-topics)."""
    p = Path(path)
    if p.parent.name == "checkpoints":
        return f"{p.parent.parent.name} ({p.name})"
    return p.parent.name if p.name in ("final", "model", "best") and p.parent.name else p.name


def _shard_counts(run_config: Mapping[str, Any]) -> dict[str, int]:
    """Token and document counts of a pretraining run's shards (their meta.json), or {}."""
    data = run_config.get("data") if isinstance(run_config.get("data"), dict) else {}
    meta = _read(Path(str(data["shards"])) / "meta.json") if data.get("shards") else None
    return {k: int(meta[k]) for k in ("num_tokens", "num_docs") if isinstance((meta or {}).get(k), int)}


def write_model_card(
    directory: str | Path,
    *,
    run_config: Mapping[str, Any] | None = None,
    report: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    source: str | Path | None = None,
    converted_from: str = "",
    repo_id: str | None = None,
) -> Path | None:
    """Write `directory/README.md`, the model card, atomically; returns its path, or None when it could not be
    written (a warning says why): a card never fails the save it belongs to.

    `run_config` is the run's config (as in run_config.json), `report` a fine-tuning (or distillation) report,
    `summary` a pretraining summary (`final_metrics`, `baseline`), `metrics` the trainer's latest metrics; what is
    not passed is read from the files beside `source` (default: `directory`). `converted_from` names the directory
    `bertzoo convert` read; `repo_id` (ORG/NAME) is the Hub repository the usage examples load from."""
    try:
        text = render_model_card(
            directory,
            run_config=run_config,
            report=report,
            summary=summary,
            metrics=metrics,
            source=source,
            converted_from=converted_from,
            repo_id=repo_id,
        )
        return io.write_atomic(Path(directory) / CARD_FILE, text)
    except Exception as exc:  # the model is saved; its card is a convenience
        warnings.warn(f"could not write the model card of {directory} ({type(exc).__name__}: {exc})", stacklevel=2)
        return None


def write_run_cards(output_dir: str | Path, **card: Any) -> None:
    """The card of the training loop's model directories in `output_dir` (`final/`, `best/`), once the run's
    report exists: `card` as for `write_model_card`."""
    for name in ("final", "best"):
        if (Path(output_dir) / name / io.CONFIG).is_file():
            write_model_card(Path(output_dir) / name, **card)


def ensure_model_card(directory: str | Path, repo_id: str) -> Path:
    """Make sure `directory` has a card for Hub repository `repo_id` (ORG/NAME) before it is pushed: write one
    when it has none, and point the usage examples of a card bertzoo wrote at the repository. A card someone
    wrote by hand is left as it is."""
    directory = Path(directory)
    path = directory / CARD_FILE
    if not path.is_file():
        return io.write_atomic(path, render_model_card(directory, repo_id=repo_id))
    text = path.read_text(encoding="utf-8")
    begin, end = text.find(USAGE_BEGIN), text.find(USAGE_END)
    if GENERATED in text and 0 <= begin < end:
        usage = usage_section(read_facts(directory), repo_id)
        text = f"{text[: begin + len(USAGE_BEGIN)]}\n{usage}{text[end:]}"
        io.write_atomic(path, text)
    return path
