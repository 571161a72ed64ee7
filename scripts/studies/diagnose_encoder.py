"""Why does an encoder not fine-tune? Layer-by-layer measurements on real sentences.

For each model directory (any pretraining checkpoint bertzoo can load an encoder from), on N
wiki-topics dev texts:

* `cls_dep`: how much the [CLS] vector depends on the input: the std over inputs of [CLS]'s
  hidden state, over the std over all real tokens of all inputs (0 = the same vector for every
  input; ~1 = as varied as the tokens themselves);
* `mean_dep`: the same for the mean of the real tokens (the mean-pooling sentence vector);
* `cls_self`: attention probability from [CLS] to itself, averaged over heads and inputs;
* `max_abs`: the largest activation magnitude;
* `ln_gain`: mean |gain| of the layer's last LayerNorm (near 0: every token gets the same output);
* `grad`: gradient norm of each layer's parameters for one fine-tuning batch (a fresh linear
  classifier on the mean-pooled last layer, real labels), to see whether gradients reach the layers.

    python scripts/studies/diagnose_encoder.py runs/x/pretrain/final runs/y/pretrain/final [--n 128]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from bertzoo.data.tasks.builtin import load_builtin_task
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.loading import load_encoder
from bertzoo.nn import masked_mean


def batch_of(tokenizer: Tokenizer, texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = [tokenizer.encode(t).ids[:max_len] for t in texts]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return input_ids, mask


def dependence(vectors: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean per-dimension std of `vectors` (n, d) over that of `reference` (m, d)."""
    return float(vectors.std(0).mean() / reference.std(0).mean().clamp(min=1e-12))


def diagnose(path: str, texts: list[str], labels: list[int], n_labels: int, max_len: int) -> dict:
    encoder = load_encoder(path)
    tokenizer = Tokenizer.load(path)
    input_ids, mask = batch_of(tokenizer, texts, max_len)
    encoder.eval()
    with torch.no_grad():
        out = encoder(input_ids, mask, output_hidden_states=True, output_attentions=True)
    real = mask.bool()
    layers = []
    for i, h in enumerate(out.hidden_states):  # embeddings, then each layer
        row = {
            "layer": i,
            "cls_dep": dependence(h[:, 0], h[real]),
            "mean_dep": dependence(masked_mean(h, mask), h[real]),
            "max_abs": float(h[real].abs().max()),
        }
        if i > 0:
            row["cls_self"] = float(out.attentions[i - 1][:, :, 0, 0].mean())
        layers.append(row)
    # One fine-tuning batch: do gradients reach the layers?
    encoder.train()
    head = torch.nn.Linear(encoder.config.hidden_size, n_labels)
    logits = head(masked_mean(encoder(input_ids, mask).last_hidden_state, mask))
    F.cross_entropy(logits, torch.tensor(labels)).backward()
    for i, layer in enumerate(encoder.stack.layers):
        norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in layer.parameters() if p.grad is not None))
        layers[i + 1]["grad"] = float(norm)
        norms = [m for m in layer.modules() if isinstance(m, torch.nn.LayerNorm)]
        layers[i + 1]["ln_gain"] = float(norms[-1].weight.detach().abs().mean()) if norms else float("nan")
    return {"model": path, "layers": layers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--n", type=int, default=128, help="dev texts")
    ap.add_argument("--max-len", type=int, default=64)
    args = ap.parse_args()
    rows = load_builtin_task("wiki-topics", "dev")[: args.n]
    names = sorted({r["label"] for r in load_builtin_task("wiki-topics", "train")})
    texts, labels = [r["text"] for r in rows], [names.index(r["label"]) for r in rows]
    results = []
    for path in args.models:
        torch.manual_seed(0)
        result = diagnose(path, texts, labels, len(names), args.max_len)
        results.append(result)
        print(f"\n{path}")
        print(f"{'layer':>5} {'cls_dep':>8} {'mean_dep':>9} {'cls_self':>9} {'max_abs':>8} {'ln_gain':>8} {'grad':>9}")
        for r in result["layers"]:
            print(
                f"{r['layer']:>5} {r['cls_dep']:>8.3f} {r['mean_dep']:>9.3f} {r.get('cls_self', float('nan')):>9.3f} "
                f"{r['max_abs']:>8.1f} {r.get('ln_gain', float('nan')):>8.3f} {r.get('grad', float('nan')):>9.2e}"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
