"""benchmarks/objectives_small.py: processes started with --no-table share one --out, each family and seed run
by one of them (a claim is an exclusive file create), and a finished run is read, never claimed."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "objectives_small.py"


def _module():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def bench():
    return _module()


def _claim(path: str) -> bool:
    """In a fresh process (spawn): did this one claim the run?"""
    return not _module().claimed_elsewhere(Path(path))


def test_one_claim_per_run_among_processes(tmp_path):
    run = tmp_path / "bert" / "seed1"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        won = pool.map(_claim, [str(run)] * 8)
    assert sum(won) == 1 and (run / ".claimed").is_file()


def test_a_finished_run_is_read_not_claimed(bench, tmp_path):
    run = tmp_path / "ernie" / "seed0"
    assert bench.claimed_elsewhere(run) is False  # first: claimed here
    assert bench.claimed_elsewhere(run) is True  # second process: someone else's
    (run / "finetune").mkdir()
    (run / "finetune" / "report.json").write_text("{}")
    assert bench.claimed_elsewhere(run) is False  # done: every process reads it


def _args(bench, **changes):
    """The benchmark's options as parsed from a command line (the table's fine-tuning recipe unless changed)."""
    import argparse

    ap = argparse.ArgumentParser()
    bench.add_finetune_args(ap, lr=1e-3, examples=2000, length=64)
    args = ap.parse_args([])
    for key, value in changes.items():
        setattr(args, key, value)
    return args


def test_a_second_fine_tuning_recipe_gets_its_own_directory_claim_and_docs_block(bench, tmp_path):
    assert bench.finetune_dir(_args(bench)) == "finetune"  # the table's recipe keeps the recorded runs' place
    other = bench.finetune_dir(_args(bench, ft_examples=0))
    assert other == "finetune-allx64-lr0.001-e2-mean-hf0"
    run = tmp_path / "electra" / "seed0"
    (run / "finetune").mkdir(parents=True)
    (run / "finetune" / "report.json").write_text("{}")
    assert bench.claimed_elsewhere(run, other) is False  # the table's finished run does not stand in for this one
    assert bench.claimed_elsewhere(run, other) is True
    assert bench.claimed_elsewhere(run, "finetune") is False  # still read by the table's processes

    doc = tmp_path / "variants.md"
    bench.write_docs(doc, "TABLE A")
    bench.write_docs(doc, "TABLE B", other)
    bench.write_docs(doc, "TABLE A2")  # rewriting one block leaves the other as it was
    text = doc.read_text()
    assert "TABLE A2" in text and "TABLE B" in text and "TABLE A\n" not in text
    assert "<!-- results-allx64-lr0.001-e2-mean-hf0:start -->" in text


def test_gains_are_paired_by_seed_against_the_familys_own_random_arm(bench):
    rows = [
        {"family": "electra", "seed": 0, "dev_accuracy": 0.70},
        {"family": "electra", "seed": 1, "dev_accuracy": 0.60},
        {"family": "random_init-electra", "seed": 0, "dev_accuracy": 0.65},
        {"family": "random_init-electra", "seed": 1, "dev_accuracy": 0.50},
        {"family": "bert", "seed": 0, "dev_accuracy": 0.80},
        {"family": "random_init", "seed": 0, "dev_accuracy": 0.55},
    ]
    gains = bench.paired_gains(rows, {"electra": "random_init-electra", "bert": "random_init"})
    assert gains["electra"]["vs_random_arm"] == pytest.approx(0.075)  # (0.05 + 0.10) / 2
    assert gains["electra"]["vs_random_arm_sd"] == pytest.approx(0.0354, abs=1e-4)  # sd of 0.05 and 0.10
    assert gains["bert"] == {"vs_random_arm": pytest.approx(0.25), "vs_random_arm_sd": 0.0}


def test_each_family_is_measured_against_its_own_architecture_from_random_init(bench, tmp_path):
    """SpanBERT and ERNIE fine-tune BERT-mini's encoder with WordPiece: the table's random row is their twin.
    RoBERTa (byte-level BPE), ALBERT (shared layers, factorised word table) and ELECTRA (factorised word table)
    get their own random arm, built from their own recipe and tokenizer."""
    texts = [f"the {w} of the {v} is a word" for w in ("cat", "dog", "sun", "sea") for v in ("day", "year", "map")]
    shards = {}
    for kind, train in bench.TRAINERS.items():
        shards[kind] = tmp_path / kind
        train(texts, 300).save(shards[kind] / "tokenizer")
    arms = {name: bench.random_arm(name, shards) for name in bench.FAMILIES}
    assert arms == {
        "bert": "random_init",
        "roberta": "random_init-roberta",
        "albert": "random_init-albert",
        "spanbert": "random_init",
        "ernie": "random_init",
        "electra": "random_init-electra",
    }
    assert bench.random_init_spec("roberta", shards)["tokenizer"] == str(shards["bpe"] / "tokenizer")
    assert bench.random_init_spec("albert", shards)["model_config"]["variant"] == "albert"
    assert bench.random_init_spec("electra", shards)["model"] == ""  # random weights, not a checkpoint
