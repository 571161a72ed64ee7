"""The embedding task (`task: embedding`): its losses against hand-worked formulas, the three data layouts,
training that improves retrieval, and the saved model read back by `bertzoo embed`."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr

from bertzoo.cli import main
from bertzoo.config import EmbeddingConfig
from bertzoo.data.tasks.readers import read_examples
from bertzoo.errors import ConfigError, DataError
from bertzoo.loading import load_finetuned
from bertzoo.objectives.contrastive import cosent_loss, multiple_negatives_ranking_loss
from bertzoo.train.finetune import finetune

from helpers.embedding import CONTENT, embedding_config, write_retrieval
from helpers.finetune import WORDS_A, WORDS_B, write_task_files

pytestmark = pytest.mark.usefixtures("one_thread")


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_mnrl_matches_the_formula_with_hard_negatives_and_both_directions():
    g = torch.Generator().manual_seed(0)
    q, p, n = (torch.randn(3, 5, generator=g) for _ in range(3))
    loss, acc = multiple_negatives_ranking_loss(q, p, n, scale=7.0, symmetric=True)
    qn, pn, nn_ = (x.numpy().astype(np.float64) for x in (q, p, n))
    forward = backward = 0.0
    for i in range(3):
        logits = [7.0 * _cos(qn[i], d) for d in [*pn, *nn_]]
        forward += -logits[i] + math.log(sum(math.exp(x) for x in logits))
        back = [7.0 * _cos(pn[i], qq) for qq in qn]
        backward += -back[i] + math.log(sum(math.exp(x) for x in back))
    assert loss.item() == pytest.approx((forward / 3 + backward / 3) / 2, rel=1e-5)
    best = [int(np.argmax([_cos(qn[i], d) for d in [*pn, *nn_]]) == i) for i in range(3)]
    assert acc.item() == pytest.approx(np.mean(best))


def test_cosent_matches_the_formula():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    scores = torch.tensor([0.1, 0.9, 0.5, 0.5])  # a tie: that pair of pairs is not ordered
    cos = [20.0 * _cos(x, y) for x, y in zip(a.numpy(), b.numpy(), strict=True)]
    terms = [math.exp(cos[j] - cos[i]) for i in range(4) for j in range(4) if scores[i] > scores[j]]
    assert len(terms) == 5
    assert cosent_loss(a, b, scores).item() == pytest.approx(math.log(1 + sum(terms)), rel=1e-5)


def test_the_three_layouts_read_from_jsonl_and_csv(tmp_path):
    rows = [{"query": "q1", "positive": "d1"}, {"anchor": "q2", "positive": "d2", "negative": "n2"}]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_examples(path, "pairs")
    assert [(e["query"], e["positive"], e.get("negative")) for e in got] == [("q1", "d1", None), ("q2", "d2", "n2")]
    csv = tmp_path / "sts.csv"
    csv.write_text('sentence1,sentence2,score\n"a, b",c,4.5\nd,e,0\n')
    got = read_examples(csv, "pairs")
    assert [(e["query"], e["positive"], e["score"]) for e in got] == [("a, b", "c", 4.5), ("d", "e", 0.0)]
    bad = tmp_path / "bad.jsonl"
    for line, message in (
        ({"query": "q"}, "needs a query and a positive"),
        ({"text": "a", "text_pair": "b", "score": "high"}, "finite number"),
        ({"query": "", "positive": "d"}, "non-empty"),
    ):
        bad.write_text(json.dumps(line) + "\n")
        with pytest.raises(DataError, match=message):
            read_examples(bad, "pairs")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding")
    paths = write_retrieval(root / "data")
    start = finetune(embedding_config(paths, root / "start", max_steps=1, lr=1e-9))
    summary = finetune(embedding_config(paths, root / "run"))
    return paths, root, start, summary


def test_training_improves_retrieval_and_the_best_model_is_picked_by_ndcg(trained):
    _, root, start, summary = trained
    assert start["dev"]["ndcg_at_10"] < 0.75  # near random init: filler dominates the mean
    assert summary["dev"]["ndcg_at_10"] > 0.95
    assert summary["dev"]["mrr_at_10"] > start["dev"]["mrr_at_10"] + 0.2
    # About 4 relevant documents a query, so 1 / 4 of them at most can be in the top 1.
    assert summary["dev"]["recall_at_1"] > start["dev"]["recall_at_1"] + 0.1
    report = json.loads((root / "run" / "report.json").read_text())
    assert report["dev"]["report"]["n_queries"] == 15  # every content word, once
    assert json.loads((root / "run" / "model" / "config.json").read_text())["task"]["pooling"] == "mean"


def test_saved_model_embeds_like_the_trained_one_through_the_cli(trained, tmp_path):
    paths, root, _, _ = trained
    model_dir = root / "run" / "model"
    task, model, _ = load_finetuned(model_dir)
    texts = ["fig", "the bus is red", "a of the", "it is a fig of the"]
    want = np.asarray([p["embedding"] for p in task.predict(model, [{"text": t} for t in texts])])
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    assert main(["embed", str(model_dir), "-i", str(inp), "-o", str(tmp_path / "v.npy")]) == 0
    got = np.load(tmp_path / "v.npy")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # trained with normalize: true
    # `embed` runs in precision auto (bf16 where the CPU has it), the task's own prediction in fp32.
    np.testing.assert_allclose(got, want, atol=5e-3)
    # The query side finds its document among the other texts.
    assert int(np.argmax(got[0] @ got[1:].T)) == 2


def test_scored_pairs_train_with_cosent_and_report_correlations(tmp_path):
    paths = write_task_files(tmp_path / "data")
    r = random.Random(0)

    def rows(n):
        out = []
        for _ in range(n):
            a, b = r.choice(CONTENT), r.choice(CONTENT)
            same = (a in WORDS_A) == (b in WORDS_A) and (a in WORDS_B) == (b in WORDS_B)
            out.append({"text": f"the {a} is here", "text_pair": f"a {b} on it", "score": float(same) + (a == b)})
        return out

    for split, n in (("train", 200), ("dev", 40)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows(n)))
        paths[split] = str(tmp_path / f"{split}.jsonl")
    paths["test"] = ""
    cfg = embedding_config(paths, tmp_path / "run", epochs=12)
    cfg.data.test = ""
    summary = finetune(cfg)
    assert summary["dev"]["spearman"] > 0.6
    config = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert config["task"]["loss"] == "cosent"
    # The reported correlations are scipy's, of the cosines of the saved model's vectors.
    dev = [json.loads(x) for x in (tmp_path / "dev.jsonl").read_text().splitlines()]
    task, model, _ = load_finetuned(tmp_path / "run" / "model")
    a, b = (
        np.asarray([p["embedding"] for p in task.predict(model, [{"text": x[k]} for x in dev])])
        for k in ("text", "text_pair")
    )
    cos = (a * b).sum(1)  # unit vectors
    gold = [x["score"] for x in dev]
    assert summary["dev"]["spearman"] == pytest.approx(spearmanr(gold, cos).statistic, abs=1e-4)
    assert summary["dev"]["pearson"] == pytest.approx(pearsonr(gold, cos).statistic, abs=1e-4)


def test_a_loss_that_does_not_fit_the_data_or_a_bad_scale_is_one_clear_error(tmp_path):
    paths = write_retrieval(tmp_path / "data")
    cfg = embedding_config(paths, tmp_path / "run")
    cfg.embedding = EmbeddingConfig(loss="cosent")
    with pytest.raises(ConfigError, match="does not fit pairs data"):
        finetune(cfg)
    cfg.embedding = EmbeddingConfig(scale=0)
    with pytest.raises(ConfigError, match="embedding.scale"):
        finetune(cfg)


def test_lora_trains_an_embedding_model_and_saves_plain_weights(tmp_path):
    from safetensors import safe_open

    from bertzoo.config import LoraConfig

    paths = write_retrieval(tmp_path / "data")
    cfg = embedding_config(paths, tmp_path / "run", epochs=2)
    cfg.technique.lora = LoraConfig(r=4, alpha=8)
    summary = finetune(cfg)
    assert summary["trainable_parameters"]["trainable"] < summary["trainable_parameters"]["total"] / 5
    with safe_open(str(tmp_path / "run" / "model" / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "lora" in k]
    task, model, _ = load_finetuned(tmp_path / "run" / "model")
    assert len(task.predict(model, [{"text": "fig"}])[0]["embedding"]) == 32
