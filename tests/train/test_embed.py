"""Sentence vectors: batched encoding returns them in input order, equal to one text at a time, and `bertzoo
embed` writes them for a file of texts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertzoo.cli import main
from bertzoo.config import ModelConfig
from bertzoo.models.encoder import Encoder
from bertzoo.train.embed import encode


def test_sorted_batches_match_single_texts(synthetic_tokenizer, synthetic_docs):
    torch.manual_seed(0)
    enc = Encoder(
        ModelConfig(
            vocab_size=synthetic_tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64
        )
    ).eval()
    texts = [d[: 20 + 37 * i % 300] for i, d in enumerate(synthetic_docs[:23])]
    for pooling in ("mean", "cls", "pooler"):
        batched = encode(enc, synthetic_tokenizer, texts, batch_size=5, pooling=pooling)
        single = np.concatenate([encode(enc, synthetic_tokenizer, [t], pooling=pooling) for t in texts])
        np.testing.assert_allclose(batched, single, atol=1e-5)
    unit = encode(enc, synthetic_tokenizer, texts, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    # Order really is the input order: distinct texts give distinct rows in place.
    assert not np.allclose(batched[0], batched[1])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, synthetic_tokenizer) -> Path:
    """A tiny encoder with a pooler and its tokenizer, saved as a bertzoo model directory."""
    directory = tmp_path_factory.mktemp("embed-model")
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=synthetic_tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64
    )
    Encoder(config).save_pretrained(directory)
    synthetic_tokenizer.save(directory)
    return directory


def by_hand(directory: Path, text: str) -> np.ndarray:
    """The mean of the last layer over [CLS] text [SEP], computed without bertzoo.train.embed."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.loading import load_encoder

    tok = Tokenizer.load(directory)
    ids = torch.tensor([[tok.cls_id, *tok.encode_batch([text])[0], tok.sep_id]])
    with torch.no_grad():
        return load_encoder(directory).eval()(ids).last_hidden_state[0].mean(0).numpy()


def test_cli_embeds_jsonl_and_text_in_input_order(model_dir, synthetic_docs, tmp_path, capsys) -> None:
    texts = [d[: 30 + 41 * i % 200] for i, d in enumerate(synthetic_docs[:9])]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "sentence": t}) + "\n" for i, t in enumerate(texts)))
    assert main(["embed", str(model_dir), "-i", str(jsonl), "-o", str(tmp_path / "v.npy"), "--field", "sentence"]) == 0
    assert "wrote 9 vector(s) of 32" in capsys.readouterr().err
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (9, 32) and vectors.dtype == np.float32
    for i in (0, 4, 8):
        np.testing.assert_allclose(vectors[i], by_hand(model_dir, texts[i]), atol=1e-4)
    plain = tmp_path / "in.txt"
    plain.write_text("\n".join(texts) + "\n\n")
    assert main(["embed", str(model_dir), "-i", str(plain), "-o", str(tmp_path / "u.npy"), "--normalize"]) == 0
    unit = np.load(tmp_path / "u.npy")
    np.testing.assert_allclose(unit, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), atol=1e-5)


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, [], "input file not found"),
        ("", [], "holds no text; nothing to embed"),
        ('{"text": 3}\n', [], "in.jsonl:1 has no string 'text' field"),
        ('{"text": "a b"}\n', ["--pooling", "pooler", "-o", "x.txt"], "must end in .npy"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(model_dir, tmp_path, capsys, content, args, message) -> None:
    src = tmp_path / "in.jsonl"
    if content is not None:
        src.write_text(content)
    out = tmp_path / "v.npy"
    out.write_bytes(b"previous")
    argv = ["embed", str(model_dir), "-i", str(src), "-o", str(out), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert out.read_bytes() == b"previous"  # an existing output stays as it was
