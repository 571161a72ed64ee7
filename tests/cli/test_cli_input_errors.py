"""Bad input that used to end in a traceback: nonsense numeric options, argparse errors, malformed
SQuAD offsets, deeply nested JSON, a meta.json that names files outside its shard directory; and
`bertzoo info` showing a run's training metrics. Each expected failure is one line and exit code 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertzoo.cli import main
from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.data.tokens.train_tokenizer import train_bpe, train_unigram, train_wordpiece
from bertzoo.errors import DataError


def run_cli(capsys, *args: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.fixture()
def corpus(tmp_path) -> Path:
    path = tmp_path / "c.txt"
    path.write_text("Some text here. More text there.\n\nA second document.\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------- numeric options


@pytest.mark.parametrize(
    ("args", "option", "shown"),
    [
        (["--limit-docs", "-1"], "--limit-docs", "got -1"),  # was: ValueError from itertools.islice
        (["--limit-docs", "0"], "--limit-docs", "got 0"),  # was: silently no limit at all
        (["--min-frequency", "-3"], "--min-frequency", "got -3"),  # was: OverflowError from tokenizers
        (["--vocab-size", "0"], "--vocab-size", "got 0"),  # was: silently the 30000 default
        (["--vocab-size", "2147483647"], "--vocab-size", "got 2147483647"),  # was: a 140 GB allocation abort
        (["--vocab-size=1e3"], "--vocab-size", "'1e3'"),
        (["--limit-docs="], "--limit-docs", "''"),
    ],
)
def test_tokenizer_train_numeric_options(capsys, corpus, tmp_path, args, option, shown):
    code, err = run_cli(capsys, "tokenizer", "train", "--input", str(corpus), "--out", str(tmp_path / "tok"), *args)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: bertzoo tokenizer train: argument " + option), err
    assert shown in err[0] and err[0].endswith("see bertzoo tokenizer train --help")
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["prepare", "-i", "c.txt", "-t", "tok", "-o", "out", "--shard-tokens", "0"],
        ["prepare", "-i", "c.txt", "-t", "tok", "-o", "out", "--shard-tokens", "-5"],
        ["evaluate", "model", "--batch-size", "0"],
        ["predict", "model", "-i", "in.jsonl", "-o", "out.jsonl", "--batch-size", "-2"],
        ["predict", "model", "-i", "in.jsonl", "-o", "out.jsonl", "--batch-size", "many"],
    ],
    ids=["shard-tokens-0", "shard-tokens-neg", "evaluate-batch-0", "predict-batch-neg", "predict-batch-text"],
)
def test_other_numeric_options(capsys, args):
    code, err = run_cli(capsys, *args)
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: bertzoo {args[0]}: argument {args[-2]}:"), err


def test_argparse_errors_are_one_line_with_exit_code_2(capsys):
    for args, expected in [
        ([], "the following arguments are required: command"),
        (["tokenizer", "train", "--out", "x"], "the following arguments are required: --input"),
        (["tokenizer", "train", "-i", "c", "-o", "x", "--model", "bert"], "invalid choice: 'bert'"),
        (["info", "x", "--colour"], "unrecognized arguments: --colour"),
    ]:
        code, err = run_cli(capsys, *args)
        assert code == 2 and len(err) == 1, (args, err)
        assert err[0].startswith("error: bertzoo") and expected in err[0], err
    # The real process: exit status 2, one stderr line, no usage block.
    proc = subprocess.run(
        [sys.executable, "-m", "bertzoo", "tokenizer", "train", "-i", "c", "-o", "x", "--limit-docs", "-1"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "usage:" not in proc.stderr
    assert "--limit-docs: must be an integer >= 1, got -1" in proc.stderr


def test_valid_numeric_options_still_work(capsys, corpus, tmp_path):
    capsys.readouterr()
    code = main(["tokenizer", "train", "-i", str(corpus), "-o", str(tmp_path / "tok"), "--vocab-size", "40",
                 "--min-frequency", "0", "--limit-docs", "1"])  # fmt: skip
    assert code == 0
    assert "on 1 documents" in capsys.readouterr().out  # --limit-docs 1 of the corpus's 2
    assert (tmp_path / "tok" / "tokenizer.json").is_file()


def test_tokenizer_trainers_check_their_arguments():
    docs = ["hello world", "another document"]
    with pytest.raises(DataError, match=r"min_frequency must be an integer in 0\.\.\d+, got -3"):
        train_wordpiece(docs, 100, min_frequency=-3)
    with pytest.raises(DataError, match=r"min_frequency must be an integer in 0\.\.\d+, got -1"):
        train_bpe(docs, 300, min_frequency=-1)
    with pytest.raises(DataError, match="vocab_size must be at most 16,777,216, got 2,147,483,647"):
        train_wordpiece(docs, 2**31 - 1)
    with pytest.raises(DataError, match=r"vocab_size must exceed 5 \(the special tokens\), got 0"):
        train_unigram(docs, 0)
    with pytest.raises(DataError, match="max_piece_length must be >= 1, got 0"):
        train_unigram(docs, 100, max_piece_length=0)


# ---------------------------------------------------------------------------------------------- SQuAD


def squad_file(tmp_path: Path, answer_start: object) -> Path:
    data = {
        "version": "1.1",
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {
                        "context": "Paris is the capital of France.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "What is the capital of France?",
                                "answers": [{"text": "Paris", "answer_start": answer_start}],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("value", "shown"),
    [("abc", '"abc"'), ([0], "[0]"), (1.5, "1.5"), (True, "true"), (None, "null"), ({"at": 0}, '{"at": 0}')],
)
def test_squad_answer_start_must_be_an_offset(tmp_path, value, shown):
    from bertzoo.tasks.qa import read_squad

    path = squad_file(tmp_path, value)
    with pytest.raises(DataError, match="question q1 has answer_start") as info:
        read_squad(path)
    assert f"answer_start {shown};" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), ("0", 0), (7.0, 7), (" 12 ", 12)])
def test_squad_answer_start_accepts_integer_forms(tmp_path, value, expected):
    from bertzoo.tasks.qa import read_squad

    examples, version_2 = read_squad(squad_file(tmp_path, value))
    assert examples[0]["answers"] == [{"text": "Paris", "answer_start": expected}] and not version_2


def test_deeply_nested_squad_file(tmp_path):
    from bertzoo.tasks.qa import read_squad

    path = tmp_path / "deep.json"
    path.write_text('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    with pytest.raises(DataError, match=r"deep.json is not valid UTF-8 JSON \(RecursionError\)"):
        read_squad(path)
    big = tmp_path / "big.json"
    big.write_text('{"data": [], "n": ' + "7" * 5000 + "}", encoding="utf-8")  # over Python's 4300 digits
    with pytest.raises(DataError, match=r"big.json is not valid UTF-8 JSON \(ValueError\)"):
        read_squad(big)


# ---------------------------------------------------------------------------------- shard meta names


def annotate(directory: Path) -> None:
    """The unit annotation that writes NAME.units.npy beside every shard."""
    from bertzoo.data.tokens.annotate import annotate_shards

    annotate_shards(directory, "chars")


@pytest.mark.parametrize("kind", ["parent", "absolute", "nested-parent"])
def test_meta_json_cannot_name_files_outside_the_shard_directory(synthetic_shards, tmp_path, kind):
    shards = tmp_path / "shards"
    shutil.copytree(synthetic_shards, shards)
    outside = tmp_path / "outside"
    outside.mkdir()
    meta = json.loads((shards / "meta.json").read_text())
    first = meta["shards"][0]["name"]
    # Real shard files outside the directory, so every read succeeds: only the name check can stop it.
    for suffix in ("tokens", "sentences", "documents"):
        shutil.copy(shards / f"{first}.{suffix}.npy", outside / f"{first}.{suffix}.npy")
    name = {
        "parent": f"../outside/{first}",
        "absolute": str(outside / first),
        "nested-parent": f"sub/../../outside/{first}",
    }[kind]
    meta["shards"][0]["name"] = name
    (shards / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="names a shard file outside the shard directory") as info:
        ShardedCorpus(shards)
    assert "\n" not in str(info.value)
    with pytest.raises(DataError, match="outside the shard directory"):
        annotate(shards)
    # Nothing was written outside: no shard_00000.units.npy beside the three copied files.
    assert first == "shard_00000"
    assert sorted(p.name for p in outside.iterdir()) == [
        "shard_00000.documents.npy",
        "shard_00000.sentences.npy",
        "shard_00000.tokens.npy",
    ]


def test_meta_json_names_inside_the_directory_still_load(synthetic_shards, tmp_path):
    """A shard in a subdirectory (or a name with harmless dots) is inside: allowed."""
    shards = tmp_path / "shards"
    shutil.copytree(synthetic_shards, shards)
    meta = json.loads((shards / "meta.json").read_text())
    first = meta["shards"][0]["name"]
    (shards / "sub").mkdir()
    for suffix in ("tokens", "sentences", "documents"):
        (shards / f"{first}.{suffix}.npy").rename(shards / "sub" / f"{first}.{suffix}.npy")
    meta["shards"][0]["name"] = f"sub/../sub/{first}"
    (shards / "meta.json").write_text(json.dumps(meta))
    assert ShardedCorpus(shards).num_tokens == ShardedCorpus(synthetic_shards).num_tokens


def test_cli_reports_a_crafted_meta_json_in_one_line(synthetic_shards, tmp_path, capsys):
    shards = tmp_path / "shards"
    shutil.copytree(synthetic_shards, shards)
    meta = json.loads((shards / "meta.json").read_text())
    meta["shards"][0]["name"] = "/etc/passwd"
    (shards / "meta.json").write_text(json.dumps(meta))
    code, err = run_cli(capsys, "info", str(shards))
    assert code == 0  # info reads meta.json's counts only; it opens no shard file
    code, err = run_cli(capsys, "pretrain", "configs/pretrain/bert-tiny-smoke.yaml", "--data.shards", str(shards),
                        "--train.output_dir", str(tmp_path / "run"))  # fmt: skip
    assert code == 2 and len(err) == 1 and "outside the shard directory" in err[0] and "'/etc/passwd'" in err[0]


# ---------------------------------------------------------------------------------------------- info


def test_info_shows_the_metrics_of_a_run(synthetic_shards, tmp_path, capsys):
    """The trainer writes its latest means under `metrics` in trainer_state.json; info lists them."""
    run = tmp_path / "run"
    code = main(["pretrain", "--model.preset", "bert-tiny", "--model.hidden_size", "32", "--model.num_heads", "2",
                 "--model.intermediate_size", "64", "--data.shards", str(synthetic_shards), "--data.max_seq_len", "32",
                 "--train.max_steps", "2", "--train.batch_size", "4", "--train.output_dir", str(run),
                 "--train.threads", "1", "--train.log_every", "2", "--train.save_every", "2"])  # fmt: skip
    assert code == 0
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert logged["step"] == 2 and "mlm_acc" in logged and "loss" in logged
    capsys.readouterr()
    assert main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "training run" and info["model.train.step"] == 2
    # The values info shows are those logged at step 2 (metrics.jsonl is written by the trainer, not info).
    assert info["model.train.loss"] == pytest.approx(logged["loss"])
    assert info["model.train.mlm_acc"] == pytest.approx(logged["mlm_acc"])
    assert main(["info", str(run / "checkpoints" / "step-00000002")]) == 0
    text = capsys.readouterr().out
    assert any(line.split(":")[0].strip() == "train.mlm_acc" for line in text.splitlines()), text


# ------------------------------------------------------------------------------- corpora that are not text


def test_a_binary_file_is_not_a_corpus(capsys, tmp_path):
    """An executable passed as a corpus: one line naming it, exit 2, no tokenizer or shards written (it used to
    train a vocabulary of noise, larger than asked, with two differently worded warnings)."""
    binary = tmp_path / "python.bin"
    binary.write_bytes(Path(sys.executable).resolve().read_bytes()[:20000])
    code, err = run_cli(
        capsys, "tokenizer", "train", "-i", str(binary), "--out", str(tmp_path / "tok"), "--vocab-size", "60"
    )
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"error: {binary} is not a text file") and "pass UTF-8 text or JSONL" in err[0]
    assert not (tmp_path / "tok").exists()


def test_a_vocabulary_smaller_than_the_alphabet_is_refused(capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world abc\nxyz qrs tuv\n")
    code, err = run_cli(
        capsys, "tokenizer", "train", "-i", str(text), "--out", str(tmp_path / "tok"), "--vocab-size", "12"
    )
    assert code == 2 and len(err) == 1 and "raise --vocab-size to at least" in err[0]
    assert not (tmp_path / "tok").exists()


def test_invalid_utf8_is_reported_once(capsys, tmp_path, synthetic_tokenizer):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Good line one here.\n\nA bad \xff\xfe line.\n")
    code, err = run_cli(
        capsys, "tokenizer", "train", "-i", str(bad), "--out", str(tmp_path / "tok"), "--vocab-size", "100"
    )
    assert code == 0
    assert sum("invalid UTF-8" in line for line in err) == 1


def test_a_missing_model_is_named_even_when_the_config_names_a_tokenizer(capsys, tmp_path, synthetic_tokenizer):
    synthetic_tokenizer.save(tmp_path / "tok")
    config = tmp_path / "ft.yaml"
    config.write_text(f"task: classification\ntokenizer: {tmp_path / 'tok'}\ndata:\n  dataset: builtin:wiki-topics\n")
    code, err = run_cli(
        capsys, "finetune", str(config), "--model", "notamodel", "--train.output_dir", str(tmp_path / "r")
    )
    assert code == 2 and len(err) == 1 and "model directory not found: notamodel" in err[0]
    code, err = run_cli(capsys, "finetune", str(config), "--train.output_dir", str(tmp_path / "r"))
    assert code == 2 and "set exactly one of `model`" in err[0]
    assert not (tmp_path / "r").exists()
