"""Fine-tuning data readers: CSV/TSV/JSONL text, CoNLL and JSONL tokens, SWAG and JSONL multiple
choice, saved `datasets` directories; formats from extensions; errors that name file:line."""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest

from bertzoo.data.tasks import readers
from bertzoo.data.tasks.readers import (
    detect_format,
    read_choices_jsonl,
    read_conll,
    read_disk,
    read_examples,
    read_swag_csv,
    read_table,
    read_token_jsonl,
)
from bertzoo.errors import DataError


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


# -- CSV / TSV / JSONL ------------------------------------------------------------------------------


def test_csv_single_label_with_quotes_and_multiline_fields(tmp_path):
    p = write(tmp_path / "a.csv", 'text,label\n"hello, world",pos\n"two\nlines",neg\n\nplain,pos\n')
    ex = read_table(p)
    assert [e["text"] for e in ex] == ["hello, world", "two\nlines", "plain"]
    assert [e["label"] for e in ex] == ["pos", "neg", "pos"]
    # The multi-line row starts on line 3; the next row is on line 6 after a blank line.
    assert [e["source"] for e in ex] == [f"{p}:2", f"{p}:3", f"{p}:6"]
    assert "text_pair" not in ex[0]


def test_csv_pairs_and_custom_columns(tmp_path):
    p = write(tmp_path / "p.csv", "q,a,y\nwho,me,1\nwhy,because,0\n")
    ex = read_table(p, text_column="q", text_pair_column="a", label_column="y")
    assert ex[0] == {"text": "who", "text_pair": "me", "label": "1", "source": f"{p}:2"}


def test_multi_label_csv_and_jsonl(tmp_path):
    p = write(tmp_path / "m.csv", "text,label\nx,a|b\ny, c \nz,\n")
    assert [e["label"] for e in read_table(p, label_type="multi")] == [["a", "b"], ["c"], []]
    j = write(tmp_path / "m.jsonl", '{"text": "x", "label": ["a", "b"]}\n{"text": "y", "label": "c|d"}\n')
    assert [e["label"] for e in read_table(j, label_type="multi")] == [["a", "b"], ["c", "d"]]


def test_regression_labels_and_bad_number(tmp_path):
    p = write(tmp_path / "r.jsonl", '{"text": "a", "label": 3.5}\n{"text": "b", "label": "2"}\n')
    assert [e["label"] for e in read_table(p, label_type="float")] == [3.5, 2.0]
    bad = write(tmp_path / "bad.csv", "text,label\na,1.0\nb,high\n")
    with pytest.raises(DataError, match=rf"{bad}:3: label 'high' is not a number"):
        read_table(bad, label_type="float")


def test_unlabelled_file_has_no_label_key(tmp_path):
    p = write(tmp_path / "u.csv", "text\nhello\n")
    assert read_table(p) == [{"text": "hello", "source": f"{p}:2"}]


def test_csv_errors_name_file_and_line(tmp_path):
    p = write(tmp_path / "e.csv", "text,label\nok,pos\ntoo,many,fields\n")
    with pytest.raises(DataError, match=rf"{p}:3: 3 field\(s\) but the header has 2"):
        read_table(p)
    p2 = write(tmp_path / "col.csv", "sentence,label\nhi,pos\n")
    with pytest.raises(DataError, match=rf"{p2}:2: no column 'text' \(columns: label, sentence\)"):
        read_table(p2)
    p3 = write(tmp_path / "empty_label.csv", "text,label\nhi,\n")
    with pytest.raises(DataError, match=rf"{p3}:2: empty label"):
        read_table(p3)
    p4 = write(tmp_path / "empty.csv", "")
    with pytest.raises(DataError, match="empty"):
        read_table(p4)


def test_tsv_reads_quotes_as_text(tmp_path):
    p = write(tmp_path / "g.tsv", 'sentence\tlabel\nhe said "hi\t1\n')
    ex = read_table(p, text_column="sentence")
    assert ex[0]["text"] == 'he said "hi' and ex[0]["label"] == "1"
    bad = write(tmp_path / "b.tsv", "sentence\tlabel\na\tb\tc\n")
    with pytest.raises(DataError, match=rf"{bad}:2:"):
        read_table(bad, text_column="sentence")


def test_jsonl_errors_name_line(tmp_path):
    p = write(tmp_path / "e.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "b", "label": \n')
    with pytest.raises(DataError, match=rf"{p}:3: invalid JSON"):
        read_table(p)
    p2 = write(tmp_path / "e2.jsonl", '["not", "an", "object"]\n')
    with pytest.raises(DataError, match=rf"{p2}:1: expected a JSON object"):
        read_table(p2)
    p3 = write(tmp_path / "e3.jsonl", '{"text": 5, "label": "x"}\n')
    with pytest.raises(DataError, match=rf"{p3}:1: column 'text' is int"):
        read_table(p3)
    p4 = write(tmp_path / "e4.jsonl", '{"text": "a", "label": ["x", "y"]}\n')
    with pytest.raises(DataError, match=rf"{p4}:1: .*multi_label"):
        read_table(p4)


def test_invalid_utf8_is_replaced_and_reported(tmp_path, caplog):
    p = tmp_path / "bad.csv"
    p.write_bytes(b"text,label\ncaf\xe9,pos\n")
    with caplog.at_level(logging.WARNING, logger="bertzoo.data.tasks.readers"):
        ex = read_table(p)
    assert ex[0]["text"] == "caf\ufffd"
    assert f"{p}:2" in caplog.text


# -- CoNLL / token JSONL -------------------------------------------------------------------------


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP B-NP I-PER
"""


def test_conll_reads_last_column_and_skips_docstart(tmp_path):
    p = write(tmp_path / "a.conll", CONLL)
    ex = read_conll(p)
    assert ex == [
        {"tokens": ["EU", "rejects", "German"], "labels": ["B-ORG", "O", "B-MISC"], "source": f"{p}:3"},
        {"tokens": ["Peter", "Blackburn"], "labels": ["B-PER", "I-PER"], "source": f"{p}:7"},
    ]


def test_conll_unlabelled_and_mixed(tmp_path):
    p = write(tmp_path / "u.txt", "hello\nworld\n\nagain\n")
    assert read_conll(p) == [
        {"tokens": ["hello", "world"], "source": f"{p}:1"},
        {"tokens": ["again"], "source": f"{p}:4"},
    ]
    bad = write(tmp_path / "m.conll", "a O\nb\n")
    with pytest.raises(DataError, match=rf"{bad}:2: an unlabelled token"):
        read_conll(bad)
    with pytest.raises(DataError, match="no sentences"):
        read_conll(write(tmp_path / "e.conll", "-DOCSTART- O\n\n"))


def test_token_jsonl(tmp_path):
    p = write(tmp_path / "t.jsonl", '{"tokens": ["a", "b"], "ner_tags": ["B-X", "O"]}\n{"words": ["c"]}\n')
    ex = read_token_jsonl(p)
    assert ex[0]["tokens"] == ["a", "b"] and ex[0]["labels"] == ["B-X", "O"]
    assert ex[1] == {"tokens": ["c"], "source": f"{p}:2"}
    bad = write(tmp_path / "b.jsonl", '{"tokens": ["a"]}\n{"tokens": ["a", "b"], "labels": ["O"]}\n')
    with pytest.raises(DataError, match=rf"{bad}:2: 2 tokens but 1 labels"):
        read_token_jsonl(bad)
    no_tokens = write(tmp_path / "c.jsonl", '{"text": "a b"}\n')
    with pytest.raises(DataError, match=rf"{no_tokens}:1: no list of tokens"):
        read_token_jsonl(no_tokens, text_column="text")


# -- multiple choice -----------------------------------------------------------------------------

SWAG = (
    ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    "0,lsmdc0001,5,Someone x,Students lower their eyes nervously.,She,gold,"
    'pats her shoulder.,turns away.,smiles.,"runs, fast.",2\n'
)


def test_swag_csv(tmp_path):
    p = write(tmp_path / "train.csv", SWAG)
    (ex,) = read_swag_csv(p)
    assert ex["context"] == "Students lower their eyes nervously."
    assert ex["endings"] == ["She pats her shoulder.", "She turns away.", "She smiles.", "She runs, fast."]
    assert ex["label"] == 2 and ex["source"] == f"{p}:2"
    # SWAG's test split has no label column: unlabelled items.
    test = write(tmp_path / "test.csv", SWAG.replace(",label\n", "\n", 1).replace(",2\n", "\n"))
    assert "label" not in read_swag_csv(test)[0]
    bad = write(tmp_path / "bad.csv", SWAG.replace(",2\n", ",7\n"))
    with pytest.raises(DataError, match=rf"{bad}:2: label '7' is not an ending index in 0..3"):
        read_swag_csv(bad)
    with pytest.raises(DataError, match="sent1, sent2, ending0"):
        read_swag_csv(write(tmp_path / "x.csv", "a,b\n1,2\n"))


def test_choices_jsonl(tmp_path):
    p = write(tmp_path / "mc.jsonl", '{"context": "c", "endings": ["a", "b", "c"], "label": 1}\n')
    assert read_choices_jsonl(p) == [{"context": "c", "endings": ["a", "b", "c"], "label": 1, "source": f"{p}:1"}]
    bad = write(tmp_path / "bad.jsonl", '{"context": "c", "endings": ["a"], "label": 0}\n{"context": "c"}\n')
    with pytest.raises(DataError, match=rf"{bad}:2: multiple-choice JSONL needs"):
        read_choices_jsonl(bad)


# -- detection and dispatch ----------------------------------------------------------------------


def test_detect_format(tmp_path):
    assert detect_format("x.csv") == "csv"
    assert detect_format("x.TSV") == "tsv"
    assert detect_format("x.jsonl") == "jsonl" and detect_format("x.json") == "jsonl"
    assert detect_format("x.conll", "tokens") == "conll" and detect_format("x.txt", "tokens") == "conll"
    assert detect_format("x.csv", "choices") == "swag"
    assert detect_format(tmp_path) == "disk"
    with pytest.raises(DataError, match="set data.format"):
        detect_format("x.txt", "text")
    with pytest.raises(DataError, match="set data.format"):
        detect_format("x.xlsx")
    assert detect_format("x.parquet") == "parquet" and detect_format("x.arrow", "tokens") == "arrow"


def test_read_examples_dispatch_and_errors(tmp_path):
    p = write(tmp_path / "a.csv", "text,label\nhi,pos\n")
    assert read_examples(p, "text")[0]["label"] == "pos"
    conll = write(tmp_path / "a.conll", CONLL)
    assert len(read_examples(conll, "tokens")) == 2
    mc = write(tmp_path / "mc.csv", SWAG)
    assert read_examples(mc, "choices")[0]["label"] == 2
    assert read_examples(mc, "choices", "swag")[0]["label"] == 2
    jl = write(tmp_path / "mc.jsonl", '{"context": "c", "endings": ["a", "b"], "label": 1}\n')
    assert read_examples(jl, "choices", "swag")[0]["label"] == 1
    with pytest.raises(DataError, match="format 'conll' does not hold text examples"):
        read_examples(conll, "text", "conll")
    with pytest.raises(DataError, match="data file not found"):
        read_examples(tmp_path / "missing.csv", "text")
    assert set(readers.READERS) >= {("text", "csv"), ("tokens", "conll"), ("choices", "swag")}


def test_disk_without_datasets_names_the_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    with pytest.raises(DataError, match="pip install datasets"):
        read_disk(tmp_path)
    with pytest.raises(DataError, match="pip install datasets"):
        read_examples(tmp_path, "text")


def test_disk_round_trip(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    ds = datasets.Dataset.from_dict({"text": ["bad", "good"], "label": [0, 1]}, features=features)
    ds.save_to_disk(str(tmp_path / "ds"))
    ex = read_examples(tmp_path / "ds", "text")
    assert [(e["text"], e["label"]) for e in ex] == [("bad", "neg"), ("good", "pos")]
    datasets.DatasetDict({"train": ds, "validation": ds}).save_to_disk(str(tmp_path / "dd"))
    assert len(read_examples(tmp_path / "dd", "text", split="dev")) == 2
    tokens = datasets.Dataset.from_dict(
        {"tokens": [["a", "b"]], "ner_tags": [[1, 0]]},
        features=datasets.Features(
            {
                "tokens": datasets.Sequence(datasets.Value("string")),
                "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-X"])),
            }
        ),
    )
    tokens.save_to_disk(str(tmp_path / "tok"))
    assert read_examples(tmp_path / "tok", "tokens")[0]["labels"] == ["B-X", "O"]
    json.dumps(ex)  # plain, JSON-able dicts
