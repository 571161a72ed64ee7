"""int8 inference (`bertzoo.interop.int8`): dynamic quantization replaces every linear layer and stays close to
fp32, `predict`, `evaluate` and `embed --int8` run it from the command line, and `export --onnx --int8` writes a
smaller ONNX graph that onnxruntime runs close to PyTorch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from bertzoo.cli import main
from bertzoo.config import ModelConfig
from bertzoo.interop.int8 import quantize_int8, quantized_linears
from bertzoo.models.encoder import Encoder

from helpers.finetune import tiny_finetune_config, write_task_files

pytestmark = pytest.mark.usefixtures("one_thread")


def encoder(seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=200, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128)
    return Encoder(config).eval()


def test_every_linear_layer_is_quantized_and_outputs_stay_close():
    fp32 = encoder()
    linears = sum(isinstance(m, nn.Linear) for m in fp32.modules())
    int8 = quantize_int8(fp32)
    assert quantized_linears(int8) == linears > 0
    assert not any(type(m) is nn.Linear for m in int8.modules())  # none left in fp32
    assert any(isinstance(m, nn.Linear) for m in fp32.modules())  # the original is untouched (a copy)
    ids = torch.randint(0, 200, (4, 24), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    with torch.no_grad():
        want, got = fp32(ids, mask).last_hidden_state, int8(ids, mask).last_hidden_state
    real = mask.bool()
    cosine = torch.nn.functional.cosine_similarity(got[real], want[real], dim=-1)
    assert cosine.min() > 0.99
    assert (got[real] - want[real]).abs().max() > 1e-6  # it did change the arithmetic


def test_predict_and_embed_take_int8(tmp_path, capsys):
    paths = write_task_files(tmp_path / "data")
    cfg = tiny_finetune_config(paths, tmp_path / "run", epochs=3)
    from bertzoo.train.finetune import finetune

    finetune(cfg)
    model_dir = tmp_path / "run" / "model"
    texts = ["the apple and a fig", "a blue boat on the train", "pink", "it is red and it is gray"]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    outs = {}
    for name, extra in (("fp32", []), ("int8", ["--int8"])):
        assert main(["predict", str(model_dir), "-i", str(inp), "-o", str(tmp_path / f"{name}.jsonl"), *extra]) == 0
        outs[name] = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert main(["embed", str(model_dir), "-i", str(inp), "-o", str(tmp_path / f"{name}.npy"), *extra]) == 0
    assert [r["label"] for r in outs["int8"]] == [r["label"] for r in outs["fp32"]]
    for a, b in zip(outs["int8"], outs["fp32"], strict=True):
        assert max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"]) < 0.05
    for name, extra in (("fp32", []), ("int8", ["--int8"])):
        assert main(["evaluate", str(model_dir), "--split", "test", "-o", str(tmp_path / f"{name}.json"), *extra]) == 0
    scores = [json.loads((tmp_path / f"{n}.json").read_text())["metrics"]["accuracy"] for n in ("fp32", "int8")]
    assert abs(scores[0] - scores[1]) <= 0.1  # the tiny test split: at most one example in ten flips
    a, b = np.load(tmp_path / "int8.npy"), np.load(tmp_path / "fp32.npy")
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() > 0.99


def test_int8_on_a_gpu_is_one_clear_error():
    from bertzoo.errors import BertzooError

    model = encoder().to("meta")
    with pytest.raises(BertzooError, match="int8 inference runs on the CPU"):
        quantize_int8(model)


def test_export_onnx_int8_is_smaller_and_close(tmp_path, capsys):
    import onnxruntime as ort

    enc = encoder(seed=2)
    enc.save_pretrained(str(tmp_path / "model"))
    assert main(["export", "--onnx", "--int8", str(tmp_path / "model"), str(tmp_path / "m8.onnx")]) == 0
    assert "cosine with PyTorch fp32" in capsys.readouterr().out
    assert main(["export", "--onnx", str(tmp_path / "model"), str(tmp_path / "m.onnx")]) == 0
    assert (tmp_path / "m8.onnx").stat().st_size < 0.6 * (tmp_path / "m.onnx").stat().st_size
    session = ort.InferenceSession(str(tmp_path / "m8.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 200, (3, 31), generator=torch.Generator().manual_seed(3))
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    hidden = session.run(None, feeds)[0]
    with torch.no_grad():
        want = enc(ids).last_hidden_state.numpy()
    cosine = (hidden * want).sum(-1) / (np.linalg.norm(hidden, axis=-1) * np.linalg.norm(want, axis=-1))
    assert cosine.min() > 0.98
    assert not list(tmp_path.glob(".*.tmp"))
