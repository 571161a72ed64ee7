"""`bertzoo kg-embed`: train TransE on a knowledge graph and write the entity vectors ERNIE (Tsinghua) reads.

The optimizer is Adam by default (`SparseAdam`: the embeddings give sparse gradients, so a step updates only
the rows of its batch and its moments), not Bordes et al.'s SGD: with the same epochs Adam reaches a better
validation MRR and needs no per-graph learning-rate search (`docs/knowledge.md` has the figures); `sgd` is
there to reproduce the paper's setting. Entity vectors are renormalised after every step, as in the paper.

Every `eval_every` epochs the filtered MRR on (a seeded sample of at most `valid_limit`) validation triples
decides the best weights; `patience` evaluations without improvement stop the run. The best weights are then
scored on the whole test split (filtered MRR, MR, Hits@1/3/10, realistic ranks: `metrics/link_prediction.py`).

Files in `out_dir`: `metrics.jsonl` (one line per epoch: loss, seconds, and valid MRR / Hits@10 when
evaluated, rewritten atomically each epoch, for plotting), `entity_embeddings.safetensors` and
`entities.json` (`data/kg.save_entity_embeddings`, read back by `data/kg.load_entity_embeddings`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from bertzoo.engine.progress import say
from bertzoo.errors import ConfigError, DataError
from bertzoo.io import write_atomic
from bertzoo.knowledge.graphs import KnowledgeGraph, save_entity_embeddings
from bertzoo.knowledge.transe import TransE, bernoulli_head_probs
from bertzoo.metrics.link_prediction import filtered_ranks, link_prediction_metrics

METRICS_FILE = "metrics.jsonl"


def evaluate_transe(
    model: TransE, triples: np.ndarray, known: np.ndarray, *, batch: int = 256
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Filtered link-prediction metrics of `model` on `triples` (both sides), and the ranks."""

    def scores(chunk: torch.Tensor, side: str) -> torch.Tensor:
        if side == "tail":
            return model.score_tails(chunk[:, 0], chunk[:, 1])
        return model.score_heads(chunk[:, 1], chunk[:, 2])

    model.eval()
    ranks = filtered_ranks(scores, triples, known, model.num_entities, batch)
    return link_prediction_metrics(ranks), ranks


def _check(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ConfigError(f"kg-embed: {name} must be > 0, got {value}")


def train_transe(
    kg: KnowledgeGraph,
    *,
    dim: int = 100,
    epochs: int = 500,
    lr: float = 0.01,
    margin: float = 1.0,
    batch_size: int = 1024,
    seed: int = 0,
    norm: int = 2,
    out_dir: str | Path | None = None,
    eval_every: int = 10,
    patience: int = 3,
    corruption: str = "bern",
    optimizer: str = "adam",
    valid_limit: int | None = 2000,
    max_seconds: float | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train TransE on `kg.train`; returns {"test": metrics, "valid": best valid metrics, "best_epoch", ...}
    and, with `out_dir`, writes the embedding directory there. `max_seconds` ends training after the epoch
    that passes it (the best weights so far are kept and evaluated)."""
    _check(dim=dim, epochs=epochs, lr=lr, margin=margin, batch_size=batch_size, eval_every=eval_every)
    _check_choices(kg, norm=norm, corruption=corruption, optimizer=optimizer)
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = TransE(kg.num_entities, kg.num_relations, dim, norm=norm, sparse=True)
    params = list(model.parameters())
    opt = torch.optim.SparseAdam(params, lr=lr) if optimizer == "adam" else torch.optim.SGD(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    head_probs = bernoulli_head_probs(kg.train, kg.num_relations) if corruption == "bern" else None
    train = torch.as_tensor(kg.train, dtype=torch.int64)
    known = kg.all_triples()
    valid = kg.valid
    if valid_limit is not None and len(valid) > valid_limit:
        valid = valid[np.sort(np.random.default_rng(seed).choice(len(valid), valid_limit, replace=False))]
    out = Path(out_dir) if out_dir is not None else None
    lines: list[str] = []
    best: dict[str, Any] = {"mrr": -1.0, "epoch": 0, "state": None, "metrics": {}}
    bad_evals = 0
    epoch = 0
    bar = tqdm(total=epochs, desc=f"TransE {kg.source}", unit="epoch", disable=not progress, dynamic_ncols=True)
    try:
        for epoch in range(1, epochs + 1):
            epoch_start = time.perf_counter()
            loss = _train_epoch(model, opt, train, generator, head_probs, batch_size, margin)
            record: dict[str, Any] = {"epoch": epoch, "loss": loss}
            evaluate = len(valid) > 0 and (epoch % eval_every == 0 or epoch == epochs)
            if evaluate:
                bad_evals = 0 if _validate(model, valid, known, epoch, record, best) else bad_evals + 1
            record["seconds"] = round(time.perf_counter() - epoch_start, 3)
            lines.append(json.dumps(record))
            if out is not None:
                write_atomic(out / METRICS_FILE, "\n".join(lines) + "\n")
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.4f}", valid_mrr=f"{best['mrr']:.4f}" if best["state"] else "-")
            if evaluate and bad_evals >= patience:
                say(f"early stop at epoch {epoch}: valid MRR has not improved for {patience} evaluations")
                break
            if max_seconds is not None and time.perf_counter() - start > max_seconds:
                say(f"time budget of {max_seconds:.0f}s reached after epoch {epoch}")
                break
    finally:
        bar.close()
    result = _final_result(model, kg, known, valid, best, epoch, start)
    if out is not None:
        settings = {
            "model": "TransE",
            "dim": dim,
            "norm": norm,
            "margin": margin,
            "lr": lr,
            "optimizer": optimizer,
            "corruption": corruption,
            "batch_size": batch_size,
            "epochs": epochs,
            "seed": seed,
        }
        extra = {"metrics": result, "settings": settings, "split": kg.summary(), **kg.info}
        save_entity_embeddings(out, kg, model.entity.weight, model.relation.weight, extra=extra)
    result["model"] = model
    return result


def _check_choices(kg: KnowledgeGraph, *, norm: int, corruption: str, optimizer: str) -> None:
    """Refuse a norm, corruption or optimizer train_transe does not know, and a graph without training triples."""
    if norm not in (1, 2):
        raise ConfigError(f"kg-embed: norm must be 1 or 2, got {norm}")
    if corruption not in ("unif", "bern"):
        raise ConfigError(f"kg-embed: corruption must be unif or bern, got {corruption!r}")
    if optimizer not in ("adam", "sgd"):
        raise ConfigError(f"kg-embed: optimizer must be adam or sgd, got {optimizer!r}")
    if len(kg.train) == 0:
        raise DataError(f"{kg.source} has no training triples")


def _train_epoch(
    model: TransE,
    opt: torch.optim.Optimizer,
    train: torch.Tensor,
    generator: torch.Generator,
    head_probs: torch.Tensor | None,
    batch_size: int,
    margin: float,
) -> float:
    """One pass over the shuffled training triples, entity vectors renormalised after each step; the mean loss."""
    model.train()
    order = torch.randperm(len(train), generator=generator)
    total, count = 0.0, 0
    for i in range(0, len(order), batch_size):
        positive = train[order[i : i + batch_size]]
        negative = model.corrupt(positive, generator, head_probs)
        loss = model.margin_loss(positive, negative, margin)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():  # back onto the unit sphere: the rows this step moved
            rows = torch.unique(torch.cat([positive[:, [0, 2]].ravel(), negative[:, [0, 2]].ravel()]))
            w = model.entity.weight
            w[rows] = w[rows] / w[rows].norm(dim=1, keepdim=True).clamp_min(1e-12)
        total += float(loss.detach()) * len(positive)
        count += len(positive)
    return total / count


def _validate(
    model: TransE, valid: np.ndarray, known: np.ndarray, epoch: int, record: dict[str, Any], best: dict[str, Any]
) -> bool:
    """Score `valid` into `record` and keep the weights in `best` when its MRR improves; whether it did."""
    metrics, _ = evaluate_transe(model, valid, known)
    record["valid_mrr"], record["valid_hits@10"] = metrics["mrr"], metrics["hits@10"]
    if metrics["mrr"] > best["mrr"]:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        best.update(mrr=metrics["mrr"], epoch=epoch, state=state, metrics=metrics)
        return True
    return False


def _final_result(
    model: TransE,
    kg: KnowledgeGraph,
    known: np.ndarray,
    valid: np.ndarray,
    best: dict[str, Any],
    epoch: int,
    start: float,
) -> dict[str, Any]:
    """Restore the best weights and score them on the test split: the result, without the model."""
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    result: dict[str, Any] = {
        "epochs_run": epoch,
        "best_epoch": best["epoch"] if best["state"] is not None else epoch,
        "valid": best["metrics"],
        "valid_triples_scored": int(len(valid)),
    }
    result["test"] = evaluate_transe(model, kg.test, known)[0] if len(kg.test) else {}
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    return result
