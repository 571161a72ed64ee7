"""Does knowledge fusion help? ERNIE (Tsinghua) against the same BERT without entity input, at equal budget.

1. Knowledge graph: WordNet 3.0, all parts of speech (Debian `wordnet-base`), TransE entity embeddings by
   `bertzoo kg-embed` with its defaults and a 6-minute cap, as measured (reused when `--kg` already holds them).
2. Shards: the 8k-WordPiece shards of built-in English Wikipedia (train split; wiki-topics' dev articles are
   the dev split, never seen in pretraining), as scripts/studies/family_vs_random.py makes them, linked to WordNet
   (`bertzoo.knowledge.linking`: the most frequent sense of each lemma, at its mention's first token).
3. Pretraining at equal steps, batch, length and seed: (a) `bert`: BERT-mini, masked LM; (b) `ernie-thu`:
   ERNIE-THU-mini, the same 4 layers x 256 with the top 2 fusing the linked entities, masked LM + dEA;
   (c) `ernie-thu-nodea`: the same without dEA (the paper's ablation: entities fused, never predicted).
4. wiki-topics fine-tuning with one recipe (benchmarks/objectives_small.py's `finetune_dev`) for each seed:
   the pretrained arms (ERNIE-THU's batches linked the same way: the model's own entity list), `random`
   (BERT-mini from random init), `ernie-thu-random` (ERNIE-THU-mini from random init with the same frozen TransE table
   and linking: what the entity input gives without pretraining) and `ernie-thu-unlinked` (the pretrained
   ERNIE-THU fine-tuned without its entity list, so without entity input: what pretraining left in the token
   stream alone; likewise `ernie-thu-nodea-unlinked`).

Prints each arm's dev accuracy per seed and ends with one JSON line: `ratio` is ERNIE-THU's mean dev accuracy
over BERT's.

    python scripts/studies/ernie_thu_study.py --steps 600 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.io import ENTITIES_FILE
from bertzoo.loading import read_config
from bertzoo.precision import cpu_capability
from bertzoo.variants import get_variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from objectives_small import add_finetune_args, finetune_dev, finetune_tag  # noqa: E402
from recipe_study import pretrain_once, shards_for  # noqa: E402

VOCAB = 8192
ERNIE = "configs/pretrain/ernie-thu-mini.yaml"
# Pretrained arms: config and overrides. `ernie-thu-nodea` is the paper's "w/o dEA" ablation (masked LM with the
# entities fused, none predicted).
PRETRAINED = {
    "bert": ("configs/pretrain/bert-mini.yaml", {}),
    "ernie-thu": (ERNIE, {}),
    "ernie-thu-nodea": (
        ERNIE,
        {"objective": "mlm", "objective_args.entity_replace": 0, "objective_args.entity_mask": 0},
    ),
}


def knowledge_graph(kg: Path, args) -> Path:
    """The TransE directory: made by `bertzoo kg-embed` unless it is there already."""
    if not (kg / "entities.json").is_file():
        cmd = [sys.executable, "-m", "bertzoo", "kg-embed", "--kg", "wordnet", "--out", str(kg), "--seed", "0"]
        subprocess.run([*cmd, "--max-minutes", str(args.kg_minutes)], check=True)
    return kg


def random_ernie(pretrained: str, kg: Path, out: Path, args) -> str:
    """ERNIE-THU of the pretrained run's configuration from random init (seeded by --pretrain-seed), with the
    same frozen TransE table and entity list, saved with the shards' tokenizer: a model directory to fine-tune."""
    directory = out / "ernie-thu-random" / "init"
    if not (directory / "model.safetensors").is_file():
        _, config, _ = read_config(pretrained)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.pretrain_seed)
            model = get_variant("ernie-thu").build(config, entities=str(kg))
        model.save_pretrained(directory)
        Tokenizer.load(Path(pretrained)).save(directory)
    return str(directory)


def unlinked(pretrained: str, directory: Path) -> str:
    """A copy of the pretrained model directory without its entity list: fine-tuning then links nothing and
    its knowledge layers run as BERT layers (bertzoo warns so)."""
    if not (directory / "model.safetensors").is_file():
        shutil.copytree(pretrained, directory, ignore=shutil.ignore_patterns(ENTITIES_FILE), dirs_exist_ok=True)
    return str(directory)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600, help="pretraining steps of each arm")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--pretrain-seed", type=int, default=0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    ap.add_argument("--kg", default="runs/kg/wordnet", help="a `bertzoo kg-embed` directory (made if missing)")
    ap.add_argument("--kg-minutes", type=float, default=6.0, help="time cap of the TransE run (when made here)")
    add_finetune_args(ap, lr=1e-3, examples=2000, length=64)
    ap.add_argument("--no-ablation", action="store_true", help="skip the w/o-dEA arm (its pretraining run)")
    ap.add_argument("--out", default="runs/ernie_thu_study")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kg = knowledge_graph(Path(args.kg), args)
    docs = list(read_documents(["builtin:wiki-en:train"]))
    shards = shards_for(VOCAB, out, docs)
    dev = shards_for(VOCAB, out, docs, "dev")
    common = {
        "data.shards": str(shards),
        "data.eval_shards": str(dev),
        "data.nsp": False,
        "data.max_seq_len": args.seq_len,
        "train.batch_size": args.batch_size,
        "train.grad_accum": 1,
        "train.seed": args.pretrain_seed,
    }
    summaries = {}
    for arm, (config, extra) in PRETRAINED.items():
        if arm == "ernie-thu-nodea" and args.no_ablation:
            continue
        overrides = {**common, **extra, **({"objective_args.entities": str(kg)} if config == ERNIE else {})}
        summaries[arm] = pretrain_once(
            config, out / arm / "pretrain", args.steps, overrides, evals=4, threads=args.threads
        )
    inits = {arm: {"model": s["final_dir"]} for arm, s in summaries.items()}
    inits["random"] = {"model": "", "model_config": {"preset": "bert-mini"}, "tokenizer": str(shards / "tokenizer")}
    inits["ernie-thu-random"] = {"model": random_ernie(summaries["ernie-thu"]["final_dir"], kg, out, args)}
    for arm in ("ernie-thu", "ernie-thu-nodea"):  # each ERNIE-THU also without entity input in fine-tuning
        if arm in summaries:
            inits[f"{arm}-unlinked"] = {
                "model": unlinked(summaries[arm]["final_dir"], out / f"{arm}-unlinked" / "init")
            }
    tag = finetune_tag(args)
    rows: dict[str, list[float]] = {arm: [] for arm in inits}
    for seed in args.seeds:
        for arm, init in inits.items():
            result = finetune_dev(init, out / arm / f"ft-{tag}-{seed}", seed, args)
            rows[arm].append(result["dev_accuracy"])
            print(json.dumps({"arm": arm, "seed": seed, **result}), flush=True)
    print(f"\nwiki-topics dev accuracy, {len(args.seeds)} seeds, CPU {cpu_capability()}")
    for arm, accs in rows.items():
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        print(f"{arm:<18} {statistics.mean(accs):.4f} ± {sd:.4f}  {accs}")

    def gain(a: str, b: str) -> dict[str, float] | None:
        if b not in rows:
            return None
        diffs = [x - y for x, y in zip(rows[a], rows[b], strict=True)]
        return {"mean": statistics.mean(diffs), "sd": statistics.stdev(diffs) if len(diffs) > 1 else 0.0}

    gains = {
        "ernie-thu_over_bert": gain("ernie-thu", "bert"),
        "ernie-thu_over_its_random_init": gain("ernie-thu", "ernie-thu-random"),
        "ernie-thu_over_itself_unlinked": gain("ernie-thu", "ernie-thu-unlinked"),
        "ernie-thu_over_no_dea": gain("ernie-thu", "ernie-thu-nodea"),
        "bert_over_random": gain("bert", "random"),
    }
    gains = {name: g for name, g in gains.items() if g is not None}
    for name, g in gains.items():
        print(f"{name:<32} {g['mean']:+.4f} ± {g['sd']:.4f}")
    result = {
        "ratio": statistics.mean(rows["ernie-thu"]) / statistics.mean(rows["bert"]),
        "dev_accuracy": rows,
        "gains": gains,
        "pretrain": {
            arm: {k: s.get(k) for k in ("steps", "tokens_seen", "tokens_per_s", "precision", "final_metrics")}
            for arm, s in summaries.items()
        },
        "kg": str(kg),
        "cpu": cpu_capability(),
    }
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
