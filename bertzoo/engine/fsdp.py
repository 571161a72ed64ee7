"""Fully sharded data parallel (PyTorch's FSDP2, `fully_shard`) for the training loop.

Each Transformer layer is its own shard unit (its weights are gathered just before it runs and
freed after), the rest (embeddings, heads, tied weights) forms the root unit. Parameters, gradients
and optimizer state are split across ranks, so a model whose Adam state does not fit one device
trains on several.

Checkpoints stay in the single-process layout (full `model.safetensors`, full optimizer state in
parameter order): a run written with FSDP resumes with DDP, one process, or a different number of
FSDP ranks, and the other way round. Gathering them costs one full copy in the main process's CPU
memory, where there is usually far more room than on the accelerator.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


def _layers_to_shard(model: nn.Module) -> list[nn.Module]:
    """Transformer layers that run once per forward (layers reused by ALBERT's sharing stay in the root)."""
    from bertzoo.nn.stack import TransformerStack

    units: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, TransformerStack) and module.share == "none":
            units.extend(module.layers)
    return units


def shard_model(model: nn.Module, device: torch.device, world_size: int) -> None:
    """Apply `fully_shard` to every unshared Transformer layer, then to `model` itself (in place).

    The parameters move to `device` as they are sharded, so the full model never has to fit there.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    for layer in _layers_to_shard(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a sharded DTensor (a collective: every rank must call it); others as they are."""
    return t.full_tensor() if is_dtensor(t) else t


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded weights on CPU on rank 0 (an empty dict elsewhere); every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def full_optimizer_state(optimizer: torch.optim.Optimizer, keep: bool) -> dict[str, Any]:
    """`optimizer.state_dict()` with every sharded state tensor gathered (collective).

    Same layout as a single-process optimizer (states keyed by parameter index, groups with
    `param_names`), so it loads into any world size. Only ranks with `keep` hold the result on CPU.
    """
    state = optimizer.state_dict()
    gathered: dict[int, dict[str, Any]] = {}
    for index in sorted(state["state"]):
        entry = {}
        for key, value in state["state"][index].items():
            value = full_tensor(value) if isinstance(value, torch.Tensor) else value
            entry[key] = value.detach().cpu() if isinstance(value, torch.Tensor) and keep else value
        gathered[index] = entry
    return {"state": gathered if keep else {}, "param_groups": state["param_groups"]}


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a single-process-layout optimizer state into an optimizer over sharded parameters."""
    from torch.distributed.tensor import distribute_tensor

    params = [p for group in optimizer.param_groups for p in group["params"]]
    converted: dict[int, dict[str, Any]] = {}
    for index, entry in state["state"].items():
        param = params[int(index)]
        new = {}
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and is_dtensor(param) and value.shape == param.shape:
                value = distribute_tensor(value.to(param.device), param.device_mesh, param.placements)
            new[key] = value
        converted[int(index)] = new
    optimizer.load_state_dict({"state": converted, "param_groups": state["param_groups"]})


def remap_groups(groups: Iterable[dict[str, Any]], names: dict[int, str], model: nn.Module) -> list[dict[str, Any]]:
    """Caller-made parameter groups pointed at the model's current (sharded) parameters by name.

    `fully_shard` replaces every parameter object, so groups built before sharding (layer-wise
    learning rates) would point at dead tensors; `names` maps the old objects' ids to their names.
    """
    current = dict(model.named_parameters(remove_duplicate=False))
    out = []
    for group in groups:
        out.append({**group, "params": [current[names[id(p)]] for p in group["params"]]})
    return out


class StateView:
    """Stands in for an optimizer when saving: `state_dict()` returns the gathered state."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state
