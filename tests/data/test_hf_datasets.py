"""Hugging Face datasets as input: `hf-dataset:` specs, saved directories and parquet / arrow / CSV / JSON files,
read by the corpus reader (one document per row, streamed) and the fine-tuning readers. Local data only: the
hub is switched off (HF_DATASETS_OFFLINE)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import bertzoo.data.text.hf_datasets as hf_datasets
from bertzoo.data.tasks.readers import read_examples
from bertzoo.data.text.corpus import ReadStats, read_documents
from bertzoo.errors import DataError

datasets = pytest.importorskip("datasets")

TEXTS = ["The first row.", "A second row here.", "Row three!"]
LABELS = ["neg", "pos", "neg"]
README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train.csv
  - split: validation
    path: en/validation.csv
- config_name: fr
  data_files:
  - split: train
    path: fr/train.csv
---
"""


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No hub: a hub name fails at once instead of reaching for the network."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def _labelled() -> object:
    features = datasets.Features({"body": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    return datasets.Dataset.from_dict({"body": TEXTS, "label": [0, 1, 0]}, features=features)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    """The same three labelled rows in every form, plus a DatasetDict and a directory of configs."""
    root = tmp_path_factory.mktemp("hf")
    ds = _labelled()
    paths = {}
    ds.save_to_disk(str(root / "saved"))
    paths["saved"] = str(root / "saved")
    paths["arrow"] = str(next((root / "saved").glob("*.arrow")))
    for fmt in ("parquet", "csv", "jsonl"):
        paths[fmt] = str(root / f"rows.{fmt}")
    ds.to_parquet(paths["parquet"])
    ds.to_csv(paths["csv"], index=False)
    ds.to_json(paths["jsonl"])
    dev = datasets.Dataset.from_dict({"body": ["dev row"], "label": [1]}, features=ds.features)
    datasets.DatasetDict({"train": ds, "validation": dev}).save_to_disk(str(root / "dict"))
    paths["dict"] = str(root / "dict")
    datasets.DatasetDict({"test": dev}).save_to_disk(str(root / "test-only"))
    paths["test-only"] = str(root / "test-only")
    # A script-free dataset directory: data files and a README that names two configs.
    repo = root / "repo"
    for config, split, rows in [
        ("en", "train", TEXTS),
        ("en", "validation", ["en dev"]),
        ("fr", "train", ["Bonjour."]),
    ]:
        (repo / config).mkdir(parents=True, exist_ok=True)
        table = datasets.Dataset.from_dict({"body": rows, "label": ["a"] * len(rows)})
        table.to_csv(str(repo / config / f"{split}.csv"), index=False)
    (repo / "README.md").write_text(README, encoding="utf-8")
    paths["repo"] = str(repo)
    return paths


# ---------------------------------------------------------------------------------------------
# Specs
# ---------------------------------------------------------------------------------------------


def test_parse_hub_names_configs_and_splits():
    spec = hf_datasets.parse_spec("hf-dataset:wikitext:wikitext-103-raw-v1:validation")
    assert (spec.name, spec.config, spec.split, spec.local) == ("wikitext", "wikitext-103-raw-v1", "validation", False)
    spec = hf_datasets.parse_spec("hf-dataset:stanfordnlp/imdb::test")
    assert (spec.name, spec.config, spec.split) == ("stanfordnlp/imdb", None, "test")
    spec = hf_datasets.parse_spec("hf-dataset:stanfordnlp/imdb")
    assert (spec.config, spec.split) == (None, None)
    for bad in ("hf-dataset:", "hf-dataset:a:b:c:d", "hf-dataset::x"):
        with pytest.raises(DataError, match="not a dataset spec"):
            hf_datasets.parse_spec(bad)


def test_parse_local_paths_win_and_may_contain_colons(tmp_path, data):
    odd = tmp_path / "corpus:v2"
    odd.mkdir()
    spec = hf_datasets.parse_spec(f"hf-dataset:{odd}:en:train")
    assert (spec.name, spec.config, spec.split, spec.local) == (str(odd), "en", "train", True)
    assert hf_datasets.parse_spec(f"hf-dataset:{odd}").name == str(odd)
    # Saved datasets and files have no configs: their one extra part is the split.
    spec = hf_datasets.parse_spec(f"hf-dataset:{data['dict']}:validation")
    assert (spec.config, spec.split) == (None, "validation")
    assert hf_datasets.parse_spec(f"hf-dataset:{data['parquet']}:train").split == "train"
    with pytest.raises(DataError, match="has no configs"):
        hf_datasets.parse_spec(f"hf-dataset:{data['dict']}:en:train")
    with pytest.raises(DataError, match="no such file or directory"):
        hf_datasets.parse_spec(f"hf-dataset:{tmp_path / 'missing'}")
    with pytest.raises(DataError, match="no such file or directory"):
        hf_datasets.parse_spec("hf-dataset:missing.parquet")


# ---------------------------------------------------------------------------------------------
# Corpus inputs: one document per row
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["parquet", "arrow", "csv", "saved", "spec-saved", "spec-jsonl", "spec-parquet"])
def test_corpus_reads_every_local_form(data, form):
    source = {
        "spec-saved": f"hf-dataset:{data['saved']}",
        "spec-jsonl": f"hf-dataset:{data['jsonl']}",
        "spec-parquet": f"hf-dataset:{data['parquet']}:train",
    }.get(form) or data[form]
    stats = ReadStats()
    assert list(read_documents([source], text_field="body", stats=stats)) == TEXTS
    assert (stats.documents, stats.files) == (3, 1)


def test_corpus_directory_config_and_split(data):
    repo = data["repo"]
    assert list(read_documents([f"hf-dataset:{repo}:en"], text_field="body")) == TEXTS  # default split: train
    assert list(read_documents([f"hf-dataset:{repo}:en:validation"], text_field="body")) == ["en dev"]
    assert list(read_documents([f"hf-dataset:{repo}:fr:train"], text_field="body")) == ["Bonjour."]
    assert list(read_documents([f"hf-dataset:{data['dict']}"], text_field="body")) == TEXTS
    assert list(read_documents([f"hf-dataset:{data['dict']}:validation"], text_field="body")) == ["dev row"]


def test_corpus_beside_text_files_and_forced_format(tmp_path, data):
    text = tmp_path / "more.txt"
    text.write_text("Plain text document.\n", encoding="utf-8")
    docs = read_documents([str(text), data["parquet"]], text_field="body")
    assert list(docs) == ["Plain text document.", *TEXTS]
    unnamed = tmp_path / "table.data"
    unnamed.write_bytes(Path(data["parquet"]).read_bytes())
    assert list(read_documents([str(unnamed)], fmt="parquet", text_field="body")) == TEXTS


def test_wrong_splits_and_configs_list_what_exists(data):
    with pytest.raises(DataError, match=r"no split 'test'; available splits: train, validation"):
        list(read_documents([f"hf-dataset:{data['repo']}:en:test"], text_field="body"))
    with pytest.raises(DataError, match=r"no split 'train'; available splits: test"):
        list(read_documents([f"hf-dataset:{data['test-only']}"], text_field="body"))
    with pytest.raises(DataError, match=r"no split 'validation'; available splits: train"):
        list(read_documents([f"hf-dataset:{data['parquet']}:validation"], text_field="body"))
    with pytest.raises(DataError, match=r"'de' not found.*'en', 'fr'"):
        list(read_documents([f"hf-dataset:{data['repo']}:de"], text_field="body"))
    with pytest.raises(DataError, match=r"Config name is missing.*'en', 'fr'"):
        list(read_documents([f"hf-dataset:{data['repo']}"], text_field="body"))


@pytest.mark.parametrize("form", ["parquet", "csv", "saved"])
def test_missing_column_lists_the_columns(data, form):
    with pytest.raises(DataError, match=r"no column 'text' \(columns: body, label\); .*--text-field") as err:
        list(read_documents([data[form]]))
    assert "\n" not in str(err.value)


def test_a_column_that_is_not_text(data):
    with pytest.raises(DataError, match="column 'label' holds int, not text"):
        list(read_documents([data["parquet"]], text_field="label"))


def test_unknown_hub_name_and_missing_package(data, monkeypatch):
    with pytest.raises(DataError, match="nobody/nothing: not found"):
        list(read_documents(["hf-dataset:nobody/nothing"]))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    for source in (f"hf-dataset:{data['saved']}", data["saved"]):
        with pytest.raises(DataError, match="needs the datasets package.*pip install datasets"):
            read_documents([source])  # refused before anything is read
    with pytest.raises(DataError, match="pip install datasets"):
        list(read_documents([data["parquet"]], text_field="body"))
    with pytest.raises(DataError, match="pip install datasets"):
        read_examples(data["parquet"], "text", text_column="body")


def test_a_hub_corpus_is_streamed_and_read_lazily(monkeypatch):
    """A large dataset is consumed batch by batch: the first document arrives after one batch has been
    produced, not after the whole dataset."""
    produced: list[int] = []
    calls: list[dict] = []

    def rows():
        for i in range(20_000):
            produced.append(i)
            yield {"text": f"Document number {i}."}

    def fake_load_dataset(name, config=None, **kwargs):
        calls.append({"name": name, "config": config, **kwargs})
        return datasets.IterableDatasetDict({"train": datasets.IterableDataset.from_generator(rows)})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(hf_datasets, "BATCH_ROWS", 50)
    docs = read_documents(["hf-dataset:someone/big-corpus:en"])
    assert next(docs) == "Document number 0."
    assert 1 <= len(produced) <= 100  # one batch of 50 (plus at most one read ahead), of 20,000
    assert next(docs) == "Document number 1."
    assert calls == [{"name": "someone/big-corpus", "config": "en", "streaming": True}]


def test_local_files_are_streamed(data, monkeypatch):
    seen: list[dict] = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    assert list(read_documents([data["parquet"]], text_field="body")) == TEXTS
    assert seen == [{"data_files": data["parquet"], "split": "train", "streaming": True}]
    # A saved dataset is memory-mapped and read in batches, not turned into Python objects whole.
    batches = list(hf_datasets.iter_batches(datasets.load_from_disk(data["saved"]), "saved", batch_size=2))
    assert [b["body"] for b in batches] == [TEXTS[:2], TEXTS[2:]]


# ---------------------------------------------------------------------------------------------
# Fine-tuning readers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["parquet", "arrow", "saved", "spec-saved", "spec-parquet"])
def test_task_reader_reads_labelled_rows(data, form):
    source = {"spec-saved": f"hf-dataset:{data['saved']}", "spec-parquet": f"hf-dataset:{data['parquet']}"}.get(
        form
    ) or data[form]
    examples = read_examples(source, "text", text_column="body")
    assert [(e["text"], e["label"]) for e in examples] == list(zip(TEXTS, LABELS, strict=True))  # ClassLabel names
    assert examples[1]["source"] == f"{source}[row 1]"


def test_task_reader_splits_follow_the_data_key(data):
    # data.dev finds the split named validation; an explicit split wins over the key.
    dev = read_examples(f"hf-dataset:{data['dict']}", "text", text_column="body", split="dev")
    assert [(e["text"], e["label"]) for e in dev] == [("dev row", "pos")]
    explicit = read_examples(f"hf-dataset:{data['dict']}:train", "text", text_column="body", split="dev")
    assert len(explicit) == 3
    en_dev = read_examples(f"hf-dataset:{data['repo']}:en", "text", text_column="body", split="dev")
    assert [e["text"] for e in en_dev] == ["en dev"]
    # A file is its own one split, whichever key names it.
    assert len(read_examples(data["parquet"], "text", text_column="body", split="test")) == 3
    with pytest.raises(DataError, match=r"no split 'test'; available splits: train, validation"):
        read_examples(f"hf-dataset:{data['dict']}", "text", text_column="body", split="test")


def test_task_reader_missing_column(data):
    with pytest.raises(DataError, match=r"no column 'sentence' \(columns: body, label\); set data.text_column"):
        read_examples(data["parquet"], "text", text_column="sentence")
    with pytest.raises(DataError, match=r"no column 'other'.*data.text_pair_column"):
        read_examples(data["parquet"], "text", text_column="body", text_pair_column="other")


def test_task_reader_pairs_tokens_and_choices(tmp_path):
    pairs = tmp_path / "pairs.parquet"
    datasets.Dataset.from_dict({"a": ["x"], "b": ["y"], "score": [0.5]}).to_parquet(str(pairs))
    ex = read_examples(pairs, "text", text_column="a", text_pair_column="b", label_column="score", label_type="float")
    assert (ex[0]["text"], ex[0]["text_pair"], ex[0]["label"]) == ("x", "y", 0.5)
    tags = datasets.Sequence(datasets.ClassLabel(names=["O", "B-X"]))
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")), "ner_tags": tags})
    tokens = tmp_path / "ner.parquet"
    datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": [[1, 0]]}, features=features).to_parquet(
        str(tokens)
    )
    assert read_examples(tokens, "tokens") == [
        {"tokens": ["a", "b"], "labels": ["B-X", "O"], "source": f"{tokens}[row 0]"}
    ]
    choices = tmp_path / "mc.arrow"
    table = datasets.Dataset.from_dict({"context": ["c"], "endings": [["e0", "e1"]], "label": [1]})
    table.save_to_disk(str(tmp_path / "mc"))
    choices.write_bytes(next((tmp_path / "mc").glob("*.arrow")).read_bytes())
    assert read_examples(choices, "choices")[0]["endings"] == ["e0", "e1"]
    assert read_examples(choices, "choices")[0]["label"] == 1
