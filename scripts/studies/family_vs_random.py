"""Does a family's pretraining help its own architecture? Pretrain one config, then fine-tune the result and the
same architecture from random init with one recipe on one or more tasks, for several seeds.

`scripts/studies/recipe_study.py` asks this of BERT-mini under recipe levers; this script asks it of any family whose
encoder the tasks read (XLNet, GPT, RoBERTa, ...), at a token budget, on an 8k-WordPiece tokenizer and shards of
`--corpus` (default: built-in English Wikipedia's train split; wiki-topics' dev articles are the dev split, never
seen in pretraining), with the same fine-tuning recipe for both arms (`benchmarks/objectives_small.py`'s
`finetune_dev`). The random-init arm builds the config's own model section (preset and overrides) with the same
tokenizer. Ends with one JSON line: `ratio` is the pretrained mean dev metric over random init's on the first task.

    python scripts/studies/family_vs_random.py configs/pretrain/xlnet-mini.yaml --tokens 1800000 --seeds 0 1
    python scripts/studies/family_vs_random.py configs/pretrain/xlnet-mini.yaml --set word_embedding_init=ppmi-svd
    python scripts/studies/family_vs_random.py configs/pretrain/bert-mini.yaml --tokens 3300000 \\
        --corpus builtin:peoples-daily:train builtin:chinese-sentiment:train \\
        --eval-corpus builtin:chinese-sentiment:dev --tasks chinese-sentiment peoples-daily-ner \\
        --ft-examples 4000 --ft-len 128 --ft-lr 5e-4 --ft-pooling mean
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path

from bertzoo.cli.common import positive_int
from bertzoo.config import load_pretrain_config
from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.train_tokenizer import LIMIT_ALPHABET, train_wordpiece
from bertzoo.precision import cpu_capability

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from objectives_small import add_finetune_args, finetune_dev, finetune_tag  # noqa: E402
from recipe_study import overrides_of, pretrain_once, set_tag  # noqa: E402

VOCAB = 8192
TASKS = {  # name: (fine-tuning config, the dev metric compared)
    "wiki-topics": ("configs/finetune/wiki-topics-bert-mini.yaml", "accuracy"),
    "chinese-sentiment": ("configs/finetune/chinese-sentiment-zh-minilm.yaml", "accuracy"),
    "peoples-daily-ner": ("configs/finetune/peoples-daily-ner-bert-mini-zh.yaml", "f1"),
}


def corpus_shards(
    out: Path, train: list[str], dev: list[str], limit_alphabet: int = LIMIT_ALPHABET
) -> tuple[Path, Path]:
    """Shards of `train` (with a WordPiece tokenizer trained on it, keeping the `limit_alphabet` most frequent
    characters) and of `dev` with that tokenizer, under a directory named by the inputs (reused when done)."""
    # The default alphabet is left out of the name, so the shards made before it was an option are found again.
    named = [train, dev, VOCAB] + ([limit_alphabet] if limit_alphabet != LIMIT_ALPHABET else [])
    key = hashlib.sha1(json.dumps(named).encode()).hexdigest()[:10]
    shards, dev_shards = out / f"shards-{key}", out / f"shards-{key}-dev"
    if not (shards / "meta.json").is_file():
        docs = list(read_documents(train))
        prepare_shards(
            docs,
            train_wordpiece(docs, VOCAB, limit_alphabet=limit_alphabet),
            shards,
            progress=False,
            overwrite=True,
            source=" ".join(train),
        )
    if not (dev_shards / "meta.json").is_file():
        tok = Tokenizer.load(shards / "tokenizer")
        prepare_shards(list(read_documents(dev)), tok, dev_shards, progress=False, overwrite=True, source=" ".join(dev))
    return shards, dev_shards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a pretraining config (configs/pretrain/*.yaml)")
    ap.add_argument(
        "--limit-alphabet",
        type=positive_int,
        default=LIMIT_ALPHABET,
        help="the tokenizer's distinct characters (Chinese: 6000)",
    )
    ap.add_argument("--tokens", type=int, default=1_800_000, help="pretraining budget: steps = tokens / (batch x len)")
    ap.add_argument("--pretrain-seed", type=int, default=0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    ap.add_argument("--corpus", nargs="+", default=["builtin:wiki-en:train"], help="pretraining text (any input)")
    ap.add_argument("--eval-corpus", nargs="+", default=["builtin:wiki-en:dev"], help="held-out pretraining text")
    ap.add_argument("--tasks", nargs="+", default=["wiki-topics"], choices=list(TASKS))
    add_finetune_args(ap, lr=1e-3, examples=2000, length=64)
    ap.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="pretraining config overrides (YAML values), e.g. word_embedding_init=ppmi-svd; named in the run dir",
    )
    ap.add_argument("--out", default="runs/family_vs_random")
    args = ap.parse_args()
    extra = overrides_of(args.set)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shards, dev = corpus_shards(out, args.corpus, args.eval_corpus, args.limit_alphabet)
    cfg = load_pretrain_config(args.config, {"data.shards": str(shards), **extra})
    base = f"{Path(args.config).stem}-{shards.name}"
    # The pretraining seed names the run (seed 0 unnamed, as before): another seed must not reuse seed 0's run.
    name = base + set_tag(args.set) + (f"+seed{args.pretrain_seed}" if args.pretrain_seed else "")
    # Random init depends on the architecture only: runs that differ in other settings share its fine-tuning runs.
    random_name = base + set_tag(args.set, model_only=True)
    steps = max(1, round(args.tokens / (cfg.train.batch_size * cfg.train.grad_accum * cfg.data.max_seq_len)))
    overrides = {**extra, "data.shards": str(shards), "data.eval_shards": str(dev), "train.seed": args.pretrain_seed}
    summary = pretrain_once(
        args.config,
        out / name / "pretrain",
        steps,
        overrides,
        evals=4,
        threads=args.threads,
        log_every=max(1, steps // 20),
    )
    scratch = {"model": "", "model_config": {"variant": cfg.variant, **cfg.model}}
    scratch["tokenizer"] = str(shards / "tokenizer")  # the pretrained arm's, so only the weights differ
    tag = finetune_tag(args)  # a finished fine-tuning run is reused only for the same recipe
    results = {}
    for task in args.tasks:
        config, metric = TASKS[task]
        pre, rnd = [], []
        for seed in args.seeds:
            model = {"model": summary["final_dir"]}
            pre.append(finetune_dev(model, out / name / f"{task}-{tag}-pretrained-{seed}", seed, args, config=config,
                                    metric=metric)[f"dev_{metric}"])  # fmt: skip
            rnd.append(finetune_dev(scratch, out / random_name / f"{task}-{tag}-random-{seed}", seed, args,
                                    config=config, metric=metric)[f"dev_{metric}"])  # fmt: skip
            print(json.dumps({"task": task, "seed": seed, "pretrained": pre[-1], "random_init": rnd[-1]}), flush=True)
        gains = [a - b for a, b in zip(pre, rnd, strict=True)]
        results[task] = {
            "metric": f"dev_{metric}",
            "pretrained": pre,
            "random_init": rnd,
            "gain_mean": statistics.mean(gains),
            "gain_sd": statistics.stdev(gains) if len(gains) > 1 else 0.0,
        }
        print(f"{task}: gain {results[task]['gain_mean']:+.4f} ± {results[task]['gain_sd']:.4f} ({metric})")
    first = results[args.tasks[0]]
    print(
        json.dumps(
            {
                "ratio": statistics.mean(first["pretrained"]) / statistics.mean(first["random_init"]),
                "family": name,
                "pretrain_steps": summary["steps"],
                "pretrain_tokens": summary["tokens_seen"],
                "pretrain_tokens_per_s": round(summary.get("tokens_per_s", float("nan")), 1),
                "precision": summary.get("precision"),
                "final_metrics": summary.get("final_metrics"),
                "baseline": summary.get("baseline"),
                "tasks": results,
                "cpu": cpu_capability(),
            }
        )
    )


if __name__ == "__main__":
    main()
