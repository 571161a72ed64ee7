"""CLI smoke run: finetune -> evaluate -> predict -> convert to Hugging Face -> transformers reload
with equal logits -> convert back; and the Hugging Face export of every task head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from bertzoo.cli import main
from bertzoo.config import FinetuneConfig, TechniqueConfig, to_plain
from bertzoo.errors import CheckpointError

pytest.importorskip("bertzoo.tasks.classification", reason="needs the classification task")
transformers = pytest.importorskip("transformers")

from helpers.finetune import tiny_finetune_config, write_task_files  # noqa: E402

# Tiny models: one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


TEXTS = ["the apple and a fig", "a blue boat on the train", "pink", "it is red and it is gray and it is blue"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One CLI fine-tuning run shared by the tests below."""
    root = tmp_path_factory.mktemp("cli-ft")
    paths = write_task_files(root / "data")
    cfg = to_plain(tiny_finetune_config(paths, root / "ignored"))
    cfg["train"].pop("output_dir")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = root / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["finetune", str(config), "--train.output_dir", str(out), "--train.log_every=10"]) == 0
    finally:
        torch.set_num_threads(threads)
    return {"root": root, "out": out, "model": out / "model", "paths": paths}


def ours_logits(model_dir: Path, texts: list[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    from bertzoo.loading import load_finetuned

    task, model, _ = load_finetuned(model_dir)
    feats = task.featurize([{"text": t} for t in texts], "predict")
    batch = task.collate([feats[i] for i in range(len(texts))])
    with torch.no_grad():
        logits = model(batch).logits
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "token_type_ids": batch.token_type_ids,
    }
    return logits, inputs


def test_finetune_evaluate_predict(run, capsys) -> None:
    out, model_dir = run["out"], run["model"]
    report = json.loads((out / "report.json").read_text())
    for name in ("metrics.png", "confusion_matrix.png", "report.json", "model/config.json"):
        assert (out / name).is_file(), name
    capsys.readouterr()

    assert main(["evaluate", str(model_dir), "--split", "test", "--out", str(out / "eval.json")]) == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "fruit" in printed  # metrics and the per-label table
    evaluated = json.loads((out / "eval.json").read_text())
    assert evaluated["metrics"]["accuracy"] == pytest.approx(report["test"]["metrics"]["accuracy"])
    assert evaluated["report"]["confusion_matrix"] == report["test"]["report"]["confusion_matrix"]
    # The same file passed as --data scores the same.
    assert main(["evaluate", str(model_dir), "--data", run["paths"]["test"], "--out", str(out / "eval2.json")]) == 0
    assert json.loads((out / "eval2.json").read_text())["metrics"] == evaluated["metrics"]

    inp = out / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"x{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)) + "\n")
    assert (
        main(["predict", str(model_dir), "--input", str(inp), "--output", str(out / "pred.jsonl"), "--batch-size", "3"])
        == 0
    )
    rows = [json.loads(line) for line in (out / "pred.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["x0", "x1", "x2", "x3"]
    logits, _ = ours_logits(model_dir, TEXTS)
    labels = ["color", "fruit", "vehicle"]
    assert [r["label"] for r in rows] == [labels[i] for i in logits.argmax(-1).tolist()]
    assert rows[0]["label"] == "fruit"
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-6 for r in rows)


def test_export_reloads_in_transformers_with_equal_logits(run, capsys) -> None:
    model_dir, root = run["model"], run["root"]
    hf_dir = root / "hf"
    assert main(["convert", "--from", "bertzoo", "--to", "hf", str(model_dir), str(hf_dir)]) == 0
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    assert type(hf).__name__ == "BertForSequenceClassification"
    assert hf.config.id2label == {0: "color", 1: "fruit", 2: "vehicle"}
    assert hf.config.problem_type == "single_label_classification"
    ours, inputs = ours_logits(model_dir, TEXTS)
    with torch.no_grad():
        theirs = hf(**inputs).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)
    # transformers' own tokenizer, read from the exported directory, produces the same ids.
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    n = enc["input_ids"].shape[1]
    assert torch.equal(enc["input_ids"], inputs["input_ids"][:, :n])
    with torch.no_grad():
        torch.testing.assert_close(hf(**enc).logits, ours, atol=1e-5, rtol=0)

    # ... and back: a bertzoo fine-tuned model that evaluates like the original.
    back = root / "back"
    assert main(["convert", "--from", "hf", "--to", "bertzoo", str(hf_dir), str(back)]) == 0
    again, _ = ours_logits(back, TEXTS)
    torch.testing.assert_close(again, ours, atol=1e-6, rtol=0)
    capsys.readouterr()


def test_cli_errors_are_one_line(run, capsys, tmp_path) -> None:
    def err(*args: str) -> list[str]:
        code = main(list(args))
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2, lines
        return lines

    capsys.readouterr()
    lines = err("convert", "--from", "bertzoo", "--to", "bertzoo", str(run["model"]), str(tmp_path / "x"))
    assert len(lines) == 1 and "nothing to convert" in lines[0]
    lines = err("convert", "--from", "hf", "--to", "bertzoo", str(run["model"]), str(tmp_path / "y"))
    assert len(lines) == 1 and "--from bertzoo" in lines[0]
    lines = err("evaluate", str(run["root"] / "data" / "tok"))
    assert len(lines) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    lines = err("predict", str(run["model"]), "-i", str(bad), "-o", str(tmp_path / "o.jsonl"))
    assert len(lines) == 1 and "bad.jsonl:2" in lines[0]
    assert not (tmp_path / "o.jsonl").exists()  # nothing half-written
    lines = err("finetune", str(run["root"] / "tiny.yaml"), "--technique.adapter_sise", "8")
    assert len(lines) == 1 and "adapter_size" in lines[0]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"text": "a red fig", "text_pair": 5}', "'text_pair' is int; give the second text as a string"),
        ('{"text": "a red fig", "text_pair": ["x"]}', "'text_pair' is list; give the second text as a string"),
        ('{"text": "a red fig", "text_pair": null}', "'text_pair' is NoneType"),
        ('{"text": 3.5}', "prediction input needs a 'text' string"),
        ('{"text": {"t": "fig"}}', "prediction input needs a 'text' string"),
        ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),  # was: RecursionError
    ],
    ids=["pair-int", "pair-list", "pair-null", "text-float", "text-dict", "deep-nesting"],
)
def test_predict_rejects_bad_input_in_one_line(run, capsys, tmp_path, line, expected) -> None:
    inp = tmp_path / "in.jsonl"
    # The first line is a good pair: the task then reads every input as a pair, as a pair model does.
    inp.write_text('{"text": "the apple", "text_pair": "a fig"}\n' + line + "\n", encoding="utf-8")
    capsys.readouterr()
    code = main(["predict", str(run["model"]), "-i", str(inp), "-o", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {inp}:2") and expected in err[0], err  # names the file and line
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------------ every task head


def tiny_tokenizer_dir(tmp_path: Path) -> Path:
    return Path(write_task_files(tmp_path / "d")["tokenizer"])


@pytest.mark.parametrize(
    ("task", "auto", "labels"),
    [
        ("classification", "AutoModelForSequenceClassification", ["a", "b", "c"]),
        ("token_classification", "AutoModelForTokenClassification", ["PER", "LOC"]),
        ("multiple_choice", "AutoModelForMultipleChoice", []),
        ("qa", "AutoModelForQuestionAnswering", []),
    ],
)
def test_every_task_head_exports(tmp_path: Path, task: str, auto: str, labels: list[str]) -> None:
    from bertzoo.batch import Batch
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.hub import export_hf
    from bertzoo.tasks import TASKS
    from bertzoo.train.finetune import build_encoder, build_model

    task_cls = TASKS.get(task)
    if task_cls is None and task == "qa":
        task_cls = pytest.importorskip("bertzoo.tasks.qa").QATask
    if task_cls is None:
        pytest.skip(f"the {task} task is not available")
    tok_dir = tiny_tokenizer_dir(tmp_path)
    tok = Tokenizer.load(tok_dir)
    cfg = FinetuneConfig(
        task=task, model_config={"preset": "bert-tiny", "num_layers": 2, "max_position": 64}, tokenizer=str(tok_dir)
    )
    cfg.data.labels = labels
    cfg.data.max_seq_len = 32
    model = build_model(task_cls(cfg, tok), build_encoder(cfg, tok), cfg).eval()
    with torch.no_grad():  # a non-trivial head: default init would give near-zero logits
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    export_hf(model, tmp_path / "hf")
    hf = getattr(transformers, auto).from_pretrained(tmp_path / "hf").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, tok.vocab_size, (2, 3, 9) if task == "multiple_choice" else (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[..., 7:] = 0
    types = torch.zeros_like(ids)
    with torch.no_grad():
        ours = model(Batch(input_ids=ids, attention_mask=mask, token_type_ids=types)).logits
        out = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if task == "qa":
        theirs = torch.stack([out.start_logits, out.end_logits], dim=-1)
        torch.testing.assert_close(theirs[mask.bool()], ours[mask.bool()], atol=1e-5, rtol=0)
    elif task == "token_classification":
        torch.testing.assert_close(out.logits[mask.bool()], ours[mask.bool()], atol=1e-5, rtol=0)
        assert hf.config.id2label[0] == model.head_config["labels"][0]
    else:
        torch.testing.assert_close(out.logits, ours, atol=1e-5, rtol=0)


def test_heads_hugging_face_cannot_represent_are_refused(tmp_path: Path) -> None:
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.hub import export_hf
    from bertzoo.tasks import TASKS
    from bertzoo.tasks.techniques import apply_adapters
    from bertzoo.train.finetune import build_encoder, build_model

    tok_dir = tiny_tokenizer_dir(tmp_path)
    tok = Tokenizer.load(tok_dir)

    def model_with(task: str, technique: TechniqueConfig):
        cfg = FinetuneConfig(task=task, model_config={"preset": "bert-tiny", "num_layers": 2}, tokenizer=str(tok_dir))
        cfg.data.labels = ["PER"] if task == "token_classification" else ["a", "b"]
        cfg.technique = technique
        return build_model(TASKS[task](cfg, tok), build_encoder(cfg, tok), cfg)

    with pytest.raises(CheckpointError, match="BiLSTM"):
        export_hf(model_with("token_classification", TechniqueConfig(feature_head="bilstm")), tmp_path / "a")
    with pytest.raises(CheckpointError, match="top 2 layers"):
        export_hf(model_with("classification", TechniqueConfig(feature_layers=2)), tmp_path / "b")
    adapted = model_with("classification", TechniqueConfig())
    apply_adapters(adapted, 4)
    with pytest.raises(CheckpointError, match="adapters"):
        export_hf(adapted, tmp_path / "c")
