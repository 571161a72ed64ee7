"""Sentence vectors from an encoder (`bertzoo embed`): sort texts by length, pad per batch, run under inference
mode, pool each text's states into one vector.

Sorting by length means a batch pads to its own longest text, not the corpus's, which is most of
the speed-up over running texts in their given order on mixed-length data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from bertzoo.batch import pad_batch
from bertzoo.errors import ConfigError, DataError
from bertzoo.precision import autocast, inference_weights, resolve_precision
from bertzoo.tasks.base import pool_states

Pooling = Literal["cls", "mean", "pooler", "last"]


def tokenize_sorted(tokenizer, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], np.ndarray]:
    """[CLS] text [SEP] ids truncated to max_length, and the order that sorts them by length."""
    body = tokenizer.encode_batch(list(texts))
    ids = [[tokenizer.cls_id, *t[: max_length - 2], tokenizer.sep_id] for t in body]
    order = np.argsort([len(x) for x in ids], kind="stable")
    return ids, order


def encode(
    encoder: nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int = 128,
    pooling: Pooling = "mean",
    precision: Literal["auto", "fp32", "bf16"] = "fp32",
    normalize: bool = False,
    progress: bool = False,
) -> np.ndarray:
    """Sentence vectors (len(texts), hidden) in the input order.

    pooling: "mean" over real tokens (sentence-transformers style), "cls" (the [CLS] hidden state),
    "last" (the last real token: a left-to-right model's) or "pooler" (tanh(W h_[CLS]), BERT's classifier
    input). precision "auto" picks bf16 only where the device runs it natively (`bertzoo.precision`).
    """
    if pooling == "pooler" and getattr(encoder, "pooler", None) is None:
        raise ConfigError("pooling=pooler needs a model with a pooler, and this one has none; use mean or cls")
    device = next(encoder.parameters()).device
    ids, order = tokenize_sorted(tokenizer, texts, max_length)
    out = np.zeros((len(texts), encoder.config.hidden_size), dtype=np.float32)
    autocasting = autocast(resolve_precision(precision, device), device)
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode(), autocasting:
            starts = range(0, len(order), batch_size)
            for start in tqdm(starts, desc="embed", unit="batch", disable=not progress, leave=False):
                chunk = order[start : start + batch_size]
                padded, lengths = pad_batch([np.asarray(ids[i]) for i in chunk], tokenizer.pad_id, 8)
                input_ids = torch.from_numpy(padded).to(device)
                mask = (torch.arange(padded.shape[1])[None, :] < torch.from_numpy(lengths)[:, None]).long().to(device)
                result = encoder(input_ids, mask)
                if pooling == "pooler":
                    vec = result.pooler_output
                else:
                    vec = pool_states(result.last_hidden_state, mask, pooling)
                out[chunk] = vec.float().cpu().numpy()
    finally:
        encoder.train(was_training)
    if normalize:
        out /= np.linalg.norm(out, axis=1, keepdims=True).clip(min=1e-12)
    return out


def read_texts(path: str | Path, field: str = "text") -> list[str]:
    """The texts of a file: JSONL (`.jsonl`, `.json`: the string `field` of each object) or plain text (one text
    per non-blank line). DataError naming the file and line for a missing file, a missing or non-string field, or
    no text at all."""
    from bertzoo.train.evaluate import read_jsonl

    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        texts = []
        for line, record in read_jsonl(path):
            value = record.get(field)
            if not isinstance(value, str):
                raise DataError(f'{path}:{line} has no string {field!r} field; write {{"{field}": "..."}} per line')
            texts.append(value)
    else:
        if not path.is_file():
            raise DataError(f"input file not found: {path}; pass a JSONL or text file")
        with open(path, encoding="utf-8", errors="replace") as f:
            texts = [line.rstrip("\n") for line in f if line.strip()]
    if not texts:
        raise DataError(f"{path} holds no text; nothing to embed")
    return texts


def saved_pooling(directory: str | Path) -> tuple[Pooling, bool]:
    """(pooling, normalize) a model is meant to be read with: what it was fine-tuned for (task: embedding, in its
    config.json), or what a sentence-transformers directory says (`1_Pooling`, a `Normalize` module), else the
    mean over real tokens, not normalised."""
    import json

    from bertzoo.interop.sentence_transformers import POOLING_MODES
    from bertzoo.loading import read_config

    raw, _, _ = read_config(directory)
    head = raw.get("task")
    if isinstance(head, dict) and head.get("task") == "embedding":
        return head.get("pooling", "mean"), bool(head.get("normalize", False))
    modules, pooling_file = Path(directory) / "modules.json", Path(directory) / "1_Pooling" / "config.json"
    if modules.is_file() and pooling_file.is_file():
        try:
            kinds = [str(m.get("type", "")) for m in json.loads(modules.read_text(encoding="utf-8"))]
            modes = [k for k, on in json.loads(pooling_file.read_text(encoding="utf-8")).items() if on is True]
        except (ValueError, AttributeError, OSError):
            return "mean", False  # an unreadable sentence-transformers config: the plain default
        ours = {key: name for name, key in POOLING_MODES.items()}  # the pooling modes bertzoo computes alike
        if len(modes) == 1 and modes[0] in ours:
            return ours[modes[0]], any(k.endswith("Normalize") for k in kinds)  # type: ignore[return-value]
    return "mean", False


def embed_file(
    model: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    *,
    field: str = "text",
    batch_size: int = 64,
    max_length: int = 128,
    pooling: Pooling | Literal["auto"] = "auto",
    normalize: bool | None = None,
    device: str = "auto",
    int8: bool = False,
) -> tuple[int, int]:
    """`bertzoo embed`: the sentence vectors of every text in `input_path`, in input order, written atomically to
    `output_path` as a float32 .npy array (texts x width); `int8` quantizes the linear layers (CPU only, fp32
    activations). Pooling "auto" and normalize None take what the model was fine-tuned for (`saved_pooling`).
    Returns (texts, width)."""
    import bertzoo.io as io
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.engine.devices import resolve_device
    from bertzoo.loading import load_encoder, resolve

    if Path(output_path).suffix != ".npy":
        raise ConfigError(f"--output {output_path} must end in .npy (the vectors are saved with numpy.save)")
    if batch_size < 1 or max_length < 3:
        raise ConfigError(f"--batch-size must be >= 1 and --max-length >= 3, got {batch_size} and {max_length}")
    texts = read_texts(input_path, field)
    directory = resolve(model)
    own_pooling, own_normalize = saved_pooling(directory)
    pooling = own_pooling if pooling == "auto" else pooling
    normalize = own_normalize if normalize is None else normalize
    target = resolve_device(device)
    encoder = load_encoder(directory).to(target)
    precision = "fp32" if int8 else resolve_precision("auto", target)  # quantized linears take fp32 activations
    if int8:
        from bertzoo.interop.int8 import quantize_int8

        encoder = quantize_int8(encoder)
    vectors = encode(
        inference_weights(encoder, precision),
        Tokenizer.load(directory),
        texts,
        batch_size=batch_size,
        max_length=max_length,
        pooling=pooling,
        normalize=normalize,
        precision=precision,
        progress=True,
    )

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.save(f, vectors)

    io.replace_atomically(write, output_path)
    return vectors.shape


def export_sentence_transformers(
    model: str | Path,
    output: str | Path,
    *,
    pooling: Pooling | Literal["auto"] = "auto",
    normalize: bool | None = None,
    max_length: int | None = None,
    verify: bool = True,
) -> dict[str, object]:
    """`bertzoo export MODEL OUT --sentence-transformers`: the model's encoder as a sentence-transformers
    directory, pooling and normalising as it was fine-tuned (`saved_pooling`) unless told otherwise. `verify`
    loads the result with sentence-transformers and compares its vectors with `encode`'s on a few texts.
    Returns what was written and the largest difference found."""
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.interop.sentence_transformers import write_sentence_transformers
    from bertzoo.loading import load_encoder, resolve

    directory = resolve(model)
    own_pooling, own_normalize = saved_pooling(directory)
    pooling = own_pooling if pooling == "auto" else pooling
    normalize = own_normalize if normalize is None else normalize
    encoder = load_encoder(directory).eval()
    tokenizer = Tokenizer.load(directory)
    length = max_length or min(512, int(encoder.config.max_position))
    path = write_sentence_transformers(
        encoder, tokenizer, output, pooling=pooling, normalize=normalize, max_seq_length=length
    )
    info: dict[str, object] = {"path": str(path), "pooling": pooling, "normalize": normalize, "max_length": length}
    if not verify:
        return info
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        info["verify_skipped"] = "not verified: pip install sentence-transformers"
        return info
    texts = ["A short sentence.", "A longer sentence about the history of the Roman Empire and its roads.", "x"]
    theirs = SentenceTransformer(str(path), device="cpu").encode(texts, convert_to_numpy=True, batch_size=8)
    ours = encode(encoder, tokenizer, texts, max_length=length, pooling=pooling, normalize=normalize)
    info["max_abs_diff"] = float(np.abs(np.asarray(theirs) - ours).max())
    return info
