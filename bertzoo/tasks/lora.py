"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") through the `peft` library.

Each targeted linear layer W of the encoder (and of the decoder of an encoder-decoder) gets a low-rank update:
y = W x + (alpha / r) B A x, A (r x in) random, B (out x r) zero, so a fresh model computes exactly what the
pretrained one does. W and everything else in the encoder is frozen; A, B and the head (everything outside the
encoder, as with adapters) train. An encoder-decoder is pretrained whole, its LM head included, so there only
A and B train.

Saving: every model directory holds plain weights with the update merged into W (`model.safetensors` has the
keys of a model without LoRA), so `bertzoo predict`, `evaluate`, `export` and `load_finetuned` read it with
neither peft nor LoRA code. The run's own files (checkpoints, `best/`, `final/`) keep, beside it, the exact
unmerged state of the LoRA layers (W, A, B) in `lora.safetensors`, so a resumed run continues exactly:
`LoraFiles` is the model's `checkpoint_parts`, the hook `bertzoo.engine.weights` saves and loads through.
`merge_lora` folds the update into the model in place once training is over.

peft is imported only here and only when LoRA is on; without it the error says how to install it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertzoo.config import LoraConfig
from bertzoo.errors import ConfigError

__all__ = [
    "DEFAULT_TARGETS",
    "LORA_WEIGHTS",
    "LoraFiles",
    "apply_lora",
    "check_lora",
    "has_lora",
    "merge_lora",
    "merged_view",
]

LORA_WEIGHTS = "lora.safetensors"
# bertzoo's own projections: self-attention (fused qkv, out), cross-attention (q, fused kv, out), feed-forward
# (up, gate of a gated FFN, down). Hu et al. adapt the attention projections; QLoRA showed every linear layer helps.
DEFAULT_TARGETS = ("qkv", "q", "kv", "out", "up", "gate", "down")
_ADAPTER = "default"  # peft's adapter name: the LoRA keys read `<layer>.lora_A.default.weight`


def check_lora(cfg: LoraConfig) -> None:
    """ConfigError for a LoRA setting out of range (r = 0 is off and needs nothing else)."""
    if cfg.r < 0:
        raise ConfigError(f"technique.lora.r must be >= 0 (0 = off), got {cfg.r}")
    if cfg.r and cfg.alpha <= 0:
        raise ConfigError(f"technique.lora.alpha must be positive, got {cfg.alpha}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"technique.lora.dropout must be in [0, 1), got {cfg.dropout}")


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise ConfigError("technique.lora needs the peft package: pip install 'bertzoo[lora]'") from None
    return peft


def _targets(stacks: dict[str, nn.Module], names: list[str]) -> dict[str, list[str]]:
    """stack prefix -> the module paths (relative to that stack) of the linear layers LoRA goes on. An explicit
    name that matches no linear layer is a ConfigError listing the names that do; the defaults take what exists."""
    linears = {
        prefix: [n for n, m in stack.named_modules() if isinstance(m, nn.Linear)] for prefix, stack in stacks.items()
    }
    wanted = list(names) or list(DEFAULT_TARGETS)

    def hits(path: str, name: str) -> bool:
        return path == name or path.endswith("." + name)

    if names:
        every = sorted({p.rsplit(".", 1)[-1] for paths in linears.values() for p in paths})
        for name in names:
            if not any(hits(p, name) for paths in linears.values() for p in paths):
                raise ConfigError(
                    f"technique.lora.target_modules: no linear layer named {name!r}; "
                    f"the model's linear layers: {', '.join(every)}"
                )
    chosen = {prefix: [p for p in paths if any(hits(p, n) for n in wanted)] for prefix, paths in linears.items()}
    if not any(chosen.values()):
        raise ConfigError(
            "technique.lora: the model has none of the default target layers "
            f"({', '.join(DEFAULT_TARGETS)}); name them in technique.lora.target_modules"
        )
    return chosen


def apply_lora(model: nn.Module, cfg: LoraConfig, stacks: dict[str, nn.Module], frozen: nn.Module, seed: int) -> int:
    """Freeze `frozen`, then put LoRA on the targeted linear layers of `stacks` ({path prefix: module}, the
    encoder and the decoder of an encoder-decoder); A is drawn from `seed` (the same start in every attempt
    of a run). Installs `LoraFiles` as the model's `checkpoint_parts`. Returns the number of adapted layers."""
    check_lora(cfg)
    peft = _peft()
    targets = _targets(stacks, cfg.target_modules)
    for p in frozen.parameters():
        p.requires_grad_(False)
    added = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for prefix, stack in stacks.items():
            if not targets[prefix]:
                continue
            config = peft.LoraConfig(
                r=cfg.r,
                lora_alpha=cfg.alpha,
                lora_dropout=cfg.dropout,
                target_modules=targets[prefix],  # full paths: exactly these layers, nothing matched by accident
                bias="none",
            )
            peft.inject_adapter_in_model(config, stack, adapter_name=_ADAPTER)
            added += len(targets[prefix])
    # peft froze what it was given; the head outside `frozen` trains, the LoRA matrices train.
    for layer in _lora_layers(model).values():
        for name, p in layer.named_parameters():
            p.requires_grad_(name.startswith(("lora_A.", "lora_B.")))
    model.checkpoint_parts = LoraFiles(model)
    return added


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """path -> peft LoRA layer, each shared layer once."""
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in model.named_modules() if isinstance(m, LoraLayer)}


def has_lora(model: nn.Module) -> bool:
    """True when `model` holds peft LoRA layers (never imports peft for a model without them)."""
    return isinstance(getattr(model, "checkpoint_parts", None), LoraFiles)


def _merged_linear(layer: nn.Module) -> nn.Linear:
    """A plain nn.Linear computing what `layer` does: W + the scaled update (peft's own delta), the bias shared."""
    base = layer.get_base_layer()
    merged = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None, device="meta")
    with torch.no_grad():  # a snapshot for saving: no graph through A and B
        weight = base.weight + layer.get_delta_weight(_ADAPTER).to(base.weight.dtype)
    merged.weight = nn.Parameter(weight, requires_grad=False)
    if base.bias is not None:
        merged.bias = base.bias
    return merged


def merged_view(model: nn.Module) -> nn.Module:
    """A view of `model` whose LoRA layers are plain merged nn.Linear layers: every other module is `model`'s
    own (shared, so loading weights into the view loads them into `model`); only the path down to each
    LoRA layer is copied. Its state dict has the keys of the model without LoRA."""
    from peft.tuners.lora import LoraLayer

    memo: dict[int, nn.Module] = {}

    def view(module: nn.Module) -> nn.Module:
        if id(module) in memo:
            return memo[id(module)]
        if isinstance(module, LoraLayer):
            out: nn.Module = _merged_linear(module)
        elif not any(isinstance(m, LoraLayer) for m in module.modules()):
            out = module
        else:
            out = copy.copy(module)
            out.__dict__["_modules"] = {k: None if v is None else view(v) for k, v in module._modules.items()}
            out.__dict__.pop("checkpoint_parts", None)  # the view saves as a plain model
        memo[id(module)] = out
        return out

    return view(model)


class _LoraState(nn.Module):
    """The unmerged tensors of `model`'s LoRA layers (W, bias, A, B) under the model's own names, each shared
    tensor once: what `lora.safetensors` holds. Loading writes them back into `model`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.__dict__["_model"] = model  # not a submodule: this module's state is only the LoRA layers'

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        prefixes = tuple(f"{n}." for n in _lora_layers(self._model))
        seen: set[tuple[int, tuple[int, ...]]] = set()
        state: dict[str, torch.Tensor] = {}
        for name, t in self._model.state_dict().items():
            key = (t.data_ptr(), tuple(t.shape))  # a layer shared by several paths (ALBERT) is stored once
            if name.startswith(prefixes) and key not in seen:
                seen.add(key)
                state[name] = t
        return state

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:  # type: ignore[override]
        return self._model.load_state_dict(state, strict=False)


class LoraFiles:
    """`checkpoint_parts` of a model with LoRA (see `bertzoo.engine.weights`): the merged model's own files,
    loadable on their own, then `lora.safetensors` beside them with the exact unmerged LoRA layers."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __call__(self, weights_file: Path) -> list[tuple[nn.Module, Path]]:
        return [
            (merged_view(self.model), Path(weights_file)),
            (_LoraState(self.model), Path(weights_file).parent / LORA_WEIGHTS),
        ]


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA update into its layer's weight and put the plain nn.Linear back (peft's merge, in place):
    afterwards `model` is a model without LoRA, trainable flags as they were on the base weights. Returns it."""
    if not has_lora(model):
        return model
    layers = _lora_layers(model)
    for path, layer in layers.items():
        layer.merge(safe_merge=True)
        parent_path, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        setattr(parent, child, layer.get_base_layer())
    del model.checkpoint_parts
    return model
