"""A runner in bf16 keeps its linear layers' weights in bf16 (autocast would cast them on every call): its
/predict and /embed outputs equal, bit for bit, the same model's under plain bf16 autocast with fp32 weights, and a
causal LM, which /generate decodes in fp32, keeps fp32 weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder, load_finetuned
from bertzoo.serve.runners import load_runner
from bertzoo.train.embed import encode
from bertzoo.train.evaluate import predict_inputs

from helpers.attention import save_tiny_model

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:precision bf16 on a CPU")]

TEXTS = ["the apple and a fig", "a blue boat on the train", "pink", "it is red and it is gray", "of the bus"]


def dtypes(model: nn.Module, kind: type) -> set[torch.dtype]:
    return {p.dtype for m in model.modules() if type(m) is kind for p in m.parameters()}


def test_bf16_runner_stores_bf16_linears_and_answers_exactly_as_autocast(classifier):
    runner = load_runner(classifier, device="cpu", precision="bf16")
    assert dtypes(runner.model, nn.Linear) == {torch.bfloat16}
    assert dtypes(runner.model, nn.LayerNorm) == {torch.float32}  # autocast reads norms in fp32
    inputs = [{"text": t} for t in TEXTS]
    got = runner.run_predict([dict(x) for x in inputs])

    task, model, _ = load_finetuned(classifier)
    model.eval()
    assert dtypes(model, nn.Linear) == {torch.float32}
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = task.predict(model, predict_inputs(task, [dict(x) for x in inputs]))
    assert [p["label"] for p in got] == [p["label"] for p in want]
    assert [p["probabilities"] for p in got] == [p["probabilities"] for p in want]  # exactly

    vectors = runner.run_embed(TEXTS, None)
    reference = encode(load_encoder(classifier), Tokenizer.load(classifier), TEXTS, pooling="mean", precision="bf16")
    np.testing.assert_array_equal(vectors, reference)
    fp32 = encode(load_encoder(classifier), Tokenizer.load(classifier), TEXTS, pooling="mean", precision="fp32")
    assert not np.array_equal(vectors, fp32)  # the comparison above was in bf16 indeed


def test_fp32_and_causal_runners_keep_fp32_weights(classifier, tmp_path):
    assert dtypes(load_runner(classifier, device="cpu", precision="fp32").model, nn.Linear) == {torch.float32}
    runner = load_runner(save_tiny_model(tmp_path / "gpt", causal=True), device="cpu", precision="bf16")
    assert runner.kind == "causal-lm" and dtypes(runner.lm, nn.Linear) == {torch.float32}
    assert len(runner.run_generate(["the cat sat"], {"max_new_tokens": 3})) == 1
