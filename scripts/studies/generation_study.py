"""Does pretraining help generation? GPT-mini, UniLM-mini, T5-mini and MASS-mini, pretrained by bertzoo on
built-in Wikipedia, fine-tuned on `builtin:wiki-titles` (a lead section -> its article's title) against the
same architecture from random init, with one recipe and several seeds.

Steps (each command is printed, as a user would type it):

1. an 8k WordPiece vocabulary and shards of `builtin:wiki-en` (train articles only: the dev and test
   articles of wiki-titles are never seen in pretraining) and of its dev split (held-out curves);
2. per family, pretraining for a wall-clock budget (`--minutes`): `configs/pretrain/gpt-mini.yaml` (causal
   LM on packed blocks), `configs/pretrain/unilm-mini.yaml` (masked LM under UniLM's four masks),
   `configs/pretrain/t5-mini.yaml` (the T5 paper's BERT-style objective from a local start) and
   `configs/pretrain/mass-mini.yaml` (MASS);
3. per family and seed, fine-tuning of the pretrained model and of random init
   (`configs/finetune/wiki-titles-{family}.yaml`: GPT with target LM loss + 0.5 x source LM loss, UniLM
   with 70% of the target masked under the sequence-to-sequence mask, T5 and MASS with the source in the
   encoder and the title written by the decoder), greedy decoding of the dev set, ROUGE-L / BLEU / exact
   match.

`--stage pretrain` stops after the pretraining runs (fine-tune later with the same --out). `--dataset
builtin:wiki-topic-names` fine-tunes on wiki-topics as text (the topic's name generated) instead, scored
by exact match. `--t5-objectives span_corruption prefix_lm ...` pretrains one T5 per objective at the same
budget and compares them (the random-init arm is shared: it does not depend on the objective). `--set
KEY=VALUE ...` overrides pretraining config keys (e.g. `word_embedding_init=ppmi-svd`); the overrides name
the pretraining and fine-tuning directories (the random-init arm's too when a `model.` key is set); the step
budget does not, so a directory pretrained for another `--steps` is refused: give each budget its own --out.

Prints a table (mean and spread over seeds) and, last, one JSON line.

    python scripts/studies/generation_study.py [--families gpt unilm t5 mass] [--minutes 10] [--seeds 0 1]
                                       [--out runs/gen-study]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the demo's steps, the same commands
from demo import prepare_wiki, run  # noqa: E402
from recipe_study import set_tag  # noqa: E402

VOCAB = 8192
TITLES = "builtin:wiki-titles"
FAMILIES = ("gpt", "unilm", "t5", "mass")
PRETRAIN = {f: f"configs/pretrain/{f}-mini.yaml" for f in FAMILIES}
FINETUNE = {f: f"configs/finetune/wiki-titles-{f}.yaml" for f in FAMILIES}
PRESET = {f: (f, f"{f}-mini") for f in FAMILIES}
METRICS = ("rougeL", "bleu", "exact_match")


def pretrain(family: str, out: Path, shards: Path, dev: Path, args, objective: str = "") -> Path:
    """The family's pretraining run for the budget (resumed if it was interrupted); its final model.
    `objective` (T5's) replaces the config's and names the run directory, as do the --set overrides."""
    name = f"pretrain-{family}-{objective}" if objective else f"pretrain-{family}"
    run_dir = out / (name + set_tag(args.set))
    planned = run_dir / "run_config.json"
    if planned.is_file() and (steps := json.loads(planned.read_text())["train"]["max_steps"]) != args.steps:
        # The directory is named by the overrides, not the budget: never report another budget's model as this one.
        raise SystemExit(f"{run_dir} was pretrained for {steps} steps, not --steps {args.steps}; use another --out")
    if (run_dir / "final" / "config.json").is_file():
        return run_dir / "final"
    resume = ["--resume", "auto"] if (run_dir / "checkpoints").is_dir() else []
    run(
        [
            "pretrain",
            PRETRAIN[family],
            *(["--objective", objective] if objective else []),
            *(f"--{item}" for item in args.set),
            "--data.shards",
            str(shards),
            "--data.eval_shards",
            str(dev),
            "--train.output_dir",
            str(run_dir),
            "--train.max_minutes",
            str(args.minutes),
            "--train.max_steps",
            str(args.steps),
            "--train.schedule_clock=steps",  # the budget is a cap: results repeat exactly
            "--train.eval_every",
            str(max(20, args.steps // 8)),
            *resume,
        ]
    )
    return run_dir / "final"


def finetune(family: str, model: Path | None, tokenizer: Path, out: Path, seed: int, args) -> dict:
    """One fine-tuning run; the dev metrics of the model it keeps."""
    if (out / "report.json").is_file():
        return json.loads((out / "report.json").read_text())["dev"]["metrics"]
    if model is not None:
        source = ["--model", str(model)]
    else:
        # Random init: the same architecture and dropout as the pretrained model.
        arch = json.loads((tokenizer / "config.json").read_text())
        variant, preset = PRESET[family]
        source = [
            "--model",
            '""',
            f"--model_config.variant={variant}",
            f"--model_config.preset={preset}",
            f"--model_config.dropout={arch['dropout']}",
            f"--model_config.attention_dropout={arch['attention_dropout']}",
            f"--model_config.type_vocab_size={arch['type_vocab_size']}",
            f"--model_config.norm={arch['norm']}",
            f"--tokenizer={tokenizer}",
        ]
        if arch.get("num_decoder_layers"):  # an encoder-decoder starts decoding where pretraining did
            source.append(f"--model_config.decoder_start_token_id={arch['decoder_start_token_id']}")
    run(
        [
            "finetune",
            FINETUNE[family],
            *source,
            "--train.output_dir",
            str(out),
            f"--train.seed={seed}",
            f"--train.epochs={args.ft_epochs}",
            f"--train.max_minutes={args.ft_minutes}",
            "--train.schedule_clock=steps",
            f"--data.max_train_examples={args.ft_examples}",
            f"--data.dataset={args.dataset}",
        ]
    )
    return json.loads((out / "report.json").read_text())["dev"]["metrics"]


def summarise(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", choices=sorted(PRETRAIN), default=["gpt", "unilm", "t5", "mass"])
    ap.add_argument("--minutes", type=float, default=10.0, help="pretraining wall-clock budget per family")
    ap.add_argument("--steps", type=int, default=1500, help="pretraining steps the schedule plans for")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--ft-epochs", type=float, default=3.0)
    ap.add_argument("--ft-examples", type=int, default=4000, help="wiki-titles training examples")
    ap.add_argument("--ft-minutes", type=float, default=4.0, help="time cap of each fine-tuning run")
    ap.add_argument("--out", default="runs/gen-study")
    ap.add_argument("--stage", choices=["all", "pretrain"], default="all", help="pretrain: stop after pretraining")
    ap.add_argument("--dataset", default=TITLES, help="the seq2seq dataset to fine-tune on")
    ap.add_argument("--t5-objectives", nargs="+", default=[], help="T5 only: one pretraining run per objective")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="pretraining config overrides")
    args = ap.parse_args()
    if bad := [item for item in args.set if "=" not in item]:
        raise SystemExit(f"--set {bad[0]!r}: write KEY=VALUE")
    out = Path(args.out)
    started = time.monotonic()
    shards, dev = prepare_wiki(out, VOCAB)

    # Fine-tuning runs on another dataset than wiki-titles get its name in their directory.
    tag = "" if args.dataset == TITLES else args.dataset.rsplit(":", 1)[-1] + "-"
    results: dict[str, dict] = {}
    for family in args.families:
        objectives = args.t5_objectives if family == "t5" and args.t5_objectives else [""]
        finals = {o: pretrain(family, out, shards, dev, args, o) for o in objectives}
        if args.stage == "pretrain":
            continue
        runs: dict[str, list[dict]] = {f"pretrained {o}".strip(): [] for o in objectives} | {"random": []}
        for seed in args.seeds:
            for o, final in finals.items():
                name = f"ft-{tag}{family}{set_tag(args.set)}-pretrained-{o + '-' if o else ''}{seed}"
                runs[f"pretrained {o}".strip()].append(finetune(family, final, final, out / name, seed, args))
            random_dir = out / f"ft-{tag}{family}{set_tag(args.set, model_only=True)}-random-{seed}"
            runs["random"].append(finetune(family, None, next(iter(finals.values())), random_dir, seed, args))
        results[family] = runs

    if args.stage == "pretrain":
        return
    print(f"\n{args.dataset} dev, greedy decoding, seeds {args.seeds} (mean ± sd):")
    print(f"{'model':<22}" + "".join(f"{m:>18}" for m in METRICS))
    summary: dict[str, dict] = {}
    for family, runs in results.items():
        for arm, metrics in runs.items():
            row = {m: [r[m] for r in metrics] for m in METRICS}
            print(f"{family + ' ' + arm:<22}" + "".join(f"{summarise(v):>18}" for v in row.values()))
            summary[f"{family}_{arm.replace(' ', '_')}"] = {m: round(statistics.mean(v), 4) for m, v in row.items()}
        for arm in [a for a in runs if a != "random"]:
            gains = [p["rougeL"] - r["rougeL"] for p, r in zip(runs[arm], runs["random"], strict=True)]
            key = f"{family}_{arm.replace(' ', '_')}"
            summary[f"{key}_rougeL_gain_per_seed"] = [round(g, 4) for g in gains]
            print(f"{family + ' ' + arm + ' gain (ROUGE-L)':<22}{summarise(gains):>18}")
    import torch

    summary["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    summary["minutes"] = round((time.monotonic() - started) / 60, 1)
    summary["ratio"] = min(
        summary[f"{f}_{arm.replace(' ', '_')}"]["rougeL"] / max(summary[f"{f}_random"]["rougeL"], 1e-9)
        for f, runs in results.items()
        for arm in runs
        if arm != "random"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
