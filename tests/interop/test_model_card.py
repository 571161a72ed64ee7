"""Model cards (`bertzoo.interop.model_card`): every model directory bertzoo writes (a pretraining run's final/, a
fine-tuned model/, a Hugging Face export or conversion) carries a README.md that the Hub's own parser reads, with
what is known about the model and its run, and nothing made up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from bertzoo.cli import main
from bertzoo.config import ModelConfig
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.hub import export_hf
from bertzoo.interop.model_card import (
    CARD_FILE,
    USAGE_BEGIN,
    ensure_model_card,
    render_model_card,
    write_model_card,
)
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM
from bertzoo.train.pretrain import pretrain

from helpers.cards import HUB_START, finetuned_from_hub, serve_from_hub
from helpers.pretrain import tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def card_of(directory: Path) -> ModelCard:
    return ModelCard.load(directory / CARD_FILE)


@pytest.fixture(scope="module")
def wiki_run(synthetic_docs, synthetic_tokenizer, tmp_path_factory) -> Path:
    """A 3-step tiny BERT run on shards whose meta.json says they came from builtin:wiki-en, with held-out shards."""
    root = tmp_path_factory.mktemp("wiki-run")
    prepare_shards(synthetic_docs[:300], synthetic_tokenizer, root / "shards", progress=False, source="builtin:wiki-en")
    prepare_shards(synthetic_docs[300:360], synthetic_tokenizer, root / "held-out", progress=False)
    cfg = tiny_config(root / "shards", root / "bert-tiny-wiki", max_steps=3, save_every=0)
    cfg.data.eval_shards, cfg.data.eval_batches = str(root / "held-out"), 2
    pretrain(cfg)
    return root / "bert-tiny-wiki"


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory) -> Path:
    return finetuned_from_hub(tmp_path_factory.mktemp("finetuned"))[0]


def test_a_pretraining_runs_final_directory_has_a_card_with_its_data_config_and_results(wiki_run) -> None:
    card = card_of(wiki_run / "final")
    data = card.data
    assert data.library_name == "bertzoo" and data.pipeline_tag == "fill-mask"
    assert data.tags == ["bertzoo", "bert", "fill-mask"]
    assert data.language == ["en"] and data.datasets == ["wiki-en"]  # from the shards' meta.json
    assert data.metrics == ["accuracy", "perplexity"]  # held-out masked-LM accuracy and perplexity
    assert data.base_model is None  # random init
    text = card.text
    summary = json.loads((wiki_run / "summary.json").read_text())
    shown = f"| `eval_mlm_acc` | {summary['final_metrics']['eval_mlm_acc']:.4f} | held-out data |"
    assert shown in text and "`unigram_mlm_acc`" in text  # the results and the baseline beside them
    assert "# bert-tiny-wiki" in text and "2 layers × 32 hidden" in text and "random initialisation (seed 42)" in text
    assert "| steps | 3 |" in text and "| learning rate | 0.001, linear schedule, warmup 4 |" in text
    assert '"max_seq_len": 48' in text  # the full run config, in its collapsible block
    assert f'load_pretraining("{wiki_run / "final"}")' in text  # bertzoo, then transformers after a conversion
    assert "bertzoo convert --from bertzoo --to hf" in text and "AutoModelForPreTraining" in text


def test_a_continued_run_names_its_hub_start_as_base_model(wiki_run, synthetic_shards, tmp_path, monkeypatch) -> None:
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(wiki_run / "final"), str(tmp_path / "hf")]) == 0
    serve_from_hub(monkeypatch, {"someone/tiny-bert": tmp_path / "hf"})
    cfg = tiny_config(synthetic_shards, tmp_path / "continued", max_steps=2, save_every=0)
    cfg.init = "hf:someone/tiny-bert"
    pretrain(cfg)
    card = card_of(tmp_path / "continued" / "final")
    assert card.data.base_model == "someone/tiny-bert"
    assert "[someone/tiny-bert](https://huggingface.co/someone/tiny-bert)" in card.text
    assert card.data.datasets == ["shards"]  # shards without a recorded source: named by their directory


def test_a_local_start_is_described_but_not_a_base_model(wiki_run, synthetic_shards, tmp_path) -> None:
    cfg = tiny_config(synthetic_shards, tmp_path / "continued", max_steps=2, save_every=0)
    cfg.init = str(wiki_run / "final")
    pretrain(cfg)
    card = card_of(tmp_path / "continued" / "final")
    # The Hub links base_model to a model page and refuses what is not a Hub id, so a local path stays in the text.
    assert card.data.base_model is None and f"`{wiki_run / 'final'}` (a local checkpoint)" in card.text
    assert card.data.language == ["en"]  # the start's own card says so; these shards do not


def test_a_finetuned_model_has_its_report_metrics_and_hub_start(finetuned) -> None:
    card = card_of(finetuned / "model")
    data = card.data
    assert data.library_name == "bertzoo" and data.pipeline_tag == "text-classification"
    assert data.tags == ["bertzoo", "bert", "text-classification"]
    assert data.base_model == HUB_START and data.datasets == ["train.jsonl"]
    assert data.language is None  # user files and a Hub start: unknown, so left out
    assert data.metrics == ["accuracy", "macro_f1", "micro_f1", "weighted_f1"]  # not the loss
    report = json.loads((finetuned / "report.json").read_text())
    dev, test = report["dev"]["metrics"]["accuracy"], report["test"]["metrics"]["accuracy"]
    assert f"| `accuracy` | {dev:.4f} | {test:.4f} |" in card.text
    assert (
        "labels | 3: `color`, `fruit`, `vehicle`" in card.text
        and "| task | classification (single_label) |" in card.text
    )
    assert f'load_finetuned("{finetuned / "model"}")' in card.text and "bertzoo predict" in card.text


def test_the_loops_final_and_best_directories_carry_the_runs_card_with_its_results(finetuned) -> None:
    report = json.loads((finetuned / "report.json").read_text())
    dev = report["dev"]["metrics"]["accuracy"]
    for name in ("final", "best"):
        card = card_of(finetuned / name)
        assert card.data.library_name == "bertzoo" and card.data.base_model == HUB_START, name
        assert f"| `accuracy` | {dev:.4f} |" in card.text, name


def test_a_conversion_to_hf_carries_the_source_runs_card(finetuned, tmp_path) -> None:
    out = tmp_path / "hf"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(finetuned / "model"), str(out)]) == 0
    card = card_of(out)
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-classification"
    assert "bertzoo" in data.tags and data.base_model == HUB_START and "accuracy" in data.metrics
    assert f"Converted from `{finetuned / 'model'}`" in card.text and "`BertForSequenceClassification`" in card.text
    assert f'AutoModelForSequenceClassification.from_pretrained("{out}")' in card.text


def test_export_hf_writes_a_card_for_a_model_without_a_run(tmp_path) -> None:
    config = ModelConfig(vocab_size=99, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=37)
    export_hf(MaskedLM(Encoder(config), sentence_task=None), tmp_path / "mlm")
    card = card_of(tmp_path / "mlm")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "fill-mask"
    assert card.data.base_model is None and card.data.datasets is None and "## Training" not in card.text
    assert "AutoModelForMaskedLM" in card.text and "`BertForMaskedLM`" in card.text


def test_a_card_never_fails_the_save(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{damaged", encoding="utf-8")
    with pytest.warns(UserWarning, match="could not write the model card"):
        assert write_model_card(tmp_path) is None
    assert not (tmp_path / CARD_FILE).exists()


def test_push_points_a_generated_card_at_the_repository_and_keeps_a_hand_written_one(finetuned, tmp_path) -> None:
    model = Path(shutil.copytree(finetuned / "model", tmp_path / "run" / "model"))
    generated = card_of(model)
    text = ensure_model_card(model, "org/topics").read_text(encoding="utf-8")
    assert 'load_finetuned("hf:org/topics")' in text and "bertzoo predict hf:org/topics" in text
    before, after = (t.split(USAGE_BEGIN)[0] for t in (generated.content, text))
    assert before == after  # only the usage part changed
    (model / CARD_FILE).write_text("# My model\n", encoding="utf-8")
    ensure_model_card(model, "org/topics")
    assert (model / CARD_FILE).read_text(encoding="utf-8") == "# My model\n"
    assert render_model_card(finetuned / "model", repo_id="org/topics").startswith("---\nlibrary_name: bertzoo\n")


def test_a_cards_datasets_name_hub_datasets_by_id_and_local_ones_by_file_name(tmp_path) -> None:
    from bertzoo.interop.model_card import datasets_of

    local = tmp_path / "reviews.parquet"
    local.write_bytes(b"")
    data = {
        "train": f"hf-dataset:someone/clinical-notes:v2:train,hf-dataset:{local}",
        "mixture": [{"dataset": "builtin:wiki-topics:train"}],
    }
    assert datasets_of({"data": data}) == ["someone/clinical-notes", "reviews.parquet", "wiki-topics"]
