"""Knowledge distillation: a frozen teacher and a trained student in one objective, as ELECTRA's
objective holds a generator and a discriminator.

Losses, each a term of `loss = sum(weight * term)` (`DISTILL_TERMS`):

    ce      soft targets: KL(teacher || student) of the logits softened at temperature T, times T^2
            (Hinton et al.; DistilBERT's L_ce on masked-LM logits, TinyBERT's prediction loss on task
            logits, which differs from its soft cross-entropy by the teacher's entropy, a constant)
    mlm     the student's own masked-LM loss on the masked tokens (DistilBERT's L_mlm)
    hard    the student's own task loss on the gold labels (task distillation)
    cos     1 - cos(student, teacher) of the last hidden states over real tokens (DistilBERT's L_cos)
    attn    MSE of the attention scores before the softmax over pairs of real positions (TinyBERT)
    hidden  MSE of the hidden states (embedding output = layer 0) through a learned projection W_h when
            the widths differ (TinyBERT)

The teacher is not a submodule: its weights are not trained, not saved in the student's files, and
not seen by DDP or the optimizer; it runs in eval mode under `torch.inference_mode`. Its logits may
come from a cache instead (`teacher_logits`, keyed by the batch's example indices).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder, EncoderOutput
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import MaskedLM, masked_lm_loss

DISTILL_TERMS = ("ce", "mlm", "hard", "cos", "attn", "hidden")
LOGIT_TERMS = frozenset({"ce"})
TEACHER_TERMS = LOGIT_TERMS | {"cos", "attn", "hidden"}  # the terms that read the teacher
EXTRA_WEIGHTS = "distill_state.safetensors"  # trainable parts that are not the student's (W_h)


# --- losses ----------------------------------------------------------------------------------------


def soft_target_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)) * T^2, averaged over rows ((rows, classes) in).
    The T^2 keeps the gradient's scale independent of T (Hinton et al. 2015)."""
    t = temperature
    log_p_student = F.log_softmax(student.float() / t, dim=-1)
    log_p_teacher = F.log_softmax(teacher.float() / t, dim=-1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True) * (t * t)


def cosine_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over real tokens of 1 - cos(student, teacher) ((batch, seq, dim) each, same width)."""
    s, t = student.float(), teacher.float()
    if mask is not None:
        keep = mask.bool()
        s, t = s[keep], t[keep]
    return (1.0 - F.cosine_similarity(s.reshape(-1, s.size(-1)), t.reshape(-1, t.size(-1)), dim=-1)).mean()


def attention_score_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """TinyBERT's attention loss: MSE of pre-softmax scores (batch, heads, query, key) over the pairs of real
    positions (every pair with a padded query or key is zeroed on both sides and not counted, so the value
    does not depend on how wide the batch is padded)."""
    s, t = student.float(), teacher.float()
    if mask is None:
        return F.mse_loss(s, t)
    real = mask.bool()
    pairs = real[:, None, :, None] & real[:, None, None, :]  # (batch, 1, query, key)
    squared = (s - t).masked_fill(~pairs, 0.0).pow(2)
    return squared.sum() / (pairs.sum() * s.size(1)).clamp(min=1)


def hidden_state_loss(
    student: torch.Tensor, teacher: torch.Tensor, projection: nn.Module | None, mask: torch.Tensor | None
) -> torch.Tensor:
    """TinyBERT's hidden loss: MSE(W_h h_student, h_teacher) over the real tokens (no W_h: same widths)."""
    s = projection(student) if projection is not None else student
    s, t = s.float(), teacher.float()
    if mask is not None:
        keep = mask.bool()
        s, t = s[keep], t[keep]
    return F.mse_loss(s, t)


# --- layer maps ------------------------------------------------------------------------------------


def spread_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Teacher layers (0-based) a student of `student_layers` copies, spread from the first to the last:
    6 of 12 gives 0, 2, 4, 7, 9, 11 (DistilBERT's "every other layer" as its extraction picked them)."""
    if not 1 <= student_layers <= teacher_layers:
        raise ConfigError(
            f"a student of {student_layers} layers cannot be taken from a teacher of {teacher_layers}; "
            f"use 1 to {teacher_layers} layers"
        )
    if student_layers == 1:
        return [0]
    return [round(j * (teacher_layers - 1) / (student_layers - 1)) for j in range(student_layers)]


def uniform_layer_map(teacher_layers: int, student_layers: int) -> list[int]:
    """TinyBERT's mapping: student layer i (1-based) learns from teacher layer i * k, k = N / M; index 0
    (the embedding output) maps to 0. Returns the teacher depth of each student depth 0..M."""
    if student_layers > teacher_layers or teacher_layers % student_layers:
        raise ConfigError(
            f"TinyBERT's uniform layer map needs the teacher's {teacher_layers} layers to be a multiple of the "
            f"student's {student_layers}; set layer_map to a list of {student_layers} teacher layers (1-based)"
        )
    k = teacher_layers // student_layers
    return [i * k for i in range(student_layers + 1)]


def check_layer_map(layer_map: Sequence[int], teacher_layers: int, student_layers: int) -> list[int]:
    """A user's map (teacher layer, 1-based, for each student layer) as depths 0..M, or ConfigError."""
    layer_map = list(layer_map)
    if len(layer_map) != student_layers:
        raise ConfigError(
            f"layer_map has {len(layer_map)} entries but the student has {student_layers} layers; give one teacher "
            "layer (1-based) per student layer"
        )
    if any(not isinstance(x, int) or isinstance(x, bool) or not 1 <= x <= teacher_layers for x in layer_map):
        raise ConfigError(f"layer_map entries must be teacher layers 1..{teacher_layers}, got {layer_map}")
    return [0, *layer_map]


# --- what a model shows the distiller --------------------------------------------------------------


@dataclass
class View:
    """One forward pass of a teacher or student, as the losses read it."""

    encoder: EncoderOutput  # hidden_states always; attentions = pre-softmax scores when asked
    logits: torch.Tensor | None  # masked-LM logits at the labelled positions, or the task's logits
    own: ObjectiveOutput | None  # the model's own supervised output (its loss on the batch's labels)


@contextlib.contextmanager
def _capture(encoder: nn.Module, scores: bool) -> Iterator[list[EncoderOutput]]:
    """Make every call of `encoder` return all hidden states (and the pre-softmax attention scores when
    `scores`), and collect its outputs: a task model runs its own forward, and the distiller still sees
    inside it without a second encoder pass."""
    seen: list[EncoderOutput] = []

    def pre(_module, args, kwargs):
        kwargs = {**kwargs, "output_hidden_states": True}
        if scores:
            kwargs["output_attentions"] = "scores"
        return args, kwargs

    def post(_module, _args, _kwargs, output):
        seen.append(output)

    handles = [
        encoder.register_forward_pre_hook(pre, with_kwargs=True),
        encoder.register_forward_hook(post, with_kwargs=True),
    ]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def encoder_of(model: nn.Module) -> Encoder:
    """The Transformer encoder inside a masked LM, a task model or a bare encoder."""
    if isinstance(model, Encoder):
        return model
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, Encoder):
        raise ConfigError(f"cannot distil {type(model).__name__}: it has no bertzoo Encoder to read")
    return encoder


def observe(model: nn.Module, batch: Batch, *, scores: bool = False, logits: bool = True) -> View:
    """A forward pass of `model` with its encoder's hidden states (and attention scores).

    A `MaskedLM` gives its masked-LM logits at the labelled positions and its MLM loss; a bare `Encoder`
    neither; any other module (a task model) runs its own forward, which gives its logits and loss."""
    encoder = encoder_of(model)
    with _capture(encoder, scores) as seen:
        if isinstance(model, MaskedLM):
            out = model.encode(batch)
            view = View(out, None, None)
            if logits and batch.labels is not None:
                head_logits, loss, metrics, counts = masked_lm_loss(out.last_hidden_state, batch.labels, model.mlm_head)
                view.logits, view.own = head_logits, ObjectiveOutput(loss, metrics, counts)
            return view
        if isinstance(model, Encoder):
            out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, pool=False)
            return View(out, None, None)
        own = model(batch)
    if len(seen) != 1:
        raise ConfigError(
            f"{type(model).__name__} ran its encoder {len(seen)} times in one pass; it cannot be distilled"
        )
    return View(seen[0], own.logits, own)


def _flat_mask(batch: Batch, rows: int) -> torch.Tensor | None:
    """The (rows, seq) padding mask matching an encoder call that flattened leading dims."""
    if batch.attention_mask is None:
        return None
    return batch.attention_mask.reshape(rows, -1)


# --- the objective ---------------------------------------------------------------------------------


class Distiller(nn.Module):
    """`loss = sum_k weights[k] * term_k` of a student against a frozen teacher (terms: module doc).

    `layer_map[i]` is the teacher depth (0 = embedding output) student depth i learns from, for the
    `hidden` and `attn` terms. The student's hidden width may differ from the teacher's only for `hidden`
    (a learned W_h, saved beside the student's files as `EXTRA_WEIGHTS`); `cos` needs equal widths,
    `attn` equal head counts, `ce` the same output classes. `teacher_logits(batch)` (optional) gives
    cached teacher logits instead of running the teacher, when every term reads logits only.
    """

    def __init__(
        self,
        student: nn.Module,
        teacher: nn.Module,
        weights: dict[str, float],
        *,
        temperature: float = 1.0,
        layer_map: Sequence[int] | None = None,
        teacher_logits: Callable[[Batch], torch.Tensor | None] | None = None,
    ) -> None:
        super().__init__()
        unknown = sorted(set(weights) - set(DISTILL_TERMS))
        if unknown:
            raise ConfigError(f"unknown loss term {unknown[0]!r}; choose from: {', '.join(DISTILL_TERMS)}")
        self.weights = {k: float(v) for k, v in weights.items() if float(v) != 0.0}
        if any(v < 0 for v in self.weights.values()):
            raise ConfigError(f"loss weights must be >= 0, got {weights}")
        if not self.weights:
            raise ConfigError("every loss weight is 0; give at least one term a positive weight")
        if not temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        self.student = student
        self._teacher = [teacher.eval().requires_grad_(False)]  # a list: not a submodule (module doc)
        self.teacher_logits = teacher_logits
        s, t = encoder_of(student).config, encoder_of(teacher).config
        self.layer_map = list(layer_map) if layer_map is not None else list(range(s.num_layers + 1))
        if len(self.layer_map) != s.num_layers + 1 or max(self.layer_map) > t.num_layers:
            raise ConfigError(
                f"the layer map {self.layer_map[1:]} does not fit a student of {s.num_layers} and a teacher of "
                f"{t.num_layers} layers"
            )
        if "cos" in self.weights and s.hidden_size != t.hidden_size:
            raise ConfigError(
                f"the cos loss compares hidden states, but the student is {s.hidden_size} wide and the teacher "
                f"{t.hidden_size}; use a student of the teacher's width or set loss.cos to 0 (hidden projects)"
            )
        if "attn" in self.weights and s.num_heads != t.num_heads:
            raise ConfigError(
                f"the attn loss compares heads one to one, but the student has {s.num_heads} heads and the teacher "
                f"{t.num_heads}; give the student {t.num_heads} heads or set loss.attn to 0"
            )
        self.projection = (
            nn.Linear(s.hidden_size, t.hidden_size)
            if "hidden" in self.weights and s.hidden_size != t.hidden_size
            else None
        )
        if self.projection is not None:
            nn.init.normal_(self.projection.weight, std=s.initializer_range)
            nn.init.zeros_(self.projection.bias)

    @property
    def teacher(self) -> nn.Module:
        return self._teacher[0]

    def _apply(self, fn, recurse: bool = True):  # .to(device) / .float() move the teacher too
        self._teacher[0]._apply(fn)
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> Distiller:
        super().train(mode)
        self.teacher.eval()  # dropout never runs in the teacher
        return self

    @property
    def config(self):
        return encoder_of(self.student).config

    def _teacher_view(self, batch: Batch, scores: bool) -> View:
        needs_states = bool({"cos", "attn", "hidden"} & set(self.weights))
        cached = self.teacher_logits(batch) if self.teacher_logits is not None and not needs_states else None
        if cached is not None:
            return View(EncoderOutput(last_hidden_state=batch.input_ids), cached, None)
        with torch.inference_mode():
            view = observe(self.teacher, batch, scores=scores, logits="ce" in self.weights)
        # Inference tensors cannot be saved for backward: the losses get ordinary copies.
        return _copied(view)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        w = self.weights
        scores = "attn" in w
        student = observe(self.student, batch, scores=scores, logits=bool({"ce", "mlm", "hard"} & set(w)))
        # The student's own losses alone (mlm, hard: a baseline without distillation) never run the teacher.
        teacher = self._teacher_view(batch, scores) if TEACHER_TERMS & set(w) else None
        terms: dict[str, tuple[torch.Tensor, float]] = {}
        s_out, t_out = student.encoder, teacher.encoder if teacher is not None else None
        mask = _flat_mask(batch, s_out.hidden_states[0].size(0))
        if "ce" in w:
            if student.logits is None or teacher.logits is None:
                who = "teacher" if teacher.logits is None else "student"
                raise ConfigError(
                    f"the ce loss needs the {who}'s logits, which it has none of (a bare encoder has no masked-LM "
                    "head); set loss.ce to 0 or use a masked-LM / fine-tuned model"
                )
            if student.logits.shape != teacher.logits.shape:
                raise ConfigError(
                    f"the ce loss compares logits of shape {tuple(student.logits.shape)} (student) and "
                    f"{tuple(teacher.logits.shape)} (teacher); they need the same vocabulary or labels"
                )
            terms["ce"] = (soft_target_loss(student.logits, teacher.logits, self.temperature), w["ce"])
        for name in ("mlm", "hard"):
            if name in w:
                if student.own is None or student.own.loss is None:
                    raise ConfigError(f"the {name} loss needs labels in the batch and a student that scores them")
                terms[name] = (student.own.loss, w[name])
        if "cos" in w:
            # The last of hidden_states: every position, even where a [CLS] classifier's last_hidden_state
            # holds [CLS] alone (top_queries).
            terms["cos"] = (cosine_loss(s_out.hidden_states[-1], t_out.hidden_states[-1], mask), w["cos"])
        if "hidden" in w:
            parts = [
                hidden_state_loss(s_out.hidden_states[i], t_out.hidden_states[j], self.projection, mask)
                for i, j in enumerate(self.layer_map)
            ]
            terms["hidden"] = (torch.stack(parts).sum(), w["hidden"])
        if "attn" in w:
            parts = [
                attention_score_loss(s_out.attentions[i - 1], t_out.attentions[j - 1], mask)
                for i, j in enumerate(self.layer_map)
                if i > 0
            ]
            terms["attn"] = (torch.stack(parts).sum(), w["attn"])
        loss = sum(weight * value for value, weight in terms.values())
        device = loss.device
        metrics = {f"{k}_loss": v.detach() for k, (v, _) in terms.items()}
        counts = {f"{k}_loss": n for k, n in self._items(batch).items()}
        if student.own is not None:
            for key in ("mlm_acc", "acc"):
                if key in student.own.metrics:
                    metrics[key] = student.own.metrics[key]
                    counts[key] = student.own.counts.get(key, torch.ones((), device=device))
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.ones((), device=device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, logits=student.logits, terms=terms)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each term averages over (host-side; see ObjectiveOutput)."""
        return {k: int(v) for k, v in self._items(batch).items()}

    def _items(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Masked tokens for the masked-LM terms, rows for task logits and labels, real tokens for hidden
        states, real (query, key) pairs for attention: what each term's mean is over."""
        ids = batch.input_ids
        rows = ids.reshape(-1, ids.size(-1)).size(0)
        if batch.attention_mask is not None:
            lengths = batch.attention_mask.reshape(rows, -1).sum(-1)
        else:
            lengths = torch.full((rows,), ids.size(-1), device=ids.device)
        tokens, pairs = lengths.sum(), (lengths * lengths).sum()
        n_rows = torch.tensor(ids.size(0), device=ids.device)
        masked_lm = batch.labels is not None and batch.labels.shape == ids.shape
        labelled = (batch.labels != IGNORE_INDEX).sum() if masked_lm else n_rows
        items = {"ce": labelled, "mlm": labelled, "hard": n_rows, "cos": tokens, "hidden": tokens, "attn": pairs}
        return {k: items[k] for k in self.weights}

    # -- files ------------------------------------------------------------------------------------------

    def checkpoint_parts(self, weights_file: Path) -> list[tuple[nn.Module, Path]]:
        """(module, file) pairs the run's files hold (bertzoo.engine.weights saves and loads them): the
        student's own files, loadable on their own, then W_h beside them when there is one."""
        parts: list[tuple[nn.Module, Path]] = [(self.student, Path(weights_file))]
        if self.projection is not None:
            parts.append((self.projection, Path(weights_file).parent / EXTRA_WEIGHTS))
        return parts


def _copied(view: View) -> View:
    """A view whose tensors are ordinary (not inference-mode) tensors."""

    def copy(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.clone()
        if isinstance(x, tuple):
            return tuple(copy(t) for t in x)
        return x

    out = view.encoder
    encoder = EncoderOutput(
        last_hidden_state=copy(out.last_hidden_state),
        pooler_output=None,
        hidden_states=copy(out.hidden_states),
        attentions=copy(out.attentions),
    )
    return View(encoder, copy(view.logits), None)
