"""Distilled students against their teacher: inference speed on the same batches, and the cost of a
distillation step with the teacher run live against read from the logit cache.

Models: `--teacher` (a fine-tuned bertzoo classifier directory; default: all-MiniLM-L6-v2 with an untrained
12-way head) and `--students` (fine-tuned directories; default: its layers 0, 2, 5 as a DistilBERT student and
a random TinyBERT 4 x 312, both with untrained heads: speed does not depend on the weights); `--teacher-preset
bert-base` makes the default teacher a random model of that shape (TinyBERT's paper measured against BERT-base;
slower than --quick's minute). Inputs: dev texts of
the teacher's built-in task (wiki-topics for the default or a non-built-in task) tokenized by the teacher's
tokenizer (random ids of realistic lengths without the data package),
`--batch` rows padded to the longest, at most `--seq-len` tokens. The models take turns batch by batch, so load
from other processes hits all alike; each figure is the median over repetitions.

Prints examples/s per model, the speed-up of each student beside its bound (the teacher's forward FLOPs on
these inputs over the student's: what the speed-up would be if time followed FLOPs) and, when the model
directories come from `bertzoo distill` / `bertzoo finetune`, their test accuracies (report.json beside the
model). --device cpu (default) or cuda. Last line: JSON with `student_speedup` = the first (3-layer) student's
inference speed over the teacher's (bertzoo against itself: no `ratio`, which the benchmarks keep for bertzoo's speed
over a reference library's).

    python benchmarks/distill_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from inference_throughput import useful_flops  # noqa: E402
from timing import autocast, device_arg, resolve_device, sync  # noqa: E402

from bertzoo.batch import Batch  # noqa: E402
from bertzoo.precision import autocast_dtype, cpu_capability, resolve_precision  # noqa: E402


def default_models(preset: str | None = None):
    """(teacher, [students], tokenizer, names): MiniLM with a 12-way head; 3 of its layers; a TinyBERT 4 x 312.

    `preset`: a random teacher of that shape instead of MiniLM (speed does not depend on the weights), e.g.
    bert-base, the 12 x 768 teacher TinyBERT's paper measured its 4 x 312 student against."""
    from bertzoo.config import FinetuneConfig, StudentConfig, TaskDataConfig
    from bertzoo.data.tokens.tokenizer import Tokenizer
    from bertzoo.loading import load_encoder, resolve
    from bertzoo.tasks import get_task
    from bertzoo.train.finetune import build_model
    from bertzoo.train.students import encoder_from_teacher, random_encoder

    tokenizer = Tokenizer.load(resolve("builtin:all-minilm-l6-v2"))
    labels = [f"t{i}" for i in range(12)]
    cfg = FinetuneConfig(task="classification", data=TaskDataConfig(labels=labels))
    task = get_task(cfg, tokenizer)
    torch.manual_seed(0)
    if preset:
        encoder = random_encoder({"preset": preset}, tokenizer, 0)
        shape = f"{preset}, random"
    else:
        encoder, shape = load_encoder("builtin:all-minilm-l6-v2"), "MiniLM-L6"
    teacher = build_model(task, encoder, cfg)
    three, _ = encoder_from_teacher(teacher.encoder, StudentConfig(num_layers=3, variant="distilbert"))
    tiny = random_encoder({"preset": "tinybert-4l-312"}, tokenizer, 0)
    students = [build_model(task, three, cfg), build_model(task, tiny, cfg)]
    names = [f"teacher ({shape})", "3 layers (DistilBERT init)", "TinyBERT 4x312"]
    return teacher, students, tokenizer, names, "wiki-topics"


def load_models(teacher_dir: str, student_dirs: list[str]):
    from bertzoo.data.tasks.builtin import BUILTIN_TASKS
    from bertzoo.loading import load_finetuned

    task, teacher, tokenizer = load_finetuned(teacher_dir)
    dataset = task.cfg.data.dataset.removeprefix("builtin:")
    students = [load_finetuned(d)[1] for d in student_dirs]
    names = ["teacher"] + [f"{Path(d).parent.name} ({s.encoder.config.num_layers}x{s.encoder.config.hidden_size})"
                           for d, s in zip(student_dirs, students, strict=True)]  # fmt: skip
    return teacher, students, tokenizer, names, dataset if dataset in BUILTIN_TASKS else "wiki-topics"


def texts(n: int, dataset: str) -> list[str] | None:
    try:
        from bertzoo.data.tasks.builtin import load_builtin_task

        return [ex["text"] for ex in load_builtin_task(dataset, "dev")[:n]]
    except Exception:  # no data package: random ids of realistic lengths instead
        return None


def make_batches(tokenizer, n_batches: int, batch: int, seq_len: int, dataset: str = "wiki-topics") -> list[Batch]:
    rows: list[list[int]]
    found = texts(n_batches * batch, dataset)
    cls, sep = tokenizer.special.cls, tokenizer.special.sep
    if found and len(found) >= n_batches * batch:
        rows = [[cls, *ids[: seq_len - 2], sep] for ids in tokenizer.encode_batch(found)]
    else:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(seq_len // 2, seq_len + 1, (n_batches * batch,), generator=g)
        rows = [[cls, *torch.randint(1000, tokenizer.vocab_size, (int(n) - 2,), generator=g).tolist(), sep]
                for n in lengths]  # fmt: skip
    out = []
    for b in range(n_batches):
        chunk = rows[b * batch : (b + 1) * batch]
        width = max(len(r) for r in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, r in enumerate(chunk):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        index = torch.arange(len(chunk)) + b * batch  # rows of the logit cache
        labels = torch.zeros(len(chunk), dtype=torch.long)
        out.append(Batch(ids, mask, torch.zeros_like(ids), labels=labels, example_index=index))
    return out


def time_inference(models, batches, dtype, repeats: int, device: torch.device) -> list[float]:
    """Median examples/s of each model over `repeats` passes of `batches`, models taking turns per batch
    (each call synchronised with the device)."""
    per_model: list[list[float]] = [[] for _ in models]
    with torch.inference_mode(), autocast(device, dtype):
        for b in batches[:2]:  # warm-up
            for m in models:
                m(b)
        for _ in range(repeats):
            spent = [0.0] * len(models)
            for b in batches:
                for i, m in enumerate(models):
                    sync(device)
                    t0 = time.perf_counter()
                    m(b)
                    sync(device)
                    spent[i] += time.perf_counter() - t0
            n = sum(b.input_ids.size(0) for b in batches)
            for i in range(len(models)):
                per_model[i].append(n / spent[i])
    return [statistics.median(x) for x in per_model]


def time_distill_step(student, teacher, batches, dtype, repeats: int, device: torch.device) -> tuple[float, float]:
    """ms per distillation step (forward + backward + AdamW) with the teacher live and with cached logits."""
    from bertzoo.objectives.distill import Distiller
    from bertzoo.train.teacher_cache import LogitCache

    with torch.inference_mode():
        cached = torch.cat([teacher(b).logits.float() for b in batches])
    results = []
    for cache in (None, LogitCache(cached)):
        d = Distiller(student, teacher, {"ce": 1.0, "hard": 1.0}, temperature=2.0, teacher_logits=cache).train()
        opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-5)
        times = []
        for r in range(repeats + 1):
            sync(device)
            t0 = time.perf_counter()
            for b in batches:
                with autocast(device, dtype):
                    loss = d(b).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            sync(device)
            if r:  # the first pass warms up
                times.append((time.perf_counter() - t0) / len(batches) * 1000)
        results.append(statistics.median(times))
    return results[0], results[1]


def accuracy_of(model_dir: str | None) -> float | None:
    """The test accuracy in report.json beside a model directory (distill: student_test; finetune: test)."""
    if model_dir is None:
        return None
    path = Path(model_dir).parent / "report.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    metrics = report.get("student_test") or (report.get("test") or {}).get("metrics") or {}
    return metrics.get("accuracy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", default=None, help="fine-tuned teacher directory (default: MiniLM, untrained head)")
    ap.add_argument("--students", nargs="*", default=None, help="fine-tuned student directories")
    ap.add_argument(
        "--teacher-preset",
        default=None,
        help="without --teacher: a random teacher of this preset (e.g. bert-base) instead of MiniLM",
    )
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--threads", type=int, default=None)
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="well under a minute")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.repeats, args.batch = 2, 2, 16
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.teacher and args.teacher_preset:
        raise SystemExit("give --teacher (a fine-tuned directory) or --teacher-preset (a random shape), not both")
    if args.teacher:
        teacher, students, tokenizer, names, dataset = load_models(args.teacher, args.students or [])
    else:
        teacher, students, tokenizer, names, dataset = default_models(args.teacher_preset)
    if not students:
        raise SystemExit("give at least one student directory with --students")
    precision = resolve_precision(args.precision, device)
    dtype = autocast_dtype(precision)
    models = [m.to(device).eval() for m in (teacher, *students)]
    cpu_batches = make_batches(tokenizer, args.batches, args.batch, args.seq_len, dataset)
    batches = [b.to(device) for b in cpu_batches]
    tokens = sum(int(b.attention_mask.sum()) for b in cpu_batches) / sum(b.input_ids.size(0) for b in cpu_batches)
    print(f"on {device}, cpu {cpu_capability()}, precision {precision}, threads {torch.get_num_threads()}, "
          f"batch {args.batch}, {dataset} dev texts, mean {tokens:.0f} tokens per example "
          f"(at most {args.seq_len})")  # fmt: skip
    speeds = time_inference(models, batches, dtype, args.repeats, device)
    accs = [accuracy_of(args.teacher)] + [accuracy_of(d) for d in (args.students or [None] * len(students))]
    if args.teacher:  # the teacher's own report holds its figure under teacher_test when a student's does
        first = Path(args.students[0]).parent / "report.json" if args.students else None
        if first is not None and first.is_file():
            accs[0] = json.loads(first.read_text()).get("teacher_test", {}).get("accuracy", accs[0])
    lengths = np.concatenate([b.attention_mask.sum(dim=1).numpy() for b in cpu_batches])
    flops = [useful_flops(m.encoder.config, lengths) for m in models]
    print(f"{'model':<40} {'params':>10} {'examples/s':>11} {'speed-up':>9} {'bound':>7} {'test acc':>9}")
    for name, m, speed, flop, acc in zip(names, models, speeds, flops, accs, strict=True):
        shown = f"{acc:.4f}" if acc is not None else "-"
        params = m.encoder.num_parameters()
        print(f"{name:<40} {params / 1e6:>9.1f}M {speed:>11.1f} {speed / speeds[0]:>8.2f}x "
              f"{flops[0] / flop:>6.2f}x {shown:>9}")  # fmt: skip
    live, cached = time_distill_step(students[0].train(), teacher, batches, dtype, max(1, args.repeats - 1), device)
    print(f"distillation step of the first student: teacher live {live:.0f} ms, cached logits {cached:.0f} ms "
          f"({live / cached:.2f}x)")  # fmt: skip
    result = {
        "student_speedup": speeds[1] / speeds[0],
        "speedups": [s / speeds[0] for s in speeds[1:]],
        "flop_bounds": [flops[0] / f for f in flops[1:]],
        "models": names,
        "examples_per_s": {"teacher": speeds[0], "students": speeds[1:]},
        "teacher_test_accuracy": accs[0],
        "student_test_accuracies": accs[1:],
        "distill_step_ms": {"teacher_live": live, "cached": cached, "live_over_cached": live / cached},
        "dataset": dataset,
        "device": str(device),
        "precision": precision,
        "cpu": cpu_capability(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
