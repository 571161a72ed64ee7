"""Small GLUE and CLUE directories in the exact official layouts (headers, CoLA's headerless train/dev, MRPC's
byte-order mark, sentences with unbalanced quotes, QQP's short row, MNLI's two dev sets, CLUE's "-" labels), and
a tiny model directory whose vocabulary covers their words."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from bertzoo.config import ModelConfig
from bertzoo.models.encoder import Encoder

from helpers.finetune import FILLER, WORDS_A, WORDS_B
from helpers.tasks import small_tokenizer

CHINESE = list("我们喜欢这个手机床枕头它的苹果")
WORDS = [*WORDS_A, *WORDS_B, *FILLER, "he", "said", "it's", "not", "same", *CHINESE]


def sentence(r: random.Random, topic: list[str]) -> str:
    """Filler words around a topic word; one in four sentences has an unbalanced double quote or apostrophe."""
    words = [r.choice(FILLER) for _ in range(r.randint(2, 6))]
    words.insert(r.randrange(len(words) + 1), r.choice(topic))
    text = " ".join(words)
    quirk = r.randrange(4)
    return f'he said "{text}' if quirk == 0 else (f"it's {text}" if quirk == 1 else text)


def labelled(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(first text, second text, binary label "0"/"1"): label 1 when both are about fruit, 0 when both are about
    vehicles (learnable from either text)."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        label = r.choice("01")
        topic = WORDS_A if label == "1" else WORDS_B
        first, second = sentence(r, topic), sentence(r, topic)
        out.append((first, second, label))
    return out


def _write(path: Path, lines: list[str], bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "".join(line + "\n" for line in lines), encoding="utf-8")


def write_glue(root: Path, n_train: int = 40, n_dev: int = 24) -> Path:
    """Every GLUE task's folder with train, dev (MNLI: dev_matched, dev_mismatched) and test files."""
    sizes = {"train": (n_train, 0), "dev": (n_dev, 1), "test": (8, 2)}
    rows = {split: labelled(n, seed) for split, (n, seed) in sizes.items()}
    nli = ["entailment", "neutral", "contradiction"]

    # CoLA: train/dev without a header (source, label, original label, sentence); test with `index sentence`.
    for split in ("train", "dev"):
        _write(
            root / "CoLA" / f"{split}.tsv", [f"gj04\t{y}\t{'' if y == '1' else '*'}\t{a}" for a, _, y in rows[split]]
        )
    _write(root / "CoLA" / "test.tsv", ["index\tsentence", *(f"{i}\t{a}" for i, (a, _, _) in enumerate(rows["test"]))])
    for split in ("train", "dev"):
        _write(root / "SST-2" / f"{split}.tsv", ["sentence\tlabel", *(f"{a}\t{y}" for a, _, y in rows[split])])
    _write(root / "SST-2" / "test.tsv", ["index\tsentence", *(f"{i}\t{a}" for i, (a, _, _) in enumerate(rows["test"]))])
    mrpc = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for split in ("train", "dev"):
        body = [f"{y}\t{100 + i}\t{200 + i}\t{a}\t{b}" for i, (a, b, y) in enumerate(rows[split])]
        _write(root / "MRPC" / f"{split}.tsv", [mrpc, *body], bom=True)
    test = [f"{i}\t{100 + i}\t{200 + i}\t{a}\t{b}" for i, (a, b, _) in enumerate(rows["test"])]
    _write(root / "MRPC" / "test.tsv", ["index\t#1 ID\t#2 ID\t#1 String\t#2 String", *test])
    qqp = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"
    for split in ("train", "dev"):
        body = [f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{y}" for i, (a, b, y) in enumerate(rows[split])]
        if split == "train":
            body.insert(3, "999\t1\t2\tHow do I cut a fig")  # QQP's train has rows cut short: skipped
        _write(root / "QQP" / f"{split}.tsv", [qqp, *body])
    _write(
        root / "QQP" / "test.tsv",
        ["id\tquestion1\tquestion2", *(f"{i}\t{a}\t{b}" for i, (a, b, _) in enumerate(rows["test"]))],
    )
    sts = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for split in ("train", "dev"):
        body = [
            f"{i}\tmain-news\tx\t2012\t{i}\tnone\tnone\t{a}\t{b}\t{4.0 * int(y) + (i % 5) / 5:.3f}"
            for i, (a, b, y) in enumerate(rows[split])
        ]
        _write(root / "STS-B" / f"{split}.tsv", [sts + "\tscore", *body])
    _write(
        root / "STS-B" / "test.tsv",
        [sts, *(f"{i}\tmain-news\tx\t2012\t{i}\tnone\tnone\t{a}\t{b}" for i, (a, b, _) in enumerate(rows["test"]))],
    )
    parses = "sentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse"
    base = f"index\tpromptID\tpairID\tgenre\t{parses}\tsentence1\tsentence2"

    def mnli(split_rows: list[tuple[str, str, str]], votes: int, genre: str) -> list[str]:
        header = base + "".join(f"\tlabel{k}" for k in range(1, votes + 1)) + "\tgold_label"
        body = []
        for i, (a, b, y) in enumerate(split_rows):
            gold = nli[0] if y == "1" else nli[1 + i % 2]
            body.append(
                f"{i}\t{i}\t{i}e\t{genre}\t( {a} )\t( {b} )\t(ROOT {a})\t(ROOT {b})\t{a}\t{b}"
                + f"\t{gold}" * (votes + 1)
            )
        return [header, *body]

    _write(root / "MNLI" / "train.tsv", mnli(rows["train"], 1, "fiction"))
    _write(root / "MNLI" / "dev_matched.tsv", mnli(rows["dev"], 5, "fiction"))
    _write(root / "MNLI" / "dev_mismatched.tsv", mnli(labelled(n_dev + 6, 7), 5, "letters"))
    for name in ("test_matched", "test_mismatched"):
        _write(
            root / "MNLI" / f"{name}.tsv",
            [base, *(f"{i}\t{i}\t{i}e\tx\t(a)\t(b)\t(a)\t(b)\t{a}\t{b}" for i, (a, b, _) in enumerate(rows["test"]))],
        )
    entail = {"1": "entailment", "0": "not_entailment"}
    for task, (first, second) in {
        "QNLI": ("question", "sentence"),
        "RTE": ("sentence1", "sentence2"),
        "WNLI": ("sentence1", "sentence2"),
    }.items():
        for split in ("train", "dev"):
            body = [f"{i}\t{a}\t{b}\t{y if task == 'WNLI' else entail[y]}" for i, (a, b, y) in enumerate(rows[split])]
            _write(root / task / f"{split}.tsv", [f"index\t{first}\t{second}\tlabel", *body])
        _write(
            root / task / "test.tsv",
            [f"index\t{first}\t{second}", *(f"{i}\t{a}\t{b}" for i, (a, b, _) in enumerate(rows["test"]))],
        )
    return root


def _jsonl(path: Path, records: list[dict]) -> None:
    _write(path, [json.dumps(r, ensure_ascii=False) for r in records])


def write_clue(root: Path, n_train: int = 30, n_dev: int = 16) -> Path:
    """Every CLUE classification task's folder (train.json, dev.json, test.json), under the folder names of CLUE's
    zips, WSC's as cluewsc2020_public and CMNLI's one level down (cmnli/cmnli_public/)."""
    r = random.Random(3)
    nli = ["entailment", "neutral", "contradiction", "-"]
    for split, n in (("train", n_train), ("dev", n_dev), ("test", 6)):
        pairs = labelled(n, {"train": 10, "dev": 11, "test": 12}[split])
        keep_label = split != "test"

        def rec(fields: dict, label: object, keep: bool = keep_label) -> dict:
            return {**fields, "label": label} if keep else fields

        _jsonl(root / "afqmc" / f"{split}.json", [rec({"sentence1": a, "sentence2": b}, y) for a, b, y in pairs])
        _jsonl(
            root / "tnews" / f"{split}.json",
            [
                rec({"sentence": a, "keywords": ""}, str(100 + 2 * int(y)), keep_label) | {"label_desc": "news"}
                for a, _, y in pairs
            ],
        )
        _jsonl(
            root / "iflytek" / f"{split}.json",
            [rec({"sentence": a, "label_des": "x"}, str(int(y) * 7)) for a, _, y in pairs],
        )
        for folder in (Path("cmnli") / "cmnli_public", Path("ocnli")):
            _jsonl(
                root / folder / f"{split}.json",
                [rec({"sentence1": a, "sentence2": b}, nli[i % 4]) for i, (a, b, _) in enumerate(pairs)],
            )
        wsc = []
        for i, (_, _, y) in enumerate(pairs):
            text = "这时候放在床上枕头旁边的手机响了，现在它突然响了。"
            noun = r.choice([("床", text.index("床")), ("手机", text.index("手机"))])
            target = {
                "span1_index": noun[1],
                "span1_text": noun[0],
                "span2_index": text.index("它"),
                "span2_text": "它",
            }
            wsc.append(rec({"target": target, "idx": i, "text": text}, "true" if y == "1" else "false"))
        _jsonl(root / "cluewsc2020_public" / f"{split}.json", wsc)
        _jsonl(
            root / "csl" / f"{split}.json",
            [rec({"id": i, "abst": a, "keyword": b.split()[:3]}, y) for i, (a, b, y) in enumerate(pairs)],
        )
    return root


def save_tiny_model(directory: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-wide BERT with a vocabulary of the synthetic files' words (and letters), tokenizer inside."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = small_tokenizer(directory, WORDS)
    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position=256,
        initializer_range=0.1,
    )
    torch.manual_seed(seed)
    Encoder(config).save_pretrained(directory)
    tokenizer.save(directory)
    return directory
