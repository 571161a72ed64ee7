"""Distilled students against their teacher: inference speed on the same batches, the cost of a
distillation step with the teacher run live against read from the logit cache, and bertzoo's general
distillation step against the same step written with transformers.

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
model). --device cpu (default) or cuda.

The comparison with transformers: bertzoo's DistilBERT general-distillation step (`Distiller` with the method's
default loss, 5 ce + 2 mlm + 1 cos at T = 2: bertzoo.train.distill) against the recipe of transformers'
research_projects/distillation `distiller.py` (restrict_ce_to_mask): teacher BertForMaskedLM in eval mode under
no_grad, student DistilBertForMaskedLM, loss = 5 x KLDivLoss(batchmean) of the logits at T = 2 on the masked
positions x T^2 + 2 x MLM cross-entropy + 1 x CosineEmbeddingLoss of the last hidden states over the real tokens.
Its models are random (speed does not depend on the weights), whatever --teacher says: a `--mlm-preset` teacher
(bert-mini; --mlm-vocab 8k) and a student of half its layers taken from it as `bertzoo distill` takes them
(DistilBERT's initialisation), both exported (bertzoo.hub.export_hf), so both sides start from identical weights;
dropout off. Batches: --batch rows of 1/2 to full --seq-len length of random ids, 15% selected (80% [MASK], 10%
random, 10% kept). Before any timing the fp32 loss of the first batch must agree to 1e-4; then each step is
forward + backward + AdamW (`training_adamw`: each side's usual kernel, the same settings) under the same autocast,
the sides alternating which runs first. bertzoo runs both models' vocabulary projections on the masked positions
only, transformers' masked-LM classes on every position, so bertzoo's step counts fewer FLOPs. Printed: tokens/s
(real tokens) of both and the ratio, then (benchmarks/flops.py) each side's counted FLOPs per step (on the warm-up
step), GFLOP/s and MFU against the peak matmul rate measured in the same run at the same precision, the MFU of a
plain GEMM of the step's largest shape (tokens, hidden, intermediate) and whether the goal is met.

Last line: JSON with `student_speedup` = the first (3-layer) student's inference speed over the teacher's
(bertzoo against itself) and `ratio` = bertzoo's distillation step over transformers' (tokens/s; null without
transformers, when the comparison is left out), beside the comparison's tokens/s and FLOP figures
(`bertzoo_tokens_per_s`, `bertzoo_mfu`, `largest_gemm_mfu`, `goal_met`, ...).

    python benchmarks/distill_throughput.py --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from flops import counted_flops, utilisation_from  # noqa: E402
from inference_throughput import useful_flops  # noqa: E402
from profiling import add_profile_arg, profile_sides  # noqa: E402
from timing import alternate, autocast, device_arg, resolve_device, sync, training_adamw  # noqa: E402

from bertzoo.batch import IGNORE_INDEX, Batch  # noqa: E402
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


class DistillerRecipe(nn.Module):
    """The loss of transformers' research_projects/distillation `distiller.py` (masked LM, restrict_ce_to_mask):
    `weights` of its ce / mlm / cos terms, the teacher in eval mode under no_grad (not a submodule: not trained)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, weights: dict[str, float], temperature: float) -> None:
        super().__init__()
        self.student = student
        self._teacher = [teacher.eval().requires_grad_(False)]
        self.weights, self.temperature = weights, temperature
        self.ce = nn.KLDivLoss(reduction="batchmean")
        self.mlm = nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
        self.cos = nn.CosineEmbeddingLoss(reduction="mean")

    def forward(self, b: Batch) -> torch.Tensor:
        s = self.student(input_ids=b.input_ids, attention_mask=b.attention_mask, output_hidden_states=True)
        with torch.no_grad():
            t = self._teacher[0](input_ids=b.input_ids, attention_mask=b.attention_mask, output_hidden_states=True)
        temp, w = self.temperature, self.weights
        selected = b.labels != IGNORE_INDEX
        s_logits, t_logits = s.logits[selected], t.logits[selected]
        ce = self.ce(F.log_softmax(s_logits / temp, dim=-1), F.softmax(t_logits / temp, dim=-1)) * temp**2
        mlm = self.mlm(s.logits.flatten(0, 1), b.labels.flatten())
        real = b.attention_mask.bool()
        s_hidden, t_hidden = s.hidden_states[-1][real], t.hidden_states[-1][real]
        cos = self.cos(s_hidden, t_hidden, s_hidden.new_ones(s_hidden.size(0)))
        return w["ce"] * ce + w["mlm"] * mlm + w["cos"] * cos


def mlm_batches(n: int, batch: int, seq: int, vocab: int, device: torch.device, seed: int = 0) -> list[Batch]:
    """Masked-LM batches of random ids, rows of 1/2 to full length ([CLS] 2, [SEP] 3, padding 0), 15% of the
    ordinary tokens selected: 80% [MASK] (4), 10% a random id, 10% kept (BERT's masking)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
        real = torch.arange(seq)[None] < lengths[:, None]
        original = torch.randint(5, vocab, (batch, seq), generator=g)
        original[:, 0] = 2
        original[torch.arange(batch), lengths - 1] = 3
        original[~real] = 0
        selected = (torch.rand(batch, seq, generator=g) < 0.15) & (original >= 5)
        roll = torch.rand(batch, seq, generator=g)
        ids = torch.where(selected & (roll < 0.8), torch.full_like(original, 4), original)
        ids = torch.where(selected & (roll >= 0.8) & (roll < 0.9), torch.randint(5, vocab, ids.shape, generator=g), ids)
        labels = torch.where(selected, original, torch.full_like(original, IGNORE_INDEX))
        out.append(Batch(ids, real.long(), labels=labels).to(device))
    return out


def distillation_sides(args: argparse.Namespace, transformers) -> tuple[nn.Module, DistillerRecipe]:
    """bertzoo's `Distiller` of a random --mlm-preset teacher and its half-depth DistilBERT student, as `bertzoo
    distill` builds them, and distiller.py's recipe on the same weights exported to transformers."""
    from bertzoo.config import StudentConfig
    from bertzoo.hub import export_hf
    from bertzoo.models.encoder import Encoder
    from bertzoo.objectives.distill import Distiller
    from bertzoo.objectives.mlm import MaskedLM
    from bertzoo.train.distill import PHASES, TEMPERATURE
    from bertzoo.train.students import copy_matching, encoder_from_teacher
    from bertzoo.variants import bert

    torch.manual_seed(0)
    spec = {"preset": args.mlm_preset, "vocab_size": args.mlm_vocab, "pooler": False}
    teacher = MaskedLM(
        Encoder(bert.model_config({**spec, "dropout": 0.0, "attention_dropout": 0.0})), sentence_task=None
    )
    encoder, _ = encoder_from_teacher(teacher.encoder, StudentConfig())  # half the layers, as `bertzoo distill`
    student = MaskedLM(encoder, sentence_task=None)
    copy_matching(student, teacher, "mlm_head.")
    weights, temperature = PHASES[("distilbert", "general")][0].loss, TEMPERATURE["distilbert"]
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(teacher, Path(tmp) / "teacher")
        export_hf(student, Path(tmp) / "student")
        hf_teacher = transformers.BertForMaskedLM.from_pretrained(Path(tmp) / "teacher", attn_implementation="sdpa")
        hf_student = transformers.DistilBertForMaskedLM.from_pretrained(
            Path(tmp) / "student", attn_implementation="sdpa"
        )
    ours = Distiller(student, teacher, weights, temperature=temperature)
    return ours, DistillerRecipe(hf_student, hf_teacher, weights, temperature)


def distill_against_transformers(
    args: argparse.Namespace, device: torch.device, dtype: torch.dtype | None
) -> dict[str, float | bool] | None:
    """bertzoo's DistilBERT general-distillation step against distiller.py's (module doc); None without
    transformers."""
    try:
        import transformers
    except ImportError:
        print("comparison with transformers left out: it needs transformers (pip install 'bertzoo[hf]')")
        return None
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" would interleave with the report
    ours, ref = distillation_sides(args, transformers)
    cfg, weights, temperature = ours.teacher.config, ref.weights, ref.temperature
    ours.to(device).train(), ref.to(device).train()
    data = mlm_batches(args.batches + 1, args.batch, args.seq_len, args.mlm_vocab, device)

    # Same weights, same numbers: the fp32 loss of one batch, before anything is timed or trained.
    with torch.no_grad():
        check = {"bertzoo": float(ours(data[0]).loss), "transformers": float(ref(data[0]))}
    loss_diff = abs(check["bertzoo"] - check["transformers"])
    terms = " + ".join(f"{v:g} {k}" for k, v in weights.items())
    print(
        f"general distillation step ({terms} at T = {temperature:g}), teacher {args.mlm_preset} "
        f"(vocab {args.mlm_vocab}) -> {ours.config.num_layers} layers, batch {args.batch} x <= {args.seq_len}: "
        f"bertzoo against transformers' distiller.py recipe"
    )
    print(
        f"loss check (fp32): bertzoo {check['bertzoo']:.6f}  transformers {check['transformers']:.6f}  "
        f"|diff| {loss_diff:.1e}"
    )
    if loss_diff > 1e-4:
        sys.exit(f"the two sides disagree (loss |diff| {loss_diff:.1e} > 1e-4): the comparison would be meaningless")
    opt = training_adamw(ours, ref, lr=5e-4, eps=1e-6)  # distiller.py's defaults

    def step_ours(b: Batch) -> None:
        with autocast(device, dtype):
            loss = ours(b).loss
        loss.backward()
        opt["bertzoo"].step()
        opt["bertzoo"].zero_grad(set_to_none=True)

    def step_hf(b: Batch) -> None:
        with autocast(device, dtype):
            loss = ref(b)
        loss.backward()
        opt["transformers"].step()
        opt["transformers"].zero_grad(set_to_none=True)

    # Warm-up: one step of each, its FLOPs counted.
    flops = {
        "bertzoo": counted_flops(lambda: step_ours(data[0]), device, dtype),
        "transformers": counted_flops(lambda: step_hf(data[0]), device, dtype),
    }
    times = alternate(
        {
            "bertzoo": lambda: [step_ours(b) for b in data[1:]],
            "transformers": lambda: [step_hf(b) for b in data[1:]],
        },
        args.repeats,
        device,
    )
    tokens = sum(int(b.attention_mask.sum()) for b in data[1:])
    tps = {k: tokens / min(v) for k, v in times.items()}
    ratio = tps["bertzoo"] / tps["transformers"]
    print(
        f"  bertzoo {tps['bertzoo']:,.0f} tokens/s  transformers {tps['transformers']:,.0f} tokens/s  "
        f"ratio {ratio:.2f}x"
    )
    usage = utilisation_from(
        flops,
        {k: min(v) / (len(data) - 1) for k, v in times.items()},
        largest_gemm=(args.batch * args.seq_len, cfg.hidden_size, cfg.intermediate_size),
        device=device,
        amp=dtype,
    )
    if args.profile:  # where each side's step spends its time
        usage.update(
            profile_sides(
                {"bertzoo": lambda: step_ours(data[0]), "transformers": lambda: step_hf(data[0])}, device, dtype
            )
        )
    return {
        "distill_loss_diff": loss_diff,
        "bertzoo_tokens_per_s": round(tps["bertzoo"], 1),
        "transformers_tokens_per_s": round(tps["transformers"], 1),
        **usage,
        "ratio": round(ratio, 3),
    }


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
    ap.add_argument("--mlm-preset", default="bert-mini", help="teacher of the comparison with transformers")
    ap.add_argument("--mlm-vocab", type=int, default=8192, help="vocabulary of the comparison with transformers")
    device_arg(ap)
    ap.add_argument("--quick", action="store_true", help="well under a minute")
    add_profile_arg(ap)
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
    against = distill_against_transformers(args, device, dtype)
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
        **(against or {"ratio": None}),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
