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

from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertzoo.config import GenerationConfig, from_dict
from bertzoo.errors import CheckpointError, ConfigError, DataError
from bertzoo.loading import PRETRAINING, kind_of, load_encoder, load_pretraining, read_checkpoint, read_config, resolve

__all__ = ["causal_lm", "continue_texts", "generation_config", "generate_file"]

SEQ2SEQ = "seq2seq"


def causal_lm(directory: Path) -> torch.nn.Module:
    """The causal LM of a GPT checkpoint or causal encoder directory (the tied head needs no weights)."""
    from bertzoo.objectives.clm import CausalLM

    raw, _, state, is_hf = read_checkpoint(directory)
    if kind_of(raw, state, is_hf) == PRETRAINING:
        model = load_pretraining(directory)
        if not isinstance(model, CausalLM):
            raise CheckpointError(f"{directory} holds a {type(model).__name__}, which does not generate text")
        return model
    return CausalLM(load_encoder(directory))


def generation_config(tokenizer, settings: dict[str, Any]) -> GenerationConfig:
    """The user's settings, stopping at [SEP] (a document's end in GPT pretraining) unless they name stops."""
    config = from_dict(GenerationConfig, dict(settings), "generation")
    if not config.eos_token_ids:
        config.eos_token_ids = [tokenizer.special.sep]
    if "pad_token_id" not in settings:
        config.pad_token_id = tokenizer.pad_id
    return config


def continue_texts(
    model: torch.nn.Module, tokenizer, texts: list[str], gen: GenerationConfig, batch_size: int = 16
) -> list[str]:
    """The continuation of each prompt by a left-to-right LM (`causal_lm`), decoded; the prompt starts with [CLS]
    as in GPT pretraining. Under inference mode, `batch_size` prompts at a time."""
    from bertzoo.batch import pad_batch

    device = next(model.parameters()).device
    prompts = [[tokenizer.special.cls, *ids] for ids in tokenizer.encode_batch(texts)]
    out = []
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            ids, lengths = pad_batch(prompts[start : start + batch_size], tokenizer.pad_id)
            mask = np.arange(ids.shape[1])[None] < lengths[:, None]
            result = model.generate(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device), gen)
            out += [tokenizer.decode(result.sequences[i, : int(result.lengths[i])].tolist()) for i in range(len(ids))]
    return out


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
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.train.evaluate import map_jsonl, predict_file, to_device

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
    gen = generation_config(tokenizer, settings)
    model = to_device(causal_lm(directory), device).eval()

    def continue_prompts(records: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
        texts = []
        for n, record in records:
            text = record.get("prompt", record.get("text"))
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"{input_path}:{n} needs a non-empty 'prompt' (or 'text') string")
            texts.append(text)
        return [{"prediction": text} for text in continue_texts(model, tokenizer, texts, gen, batch_size)]

    return map_jsonl(input_path, output_path, continue_prompts, chunk_size=1024, what="generate")
