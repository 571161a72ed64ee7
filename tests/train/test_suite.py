"""`bertzoo.train.suite`: the best learning rate per seed, the median and spread over seeds, the aggregate, the
side-by-side comparison and the reuse of finished runs (with a task row that scores without training); then a
tiny GLUE run whose every metric is checked against scikit-learn / scipy on the kept models' predictions."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

import bertzoo.train.suite_tasks as suite_tasks
from bertzoo.errors import ConfigError
from bertzoo.loading import read_config
from bertzoo.train.suite import SuiteOptions, run_suite, start_overrides
from bertzoo.train.suite_tasks import BUILTIN, SUITES, Metric, Recipe, Suite, SuiteTask

from helpers.suites import save_tiny_model, write_glue

sklearn_metrics = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")

pytestmark = pytest.mark.usefixtures("one_thread")

# Dev scores the stand-in task returns: (model, seed, lr) -> (metric a, metric b).
SCORES = {
    ("A", 0, 1e-3): (0.50, 0.70),
    ("A", 0, 2e-3): (0.60, 0.80),  # seed 0: 2e-3 wins (0.70 > 0.60)
    ("A", 1, 1e-3): (0.90, 0.90),  # seed 1: 1e-3 wins (0.90 > 0.40)
    ("A", 1, 2e-3): (0.40, 0.40),
    ("A", 2, 1e-3): (0.20, 0.40),  # seed 2: 2e-3 wins (0.50 > 0.30)
    ("A", 2, 2e-3): (0.50, 0.50),
    ("A", 0, 3e-3): (0.95, 0.95),  # only in the widened grid: seed 0's best once it runs
    ("B", 0, 1e-3): (0.10, 0.10),
    ("B", 0, 2e-3): (0.00, 0.10),
    ("B", 1, 1e-3): (0.30, 0.10),
    ("B", 1, 2e-3): (0.30, 0.30),
    ("B", 2, 1e-3): (0.20, 0.20),
    ("B", 2, 2e-3): (0.20, 0.20),  # a tie: the first rate of the grid is kept
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    return {"A": str(save_tiny_model(root / "a", seed=1)), "B": f"random:{save_tiny_model(root / 'b', seed=2)}"}


def stand_in_suite(models: dict[str, str], calls: list[tuple]) -> Suite:
    names = {spec: key for key, spec in models.items()}

    def score(task: SuiteTask, job) -> dict[str, float]:
        calls.append((job.model, job.seed, job.lr))
        a, b = SCORES[(names[job.model], job.seed, job.lr)]
        return {"a": a, "b": b} if task.name == "two" else {"a": a}

    def no_data(root, split):
        return [{"text": "x", "label": "0"}]

    recipe = Recipe(lrs=(1e-3, 2e-3), epochs=1, batch_size=8, max_seq_len=16)
    splits = {"train": "train", "dev": "dev"}
    one = SuiteTask("one", no_data, splits, (Metric("a", "accuracy"),), recipe, run=score)
    two = SuiteTask("two", no_data, splits, (Metric("a", "accuracy"), Metric("b", "f1")), recipe, run=score)
    return Suite("stand-in", "Stand-in", (one, two), needs_data=False)


def test_best_rate_per_seed_median_spread_aggregate_and_comparison(models, tmp_path, monkeypatch) -> None:
    calls: list[tuple] = []
    monkeypatch.setitem(SUITES, "stand-in", stand_in_suite(models, calls))
    out = tmp_path / "out"
    result = run_suite("stand-in", [models["A"], models["B"]], out, options=SuiteOptions(seeds=3), say=lambda _: None)
    assert len(calls) == 2 * 2 * 3 * 2  # models x tasks x seeds x rates

    a_two = result["models"][0]["tasks"]["two"]
    assert [s["lr"] for s in a_two["seeds"]] == [2e-3, 1e-3, 2e-3]
    seed_scores = [0.70, 0.90, 0.50]  # (a + b) / 2 of each seed's best rate
    assert [s["score"] for s in a_two["seeds"]] == pytest.approx(seed_scores)
    assert a_two["score"]["median"] == pytest.approx(0.70)
    assert (a_two["score"]["min"], a_two["score"]["max"]) == pytest.approx((0.50, 0.90))
    assert a_two["score"]["sd"] == pytest.approx(statistics.stdev(seed_scores))
    assert a_two["metric_medians"] == pytest.approx({"a": 0.60, "b": 0.80})
    assert a_two["seeds"][1]["grid"] == pytest.approx({"0.001": 0.90, "0.002": 0.40})
    b_two = result["models"][1]["tasks"]["two"]
    assert [s["lr"] for s in b_two["seeds"]] == [1e-3, 2e-3, 1e-3]  # seed 2 is a tie: the first rate

    # Task "one" scores metric a alone: A's seeds pick 2e-3 (0.60), 1e-3 (0.90), 2e-3 (0.50) -> median 0.60.
    assert result["models"][0]["tasks"]["one"]["score"]["median"] == pytest.approx(0.60)
    aggregate = result["models"][0]["aggregate"]
    assert aggregate["score"] == pytest.approx((0.60 + 0.70) / 2)
    # Per seed: the mean over tasks of that seed's score.
    assert (aggregate["min"], aggregate["max"]) == pytest.approx(((0.50 + 0.50) / 2, (0.90 + 0.90) / 2))

    rows = {r["task"]: r for r in result["comparison"]["rows"]}
    assert result["comparison"]["baseline"] == models["A"]
    b_one = result["models"][1]["tasks"]["one"]["score"]["median"]  # B's "one": 0.10, 0.30, 0.20 -> 0.20
    assert b_one == pytest.approx(0.20)
    assert rows["one"]["delta"][models["B"]] == pytest.approx(0.20 - 0.60)
    assert rows["aggregate"]["delta"][models["B"]] == pytest.approx(
        result["models"][1]["aggregate"]["score"] - aggregate["score"]
    )

    saved = json.loads((out / "suite.json").read_text())
    assert saved["models"][0]["tasks"]["two"]["score"]["median"] == pytest.approx(0.70)
    md = (out / "suite.md").read_text()
    assert "| two | a 60.0, b 80.0 | 70.0 | 50.0–90.0 |" in md
    assert "| one | 60.0 | 20.0 | -40.0 |" in md
    page = (out / "suite.html").read_text()
    assert "data:image/png;base64," in page and "http" not in page.replace("data:image", "")

    # Finished runs are reused; a changed budget makes new ones.
    run_suite("stand-in", [models["A"], models["B"]], out, options=SuiteOptions(seeds=3), say=lambda _: None)
    assert len(calls) == 24
    run_suite("stand-in", [models["A"]], out, options=SuiteOptions(seeds=1, max_train_examples=5), say=lambda _: None)
    assert len(calls) == 24 + 2 * 2
    wider = SuiteOptions(seeds=1, max_train_examples=5, lrs=[1e-3, 2e-3, 3e-3])  # only the new rate runs
    widened = run_suite("stand-in", [models["A"]], out, options=wider, say=lambda _: None)
    assert len(calls) == 24 + 2 * 2 + 2
    assert widened["models"][0]["tasks"]["two"]["score"]["median"] == pytest.approx(0.95)
    save_tiny_model(Path(models["A"]), seed=1)  # a model written anew under the same path: new runs
    run_suite("stand-in", [models["A"]], out, options=SuiteOptions(seeds=1, max_train_examples=5), say=lambda _: None)
    assert len(calls) == 24 + 2 * 2 + 2 + 2 * 2


def test_random_init_is_the_same_architecture_and_tokenizer(models) -> None:
    path = models["B"].removeprefix("random:")
    start = start_overrides(models["B"])
    assert start["model"] == "" and start["tokenizer"] == path
    assert start["model_config"]["hidden_size"] == read_config(path)[1].hidden_size == 32
    assert start_overrides(models["A"]) == {"model": models["A"]}
    with pytest.raises(ConfigError, match="random: names no model"):
        start_overrides("random:")


def test_options_and_inputs_are_checked(models, tmp_path) -> None:
    with pytest.raises(ConfigError, match="give one of them"):
        SuiteOptions(epochs=1, max_steps=3)
    with pytest.raises(ConfigError, match="unknown suite 'superglue'"):
        run_suite("superglue", [models["A"]], tmp_path)
    with pytest.raises(ConfigError, match="pass --data DIR"):
        run_suite("glue", [models["A"]], tmp_path)
    with pytest.raises(ConfigError, match="glue has no task 'SQuAD'"):
        run_suite("glue", [models["A"]], tmp_path, data=tmp_path, options=SuiteOptions(tasks=["SQuAD"]))
    with pytest.raises(ConfigError, match="reads no files"):
        run_suite("builtin", [models["A"]], tmp_path, data=tmp_path)


def test_builtin_rows_name_builtin_tasks() -> None:
    from bertzoo.data.tasks.builtin import BUILTIN_TASKS

    assert [t.name for t in BUILTIN.tasks] == ["wiki-topics", "chinese-sentiment", "peoples-daily-ner"]
    assert all(BUILTIN_TASKS[t.name].task == t.task for t in BUILTIN.tasks)
    assert {m.measure for t in suite_tasks.GLUE.tasks for m in t.metrics} == {
        "mcc",
        "accuracy",
        "positive_f1",
        "pearson",
        "spearman",
    }
    assert suite_tasks.GLUE_RECIPE.lrs == (2e-5, 3e-5, 5e-5)


def _predictions(run: Path, data: Path) -> tuple[list, list]:
    from bertzoo.train.evaluate import evaluate_model

    result, _ = evaluate_model(run / "model", data=str(data), device="cpu")
    gold = [p["gold"] for p in result.predictions]
    pred = [p.get("label", p.get("score")) for p in result.predictions]
    return gold, pred


def test_glue_metrics_match_scikit_learn_and_scipy(models, tmp_path) -> None:
    glue = write_glue(tmp_path / "glue", n_train=160)
    out = tmp_path / "out"
    options = SuiteOptions(tasks=["CoLA", "MRPC", "STS-B", "MNLI"], lrs=(2e-3,), epochs=6, keep_models=True)
    result = run_suite("glue", [models["A"]], out, data=glue, options=options, say=lambda _: None)
    tasks = result["models"][0]["tasks"]

    def run_of(task: str) -> Path:
        (run,) = (out / "runs").glob(f"*/{task}/lr*")
        return run

    gold, pred = _predictions(run_of("CoLA"), out / "data" / "CoLA" / "dev.jsonl")
    assert 0.1 < tasks["CoLA"]["metric_medians"]["mcc"] < 0.99  # neither degenerate (0) nor perfect
    assert tasks["CoLA"]["metric_medians"]["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(gold, pred))
    gold, pred = _predictions(run_of("MRPC"), out / "data" / "MRPC" / "dev.jsonl")
    assert tasks["MRPC"]["metric_medians"]["f1"] == pytest.approx(sklearn_metrics.f1_score(gold, pred, pos_label="1"))
    assert tasks["MRPC"]["metric_medians"]["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(gold, pred))
    gold, pred = _predictions(run_of("STS-B"), out / "data" / "STS-B" / "dev.jsonl")
    assert tasks["STS-B"]["metric_medians"]["pearson"] == pytest.approx(stats.pearsonr(gold, pred)[0])
    assert tasks["STS-B"]["metric_medians"]["spearman"] == pytest.approx(stats.spearmanr(gold, pred)[0])
    for split, name in (("dev", "matched_accuracy"), ("dev_mismatched", "mismatched_accuracy")):
        gold, pred = _predictions(run_of("MNLI"), out / "data" / "MNLI" / f"{split}.jsonl")
        assert len(gold) == (24 if split == "dev" else 30)
        assert tasks["MNLI"]["metric_medians"][name] == pytest.approx(sklearn_metrics.accuracy_score(gold, pred))
    scores = [tasks[t]["score"]["median"] for t in ("CoLA", "MRPC", "STS-B", "MNLI")]
    assert result["models"][0]["aggregate"]["score"] == pytest.approx(sum(scores) / 4)
    assert tasks["MRPC"]["score"]["median"] == pytest.approx(
        (tasks["MRPC"]["metric_medians"]["f1"] + tasks["MRPC"]["metric_medians"]["accuracy"]) / 2
    )
