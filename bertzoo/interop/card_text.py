"""The Markdown of a model card (`bertzoo.interop.model_card` gathers the facts and writes the file): what the
model is, how it was trained, its results and how to load it, in bertzoo and in transformers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What a directory holds (the names `bertzoo.loading.kind_of` uses).
FINETUNED, PRETRAINING, ENCODER = "fine-tuned", "pretraining", "encoder"

TASK_WORDS = {
    "classification": "text classification",
    "token_classification": "token classification",
    "qa": "extractive question answering",
    "multiple_choice": "multiple choice",
    "seq2seq": "sequence-to-sequence generation",
}
OBJECTIVE_WORDS = {
    "mlm": "masked language modelling",
    "nsp": "next sentence prediction",
    "sop": "sentence order prediction",
    "sbo": "the span boundary objective",
    "dea": "entity alignment",
    "contrast": "document contrast",
    "clm": "causal language modelling",
    "plm": "permutation language modelling",
    "electra": "replaced token detection",
    "bilm": "bidirectional language modelling",
    "mass": "masked sequence-to-sequence pretraining",
    "span_corruption": "span corruption",
    "prefix_lm": "prefix language modelling",
    "deshuffle": "deshuffling",
    "iid_mask": "i.i.d. token masking",
    "seq2seq_lm": "a sequence-to-sequence objective",  # T5's and MASS's saved name; the run config says which
}
# The transformers Auto class of a fine-tuned task.
AUTO_TASK_CLASSES = {
    "classification": "AutoModelForSequenceClassification",
    "token_classification": "AutoModelForTokenClassification",
    "qa": "AutoModelForQuestionAnswering",
    "multiple_choice": "AutoModelForMultipleChoice",
    "seq2seq": "AutoModelForSeq2SeqLM",
}
# Fine-tuned Hugging Face classes that `bertzoo convert --from hf` turns back into bertzoo task models.
IMPORTED_TASKS = ("classification", "token_classification")


@dataclass
class Facts:
    """What a model directory holds, as a card describes it."""

    path: str  # the directory, as users name it
    hf: bool  # Hugging Face format (else bertzoo's)
    kind: str  # FINETUNED, PRETRAINING or ENCODER
    variant: str
    title: str  # the family's name ("RoBERTa")
    has_hf: bool  # transformers has classes for the family
    layers: int = 0
    decoder_layers: int = 0
    hidden: int = 0
    heads: int = 0
    intermediate: int = 0
    vocab: int = 0
    max_position: int = 0
    causal: bool = False
    parameters: int | None = None
    tokenizer: str = ""  # "WordPiece, lowercased"; "" without tokenizer files
    architecture: str = ""  # a Hugging Face directory's first architecture
    objective: str = ""  # a bertzoo pretraining model's objective ("mlm+nsp")
    task: str = ""  # a fine-tuned model's task
    problem: str = ""
    labels: list[str] = field(default_factory=list)


def _count(n: int) -> str:
    """1234567 -> "1.2M (1,234,567)"."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit} ({n:,})"
    return f"{n:,}"


def _number(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4f}"


def _numbers(metrics: Any) -> dict[str, float]:
    """The numeric entries of a metrics dict (reports also hold tables and label lists)."""
    if not isinstance(metrics, Mapping):
        return {}
    return {str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def objective_words(objective: str) -> str:
    """ "mlm+nsp" -> "masked language modelling and next sentence prediction"."""
    words = [OBJECTIVE_WORDS.get(part, part) for part in objective.split("+") if part]
    return " and ".join(words)


# --- results ---------------------------------------------------------------------------------------


def results_table(report: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(the Results section's Markdown, the metric names for the card's metadata) from a fine-tuning or
    distillation report (dev/test metrics) or a pretraining summary (final metrics, unigram baseline)."""
    splits = ("dev", "test")
    columns = [(s, _numbers(report[s].get("metrics"))) for s in splits if isinstance(report.get(s), Mapping)]
    columns += [(f"{who} {s}", _numbers(report.get(f"{who}_{s}"))) for who in ("student", "teacher") for s in splits]
    columns = [(name, metrics) for name, metrics in columns if metrics]
    if columns:
        names = list(dict.fromkeys(k for _, metrics in columns for k in metrics))
        rows = [[f"`{n}`", *(_number(m[n]) if n in m else "" for _, m in columns)] for n in names]
        text = _table(["metric", *(name for name, _ in columns)], rows)
        best = report.get("best_metric")
        if isinstance(best, Mapping) and isinstance(best.get("value"), int | float):
            text += (
                f"\nThe {report.get('model_from', 'best')} model: `{best.get('name')}` {_number(best['value'])} "
                f"at step {best.get('step')} of {report.get('steps', '?')}.\n"
            )
        return text, [n for n in names if n != "loss" and not n.endswith("_loss")]
    final, baseline = _numbers(summary.get("final_metrics")), _numbers(summary.get("baseline"))
    if not final and not baseline:
        return "", []
    rows = [[f"`{k}`", _number(v), "held-out data"] for k, v in final.items() if k.startswith("eval_")]
    rows += [[f"`{k}`", _number(v), "training (last interval)"] for k, v in final.items() if not k.startswith("eval_")]
    rows += [[f"`{k}`", _number(v), "unigram baseline, held-out"] for k, v in baseline.items()]
    text = _table(["metric", "value", "measured on"], rows)
    if isinstance(summary.get("steps"), int):
        tokens = summary.get("tokens_seen")
        text += f"\nAfter {summary['steps']:,} steps" + (f" and {tokens:,} tokens" if isinstance(tokens, int) else "")
        text += ".\n"
    held_out = [k for k in final if k.startswith("eval_")]
    names = (["accuracy"] if any(k.endswith("_acc") for k in held_out) else []) + (
        ["perplexity"] if any(k.endswith("_ppl") for k in held_out) else []
    )
    return text, names


# --- training ------------------------------------------------------------------------------------


def hyperparameters(config: Mapping[str, Any], kind: str, objective: str = "") -> list[tuple[str, str]]:
    """The key settings of a run config, as (setting, value) rows; what the config lacks is left out.
    `objective` is the one the model was saved with (a config leaves it empty for the family's default)."""
    train = config.get("train") if isinstance(config.get("train"), Mapping) else {}
    data = config.get("data") if isinstance(config.get("data"), Mapping) else {}
    rows: list[tuple[str, Any]] = []
    if kind == "pretraining":
        model = config.get("model") or {}
        rows += [("objective", config.get("objective") or objective), ("model", _compact(model))]
        masking = data.get("masking") if isinstance(data.get("masking"), Mapping) else {}
        if masking.get("mask_prob") is not None:
            rows.append(("masking", f"{masking.get('strategy', 'token')}, {float(masking['mask_prob']):.0%}"))
    elif kind == "fine-tuning":
        task = str(config.get("task", ""))
        rows.append(("task", task + (f" ({config.get('problem')})" if task == "classification" else "")))
        technique = config.get("technique") if isinstance(config.get("technique"), Mapping) else {}
        for key, default in (("layer_lr_decay", 1.0), ("freeze_encoder", False), ("adapter_size", 0)):
            if technique.get(key, default) != default:
                rows.append((f"technique.{key}", technique[key]))
        rows.append(("training examples (cap)", data.get("max_train_examples")))
    elif kind == "distillation":
        rows += [("method", config.get("method")), ("stage", config.get("stage")), ("teacher", config.get("teacher"))]
    rows.append(("sequence length", data.get("max_seq_len")))
    if train.get("epochs") is not None:
        rows.append(("epochs", train["epochs"]))
    else:
        rows.append(("steps", train.get("max_steps")))
    if train.get("max_minutes") is not None:
        rows.append(("time budget", f"{train['max_minutes']} min"))
    batch = train.get("global_batch_size") or train.get("batch_size")
    if batch and not train.get("global_batch_size") and int(train.get("grad_accum") or 1) > 1:
        batch = f"{batch} × {train['grad_accum']} accumulation steps"
    rows.append(("batch size", batch))
    if train.get("lr") is not None:
        warmup = train.get("warmup_steps") or (f"{train['warmup_ratio']:.0%}" if train.get("warmup_ratio") else 0)
        rows.append(("learning rate", f"{train['lr']:g}, {train.get('schedule', 'linear')} schedule, warmup {warmup}"))
    rows += [("weight decay", train.get("weight_decay")), ("seed", train.get("seed"))]
    resolved = config.get("resolved") if isinstance(config.get("resolved"), Mapping) else {}
    rows.append(("precision", resolved.get("precision") or train.get("precision")))
    rows.append(("device", resolved.get("device")))
    return [(name, str(value)) for name, value in rows if value not in (None, "", {}, [])]


def _compact(value: Any) -> str:
    return f"`{json.dumps(value, separators=(', ', ': '))}`" if value else ""


def _started(kind: str, start: str, start_id: str | None, config: Mapping[str, Any]) -> str:
    """The "Started from" line of the Training section."""
    if start_id:
        link = f"[{start_id}](https://huggingface.co/{start_id})"
        return link + ("" if start == f"hf:{start_id}" else f" (`{start}`)")
    if start:
        return f"`{start}` (a local checkpoint)"
    if kind == "distillation":
        return f"the teacher `{config.get('teacher')}`"
    seed = (config.get("train") or {}).get("seed") if isinstance(config.get("train"), Mapping) else None
    return "random initialisation" + (f" (seed {seed})" if seed is not None else "")


def _intro(facts: Facts) -> str:
    if facts.kind == FINETUNED:
        what = f"{facts.title} model fine-tuned for {TASK_WORDS.get(facts.task, facts.task or 'a task')}"
    elif facts.kind == PRETRAINING:
        objective = objective_words(facts.objective)
        what = f"{facts.title} model pretrained" + (f" with {objective}" if objective else " (with its heads)")
    else:
        what = f"{facts.title} encoder"
    where = (
        f"Hugging Face transformers' format (`{facts.architecture or 'config.json'}`)"
        if facts.hf
        else "bertzoo's format (`config.json` + `model.safetensors`)"
    )
    article = "An" if what[0] in "AEIOX" else "A"  # as the names are said: an ELECTRA, an XLNet, a UniLM
    return f"{article} {what}, made with bertzoo, in {where}."


def _model_rows(facts: Facts) -> list[list[str]]:
    size = f"{facts.layers} layers × {facts.hidden} hidden, {facts.heads} heads, feed-forward {facts.intermediate}"
    if facts.decoder_layers:
        size += f"; a decoder of {facts.decoder_layers} layers"
    rows = [["family", f"{facts.title} (`{facts.variant}`)"], ["size", size]]
    if facts.architecture:
        rows.append(["architecture", f"`{facts.architecture}`"])
    if facts.parameters is not None:
        rows.append(["parameters", _count(facts.parameters)])
    rows.append(["vocabulary", f"{facts.vocab:,} tokens" + (f" ({facts.tokenizer})" if facts.tokenizer else "")])
    if facts.max_position:
        rows.append(["positions", f"{facts.max_position:,}"])
    if facts.labels:
        shown = ", ".join(f"`{x}`" for x in facts.labels[:24]) + (" ..." if len(facts.labels) > 24 else "")
        rows.append(["labels", f"{len(facts.labels)}: {shown}"])
    if facts.problem:
        rows.append(["problem", facts.problem])
    return rows


def render_body(
    facts: Facts,
    *,
    name: str,
    kind: str,
    start: str,
    start_id: str | None,
    datasets: list[str],
    shards: Mapping[str, int],
    settings: list[tuple[str, str]],
    config: Mapping[str, Any],
    results: str,
    converted_from: str,
) -> str:
    """The card's Markdown between the metadata and the usage section."""
    parts = [f"# {name}\n", _intro(facts) + "\n", "## Model\n", _table(["", ""], _model_rows(facts))]
    lines = []
    if converted_from:
        lines.append(f"- Converted from `{converted_from}` with `bertzoo convert`.")
    if kind or start:
        lines.append(f"- Started from {_started(kind, start, start_id, config)}.")
    if kind:
        lines.append(f"- A bertzoo {kind} run.")
    if datasets:
        counts = ", ".join(f"{v:,} {k.removeprefix('num_')}" for k, v in shards.items())
        lines.append(f"- Data: {', '.join(datasets)}" + (f" ({counts})." if counts else "."))
    if lines or settings:
        parts += ["## Training\n", "\n".join(lines) + "\n" if lines else ""]
    if settings:
        parts.append(_table(["setting", "value"], [[k, v] for k, v in settings]))
    if config:
        full = json.dumps(config, indent=2, default=str)
        parts.append(f"<details>\n<summary>The full run config</summary>\n\n```json\n{full}\n```\n\n</details>\n")
    if results:
        parts += ["## Results\n", results]
    return "\n".join(part for part in parts if part)


# --- how to use it ---------------------------------------------------------------------------------


def auto_class(facts: Facts) -> str:
    """The transformers class that loads the directory once it is in Hugging Face format."""
    if facts.kind == FINETUNED:
        return AUTO_TASK_CLASSES.get(facts.task, "AutoModel")
    if facts.kind == PRETRAINING:
        if facts.decoder_layers:
            return "AutoModelForSeq2SeqLM"
        if facts.causal or facts.objective in ("clm", "plm") or facts.architecture.endswith("LMHeadModel"):
            return "AutoModelForCausalLM"
        if facts.objective == "mlm" or facts.architecture.endswith("ForMaskedLM"):
            return "AutoModelForMaskedLM"
        return "AutoModelForPreTraining"
    return "T5EncoderModel" if facts.architecture == "T5EncoderModel" else "AutoModel"


def _bertzoo_usage(facts: Facts, ref: str) -> list[str]:
    """How to load the directory in bertzoo: Python, then the command line."""
    if facts.kind == FINETUNED and not facts.hf:
        rows = '[{"text": "An example sentence."}]' if facts.task == "classification" else "rows  # as in training"
        code = [
            "from bertzoo.loading import load_finetuned",
            "",
            f'task, model, tokenizer = load_finetuned("{ref}")',
            f"print(task.predict(model, {rows}))",
        ]
        command = "generate" if facts.task == "seq2seq" else "predict"
        cli = f"bertzoo {command} {ref} --input in.jsonl --output out.jsonl"
    elif facts.kind == PRETRAINING:
        code = [
            "from bertzoo.loading import load_encoder, load_pretraining",
            "",
            f'model = load_pretraining("{ref}")  # the encoder with its pretraining heads',
            f'encoder = load_encoder("{ref}")',
        ]
        cli = f"bertzoo finetune CONFIG.yaml --model {ref}"
    else:
        code = ["from bertzoo.loading import load_encoder", "", f'encoder = load_encoder("{ref}")']
        cli = f"bertzoo embed {ref} --input in.jsonl --output vectors.npy"
    lines = ["In bertzoo:", "", "```python", *code, "```", "", "```bash", cli, "```", ""]
    if facts.hf and facts.kind == FINETUNED and facts.task in IMPORTED_TASKS:
        lines += ["As a fine-tuned bertzoo model (`bertzoo predict`, `evaluate`), convert it first:", ""]
        lines += ["```bash", f"bertzoo convert --from hf --to bertzoo {ref} OUT", "```", ""]
    return lines


def usage_section(facts: Facts, repo_id: str | None = None) -> str:
    """The card's "How to use": loading in bertzoo and in transformers, from the Hub repository `repo_id` when
    given, else from the directory itself."""
    ref = f"hf:{repo_id}" if repo_id else facts.path
    lines = ["## How to use", "", *_bertzoo_usage(facts, ref)]
    auto = auto_class(facts)
    if facts.hf:
        hf_ref = repo_id or facts.path
        imports = f"AutoTokenizer, {auto}" if facts.tokenizer else auto
        lines += ["In transformers:", "", "```python", f"from transformers import {imports}", ""]
        if facts.tokenizer:  # a directory exported without its tokenizer has none to load
            lines += [f'tokenizer = AutoTokenizer.from_pretrained("{hf_ref}")']
        lines += [f'model = {auto}.from_pretrained("{hf_ref}")']
        lines += ["```", ""]
    elif facts.has_hf:
        lines += [
            "transformers reads the Hugging Face format: convert the directory first (a head Hugging Face has no "
            "class for is refused in one line and stays bertzoo-only), then load the copy:",
            "",
            "```bash",
            f"bertzoo convert --from bertzoo --to hf {ref} {facts.variant}-hf",
            "```",
            "",
            "```python",
            f"from transformers import {auto}",
            "",
            f'model = {auto}.from_pretrained("{facts.variant}-hf")',
            "```",
            "",
        ]
    else:
        lines += [f"transformers has no class for the {facts.title} family; load it with bertzoo.", ""]
    if facts.variant == "transfo-xl" and (facts.hf or facts.has_hf):
        lines += ["(Transformer-XL needs transformers 4.57 or older: later releases dropped it.)", ""]
    return "\n".join(lines)
