"""Export an encoder to ONNX (torch's dynamo exporter) and verify it with onnxruntime."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertzoo.errors import BertzooError
from bertzoo.io import replace_atomically

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class _EncoderForExport(nn.Module):
    """Plain tensors in and out: ONNX graphs have no dataclasses."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.encoder(input_ids, attention_mask, token_type_ids)
        pooled = out.pooler_output if out.pooler_output is not None else out.last_hidden_state[:, 0]
        return out.last_hidden_state, pooled


def sample_inputs(vocab_size: int, batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[0, seq // 2 :] = 0  # one padded row, so the mask path is exercised
    types = torch.zeros_like(ids)
    types[:, seq // 2 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def export_onnx(encoder: nn.Module, path: str | Path, *, verify: bool = True, atol: float = 1e-4) -> dict[str, Any]:
    """Write `encoder` as ONNX with dynamic batch and sequence axes; outputs `last_hidden_state` and
    `pooler_output`. With `verify`, run onnxruntime on inputs of another shape than the traced
    ones and compare with PyTorch (max abs difference must stay under `atol`)."""
    try:
        import onnx  # noqa: F401  (the exporter needs it; fail with our message, not an ImportError deep inside)
        import onnxscript  # noqa: F401
    except ImportError:
        raise BertzooError("ONNX export needs onnx and onnxscript: pip install 'bertzoo[onnx]'") from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    wrapped = _EncoderForExport(encoder).eval()
    vocab = encoder.config.vocab_size
    example = sample_inputs(vocab, 2, 16, seed=0)
    dims = {
        name: {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=encoder.config.max_position)}
        for name in INPUTS
    }
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            wrapped,
            tuple(example[n] for n in INPUTS),
            input_names=list(INPUTS),
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_shapes=dims,
            dynamo=True,
            verbose=False,
        )
        replace_atomically(program.save, path)  # an interrupted export never leaves a partial .onnx
    result: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size, "verified": False}
    if verify:
        result.update(verify_onnx(wrapped, path, vocab, atol=atol))
    return result


def verify_onnx(wrapped: nn.Module, path: Path, vocab_size: int, atol: float = 1e-4) -> dict[str, Any]:
    """Compare onnxruntime with PyTorch on a batch/sequence shape different from the traced one."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"verified": False, "verify_skipped": "onnxruntime is not installed"}
    inputs = sample_inputs(vocab_size, 3, 23, seed=1)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {k: v.numpy() for k, v in inputs.items()})
    with torch.no_grad():
        want = [t.numpy() for t in wrapped(*(inputs[n] for n in INPUTS))]
    valid = inputs["attention_mask"].numpy().astype(bool)
    diff = max(float(np.abs(got[0][valid] - want[0][valid]).max()), float(np.abs(got[1] - want[1]).max()))
    if diff > atol:
        raise BertzooError(f"ONNX export of {path} differs from PyTorch by {diff:.2e} (> {atol}); please report this")
    return {"verified": True, "max_abs_diff": diff}
