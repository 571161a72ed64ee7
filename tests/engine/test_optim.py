"""Optimizer parameter groups and learning-rate schedules."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bertzoo.config import TrainConfig
from bertzoo.engine.optim import BudgetClock, build_optimizer, build_scheduler, fused_adamw_fits, param_groups
from bertzoo.errors import ConfigError


class RMSNormLike(nn.Module):
    """A custom norm class (matched by name) with a 2-D-looking weight would still be excluded."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1, dim))


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.rms = RMSNormLike(4)
        self.lin = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=True)
        self.head.weight = self.emb.weight  # tied: must appear once
        self.scale = nn.Parameter(torch.ones(4))  # 1-D, not a bias or norm
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)


def test_param_groups_split_and_dedupe() -> None:
    model = Tiny()
    groups = param_groups(model, weight_decay=0.01)
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    decay, no_decay = (set(g["param_names"]) for g in groups)
    assert decay == {"emb.weight", "lin.weight"}
    assert no_decay == {"norm.weight", "norm.bias", "rms.weight", "lin.bias", "head.bias", "scale"}
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))  # the tied embedding is not listed twice
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert set(ids) == trainable  # frozen parameters are left out, nothing else is


def test_build_optimizer_uses_config() -> None:
    cfg = TrainConfig(lr=3e-4, weight_decay=0.1, adam_beta1=0.8, adam_beta2=0.95, adam_eps=1e-8)
    opt = build_optimizer(Tiny(), cfg)
    assert isinstance(opt, torch.optim.AdamW)
    for g in opt.param_groups:
        assert g["lr"] == 3e-4 and g["betas"] == (0.8, 0.95) and g["eps"] == 1e-8
        assert g["fused"] is True  # plain CPU parameters take the fused kernel
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]


def test_the_fused_step_follows_torchs_reference_adamw() -> None:
    """Five steps of build_optimizer's (fused) AdamW against torch's single-tensor AdamW, same groups and
    gradients: the parameters agree to float rounding."""
    cfg = TrainConfig(lr=1e-2, weight_decay=0.1, adam_beta1=0.8, adam_beta2=0.95, adam_eps=1e-6)
    torch.manual_seed(0)
    ours, ref = Tiny(), Tiny()
    ref.load_state_dict(ours.state_dict())
    start = {n: t.clone() for n, t in ours.state_dict().items()}
    opt = build_optimizer(ours, cfg)
    assert all(g["fused"] for g in opt.param_groups)
    ref_groups = [{k: v for k, v in g.items() if k == "params" or k == "weight_decay"} for g in param_groups(ref, 0.1)]
    ref_opt = torch.optim.AdamW(ref_groups, lr=1e-2, betas=(0.8, 0.95), eps=1e-6, foreach=False, fused=False)
    for step in range(5):
        grads = {
            n: torch.randn_like(p, generator=torch.Generator().manual_seed(step)) for n, p in ours.named_parameters()
        }
        for model, o in ((ours, opt), (ref, ref_opt)):
            for n, p in model.named_parameters():
                p.grad = grads[n].clone() if p.requires_grad else None
            o.step()
    moved = False
    for (n, a), b in zip(ours.state_dict().items(), ref.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=n)
        moved |= not torch.equal(a, start[n])
    assert moved


def test_parameters_the_fused_kernel_cannot_take_keep_foreach() -> None:
    assert fused_adamw_fits([nn.Parameter(torch.zeros(2))])
    assert not fused_adamw_fits([])
    assert not fused_adamw_fits([nn.Parameter(torch.zeros(2, device="meta"))])
    assert not fused_adamw_fits([nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2, device="meta"))])
    opt = build_optimizer(nn.Linear(2, 2, device="meta"), TrainConfig(lr=1e-3))
    assert all(g["foreach"] and not g.get("fused") for g in opt.param_groups)


def _lrs(cfg: TrainConfig, total: int) -> list[float]:
    p = nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([p], lr=cfg.lr)
    sched = build_scheduler(opt, cfg, total)
    lrs = []
    for _ in range(total + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_linear_schedule_values() -> None:
    lrs = _lrs(TrainConfig(lr=1.0, warmup_steps=10, schedule="linear"), total=100)
    # warmup s/10, then (100 - s)/90
    expected = {0: 0.0, 5: 0.5, 10: 1.0, 55: 0.5, 91: 1 / 10, 100: 0.0}
    for step, value in expected.items():
        assert lrs[step] == pytest.approx(value), step


def test_warmup_ratio_and_cosine() -> None:
    lrs = _lrs(TrainConfig(lr=2.0, warmup_steps=0, warmup_ratio=0.2, schedule="cosine"), total=50)
    # warmup = ceil(0.2 * 50) = 10; cosine over the remaining 40 steps
    assert lrs[5] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(2.0)
    assert lrs[30] == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lrs[40] == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi * 0.75)))
    assert lrs[50] == pytest.approx(0.0, abs=1e-12)


def test_constant_schedule() -> None:
    lrs = _lrs(TrainConfig(lr=0.5, warmup_steps=4, schedule="constant"), total=20)
    assert lrs[:5] == pytest.approx([0.0, 0.125, 0.25, 0.375, 0.5])
    assert lrs[5:] == pytest.approx([0.5] * 16)


def test_warmup_stable_decay_schedule() -> None:
    lrs = _lrs(TrainConfig(lr=1.0, warmup_steps=10, schedule="wsd", decay_ratio=0.25), total=100)
    # warmup s/10; hold 1.0 until step 75; then (100 - s)/25
    expected = {5: 0.5, 10: 1.0, 50: 1.0, 75: 1.0, 80: 0.8, 95: 0.2, 100: 0.0}
    for step, value in expected.items():
        assert lrs[step] == pytest.approx(value), step


def test_bad_schedule_settings() -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ConfigError, match="schedule"):
        build_scheduler(opt, TrainConfig(schedule="exp"), 10)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_steps"):
        build_scheduler(opt, TrainConfig(), 0)
    with pytest.raises(ConfigError, match="decay_ratio"):
        build_scheduler(opt, TrainConfig(schedule="wsd", decay_ratio=0.0), 10)


def test_time_clocked_schedule_follows_the_budget_not_the_steps() -> None:
    """`schedule_clock: time`: warmup and decay are shares of max_minutes, whatever the step count."""
    cfg = TrainConfig(lr=1.0, warmup_ratio=0.1, schedule="linear", schedule_clock="time", max_minutes=5)
    p = nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([p], lr=cfg.lr)
    clock = BudgetClock()
    sched = build_scheduler(opt, cfg, total_steps=1_000_000, clock=clock)
    # warmup to 1.0 over the first 10% of the budget, then linear to 0 over the other 90%
    expected = {0.0: 0.0, 0.05: 0.5, 0.1: 1.0, 0.55: 0.5, 0.91: 0.1, 1.0: 0.0}
    for fraction, value in expected.items():
        clock.fraction = fraction
        opt.step()
        sched.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(value, abs=1e-9), fraction


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schedule_clock": "time"}, "set train.max_minutes"),
        ({"schedule_clock": "time", "max_minutes": 1, "warmup_steps": 5}, "train.warmup_ratio"),
        ({"schedule_clock": "wall"}, "train.schedule_clock='wall' is not allowed"),
    ],
)
def test_time_clock_refuses_what_it_cannot_follow(fields: dict, message: str) -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ConfigError, match=message):
        build_scheduler(opt, TrainConfig(**fields), 10, clock=BudgetClock())


def test_a_time_budget_sets_the_clock_unless_warmup_counts_steps() -> None:
    assert TrainConfig().clock == "steps" and TrainConfig(schedule_clock="time", max_minutes=1).clock == "time"
    assert TrainConfig(max_minutes=8).clock == "time"  # auto: the budget is what ends the run
    assert TrainConfig(max_minutes=8, warmup_steps=10).clock == "steps"  # warmup in steps keeps the step clock
    assert TrainConfig(max_minutes=8, schedule_clock="steps").clock == "steps"


def test_a_time_budget_ends_the_decay_at_its_end_whatever_the_steps() -> None:
    """bert-mini.yaml (2,000 steps, warmup_ratio 0.05) run with train.max_minutes: stopped by the budget at step
    652, the rate has decayed to 0; before, it stopped there at about 70% of its peak."""
    cfg = TrainConfig(lr=1.0, warmup_ratio=0.05, schedule="linear", max_minutes=8, max_steps=2000)
    p = nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([p], lr=cfg.lr)
    clock = BudgetClock()
    sched = build_scheduler(opt, cfg, total_steps=2000, clock=clock)
    for step in range(1, 653):
        clock.fraction = step / 652  # the budget runs out at step 652
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-9)


def test_on_the_clock_a_step_cap_reached_first_ends_the_schedule_too() -> None:
    """On the clock the share done is the budget's or the steps', whichever is larger (linear, no warmup)."""
    cfg = TrainConfig(lr=1.0, warmup_ratio=0.0, schedule="linear", max_minutes=60)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    clock = BudgetClock()
    factor = build_scheduler(opt, cfg, total_steps=100, clock=clock).lr_lambdas[0]
    clock.fraction = 0.3
    assert factor(100) == 0.0  # every step taken: the schedule has ended, whatever the clock
    assert factor(10) == pytest.approx(0.7)  # the budget is further along than the steps
    clock.fraction = 0.05
    assert factor(50) == pytest.approx(0.5)  # the steps are further along than the budget


def test_a_time_cap_on_a_step_schedule_is_said_in_one_line() -> None:
    from bertzoo.engine.optim import clock_note

    note = clock_note(TrainConfig(max_minutes=8, warmup_steps=100, max_steps=2000))
    assert note is not None and "\n" not in note and "max_steps=2000" in note and "max_minutes=8" in note
    assert clock_note(TrainConfig(max_minutes=8)) is None and clock_note(TrainConfig()) is None
