"""Which BERT-mini pretraining recipe helps fine-tuning at a CPU budget? One lever at a time.

A recipe is a lever name or several joined by "+" (`combined+bs16+wwm`, see LEVERS). Each pretrains
BERT-mini on the train split of built-in English Wikipedia for the same budget (`--steps`, or
`--tokens`: 1.8M tokens is about 10 minutes on the 2-core AVX2 machine), recording held-out MLM loss
on the dev split eight times along the way, then the pretrained model and the same architecture
from random init fine-tune with one recipe on wiki-topics (a fixed subset, see --ft-examples) for
each seed. Pretraining,
tokenizers and shards already under --out are reused, so recipes can be added one run at a time.
Prints a table (mean +- sd over seeds) and writes results.json; the last line is JSON.

    python scripts/studies/recipe_study.py --recipes baseline vocab8k combined+bs16 --tokens 1800000 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bertzoo.config import load_pretrain_config
from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.precision import cpu_capability
from bertzoo.train.pretrain import pretrain

PRETRAIN = "configs/pretrain/bert-mini.yaml"
# The fine-tuning arm is the equal-budget benchmark's (one recipe, reused when done).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from objectives_small import add_finetune_args, finetune_dev, finetune_tag  # noqa: E402

# Levers, each changed alone against the config file as it is, or joined with "+" (vocab8k+pre-ln).
LEVERS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "vocab8k": {"vocab": 8192},
    "vocab16k": {"vocab": 16384},
    "no-dropout": {"model.dropout": 0.0, "model.attention_dropout": 0.0},
    "mask30": {"data.masking.mask_prob": 0.3},
    "lr5e-4": {"train.lr": 5e-4},
    "lr2e-3": {"train.lr": 2e-3},
    "lr3e-3": {"train.lr": 3e-3},
    "beta98": {"train.adam_beta2": 0.98},
    "one-cycle": {"train.warmup_ratio": 0.5},  # triangular: linear up to the peak at half-way, linear down
    "wsd": {"train.schedule": "wsd", "train.decay_ratio": 0.2},
    "pre-ln": {"model.norm": "pre"},
    "seq64": {"data.max_seq_len": 64},
    "bs16": {"train.batch_size": 16},
    "bs64": {"train.batch_size": 64},
    "no-nsp": {"objective": "mlm", "data.nsp": False},
    "wwm": {"data.masking.strategy": "whole_word"},
    "unigram-bias": {"mlm_bias_init": "unigram"},
    # Rarity-weighted selection: more content words among the predictions (see MaskingConfig).
    "freq0.5": {"data.masking.frequency_power": 0.5},
    "freq1": {"data.masking.frequency_power": 1.0},
    # Untied MLM decoder: a tied one pushes every rare token's embedding the same way (the softmax's
    # "not this word" gradient), so after a few hundred steps rare words share one direction.
    "untied": {"model.tie_word_embeddings": False},
    # Masked LM + the two halves of each text finding each other in the batch (objectives/doc_contrast.py):
    # a document-level signal in the mean-pooled vector that fine-tuning reads.
    "contrast": {"objective": "mlm+contrast", "data.nsp": False},
    # Word tables start from PPMI + SVD vectors of the same shards (bertzoo.data.tokens.word_vectors), then masked LM.
    "ppmi": {"word_embedding_init": "ppmi-svd"},
}
# Named combinations.
LEVERS["combined"] = {**LEVERS["vocab8k"], **LEVERS["no-dropout"], **LEVERS["mask30"]}


# Every recipe starts from the paper's BERT settings, whatever the config file's defaults are now,
# so `baseline` stays the same run as in the tables of docs/pretraining.md.
PAPER = {
    "model.dropout": 0.1,
    "model.attention_dropout": 0.1,
    "data.masking.mask_prob": 0.15,
    "word_embedding_init": "random",
}


def recipe(name: str) -> dict[str, Any]:
    """Vocabulary size and config overrides of `name`: lever names joined by "+"."""
    spec: dict[str, Any] = {"vocab": 30000, "overrides": dict(PAPER)}
    for lever in name.split("+"):
        if lever not in LEVERS:
            raise SystemExit(f"unknown lever {lever!r}; choose from: {', '.join(LEVERS)}")
        for key, value in LEVERS[lever].items():
            if key == "vocab":
                spec["vocab"] = value
            else:
                spec["overrides"][key] = value
    return spec


def shards_for(vocab: int, out: Path, docs: list[str], split: str = "train") -> Path:
    """Shards of the train split (or the dev split, with the train split's tokenizer)."""
    shards = out / f"shards-{vocab}" if split == "train" else out / f"shards-{vocab}-{split}"
    if not (shards / "meta.json").is_file():
        if split == "train":
            tok = train_wordpiece(docs, vocab)
        else:
            tok = Tokenizer.load(shards_for(vocab, out, docs) / "tokenizer")
            docs = list(read_documents([f"builtin:wiki-en:{split}"]))
        prepare_shards(docs, tok, shards, progress=False, overwrite=True, source=f"builtin:wiki-en:{split}")
    return shards


def set_tag(items: list[str], *, model_only: bool = False) -> str:
    """The --set overrides as a run directory's name suffix ("" without them), sorted so that their order does
    not matter; `model_only`: only the `model.` keys."""
    chosen = [i for i in items if i.startswith("model.")] if model_only else items
    return "".join(f"+{i}" for i in sorted(chosen))


def overrides_of(items: list[str]) -> dict:
    """--set KEY=VALUE items as config overrides (YAML values)."""
    extra = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: write KEY=VALUE")
        extra[key] = yaml.safe_load(value)
    return extra


def pretrain_once(
    config: str,
    run_dir: Path,
    steps: int,
    overrides: dict[str, Any],
    *,
    evals: int,
    threads: int | None = None,
    log_every: int | None = None,
) -> dict[str, Any]:
    """Pretrain `config` for `steps` into `run_dir` with about `evals` held-out evaluations and one checkpoint
    (plus `overrides`: shards, seed, the recipe), or the summary of a run that already finished there."""
    done = run_dir / "summary.json"
    if done.is_file():
        return json.loads(done.read_text())
    overrides = {
        **overrides,
        "train.output_dir": str(run_dir),
        "train.max_steps": steps,
        "train.eval_every": max(10, steps // evals),
        "train.save_every": steps,
        "train.keep_last": 1,
    }
    if log_every:
        overrides["train.log_every"] = log_every
    if threads:
        overrides["train.threads"] = threads
    t = time.perf_counter()
    summary = pretrain(load_pretrain_config(config, overrides))
    summary["wall_s"] = time.perf_counter() - t
    return summary


def steps_for(spec: dict[str, Any], args) -> int:
    """The step budget: --steps, or --tokens divided by the recipe's sequences per step x length."""
    if not args.tokens:
        return args.steps
    cfg = load_pretrain_config(PRETRAIN, spec["overrides"])
    return max(1, round(args.tokens / (cfg.train.batch_size * cfg.train.grad_accum * cfg.data.max_seq_len)))


def run_recipe(name: str, out: Path, docs: list[str], args) -> dict[str, Any]:
    spec = recipe(name)
    shards = shards_for(spec["vocab"], out, docs)
    pre_dir = out / name / "pretrain"
    dev = shards_for(spec["vocab"], out, docs, "dev")
    overrides = {**spec["overrides"], "data.shards": str(shards), "data.eval_shards": str(dev), "train.seed": 0}
    summary = pretrain_once(PRETRAIN, pre_dir, steps_for(spec, args), overrides, evals=8)
    model = summary["final_dir"]
    arch = _arch(spec)
    scratch_init = {"model": "", "model_config": {"preset": "bert-mini", **arch}, "tokenizer": model}
    # Random init depends only on the architecture and vocabulary: shared by recipes that agree on both. Both
    # arms' runs are keyed by the fine-tuning recipe too, so a finished run is reused only for the same recipe.
    rnd_dir = out / ("random-" + "-".join([str(spec["vocab"])] + [f"{k}={v}" for k, v in sorted(arch.items())]))
    tag = finetune_tag(args)
    pre, rnd = [], []
    for seed in args.seeds:
        pre.append(
            finetune_dev({"model": model}, out / name / f"ft-{tag}-pretrained-{seed}", seed, args)["dev_accuracy"]
        )
        rnd.append(finetune_dev(scratch_init, rnd_dir / f"ft-{tag}-{seed}", seed, args)["dev_accuracy"])
    gains = [p - r for p, r in zip(pre, rnd, strict=True)]
    lines = (pre_dir / "metrics.jsonl").read_text().splitlines()
    evals = [json.loads(line) for line in lines if "eval_mlm_loss" in line]
    row = {
        "recipe": name,
        "vocab": spec["vocab"],
        "overrides": spec["overrides"],
        "steps": summary["steps"],
        "tokens": summary["tokens_seen"],
        "tokens_per_s": round(summary.get("tokens_per_s", float("nan")), 1),
        "precision": summary.get("precision"),
        "held_out_mlm_loss": [[r["step"], round(r["eval_mlm_loss"], 4)] for r in evals],
        "unigram_mlm_loss": summary.get("baseline", {}).get("unigram_mlm_loss"),
        "pretrained_dev": pre,
        "random_init_dev": rnd,
        "gain_mean": statistics.mean(gains),
        "gain_sd": statistics.stdev(gains) if len(gains) > 1 else 0.0,
    }
    print(json.dumps(row), flush=True)
    return row


def _arch(spec: dict[str, Any]) -> dict[str, Any]:
    """The architecture overrides of a recipe, so random init builds the same model."""
    return {k.split(".", 1)[1]: v for k, v in spec["overrides"].items() if k.startswith("model.")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="+", default=["baseline", "combined"], help="lever names joined by +")
    ap.add_argument("--steps", type=int, default=200, help="pretraining optimizer steps (the budget)")
    ap.add_argument("--tokens", type=int, default=0, help="budget in tokens (steps = tokens / batch x length)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    add_finetune_args(ap, epochs=1.0, lr=2e-4, examples=2000, length=64, pooling="cls")
    ap.add_argument("--out", default="runs/recipe_study")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = list(read_documents(["builtin:wiki-en"]))
    rows = [run_recipe(name, out, docs, args) for name in args.recipes]
    budget = f"{args.tokens:,} pretraining tokens" if args.tokens else f"{args.steps} pretraining steps"
    ft = f"fine-tuning lr {args.ft_lr}, {args.ft_epochs} epochs, {args.ft_examples or 'all'} examples of {args.ft_len}"
    print(f"\n{time.strftime('%Y-%m-%d')}, CPU {cpu_capability()}, {budget}, {ft}, seeds {args.seeds}")
    print(f"{'recipe':<12} {'tokens/s':>9} {'pretrained':>11} {'random':>8} {'gain':>14}")
    for r in rows:
        print(
            f"{r['recipe']:<12} {r['tokens_per_s']:>9,.0f} {statistics.mean(r['pretrained_dev']):>11.3f} "
            f"{statistics.mean(r['random_init_dev']):>8.3f} {r['gain_mean']:>+8.3f} ± {r['gain_sd']:.3f}"
        )
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(json.dumps({r["recipe"]: {"gain": r["gain_mean"], "gain_sd": r["gain_sd"]} for r in rows}))


if __name__ == "__main__":
    main()
