"""The command line: a smoke run on real text, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertzoo.cli import main


@pytest.fixture(scope="module")
def wiki_text(tmp_path_factory, wiki_docs):
    """A small real corpus as a user's own plain-text file (blank line between documents)."""
    path = tmp_path_factory.mktemp("cli") / "wiki.txt"
    path.write_text("\n\n".join(wiki_docs[:400]) + "\n", encoding="utf-8")
    return path


def test_tokenizer_prepare_pretrain_info(tmp_path, wiki_text, capsys):
    tok, shards, run = tmp_path / "tok", tmp_path / "shards", tmp_path / "run"
    assert main(["tokenizer", "train", "--input", str(wiki_text), "--out", str(tok), "--vocab-size", "3000"]) == 0
    assert (tok / "vocab.txt").is_file() and (tok / "tokenizer.json").is_file()
    assert main(["prepare", "--input", str(wiki_text), "--tokenizer", str(tok), "--out", str(shards)]) == 0
    assert (shards / "meta.json").is_file()
    code = main(
        [
            "pretrain",
            "configs/pretrain/bert-tiny-smoke.yaml",
            "--data.shards",
            str(shards),
            "--train.output_dir",
            str(run),
            "--train.max_steps=20",
            "--train.save_every",
            "10",
        ]
    )
    assert code == 0
    assert (run / "final" / "model.safetensors").is_file()
    assert (run / "final" / "vocab.txt").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 20 and "mlm_acc" in rows[-1]
    capsys.readouterr()
    assert main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "training run"
    assert info["model.train.step"] == 20
    assert info["model.layers/hidden/heads"] == "2/128/2"
    assert main(["info", str(shards)]) == 0
    assert "token shards" in capsys.readouterr().out


def run_cli(capsys, *args):
    code = main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def test_missing_file(capsys, tmp_path):
    code, err = run_cli(capsys, "tokenizer", "train", "--input", str(tmp_path / "nope.txt"), "--out", str(tmp_path))
    assert code == 2
    assert len(err) == 1 and "nope.txt" in err[0] and err[0].startswith("error:")


def test_empty_corpus(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    code, err = run_cli(capsys, "tokenizer", "train", "--input", str(empty), "--out", str(tmp_path / "t"))
    assert code == 2 and "empty" in err[-1].lower()


def test_non_utf8_bytes_are_replaced_and_reported(capsys, tmp_path, synthetic_tokenizer):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Good line one here.\n\nA bad \xff\xfe line.\n")
    synthetic_tokenizer.save(tmp_path / "tok")
    code, err = run_cli(
        capsys, "prepare", "--input", str(bad), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "s")
    )
    assert code == 0
    assert any("invalid UTF-8" in line and "bad.txt:3" in line for line in err)


def test_unknown_config_key(capsys, synthetic_shards, tmp_path):
    code, err = run_cli(
        capsys,
        "pretrain",
        "configs/pretrain/bert-tiny-smoke.yaml",
        "--train.lr_rate",
        "1",
        "--data.shards",
        str(synthetic_shards),
    )
    assert code == 2
    assert len(err) == 1 and "train.lr_rate" in err[0] and "lr" in err[0]


def test_bad_override_value(capsys, synthetic_shards):
    code, err = run_cli(capsys, "pretrain", "configs/pretrain/bert-tiny-smoke.yaml", "--train.precision", "fp8")
    assert code == 2 and "bf16" in err[0]


def test_sequence_longer_than_positions(capsys, synthetic_shards, tmp_path):
    code, err = run_cli(
        capsys,
        "pretrain",
        "configs/pretrain/bert-tiny-smoke.yaml",
        "--data.shards",
        str(synthetic_shards),
        "--data.max_seq_len",
        "1024",
        "--train.output_dir",
        str(tmp_path),
    )
    assert code == 2
    assert len(err) == 1 and "max_seq_len=1024" in err[0] and "max_position=512" in err[0]


def test_unprepared_shards(capsys, tmp_path):
    (tmp_path / "half").mkdir()
    code, err = run_cli(
        capsys, "pretrain", "configs/pretrain/bert-tiny-smoke.yaml", "--data.shards", str(tmp_path / "half")
    )
    assert code == 2 and "meta.json" in err[0]


def test_debug_shows_traceback(tmp_path):
    from bertzoo.errors import BertzooError

    with pytest.raises(BertzooError):
        main(["--debug", "info", str(tmp_path / "missing")])


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "bertzoo", "--help"], capture_output=True, text=True, check=True)
    assert "pretrain" in out.stdout and "prepare" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "bertzoo", "info", "/no/such/dir"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_override_values_are_not_taken_for_the_config_file(synthetic_shards, tmp_path):
    """`pretrain --model.preset bert-tiny ...` with no YAML: every value stays with its flag."""
    from bertzoo.cli.common import split_overrides

    rest, overrides = split_overrides(["pretrain", "--model.preset", "bert-tiny", "--resume", "auto", "--train.lr=1"])
    assert rest == ["pretrain", "--resume", "auto"]
    assert overrides == ["--model.preset", "bert-tiny", "--train.lr=1"]
    # Top-level keys count for pretrain/finetune only: `tokenizer train --model bpe` keeps its option.
    assert split_overrides(["finetune", "c.yaml", "--model", "dir"]) == (["finetune", "c.yaml"], ["--model", "dir"])
    assert split_overrides(["tokenizer", "train", "--model", "bpe"])[1] == []
    code = main(["pretrain", "--model.preset", "bert-tiny", "--model.hidden_size", "32", "--model.num_heads", "2",
                 "--model.intermediate_size", "64", "--data.shards", str(synthetic_shards), "--data.max_seq_len", "32",
                 "--train.max_steps", "2", "--train.batch_size", "4", "--train.output_dir", str(tmp_path / "run"),
                 "--train.threads", "1"])  # fmt: skip
    assert code == 0
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()


@pytest.mark.parametrize(("reason", "code"), [("SIGTERM", 143), ("SIGINT", 130), ("max_minutes", 0), (None, 0)])
def test_a_run_stopped_by_a_signal_exits_with_128_plus_its_number(monkeypatch, capsys, reason, code):
    """A preempted run keeps its checkpoint and says how to continue, and its exit code tells the script or
    scheduler that started it that it did not finish; a spent time budget is a finish."""
    import bertzoo.train.pretrain as pretraining

    summary = {"completed": reason is None, "stop_reason": reason, "steps": 3}
    monkeypatch.setattr(pretraining, "pretrain", lambda cfg, resume=None: summary)
    assert main(["pretrain", "configs/pretrain/bert-tiny-smoke.yaml"]) == code
    assert ("to continue this run" in capsys.readouterr().err) == (reason is not None)


def test_chinese_alphabet_and_unknown_token_warning(tmp_path, capsys):
    # 40 distinct CJK characters, each frequent: a 10-character alphabet must leave most of them [UNK] (and prepare
    # says so), an alphabet of 100 takes them all.
    chars = [chr(0x4E00 + 7 * i) for i in range(40)]
    text = tmp_path / "zh.txt"
    text.write_text("\n".join("".join(chars[(i + j) % 40] for j in range(20)) for i in range(200)) + "\n")
    vocab = {}
    for limit in (10, 100):
        tok = tmp_path / f"tok{limit}"
        assert main(["tokenizer", "train", "-i", str(text), "-o", str(tok), "--vocab-size", "500",
                     "--limit-alphabet", str(limit)]) == 0  # fmt: skip
        vocab[limit] = json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"]
        capsys.readouterr()
        assert main(["prepare", "-i", str(text), "-t", str(tok), "-o", str(tmp_path / f"shards{limit}")]) == 0
        err = capsys.readouterr().err
        assert ("are [UNK]" in err) == (limit == 10), err
    assert all(c in vocab[100] for c in chars)
    assert sum(c in vocab[10] for c in chars) <= 10
