"""A sentence-transformers model directory from a bertzoo encoder: the Hugging Face model and tokenizer at the
top (module 0, `Transformer`), the pooling in `1_Pooling/`, and a `Normalize` module when vectors are unit
length. `sentence_transformers.SentenceTransformer(directory)` loads it without bertzoo.

The files follow the layout sentence-transformers has read since version 2 (all-MiniLM-L6-v2's), so older and
newer releases load it alike.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

import bertzoo.io as io
from bertzoo.errors import ConfigError
from bertzoo.interop.convert import export_hf

__all__ = ["POOLING_MODES", "write_sentence_transformers"]

# bertzoo's pooling name -> sentence-transformers' pooling mode key.
POOLING_MODES = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "last": "pooling_mode_lasttoken"}
_ALL_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def write_sentence_transformers(
    encoder: nn.Module, tokenizer, directory: str | Path, *, pooling: str, normalize: bool, max_seq_length: int
) -> Path:
    """Write `encoder` (and `tokenizer`) as a new sentence-transformers directory, atomically (a failure leaves
    nothing behind). `pooling`: mean, cls or last. A non-empty `directory` is refused, never overwritten."""
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{target} exists and is not empty; choose a new output directory")
    if pooling not in POOLING_MODES:
        raise ConfigError(
            f"pooling {pooling!r} has no sentence-transformers equivalent; use one of {list(POOLING_MODES)}"
        )
    limit = int(encoder.config.max_position)
    if not 3 <= max_seq_length <= limit:
        raise ConfigError(f"--max-length must be between 3 and the model's {limit} positions, got {max_seq_length}")

    def write(tmp: Path) -> None:
        export_hf(encoder, tmp)  # config.json, model.safetensors, README.md (the model card)
        tokenizer.save(tmp)
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        if normalize:
            modules.append(
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
            )
            (tmp / "2_Normalize").mkdir()
        _write_json(tmp / "modules.json", modules)
        # The tokenizer lower-cases by itself where it should (tokenizer_config.json): no second lower-casing here.
        _write_json(tmp / "sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False})
        _write_json(tmp / "config_sentence_transformers.json", {"similarity_fn_name": "cosine"})
        (tmp / "1_Pooling").mkdir()
        width = int(encoder.config.hidden_size)
        config = {"word_embedding_dimension": width, **{m: m == POOLING_MODES[pooling] for m in _ALL_MODES}}
        _write_json(tmp / "1_Pooling" / "config.json", {**config, "include_prompt": True})

    return io.write_dir_atomic(directory, write)
