"""`bertzoo convert`: a model directory from the bertzoo format to Hugging Face's or back, tokenizer
included; `bertzoo push`: a model directory to the Hugging Face Hub, with its model card; and the interop names
users import from here (`from bertzoo.hub import export_hf`).

Loading lives in `bertzoo.loading`, writing files in `bertzoo.io`, Hugging Face names and exporters
in `bertzoo.interop.hf_keys` / `bertzoo.interop.convert`; this module only combines them (above loading).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import bertzoo.io as io
from bertzoo.config import read_json
from bertzoo.errors import BertzooError, CheckpointError, ConfigError
from bertzoo.interop.convert import HF_PROBLEM, HF_TASK_HEADS, export_finetuned_hf, export_hf, find_head, hf_task_of
from bertzoo.interop.hf_keys import normalise_hf_keys
from bertzoo.interop.model_card import ensure_model_card, write_model_card
from bertzoo.loading import (
    FINETUNED,
    HUB_PREFIX,
    PRETRAINING,
    kind_of,
    load_encoder,
    load_finetuned,
    load_pretraining,
    read_checkpoint,
    read_config,
    resolve,
)

__all__ = [
    "convert_directory",
    "export_finetuned_hf",
    "export_hf",
    "load_encoder",
    "load_pretraining",
    "push",
    "read_config",
    "resolve",
    "write_model_card",
]

_PROBLEM_FROM_HF = {v: k for k, v in HF_PROBLEM.items()}
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json")


def _copy_tokenizer(src: Path, dst: Path) -> bool:
    """Re-save the tokenizer of `src` into `dst` (HF and bertzoo read the same files); False if none."""
    if not any((src / name).is_file() for name in TOKENIZER_FILES):
        return False
    from bertzoo.data.tokens.tokenizer import Tokenizer

    Tokenizer.load(src).save(dst)
    return True


def _hf_to_finetuned(src: Path, dst: Path, raw: dict[str, Any], task_name: str) -> None:
    """A Hugging Face sequence or token classifier directory (BertForSequenceClassification,
    DistilBertForTokenClassification, ...) -> a bertzoo fine-tuned model directory."""
    from bertzoo.config import FinetuneConfig, to_plain
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.tasks import TASKS

    if task_name not in TASKS:
        raise CheckpointError(f"the {task_name} task is not available in this bertzoo, so {src} cannot convert")
    if not any((src / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"{src} has no tokenizer (vocab.txt or tokenizer.json); a fine-tuned model needs one")
    id2label = raw.get("id2label") or {}
    labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
    cfg = FinetuneConfig(task=task_name)
    cfg.data.labels = labels
    if task_name == "classification":
        cfg.problem = _PROBLEM_FROM_HF.get(raw.get("problem_type") or "", "single_label")
        if cfg.problem == "regression":
            cfg.data.labels = []
    tokenizer = Tokenizer.load(src)
    task = TASKS[task_name](cfg, tokenizer)
    encoder = load_encoder(src)
    if task_name == "classification" and encoder.pooler is None:
        arch = (raw.get("architectures") or ["BertForSequenceClassification"])[0]
        raise CheckpointError(f"{src} has no pooler weights, which {arch} needs")
    model = task.build(encoder)
    head = {**task.head_config(), **(getattr(model, "head_config", None) or {})}
    if task_name == "classification":
        head["problem"] = cfg.problem
    model.head_config = head
    _, head_class, key_map, _ = HF_TASK_HEADS[task_name]
    head_name, _ = find_head(model, head_class)
    hf_state = normalise_hf_keys(io.read_weights(src))
    state = dict(model.state_dict())
    for ours, hf in key_map.items():
        for part in ("weight", "bias"):
            if f"{hf}.{part}" not in hf_state:
                raise CheckpointError(f"{src} lacks {hf}.{part}; it is not a complete {raw.get('architectures')}")
            state[f"{head_name}.{ours}.{part}"] = hf_state[f"{hf}.{part}"]
    io.load_into(model, state, source=str(src))
    model.save_pretrained(dst)
    tokenizer.save(dst)
    io.write_json(dst / io.FINETUNE_CONFIG, to_plain(cfg))


def convert_directory(src: str | Path, dst: str | Path, src_format: str, dst_format: str) -> dict[str, Any]:
    """`bertzoo convert`: a bertzoo model directory to a Hugging Face one or back, tokenizer included;
    `bertzoo.loading.kind_of` decides what the directory holds.

    bertzoo -> hf: a fine-tuned model becomes `BertFor<Task>`, a pretraining checkpoint
    `BertForPreTraining`/`BertForMaskedLM`, an encoder `BertModel` (each under its family's names).
    hf -> bertzoo: sequence/token classifiers become fine-tuned bertzoo models (usable by `bertzoo
    evaluate/predict`), checkpoints with pretraining heads pretraining models, anything else an encoder.
    """
    formats = ("hf", "bertzoo")
    for name, value in (("--from", src_format), ("--to", dst_format)):
        if value not in formats:
            raise ConfigError(f"{name} {value!r} is not a format; choose hf or bertzoo")
    if src_format == dst_format:
        raise ConfigError(f"--from and --to are both {src_format}; nothing to convert")
    src_dir = resolve(src)
    raw, _, is_hf = read_config(src_dir)
    actual = "hf" if is_hf else "bertzoo"
    if actual != src_format:
        raise ConfigError(f"{src_dir} holds a {actual} model, not {src_format}; use --from {actual}")
    dst_dir = Path(dst)
    if dst_dir.exists() and any(dst_dir.iterdir()):
        raise ConfigError(f"{dst_dir} exists and is not empty; choose a new output directory")
    raw, _, state, _ = read_checkpoint(src_dir)
    kind = kind_of(raw, state, is_hf)
    dst_dir.mkdir(parents=True, exist_ok=True)
    if src_format == "bertzoo":
        if kind == FINETUNED:
            model = load_finetuned(src_dir)[1]
            kind = f"{FINETUNED} {raw['task'].get('task')}"
        else:
            model = load_pretraining(src_dir) if kind == PRETRAINING else load_encoder(src_dir)
        export_hf(model, dst_dir)
        arch = read_json(dst_dir / io.CONFIG)["architectures"][0]
    else:
        arch = (raw.get("architectures") or ["BertModel"])[0]
        if kind == FINETUNED:
            task_name = hf_task_of(raw)
            _hf_to_finetuned(src_dir, dst_dir, raw, task_name)
            kind = f"{FINETUNED} {task_name}"
        else:
            model = load_pretraining(src_dir) if kind == PRETRAINING else load_encoder(src_dir)
            model.save_pretrained(dst_dir)
    tokenizer = (dst_dir / "vocab.txt").is_file() or _copy_tokenizer(src_dir, dst_dir)
    # Rewritten with what the source's run says (its config, report or summary lie beside `src_dir`).
    write_model_card(dst_dir, source=src_dir, converted_from=str(src))
    return {"from": str(src_dir), "to": str(dst_dir), "kind": kind, "architecture": arch, "tokenizer": bool(tokenizer)}


# --- bertzoo push ---------------------------------------------------------------------------------

# Training state a checkpoint directory holds beside its model: not part of what is published.
PUSH_IGNORE = [".*", "*/.*", "*.tmp", "optimizer.pt", "rng.pt"]
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
LOGIN_HINT = "log in with `hf auth login` (older huggingface_hub: `huggingface-cli login`) or set HF_TOKEN"


def hub_repo_id(spec: str) -> str:
    """ORG/NAME from `hf:ORG/NAME` (or a bare ORG/NAME); ConfigError for anything else."""
    repo_id = spec[len(HUB_PREFIX) :] if spec.startswith(HUB_PREFIX) else spec
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or "--" in repo_id or repo_id.endswith((".", "-")):
        raise ConfigError(f"{spec!r} is not a Hugging Face Hub destination; write hf:ORG/NAME (hf:my-org/bert-mini)")
    return repo_id


def model_dir_to_push(directory: str | Path) -> Path:
    """`directory` if it holds a model (config.json and weights); CheckpointError naming what to push instead."""
    path = Path(directory)
    if not path.is_dir():
        what = "is a file" if path.exists() else "does not exist"
        raise CheckpointError(f"{path} {what}; pass a model directory (a run's final/ or model/, or a convert output)")
    inner = [name for name in ("model", "final") if (path / name / io.CONFIG).is_file()]
    if not (path / io.CONFIG).is_file():
        hint = f"push {path / inner[0]} instead" if inner else "pass a run's final/ or model/, or a convert output"
        raise CheckpointError(f"{path} has no config.json, so it is not a model directory; {hint}")
    if not any((path / name).is_file() for name in (io.WEIGHTS, "pytorch_model.bin")):
        raise CheckpointError(f"{path} has no weights ({io.WEIGHTS}); it is not a complete model directory")
    read_config(path)  # a damaged or unsupported config.json is one line here, not a broken repository later
    return path


def _hub_error(exc: Exception, repo_id: str) -> BertzooError:
    """One line for what the Hub (or the way to it) answered; authentication problems name the fix."""
    name = type(exc).__name__
    status = getattr(getattr(exc, "response", None), "status_code", None)
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    if name in ("LocalTokenNotFoundError", "RepositoryNotFoundError", "GatedRepoError") or status in (401, 403):
        code = f", HTTP {status}" if status else ""
        return ConfigError(
            f"the Hugging Face Hub refused to write {repo_id} ({name}{code}): {LOGIN_HINT} with a token that may "
            f"write to {repo_id.split('/')[0]}"
        )
    if name == "HFValidationError":
        return ConfigError(f"{repo_id} is not a valid Hub repository id ({first}); write hf:ORG/NAME")
    return BertzooError(f"could not push to {repo_id} ({name}: {first}); check the network and try again")


def push(
    directory: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    message: str | None = None,
    token: str | None = None,
) -> str:
    """Upload model directory `directory` to the Hugging Face Hub repository `repo_id` (`ORG/NAME` or
    `hf:ORG/NAME`), creating the repository (private if asked; an existing one keeps its visibility) and the
    branch `revision` when missing. The directory gets a model card first when it has none, and a card bertzoo
    wrote is pointed at the repository. Returns the repository's URL. Refusals are one line: not a model
    directory, not a Hub id, huggingface_hub missing, no token or a token the Hub refuses."""
    path = model_dir_to_push(directory)
    repo = hub_repo_id(repo_id)
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError("pushing needs huggingface_hub; install it with `pip install huggingface_hub`") from None
    get_token = getattr(huggingface_hub, "get_token", None)
    if token is None and get_token is not None and get_token() is None:
        raise ConfigError(f"no Hugging Face token found: {LOGIN_HINT}")
    ensure_model_card(path, repo)
    api = huggingface_hub.HfApi(token=token)
    try:
        url = api.create_repo(repo, private=private or None, repo_type="model", exist_ok=True)
        if revision:
            api.create_branch(repo, branch=revision, repo_type="model", exist_ok=True)
        api.upload_folder(
            repo_id=repo,
            folder_path=str(path),
            repo_type="model",
            revision=revision,
            commit_message=message or f"Upload {path.name} with bertzoo",
            ignore_patterns=PUSH_IGNORE,
        )
    except Exception as exc:  # the hub's errors, httpx's and OSErrors: all become one line
        raise _hub_error(exc, repo) from None
    return str(url)
