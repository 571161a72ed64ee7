"""Extractive QA: SQuAD loading, stride windows and labels, span post-processing on hand-made logits,
SQuAD 2.0 null handling and threshold tuning, and a tiny model that overfits the v1 fixture."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bertzoo.batch import Batch
from bertzoo.config import FinetuneConfig, ModelConfig, TaskDataConfig, TrainConfig
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.errors import ConfigError, DataError
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.tasks import TASKS
from bertzoo.tasks.qa import PAD_LOGIT, QATask, feature_offsets, postprocess_predictions, read_squad

FIXTURES = Path(__file__).parent / "fixtures"
V1 = FIXTURES / "squad_v1_small.json"
V2 = FIXTURES / "squad_v2_small.json"
MAX_SEQ, MAX_QUERY, STRIDE = 64, 16, 20  # with these, two fixture answers cross a window boundary


@pytest.fixture(scope="module")
def tokenizer(minilm_vocab) -> Tokenizer:
    return Tokenizer.from_vocab(minilm_vocab)


def make_task(tokenizer: Tokenizer, path: Path = V1, **data) -> QATask:
    settings = {"max_seq_len": MAX_SEQ, "max_query_len": MAX_QUERY, "doc_stride": STRIDE, **data}
    cfg = FinetuneConfig(
        task="qa",
        data=TaskDataConfig(train=str(path), dev=str(path), **settings),
        train=TrainConfig(batch_size=8, eval_batch_size=16, device="cpu"),
    )
    return QATask(cfg, tokenizer)


def features_of(features, example_index: int) -> list[int]:
    return [i for i, e in enumerate(features.example_ids) if e == example_index]


def flat_logits(features, value: float = -5.0) -> list[np.ndarray]:
    """Hand-made logits: every token scores `value` as a start and as an end."""
    return [np.full((len(f["input_ids"]), 2), value) for f in features.features]


def set_span(logits: np.ndarray, start: int, end: int, start_score: float, end_score: float) -> None:
    logits[start, 0] = start_score
    logits[end, 1] = end_score


def span_text(example, feature, start: int, end: int) -> str:
    offsets = feature_offsets(feature)
    return example["context"][offsets[start][0] : offsets[end][1]]


# ---------------------------------------------------------------------------------------------- data


def test_registered():
    assert TASKS["qa"] is QATask
    assert QATask.name == "qa" and QATask.default_metric == "f1"


def test_fixtures_are_consistent():
    for path in (V1, V2):
        data = json.loads(path.read_text(encoding="utf-8"))
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    for a in qa["answers"] + qa.get("plausible_answers", []):
                        assert paragraph["context"][a["answer_start"] :].startswith(a["text"]), qa["id"]


def test_load_v1_and_v2(tokenizer):
    task = make_task(tokenizer)
    examples = task.load("train")
    assert len(examples) == 16 and not task.version_2
    first = examples[0]
    assert set(first) == {"id", "title", "question", "context", "answers", "is_impossible"}
    assert first["id"] == "v1-light-1" and first["answers"][1]["text"] == "the engineer Marta Vell"
    assert not any(ex["is_impossible"] for ex in examples)

    task2 = make_task(tokenizer, V2)
    examples2 = task2.load("dev")
    assert task2.version_2
    impossible = [ex for ex in examples2 if ex["is_impossible"]]
    assert len(impossible) == 5 and all(ex["answers"] == [] for ex in impossible)
    assert task2.head_config()["version_2"] is True


def _hub_rows(path: Path) -> list[dict]:
    """The SQuAD file as the Hub's squad_v2 rows: one per question, answers as {text: [...], answer_start: [...]}."""
    rows = []
    for article in json.loads(path.read_text())["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible") else qa["answers"]
                rows.append(
                    {
                        "id": qa["id"],
                        "title": article["title"],
                        "context": paragraph["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [a["text"] for a in answers],
                            "answer_start": [a["answer_start"] for a in answers],
                        },
                    }
                )
    return rows


def test_load_the_hubs_squad_layout_from_a_dataset_and_parquet(tokenizer, tmp_path):
    import datasets

    expected, _ = read_squad(V2)
    rows = datasets.Dataset.from_list(_hub_rows(V2))
    datasets.DatasetDict({"train": rows, "validation": rows}).save_to_disk(str(tmp_path / "squad"))
    rows.to_parquet(str(tmp_path / "dev.parquet"))
    for source in (f"hf-dataset:{tmp_path / 'squad'}", str(tmp_path / "dev.parquet")):
        task = make_task(tokenizer, Path(source))
        assert task.load("dev") == expected and task.version_2, source  # dev finds the `validation` split
    rows.remove_columns("answers").to_parquet(str(tmp_path / "no-answers.parquet"))
    with pytest.raises(DataError, match="no column 'answers'"):
        make_task(tokenizer, tmp_path / "no-answers.parquet").load("train")


def test_load_errors(tokenizer, tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_squad(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match="not valid"):
        read_squad(bad)
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}), encoding="utf-8")
    with pytest.raises(DataError, match="article 0 is not in SQuAD format"):
        read_squad(bad)
    qa = {"id": "x", "question": "q?", "answers": []}
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": [qa, qa]}]}]}), encoding="utf-8")
    with pytest.raises(DataError, match="x appears twice"):
        read_squad(bad)
    task = make_task(tokenizer)
    task.cfg.data.test = ""
    with pytest.raises(DataError, match="data.test is not set"):
        task.load("test")


def test_length_config_errors(tokenizer):
    task = make_task(tokenizer, doc_stride=MAX_SEQ - MAX_QUERY - 3)
    with pytest.raises(ConfigError, match="doc_stride"):
        task.featurize(task.load("train"), "train")
    task = make_task(tokenizer, max_seq_len=16, max_query_len=16)
    with pytest.raises(ConfigError, match="max_query_len"):
        task.featurize(task.load("train"), "train")


def test_windows_cover_context_with_stride_overlap(tokenizer):
    task = make_task(tokenizer)
    examples = task.load("dev")
    features = task.featurize(examples, "dev")
    backend = tokenizer.backend
    max_windows = 0
    for e, ex in enumerate(examples):
        context = backend.encode(ex["context"], add_special_tokens=False)
        question = backend.encode(ex["question"], add_special_tokens=False).ids[:MAX_QUERY]
        idx = features_of(features, e)
        max_windows = max(max_windows, len(idx))
        windows = []
        for i in idx:
            f = features.features[i]
            ids = list(f["input_ids"])
            start = f["context_start"]
            assert len(ids) <= MAX_SEQ and features.lengths[i] == len(ids)
            assert ids[0] == tokenizer.cls_id and ids[start - 1] == tokenizer.sep_id and ids[-1] == tokenizer.sep_id
            assert ids[1 : start - 1] == question
            assert list(f["token_type_ids"]) == [0] * start + [1] * (len(ids) - start)
            window = ids[start:-1]
            ws = f["window_start"]
            assert window == context.ids[ws : ws + len(window)]
            offsets = feature_offsets(f)
            assert all(o is None for o in offsets[:start] + offsets[-1:])
            assert offsets[start:-1] == context.offsets[ws : ws + len(window)]
            windows.append((ws, ws + len(window)))
        assert windows[0][0] == 0 and windows[-1][1] == len(context.ids)  # the whole context is covered
        for (_, prev_end), (next_start, _) in zip(windows[:-1], windows[1:], strict=True):
            assert prev_end - next_start == STRIDE  # consecutive windows overlap by doc_stride tokens
    assert max_windows >= 4  # the long paragraph really needs several windows


def test_question_truncated(tokenizer):
    task = make_task(tokenizer)
    example = {"id": "long", "question": "why " * 40 + "?", "context": "Because it is.", "answers": []}
    features = task.featurize([example], "test")
    f = features.features[0]
    assert f["context_start"] == MAX_QUERY + 2 and "start_positions" not in f


def _letters(text: str) -> str:
    """Lower-cased letters and digits only: decoding inserts spaces around punctuation ("4 a. m.")."""
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _answer_token_span(tokenizer, example):
    """Context token span of the first answer, from a plain encoding (independent of the task)."""
    enc = tokenizer.backend.encode(example["context"], add_special_tokens=False)
    a = example["answers"][0]
    lo, hi = a["answer_start"], a["answer_start"] + len(a["text"])
    inside = [i for i, (s, e) in enumerate(enc.offsets) if s < hi and e > lo]
    return inside[0], inside[-1]


@pytest.mark.parametrize("path", [V1, V2])
def test_labels_point_at_answer_or_cls(tokenizer, path):
    task = make_task(tokenizer, path)
    examples = task.load("train")
    features = task.featurize(examples, "train")
    for e, ex in enumerate(examples):
        idx = features_of(features, e)
        if ex["is_impossible"]:
            assert all(
                features.features[i]["start_positions"] == features.features[i]["end_positions"] == 0 for i in idx
            )
            continue
        answer = ex["answers"][0]["text"]
        first, last = _answer_token_span(tokenizer, ex)
        labelled = 0
        for i in idx:
            f = features.features[i]
            s, t = f["start_positions"], f["end_positions"]
            ws, n = f["window_start"], len(f["context_offsets"])
            if s == 0:
                assert t == 0
                assert not (ws <= first and last < ws + n)  # [CLS] only when the answer is not wholly inside
                continue
            labelled += 1
            assert f["context_start"] <= s <= t < f["context_start"] + n
            assert span_text(ex, f, s, t) == answer
            decoded = tokenizer.decode(f["input_ids"][s : t + 1])
            assert _letters(decoded) == _letters(answer)
        assert labelled >= 1, ex["id"]


def test_answer_crossing_a_window_boundary(tokenizer):
    """Some answer starts inside one window but ends past it: that window points at [CLS], the next
    window (which holds the whole answer) points at the answer."""
    task = make_task(tokenizer)
    examples = task.load("train")
    features = task.featurize(examples, "train")
    crossings = 0
    for e, ex in enumerate(examples):
        first, last = _answer_token_span(tokenizer, ex)
        for i in features_of(features, e):
            f = features.features[i]
            ws, we = f["window_start"], f["window_start"] + len(f["context_offsets"])
            if ws <= first < we <= last:
                crossings += 1
                assert f["start_positions"] == f["end_positions"] == 0
                later = [j for j in features_of(features, e) if features.features[j]["window_start"] > ws]
                assert any(features.features[j]["start_positions"] > 0 for j in later)
    assert crossings >= 1


def test_mismatched_answer_is_counted_and_skipped(tokenizer, tmp_path):
    data = json.loads(V1.read_text(encoding="utf-8"))
    data["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 3  # "1887" moved off
    path = tmp_path / "shifted.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    task = make_task(tokenizer, path)
    examples = task.load("train")
    train = task.featurize(examples, "train")
    assert task.mismatched_answers["train"] == ["v1-light-2"]
    assert 1 not in set(train.example_ids.tolist())  # skipped for training
    dev = task.featurize(examples, "dev")
    assert task.mismatched_answers["dev"] == ["v1-light-2"]
    kept = [dev.features[i] for i in features_of(dev, 1)]
    assert kept and all(f["start_positions"] == 0 for f in kept)  # kept for scoring, labelled [CLS]


def test_collate(tokenizer):
    task = make_task(tokenizer)
    features = task.featurize(task.load("train"), "train")
    items = [features[i] for i in range(5)]
    batch = task.collate(items)
    longest = max(len(f["input_ids"]) for f in items)
    assert batch.input_ids.shape[1] >= longest and batch.input_ids.shape[1] % 8 == 0
    for row, f in enumerate(items):
        n = len(f["input_ids"])
        assert batch.input_ids[row, :n].tolist() == list(f["input_ids"])
        assert batch.attention_mask[row].sum() == n and (batch.input_ids[row, n:] == tokenizer.pad_id).all()
    assert batch.extra["start_positions"].tolist() == [f["start_positions"] for f in items]
    assert batch.extra["end_positions"].dtype == torch.long
    assert batch.example_index.tolist() == [0, 1, 2, 3, 4]
    unlabelled = task.featurize([{"id": "u", "question": "who?", "context": "Nobody."}], "test")
    assert "start_positions" not in task.collate([unlabelled[0]]).extra


# ---------------------------------------------------------------------------------- post-processing


@pytest.fixture(scope="module")
def v1_data(tokenizer):
    task = make_task(tokenizer)
    examples = task.load("dev")
    return task, examples, task.featurize(examples, "dev")


def _index(examples, qid):
    return next(i for i, ex in enumerate(examples) if ex["id"] == qid)


def test_postprocess_picks_the_best_span(v1_data):
    _, examples, features = v1_data
    e = _index(examples, "v1-light-3")
    i = features_of(features, e)[0]
    f = features.features[i]
    logits = flat_logits(features)
    c = f["context_start"]
    set_span(logits[i], c + 4, c + 6, 3.0, 2.0)
    set_span(logits[i], c + 10, c + 11, 2.0, 1.0)  # a weaker second span
    preds = postprocess_predictions(examples, features, logits)
    pred = preds[e]
    assert pred["id"] == "v1-light-3" and pred["answer"] == span_text(examples[e], f, c + 4, c + 6)
    assert pred["score"] == pytest.approx(5.0)
    assert len(preds) == len(examples) and "null_score" not in pred


def test_postprocess_never_crosses_the_context_boundary(v1_data):
    _, examples, features = v1_data
    e = _index(examples, "v1-ferry-1")
    i = features_of(features, e)[0]
    f = features.features[i]
    logits = flat_logits(features)
    c, n = f["context_start"], len(f["context_offsets"])
    set_span(logits[i], 2, 3, 100.0, 100.0)  # question tokens score highest
    set_span(logits[i], 0, 0, 90.0, 90.0)  # so does [CLS] (never an answer in SQuAD 1.1)
    logits[i][c - 1] = logits[i][c + n] = 80.0  # and both [SEP]s
    set_span(logits[i], 2, c + 1, 100.0, 1.0)  # a span from the question into the context
    set_span(logits[i], c + n - 2, c + n, 1.0, 100.0)  # a span ending on the final [SEP]
    set_span(logits[i], c + 3, c + 4, 2.0, 2.0)
    pred = postprocess_predictions(examples, features, logits)[e]
    assert pred["answer"] == span_text(examples[e], f, c + 3, c + 4) and pred["score"] == pytest.approx(4.0)


def test_postprocess_merges_windows(v1_data):
    _, examples, features = v1_data
    e = _index(examples, "v1-obs-5")
    idx = features_of(features, e)
    assert len(idx) >= 3
    w0, w1 = (features.features[i] for i in idx[:2])
    logits = flat_logits(features)
    c0, c1 = w0["context_start"], w1["context_start"]
    set_span(logits[idx[0]], c0 + 2, c0 + 3, 2.0, 2.0)
    last = len(w1["context_offsets"]) - 1  # beyond the first window's end
    set_span(logits[idx[1]], c1 + last - 1, c1 + last, 4.0, 3.0)
    pred = postprocess_predictions(examples, features, logits)[e]
    assert pred["answer"] == span_text(examples[e], w1, c1 + last - 1, c1 + last)
    assert pred["score"] == pytest.approx(7.0)
    # Higher in the first window: the first window wins.
    set_span(logits[idx[0]], c0 + 2, c0 + 3, 6.0, 6.0)
    assert postprocess_predictions(examples, features, logits)[e]["answer"] == span_text(
        examples[e], w0, c0 + 2, c0 + 3
    )


def test_postprocess_max_answer_len_and_order(v1_data):
    _, examples, features = v1_data
    e = _index(examples, "v1-light-1")
    i = features_of(features, e)[0]
    f = features.features[i]
    logits = flat_logits(features)
    c = f["context_start"]
    logits[i][c + 5, 0] = 10.0
    logits[i][c + 10, 1] = 10.0  # a 6-token span
    logits[i][c + 7, 1] = 5.0  # a 3-token span
    logits[i][c + 2, 1] = 12.0  # an end before the start
    ex = examples[e]
    assert postprocess_predictions(examples, features, logits)[e]["answer"] == span_text(ex, f, c + 5, c + 10)
    short = postprocess_predictions(examples, features, logits, max_answer_len=3)[e]
    assert short["answer"] == span_text(ex, f, c + 5, c + 7) and short["score"] == pytest.approx(15.0)
    one = postprocess_predictions(examples, features, logits, max_answer_len=1)[e]
    # Length 1: start c+5 with end c+5 (10 - 5), or start c+2 with end c+2 (-5 + 12): the latter wins.
    assert one["answer"] == span_text(ex, f, c + 2, c + 2) and one["score"] == pytest.approx(7.0)


@pytest.fixture(scope="module")
def v2_data(tokenizer):
    task = make_task(tokenizer, V2)
    examples = task.load("dev")
    return task, examples, task.featurize(examples, "dev")


def test_postprocess_null_answer(v2_data):
    _, examples, features = v2_data
    e = _index(examples, "v2-bake-4")
    i = features_of(features, e)[0]
    f = features.features[i]
    logits = flat_logits(features)
    c = f["context_start"]
    for j in features_of(features, e):
        set_span(logits[j], 0, 0, 3.0, 3.0)  # null score 6 in every window
    set_span(logits[i], c + 1, c + 2, 2.0, 2.0)  # best span 4
    pred = postprocess_predictions(examples, features, logits, version_2=True)[e]
    assert pred["null_score"] == pytest.approx(6.0) and pred["score_diff"] == pytest.approx(2.0)
    assert pred["answer"] == "" and pred["best_span"] == span_text(examples[e], f, c + 1, c + 2)
    assert pred["no_answer_prob"] == pytest.approx(1 / (1 + math.exp(-2.0)))
    pred = postprocess_predictions(examples, features, logits, version_2=True, null_threshold=2.5)[e]
    assert pred["answer"] == pred["best_span"] != ""


def test_postprocess_null_score_is_min_over_windows(v2_data):
    _, examples, features = v2_data
    e = _index(examples, "v2-obs-4")
    idx = features_of(features, e)
    assert len(idx) >= 3
    logits = flat_logits(features)
    for i in idx:
        set_span(logits[i], 0, 0, 10.0, 10.0)
    set_span(logits[idx[1]], 0, 0, 1.0, 1.0)  # one window is confident there is an answer
    f = features.features[idx[2]]
    c = f["context_start"]
    set_span(logits[idx[2]], c + 1, c + 3, 2.5, 2.5)
    pred = postprocess_predictions(examples, features, logits, version_2=True)[e]
    assert pred["null_score"] == pytest.approx(2.0) and pred["score_diff"] == pytest.approx(-3.0)
    assert pred["answer"] == span_text(examples[e], f, c + 1, c + 3)


# --------------------------------------------------------------------------------------- evaluation


class LookupModel(nn.Module):
    """Returns fixed per-feature logits (looked up by `example_index`, the feature index)."""

    def __init__(self, logits: list[np.ndarray]) -> None:
        super().__init__()
        self.table = logits
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, batch: Batch) -> ObjectiveOutput:
        seq = batch.input_ids.shape[1]
        out = torch.full((len(batch.input_ids), seq, 2), PAD_LOGIT)
        for row, i in enumerate(batch.example_index.tolist()):
            lg = torch.as_tensor(self.table[i], dtype=torch.float32)
            out[row, : len(lg)] = lg
        return ObjectiveOutput(loss=None, logits=out)


def oracle_logits(features, span: float = 8.0) -> list[np.ndarray]:
    """Logits that put the gold labels (answer tokens, or [CLS]) on top."""
    logits = flat_logits(features)
    for lg, f in zip(logits, features.features, strict=True):
        set_span(lg, f["start_positions"], f["end_positions"], span, span)
    return logits


def test_evaluate_v1_oracle_scores_100(v1_data):
    task, examples, features = v1_data
    result = task.evaluate(LookupModel(oracle_logits(features)), examples, features)
    assert result.metrics["exact"] == 100.0 and result.metrics["f1"] == 100.0
    assert result.metrics["total"] == len(examples) and "best_f1" not in result.metrics
    assert result.metrics["loss"] < 0.01
    assert len(result.predictions) == len(examples)
    p = result.predictions[_index(examples, "v1-ferry-3")]
    assert p["answer"] == 'the "ice road,"' and p["gold"] == ['the "ice road,"', "ice road"]


def test_evaluate_v2_tunes_the_threshold(tokenizer, v2_data):
    _, examples, features = v2_data
    task = make_task(tokenizer, V2)
    task.version_2 = True
    # Answerable: gold span scores 4, [CLS] 5 (diff +1: the default threshold 0 wrongly abstains).
    # Unanswerable: [CLS] 10, some span 4 (diff +6). Any threshold in [1, 6) gets everything right.
    logits = flat_logits(features)
    for lg, f, e in zip(logits, features.features, features.example_ids, strict=True):
        if examples[e]["is_impossible"]:
            set_span(lg, 0, 0, 5.0, 5.0)
            c = f["context_start"]
            set_span(lg, c + 1, c + 2, 2.0, 2.0)
        else:
            set_span(lg, 0, 0, 2.5, 2.5)
            if f["start_positions"]:
                set_span(lg, f["start_positions"], f["end_positions"], 2.0, 2.0)
    model = LookupModel(logits)
    result = task.evaluate(model, examples, features)
    m = result.metrics
    n_none = sum(ex["is_impossible"] for ex in examples)
    assert m["exact"] == pytest.approx(100 * n_none / len(examples)) and m["HasAns_exact"] == 0.0
    assert m["NoAns_exact"] == 100.0 and m["NoAns_total"] == n_none
    assert m["best_f1"] == 100.0 and m["best_exact"] == 100.0
    assert 1.0 <= m["best_f1_thresh"] < 6.0 and m["null_threshold"] == m["best_f1_thresh"]
    assert task.null_threshold == m["best_f1_thresh"]
    # predict() uses the tuned threshold.
    preds = task.predict(model, [{k: ex[k] for k in ("id", "question", "context")} for ex in examples])
    for p, ex in zip(preds, examples, strict=True):
        assert set(p) == {"id", "answer", "score", "no_answer_prob"}
        gold = ex["answers"][0]["text"] if ex["answers"] else ""
        assert p["answer"] == gold, ex["id"]


# ------------------------------------------------------------------------------------------- model


def tiny_encoder(tokenizer: Tokenizer, dropout: float = 0.1) -> Encoder:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        max_position=MAX_SEQ,
        dropout=dropout,
        attention_dropout=dropout,
    )
    return Encoder(cfg)


def test_model_forward(tokenizer, v1_data):
    task, _, features = v1_data
    model = task.build(tiny_encoder(tokenizer))
    assert model.head_config["task"] == "qa"
    batch = task.collate([features[i] for i in range(4)])
    out = model(batch)
    assert out.logits.shape == (*batch.input_ids.shape, 2)
    assert torch.isfinite(out.loss) and set(out.metrics) == {"loss", "span_acc"}
    pad = batch.attention_mask == 0
    assert pad.any() and (out.logits[pad] == PAD_LOGIT).all()
    del batch.extra["start_positions"], batch.extra["end_positions"]
    assert model(batch).loss is None


def test_tiny_model_overfits_v1(tokenizer):
    task = make_task(tokenizer)
    examples = task.load("train")
    features = task.featurize(examples, "train")
    model = task.build(tiny_encoder(tokenizer, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    batch = task.collate([features[i] for i in range(len(features))])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is as fast, and robust when the CI machine is busy
    try:
        losses = []
        model.train()
        for _ in range(30):
            loss = model(batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < 0.35 * losses[0], losses[::5]
        result = task.evaluate(model, examples, features)
        preds = task.predict(model, examples[:2])
    finally:
        torch.set_num_threads(threads)
    assert result.metrics["loss"] < 0.35 * losses[0]
    assert [p["id"] for p in preds] == ["v1-light-1", "v1-light-2"] and "no_answer_prob" not in preds[0]
