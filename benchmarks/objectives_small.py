"""Pretraining objectives compared at equal budget, against random init, over seeds.

BERT, RoBERTa, ALBERT, SpanBERT, ERNIE-style and ELECTRA each pretrain their mini model on the same
corpus (the train split of built-in English Wikipedia) through the family's own documented recipe,
`configs/pretrain/<family>-mini.yaml` (objective, masking, optimiser settings, batch and
accumulation as written there). Only the corpus, the budget and the seed are set here. The budget is
a number of training sequences (`--sequences`), the same for every family: a family whose recipe
accumulates 8 micro-batches per step takes 8 times fewer steps. Each family uses its own tokenizer
kind (WordPiece; byte-level BPE for RoBERTa; Unigram for ALBERT), all with one vocabulary size.

"ERNIE-style" on English is ERNIE 1.0's schedule without a phrase/entity lexicon (the package has
none for English): token masking, then whole-word masking from half-way.

Every pretrained encoder, and BERT-mini from random init (the "random init" row), then fine-tunes
with one recipe on `wiki-topics` and is scored on the dev split. A family whose encoder or tokenizer
is not BERT-mini's (RoBERTa's byte-level BPE, ALBERT's shared layers, ELECTRA's factorised word table)
is also measured against its own architecture and tokenizer from random init (`random_init-<family>`),
so that every gain is against the same architecture from random init. With `--seeds N` pretraining and
fine-tuning repeat with seeds 0..N-1 and the table gives mean +- sd. Finished stages under --out
are reused; a fine-tuning recipe other than the table's (the --ft-* options) gets its own directories
beside the table's, so both are kept. Writes results.json / results.md and, with --docs, the table
into docs/results.md (one block per fine-tuning recipe).
Last line: JSON `{"families": {name: {"dev_accuracy", "dev_accuracy_sd", "random_arm", "vs_random_arm"}},
"random_init": {...}, "random_arms": {arm: {...}}, "seeds": N, "accuracy_ratio": BERT's dev accuracy over random
init's}`.

    python benchmarks/objectives_small.py --quick                  # every family, tiny budget: < 15 min
    python benchmarks/objectives_small.py --seeds 3 --docs          # the recorded run (docs/results.md)
    python benchmarks/objectives_small.py --seeds 3 --docs --ft-examples 0   # the same, fine-tuned on all
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bertzoo.config import load_finetune_config, load_pretrain_config
from bertzoo.data.text.corpus import read_documents
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_bpe, train_unigram, train_wordpiece
from bertzoo.models.encoder import Encoder
from bertzoo.precision import cpu_capability
from bertzoo.train.finetune import finetune
from bertzoo.train.pretrain import pretrain
from bertzoo.variants import model_config_of

# The tokenizer kind of each family, and what (beyond corpus, budget and seed) differs from its config.
FAMILIES: dict[str, dict[str, Any]] = {
    "bert": {"tokenizer": "wordpiece", "overrides": {}},
    "roberta": {"tokenizer": "bpe", "overrides": {}},
    "albert": {"tokenizer": "unigram", "overrides": {}},
    "spanbert": {"tokenizer": "wordpiece", "overrides": {}},
    "ernie": {"tokenizer": "wordpiece", "overrides": {
        "data.lexicon": "",  # no English lexicon: WordPiece words
        "objective_args": {"stages": [{"strategy": "token", "start": 0.0}, {"strategy": "whole_word", "start": 0.5}]},
    }},
    "electra": {"tokenizer": "wordpiece", "overrides": {}},
}  # fmt: skip
RANDOM_INIT = "random_init"
TRAINERS = {"wordpiece": train_wordpiece, "bpe": train_bpe, "unigram": train_unigram}
FINETUNE = "configs/finetune/wiki-topics-bert-mini.yaml"
# The table's fine-tuning recipe (docs/pretraining.md's): (examples, length, lr, epochs, pooling, LP-FT epochs).
TABLE_RECIPE = (2000, 64, 1e-3, 2.0, "mean", 0)


def finetune_tag(args) -> str:
    """The fine-tuning recipe as a directory name (examples x length, lr, epochs, pooling, LP-FT epochs)."""
    return (
        f"{args.ft_examples or 'all'}x{args.ft_len}-lr{args.ft_lr:g}-e{args.ft_epochs:g}-{args.ft_pooling}"
        f"-hf{args.ft_head_first}"
    )


def finetune_dir(args) -> str:
    """Where a run's fine-tuning goes: `finetune` for the table's recipe, `finetune-<tag>` for any other."""
    recipe = (args.ft_examples, args.ft_len, args.ft_lr, args.ft_epochs, args.ft_pooling, args.ft_head_first)
    return "finetune" if recipe == TABLE_RECIPE else f"finetune-{finetune_tag(args)}"


def markers(ft_dir: str = "finetune") -> tuple[str, str]:
    """Where the table of a fine-tuning recipe goes in docs/results.md."""
    name = "results" if ft_dir == "finetune" else f"results-{ft_dir.removeprefix('finetune-')}"
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def random_init_spec(family: str, shards: dict[str, Path]) -> dict[str, Any]:
    """The fine-tuning init of `family`'s own architecture (its mini config's model section, dropout included, as
    pretrained) and tokenizer with random weights."""
    recipe = load_pretrain_config(f"configs/pretrain/{family}-mini.yaml")
    tokenizer = str(shards[FAMILIES[family]["tokenizer"]] / "tokenizer")
    return {"model": "", "model_config": {"variant": recipe.variant, **recipe.model}, "tokenizer": tokenizer}


def random_arm(name: str, shards: dict[str, Path]) -> str:
    """The random arm that `name`'s gain is measured against: `random_init-<name>`, its own architecture and
    tokenizer from random init, unless it fine-tunes BERT-mini's encoder with BERT-mini's tokenizer kind; then the
    table's random-init row (`random_init`, BERT-mini's)."""
    if name == "bert":
        return RANDOM_INIT
    own, base = random_init_spec(name, shards), random_init_spec("bert", shards)
    tokenizer = Tokenizer.load(base["tokenizer"])
    own_variant, own_config = model_config_of(own["model_config"], tokenizer)
    base_config = model_config_of(base["model_config"], tokenizer)[1]
    # The same backbone: bertzoo's Encoder (no family class of its own) built from equal fields, the family aside.
    same = (
        own["tokenizer"] == base["tokenizer"]
        and own_variant.encoder_class is Encoder
        and dataclasses.replace(own_config, variant=base_config.variant) == base_config
    )
    return RANDOM_INIT if same else f"{RANDOM_INIT}-{name}"


def pretrain_family(name: str, shards: Path, out: Path, seed: int, args) -> dict[str, Any]:
    """Pretrain one family once (reused when its summary exists); the summary."""
    config = f"configs/pretrain/{name}-mini.yaml"
    pre_dir = out / name / f"seed{seed}" / "pretrain"
    done = pre_dir / "summary.json"
    if done.is_file():
        return json.loads(done.read_text())
    recipe = load_pretrain_config(config, {**FAMILIES[name]["overrides"], "data.shards": str(shards)})
    per_step = recipe.train.batch_size * recipe.train.grad_accum
    steps = max(1, round(args.sequences / per_step))
    overrides = {
        **FAMILIES[name]["overrides"],
        "data.shards": str(shards),
        "train.output_dir": str(pre_dir),
        "train.max_steps": steps,
        "train.log_every": max(1, steps // 10),
        "train.save_every": steps,
        "train.keep_last": 1,
        "train.seed": seed,
        "train.threads": args.threads,
    }
    if args.minutes:  # a cap: the schedule stays in steps, so the table repeats exactly
        overrides["train.max_minutes"] = args.minutes
        overrides["train.schedule_clock"] = "steps"
    return pretrain(load_pretrain_config(config, overrides))


def add_finetune_args(
    ap: argparse.ArgumentParser,
    *,
    epochs: float = 2.0,
    lr: float = 5e-4,
    examples: int = 0,
    length: int = 128,
    pooling: str = "mean",
) -> None:
    """The fine-tuning recipe options `finetune_dev` reads, with a script's own defaults (and --threads)."""
    ap.add_argument("--ft-epochs", type=float, default=epochs)
    ap.add_argument("--ft-lr", type=float, default=lr, help="fine-tuning peak learning rate")
    ap.add_argument("--ft-examples", type=int, default=examples, help="fine-tuning examples (0 = all)")
    ap.add_argument("--ft-len", type=int, default=length, help="fine-tuning sequence length")
    ap.add_argument(
        "--ft-head-first", type=int, default=0, help="LP-FT: epochs of the head alone on the frozen encoder first"
    )
    choices = ["auto", "cls", "mean", "last"]
    ap.add_argument("--ft-pooling", default=pooling, choices=choices, help="sentence vector for fine-tuning")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")


def finetune_dev(
    init: dict[str, Any], out: Path, seed: int, args, *, config: str = FINETUNE, metric: str = "accuracy"
) -> dict[str, Any]:
    """Fine-tune `config` (wiki-topics by default) with the shared recipe (reused when done); the dev `metric`
    (as `dev_<metric>`) and time."""
    report = out / "report.json"
    if not report.is_file():
        overrides = {
            **init,
            "train.output_dir": str(out),
            "train.seed": seed,
            "train.epochs": args.ft_epochs,
            "train.lr": args.ft_lr,
            "train.save_every": 100000,
            "train.threads": args.threads,
            "data.max_seq_len": args.ft_len,
            "data.max_train_examples": args.ft_examples or None,
            "technique.pooling": args.ft_pooling,
            # LP-FT: the head alone on the frozen encoder for this many epochs first.
            "technique.head_first_epochs": args.ft_head_first,
        }
        finetune(load_finetune_config(config, overrides))
    data = json.loads(report.read_text())
    return {f"dev_{metric}": dev_metric(data, metric), "finetune_seconds": data.get("train_seconds")}


def dev_metric(report: dict[str, Any], metric: str = "accuracy") -> float:
    """The dev `metric` of a fine-tuning run's report.json (as read by json)."""
    return float(report["dev"]["metrics"][metric])


def claimed_elsewhere(run_dir: Path, ft_dir: str = "finetune") -> bool:
    """--no-table processes sharing one --out: True if another process has claimed this family, seed and
    fine-tuning recipe (an exclusive create of a marker file), so each run is made once. A table run ignores
    the markers."""
    if (run_dir / ft_dir / "report.json").is_file():
        return False  # done: read, not run
    run_dir.mkdir(parents=True, exist_ok=True)
    marker = ".claimed" if ft_dir == "finetune" else f".claimed-{ft_dir}"
    try:
        os.close(os.open(run_dir / marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return True
    return False


def run_seed(name: str, shards: dict[str, Path], out: Path, seed: int, args) -> dict[str, Any] | None:
    """Pretrain (unless random init) and fine-tune one family with one seed; its row (None: claimed elsewhere)."""
    ft_dir = finetune_dir(args)
    if args.no_table and claimed_elsewhere(out / name / f"seed{seed}", ft_dir):
        print(f"{name} seed {seed}: claimed by another process", flush=True)
        return None
    if name.startswith(RANDOM_INIT):  # `random_init-<family>`, or BERT-mini's for the plain row: random weights
        init = random_init_spec(name.partition("-")[2] or "bert", shards)
        row: dict[str, Any] = {"family": name, "seed": seed, "pretrain_tokens": 0}
    else:
        summary = pretrain_family(name, shards[FAMILIES[name]["tokenizer"]], out, seed, args)
        # A run stopped by --minutes still leaves final/ (the model as it was when time ran out).
        init = {"model": summary["final_dir"]}
        row = {
            "family": name,
            "seed": seed,
            "pretrain_steps": summary["steps"],
            "pretrain_tokens": summary["tokens_seen"],
            "pretrain_tokens_per_s": round(summary["tokens_per_s"], 1),
            "stop_reason": summary.get("stop_reason"),
        }
    row.update(finetune_dev(init, out / name / f"seed{seed}" / ft_dir, seed, args))
    print(json.dumps(row), flush=True)
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and sd of dev accuracy (and mean tokens/s) per family, in the order first seen."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r["family"] for r in rows):
        accs = [r["dev_accuracy"] for r in rows if r["family"] == name]
        rates = [r["pretrain_tokens_per_s"] for r in rows if r["family"] == name and "pretrain_tokens_per_s" in r]
        out[name] = {
            "dev_accuracy": round(statistics.mean(accs), 4),
            "dev_accuracy_sd": round(statistics.stdev(accs), 4) if len(accs) > 1 else 0.0,
        }
        if rates:
            out[name]["tokens_per_s"] = round(statistics.mean(rates), 1)
    return out


def paired_gains(rows: list[dict[str, Any]], arms: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each family's dev accuracy minus its random arm's, seed by seed (the same seed fine-tunes both): mean, sd."""
    acc = {(r["family"], r["seed"]): r["dev_accuracy"] for r in rows}
    out = {}
    for name, arm in arms.items():
        diffs = [acc[name, seed] - acc[arm, seed] for (family, seed) in acc if family == name and (arm, seed) in acc]
        if diffs:
            sd = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
            out[name] = {"vs_random_arm": round(statistics.mean(diffs), 4), "vs_random_arm_sd": round(sd, 4)}
    return out


def table(
    summary: dict[str, dict[str, float]], arms: dict[str, str], gains: dict[str, dict[str, float]], args, precision: str
) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on the 2-core CPU ({cpu_capability()}, {precision}): "
        f"{args.sequences:,} sequences of <= 128 tokens per family through its own recipe, vocabulary "
        f"{args.vocab}, seeds {args.seeds}; fine-tuning {args.ft_epochs:g} epoch(s) on "
        f"{args.ft_examples or 'all'} wiki-topics examples of <= {args.ft_len} tokens, lr {args.ft_lr:g}, "
        f"sentence vector: {'pooled [CLS]' if args.ft_pooling == 'cls' else 'mean of the last layer'}.",
        "",
        "| family | dev accuracy (mean ± sd) | vs random init | its own architecture from random init | "
        "vs that, paired by seed (mean ± sd) | pretraining tokens/s |",
        "| --- | ---: | ---: | --- | ---: | ---: |",
    ]
    base = summary[RANDOM_INIT]["dev_accuracy"]
    for name, s in summary.items():
        rate = f"{s['tokens_per_s']:,.0f}" if "tokens_per_s" in s else "—"
        gain = "—" if name.startswith(RANDOM_INIT) else f"{s['dev_accuracy'] - base:+.3f}"
        arm, own = arms.get(name), "—"
        if arm in summary:
            own = f"{arm}: {summary[arm]['dev_accuracy']:.3f}"
        paired = (
            f"{gains[name]['vs_random_arm']:+.3f} ± {gains[name]['vs_random_arm_sd']:.3f}" if name in gains else "—"
        )
        lines.append(
            f"| {name} | {s['dev_accuracy']:.3f} ± {s['dev_accuracy_sd']:.3f} | {gain} | {own} | {paired} | {rate} |"
        )
    return "\n".join(lines)


def write_docs(path: Path, text: str, ft_dir: str = "finetune") -> None:
    start, end = markers(ft_dir)
    doc = path.read_text() if path.is_file() else f"# Variants\n\n{start}\n{end}\n"
    if start not in doc:
        doc += f"\n{start}\n{end}\n"
    head, rest = doc.split(start, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--sequences", type=int, default=16000, help="pretraining sequences per family (the budget)")
    ap.add_argument("--minutes", type=float, default=None, help="optional wall-clock cap per pretraining run")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (pretraining and fine-tuning)")
    ap.add_argument("--vocab", type=int, default=8192)
    examples, length, lr, epochs, pooling, _ = TABLE_RECIPE  # the fine-tuning recipe of docs/pretraining.md
    add_finetune_args(ap, epochs=epochs, lr=lr, examples=examples, length=length, pooling=pooling)
    ap.add_argument("--out", default="runs/objectives_small")
    ap.add_argument("--docs", action="store_true", help="write the table into docs/results.md")
    ap.add_argument("--quick", action="store_true", help="every family, a tiny budget, one seed: < 15 min")
    ap.add_argument(
        "--no-table",
        action="store_true",
        help="pretrain and fine-tune --families only (no random-init row, no table); processes started so with one "
        "--out share the runs (each family and seed is claimed by one); a last run without it makes the table",
    )
    args = ap.parse_args()
    if args.quick:
        args.sequences, args.seeds, args.vocab = 256, 1, 4000
        args.ft_epochs, args.ft_examples, args.ft_len = 1.0, 256, 64
        args.out = args.out + "-quick"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = list(read_documents(["builtin:wiki-en"]))
    kinds = {FAMILIES[f]["tokenizer"] for f in args.families} | {"wordpiece"}  # random init uses WordPiece
    shards: dict[str, Path] = {}
    for kind in sorted(kinds):
        shards[kind] = out / f"shards-{kind}-{args.vocab}"
        if not (shards[kind] / "meta.json").is_file():
            tok = TRAINERS[kind](docs, args.vocab)
            prepare_shards(docs, tok, shards[kind], progress=False, overwrite=True, source="builtin:wiki-en")
    rows = [run_seed(name, shards, out, seed, args) for seed in range(args.seeds) for name in args.families]
    if args.no_table:
        return
    arms = {name: random_arm(name, shards) for name in args.families}
    for arm in dict.fromkeys([RANDOM_INIT, *arms.values()]):
        rows += [run_seed(arm, shards, out, seed, args) for seed in range(args.seeds)]
    summary = summarise(rows)
    gains = paired_gains(rows, arms)
    precision = json.loads((out / args.families[0] / "seed0" / "pretrain" / "run_config.json").read_text())
    text = table(summary, arms, gains, args, precision.get("resolved", {}).get("precision", "?"))
    ft_dir = finetune_dir(args)
    suffix = ft_dir.removeprefix("finetune")  # "" for the table's recipe
    (out / f"results{suffix}.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / f"results{suffix}.md").write_text(text + "\n")
    print(text)
    if args.docs:
        write_docs(Path("docs/results.md"), text, ft_dir)
    random_init = summary.pop(RANDOM_INIT)
    random_arms = {arm: summary.pop(arm) for arm in list(summary) if arm.startswith(RANDOM_INIT)}
    for name in summary:
        summary[name].update({"random_arm": arms[name], **gains.get(name, {})})
    first = summary.get("bert", next(iter(summary.values())))
    ratio = round(first["dev_accuracy"] / max(random_init["dev_accuracy"], 1e-9), 4)
    result = {"families": summary, "random_init": random_init, "random_arms": random_arms, "seeds": args.seeds}
    print(json.dumps({**result, "accuracy_ratio": ratio}))


if __name__ == "__main__":
    main()
