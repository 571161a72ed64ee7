"""Which parameters get weight decay: the one rule behind every optimizer parameter group.

BERT decays matrices (word embeddings included) and leaves biases, normalisation weights and every
other 1-D parameter undecayed. The plain decay/no-decay split (`bertzoo.engine.optim.param_groups`)
and layer-wise learning-rate decay (`bertzoo.tasks.techniques.layerwise_lr_groups`) both call
`decay_split`, so the two can never disagree. It sits low in the package (torch only) so that both
the training layer and the techniques can import it.
"""

from __future__ import annotations

from torch import nn

__all__ = ["decay_split", "is_norm"]


def is_norm(module: nn.Module) -> bool:
    """True for a normalisation layer (LayerNorm, GroupNorm, BatchNorm, or a class named *LayerNorm/*RMSNorm)."""
    # Custom norms (e.g. an RMSNorm or a LayerNorm subclass) are matched by class name, so that a
    # norm whose weight happens to be 2-D is still left undecayed, without importing bertzoo.nn.
    if isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)):
        return True
    name = type(module).__name__.lower()
    return "layernorm" in name or "rmsnorm" in name


def decay_split(model: nn.Module, *, include_frozen: bool = False) -> list[tuple[str, nn.Parameter, bool]]:
    """(name, parameter, gets weight decay) for every distinct parameter of `model`, in module order.

    A parameter shared by several modules (tied embeddings, cross-layer sharing) appears once, under
    its first name, so group names are stable. Parameters with requires_grad=False are left out
    unless `include_frozen` (gradual unfreezing puts them in the optimizer before they train).
    """
    norm_params: set[int] = set()
    for module in model.modules():
        if is_norm(module):
            norm_params.update(id(p) for p in module.parameters(recurse=False))
    out: list[tuple[str, nn.Parameter, bool]] = []
    seen: set[int] = set()
    # remove_duplicate=False then dedupe by identity: the first name wins.
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen or (not p.requires_grad and not include_frozen):
            continue
        seen.add(id(p))
        decayed = not (p.ndim <= 1 or name.endswith("bias") or id(p) in norm_params)
        out.append((name, p, decayed))
    return out
