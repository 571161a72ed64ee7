"""GLUE and CLUE read from their official layouts: CoLA's headerless train/dev and headed test, MRPC's byte-order
mark, quotes left as text, QQP's short rows skipped, STS-B's float scores, MNLI's two dev sets, CLUE's "-" labels
dropped, WSC's marked spans, CSL's keyword lists; and one clear error for each kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertzoo.data.tasks.clue import CLUE_TASKS, read_clue, wsc_marked_text
from bertzoo.data.tasks.glue import GLUE_TASKS, read_glue
from bertzoo.errors import DataError

from helpers.suites import labelled, write_clue, write_glue


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> Path:
    return write_glue(tmp_path_factory.mktemp("glue") / "glue_data")


@pytest.fixture(scope="module")
def clue(tmp_path_factory) -> Path:
    return write_clue(tmp_path_factory.mktemp("clue") / "CLUEdataset")


def test_every_glue_split_reads(glue: Path) -> None:
    train, dev = labelled(40, 0), labelled(24, 1)  # the rows write_glue wrote
    for name, task in GLUE_TASKS.items():
        for split in task.splits:
            examples = read_glue(glue, name, split)
            assert all(("label" in e) != split.startswith("test") for e in examples), (name, split)
            assert all(("text_pair" in e) == bool(task.pair) for e in examples), (name, split)
    # The texts are the files' fields exactly: quotes are text, never quoting (csv.QUOTE_NONE).
    sst = read_glue(glue, "SST-2", "train")
    assert [e["text"] for e in sst] == [a for a, _, _ in train]
    assert any(e["text"].startswith('he said "') and e["text"].count('"') == 1 for e in sst)
    assert [e["label"] for e in sst] == [y for _, _, y in train]
    mrpc = read_glue(glue, "mrpc", "dev")  # the header starts with a byte-order mark
    assert [(e["text"], e["text_pair"], e["label"]) for e in mrpc] == dev


def test_cola_train_and_dev_have_no_header_but_test_has(glue: Path) -> None:
    train = read_glue(glue, "CoLA", "train")
    assert len(train) == 40  # the first line is an example, not a header
    assert train[0]["source"].endswith("train.tsv:1") and train[0]["label"] == labelled(40, 0)[0][2]
    test = read_glue(glue, "CoLA", "test")
    assert len(test) == 8 and test[0]["source"].endswith("test.tsv:2") and "label" not in test[0]


def test_qqp_skips_short_rows_and_stsb_scores_are_floats(glue: Path) -> None:
    lines = (glue / "QQP" / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 40 + 1  # header, rows, one row cut short
    assert len(read_glue(glue, "QQP", "train")) == 40
    sts = read_glue(glue, "STS-B", "dev")
    expected = [float(line.split("\t")[-1]) for line in (glue / "STS-B" / "dev.tsv").read_text().splitlines()[1:]]
    assert [e["label"] for e in sts] == expected and all(isinstance(e["label"], float) for e in sts)


def test_mnli_has_matched_and_mismatched_dev_sets(glue: Path) -> None:
    matched = read_glue(glue, "MNLI", "dev_matched")
    mismatched = read_glue(glue, "MNLI", "dev_mismatched")
    assert (len(matched), len(mismatched)) == (24, 30)
    assert {e["label"] for e in matched + mismatched} <= {"entailment", "neutral", "contradiction"}
    # gold_label is the last of 16 columns in dev (12 in train): read by name.
    last = (glue / "MNLI" / "dev_mismatched.tsv").read_text().splitlines()[1].split("\t")
    assert len(last) == 16 and mismatched[0]["label"] == last[-1] and mismatched[0]["text"] == last[8]
    with pytest.raises(DataError, match="no split 'dev'"):
        read_glue(glue, "MNLI", "dev")


def _copy(glue: Path, tmp_path: Path, task: str) -> Path:
    root = tmp_path / "glue"
    (root / task).mkdir(parents=True)
    for f in (glue / task).iterdir():
        (root / task / f.name).write_bytes(f.read_bytes())
    return root


def test_glue_errors_name_the_problem(glue: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="has no RTE/ folder"):
        read_glue(_copy(glue, tmp_path / "a", "SST-2"), "RTE", "train")
    root = _copy(glue, tmp_path / "b", "SST-2")
    (root / "SST-2" / "dev.tsv").unlink()
    with pytest.raises(DataError, match=r"dev\.tsv not found"):
        read_glue(root, "SST-2", "dev")
    lines = (root / "SST-2" / "train.tsv").read_text().splitlines()
    (root / "SST-2" / "train.tsv").write_text("\n".join(["text\tlabel", *lines[1:]]) + "\n")
    with pytest.raises(DataError, match="no column 'sentence'.*columns sentence, label"):
        read_glue(root, "SST-2", "train")
    # CoLA's train with a header (another layout): its first line's label is not 0/1.
    root = _copy(glue, tmp_path / "c", "CoLA")
    lines = (root / "CoLA" / "train.tsv").read_text().splitlines()
    (root / "CoLA" / "train.tsv").write_text("\n".join(["source\tlabel\tmark\tsentence", *lines]) + "\n")
    with pytest.raises(DataError, match=r"train\.tsv:1: label 'label' is not 0 or 1; .*no header"):
        read_glue(root, "CoLA", "train")
    root = _copy(glue, tmp_path / "d", "RTE")
    lines = (root / "RTE" / "train.tsv").read_text().splitlines()
    (root / "RTE" / "train.tsv").write_text("\n".join([*lines, "77\tonly one sentence"]) + "\n")
    with pytest.raises(DataError, match=r"train\.tsv:42: 2 field\(s\) but the header has 4"):
        read_glue(root, "RTE", "train")
    (root / "RTE" / "train.tsv").write_text("\n".join([*lines[:3], "5\ta\tb\tmaybe"]) + "\n")
    with pytest.raises(DataError, match="label 'maybe' is not one of entailment, not_entailment"):
        read_glue(root, "RTE", "train")
    with pytest.raises(DataError, match="unknown GLUE task 'SQuAD'"):
        read_glue(glue, "SQuAD", "train")


def test_every_clue_split_reads(clue: Path) -> None:
    for name, task in CLUE_TASKS.items():
        for split in ("train", "dev", "test"):
            examples = read_clue(clue, name, split)
            assert all(("label" in e) == (split != "test") for e in examples), (name, split)
            assert all(e.get("label", task.labels[0]) in task.labels for e in examples)
            assert all(("text_pair" in e) == task.pair for e in examples), (name, split)
    # CMNLI (one level down, in cmnli/cmnli_public/) and OCNLI drop the "-" labels: every fourth record.
    raw = [json.loads(line) for line in (clue / "cmnli" / "cmnli_public" / "train.json").read_text().splitlines()]
    kept = [r for r in raw if r["label"] != "-"]
    assert len(kept) < len(raw)
    assert [e["label"] for e in read_clue(clue, "CMNLI", "train")] == [r["label"] for r in kept]
    assert len(read_clue(clue, "ocnli", "dev")) == sum(1 for i in range(16) if i % 4 != 3)
    # CSL: the keywords joined by spaces, then the abstract.
    record = json.loads((clue / "csl" / "dev.json").read_text().splitlines()[0])
    first = read_clue(clue, "CSL", "dev")[0]
    assert (first["text"], first["text_pair"]) == (" ".join(record["keyword"]), record["abst"])
    # TNEWS keeps its label code (not label_desc).
    assert {e["label"] for e in read_clue(clue, "TNEWS", "train")} <= {"100", "102"}


def test_wsc_marks_the_noun_and_the_pronoun() -> None:
    text = "这时候放在床上枕头旁边的手机响了，现在它突然响了。"
    target = {"span1_index": 12, "span1_text": "手机", "span2_index": 19, "span2_text": "它"}
    assert wsc_marked_text(text, target, "x") == "这时候放在床上枕头旁边的_手机_响了，现在[它]突然响了。"
    # A pronoun before the noun: both marks still land around their spans (CLUE's baseline handles both orders).
    assert wsc_marked_text("它是床", {**target, "span1_index": 2, "span1_text": "床", "span2_index": 0}, "x") == (
        "[它]是_床_"
    )
    with pytest.raises(DataError, match="span1_text '枕头' is not at span1_index 12"):
        wsc_marked_text(text, {**target, "span1_text": "枕头"}, "x")


def test_clue_errors_name_the_problem(clue: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no folder for CLUE's AFQMC"):
        read_clue(tmp_path, "afqmc", "train")
    root = tmp_path / "c"
    (root / "afqmc").mkdir(parents=True)
    with pytest.raises(DataError, match=r"train\.json not found"):
        read_clue(root, "AFQMC", "train")
    (root / "afqmc" / "train.json").write_text('{"sentence1": "a", "label": "1"}\n')
    with pytest.raises(DataError, match=r"train\.json:1: no field 'sentence2'"):
        read_clue(root, "AFQMC", "train")
    (root / "afqmc" / "train.json").write_text('{"sentence1": "a", "sentence2": "b", "label": "1"}\n{oops\n')
    with pytest.raises(DataError, match=r"train\.json:2: not JSON"):
        read_clue(root, "AFQMC", "train")
    (root / "afqmc" / "train.json").write_text('{"sentence1": "a", "sentence2": "b", "label": "yes"}\n')
    with pytest.raises(DataError, match="label 'yes' is not one of 0, 1"):
        read_clue(root, "AFQMC", "train")
    with pytest.raises(DataError, match="unknown CLUE task 'CMRC'"):
        read_clue(clue, "CMRC", "train")
