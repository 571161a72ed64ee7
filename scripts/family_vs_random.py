"""Does a family's pretraining help its own architecture? Pretrain one config, then fine-tune the result and the
same architecture from random init with one recipe on wiki-topics, for several seeds.

`scripts/recipe_study.py` asks this of BERT-mini under recipe levers; this script asks it of any family whose
encoder the tasks read (XLNet, GPT, RoBERTa, ...), at a token budget, on the same 8k-WordPiece shards of built-in
English Wikipedia (train split; wiki-topics' dev articles are the dev split, never seen in pretraining) and with
the same fine-tuning recipe (`benchmarks/objectives_small.py`'s `finetune_dev`). The random-init arm builds the
config's own model section (preset and overrides) with the same tokenizer. Ends with one JSON line: `ratio` is
the pretrained mean dev accuracy over random init's.

    python scripts/family_vs_random.py configs/pretrain/xlnet-mini.yaml --tokens 1800000 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bertzoo.config import load_pretrain_config
from bertzoo.data.corpus import read_documents
from bertzoo.precision import cpu_capability

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from objectives_small import add_finetune_args, finetune_dev  # noqa: E402
from recipe_study import finetune_tag, pretrain_once, shards_for  # noqa: E402

VOCAB = 8192


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a pretraining config (configs/pretrain/*.yaml)")
    ap.add_argument("--tokens", type=int, default=1_800_000, help="pretraining budget: steps = tokens / (batch x len)")
    ap.add_argument("--pretrain-seed", type=int, default=0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    add_finetune_args(ap, lr=1e-3, examples=2000, length=64)
    ap.add_argument("--out", default="runs/family_vs_random")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = list(read_documents(["builtin:wiki-en:train"]))
    shards = shards_for(VOCAB, out, docs)
    dev = shards_for(VOCAB, out, docs, "dev")
    cfg = load_pretrain_config(args.config, {"data.shards": str(shards)})
    name = Path(args.config).stem
    steps = max(1, round(args.tokens / (cfg.train.batch_size * cfg.train.grad_accum * cfg.data.max_seq_len)))
    overrides = {"data.shards": str(shards), "data.eval_shards": str(dev), "train.seed": args.pretrain_seed}
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
    pre, rnd = [], []
    for seed in args.seeds:
        tag = finetune_tag(args)  # a finished fine-tuning run is reused only for the same recipe
        pre.append(
            finetune_dev({"model": summary["final_dir"]}, out / name / f"ft-{tag}-pretrained-{seed}", seed, args)
        )
        rnd.append(finetune_dev(scratch, out / name / f"ft-{tag}-random-{seed}", seed, args))
        print(json.dumps({"seed": seed, "pretrained": pre[-1], "random_init": rnd[-1]}), flush=True)
    p = [r["dev_accuracy"] for r in pre]
    r = [x["dev_accuracy"] for x in rnd]
    gains = [a - b for a, b in zip(p, r, strict=True)]
    print(
        json.dumps(
            {
                "ratio": statistics.mean(p) / statistics.mean(r),
                "family": name,
                "pretrain_steps": summary["steps"],
                "pretrain_tokens": summary["tokens_seen"],
                "pretrain_tokens_per_s": round(summary.get("tokens_per_s", float("nan")), 1),
                "precision": summary.get("precision"),
                "final_metrics": summary.get("final_metrics"),
                "baseline": summary.get("baseline"),
                "pretrained_dev": p,
                "random_init_dev": r,
                "gain_mean": statistics.mean(gains),
                "gain_sd": statistics.stdev(gains) if len(gains) > 1 else 0.0,
                "cpu": cpu_capability(),
            }
        )
    )


if __name__ == "__main__":
    main()
