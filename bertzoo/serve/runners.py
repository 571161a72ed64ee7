"""What a served model does with a batch of inputs: `load_runner` looks at a model directory and returns a
`Runner` with the endpoints it can answer.

* a fine-tuned task model: `/predict` (exactly what `bertzoo predict` writes for the same inputs) and `/embed`
  (its encoder; a model fine-tuned with `task: embedding` pools and normalises as it was trained); a seq2seq
  model also `/generate`;
* a left-to-right LM (GPT): `/generate` (what `bertzoo generate` writes) and `/embed`;
* any other encoder: `/embed` (mean pooling unless the model says otherwise).

Every call runs under inference mode on the runner's device, `/predict` and `/embed` in the runner's precision
(`auto`: bf16 where the device runs it natively; `/generate` decodes in fp32, as `bertzoo generate` does); `int8`
quantizes the linear layers (CPU only, fp32 activations).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.errors import ConfigError

__all__ = ["Runner", "load_runner"]


@dataclass
class Runner:
    """A loaded model and what it serves. Each `run_*` takes a whole batch (the dynamic batcher's group)."""

    name: str
    kind: str  # "finetuned TASK", "causal-lm" or "encoder"
    tokenizer: Any
    encoder: nn.Module
    pooling: str = "mean"
    normalize: bool = False
    max_length: int = 128
    task: Any = None  # fine-tuned: the task (its predict) and its model
    model: nn.Module | None = None
    lm: nn.Module | None = None  # a left-to-right LM: generation
    generation: Any = None  # its default GenerationConfig
    endpoints: tuple[str, ...] = field(default_factory=tuple)
    precision: str = "fp32"

    def run_predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Predictions for inputs with the training data's field names ({"text", "text_pair"} ...), as `bertzoo
        predict` makes them (a classifier's configured text columns read as text and text_pair)."""
        from bertzoo.train.evaluate import predict_inputs

        with torch.inference_mode(), self._autocast():
            return self.task.predict(self.model, predict_inputs(self.task, inputs))

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when the runner's precision is bf16 (`auto` on a device that runs it natively)."""
        from bertzoo.precision import autocast

        device = next(self.encoder.parameters()).device if self.encoder is not None else torch.device("cpu")
        return autocast(self.precision, device)

    def run_embed(self, texts: list[str], normalize: bool | None) -> np.ndarray:
        """(texts, hidden) float32 sentence vectors, in order."""
        from bertzoo.train.embed import encode

        unit = self.normalize if normalize is None else normalize
        return encode(
            self.encoder,
            self.tokenizer,
            texts,
            batch_size=64,
            max_length=self.max_length,
            pooling=self.pooling,
            precision=self.precision,
            normalize=unit,
        )

    def run_generate(self, texts: list[str], settings: dict[str, Any]) -> list[str]:
        """Generated text per input: a seq2seq model decodes its source, a causal LM continues its prompt."""
        if self.lm is None:  # seq2seq: the task decodes as it was evaluated
            return [p["prediction"] for p in self.run_predict([{"text": t} for t in texts])]
        from bertzoo.config import from_dict
        from bertzoo.train.generate import continue_texts

        gen = self.generation
        if settings:  # the request's settings over the model's defaults, checked as a config file's are
            gen = from_dict(type(gen), {**asdict(gen), **settings}, "generation")
        return continue_texts(self.lm, self.tokenizer, texts, gen, batch_size=16)  # under inference mode


def load_runner(
    model: str | Path, *, device: str = "auto", int8: bool = False, max_length: int = 128, precision: str = "auto"
) -> Runner:
    """The `Runner` of a model directory (or builtin:NAME, hf:ID), on `device`, in eval mode. `precision` of
    /predict and /embed: auto is bf16 where the device runs it natively (`bertzoo.precision`)."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.engine.devices import resolve_device
    from bertzoo.loading import load_encoder, load_finetuned, read_config, resolve
    from bertzoo.precision import inference_weights, resolve_precision
    from bertzoo.train.embed import saved_pooling
    from bertzoo.train.evaluate import to_device

    directory = resolve(model)
    target = resolve_device("cpu" if int8 and device == "auto" else device)  # int8 kernels are the CPU's
    if int8 and target.type != "cpu":
        raise ConfigError(f"--int8 runs on the CPU only; drop it or use --device cpu (got {target})")
    raw, config, _ = read_config(directory)
    pooling, normalize = saved_pooling(directory)
    precision = "fp32" if int8 else resolve_precision(precision, target)  # quantized linears take fp32

    def ready(module: nn.Module, weights: str = precision) -> nn.Module:
        module = to_device(module, str(target)).eval()
        if int8:
            from bertzoo.interop.int8 import quantize_int8

            module = quantize_int8(module)
        return inference_weights(module, weights)  # /predict and /embed run under autocast: the same outputs

    head = raw.get("task")
    if isinstance(head, dict) and "task" in head:
        task, finetuned, tokenizer = load_finetuned(directory)
        finetuned = ready(finetuned)
        encoder = getattr(finetuned, "encoder", None)  # seq2seq too: its encoder-decoder's encoder
        endpoints = ["predict"]
        if head["task"] == "seq2seq":
            endpoints.append("generate")
        if encoder is not None and hasattr(encoder, "config"):
            endpoints.append("embed")
        return Runner(
            name=str(directory),
            kind=f"finetuned {head['task']}",
            tokenizer=tokenizer,
            encoder=encoder,
            pooling=pooling if pooling != "pooler" else "mean",
            normalize=normalize,
            max_length=max_length,
            task=task,
            model=finetuned,
            endpoints=tuple(endpoints),
            precision=precision,
        )
    tokenizer = Tokenizer.load(directory)
    if config.causal:
        from bertzoo.train.generate import causal_lm, generation_config

        lm = ready(causal_lm(directory), "fp32")  # /generate decodes in fp32 with the same weights
        return Runner(
            name=str(directory),
            kind="causal-lm",
            tokenizer=tokenizer,
            encoder=lm.encoder,
            pooling="last",
            max_length=max_length,
            lm=lm,
            generation=generation_config(tokenizer, {}),
            endpoints=("generate", "embed"),
            precision=precision,
        )
    return Runner(
        name=str(directory),
        kind="encoder",
        tokenizer=tokenizer,
        encoder=ready(load_encoder(directory)),
        pooling=pooling,
        normalize=normalize,
        max_length=max_length,
        endpoints=("embed",),
        precision=precision,
    )


def warm_up(runner: Runner) -> None:
    """One tiny call of each endpoint, so the first request does not pay for lazy set-up."""
    with torch.inference_mode():
        if "embed" in runner.endpoints:
            runner.run_embed(["warm up"], None)
