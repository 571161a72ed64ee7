"""`bertzoo serve` over real HTTP on a loopback port: /predict gives `bertzoo predict`'s output, /embed the vectors
`encode` gives, /generate what `bertzoo generate` writes; concurrent requests are batched together; every bad
request gets a JSON 4xx and the server keeps serving; SIGTERM lets the request in flight finish."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import numpy as np
import pytest

from bertzoo.cli import main
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder
from bertzoo.train.embed import encode

from helpers.attention import save_tiny_model
from helpers.serving import serving, start

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["the apple and a fig", "a blue boat on the train", "pink", "it is red and it is gray", "of the bus"]


@pytest.fixture(scope="module")
def server(classifier, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "serve.log"
    with serving(classifier, "--precision", "fp32", "--max-wait-ms", "100", "--max-texts", "8",
                 "--max-body-bytes", "2000", log=log) as served:  # fmt: skip
        yield served


def test_predict_gives_what_bertzoo_predict_writes(server, classifier, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    assert main(["predict", str(classifier), "-i", str(inp), "-o", str(tmp_path / "out.jsonl")]) == 0
    want = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    got = httpx.post(f"{server.url}/predict", json={"texts": TEXTS})
    assert got.status_code == 200
    assert [p["label"] for p in got.json()["predictions"]] == [p["label"] for p in want]
    for ours, theirs in zip(got.json()["predictions"], want, strict=True):
        assert ours["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-5)
    pairs = httpx.post(f"{server.url}/predict", json={"inputs": [{"text": t} for t in TEXTS[:2]]})
    assert [p["label"] for p in pairs.json()["predictions"]] == [p["label"] for p in want[:2]]


def test_embed_gives_the_encoders_vectors(server, classifier):
    got = httpx.post(f"{server.url}/embed", json={"texts": TEXTS})
    assert got.status_code == 200
    vectors = np.asarray(got.json()["embeddings"])
    want = encode(load_encoder(classifier), Tokenizer.load(classifier), TEXTS, pooling="mean", precision="fp32")
    np.testing.assert_allclose(vectors, want, atol=1e-5)
    unit = httpx.post(f"{server.url}/embed", json={"texts": TEXTS, "normalize": True}).json()["embeddings"]
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)


def test_concurrent_requests_are_answered_correctly_in_fewer_model_calls(server, classifier):
    before = httpx.get(f"{server.url}/health").json()["batching"]
    want = encode(load_encoder(classifier), Tokenizer.load(classifier), TEXTS, pooling="mean", precision="fp32")

    async def many():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *(client.post(f"{server.url}/embed", json={"texts": [TEXTS[i % 5]]}) for i in range(16))
            )

    answers = asyncio.run(many())
    for i, answer in enumerate(answers):
        assert answer.status_code == 200
        np.testing.assert_allclose(answer.json()["embeddings"][0], want[i % 5], atol=1e-5)
    after = httpx.get(f"{server.url}/health").json()["batching"]
    assert after["requests"] - before["requests"] == 16
    assert after["calls"] - before["calls"] < 16  # grouped: --max-wait-ms 100 lets them gather
    assert after["largest_call"] > 1


@pytest.mark.parametrize(
    ("request_kwargs", "status", "words"),
    [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "not valid JSON"),
        ({"content": b"[1, 2]", "headers": {"content-type": "application/json"}}, 400, "not a JSON object"),
        ({"json": {"text": ["x"]}}, 422, "texts"),
        ({"json": {"texts": "one string"}}, 422, "texts"),
        ({"json": {"texts": [1, 2]}}, 422, "texts.0"),
        ({"json": {"texts": []}}, 422, "texts"),
        ({"json": {"texts": ["x"] * 9}}, 413, "limit is 8"),
        ({"json": {"texts": ["x" * 3000]}}, 413, "2,000 bytes"),
        ({"content": (b"x" * 1000 for _ in range(3)), "headers": {"content-type": "application/json"}}, 413, "bytes"),
    ],
)
def test_bad_embed_requests_get_a_json_4xx_and_the_server_keeps_serving(server, request_kwargs, status, words):
    got = httpx.post(f"{server.url}/embed", **request_kwargs)
    assert got.status_code == status
    assert words in got.json()["error"] and "\n" not in got.json()["error"]
    assert httpx.post(f"{server.url}/embed", json={"texts": ["fine"]}).status_code == 200


def test_wrong_endpoints_methods_and_task_inputs(server):
    cases = [
        (httpx.get(f"{server.url}/nope"), 404, "/predict"),
        (httpx.get(f"{server.url}/embed"), 405, "POST"),
        (httpx.post(f"{server.url}/generate", json={"texts": ["x"]}), 404, "does not serve /generate"),
        (httpx.post(f"{server.url}/predict", json={"texts": ["x"], "inputs": [{"text": "x"}]}), 422, "exactly one"),
        (httpx.post(f"{server.url}/predict", json={"inputs": [{"txt": "x"}]}), 422, "request input 0"),
    ]
    for got, status, words in cases:
        assert got.status_code == status, got.text
        assert words in got.json()["error"]
    assert httpx.get(f"{server.url}/ready").json()["status"] == "ready"
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/predict", "/embed", "/generate", "/health", "/ready"} <= set(schema["paths"])
    assert "texts" in schema["components"]["schemas"]["EmbedRequest"]["properties"]


def test_a_bad_input_batched_with_good_ones_fails_alone(server):
    async def together():
        async with httpx.AsyncClient(timeout=60) as client:
            good = [client.post(f"{server.url}/predict", json={"texts": [t]}) for t in TEXTS[:3]]
            bad = client.post(f"{server.url}/predict", json={"inputs": [{"txt": "no text field"}]})
            return await asyncio.gather(bad, *good)

    bad, *good = asyncio.run(together())  # --max-wait-ms 100: all four land in one group
    assert bad.status_code == 422 and "request input 0" in bad.json()["error"]
    assert [g.status_code for g in good] == [200, 200, 200]
    assert all(len(g.json()["predictions"]) == 1 for g in good)


def test_generate_continues_prompts_as_bertzoo_generate_does(tmp_path):
    model = save_tiny_model(tmp_path / "gpt", causal=True)
    inp = tmp_path / "in.jsonl"
    prompts = ["the cat sat", "on the mat"]
    inp.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    assert main(["generate", str(model), "-i", str(inp), "-o", str(tmp_path / "out.jsonl"),
                 "--generation.max_new_tokens", "5"]) == 0  # fmt: skip
    want = [json.loads(x)["prediction"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    with serving(model, "--precision", "fp32", log=tmp_path / "serve.log") as served:
        got = httpx.post(f"{served.url}/generate", json={"prompts": prompts, "generation": {"max_new_tokens": 5}})
        assert got.status_code == 200 and got.json()["generations"] == want
        bad = httpx.post(f"{served.url}/generate", json={"texts": ["x"], "generation": {"max_new_tokens": 0}})
        assert bad.status_code == 422 and "max_new_tokens" in bad.json()["error"]
        assert httpx.post(f"{served.url}/predict", json={"texts": ["x"]}).status_code == 404


def test_sigterm_finishes_the_request_in_flight_then_exits_cleanly(classifier, tmp_path):
    served = start(classifier, "--max-texts", "20000", "--max-body-bytes", "40000000", log=tmp_path / "serve.log")
    # Enough work (12,000 texts of 30 tokens) to be in the model well after the signal. The signal is handled on
    # the main thread between the model's Python steps, so no single step (tokenizing them all) may be long.
    long_texts = [" ".join(["the apple and a fig on the boat"] * 4)] * 12000

    async def in_flight_then_term():
        async with httpx.AsyncClient(timeout=120) as client:
            slow = asyncio.create_task(client.post(f"{served.url}/predict", json={"texts": long_texts}))
            await asyncio.sleep(0.5)  # the request is in the model
            assert not slow.done()
            served.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            await asyncio.sleep(0.3)
            with pytest.raises(httpx.ConnectError):  # no new connection once draining
                await client.post(f"{served.url}/embed", json={"texts": ["late"]}, timeout=5)
            answer = await slow
            return answer, time.monotonic() - signalled

    answer, after_signal = asyncio.run(in_flight_then_term())
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == 12000
    assert after_signal > 0.3  # it was answered after the signal, not before
    assert served.process.wait(60) == 0


def test_a_port_in_use_or_a_missing_model_is_one_line_and_exit_2(classifier, tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", str(classifier), "--port", str(port)]) == 2
    assert "in use" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "missing"), "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err


def test_int8_serves_vectors_close_to_fp32(classifier, tmp_path):
    want = encode(load_encoder(classifier), Tokenizer.load(classifier), TEXTS, pooling="mean", precision="fp32")
    with serving(classifier, "--int8", log=tmp_path / "serve.log") as served:
        got = np.asarray(httpx.post(f"{served.url}/embed", json={"texts": TEXTS}).json()["embeddings"])
        health = httpx.get(f"{served.url}/health").json()
    cosine = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosine.min() > 0.99
    assert np.abs(got - want).max() > 1e-6  # quantized: not the fp32 arithmetic
    assert health["kind"] == "finetuned classification"
