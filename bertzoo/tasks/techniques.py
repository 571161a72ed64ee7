"""Fine-tuning techniques: layer-wise learning-rate decay, feature-based use (frozen encoder),
bottleneck adapters and gradual unfreezing.

Each works on a task model that has an `encoder` attribute (a `bertzoo.models.encoder.Encoder`); everything
outside the encoder (mix weights, BiLSTM, classifier) counts as the head. Freezing is done with
`requires_grad`, so parameters can sit in the optimizer from the start: AdamW skips a parameter
whose gradient is None, and gradual unfreezing only has to flip the flags.

An encoder-decoder (T5, MASS: a model with a `decoder` stack beside its `encoder`) is pretrained whole,
its LM head included, so nothing in it is a new head. Each technique reads it accordingly: layer-wise
decay runs over both stacks (`layer_depths`); `freeze_encoder` fixes the encoder's function (its layers
and its embeddings, the word table the decoder and a tied LM head share) and trains the decoder;
adapters go into both stacks, and only they and the norms train; gradual unfreezing goes down the
decoder from its top layer, then down the encoder, the shared embeddings last (`unfreezing_stages`).

LoRA (`technique.lora`, `bertzoo.tasks.lora`) goes on the linear layers of the encoder, and of the decoder of an
encoder-decoder, which it freezes as adapters do; it decides what trains, so it is refused beside freezing,
adapters and the unfreezing schedules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from bertzoo.config import LoraConfig, TechniqueConfig
from bertzoo.errors import ConfigError
from bertzoo.models.encdec import Decoder
from bertzoo.nn.adapter import Adapter, add_adapters
from bertzoo.nn.param_groups import decay_split, is_norm
from bertzoo.tasks.lora import check_lora

__all__ = [
    "GradualUnfreezing",
    "apply_adapters",
    "apply_lora_to",
    "apply_techniques",
    "check_techniques",
    "freeze_encoder",
    "layer_depths",
    "layerwise_lr_groups",
    "num_depths",
    "trainable_summary",
    "unfreezing_stages",
]


def _encoder(model: nn.Module) -> nn.Module:
    encoder = getattr(model, "encoder", None)
    if encoder is None and hasattr(model, "stack") and hasattr(model, "embeddings"):
        encoder = model  # a bare Encoder
    if encoder is None:
        raise ConfigError(f"{type(model).__name__} has no encoder; these techniques need a model with .encoder")
    return encoder


def _stack(encoder: nn.Module, technique: str) -> nn.Module:
    """The encoder's layer stack; a ConfigError naming `technique` for a backbone without one (XLNet's
    two-stream layers are no TransformerStack: adapters are not defined for them; depths and stages are,
    through `_depth_layers`)."""
    stack = getattr(encoder, "stack", None)
    if stack is None:
        raise ConfigError(
            f"technique.{technique} is not available for {type(encoder).__name__} (no TransformerStack); "
            "remove it (technique.freeze_encoder and technique.feature_layers work)"
        )
    return stack


@dataclass(frozen=True)
class _Layers:
    """A backbone's layers bottom-up (`layers[i]` applied at depth i; one module for all with ALBERT's
    sharing) and how many depths they make."""

    layers: Sequence[nn.Module]
    num_layers: int


def _depth_layers(encoder: nn.Module, technique: str) -> _Layers:
    """The layers that depth-based techniques (layer-wise lr decay, gradual unfreezing) count: a
    TransformerStack's, or a backbone's own `layers` list (XLNet's two-stream layers, one per depth)."""
    stack = getattr(encoder, "stack", None)
    if stack is not None:
        return _Layers(stack.layers, stack.num_layers)
    layers = getattr(encoder, "layers", None)
    if isinstance(layers, nn.ModuleList):
        return _Layers(layers, len(layers))
    raise ConfigError(
        f"technique.{technique} is not available for {type(encoder).__name__} (no layers to count); "
        "remove it (technique.freeze_encoder and technique.feature_layers work)"
    )


def _decoder(model: nn.Module) -> Decoder | None:
    """The decoder stack of an encoder-decoder model (T5, MASS), None for an encoder-only one."""
    decoder = getattr(model, "decoder", None)
    return decoder if isinstance(decoder, Decoder) else None


def num_depths(model: nn.Module) -> int:
    """L, the layer depths `layer_depths` counts: the encoder's layers, or the deeper stack of an
    encoder-decoder."""
    layers, decoder = _encoder(model).config.num_layers, _decoder(model)
    return max(layers, decoder.stack.num_layers) if decoder is not None else layers


def layer_depths(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> depth: 0 for the embeddings, i + 1 for layer i, L + 1 for everything above
    (final norm, pooler, head). A parameter shared by several layers takes its lowest layer's depth.

    An encoder-decoder's stacks are counted side by side, each ending at depth L (`num_depths`): layer i
    of a stack of n sits at L - n + i + 1. Both stacks end next to the output (the encoder's top states
    feed every decoder layer through cross-attention), and the word table they share, the bottom of both,
    is depth 0."""
    encoder, decoder = _encoder(model), _decoder(model)
    top = num_depths(model)
    stack = _depth_layers(encoder, "layer_lr_decay")
    stacks = [stack] if decoder is None else [stack, decoder.stack]
    depth: dict[int, int] = {}
    for p in encoder.embeddings.parameters():
        depth.setdefault(id(p), 0)
    # The backbone's own input vectors (XLNet's query-stream start `mask_emb`) sit with the embeddings.
    for p in encoder.parameters(recurse=False):
        depth.setdefault(id(p), 0)
    for stack in stacks:
        below = top - stack.num_layers
        for i, layer in enumerate(stack.layers):
            for p in layer.parameters():
                depth.setdefault(id(p), below + i + 1)
    for p in model.parameters():
        depth.setdefault(id(p), top + 1)
    return depth


def layerwise_lr_groups(
    model: nn.Module, base_lr: float, decay: float, weight_decay: float, *, include_frozen: bool = False
) -> list[dict[str, Any]]:
    """AdamW parameter groups with layer-wise learning-rate decay (Howard & Ruder 2018; Sun et al. 2019).

    With L layers, layer i gets `base_lr * decay**(L - 1 - i)`, the embeddings `base_lr * decay**L`,
    and the top layer, pooler and head `base_lr`; each stack of an encoder-decoder decays from its own
    top layer (`layer_depths`). Each depth is split into a decayed group and a
    no-decay group (biases, LayerNorm and other 1-D parameters) by `bertzoo.nn.param_groups.decay_split`,
    the rule `bertzoo.engine.optim.param_groups` uses too. Shared parameters appear once.
    `include_frozen` keeps parameters with requires_grad=False (for gradual unfreezing, which turns
    them on later). Groups carry `lr`, `lr_scale` and `param_names`.
    """
    if not 0.0 < decay <= 1.0:
        raise ConfigError(f"technique.layer_lr_decay must be in (0, 1], got {decay}")
    if base_lr <= 0:
        raise ConfigError(f"train.lr must be positive, got {base_lr}")
    num_layers = num_depths(model)
    depth = layer_depths(model)
    # (exponent, decayed?) -> group; exponent = how many times `decay` applies.
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, p, decayed in decay_split(model, include_frozen=include_frozen):
        exponent = max(0, num_layers - depth[id(p)])  # embeddings: L; layer i: L-1-i; above: 0
        key = (exponent, decayed)
        if key not in groups:
            scale = decay**exponent
            groups[key] = {
                "params": [],
                "weight_decay": weight_decay if decayed else 0.0,
                "lr": base_lr * scale,
                "lr_scale": scale,
                "param_names": [],
            }
        groups[key]["params"].append(p)
        groups[key]["param_names"].append(name)
    # Bottom (embeddings) first, decayed before no-decay: a stable order for checkpoint matching.
    return [groups[k] for k in sorted(groups, key=lambda k: (-k[0], not k[1]))]


def _set_trainable(params: Iterable[nn.Parameter], flag: bool) -> None:
    for p in params:
        p.requires_grad_(flag)


def freeze_encoder(model: nn.Module) -> None:
    """Feature-based use: the encoder's parameters stop training; the head (and layer mix) train.

    An encoder-decoder: the encoder with its embeddings, so the source's encoding stays the pretrained
    one; the word table it shares with the decoder's input (and a tied LM head) stays as pretrained too,
    and the decoder's layers, final norm and position bias (and an untied LM head) train."""
    _set_trainable(_encoder(model).parameters(), False)


def apply_adapters(model: nn.Module, bottleneck: int, *, train_layer_norms: bool = True) -> int:
    """Add bottleneck adapters to the encoder and freeze everything except the adapters, the head
    (everything outside the encoder) and, when `train_layer_norms`, the encoder's LayerNorms (as
    Houlsby et al. did). Returns the number of adapters added.

    An encoder-decoder gets adapters in the decoder's layers too, in the same two places (after the
    self-attention and after the feed-forward sublayer), and nothing outside the adapters and norms
    trains: its LM head is the pretrained one, not a new head. No adapter follows the cross-attention:
    Houlsby's two per layer, as AdapterHub's default for encoder-decoders; the layer's feed-forward
    adapter comes after the cross-attention sublayer, so what it reads from the encoder still passes one
    before the next layer, and the encoder's adapters already adapt what it reads."""
    encoder, decoder = _encoder(model), _decoder(model)
    _stack(encoder, "adapter_size")  # where the adapters go
    added = add_adapters(encoder, bottleneck)
    if decoder is not None:
        added += add_adapters(decoder, bottleneck)
    frozen = encoder if decoder is None else model
    _set_trainable(frozen.parameters(), False)
    for module in frozen.modules():
        if isinstance(module, Adapter) or (train_layer_norms and is_norm(module)):
            _set_trainable(module.parameters(), True)
    return added


def unfreezing_stages(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> the epoch from which gradual unfreezing trains it: 0 for the head (everything
    outside the layers and the embeddings: pooler, final norms, LM head), k for the k-th layer from the
    top, the embeddings last. A parameter shared by several layers takes its lowest layer's stage.

    An encoder-decoder's layers count down the decoder first (its top layer, nearest the output, at 1),
    then down the encoder from its top layer, which feeds every decoder layer through cross-attention;
    the word table, the bottom of both stacks, comes last."""
    encoder, decoder = _encoder(model), _decoder(model)
    stack = _depth_layers(encoder, "gradual_unfreezing")
    stacks = [stack] if decoder is None else [decoder.stack, stack]
    stage: dict[int, int] = {}
    above = 0  # layers of the stacks before this one
    for stack in stacks:
        for i, layer in enumerate(stack.layers):
            for p in layer.parameters():
                stage[id(p)] = max(stage.get(id(p), 0), above + stack.num_layers - i)
        above += stack.num_layers
    for p in [*encoder.embeddings.parameters(), *encoder.parameters(recurse=False)]:
        stage[id(p)] = above + 1
    for p in model.parameters():
        stage.setdefault(id(p), 0)
    return stage


class GradualUnfreezing:
    """ULMFiT's gradual unfreezing: epoch 0 trains only the head (with the pooler and any final norm);
    each later epoch unfreezes the next layer from the top; the embeddings come last, at epoch L + 1
    (an encoder-decoder: down the decoder, then down the encoder; see `unfreezing_stages`).

    Pass it to the Trainer as an epoch callback: `cb(trainer, epoch)` is called with the epoch about
    to be trained (also at the start of a resumed run), and the state depends only on that epoch, so
    resuming restores the same set of trainable parameters. Build the optimizer with every parameter
    (`include_frozen=True`) so later-unfrozen ones are already in it.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.encoder = _encoder(model)
        params = {id(p): p for p in model.parameters()}
        self._by_stage: dict[int, list[nn.Parameter]] = {}
        for pid, k in unfreezing_stages(model).items():
            self._by_stage.setdefault(k, []).append(params[pid])
        self.num_stages = max(self._by_stage) + 1
        self.epoch = -1

    def apply(self, epoch: int) -> None:
        """Set requires_grad for `epoch`: the parameters of the stages up to it train."""
        for k, params in self._by_stage.items():
            _set_trainable(params, k <= epoch)
        self.epoch = epoch

    def __call__(self, trainer: Any, epoch: int) -> None:
        if epoch != self.epoch:
            self.apply(epoch)


class HeadFirst(GradualUnfreezing):
    """LP-FT (Kumar et al. 2022): for the first `epochs` epochs only the head trains (gradual unfreezing's
    stage 0: classifier, pooler, final norms; the layers and embeddings frozen, so a linear probe of the
    pretrained features), then every stage at once. The same epoch callback as `GradualUnfreezing`."""

    def __init__(self, model: nn.Module, epochs: int) -> None:
        super().__init__(model)
        self.epochs = epochs

    def apply(self, epoch: int) -> None:
        """Stage 0 always trains; the layers and embeddings from epoch `epochs` on."""
        super().apply(0 if epoch < self.epochs else self.num_stages)
        self.epoch = epoch


def trainable_summary(model: nn.Module) -> dict[str, int]:
    """{"trainable": n, "total": n} distinct parameters."""
    params = {id(p): p for p in model.parameters()}
    return {
        "trainable": sum(p.numel() for p in params.values() if p.requires_grad),
        "total": sum(p.numel() for p in params.values()),
    }


def check_techniques(cfg: TechniqueConfig) -> None:
    """Reject combinations that contradict each other, naming the fix."""
    if cfg.adapter_size < 0:
        raise ConfigError(f"technique.adapter_size must be >= 0 (0 = off), got {cfg.adapter_size}")
    if cfg.feature_layers < 0:
        raise ConfigError(f"technique.feature_layers must be >= 0, got {cfg.feature_layers}")
    if cfg.head_first_epochs < 0:
        raise ConfigError(f"technique.head_first_epochs must be >= 0 (0 = off), got {cfg.head_first_epochs}")
    if not 0.0 < cfg.layer_lr_decay <= 1.0:
        raise ConfigError(f"technique.layer_lr_decay must be in (0, 1] (1 = off), got {cfg.layer_lr_decay}")
    chosen = [
        name
        for name, on in (
            ("freeze_encoder", cfg.freeze_encoder),
            ("adapter_size", cfg.adapter_size > 0),
            ("gradual_unfreezing", cfg.gradual_unfreezing),
            ("head_first_epochs", cfg.head_first_epochs > 0),
        )
        if on
    ]
    check_lora(cfg.lora)
    if cfg.lora.r > 0:
        chosen.append("lora")
    if len(chosen) > 1:
        raise ConfigError(
            f"technique.{chosen[0]} and technique.{chosen[1]} both decide which parameters train; keep one of them"
        )


def apply_lora_to(model: nn.Module, cfg: LoraConfig, seed: int = 0) -> int:
    """LoRA on the encoder (and the decoder of an encoder-decoder), frozen as `apply_adapters` freezes: the
    encoder, or the whole encoder-decoder with its pretrained LM head. Returns the number of adapted layers."""
    from bertzoo.tasks.lora import apply_lora

    encoder, decoder = _encoder(model), _decoder(model)
    stacks = {"encoder": encoder} if decoder is None else {"encoder": encoder, "decoder": decoder}
    return apply_lora(model, cfg, stacks, frozen=encoder if decoder is None else model, seed=seed)


def apply_techniques(model: nn.Module, cfg: TechniqueConfig, *, seed: int = 0) -> dict[str, Any]:
    """Freeze / add adapters / add LoRA as configured (after the task built its head; `seed` draws LoRA's A).
    Returns what was done, including the epoch callback that changes what trains (`GradualUnfreezing` or
    `HeadFirst`) under "schedule" when one is enabled."""
    check_techniques(cfg)
    done: dict[str, Any] = {}
    if cfg.lora.r > 0:
        done["lora_layers"] = apply_lora_to(model, cfg.lora, seed)
    if cfg.freeze_encoder:
        freeze_encoder(model)
        done["frozen_encoder"] = True
    if cfg.adapter_size > 0:
        done["adapters"] = apply_adapters(model, cfg.adapter_size)
    if cfg.gradual_unfreezing or cfg.head_first_epochs:
        schedule = GradualUnfreezing(model) if cfg.gradual_unfreezing else HeadFirst(model, cfg.head_first_epochs)
        schedule.apply(0)
        done["schedule"] = schedule
    return done
