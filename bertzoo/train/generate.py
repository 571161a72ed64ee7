"""`bertzoo generate`: prompts in (JSONL), generated text out (JSONL), for any model that can generate.

Two kinds of model directory generate:

* a model fine-tuned on the seq2seq task: each line's `text` is a source, and the task decodes it the
  way it was evaluated (`bertzoo.tasks.seq2seq`);
* a left-to-right language model (a GPT pretraining checkpoint, a causal encoder, or a Hugging Face
  GPT2LMHeadModel / OpenAIGPTLMHeadModel directory with its tokenizer): each line's `prompt` (or
  `text`) is continued.

Anything else (a bidirectional encoder, a classifier) is refused with one line naming what would work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from bertzoo.config import GenerationConfig, from_dict
from bertzoo.errors import CheckpointError, ConfigError, DataError
from bertzoo.loading import PRETRAINING, kind_of, load_encoder, load_pretraining, read_checkpoint, read_config, resolve

__all__ = ["generate_file"]

SEQ2SEQ = "seq2seq"


def _causal_lm(directory: Path) -> torch.nn.Module:
    """The causal LM of a GPT checkpoint or causal encoder directory (the tied head needs no weights)."""
    from bertzoo.objectives.clm import CausalLM

    raw, _, state, is_hf = read_checkpoint(directory)
    if kind_of(raw, state, is_hf) == PRETRAINING:
        model = load_pretraining(directory)
        if not isinstance(model, CausalLM):
            raise CheckpointError(f"{directory} holds a {type(model).__name__}, which does not generate text")
        return model
    return CausalLM(load_encoder(directory))


def _generation(tokenizer, settings: dict[str, Any]) -> GenerationConfig:
    """The user's settings, stopping at [SEP] (a document's end in GPT pretraining) unless they name stops."""
    config = from_dict(GenerationConfig, dict(settings), "generation")
    if not config.eos_token_ids:
        config.eos_token_ids = [tokenizer.special.sep]
    if "pad_token_id" not in settings:
        config.pad_token_id = tokenizer.pad_id
    return config


def generate_file(
    model_dir: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    *,
    generation: dict[str, Any] | None = None,
    batch_size: int = 16,
    device: str = "auto",
) -> int:
    """Generate for every JSONL line of `input_path` into `output_path` (same order, `id` carried over,
    written atomically); returns the number of lines. `generation`: GenerationConfig fields."""
    from bertzoo.data.tokenizer import Tokenizer
    from bertzoo.io import replace_atomically
    from bertzoo.train.finetune import _read_jsonl, _to_device, predict_file

    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    settings = dict(generation or {})
    directory = resolve(model_dir)
    raw, config, _ = read_config(directory)
    head = raw.get("task")
    if isinstance(head, dict):
        if head.get("task") != SEQ2SEQ:
            raise CheckpointError(
                f"{directory} is fine-tuned for {head.get('task')}, which does not generate text; `bertzoo generate` "
                "needs a seq2seq fine-tuned model or a left-to-right LM (GPT); use `bertzoo predict` for this one"
            )
        from_dict(GenerationConfig, dict(settings), "generation")  # contradictions fail before any work
        return predict_file(
            directory, input_path, output_path, batch_size=batch_size, device=device, overrides={"generation": settings}
        )
    if not config.causal:
        raise CheckpointError(
            f"{directory} is a bidirectional {config.variant} model without a generation head; `bertzoo generate` "
            "needs a seq2seq fine-tuned model (bertzoo finetune --task seq2seq) or a left-to-right LM (GPT)"
        )
    tokenizer = Tokenizer.load(directory)
    gen = _generation(tokenizer, settings)
    model = _to_device(_causal_lm(directory), device).eval()
    dev = next(model.parameters()).device
    count = 0

    def flush(records: list[tuple[int, dict[str, Any]]], out) -> int:
        prompts = []
        for n, record in records:
            text = record.get("prompt", record.get("text"))
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"{input_path}:{n} needs a non-empty 'prompt' (or 'text') string")
            prompts.append([tokenizer.special.cls, *tokenizer.encode_batch([text])[0]])
        for start in range(0, len(prompts), batch_size):
            rows = prompts[start : start + batch_size]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), tokenizer.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r)
                mask[i, : len(r)] = 1
            result = model.generate(ids.to(dev), mask.to(dev), gen)
            for i, (_, record) in enumerate(records[start : start + batch_size]):
                tokens = result.sequences[i, : int(result.lengths[i])].tolist()
                row = {"prediction": tokenizer.decode(tokens)}
                if "id" in record:
                    row = {"id": record["id"], **row}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        return len(records)

    def write(tmp: str) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8") as out:
            chunk: list[tuple[int, dict[str, Any]]] = []
            for line_number, record in _read_jsonl(Path(input_path)):
                chunk.append((line_number, record))
                if len(chunk) >= 1024:
                    count += flush(chunk, out)
                    chunk = []
            if chunk:
                count += flush(chunk, out)
        if count == 0:
            raise DataError(f"{input_path} holds no JSON lines; nothing to generate")

    replace_atomically(write, Path(output_path))
    return count
