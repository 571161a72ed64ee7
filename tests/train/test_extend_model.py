"""Vocabulary extension, the model side (bertzoo.train.extend): the new rows and how each starts, the grown head,
the directory it writes, and that the rest of bertzoo reads that directory (prepare, pretrain --init, convert to
Hugging Face with equal outputs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertzoo.cli import main
from bertzoo.config import ModelConfig
from bertzoo.data.tokens import extend as ext
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import CheckpointError, DataError
from bertzoo.loading import load_encoder, load_pretraining
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.train.extend import (
    apply_linear_map,
    choose_exact,
    extend_model,
    fit_linear_map,
    pieces_mean,
    resize_vocabulary,
    unigram_bias,
)

from helpers.extend import VOCAB, domain_docs, make_checkpoint, perturb, tokenizer
from helpers.pretrain import tiny_args

pytestmark = pytest.mark.usefixtures("one_thread")
WORD = "embeddings.word.weight"


def test_pieces_mean_is_the_mean_of_the_rows() -> None:
    table = torch.arange(12.0).view(4, 3)  # rows [0 1 2] [3 4 5] [6 7 8] [9 10 11]
    expected = torch.tensor([[3.0, 4.0, 5.0], [7.0, 8.0, 9.0]])  # rows 0, 2 and rows 1, 3, 3
    torch.testing.assert_close(pieces_mean(table, [[0, 2], [1, 3, 3]]), expected)


def test_the_least_squares_map_recovers_a_known_linear_map() -> None:
    g = torch.Generator().manual_seed(0)
    source = torch.randn(200, 6, generator=g, dtype=torch.float64)
    matrix = torch.randn(6, 4, generator=g, dtype=torch.float64)
    offset = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64)
    weight = fit_linear_map(source, source @ matrix + offset)
    torch.testing.assert_close(weight[:-1], matrix, atol=1e-4, rtol=0)
    torch.testing.assert_close(weight[-1], offset, atol=1e-4, rtol=0)
    unseen = torch.randn(5, 6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(apply_linear_map(weight, unseen), unseen @ matrix + offset, atol=1e-4, rtol=0)


def test_a_new_bias_is_its_log_frequency_on_the_heads_scale() -> None:
    bias = torch.tensor([0.5, 1.0, 2.0])  # three old tokens
    counts = np.array([3, 1, 0, 4, 0])  # two new ones (ids 3, 4); 8 tokens in all, 5 ids: add-one over 13
    log_p = [math.log(c / 13) for c in (4, 2, 1, 5, 1)]
    offset = ((0.5 - log_p[0]) + (1.0 - log_p[1])) / 2  # the median of two anchors
    got = unigram_bias(bias, counts, np.array([0, 1]), np.array([3, 4]))
    torch.testing.assert_close(got, torch.tensor([log_p[3] + offset, log_p[4] + offset], dtype=torch.float64))


@pytest.mark.parametrize("tied", [True, False])
def test_resizing_grows_the_table_the_decoder_and_its_bias(tied) -> None:
    config = ModelConfig(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, max_position=16)
    config.tie_word_embeddings = tied
    torch.manual_seed(0)
    model = perturb(MaskedLM(Encoder(config)), seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    asked = []

    def rows(name: str, tensor: torch.Tensor) -> torch.Tensor:
        asked.append(name)
        return torch.full((3, *tensor.shape[1:]), float(len(asked)))

    grown = resize_vocabulary(model, 20, rows)
    state = model.state_dict()
    word, decoder = "encoder.embeddings.word.weight", "mlm_head.decoder.weight"
    assert sorted(grown) == sorted(asked) and len(grown) == (2 if tied else 3)
    assert (model.mlm_head.decoder.weight is model.encoder.embeddings.word.weight) == tied
    assert state[word].shape == state[decoder].shape == (23, 8) and state["mlm_head.decoder.bias"].shape == (23,)
    for key in (word, decoder, "mlm_head.decoder.bias"):
        torch.testing.assert_close(state[key][:20], before[key])  # old rows untouched
    assert model.config.vocab_size == 23 and model.encoder.embeddings.word.num_embeddings == 23
    assert model.mlm_head.decoder.out_features == 23
    with torch.no_grad():
        hidden = model.encoder(torch.tensor([[2, 22, 3]]), torch.ones(1, 3, dtype=torch.long)).last_hidden_state
        assert model.mlm_head(hidden).shape == (1, 3, 23)
    model.other = torch.nn.Parameter(torch.zeros(23, 4))
    with pytest.raises(CheckpointError, match="other has one row per token"):
        resize_vocabulary(model, 23, rows)


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> dict:
    """A tiny masked-LM checkpoint, extended by 12 mined tokens and a listed word and character."""
    root = tmp_path_factory.mktemp("extend")
    source = make_checkpoint(root / "source")
    (root / "tokens.txt").write_text("hemoglobinuria\nж\n", encoding="utf-8")
    docs = domain_docs()
    record = extend_model(
        str(source), lambda: iter(docs), root / "out", add=12, tokens_file=str(root / "tokens.txt"), corpus=["docs"]
    )
    return {"root": root, "source": source, "out": root / "out", "record": record, "docs": docs}


def test_every_new_row_starts_as_its_kind_says(extended) -> None:
    record, out = extended["record"], extended["out"]
    by_token = {t["token"]: t for t in record["tokens"]}
    size = len(VOCAB)
    assert record["vocab_size"] == {"before": size, "after": size + 14}
    assert [t["id"] for t in record["tokens"]] == list(range(size, size + 14))
    # Characters first (the listed one, then the mined ones by count), then words.
    kinds = [t["kind"] for t in record["tokens"]]
    assert kinds == sorted(kinds) and record["tokens"][0]["token"] == "ж"
    assert {"血", "红", "к", "##р", "##о", "##в", "##ь"} <= set(by_token)
    assert by_token["hemoglobin"]["start"] == "pieces-mean"
    assert by_token["hemoglobin"]["pieces"] == ["hem", "##og", "##lo", "##bin"]
    assert by_token["hemoglobinuria"] == {**by_token["hemoglobinuria"], "source": "listed", "start": "pieces-mean"}
    assert by_token["血"]["start"] == "projected" and by_token["##ь"]["start"] == "projected"
    assert by_token["ж"]["start"] == "fallback" and by_token["ж"]["corpus_count"] == 0  # never in the corpus
    counts = record["counts"]
    assert counts["added"] == 14 == counts["pieces-mean"] + counts["projected"] + counts["fallback"]
    assert counts["fallback"] == 1 and counts["listed"] == 2
    assert record["projection"]["anchors"] >= 20 and "encoder.embeddings.word.weight" in record["projection"]["r2"]
    assert sorted(record["tensors"]) == ["encoder.embeddings.word.weight", "mlm_head.decoder.bias"]  # decoder: tied
    assert json.loads((out / "extension.json").read_text()) == json.loads(json.dumps(record))
    assert record["source_model"] == str(extended["source"]) and record["corpus"] == ["docs"]


def test_a_word_row_is_the_mean_of_its_pieces_rows_and_old_rows_stay(extended) -> None:
    old = load_file(extended["source"] / "model.safetensors")["encoder." + WORD]
    new = load_file(extended["out"] / "model.safetensors")
    table = new["encoder." + WORD]
    ids = {t: i for i, t in enumerate(VOCAB)}
    hem = [ids["hem"], ids["##og"], ids["##lo"], ids["##bin"]]
    expected = (old[hem[0]] + old[hem[1]] + old[hem[2]] + old[hem[3]]) / 4
    tok = Tokenizer.load(extended["out"])
    torch.testing.assert_close(table[tok.token_to_id("hemoglobin")], expected)
    torch.testing.assert_close(table[: len(VOCAB)], old, atol=0, rtol=0)
    assert "mlm_head.decoder.weight" not in new  # still tied: stored once
    bias = new["mlm_head.decoder.bias"]
    assert bias.shape == (len(VOCAB) + 14,) and torch.isfinite(bias).all()
    model = load_pretraining(extended["out"])
    assert model.config.vocab_size == len(VOCAB) + 14
    assert model.mlm_head.decoder.weight is model.encoder.embeddings.word.weight
    # Projected characters are not all alike: they carry what the corpus says about them.
    assert not torch.allclose(table[tok.token_to_id("血")], table[tok.token_to_id("红")])


def test_the_extended_directory_exports_to_transformers_with_equal_outputs(extended, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    model = perturb(load_pretraining(extended["out"]), seed=7)  # every weight moved, the new rows too
    ours_dir = tmp_path / "ours"
    model.save_pretrained(ours_dir)
    Tokenizer.load(extended["out"]).save(ours_dir)
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(ours_dir), str(tmp_path / "hf")]) == 0
    texts = ["The hemoglobin level of 血红 кровь.", "hemoglobinuria is high, жж hemoglobin"]
    tok = Tokenizer.load(ours_dir)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = hf_tok(texts, padding=True, return_tensors="pt")
    for row, text in zip(batch["input_ids"].tolist(), texts, strict=True):
        ids = tok.encode(text).ids
        assert row[: len(ids)] == ids and max(ids) >= len(VOCAB)  # new tokens in use, same ids
    assert tok.token_to_id("hemoglobin") in batch["input_ids"][0].tolist()
    hf = transformers.BertModel.from_pretrained(tmp_path / "hf").eval()
    heads = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        out = model.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        theirs = hf(**batch).last_hidden_state
        logits = heads(**batch).prediction_logits
        torch.testing.assert_close(out.last_hidden_state[real], theirs[real], atol=1e-5, rtol=0)
        torch.testing.assert_close(model.mlm_head(out.last_hidden_state)[real], logits[real], atol=1e-5, rtol=0)
    assert logits.shape[-1] == len(VOCAB) + 14


def test_pretraining_continues_from_the_extended_model(extended, tmp_path, capsys) -> None:
    corpus = tmp_path / "domain.txt"
    corpus.write_text("\n\n".join(extended["docs"]), encoding="utf-8")
    shards, run = tmp_path / "shards", tmp_path / "run"
    assert main(["prepare", "--input", str(corpus), "--tokenizer", str(extended["out"]), "--out", str(shards)]) == 0
    assert main([*tiny_args(shards, run, max_steps=2, save_every=0), f"--init={extended['out']}"]) == 0
    capsys.readouterr()
    recorded = json.loads((run / "run_config.json").read_text())
    assert "encoder.embeddings.word.weight" in recorded["start"]["loaded"]
    assert "mlm_head.decoder.bias" in recorded["start"]["loaded"] and recorded["start"]["fresh"] == []
    assert load_encoder(run / "final").config.vocab_size == len(VOCAB) + 14


def test_a_bare_encoder_grows_its_word_table_only(tmp_path) -> None:
    source = make_checkpoint(tmp_path / "encoder", heads=False)
    record = extend_model(str(source), lambda: iter(domain_docs(60)), tmp_path / "out", add=3)
    assert record["tensors"] == ["embeddings.word.weight"] and record["source_kind"] == "encoder"
    assert record["tokens"][0]["token"] == "血" and {t["kind"] for t in record["tokens"]} == {"char"}
    assert load_encoder(tmp_path / "out").embeddings.word.weight.shape == (len(VOCAB) + 3, 32)


def test_a_new_word_that_would_change_a_glued_corpus_word_is_dropped(tmp_path) -> None:
    tok = tokenizer(tmp_path / "tok")
    docs = ["hemoglobin hemoglobin hemoglobin hemoglobin©", "cats cats the"]
    mined = ext.mine(tok, docs)
    new, chosen, dropped = choose_exact(tok, mined, [], 5)
    assert [c.token for c in chosen] == ["cats"] and dropped == [("hemoglobin", "hemoglobin©")]
    assert new.tokenize("hemoglobin©") == tok.tokenize("hemoglobin©")
    listed = ext.listed_candidates(tok, [(1, "hemoglobin")], mined)
    with pytest.raises(DataError, match="would change how the corpus word 'hemoglobin©' splits"):
        choose_exact(tok, mined, listed, 0)


def test_outputs_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "source")
    with pytest.raises(DataError, match="0 candidates"):
        extend_model(str(source), lambda: iter(["the cat. the level"]), tmp_path / "out", add=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source", "source-vocab"]
