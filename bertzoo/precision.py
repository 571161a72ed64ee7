"""Which floating-point precision to compute in, chosen from the hardware.

bf16 autocast halves memory traffic and, on hardware with native bf16 units (CUDA since Ampere,
Intel CPUs with AMX or AVX-512 BF16), runs matmuls several times faster. On a CPU without them
(e.g. an AVX2-only AMD EPYC) PyTorch emulates bf16 and a matmul runs ~50-100x *slower* than fp32
(measured 1.3 vs 65 GFLOP/s on such a machine). So `auto` asks the hardware, and confirms with a
short matmul probe on CPUs, before it picks bf16.
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

Precision = Literal["fp32", "bf16", "fp16"]
PRECISION_CHOICES = ("auto", "fp32", "bf16", "fp16")

# CPU flags (Linux /proc/cpuinfo names) that mean bf16 matmuls run in hardware.
_NATIVE_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


@dataclass(frozen=True)
class Bf16Probe:
    """What a short timed matmul said about bf16 on this CPU."""

    native_flags: bool  # the CPU advertises AMX or AVX-512 BF16 (False when unknown)
    fp32_gflops: float
    bf16_gflops: float

    @property
    def speedup(self) -> float:
        """bf16 throughput over fp32 throughput (> 1: bf16 is faster)."""
        return self.bf16_gflops / max(self.fp32_gflops, 1e-12)


def _cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo, or None where that file does not exist."""
    path = Path("/proc/cpuinfo")
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def _matmul_gflops(dtype: torch.dtype, n: int = 256, budget_s: float = 0.05) -> float:
    """Best-of-a-few rate of an n x n x n matmul in `dtype` on the CPU (GFLOP/s)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    torch.mm(a, b)  # warm-up: first call allocates and picks kernels
    best = float("inf")
    start = time.perf_counter()
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
        if time.perf_counter() - start > budget_s:
            break
    return 2 * n**3 / max(best, 1e-9) / 1e9


@functools.lru_cache(maxsize=1)
def probe_cpu_bf16(rounds: int = 3) -> Bf16Probe:
    """Time a small fp32 and bf16 matmul once per process (about 0.3 s; cached): on one thread, the two
    dtypes taking turns, the best of `rounds` each. Native and emulated bf16 differ per core, and a
    multi-threaded probe on a busy machine measured noise (fp32 at 2 GFLOP/s while another job held the
    cores, then 0.02x for bf16 on the next try), so `auto` picked fp32 for one run and bf16 for the next."""
    flags = _cpu_flags()
    native = bool(flags and flags & _NATIVE_BF16_FLAGS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fp32 = bf16 = 0.0
        for _ in range(rounds):
            fp32 = max(fp32, _matmul_gflops(torch.float32))
            bf16 = max(bf16, _matmul_gflops(torch.bfloat16))
    finally:
        torch.set_num_threads(threads)
    return Bf16Probe(native, fp32, bf16)


def cpu_capability() -> str:
    """PyTorch's name for the CPU's vector ISA (`AVX2`, `AVX512`, ...), recorded beside figures."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # older builds or exotic platforms
        return "unknown"


def bf16_is_fast(device: torch.device) -> bool:
    """True where bf16 autocast runs natively and faster than fp32 on `device`."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    flags = _cpu_flags()
    if flags is not None and not flags & _NATIVE_BF16_FLAGS:
        return False  # no hardware bf16: emulated, far slower; no need to time it
    probe = probe_cpu_bf16()
    return probe.speedup > 1.0


_warned: set[str] = set()


def resolve_precision(spec: str, device: torch.device) -> Precision:
    """`auto` -> bf16 where the device runs it natively and faster, else fp32; explicit values pass.

    An explicit `bf16` on a CPU without native support still runs, with one warning per process that
    gives the measured slowdown.
    """
    if spec not in PRECISION_CHOICES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {spec!r}")
    if spec == "auto":
        return "bf16" if bf16_is_fast(device) else "fp32"
    if spec == "bf16" and device.type == "cpu" and not bf16_is_fast(device) and "bf16-cpu" not in _warned:
        _warned.add("bf16-cpu")
        probe = probe_cpu_bf16()
        warnings.warn(
            f"precision bf16 on a CPU without native bf16 ({cpu_capability()}): a matmul measured "
            f"{probe.bf16_gflops:.1f} GFLOP/s against {probe.fp32_gflops:.1f} in fp32 "
            f"({1 / max(probe.speedup, 1e-9):.0f}x slower); use precision auto or fp32",
            stacklevel=2,
        )
    return spec  # type: ignore[return-value]


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a resolved precision (None: no autocast)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast to a resolved `precision`'s dtype on `device`, or nothing for fp32."""
    dtype = autocast_dtype(precision)
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def inference_weights(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """`model` (in place) with its linear layers' weights and biases stored in `precision`'s autocast dtype, for
    inference under that autocast only (`bertzoo serve`, `bertzoo embed`). Autocast casts them to these very values
    on every call, so the outputs are bit-identical, without the per-call copies: MiniLM on 8 sentences ran 1.4x
    faster on an AMX CPU. Norms and embeddings stay fp32, as autocast reads them. fp32: unchanged."""
    dtype = autocast_dtype(precision)
    if dtype is not None:
        for module in model.modules():
            if type(module) is torch.nn.Linear:  # not quantized or LoRA-wrapped linears
                module.to(dtype)
    return model
