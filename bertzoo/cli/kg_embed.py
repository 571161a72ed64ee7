"""`bertzoo kg-embed --kg G --out DIR`: TransE entity vectors of a knowledge graph, the ones ERNIE (Tsinghua)
fuses (docs/knowledge.md)."""

from __future__ import annotations

import argparse
import sys

from bertzoo.cli.common import non_negative_int, positive_float, positive_int


def add_parser(sub) -> None:
    kg = sub.add_parser(
        "kg-embed",
        help="train TransE entity embeddings on a knowledge graph (ERNIE's entity vectors); see docs/knowledge.md",
    )
    kg.add_argument(
        "--kg", required=True, help="wordnet, nations, kinships, umls, or a head<TAB>relation<TAB>tail file"
    )
    kg.add_argument(
        "--out", "-o", required=True, help="output directory (entity_embeddings.safetensors, entities.json)"
    )
    kg.add_argument("--dim", type=positive_int, default=100, help="embedding width")
    kg.add_argument("--epochs", type=positive_int, default=500, help="most epochs (early stopping on valid MRR)")
    kg.add_argument("--lr", type=positive_float, default=0.01, help="learning rate")
    kg.add_argument("--margin", type=positive_float, default=1.0, help="margin of the ranking loss")
    kg.add_argument("--norm", type=int, choices=[1, 2], default=2, help="distance: L1 or L2")
    kg.add_argument("--batch-size", type=positive_int, default=1024, help="triples per step")
    kg.add_argument("--seed", type=non_negative_int, default=0, help="initialisation, sampling and the split")
    kg.add_argument("--corruption", choices=["bern", "unif"], default="bern", help="which side negatives replace")
    kg.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="adam (sparse) or Bordes' sgd")
    kg.add_argument("--eval-every", type=positive_int, default=10, help="epochs between valid evaluations")
    kg.add_argument("--patience", type=positive_int, default=3, help="evaluations without improvement to stop")
    kg.add_argument("--valid-limit", type=positive_int, default=2000, help="valid triples scored (seeded sample)")
    kg.add_argument("--max-minutes", type=positive_float, default=None, help="stop training after this long")
    kg.add_argument("--nouns-only", action="store_true", help="wordnet: noun synsets only")
    kg.add_argument("--wordnet-dir", default=None, help="WordNet 3.0 dict directory (default /usr/share/wordnet)")
    kg.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.knowledge.graphs import WORDNET_DIR, load_kg
    from bertzoo.train.transe import train_transe

    kg = load_kg(args.kg, nouns_only=args.nouns_only, seed=args.seed, wordnet_dir=args.wordnet_dir or WORDNET_DIR)
    print(kg.summary(), file=sys.stderr)
    result = train_transe(
        kg,
        dim=args.dim,
        epochs=args.epochs,
        lr=args.lr,
        margin=args.margin,
        batch_size=args.batch_size,
        seed=args.seed,
        norm=args.norm,
        out_dir=args.out,
        eval_every=args.eval_every,
        patience=args.patience,
        corruption=args.corruption,
        optimizer=args.optimizer,
        valid_limit=args.valid_limit,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
    )
    test = result["test"]
    scores = " ".join(f"{k} {v:.4f}" for k, v in test.items() if k != "mr")
    print(
        f"test (filtered): {scores} | best epoch {result['best_epoch']} of {result['epochs_run']} | "
        f"{result['wall_seconds']:.0f}s -> {args.out}"
    )
    return 0
