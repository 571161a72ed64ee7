"""Which BERT-mini pretraining recipe helps fine-tuning at a CPU budget? One lever at a time.

Each recipe pretrains BERT-mini on the train split of built-in English Wikipedia for the same
number of optimizer steps (the budget: `--steps`, about 10 minutes on the 2-core AVX2 machine
for the baseline), then the pretrained model and the same architecture from random init fine-tune
with one recipe on wiki-topics (a fixed subset, see --ft-examples) for each seed. Pretraining,
tokenizers and shards already under --out are reused, so recipes can be added one run at a time.
Prints a table (mean +- sd over seeds) and writes results.json; the last line is JSON.

    python scripts/recipe_study.py --recipes baseline vocab8k --steps 200 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bertzoo.config import load_pretrain_config
from bertzoo.data.corpus import read_documents
from bertzoo.data.shards import prepare_shards
from bertzoo.data.tokenizer import train_wordpiece
from bertzoo.precision import cpu_capability
from bertzoo.train.pretrain import pretrain

PRETRAIN = "configs/pretrain/bert-mini.yaml"
# The fine-tuning arm is the equal-budget benchmark's (one recipe, reused when done).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from objectives_small import finetune_dev  # noqa: E402

# Each lever changed alone against `baseline` (the config file as it is), then combined.
RECIPES: dict[str, dict[str, Any]] = {
    "baseline": {"vocab": 30000, "overrides": {}},
    "vocab8k": {"vocab": 8192, "overrides": {}},
    "no-dropout": {"vocab": 30000, "overrides": {"model.dropout": 0.0, "model.attention_dropout": 0.0}},
    "mask30": {"vocab": 30000, "overrides": {"data.masking.mask_prob": 0.3}},
    "lr2e-3": {"vocab": 30000, "overrides": {"train.lr": 2e-3}},
    "pre-ln": {"vocab": 30000, "overrides": {"model.norm": "pre"}},
    "seq64": {"vocab": 30000, "overrides": {"data.max_seq_len": 64, "train.batch_size": 64}},
    "no-nsp": {"vocab": 30000, "overrides": {"objective": "mlm", "data.nsp": False}},
    # Untied MLM decoder: a tied one pushes every rare token's embedding the same way (the softmax's
    # "not this word" gradient), so after a few hundred steps rare words share one direction.
    "untied": {"vocab": 30000, "overrides": {"model.tie_word_embeddings": False}},
    "untied-8k": {"vocab": 8192, "overrides": {"model.tie_word_embeddings": False}},
    "combined": {
        "vocab": 8192,
        "overrides": {"model.dropout": 0.0, "model.attention_dropout": 0.0, "data.masking.mask_prob": 0.3},
    },
}


def shards_for(vocab: int, out: Path, docs: list[str]) -> Path:
    shards = out / f"shards-{vocab}"
    if not (shards / "meta.json").is_file():
        tok = train_wordpiece(docs, vocab)
        prepare_shards(docs, tok, shards, progress=False, overwrite=True, source="builtin:wiki-en")
    return shards


def run_recipe(name: str, out: Path, docs: list[str], args) -> dict[str, Any]:
    spec = RECIPES[name]
    shards = shards_for(spec["vocab"], out, docs)
    pre_dir = out / name / "pretrain"
    done = pre_dir / "summary.json"
    if done.is_file():
        summary = json.loads(done.read_text())
    else:
        overrides = {
            **spec["overrides"],
            "data.shards": str(shards),
            "train.output_dir": str(pre_dir),
            "train.max_steps": args.steps,
            "train.save_every": args.steps,
            "train.keep_last": 1,
            "train.seed": 0,
        }
        t = time.perf_counter()
        summary = pretrain(load_pretrain_config(PRETRAIN, overrides))
        summary["wall_s"] = time.perf_counter() - t
    model = summary["final_dir"]
    scratch_init = {"model": "", "model_config": {"preset": "bert-mini", **_arch(spec)}, "tokenizer": model}
    pre, rnd = [], []
    for seed in args.seeds:
        pre.append(finetune_dev({"model": model}, out / name / f"ft-pretrained-{seed}", seed, args)["dev_accuracy"])
        rnd.append(finetune_dev(scratch_init, out / name / f"ft-random-{seed}", seed, args)["dev_accuracy"])
    gains = [p - r for p, r in zip(pre, rnd, strict=True)]
    row = {
        "recipe": name,
        "vocab": spec["vocab"],
        "overrides": spec["overrides"],
        "steps": summary["steps"],
        "tokens": summary["tokens_seen"],
        "tokens_per_s": round(summary.get("tokens_per_s", float("nan")), 1),
        "precision": summary.get("precision"),
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
    ap.add_argument("--recipes", nargs="+", default=["baseline", "combined"], choices=list(RECIPES))
    ap.add_argument("--steps", type=int, default=200, help="pretraining optimizer steps (the budget)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--ft-epochs", type=float, default=1.0)
    ap.add_argument("--ft-examples", type=int, default=2000, help="wiki-topics training subset (0 = all)")
    ap.add_argument("--ft-len", type=int, default=64)
    ap.add_argument("--ft-lr", type=float, default=2e-4, help="fine-tuning peak learning rate")
    ap.add_argument("--ft-pooling", default="cls", choices=["cls", "mean"], help="sentence vector for fine-tuning")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", default="runs/recipe_study")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = list(read_documents(["builtin:wiki-en"]))
    rows = [run_recipe(name, out, docs, args) for name in args.recipes]
    print(f"\n{time.strftime('%Y-%m-%d')}, CPU {cpu_capability()}, {args.steps} pretraining steps, seeds {args.seeds}")
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
