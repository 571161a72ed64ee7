"""What is ELMo pretraining worth as frozen features for Chinese NER? Pretrained vs random init, same tagger.

1. Text, tokenizer, shards: the raw text of the `peoples-daily-ner` TRAIN split (People's Daily, January
   1998; dev/test sentences never seen), a WordPiece vocabulary (CJK characters split one by one), as in
   scripts/studies/zh_ner.py (`prepare_text`, without its sentiment reviews).
2. Pretraining: ELMo-mini (configs/pretrain/elmo-mini.yaml) as a biLM for --minutes or --steps.
3. NER on `peoples-daily-ner` (BIO over PER/LOC/ORG), the same BiLSTM tagger on frozen features, for each
   of --seeds:
   (a) `pretrained`: the pretrained ELMo, ELMo's task-weighted scalar mix of all its layers
       (technique.feature_layers = num_layers + 1, gamma and softmax weights learned with the tagger);
   (b) `random`: the same ELMo architecture and tokenizer from random init, read the same way;
   (c) with --bert DIR: `bert`, a BERT model directory (e.g. scripts/studies/zh_ner.py's runs/zh/pretrain/final),
       the scalar mix of all its layers; with --bert-mini, BERT-mini (configs/pretrain/bert-mini.yaml)
       pretrained here on the same shards for as many tokens as the ELMo saw (batch 32 x --pretrain-len).
Prints entity F1 (dev, test) per arm and seed, mean +- sd per arm, and ends with one JSON line whose
`ratio` is the pretrained arm's mean test F1 over the random arm's.

    python scripts/studies/elmo_ner.py --minutes 20 --epochs 1 --seeds 0 1
    python scripts/studies/elmo_ner.py --minutes 30 --steps 1200 --bert-mini --reuse   # + BERT-mini at equal tokens
    python scripts/studies/elmo_ner.py --quick          # a smoke run: tiny budget and subsets (not a result)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from zh_ner import prepare_text, run

from bertzoo.config import load_finetune_config
from bertzoo.data.tasks.builtin import load_builtin_task
from bertzoo.loading import read_config
from bertzoo.precision import cpu_capability
from bertzoo.train.finetune import finetune

PRETRAIN = "configs/pretrain/elmo-mini.yaml"
BERT_PRETRAIN = "configs/pretrain/bert-mini.yaml"
NER = "configs/finetune/peoples-daily-ner-bert-mini-zh.yaml"  # data, scheme, batching; the model is per arm


def pretrain_elmo(out: Path, shards: Path, args) -> str:
    """The pretrained ELMo's directory (the run is reused when its summary is there)."""
    pre = out / "pretrain"
    steps = args.steps or max(50, round(args.minutes * 60 * 1.0))
    if not (pre / "summary.json").is_file():  # written when a pretraining session ends (done or capped)
        run([
            "pretrain", PRETRAIN, "--data.shards", str(shards), "--train.output_dir", str(pre),
            "--train.max_minutes", str(args.minutes), "--train.max_steps", str(steps),
            "--train.schedule_clock", "steps",
            "--data.max_seq_len", str(args.pretrain_len), "--train.save_every", str(steps),
            *(["--resume", "auto"] if (pre / "checkpoints").is_dir() else []),
        ])  # fmt: skip
    # Stopped by --minutes before --steps: no final/ directory, the last checkpoint is the model.
    summary = json.loads((pre / "summary.json").read_text())
    return summary.get("final_dir") or summary["last_checkpoint"]


def pretrain_bert_mini(out: Path, shards: Path, tokens: int, args) -> str:
    """BERT-mini pretrained on the same shards for about `tokens` tokens (the ELMo's count), reused when there."""
    pre = out / "bert-pretrain"
    batch = 32
    steps = max(20, round(tokens / (batch * args.pretrain_len)))
    if not (pre / "summary.json").is_file():
        run([
            "pretrain", BERT_PRETRAIN, "--data.shards", str(shards), "--train.output_dir", str(pre),
            "--train.max_steps", str(steps), "--train.batch_size", str(batch), "--train.save_every", str(steps),
            "--data.max_seq_len", str(args.pretrain_len), "--train.max_minutes", str(4 * args.minutes),
            "--train.schedule_clock", "steps",
            *(["--resume", "auto"] if (pre / "checkpoints").is_dir() else []),
        ])  # fmt: skip
    summary = json.loads((pre / "summary.json").read_text())
    return summary.get("final_dir") or summary["last_checkpoint"]


def subset_files(out: Path, args) -> dict[str, Any]:
    """Data overrides: the built-in dataset, or (--eval-examples) the first N sentences of each split as
    CoNLL files, the training split cut to --train-examples, so a smoke run evaluates in seconds."""
    if not args.eval_examples:
        return {"data.max_train_examples": args.train_examples or None}
    data: dict[str, Any] = {"data.dataset": ""}
    for split in ("train", "dev", "test"):
        n = args.train_examples if split == "train" else args.eval_examples
        rows = load_builtin_task("peoples-daily-ner", split)[: n or None]
        path = out / f"{split}-{n}.conll"
        text = "\n\n".join("\n".join(f"{c} {t}" for c, t in zip(r["tokens"], r["labels"], strict=True)) for r in rows)
        path.write_text(text + "\n", encoding="utf-8")
        data[f"data.{split}"] = str(path)
    return data


def layers_of(model_dir: str) -> int:
    """num_layers + 1: every layer a backbone hands out (ELMo: the token layer and each biLSTM layer)."""
    return read_config(model_dir)[1].num_layers + 1


def tag(arm: str, init: dict[str, Any], layers: int, seed: int, out: Path, data: dict[str, Any], args) -> dict:
    """Train the BiLSTM tagger on one arm's frozen features; dev and test entity F1."""
    overrides = {
        **init,
        **data,
        "technique.freeze_encoder": True,
        "technique.feature_layers": layers,
        "technique.feature_mix": "weighted",
        "technique.feature_head": "bilstm",
        "train.output_dir": str(out / f"ner-{arm}-{seed}"),
        "train.seed": seed,
        "train.epochs": args.epochs,
        "train.lr": args.lr,
        "train.save_every": 0,
    }
    done = out / f"ner-{arm}-{seed}" / "summary.json"
    if args.reuse and done.is_file():  # a finished run of this arm and seed (--reuse: the caller vouches)
        summary = json.loads(done.read_text())
        row = {"arm": arm, "seed": seed, "dev_f1": summary["dev"]["f1"], "test_f1": summary["test"]["f1"]}
        print(json.dumps({**row, "reused": str(done)}), flush=True)
        return row
    t = time.perf_counter()
    summary = finetune(load_finetune_config(NER, overrides))
    row = {"arm": arm, "seed": seed, "dev_f1": summary["dev"]["f1"], "test_f1": summary["test"]["f1"]}
    row["wall_s"] = round(time.perf_counter() - t, 1)
    print(json.dumps(row), flush=True)
    return row


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/elmo_ner")
    ap.add_argument("--minutes", type=float, default=20.0, help="pretraining wall-clock budget")
    ap.add_argument("--steps", type=int, default=None, help="pretraining steps (default: ~1 step/s x --minutes)")
    ap.add_argument("--pretrain-len", type=int, default=128, help="pretraining block length (data.max_seq_len)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--epochs", type=float, default=1.0, help="NER epochs")
    ap.add_argument("--lr", type=float, default=2e-3, help="NER peak learning rate (tagger and scalar mix)")
    ap.add_argument("--train-examples", type=int, default=0, help="NER training subset (0 = all)")
    ap.add_argument("--eval-examples", type=int, default=0, help="first N dev/test sentences (0 = all)")
    ap.add_argument("--bert", default="", help="a BERT model directory: adds its frozen features as arm (c)")
    ap.add_argument("--bert-mini", action="store_true", help="arm (c): BERT-mini pretrained here, equal tokens")
    ap.add_argument("--reuse", action="store_true", help="reuse finished NER runs of an arm and seed (same settings)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 steps, small subsets, one seed")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.minutes, args.pretrain_len, args.seeds = 20, 1.0, 64, args.seeds[:1]
        args.train_examples, args.eval_examples, args.epochs = 300, 100, 1.0
        args.out = args.out if args.out != "runs/elmo_ner" else "runs/elmo_ner-quick"
    out = Path(args.out)
    started = time.perf_counter()
    shards = prepare_text(out, args.vocab_size, reviews=False)
    model_dir = pretrain_elmo(out, shards, args)
    pretrain_summary = json.loads((out / "pretrain" / "summary.json").read_text())
    data = subset_files(out, args)
    elmo_layers = layers_of(model_dir)
    arms: dict[str, tuple[dict[str, Any], int]] = {
        "pretrained": ({"model": model_dir}, elmo_layers),
        # Same architecture (the pretraining config's model section) and tokenizer, random weights.
        "random": (
            {
                "model": "",
                "model_config": {"variant": "elmo", "preset": "elmo-mini", "dropout": 0.0},
                "tokenizer": model_dir,
            },
            elmo_layers,
        ),  # fmt: skip
    }
    bert = args.bert
    if args.bert_mini and not bert:
        bert = pretrain_bert_mini(out, shards, pretrain_summary["tokens_seen"], args)
    bert_summary = {}
    if bert:
        arms["bert"] = ({"model": bert}, layers_of(bert))
        if args.bert_mini:
            bert_summary = json.loads((out / "bert-pretrain" / "summary.json").read_text())
    rows = [
        tag(arm, init, layers, seed, out, data, args) for arm, (init, layers) in arms.items() for seed in args.seeds
    ]

    print(
        f"\n{time.strftime('%Y-%m-%d')}, CPU {cpu_capability()}, ELMo-mini pretrained {pretrain_summary['steps']} "
        f"steps ({pretrain_summary.get('tokens_seen', 0):,} tokens), NER {args.epochs:g} epoch(s) at lr {args.lr}, "
        f"frozen features, scalar mix of all layers, BiLSTM tagger, seeds {args.seeds}"
    )
    if bert_summary:
        print(
            f"BERT-mini pretrained {bert_summary['steps']} steps ({bert_summary.get('tokens_seen', 0):,} tokens, "
            f"{bert_summary.get('elapsed_s', 0) / 60:.1f} min; "
            f"ELMo {pretrain_summary.get('elapsed_s', 0) / 60:.1f} min)"
        )
    print(f"{'arm':<11} {'seed':>4} {'dev F1':>7} {'test F1':>8}")
    for r in rows:
        print(f"{r['arm']:<11} {r['seed']:>4} {r['dev_f1']:>7.4f} {r['test_f1']:>8.4f}")
    result: dict[str, Any] = {"cpu_capability": cpu_capability(), "pretrain_steps": pretrain_summary["steps"]}
    for arm in arms:
        dev = mean_sd([r["dev_f1"] for r in rows if r["arm"] == arm])
        test = mean_sd([r["test_f1"] for r in rows if r["arm"] == arm])
        print(f"{arm:<11} mean dev {dev[0]:.4f} ± {dev[1]:.4f}, test {test[0]:.4f} ± {test[1]:.4f}")
        result[arm] = {"dev_f1": dev[0], "dev_sd": dev[1], "test_f1": test[0], "test_sd": test[1]}
    random_f1 = result["random"]["test_f1"]
    result["ratio"] = result["pretrained"]["test_f1"] / random_f1 if random_f1 > 0 else None
    if bert_summary:
        result["bert_pretrain"] = {k: bert_summary.get(k) for k in ("steps", "tokens_seen", "elapsed_s", "precision")}
    result["elmo_pretrain"] = {k: pretrain_summary.get(k) for k in ("steps", "tokens_seen", "elapsed_s", "precision")}
    result["quick"] = args.quick
    result["wall_s"] = round(time.perf_counter() - started, 1)
    (out / "results.json").write_text(json.dumps({"rows": rows, **result}, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
