"""`bertzoo info PATH`: what a directory holds (a model, checkpoint, run, shard or tokenizer directory), read
without building anything large."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertzoo.errors import BertzooError


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or BertzooError naming the damaged file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise BertzooError(f"{path} is not valid JSON; the file is damaged") from None
    if not isinstance(data, dict):
        raise BertzooError(f"{path} does not hold a JSON object; the file is damaged")
    return data


def _count_safetensors(path: Path) -> tuple[int, int]:
    """(tensors, parameters) from the file header only."""
    from safetensors import safe_open

    n_tensors = n_params = 0
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                shape = f.get_slice(key).get_shape()
                count = 1
                for d in shape:
                    count *= d
                n_tensors += 1
                n_params += count
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise BertzooError(f"{path} is not a readable safetensors file ({exc}); the file is damaged") from None
    return n_tensors, n_params


def describe(path: str | Path) -> dict[str, Any]:
    """A flat dict describing a model, checkpoint, run, shard or tokenizer directory."""
    p = Path(path)
    if not p.exists():
        raise BertzooError(f"{p} does not exist; pass a model, checkpoint, run, shard or tokenizer directory")
    if p.is_file():
        raise BertzooError(f"{p} is a file; pass the directory that contains it")
    info: dict[str, Any] = {"path": str(p)}
    if (p / "meta.json").is_file() and any(p.glob("shard_*.tokens.npy")):
        meta = _read_json(p / "meta.json")
        info["kind"] = "token shards"
        for key in ("num_docs", "num_sentences", "num_tokens", "num_shards", "vocab_size", "dtype", "source"):
            if key in meta:
                info[key] = meta[key]
        return info
    if (p / "checkpoints").is_dir() or (p / "final").is_dir():
        from bertzoo.engine.manifest import find_latest_checkpoint

        info["kind"] = "training run"
        ckpts = sorted(c.name for c in (p / "checkpoints").glob("step-*")) if (p / "checkpoints").is_dir() else []
        info["checkpoints"] = ", ".join(ckpts) or "none"
        latest = find_latest_checkpoint(p)
        info["latest_complete"] = str(latest) if latest else "none"
        if (p / "final").is_dir():
            info["final_model"] = str(p / "final")
        target = latest or (p / "final" if (p / "final").is_dir() else None)
        if target is not None:
            info.update({f"model.{k}": v for k, v in describe(target).items() if k not in ("path", "kind")})
        return info
    if (p / "config.json").is_file():
        from bertzoo.loading import read_config

        raw, config, is_hf = read_config(p)
        info["kind"] = "Hugging Face model" if is_hf else "bertzoo model"
        if (p / "manifest.json").is_file():
            info["kind"] = "bertzoo checkpoint"
        info["variant"] = raw.get("variant", raw.get("model_type", "bert"))
        if "objective" in raw:
            info["objective"] = raw["objective"]
        info["layers/hidden/heads"] = f"{config.num_layers}/{config.hidden_size}/{config.num_heads}"
        info["intermediate_size"] = config.intermediate_size
        info["vocab_size"] = config.vocab_size
        info["max_position"] = config.max_position
        weights = p / "model.safetensors"
        if weights.is_file():
            tensors, params = _count_safetensors(weights)
            info["tensors"] = tensors
            info["parameters"] = f"{params:,} ({params / 1e6:.1f}M)"
        state_file = p / "trainer_state.json"
        if state_file.is_file():
            state = _read_json(state_file)
            for key in ("step", "epoch", "tokens_seen", "elapsed_seconds"):
                if key in state:
                    info[f"train.{key}"] = state[key]
            # The trainer records the latest logged and evaluated means under "metrics" (Trainer.trainer_state).
            metrics = state.get("metrics")
            for key, value in (metrics if isinstance(metrics, dict) else {}).items():
                info.setdefault(f"train.{key}", value)
        for name in ("vocab.txt", "tokenizer.json"):
            if (p / name).is_file():
                info["tokenizer"] = name
                break
        return info
    if (p / "vocab.txt").is_file() or (p / "tokenizer.json").is_file():
        from bertzoo.data.tokens.tokenizer import Tokenizer

        tok = Tokenizer.load(p)
        info["kind"] = "tokenizer"
        info["vocab_size"] = tok.vocab_size
        return info
    raise BertzooError(f"{p} holds no config.json, meta.json, vocab.txt or checkpoints; nothing to describe")


def add_parser(sub) -> None:
    info = sub.add_parser("info", help="describe a model, checkpoint, run, shard or tokenizer directory")
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    info = describe(args.path)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        for key, value in info.items():
            print(f"{key:>22}: {value}")
    return 0
