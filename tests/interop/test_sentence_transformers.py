"""`bertzoo export --sentence-transformers`: the real sentence-transformers package loads the directory and gives
bertzoo's vectors at 1e-5, for every pooling, with and without normalisation, and for the released
all-MiniLM-L6-v2 the same vectors as its own sentence-transformers files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from bertzoo.cli import main
from bertzoo.config import ModelConfig
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import resolve
from bertzoo.models.encoder import Encoder
from bertzoo.train.embed import encode, export_sentence_transformers

from helpers.finetune import write_task_files
from helpers.parity import perturb

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["the apple is red", "a bus", "it is on the train and the boat is blue and the fig is pink", "of"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("st")
    paths = write_task_files(root / "data")
    tokenizer = Tokenizer.load(paths["tokenizer"])
    config = ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                         intermediate_size=64, max_position=64)  # fmt: skip
    encoder = perturb(Encoder(config), seed=3).eval()  # every weight, biases and norms included, moved
    encoder.save_pretrained(root / "model")
    tokenizer.save(root / "model")
    return root / "model", encoder, tokenizer


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", True), ("cls", False), ("last", False)])
def test_sentence_transformers_gives_bertzoo_vectors(tiny_dir, tmp_path, pooling, normalize):
    model_dir, encoder, tokenizer = tiny_dir
    out = tmp_path / "st"
    info = export_sentence_transformers(model_dir, out, pooling=pooling, normalize=normalize, max_length=32)
    assert info["max_abs_diff"] < 1e-5
    theirs = SentenceTransformer(str(out), device="cpu").encode(TEXTS, batch_size=2)
    ours = encode(encoder, tokenizer, TEXTS, max_length=32, pooling=pooling, normalize=normalize)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    assert np.abs(ours).max() > 0.1  # real vectors, not zeros
    norms = np.linalg.norm(theirs, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5) == normalize
    pooling_cfg = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert [k for k, v in pooling_cfg.items() if v is True and k.startswith("pooling_mode")] == [
        {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "last": "pooling_mode_lasttoken"}[pooling]
    ]


def test_released_minilm_round_trips_through_the_export(tmp_path, capsys):
    source = resolve("builtin:all-minilm-l6-v2")
    assert main(["export", "builtin:all-minilm-l6-v2", str(tmp_path / "st"), "--sentence-transformers",
                 "--normalize", "--max-length", "256"]) == 0  # fmt: skip
    assert "loaded by sentence-transformers" in capsys.readouterr().out
    texts = ["A man is playing a guitar.", "The 2001 film was directed by Stanley Kubrick.", "量子"]
    original = SentenceTransformer(str(source), device="cpu").encode(texts)
    exported = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts)
    np.testing.assert_allclose(exported, original, atol=1e-5)


def test_a_non_empty_output_directory_is_refused_and_kept(tiny_dir, tmp_path, capsys):
    model_dir, _, _ = tiny_dir
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", str(model_dir), str(out), "--sentence-transformers"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    assert main(["export", str(model_dir), str(tmp_path / "x"), "--sentence-transformers", "--int8"]) == 2
