"""What every training-step benchmark reports beside its speeds: the model FLOPs of one step on each side, the
GFLOP/s each side achieves, and its MFU against the machine's matmul peak measured in the same run at the same
precision; and the ceiling a plain GEMM of the step's largest shape reaches (the goal: bertzoo's MFU within 15% of
it, and never slower than the reference).

FLOPs are counted, not estimated: one step of each side runs under torch's `FlopCounterMode` (matmuls and
attention, forward and backward; what each side really computes, so a side that skips padding rows or unread
positions counts less). Fused attention (scaled_dot_product_attention) counts as torch counts its GPU kernels, on
the CPU too, whose kernel torch's counter does not know: its backward includes recomputing the scores, which an
attention written as plain products (einsum) does not. The ceiling is the rate of one GEMM of the step's largest
shape (tokens x width x feed-forward width) as a share of the peak, the best rate of a large square matmul or of
that GEMM, whichever is faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from timing import autocast, sync
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

# A plain GEMM this close to the peak is as good as the step's products can be; bertzoo's step counts as reaching
# it when its MFU is at least this share of the GEMM's.
WITHIN = 0.85


def _cpu_attention(query: tuple[int, ...], key: tuple[int, ...], value: tuple[int, ...], *_, **__) -> int:
    """FLOPs of the CPU's fused attention kernel: those of the GPU kernels, from the same shapes."""
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward(
    grad_out: tuple[int, ...], query: tuple[int, ...], key: tuple[int, ...], value: tuple[int, ...], *_, **__
) -> int:
    """FLOPs of the CPU's fused attention backward: those of the GPU kernels' backward."""
    return sdpa_backward_flop_count(grad_out, query, key, value)


# torch's counter knows the GPU's fused attention kernels but not the CPU's, where scaled_dot_product_attention
# would otherwise count nothing at all (while an einsum attention counts its products): counted alike here.
CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
}


def counted_flops(step: Callable[[], object], device: torch.device, amp: torch.dtype | None) -> float:
    """FLOPs of one call of `step` (forward, backward and whatever else it runs), counted by torch."""
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter, autocast(device, amp):
        step()
    sync(device)
    return float(counter.get_total_flops())


def gemm_rate(m: int, k: int, n: int, dtype: torch.dtype, device: torch.device, seconds: float = 0.5) -> float:
    """Best FLOP/s of an (m, k) @ (k, n) product at `dtype` on `device`, over about `seconds` of repetitions."""
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    best, spent = 0.0, 0.0
    while spent < seconds:
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        took = time.perf_counter() - t
        spent += took
        best = max(best, 2 * m * k * n / took)
    return best


def utilisation(
    steps: dict[str, Callable[[], object]],
    seconds_per_step: dict[str, float],
    *,
    largest_gemm: tuple[int, int, int],
    device: torch.device,
    amp: torch.dtype | None,
) -> dict[str, float]:
    """Print and return each side's FLOPs per step, GFLOP/s and MFU, the peak, the step-shape GEMM's MFU, the
    ratio of speeds (bertzoo over the reference, the second entry) and whether bertzoo meets both goals."""
    flops = {name: counted_flops(fn, device, amp) for name, fn in steps.items()}
    return utilisation_from(flops, seconds_per_step, largest_gemm=largest_gemm, device=device, amp=amp)


def utilisation_from(
    flops: dict[str, float],
    seconds_per_step: dict[str, float],
    *,
    largest_gemm: tuple[int, int, int],
    device: torch.device,
    amp: torch.dtype | None,
) -> dict[str, float]:
    """`utilisation` of FLOPs already counted (`counted_flops` of a step the benchmark runs anyway, its warm-up:
    on a small CPU one more step of each side would add seconds)."""
    dtype = amp or torch.float32
    size = 8192 if device.type == "cuda" else 2048
    shaped = gemm_rate(*largest_gemm, dtype, device)
    # On a CPU the step's narrower GEMM can outrun the square (bf16 on AMX: about 1.6 against 0.9 TFLOP/s on one
    # core): the peak is the faster of the two, so that no MFU reads above 100%.
    peak = max(gemm_rate(size, size, size, dtype, device), shaped)
    ceiling = shaped / peak
    out: dict[str, float] = {"peak_gflops": round(peak / 1e9, 1), "largest_gemm_mfu": round(ceiling, 4)}
    for name, f in flops.items():
        rate = f / seconds_per_step[name]
        out[f"{name}_gflop_per_step"] = round(f / 1e9, 3)
        out[f"{name}_gflops"] = round(rate / 1e9, 2)
        out[f"{name}_mfu"] = round(rate / peak, 4)
        print(f"{name:>14}: {f / 1e9:,.2f} GFLOP/step, {rate / 1e9:,.1f} GFLOP/s, MFU {rate / peak:.1%}")
    ours, reference = list(flops)
    ratio = seconds_per_step[reference] / seconds_per_step[ours]
    out["ratio"] = round(ratio, 3)
    out["goal_met"] = bool(ratio >= 1.0 and out[f"{ours}_mfu"] >= WITHIN * ceiling)
    m, k, n = largest_gemm
    print(
        f"peak matmul {peak / 1e9:,.0f} GFLOP/s; a plain ({m} x {k}) @ ({k} x {n}) GEMM, the step's largest shape, "
        f"reaches MFU {ceiling:.1%}; ratio {ratio:.2f}x; goal (ratio >= 1, MFU >= {WITHIN:.0%} of the GEMM's) "
        f"{'met' if out['goal_met'] else 'not met'}"
    )
    return out
