"""Fine-tuning techniques: layer-wise lr decay, adapters, gradual unfreezing, feature-based heads."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bertzoo.batch import Batch
from bertzoo.config import TechniqueConfig, TrainConfig
from bertzoo.engine import Trainer
from bertzoo.engine.optim import build_optimizer, build_scheduler
from bertzoo.errors import ConfigError
from bertzoo.hub import load_encoder
from bertzoo.nn.adapter import AdaptedLinear, Adapter, add_adapters
from bertzoo.tasks.techniques import (
    GradualUnfreezing,
    apply_adapters,
    apply_techniques,
    freeze_encoder,
    layerwise_lr_groups,
)

from helpers.toy_task import LAYERS, VOCAB, TinyClassifier, collate, tiny_encoder, toy_data

# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def batch_of(n: int = 8, seed: int = 0) -> Batch:
    data = toy_data(n, seed)
    return collate([data[i] for i in range(n)])


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def changed(before: dict[str, torch.Tensor], model: nn.Module) -> set[str]:
    return {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}


# ------------------------------------------------------------------------------------------- LLRD


def expected_lr(name: str, base: float, decay: float) -> float:
    if name.startswith("encoder.embeddings."):
        return base * decay**LAYERS
    m = re.match(r"encoder\.stack\.layers\.(\d+)\.", name)
    if m:
        return base * decay ** (LAYERS - 1 - int(m.group(1)))
    return base  # pooler, head


def test_layerwise_lr_groups_match_the_formula() -> None:
    model = TinyClassifier(tiny_encoder())
    base, decay = 1e-3, 0.5
    groups = layerwise_lr_groups(model, base, decay, weight_decay=0.01)
    seen: dict[str, tuple[float, float]] = {}
    for g in groups:
        for name, p in zip(g["param_names"], g["params"], strict=True):
            assert name not in seen, f"{name} appears twice"
            seen[name] = (g["lr"], g["weight_decay"])
            assert p is dict(model.named_parameters())[name]
    assert set(seen) == {n for n, _ in model.named_parameters()}
    for name, (lr, wd) in seen.items():
        assert lr == pytest.approx(expected_lr(name, base, decay)), name
        no_decay = name.endswith("bias") or ".norm." in name or name.endswith("norm.weight")
        assert wd == (0.0 if no_decay else 0.01), name
    # Embeddings at decay^L, the top layer and head at the base rate.
    lrs = sorted({g["lr"] for g in groups})
    assert lrs == pytest.approx([base * decay**k for k in range(LAYERS, -1, -1)])

    # The scheduler scales every group by the same factor, so the ratios hold through training.
    cfg = TrainConfig(lr=base, warmup_steps=2, max_steps=10, schedule="linear")
    opt = build_optimizer(model, cfg, groups=groups)
    sched = build_scheduler(opt, cfg, cfg.max_steps)
    for _ in range(4):
        opt.step()
        sched.step()
    factor = opt.param_groups[-1]["lr"] / base
    assert 0 < factor < 1
    for g in opt.param_groups:
        assert g["lr"] == pytest.approx(g["lr_scale"] * base * factor)


def test_layerwise_groups_count_shared_parameters_once_and_skip_frozen() -> None:
    model = TinyClassifier(tiny_encoder(share="all"))
    groups = layerwise_lr_groups(model, 1e-3, 0.8, 0.0)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()})
    freeze_encoder(model)
    live = layerwise_lr_groups(model, 1e-3, 0.8, 0.0)
    assert all(n.startswith("head.") for g in live for n in g["param_names"])
    everything = layerwise_lr_groups(model, 1e-3, 0.8, 0.0, include_frozen=True)
    assert sum(len(g["params"]) for g in everything) == len(ids)
    with pytest.raises(ConfigError, match="layer_lr_decay"):
        layerwise_lr_groups(model, 1e-3, 1.5, 0.0)


# --------------------------------------------------------------------------------------- adapters


def test_fresh_adapters_are_the_identity_and_keep_key_names() -> None:
    enc = tiny_encoder().eval()
    ids = torch.randint(5, VOCAB, (3, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    keys = set(enc.state_dict())
    with torch.no_grad():
        before = enc(ids, mask, output_hidden_states=True)
    assert add_adapters(enc, bottleneck=4) == 2 * LAYERS
    assert add_adapters(enc, bottleneck=4) == 0  # idempotent
    assert isinstance(enc.stack.layers[0].attention.out, AdaptedLinear)
    new_keys = set(enc.state_dict())
    assert keys <= new_keys and all(".adapter." in k for k in new_keys - keys)
    with torch.no_grad():
        after = enc(ids, mask, output_hidden_states=True)
    for a, b in zip(before.hidden_states, after.hidden_states, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(before.pooler_output, after.pooler_output)


def test_adapters_train_only_adapters_norms_and_head(tmp_path: Path) -> None:
    model = TinyClassifier(tiny_encoder())
    added = apply_adapters(model, bottleneck=4)
    assert added == 2 * LAYERS
    for name, p in model.named_parameters():
        expect = ".adapter." in name or not name.startswith("encoder.") or ".norm." in name
        assert p.requires_grad == expect, name
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable < 0.35 * sum(p.numel() for p in model.parameters())

    before = snapshot(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)  # frozen parameters get no gradient: skipped
    for _ in range(3):
        loss = model(batch_of()).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    moved = changed(before, model)
    assert any(".adapter.up." in k for k in moved)  # the zero-initialised up-projection learns
    assert any(k.startswith("head.") for k in moved)
    for k in moved:
        assert ".adapter." in k or k.startswith("head.") or ".norm." in k, f"frozen {k} changed"
    assert "encoder.stack.layers.0.attention.qkv.weight" not in moved

    # Saved and reloaded as an encoder, the adapters come back and compute the same function.
    model.save_pretrained(str(tmp_path))
    enc = load_encoder(tmp_path).eval()
    assert any(isinstance(m, Adapter) for m in enc.modules())
    model.eval()
    b = batch_of(4, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(
            enc(b.input_ids, b.attention_mask).last_hidden_state,
            model.encoder(b.input_ids, b.attention_mask).last_hidden_state,
        )


def test_conflicting_techniques_are_rejected() -> None:
    model = TinyClassifier(tiny_encoder())
    with pytest.raises(ConfigError, match="keep one of them"):
        apply_techniques(model, TechniqueConfig(freeze_encoder=True, gradual_unfreezing=True))
    with pytest.raises(ConfigError, match="keep one of them"):
        apply_techniques(model, TechniqueConfig(adapter_size=8, freeze_encoder=True))


# ---------------------------------------------------------------------------------- unfreezing


def trainable_parts(model: TinyClassifier) -> set[str]:
    parts = set()
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        m = re.match(r"encoder\.stack\.layers\.(\d+)\.", name)
        if m:
            parts.add(f"layer{m.group(1)}")
        elif name.startswith("encoder.embeddings."):
            parts.add("embeddings")
        else:
            parts.add("head")  # classifier and pooler
    return parts


def test_gradual_unfreezing_schedule() -> None:
    model = TinyClassifier(tiny_encoder())
    schedule = GradualUnfreezing(model)
    expected = [
        {"head"},
        {"head", "layer2"},
        {"head", "layer2", "layer1"},
        {"head", "layer2", "layer1", "layer0"},
        {"head", "layer2", "layer1", "layer0", "embeddings"},
        {"head", "layer2", "layer1", "layer0", "embeddings"},
    ]
    for epoch, parts in enumerate(expected):
        schedule.apply(epoch)
        assert trainable_parts(model) == parts, epoch
    schedule.apply(0)
    assert trainable_parts(model) == {"head"}  # depends on the epoch only (resume-safe)


def test_gradual_unfreezing_in_the_trainer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyClassifier(tiny_encoder())
    schedule = apply_techniques(model, TechniqueConfig(gradual_unfreezing=True))["schedule"]
    groups = layerwise_lr_groups(model, 1e-2, 1.0, 0.0, include_frozen=True)
    seen: list[tuple[int, int, set[str]]] = []

    def record(trainer: Trainer, epoch: int) -> None:
        seen.append((trainer.step, epoch, trainable_parts(model)))

    data = toy_data(48)
    cfg = TrainConfig(
        output_dir=str(tmp_path), epochs=2, batch_size=8, lr=1e-2, device="cpu", save_every=0, log_every=100
    )
    before = snapshot(model)
    summary = Trainer(
        model, data, collate, cfg, progress=False, param_groups=groups, epoch_callbacks=[schedule, record]
    ).train()
    assert summary["completed"] and summary["steps"] == 12  # 2 epochs of 6 batches
    assert [(s, e) for s, e, _ in seen] == [(0, 0), (6, 1), (12, 2)]
    assert seen[0][2] == {"head"} and seen[1][2] == {"head", "layer2"}
    moved = changed(before, model)
    assert any(k.startswith("encoder.stack.layers.2.") for k in moved)  # unfrozen in epoch 1
    assert not any(
        k.startswith(("encoder.stack.layers.0.", "encoder.stack.layers.1.", "encoder.embeddings.")) for k in moved
    )


def test_head_first_trains_the_head_alone_then_everything(tmp_path: Path) -> None:
    """LP-FT: epoch 0 moves the head (classifier, pooler) only; epoch 1 moves the layers and embeddings too."""
    torch.manual_seed(0)
    model = TinyClassifier(tiny_encoder())
    schedule = apply_techniques(model, TechniqueConfig(head_first_epochs=1))["schedule"]
    assert trainable_parts(model) == {"head"}
    groups = layerwise_lr_groups(model, 1e-2, 1.0, 0.0, include_frozen=True)
    cfg = TrainConfig(
        output_dir=str(tmp_path), epochs=1, batch_size=8, lr=1e-2, device="cpu", save_every=0, log_every=100
    )
    before = snapshot(model)
    Trainer(model, toy_data(48), collate, cfg, progress=False, param_groups=groups, epoch_callbacks=[schedule]).train()
    moved = changed(before, model)
    assert moved and all(not k.startswith(("encoder.stack.", "encoder.embeddings.")) for k in moved), moved
    schedule.apply(1)
    assert trainable_parts(model) == {"head", "layer0", "layer1", "layer2", "embeddings"}
    schedule.apply(0)
    assert trainable_parts(model) == {"head"}  # depends on the epoch only (resume-safe)
    with pytest.raises(ConfigError, match="keep one of them"):
        apply_techniques(model, TechniqueConfig(head_first_epochs=1, gradual_unfreezing=True))
    with pytest.raises(ConfigError, match="head_first_epochs must be >= 0"):
        apply_techniques(model, TechniqueConfig(head_first_epochs=-1))


# ---------------------------------------------------------------------------------- feature-based


@pytest.mark.parametrize("mix", ["weighted", "concat"])
def test_feature_mix_model_trains_with_a_frozen_encoder(tmp_path: Path, mix: str) -> None:
    torch.manual_seed(0)
    # A random encoder's [CLS] barely sees the other tokens, so the probe averages the token features.
    model = TinyClassifier(tiny_encoder(), feature_layers=2, feature_mix=mix, mean_pool=True)
    assert model.feature_dim == (32 if mix == "concat" else 16)
    freeze_encoder(model)
    before = snapshot(model)
    data = toy_data(96, topical=True)
    cfg = TrainConfig(
        output_dir=str(tmp_path), max_steps=60, batch_size=16, lr=3e-2, device="cpu", save_every=0, log_every=10
    )
    losses = []
    trainer = Trainer(model, data, collate, cfg, progress=False, callbacks=[lambda t, s: losses.append(t._last_loss)])
    trainer.train()
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:5])
    moved = changed(before, model)
    assert not any(k.startswith("encoder.") for k in moved)
    if mix == "weighted":
        assert "mix.weights" in moved
    assert math.isfinite(losses[-1])


# ------------------------------------------------------------------------------ no wasted work


@pytest.mark.parametrize("adapters", [False, True])
def test_cls_only_top_layer_is_exact(adapters: bool) -> None:
    """A classifier reading only [CLS] runs the top layer for that one position: same outputs, same gradients."""
    full = TinyClassifier(tiny_encoder(seed=3))
    if adapters:
        add_adapters(full.encoder, 4)
        with torch.no_grad():
            for name, p in full.named_parameters():
                if ".adapter.up." in name:
                    p.normal_(std=0.1)  # not the identity
    cls_only = TinyClassifier(tiny_encoder(seed=3))
    if adapters:
        add_adapters(cls_only.encoder, 4)
    cls_only.load_state_dict(full.state_dict())
    cls_only.reads_sequence = False
    b = batch_of(8, seed=5)
    assert b.attention_mask.min() == 0  # padding present
    outs = []
    for model in (full, cls_only):
        out = model(b)
        out.loss.backward()
        outs.append((out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-6, rtol=1e-5)
    for name, grad in outs[0][1].items():
        torch.testing.assert_close(outs[1][1][name], grad, atol=1e-6, rtol=1e-4, msg=name)
    seq, _ = cls_only.encode(b)
    assert seq.shape[1] == 1  # only [CLS] left the top layer
