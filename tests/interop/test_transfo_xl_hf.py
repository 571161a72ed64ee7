"""Transformer-XL against transformers' TransfoXLLMHeadModel, both ways, at 1e-5.

transformers 5.x no longer ships Transformer-XL; its last class is in the 4.57 line, which cannot share an
environment with 5.x. The reference therefore runs in a separate, optional environment (`make tfxl-env`
builds `.venv-tfxl`; `BERTZOO_TFXL_PYTHON` points elsewhere) as a subprocess, exchanging safetensors files.
Without that environment the two parity tests skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertzoo.errors import CheckpointError
from bertzoo.models.transfo_xl import TransfoXL
from bertzoo.variants.transfo_xl import (
    config_from_hf,
    config_to_hf,
    model_config,
    state_dict_from_hf,
    state_dict_to_hf,
)

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("BERTZOO_TFXL_PYTHON", str(ROOT / ".venv-tfxl" / "bin" / "python"))
needs_reference = pytest.mark.skipif(
    not Path(PYTHON).is_file(), reason="no transformers 4.57 environment (make tfxl-env, or BERTZOO_TFXL_PYTHON)"
)

# Runs in the 4.57 environment: build (or load) a TransfoXLLMHeadModel, run two segments carrying memory,
# write hidden states and log-probabilities of each segment (and the weights, when it made them).
REFERENCE = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from transformers import TransfoXLConfig, TransfoXLLMHeadModel
# 4.57's deprecated Transformer-XL calls `tensor.type_as(dtype=...)`, which torch rejects (the class is no
# longer maintained upstream); read it as `.to(dtype)`, the evident intent, and change nothing else.
_type_as = torch.Tensor.type_as
torch.Tensor.type_as = lambda self, other=None, dtype=None: self.to(dtype) if other is None else _type_as(self, other)
d = Path(sys.argv[1])
torch.manual_seed(0)
model = TransfoXLLMHeadModel(TransfoXLConfig(**json.loads((d / "config.json").read_text()))).eval()
if (d / "weights.safetensors").is_file():
    missing, unexpected = model.load_state_dict(load_file(d / "weights.safetensors"), strict=False)
    assert not unexpected and set(missing) <= {"transformer.pos_emb.inv_freq"}, (missing, unexpected)
    model.tie_weights()
else:
    for p in model.parameters():  # HF leaves r_w_bias / r_r_bias at its init; make every tensor matter
        torch.nn.init.normal_(p, std=0.2) if p.dim() > 1 or p.numel() > 1 else None
    save_file({k: v.clone().contiguous() for k, v in model.state_dict().items()}, d / "hf_weights.safetensors")
ids = load_file(d / "inputs.safetensors")["input_ids"]
out, mems = {}, None
with torch.no_grad():
    for s, seg in enumerate(ids.split(ids.size(1) // 2, dim=1)):
        base = model.transformer(input_ids=seg, mems=mems)
        lm = model(input_ids=seg, mems=mems)
        out[f"hidden{s}"] = base.last_hidden_state
        out[f"logprobs{s}"] = lm.prediction_scores
        mems = base.mems
save_file({k: v.contiguous() for k, v in out.items()}, d / "outputs.safetensors")
"""


def run_reference(directory: Path) -> dict[str, torch.Tensor]:
    script = directory / "reference.py"
    script.write_text(REFERENCE)
    done = subprocess.run([PYTHON, str(script), str(directory)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_file(directory / "outputs.safetensors")


def ours_on(model: TransfoXL, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    # transformers (like the original TensorFlow code) starts from mem_len zero vectors of memory, which the
    # first segment attends to; ours starts from none (the original PyTorch code), so give it those zeros.
    c = model.config
    out, mems = {}, [torch.zeros(ids.size(0), c.mem_len, c.hidden_size) for _ in range(c.num_layers)]
    with torch.no_grad():
        for s, seg in enumerate(ids.split(ids.size(1) // 2, dim=1)):
            hidden, logits, mems = model(seg, mems)
            out[f"hidden{s}"] = hidden
            out[f"logprobs{s}"] = logits.log_softmax(-1)
    return out


CONFIG = model_config(
    {
        "vocab_size": 97,
        "num_layers": 2,
        "hidden_size": 32,
        "num_heads": 2,
        "attention_head_size": 16,
        "intermediate_size": 64,
        "mem_len": 6,
        "clamp_len": 5,
        "dropout": 0.0,
        "attention_dropout": 0.0,
    }
)


def inputs(directory: Path) -> torch.Tensor:
    ids = torch.randint(0, CONFIG.vocab_size, (2, 16), generator=torch.Generator().manual_seed(3))
    save_file({"input_ids": ids}, directory / "inputs.safetensors")
    return ids


def assert_close(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> None:
    assert set(ours) == set(ref)
    for key in ref:
        torch.testing.assert_close(ours[key], ref[key], atol=1e-5, rtol=1e-5, msg=key)


@needs_reference
def test_hf_model_imports_exactly(tmp_path):
    """A random TransfoXLLMHeadModel made by transformers 4.57 -> our TransfoXL: same outputs, two segments with
    memory (mem_len 6 < segment 8: memory is trimmed) and clamped distances."""
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(CONFIG)))
    ids = inputs(tmp_path)
    ref = run_reference(tmp_path)
    hf_config = json.loads((tmp_path / "config.json").read_text())
    model = TransfoXL(config_from_hf(hf_config)).eval()
    model.load_state_dict(state_dict_from_hf(load_file(tmp_path / "hf_weights.safetensors"), model.config))
    assert_close(ours_on(model, ids), ref)
    # The same weights as a bare TransfoXLModel (no "transformer." prefix, no LM head): same hidden states.
    hf = load_file(tmp_path / "hf_weights.safetensors")
    base = {k.removeprefix("transformer."): v for k, v in hf.items() if k.startswith("transformer.")}
    bare = TransfoXL(model.config).eval()
    bare.load_state_dict(state_dict_from_hf(base, model.config))
    out = ours_on(bare, ids)
    for s in (0, 1):
        torch.testing.assert_close(out[f"hidden{s}"], ref[f"hidden{s}"], atol=1e-5, rtol=1e-5)
    # The memory matters: the second segment alone, without it, is different.
    alone = model(ids[:, 8:]).logits.log_softmax(-1)
    assert (alone - ref["logprobs1"]).abs().max() > 1e-3


@needs_reference
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_our_model_exports_exactly(tmp_path, norm):
    """Our random TransfoXL -> TransfoXLLMHeadModel (4.57) under `config_to_hf`: same outputs, post-norm and
    pre-norm (transformers' pre_lnorm: the memory normalised with the segment, no norm after the stack)."""
    torch.manual_seed(1)
    config = dataclasses.replace(CONFIG, norm=norm)
    model = TransfoXL(config).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    assert config_from_hf(config_to_hf(config)) == config
    save_file(state_dict_to_hf(model), tmp_path / "weights.safetensors")
    ids = inputs(tmp_path)
    assert_close(ours_on(model, ids), run_reference(tmp_path))


def test_shared_biases_of_untie_r_false_go_into_every_layer():
    torch.manual_seed(2)
    hf = state_dict_to_hf(TransfoXL(CONFIG))
    shared_u, shared_v = torch.randn(2, 16), torch.randn(2, 16)
    for i in range(CONFIG.num_layers):
        del hf[f"transformer.layers.{i}.dec_attn.r_w_bias"], hf[f"transformer.layers.{i}.dec_attn.r_r_bias"]
    hf["transformer.r_w_bias"], hf["transformer.r_r_bias"] = shared_u, shared_v
    ours = state_dict_from_hf(hf, CONFIG)
    for i in range(CONFIG.num_layers):
        assert torch.equal(ours[f"layers.{i}.attn.u"], shared_u) and torch.equal(ours[f"layers.{i}.attn.v"], shared_v)


def test_unsupported_hf_layouts_are_refused():
    good = config_to_hf(CONFIG)
    for key, value in [("cutoffs", [20, 40]), ("div_val", 4), ("same_length", True), ("d_embed", 16)]:
        with pytest.raises(CheckpointError, match=key):
            config_from_hf({**good, key: value})
    with pytest.raises(CheckpointError, match="no weight"):
        state_dict_from_hf({}, CONFIG)


def _same_shaped_swaps(shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, str]]:
    keys = sorted(shapes)
    return [(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :] if shapes[a] == shapes[b]]


@needs_reference
def test_every_swap_of_same_shaped_layer_keys_breaks_parity(tmp_path, monkeypatch):
    """The layer key map is pinned: exchanging the Hugging Face names of any two same-shaped weights (the
    attention's r and out projections, the two relative biases, the norms' scales and shifts and the
    feed-forward's output bias) makes the imported model disagree with transformers' own."""
    from bertzoo.variants import transfo_xl

    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(CONFIG)))
    ids = inputs(tmp_path)
    ref = run_reference(tmp_path)
    hf = load_file(tmp_path / "hf_weights.safetensors")
    shapes = {k: tuple(v.shape) for k, v in TransfoXL(CONFIG).state_dict().items() if k.startswith("layers.0.")}
    shapes = {k.removeprefix("layers.0."): s for k, s in shapes.items()}
    original = dict(transfo_xl._LAYER_KEYS)
    pairs = _same_shaped_swaps({k: shapes[k] for k in original})
    assert len(pairs) == 12  # {r, out}, {u, v} and the ten pairs among the five 32-wide vectors
    for a, b in pairs:
        mutated = {**original, a: original[b], b: original[a]}
        monkeypatch.setattr(transfo_xl, "_LAYER_KEYS", mutated)
        model = TransfoXL(CONFIG).eval()
        model.load_state_dict(state_dict_from_hf(hf, CONFIG))
        ours = ours_on(model, ids)
        worst = max((ours[k] - ref[k]).abs().max().item() for k in ref)
        assert worst > 1e-3, f"swapping {a} <-> {b} went unnoticed"
    monkeypatch.setattr(transfo_xl, "_LAYER_KEYS", original)
    model = TransfoXL(CONFIG).eval()
    model.load_state_dict(state_dict_from_hf(hf, CONFIG))
    assert_close(ours_on(model, ids), ref)
