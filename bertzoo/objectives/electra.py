"""ELECTRA pretraining (Clark et al. 2020): replaced-token detection.

A small masked-LM *generator* predicts the masked tokens; its samples (softmax, temperature 1) replace
them, and the *discriminator* labels every real token as original (0) or replaced (1). A sample that
happens to equal the original token counts as original. Sampling is discrete, so no gradient flows
from the discriminator into the generator; the generator trains on its MLM loss alone and

    loss = mlm_loss + rtd_weight * rtd_loss        (rtd_weight = 50, the paper's lambda)

with rtd_loss the binary cross-entropy averaged over every real (non-padding) token.

The two models share the embedding block (word, position and token-type tables and the embedding
LayerNorm), as Google's implementation does by building both under one `electra/embeddings` scope;
each model keeps its own projection from the embedding width E to its hidden size. The generator's
MLM head projects back to E and its decoder is the shared word table.

`embedding_sharing: disentangled` is DeBERTaV3's gradient-disentangled embedding sharing (He et al. 2021) in
place of the paper's plain sharing: the discriminator reads E_D = sg(E_G) + delta, so its RTD gradient never
moves the generator's word table E_G, which learns from the masked LM alone (they found the two losses pull the
shared table in a "tug of war"; on a CPU budget: docs/families.md). Only the word table is disentangled.

Stages (`stage`): "joint" (the paper's default) trains both; "generator" trains the generator alone
(MLM, the discriminator is not run); "discriminator" freezes the generator, gives the discriminator
its own copy of the embeddings and trains RTD only: the paper's two-stage procedure, whose
initialisation from the trained generator is `init_discriminator_from_generator`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import ModelConfig, is_number
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder, init_weights
from bertzoo.models.heads import ReplacedTokenDetectionHead
from bertzoo.nn import activation
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.mlm import MaskedLM, masked_lm_loss

STAGES = ("joint", "generator", "discriminator")
# "shared": one word table for both models (the paper's); "disentangled": DeBERTaV3's E_D = sg(E_G) + delta.
EMBEDDING_SHARING = ("shared", "disentangled")
# Where a disentangled objective keeps its exact delta in a checkpoint: outside the discriminator's encoder
# (whose word table is stored merged, so every loader sees an ordinary ELECTRA), read back only on resume.
DELTA_KEY = "discriminator.word_delta"
# Batch.extra key: one uniform in [0, 1) per position, keyed by (seed, epoch, example, position) in the
# collator, so the generator's samples do not depend on batch composition and repeat exactly on resume.
SAMPLE_UNIFORM = "sample_uniform"
# The parts of the embedding block the two models share (attribute names of bertzoo.nn.Embeddings).
SHARED_EMBEDDINGS = ("word", "position", "token_type", "norm")


def make_generator(encoder: Encoder) -> MaskedLM:
    """A masked LM in ELECTRA's layout: head = dense(hidden -> E) -> GELU -> LayerNorm -> tied decoder.

    Hugging Face's ElectraGeneratorPredictions always uses GELU, whatever `hidden_act` says.
    """
    generator = MaskedLM(encoder, sentence_task=None)
    generator.mlm_head.act = activation("gelu")
    return generator


@torch.no_grad()
def sample_from_logits(logits: torch.Tensor, uniform: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """One token per row of `logits` (n, vocab) drawn from softmax(logits / temperature), by inverting the CDF at
    `uniform` (n,) in [0, 1): token k is drawn when cdf[k-1] <= u < cdf[k], i.e. with probability p_k.

    One keyed uniform per position (instead of the vocab-wide noise of Gumbel-max) is what lets the
    collator precompute the randomness cheaply. Never differentiable: ELECTRA's samples stop gradients.
    """
    cdf = torch.softmax(logits.detach().float() / temperature, dim=-1).cumsum(-1)  # (n, vocab)
    u = uniform.to(cdf.dtype).reshape(-1, 1) * cdf[:, -1:]  # scale by the total: rounding leaves it ~1
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=logits.size(-1) - 1)


@dataclass
class Replacement:
    """The discriminator's input built from a masked batch and the generator's samples."""

    input_ids: torch.Tensor  # (batch, seq): the original tokens, masked positions replaced by samples
    labels: torch.Tensor  # (batch, seq) bool: True exactly where input_ids differs from the original
    original: torch.Tensor  # (batch, seq): the uncorrupted tokens


def replace_tokens(batch: Batch, sampled: torch.Tensor) -> Replacement:
    """Put `sampled` (num_masked,), in row-major order of the masked positions, into the original
    sequence. Positions the collator kept unchanged or randomised are restored from `labels` first."""
    selected = batch.labels != IGNORE_INDEX
    original = torch.where(selected, batch.labels, batch.input_ids)
    fake = original.clone()
    fake[selected] = sampled.to(fake.dtype)
    return Replacement(input_ids=fake, labels=fake != original, original=original)


def rtd_loss_and_metrics(
    logits: torch.Tensor, labels: torch.Tensor, real: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Mean BCE over the `real` positions plus accuracy, precision and recall of the replaced class
    and the replaced share (the positive-class prior an RTD accuracy should be read against)."""
    z = logits[real].float()
    y = labels[real].float()
    loss = F.binary_cross_entropy_with_logits(z, y) if y.numel() else logits.sum() * 0.0
    with torch.no_grad():
        pred = z > 0
        pos = y.bool()
        tp = (pred & pos).sum()
        n_real, n_pred, n_pos = (torch.as_tensor(v, device=logits.device) for v in (y.numel(), pred.sum(), pos.sum()))
        metrics = {
            "rtd_loss": loss.detach(),
            "rtd_acc": (pred == pos).float().sum() / n_real.clamp(min=1),
            "rtd_precision": tp / n_pred.clamp(min=1),
            "rtd_recall": tp / n_pos.clamp(min=1),
            "replaced_share": n_pos / n_real.clamp(min=1),
        }
    counts = {"rtd_loss": n_real, "rtd_acc": n_real, "rtd_precision": n_pred, "rtd_recall": n_pos}
    counts["replaced_share"] = n_real
    return loss, metrics, counts


class Discriminator(nn.Module):
    """Encoder + replaced-token-detection head (Hugging Face's ElectraForPreTraining)."""

    def __init__(self, encoder: Encoder) -> None:
        super().__init__()
        c = encoder.config
        self.encoder = encoder
        self.rtd_head = ReplacedTokenDetectionHead(c.hidden_size, act=c.hidden_act)
        self.rtd_head.apply(lambda m: init_weights(m, c.initializer_range))

    def start_at_prior(self, share: float) -> None:
        """Start the RTD logit at the log-odds of `share` (the expected replaced share) instead of 0.

        From 0 (p = 0.5) the first steps' gradient says "fewer replaced" at every position, a push that lands
        on the encoder while the discriminator has no features that tell replacements apart; a bias at the
        prior leaves only the informative part. (Measured at 500 CPU steps: no effect on fine-tuning on its
        own; docs/families.md.)"""
        if not is_number(share) or not 0 < share < 1:
            raise ConfigError(f"objective_args.rtd_prior must be a replaced share in (0, 1), got {share!r}")
        with torch.no_grad():
            self.rtd_head.prediction.bias.fill_(math.log(share / (1 - share)))

    @property
    def config(self) -> ModelConfig:
        return self.encoder.config

    def logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(batch, seq) replaced-token logits; > 0 means "replaced"."""
        return self.rtd_head(self.encoder(input_ids, attention_mask, token_type_ids, pool=False).last_hidden_state)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        """RTD on a batch whose `labels` are 0/1 replaced-token labels (IGNORE_INDEX skips a position)."""
        logits = self.logits(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        if batch.labels is None:
            return ObjectiveOutput(loss=None, logits=logits)
        real = batch.labels != IGNORE_INDEX
        if batch.attention_mask is not None:
            real &= batch.attention_mask.bool()
        loss, metrics, counts = rtd_loss_and_metrics(logits, batch.labels == 1, real)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, logits=logits)


def share_embeddings(generator: Encoder, discriminator: Encoder) -> None:
    """Make `generator` use the discriminator's embedding tables and LayerNorm (same objects)."""
    for name in SHARED_EMBEDDINGS:
        mine, theirs = getattr(generator.embeddings, name), getattr(discriminator.embeddings, name)
        if (mine is None) != (theirs is None) or (
            mine is not None and [p.shape for p in mine.parameters()] != [p.shape for p in theirs.parameters()]
        ):
            raise ConfigError(
                f"the generator's and discriminator's embeddings.{name} differ in shape, so they cannot be shared; "
                "keep vocab_size, max_position, type_vocab_size and embedding_size equal in both"
            )
        setattr(generator.embeddings, name, theirs)


class DisentangledWordEmbedding(nn.Module):
    """The discriminator's word table under gradient-disentangled sharing: E_D = sg(E_G) + delta.

    `delta` starts at zero, so both models begin from one table (a count-based start included); the RTD
    gradient reaches `delta` only, and E_G moves with the generator's masked LM. Its state dict holds the merged
    table as `weight`, an ordinary word table to every loader, exporter and fine-tuning run."""

    def __init__(self, shared: nn.Embedding) -> None:
        super().__init__()
        self._shared = (shared,)  # a tuple, not a submodule: the generator owns and saves the table
        self.delta = nn.Parameter(torch.zeros_like(shared.weight))
        self.padding_idx = shared.padding_idx
        self.num_embeddings, self.embedding_dim = shared.num_embeddings, shared.embedding_dim
        self._register_state_dict_hook(_merged_word_table)

    @property
    def shared(self) -> nn.Embedding:
        """The generator's table E_G."""
        return self._shared[0]

    @property
    def weight(self) -> torch.Tensor:
        """E_D as the discriminator sees it (no gradient into E_G)."""
        return self.shared.weight.detach() + self.delta

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.shared(input_ids).detach() + F.embedding(input_ids, self.delta, self.padding_idx)


def _merged_word_table(module: DisentangledWordEmbedding, state: dict, prefix: str, _meta: Any) -> None:
    """State-dict hook: the merged table E_G + delta under `weight`, in place of `delta`."""
    del state[prefix + "delta"]
    state[prefix + "weight"] = module.weight.detach()


def _keep_exact_delta(module: Electra, state: dict, prefix: str, _meta: Any) -> None:
    """State-dict hook: delta itself beside the merged table, so a resumed run continues bit for bit
    ((E_G + delta) - E_G need not round back to delta)."""
    state[prefix + DELTA_KEY] = module.discriminator.encoder.embeddings.word.delta.detach()


def _split_merged(module: Electra, state: dict, prefix: str, *_: Any) -> None:
    """Load pre-hook: delta from its exact copy in place of the merged table (without the copy both stay, and
    a strict load names the mismatch)."""
    delta = state.pop(prefix + DELTA_KEY, None)
    if delta is not None:
        state.pop(prefix + "discriminator.encoder.embeddings.word.weight", None)
        state[prefix + "discriminator.encoder.embeddings.word.delta"] = delta


def disentangle_word_table(discriminator: Encoder) -> None:
    """Give `discriminator` (whose word table the generator shares) E_D = sg(E_G) + delta in place of the table."""
    discriminator.embeddings.word = DisentangledWordEmbedding(discriminator.embeddings.word)


class Electra(nn.Module):
    """The ELECTRA pretraining objective: `generator` (a MaskedLM) + `discriminator` (a Discriminator).

    `discriminator_encoder()` is the model to fine-tune; `save_pretrained` writes both models (and the
    configs to rebuild them) for resuming; `bertzoo.hub.export_hf` writes the pair as Hugging Face directories.
    """

    objective_name = "electra"

    def __init__(
        self,
        config: ModelConfig,
        generator_config: ModelConfig,
        *,
        rtd_weight: float = 50.0,
        stage: str = "joint",
        sample_temperature: float = 1.0,
        embedding_sharing: str = "shared",
    ) -> None:
        super().__init__()
        if stage not in STAGES:
            raise ConfigError(f"objective_args.stage={stage!r} is not allowed; choose one of: {', '.join(STAGES)}")
        if embedding_sharing not in EMBEDDING_SHARING:
            raise ConfigError(
                f"objective_args.embedding_sharing={embedding_sharing!r} is not allowed; "
                f"choose one of: {', '.join(EMBEDDING_SHARING)}"
            )
        if embedding_sharing == "disentangled" and stage != "joint":
            raise ConfigError(
                "objective_args.embedding_sharing: disentangled applies to stage joint (the two-stage run trains one "
                "model at a time); remove it"
            )
        self.embedding_sharing = embedding_sharing
        if rtd_weight < 0:
            raise ConfigError(f"objective_args.rtd_weight must be >= 0, got {rtd_weight}")
        self.rtd_weight = float(rtd_weight)
        if not is_number(sample_temperature):
            raise ConfigError(f"objective_args.sample_temperature must be a number, got {sample_temperature!r}")
        if not sample_temperature > 0:
            raise ConfigError(f"objective_args.sample_temperature must be > 0, got {sample_temperature}")
        # Above 1 the generator's samples are flatter, so more of them are detectable by a discriminator
        # that has not yet learned context (the starving seen at CPU budgets: docs/pretraining.md).
        self.sample_temperature = float(sample_temperature)
        self.stage = stage
        self.discriminator = Discriminator(Encoder(config))
        gen_encoder = Encoder(generator_config)
        # Shared before the MLM head is built, so its decoder ties to the shared word table.
        self.shared_embeddings = stage != "discriminator"
        if self.shared_embeddings:
            share_embeddings(gen_encoder, self.discriminator.encoder)
        if embedding_sharing == "disentangled":  # after sharing: E_G is the table both now hold
            disentangle_word_table(self.discriminator.encoder)
            self._register_state_dict_hook(_keep_exact_delta)
            self._register_load_state_dict_pre_hook(_split_merged, with_module=True)
        self.generator = make_generator(gen_encoder)
        if stage == "generator":  # only the generator (and the embeddings it shares) trains
            self.discriminator.requires_grad_(False)
            self.generator.requires_grad_(True)
        elif stage == "discriminator":  # the generator is a fixed sampler
            self.generator.requires_grad_(False)

    @property
    def generator_loaded(self) -> bool:
        """True in the second stage: the generator, its masked-LM head and the word tables it shares with the
        discriminator come from the stage-generator checkpoint (so neither count-based start,
        `word_embedding_init` or `mlm_bias_init`, replaces them)."""
        return self.stage == "discriminator"

    @property
    def config(self) -> ModelConfig:
        """The discriminator's config (the model that is kept)."""
        return self.discriminator.config

    @property
    def generator_config(self) -> ModelConfig:
        return self.generator.encoder.config

    @property
    def encoder(self) -> Encoder:
        """The discriminator's encoder, under the name every objective uses for the kept model."""
        return self.discriminator.encoder

    def discriminator_encoder(self) -> Encoder:
        """The encoder to fine-tune (what `bertzoo.loading.load_encoder` returns for an ELECTRA checkpoint)."""
        return self.discriminator.encoder

    def replace(self, batch: Batch, mlm_logits: torch.Tensor, selected: torch.Tensor) -> Replacement:
        """Sample the generator at the masked positions and build the discriminator's input."""
        uniform = batch.extra.get(SAMPLE_UNIFORM)
        if uniform is None:  # batches not made by ElectraCollator: the (checkpointed) global RNG
            uniform = torch.rand(selected.shape, device=mlm_logits.device)
        sampled = sample_from_logits(mlm_logits, uniform.to(mlm_logits.device)[selected], self.sample_temperature)
        return replace_tokens(batch, sampled)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over: masked tokens (generator MLM), real tokens (RTD)."""
        counts = {"mlm": int((batch.labels != IGNORE_INDEX).sum())} if batch.labels is not None else {}
        if self.stage != "generator":
            mask = batch.attention_mask
            counts["rtd"] = int(mask.bool().sum()) if mask is not None else int(batch.input_ids.numel())
        return counts

    def forward(self, batch: Batch) -> ObjectiveOutput:
        if batch.labels is None:
            raise ConfigError("ELECTRA pretraining needs masked batches (labels); use its collator")
        selected = batch.labels != IGNORE_INDEX  # (batch, seq)
        train_generator = self.stage != "discriminator"
        with torch.set_grad_enabled(train_generator and torch.is_grad_enabled()):
            hidden = self.generator.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, pool=False)
            hidden = hidden.last_hidden_state
            # MaskedLM's loss, keeping the logits: the generator samples the replacements from them.
            mlm_logits, mlm_loss, metrics, counts = masked_lm_loss(hidden, batch.labels, self.generator.mlm_head)
        device = hidden.device
        loss = mlm_loss
        terms = {"mlm": (mlm_loss, 1.0)}
        if self.stage != "generator":
            fake = self.replace(batch, mlm_logits, selected)
            logits = self.discriminator.logits(fake.input_ids, batch.attention_mask, batch.token_type_ids)
            real = batch.attention_mask.bool() if batch.attention_mask is not None else torch.ones_like(selected)
            rtd_loss, rtd_metrics, rtd_counts = rtd_loss_and_metrics(logits, fake.labels, real)
            metrics.update(rtd_metrics)
            counts.update(rtd_counts)
            loss = self.rtd_weight * rtd_loss + (mlm_loss if train_generator else 0.0)
            terms = {"rtd": (rtd_loss, self.rtd_weight), **({"mlm": (mlm_loss, 1.0)} if train_generator else {})}
        metrics["loss"] = loss.detach()
        counts["loss"] = torch.tensor(1, device=device)
        return ObjectiveOutput(loss=loss, metrics=metrics, counts=counts, terms=terms)

    @torch.no_grad()
    def init_discriminator_from_generator(self) -> list[str]:
        """Two-stage ELECTRA: copy every generator encoder tensor whose name and shape the discriminator
        shares (all of them when both have the same size, as the paper's two-stage run requires; only
        the E-wide embedding block otherwise). Returns the names copied."""
        if self.shared_embeddings:
            raise ConfigError("init_discriminator_from_generator applies to stage 'discriminator' only")
        mine = self.discriminator.encoder.state_dict()
        copied = []
        for name, tensor in self.generator.encoder.state_dict().items():
            if name in mine and mine[name].shape == tensor.shape:
                mine[name].copy_(tensor)
                copied.append(name)
        return copied

    def checkpoint_fields(self) -> dict[str, Any]:
        """config.json fields beyond the discriminator's config: the generator's config and the
        objective's settings (`save_pretrained`, attached by bertzoo.loading, writes them with
        `generator.*` and `discriminator.*` weights, shared tensors stored once)."""
        return {
            "objective": "electra",
            "stage": self.stage,
            "rtd_weight": self.rtd_weight,
            "sample_temperature": self.sample_temperature,
            "embedding_sharing": self.embedding_sharing,
            "generator": self.generator_config.to_dict(),
        }

    @classmethod
    def from_parts(
        cls, generator: MaskedLM, discriminator: Discriminator, *, rtd_weight: float = 50.0, stage: str = "joint"
    ) -> Electra:
        """Join a separately stored generator and discriminator (e.g. Hugging Face's ElectraForMaskedLM and
        ElectraForPreTraining directories) into one objective; the shared embeddings are the discriminator's."""
        model = cls(discriminator.config, generator.config, rtd_weight=rtd_weight, stage=stage)
        # Generator first: with shared embeddings, the discriminator's tables then overwrite its copies.
        # Both parts are built from the very configs of the modules given, so every key matches.
        model.generator.load_state_dict(generator.state_dict())
        model.discriminator.load_state_dict(discriminator.state_dict())
        return model
