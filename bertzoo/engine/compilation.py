"""`train.compile`: the training model under torch.compile, falling back to eager only when
compilation itself fails.

torch.compile compiles lazily, at the first forward, so whether it works on this platform (a C++
compiler for CPU inductor, Triton on GPU, operators it can lower) is only known then. A failure there
is not necessarily compilation's fault, though: the model or the batch may simply be wrong (a shape
mismatch, an out-of-vocabulary id), and that error must reach the user as itself, not as "compile
failed", and must not be retried. So at the first step:

- an error from outside the compiler stack is raised unchanged;
- an error from the compiler stack (Dynamo also wraps real errors it meets while tracing) gets one
  eager run of the same forward: if eager fails too, eager's error is the real one and is raised;
  if eager works, compilation was the problem, and training warns and continues eagerly.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from bertzoo.batch import Batch

# Where torch.compile's own exceptions live: Dynamo (tracing; BackendCompilerFailed, TorchRuntimeError),
# AOTAutograd, Inductor (lowering, C++/Triton codegen), fake tensors and symbolic shapes, Triton.
_COMPILER_MODULES = (
    "torch._dynamo",
    "torch._functorch",
    "torch._inductor",
    "torch._subclasses",
    "torch.fx.experimental.symbolic_shapes",
    "triton",
)


def is_compile_error(exc: BaseException) -> bool:
    """Whether `exc` was raised by torch.compile's machinery rather than by the model's own code."""
    module = type(exc).__module__ or ""
    return any(module == m or module.startswith(m + ".") for m in _COMPILER_MODULES)


class CompiledModel:
    """Calls the training model: `torch.compile(eager)` when `enabled`, `eager` itself otherwise or
    after compilation failed at the first step (see the module docstring)."""

    def __init__(self, eager: nn.Module, enabled: bool) -> None:
        self.eager = eager
        self.model: nn.Module = eager
        self.unverified = False  # compiled, but no step has run through it yet
        if enabled:
            try:
                self.model = torch.compile(eager)
                self.unverified = True
            except Exception as exc:  # compile support varies by platform; eager always works
                warnings.warn(f"torch.compile failed ({exc}); training without it", stacklevel=2)

    def __call__(self, batch: Batch) -> Any:
        """The model's output for `batch` (run it under the caller's autocast)."""
        if not self.unverified:
            return self.model(batch)
        try:
            return self.model(batch)
        except Exception as exc:
            if not is_compile_error(exc):
                raise  # the model or the data is wrong; compiling has nothing to do with it
            try:
                out = self.eager(batch)
            except Exception as eager_exc:
                raise eager_exc from None  # eager fails as well: this is the real error, not compilation's
            warnings.warn(
                f"torch.compile failed at the first step ({type(exc).__name__}: {exc}); training without it",
                stacklevel=2,
            )
            self.model = self.eager
            self.unverified = False
            return out

    def verified(self) -> None:
        """The first step went through: later errors are the model's, never compilation's."""
        self.unverified = False
