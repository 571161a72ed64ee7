"""ONNX export: dynamic shapes, verified against PyTorch with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertzoo.config import ModelConfig
from bertzoo.interop.onnx import export_onnx
from bertzoo.models.encoder import Encoder

pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")


def test_export_matches_pytorch_on_new_shapes(tmp_path):
    torch.manual_seed(0)
    enc = Encoder(ModelConfig(vocab_size=120, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)).eval()
    info = export_onnx(enc, tmp_path / "enc.onnx")
    assert info["verified"] and info["max_abs_diff"] < 1e-4
    # Independently of the built-in check: another batch size and length than both traced and verified.
    session = ort.InferenceSession(str(tmp_path / "enc.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 120, (5, 40))
    mask = torch.ones_like(ids)
    mask[2, 30:] = 0
    types = torch.zeros_like(ids)
    hidden, pooled = session.run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
    )
    with torch.no_grad():
        ref = enc(ids, mask, types)
    valid = mask.numpy().astype(bool)
    assert np.abs(hidden[valid] - ref.last_hidden_state.numpy()[valid]).max() < 1e-4
    assert np.abs(pooled - ref.pooler_output.numpy()).max() < 1e-4
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind


def test_cli_export(tmp_path, capsys):
    from bertzoo.cli import main

    enc = Encoder(ModelConfig(vocab_size=90, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    enc.save_pretrained(str(tmp_path / "model"))
    assert main(["export", "--onnx", str(tmp_path / "model"), str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "verified with onnxruntime" in out and (tmp_path / "m.onnx").stat().st_size > 0
