"""Property-based tests (hypothesis): tokenizer round trip, masking invariants, example building, and
readers that must turn any input into either a result or the project's own error type.

Every test is derandomized (the same examples on every run, as CI needs) and sized to keep the file
well under 30 s on two cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import string
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig, load_pretrain_config, read_json
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.examples import NspDataset
from bertzoo.data.pretraining.masking import mask_tokens, num_to_select
from bertzoo.data.text.corpus import ReadStats, read_documents
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, SpecialIds, Tokenizer
from bertzoo.errors import BertzooError, CheckpointError, ConfigError, DataError

from helpers.hf import _BASE_HF, VALID_HF_CONFIGS

FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def fresh_dir(base: Path) -> Path:
    """A new directory per hypothesis example (tmp_path is shared by all examples of a test)."""
    return Path(tempfile.mkdtemp(dir=base))


# ----------------------------------------------------------------------------------------- tokenizer

LOWER_WORD = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=40)
PUNCT = st.sampled_from(["", "", "", ".", ",", "!", "?"])


@settings(FUZZ, max_examples=60)
@given(words=st.lists(st.tuples(LOWER_WORD, PUNCT), min_size=1, max_size=25))
def test_tokenizer_round_trip(synthetic_tokenizer, words):
    """Text in the vocabulary's alphabet decodes back to itself, and encoding is stable."""
    text = " ".join(w + p for w, p in words)
    tok = synthetic_tokenizer
    enc = tok.encode(text)
    assert tok.unk_id not in enc.ids  # every letter and ##letter is in the vocabulary
    assert tok.decode(enc.ids) == text
    assert tok.encode(tok.decode(enc.ids)).ids == enc.ids
    assert tok.encode_batch([text]) == [enc.ids[1:-1]]


@settings(FUZZ, max_examples=150)
@given(text=st.text(max_size=300), pair=st.none() | st.text(max_size=100))
def test_tokenizer_handles_any_text(synthetic_tokenizer, text, pair):
    assume(not any(t in s for t in SPECIAL_TOKENS for s in (text, pair or "")))  # those map to special ids
    tok = synthetic_tokenizer
    enc = tok.encode(text, pair)
    assert all(0 <= i < tok.vocab_size for i in enc.ids)
    assert enc.ids[0] == tok.cls_id and enc.ids[-1] == tok.sep_id
    n_first = enc.ids.index(tok.sep_id) + 1
    assert enc.type_ids == [0] * n_first + [1] * (len(enc.ids) - n_first)
    assert enc.ids.count(tok.sep_id) == (1 if pair is None else 2)
    assert isinstance(tok.decode(enc.ids), str)


# -------------------------------------------------------------------------------------------- masking

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 60


@st.composite
def masking_inputs(draw):
    rows = draw(st.integers(1, 6))
    length = draw(st.integers(1, 40))
    ids = np.array(draw(st.lists(st.integers(0, VOCAB - 1), min_size=rows * length, max_size=rows * length)))
    ids = ids.reshape(rows, length)
    lengths = np.array(draw(st.lists(st.integers(0, length), min_size=rows, max_size=rows)))
    padding = np.arange(length)[None, :] >= lengths[:, None]
    ids[padding] = SPECIAL.pad
    special_mask = np.isin(ids, list(SPECIAL)) | padding
    replace_mask = draw(st.floats(0.0, 1.0))
    config = MaskingConfig(
        mask_prob=draw(st.floats(0.01, 0.99)),
        replace_mask=replace_mask,
        replace_random=draw(st.floats(0.0, 1.0 - replace_mask)),
        max_predictions=draw(st.none() | st.integers(1, 8)),
    )
    return ids, special_mask, config, draw(st.integers(0, 2**31)), draw(st.integers(0, 5))


@settings(FUZZ, max_examples=150)
@given(inputs=masking_inputs())
def test_masking_invariants(inputs):
    ids, special_mask, config, seed, epoch = inputs
    index = np.arange(len(ids)) * 7 + 3
    replacement = np.arange(len(SPECIAL), VOCAB)
    kwargs = dict(seed=seed, epoch=epoch, index=index, config=config, mask_id=SPECIAL.mask)
    out, labels = mask_tokens(ids, special_mask, replacement_ids=replacement, **kwargs)
    selected = labels != IGNORE_INDEX
    # Labels only at selected positions, holding the original token there.
    assert (labels[selected] == ids[selected]).all()
    # Special tokens and padding are never selected and never changed.
    assert not (selected & special_mask).any()
    assert (out[~selected] == ids[~selected]).all()
    # Selected positions become [MASK], a non-special random token, or stay as they were.
    changed = selected & (out != ids)
    assert np.isin(out[changed], np.append(replacement, SPECIAL.mask)).all()
    if config.replace_mask == 0 and config.replace_random == 0:
        assert not changed.any()
    # Ratio bounds: per row exactly round(mask_prob * candidates), at least 1, at most max_predictions.
    candidates = (~special_mask).sum(1)
    k = selected.sum(1)
    assert (k == num_to_select(candidates, config.mask_prob, config.max_predictions)).all()
    assert (k <= candidates).all()
    if config.max_predictions is not None:
        assert (k <= config.max_predictions).all()
    free = candidates > 0
    below_cap = k < config.max_predictions if config.max_predictions is not None else np.ones_like(free)
    unclamped = free & (k > 1) & below_cap
    assert (np.abs(k[unclamped] - config.mask_prob * candidates[unclamped]) <= 0.5).all()
    # A pure function of (seed, epoch, index, position).
    again, again_labels = mask_tokens(ids, special_mask, replacement_ids=replacement, **kwargs)
    assert (again == out).all() and (again_labels == labels).all()


@settings(FUZZ, max_examples=60)
@given(
    seqs=st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=30), min_size=1, max_size=8),
    epoch=st.integers(0, 3),
)
def test_collator_masks_only_real_non_special_tokens(seqs, epoch):
    collator = PretrainingCollator(SPECIAL, MaskingConfig(), seed=11, vocab_size=VOCAB)
    examples = [{"input_ids": np.array(s), "index": i, "epoch": epoch} for i, s in enumerate(seqs)]
    batch = collator(examples)
    selected = batch.labels != IGNORE_INDEX
    assert batch.input_ids.shape[1] % 8 == 0 and batch.input_ids.shape[1] >= max(map(len, seqs))
    for row, s in enumerate(seqs):
        n = len(s)
        original = torch.tensor(s)
        assert not selected[row, n:].any() and (batch.input_ids[row, n:] == SPECIAL.pad).all()
        assert batch.attention_mask[row, :n].all() and not batch.attention_mask[row, n:].any()
        sel = selected[row, :n]
        assert (batch.labels[row, :n][sel] == original[sel]).all()
        assert not torch.isin(original[sel], torch.tensor(list(SPECIAL))).any()
        assert (batch.input_ids[row, :n][~sel] == original[~sel]).all()


# ------------------------------------------------------------------------------------ example building


@pytest.fixture(scope="module")
def vocab_words(synthetic_tokenizer) -> list[str]:
    return [w for w in synthetic_tokenizer.vocab_list() if w.isalpha() and len(w) > 1]


@settings(FUZZ, max_examples=25)
@given(data=st.data())
def test_examples_fit_the_length_and_segments_are_consistent(synthetic_tokenizer, vocab_words, tmp_path, data):
    word = st.sampled_from(vocab_words)
    sentence = st.lists(word, min_size=1, max_size=40).map(" ".join)
    document = st.lists(sentence, min_size=1, max_size=6).map("\n".join)  # one sentence per line
    docs = data.draw(st.lists(document, min_size=2, max_size=8), label="docs")
    nsp = data.draw(st.booleans(), label="nsp")
    max_seq_len = data.draw(st.integers(5 if nsp else 3, 64), label="max_seq_len")
    directory = fresh_dir(tmp_path)
    shard_tokens = data.draw(st.integers(1, 300), label="shard_tokens")
    prepare_shards(docs, synthetic_tokenizer, directory / "shards", shard_tokens=shard_tokens, progress=False)
    corpus = ShardedCorpus(directory / "shards")
    tok = synthetic_tokenizer
    dataset = NspDataset(
        corpus,
        tok,
        max_seq_len,
        seed=data.draw(st.integers(0, 1000), label="seed"),
        short_seq_prob=data.draw(st.floats(0.0, 1.0), label="short_seq_prob"),
        nsp_random_prob=data.draw(st.floats(0.0, 1.0), label="nsp_random_prob"),
        nsp=nsp,
    )
    size = len(dataset)
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        assert len(dataset) == size > 0
        for i in range(size):
            ex = dataset[i]
            ids, types = ex["input_ids"], ex["token_type_ids"]
            assert len(ids) <= max_seq_len and len(types) == len(ids)
            assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
            seps = np.flatnonzero(ids == tok.sep_id)
            assert len(seps) == (2 if nsp else 1)
            assert seps[0] >= 2  # segment A is never empty
            assert not np.isin(ids[1:], [tok.cls_id, tok.pad_id, tok.mask_id]).any()
            if nsp:
                assert seps[1] >= seps[0] + 2  # segment B is never empty
                assert (types[: seps[0] + 1] == 0).all() and (types[seps[0] + 1 :] == 1).all()
                assert ex["next_sentence_label"] in (0, 1)
            else:
                assert not types.any() and "next_sentence_label" not in ex
    shutil.rmtree(directory)


# --------------------------------------------------------------------------------------------- readers

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
JSONL_LINES = st.lists(
    st.one_of(
        JSON_VALUES.map(json.dumps),
        st.dictionaries(st.sampled_from(["text", "body", "id"]), JSON_VALUES, max_size=3).map(json.dumps),
        st.text(max_size=40),
    ),
    max_size=6,
).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass"))
BYTES = st.one_of(
    st.binary(max_size=1500),
    st.binary(max_size=800).map(gzip.compress),
    st.binary(max_size=800).map(lambda b: gzip.compress(b)[: len(b) // 2 + 10]),
    st.text(max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


def only_project_errors(call, *expected: type[BaseException]) -> None:
    """Run `call`; a failure must be one of the project's error types (a BertzooError subclass)."""
    try:
        call()
    except BertzooError as exc:
        assert isinstance(exc, expected or (BertzooError,)), f"{type(exc).__name__}: {exc}"
        assert "\n" not in str(exc)  # one line, as the CLI prints it


@settings(FUZZ, max_examples=120)
@given(
    data=st.one_of(BYTES, JSONL_LINES),
    name=st.sampled_from(["c.txt", "c.jsonl", "c.txt.gz", "c.jsonl.gz"]),
    doc_per=st.sampled_from(["block", "line", "file"]),
)
def test_corpus_reader_raises_only_data_error(tmp_path, data, name, doc_per):
    path = fresh_dir(tmp_path) / name
    path.write_bytes(data)
    stats = ReadStats()

    def read() -> None:
        for doc in read_documents([path], doc_per=doc_per, stats=stats):
            assert doc and doc == doc.strip() and doc.encode("utf-8")  # non-empty, cleaned, encodable

    only_project_errors(read, DataError)


@settings(FUZZ, max_examples=60)
@given(data=st.one_of(BYTES, JSON_VALUES.map(lambda v: json.dumps(v).encode())))
def test_json_config_reader_raises_only_config_error(tmp_path, data):
    path = fresh_dir(tmp_path) / "config.json"
    path.write_bytes(data)
    only_project_errors(lambda: read_json(path), ConfigError)


CONFIG_KEYS = st.sampled_from(["variant", "model", "data", "train", "masking", "lr", "max_steps", "preset", "nsp"])
CONFIG_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.dictionaries(CONFIG_KEYS | st.integers() | st.text(max_size=6), inner, max_size=4)
        | st.lists(inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(FUZZ, max_examples=80)
@given(data=st.one_of(BYTES, CONFIG_TREES.map(lambda tree: yaml.safe_dump(tree).encode())))
def test_yaml_run_config_raises_only_config_error(tmp_path, data):
    path = fresh_dir(tmp_path) / "run.yaml"
    path.write_bytes(data)
    only_project_errors(lambda: load_pretrain_config(path), ConfigError)


@settings(FUZZ, max_examples=60)
@given(
    data=st.one_of(BYTES, JSON_VALUES.map(lambda v: json.dumps(v).encode())),
    name=st.sampled_from(["vocab.txt", "tokenizer.json", "tokenizer_config.json"]),
)
def test_tokenizer_loader_raises_only_data_error(synthetic_tokenizer, tmp_path, data, name):
    directory = fresh_dir(tmp_path)
    synthetic_tokenizer.save(directory)
    if name == "vocab.txt":
        (directory / "tokenizer.json").unlink()  # so vocab.txt is the file that gets read
    (directory / name).write_bytes(data)
    only_project_errors(lambda: Tokenizer.load(directory), DataError)


SHARD_FILES = ["meta.json", "shard_00000.tokens.npy", "shard_00000.sentences.npy", "shard_00000.documents.npy"]


@pytest.fixture(scope="module")
def tiny_shards(synthetic_docs, synthetic_tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-shards") / "shards"
    prepare_shards(synthetic_docs[:20], synthetic_tokenizer, out, progress=False)
    return out


@settings(FUZZ, max_examples=60)
@given(
    name=st.sampled_from(SHARD_FILES),
    data=st.one_of(
        BYTES,
        st.fixed_dictionaries(
            {"format": st.just("bertzoo-shards"), "format_version": st.just(1)},
            optional={"vocab_size": JSON_VALUES, "dtype": JSON_VALUES, "shards": JSON_VALUES},
        ).map(lambda d: json.dumps(d).encode()),
    ),
)
def test_shard_reader_raises_only_data_error(tiny_shards, tmp_path, name, data):
    directory = fresh_dir(tmp_path) / "shards"
    shutil.copytree(tiny_shards, directory)
    (directory / name).write_bytes(data)
    only_project_errors(lambda: ShardedCorpus(directory), DataError)


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory) -> Path:
    """A real checkpoint of a small model, to damage file by file."""
    from helpers.checkpoint import save_run, setup_run, train_steps

    net, opt, sched = setup_run()
    train_steps(net, opt, sched)
    return save_run(tmp_path_factory.mktemp("fuzz-ckpt"), 3, net, opt, sched)


CHECKPOINT_FILES = ["manifest.json", "trainer_state.json", "optimizer.pt", "rng.pt", "model.safetensors"]


@settings(FUZZ, max_examples=80)
@given(
    name=st.sampled_from(CHECKPOINT_FILES),
    data=st.one_of(BYTES, JSON_VALUES.map(lambda v: json.dumps(v).encode())),
    consistent_manifest=st.booleans(),
)
def test_checkpoint_loader_raises_only_checkpoint_error(checkpoint_dir, tmp_path, name, data, consistent_manifest):
    from bertzoo.engine.checkpoint import load_checkpoint
    from bertzoo.engine.manifest import write_manifest

    from helpers.checkpoint import setup_run

    directory = fresh_dir(tmp_path) / "step-00000003"
    shutil.copytree(checkpoint_dir, directory)
    (directory / name).write_bytes(data)
    if consistent_manifest and name != "manifest.json":
        write_manifest(directory, 3)  # as a damaged file published with a fresh manifest would be
    net, opt, sched = setup_run(seed=1)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        only_project_errors(lambda: load_checkpoint(directory, net, opt, sched), CheckpointError)
    finally:  # a successful load restores the checkpoint's RNG states; leave the session's as they were
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


@settings(FUZZ, max_examples=60)
@given(data=BYTES, name=st.sampled_from(["model.safetensors", "pytorch_model.bin"]))
def test_weight_loader_raises_only_checkpoint_error(tmp_path, data, name):
    from bertzoo.io import read_weights

    directory = fresh_dir(tmp_path)
    (directory / name).write_bytes(data)
    only_project_errors(lambda: read_weights(directory), CheckpointError)


# ------------------------------------------------------------------------------ command-line numbers

# Every numeric option of every subcommand: (subcommand, the other arguments it needs, the option, the
# smallest and the largest value it accepts). The largest vocabulary is 2**24: tokenizers reserves
# memory for the requested size up front.
NUMERIC_OPTIONS = [
    ("tokenizer train", ["-i", "c.txt", "-o", "tok"], "--vocab-size", 1, 2**24),
    ("tokenizer train", ["-i", "c.txt", "-o", "tok"], "--min-frequency", 0, sys.maxsize),
    ("tokenizer train", ["-i", "c.txt", "-o", "tok"], "--limit-docs", 1, sys.maxsize),
    ("tokenizer train", ["-i", "c.txt", "-o", "tok"], "--limit-alphabet", 1, sys.maxsize),
    ("tokenizer extend", ["model", "-i", "c.txt", "-o", "out"], "--add", 1, sys.maxsize),
    ("tokenizer extend", ["model", "-i", "c.txt", "-o", "out"], "--min-count", 1, sys.maxsize),
    ("tokenizer extend", ["model", "-i", "c.txt", "-o", "out"], "--window", 1, sys.maxsize),
    ("tokenizer extend", ["model", "-i", "c.txt", "-o", "out"], "--seed", 0, sys.maxsize),
    ("prepare", ["-i", "c.txt", "-t", "tok", "-o", "out"], "--shard-tokens", 1, sys.maxsize),
    ("evaluate", ["model"], "--batch-size", 1, sys.maxsize),
    ("predict", ["model", "-i", "in.jsonl", "-o", "out.jsonl"], "--batch-size", 1, sys.maxsize),
    ("generate", ["model", "-i", "in.jsonl", "-o", "out.jsonl"], "--batch-size", 1, sys.maxsize),
    ("embed", ["model", "-i", "in.jsonl", "-o", "v.npy"], "--batch-size", 1, sys.maxsize),
    ("embed", ["model", "-i", "in.jsonl", "-o", "v.npy"], "--max-length", 3, sys.maxsize),
    ("export", ["model", "out", "--sentence-transformers"], "--max-length", 3, sys.maxsize),
    ("serve", ["model"], "--port", 1, 65535),
    ("serve", ["model"], "--batch-size", 1, sys.maxsize),
    ("serve", ["model"], "--max-texts", 1, sys.maxsize),
    ("serve", ["model"], "--max-body-bytes", 1, sys.maxsize),
    ("serve", ["model"], "--max-length", 3, sys.maxsize),
    ("attention", ["model", "--text", "x", "--out", "v.html"], "--layer", 0, sys.maxsize),
    ("attention", ["model", "--text", "x", "--out", "v.html"], "--head", 0, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--dim", 1, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--epochs", 1, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--batch-size", 1, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--seed", 0, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--eval-every", 1, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--patience", 1, sys.maxsize),
    ("kg-embed", ["--kg", "nations", "--out", "kg"], "--valid-limit", 1, sys.maxsize),
    ("suite", ["builtin", "model"], "--seeds", 1, sys.maxsize),
    ("suite", ["builtin", "model"], "--max-train-examples", 1, sys.maxsize),
    ("suite", ["builtin", "model"], "--max-steps", 1, sys.maxsize),
    ("suite", ["builtin", "model"], "--threads", 1, sys.maxsize),
]
# Typed options that are not integer ranges, so the integer fuzzing below does not fit them: positive floats,
# an L1/L2 choice, and attention's list of token positions (each tested in its own command's tests).
OTHER_TYPED = {
    ("kg-embed", "--lr"),
    ("kg-embed", "--margin"),
    ("kg-embed", "--max-minutes"),
    ("kg-embed", "--norm"),
    ("attention", "--order"),
    ("suite", "--epochs"),
    ("suite", "--lrs"),
    ("serve", "--max-wait-ms"),
    ("serve", "--drain-seconds"),
}


def _typed_options(parser: argparse.ArgumentParser, command: tuple[str, ...] = ()) -> set[tuple[str, str]]:
    """(subcommand, option) for every option of `parser` and its subparsers that converts its value."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _typed_options(sub, (*command, name))
        elif action.type is not None:
            found.add((" ".join(command), action.option_strings[-1]))
    return found


def test_the_fuzzed_options_are_all_numeric_options():
    """A new option with a `type` must join NUMERIC_OPTIONS (so the test below covers it), or this fails."""
    from bertzoo.cli import build_parser

    numeric = {(command, option) for command, _, option, _, _ in NUMERIC_OPTIONS}
    assert _typed_options(build_parser()) == numeric | OTHER_TYPED


def _accepted(text: str, low: int, high: int) -> bool:
    """Whether `text` is an integer in [low, high] as Python's int() reads it ("1_0", " 7" and "１２" are)."""
    try:
        return low <= int(text) <= high
    except ValueError:
        return False


@settings(FUZZ, max_examples=120)
@given(case=st.sampled_from(NUMERIC_OPTIONS), data=st.data(), separate=st.booleans())
def test_cli_numeric_options_reject_nonsense_in_one_line(capsys, case, data, separate):
    """Negative, zero (where counts start at 1), too large, fractional and non-numeric values of every
    numeric option: exit code 2 and exactly one stderr line naming the option, never a traceback."""
    from bertzoo.cli import main

    command, others, option, low, high = case
    value = data.draw(
        st.one_of(
            st.integers(max_value=low - 1).map(str),
            st.integers(min_value=high + 1, max_value=10**40).map(str),
            st.just("9" * 5000),  # beyond int()'s 4300-digit limit
            st.floats().map(repr),  # '1.5', 'nan', 'inf', '-0.0', '1e+300'
            st.sampled_from(["", " ", "1e3", "0x10", "ten", "3.", "+-1", "1,000", "--", "-h"]),
            st.text(max_size=12),
        ).filter(lambda text: not _accepted(text, low, high)),
        label="value",
    )
    # `--option=VALUE`, or `--option VALUE` where argparse may also refuse a VALUE that looks like an option.
    args = [*command.split(), *others, *([option, value] if separate else [f"{option}={value}"])]
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert code == 2, (args, captured)
    assert len(err) == 1 and "Traceback" not in captured.err, err
    assert err[0].startswith(f"error: bertzoo {command}: argument {option}"), err


# --------------------------------------------------------------------------- Hugging Face config.json

# Values a damaged or hand-edited config.json may hold where a size, rate or name belongs.
NONSENSE = st.one_of(
    st.sampled_from([0, -1, -768, 1.5, 1e300, float("nan"), float("inf"), True, "768", "", [768], {"a": 1}]),
    JSON_VALUES,
)


def test_valid_hf_configs_read(tmp_path):
    """The fuzz below starts from configs that load: each of them reads without error."""
    from bertzoo.interop.convert import config_from_hf

    for model_type, raw in VALID_HF_CONFIGS.items():
        config = config_from_hf(dict(raw))
        assert (config.vocab_size, config.num_layers, config.hidden_size) == (99, 2, 32), model_type


@settings(FUZZ, max_examples=150)
@given(
    model_type=st.sampled_from(sorted(VALID_HF_CONFIGS)),
    edits=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    *_BASE_HF,
                    "model_type",
                    "embedding_size",
                    "num_hidden_groups",
                    "inner_group_num",
                    "use_task_id",
                    "task_type_vocab_size",
                    "position_embedding_type",
                    "id2label",
                    "problem_type",
                    "tie_word_embeddings",
                    *VALID_HF_CONFIGS["distilbert"],
                ]
            ),
            st.one_of(st.just("drop"), NONSENSE),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_hf_config_reader_raises_only_project_errors(tmp_path, model_type, edits):
    """A Hugging Face config.json with a key dropped, a wrong type or a nonsense number gives a
    BertzooError in one line (what `bertzoo info/convert/export/finetune` print), never a KeyError,
    TypeError or ZeroDivisionError from deep inside."""
    from bertzoo.loading import read_config

    raw = dict(VALID_HF_CONFIGS[model_type])
    for key, value in edits:
        if value == "drop":
            raw.pop(key, None)
        else:
            raw[key] = value
    directory = fresh_dir(tmp_path)
    (directory / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    only_project_errors(lambda: read_config(directory))
