"""The Hugging Face parity harness: every family's parity test compares bertzoo with transformers through these.

Two rules make a parity test able to fail. Every parameter is perturbed with distinct random values before the
comparison (`perturb`): at transformers' default initialisation every bias is 0 and every LayerNorm the identity, so
a key map that swapped two biases, or a bias with a LayerNorm shift, would give identical outputs. And the key maps
themselves are mutated (`swaps`, `mutated`): a family's map with two same-shaped entries exchanged must make the
parity check fail, so the test sees every entry of the map.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import transformers
from torch import nn

import bertzoo.interop.hf_keys as hf_keys
import bertzoo.io as io
from bertzoo.config import ModelConfig, read_json
from bertzoo.hub import load_encoder, load_pretraining
from bertzoo.interop.hf_keys import HFFamily
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.clm import CausalLM
from bertzoo.objectives.electra import Discriminator
from bertzoo.variants import get_variant

ATOL = 1e-5


def perturb(module: nn.Module, seed: int, scale: float = 0.05) -> nn.Module:
    """`module` with N(0, scale) noise added to every floating-point parameter (tied ones once), in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.is_floating_point():
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module.eval()


def close(ours: torch.Tensor, theirs: torch.Tensor, atol: float = ATOL) -> None:
    """Equal within `atol` (absolute; no relative slack)."""
    torch.testing.assert_close(ours, theirs, atol=atol, rtol=0)


def differs(ours: torch.Tensor, theirs: torch.Tensor, atol: float = ATOL) -> bool:
    """Whether two outputs disagree by more than the parity tolerance (or in shape)."""
    return ours.shape != theirs.shape or bool((ours - theirs).abs().max() > atol)


def token_inputs(
    vocab: int, *, batch: int = 3, seq: int = 17, seed: int = 0, low: int = 5, pad_id: int = 0, pad_from: int = 10
) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask and token_type_ids: random ids in [low, vocab); the second row padded with
    `pad_id` from `pad_from` on (transformers derives RoBERTa's positions from where the padding is); a second
    segment from the middle of each row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1, pad_from:] = 0
    ids[1, pad_from:] = pad_id
    types = torch.zeros_like(ids)
    types[:, seq // 2 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


# --- key-map mutation ------------------------------------------------------------------------------------


def _pairs_by_shape(keys: list[str], shape_of: Callable[[str], tuple[int, ...] | None]) -> Iterator[tuple[int, int]]:
    """Index pairs of same-shaped entries, a per-layer entry (`{i}`) only with another per-layer one: each entry
    paired with the next of its kind (the last with the first), so every entry moves at least once."""
    groups: dict[tuple[bool, tuple[int, ...]], list[int]] = {}
    for index, key in enumerate(keys):
        shape = shape_of(key)
        if shape is not None:
            groups.setdefault(("{i}" in key, tuple(shape)), []).append(index)
    for members in groups.values():
        if len(members) < 2:
            continue
        for j, a in enumerate(members):
            b = members[(j + 1) % len(members)]
            if len(members) > 2 or j == 0:  # two members: one swap
                yield a, b


def _swap(pairs: tuple[tuple[str, str], ...], a: int, b: int) -> tuple[tuple[str, str], ...]:
    out = list(pairs)
    (ha, oa), (hb, ob) = out[a], out[b]
    out[a], out[b] = (ha, ob), (hb, oa)
    return tuple(out)


def swaps(
    family: HFFamily, config: ModelConfig, shapes: Mapping[str, tuple[int, ...]]
) -> Iterator[tuple[str, HFFamily]]:
    """(what was swapped, the family with that swap) for same-shaped entries of its key map. `shapes` gives our
    tensors' shapes by our full key (a pretraining module's state_dict); a map entry's shape is that of its
    layer-0 (or only) instance. A family that lists its tensors itself (`tensor_map`) has its list mutated;
    separate query/key/value projections are exchanged by permuting `qkv_names`."""
    if family.tensor_map is not None:
        names = [ours for _, ours in family.tensor_map(config, None)]
        for a, b in _pairs_by_shape(names, lambda k: shapes.get(k)):
            swap = {names[a]: names[b], names[b]: names[a]}

            def swapped(c, hf_state, swap=swap, original=family.tensor_map):
                return [(hf, swap.get(ours, ours)) for hf, ours in original(c, hf_state)]

            yield f"{names[a]} <-> {names[b]}", dataclasses.replace(family, tensor_map=swapped)
        return

    def encoder_shape(ours: str) -> tuple[int, ...] | None:
        return shapes.get(f"encoder.{ours.format(i=0)}")

    encoder = family.encoder_keys
    for a, b in _pairs_by_shape([ours for _, ours in encoder], encoder_shape):
        yield f"{encoder[a][1]} <-> {encoder[b][1]}", dataclasses.replace(family, encoder_keys=_swap(encoder, a, b))
    heads = family.head_keys
    for a, b in _pairs_by_shape([ours for _, ours in heads], lambda k: shapes.get(k)):
        yield f"{heads[a][1]} <-> {heads[b][1]}", dataclasses.replace(family, head_keys=_swap(heads, a, b))
    if family.qkv is not None:
        q, k, v = family.qkv_names
        yield "query <-> key", dataclasses.replace(family, qkv_names=(k, q, v))
        yield "key <-> value", dataclasses.replace(family, qkv_names=(q, v, k))


def movable(family: HFFamily, config: ModelConfig, shapes: Mapping[str, tuple[int, ...]]) -> set[str]:
    """The entries of the family's map (as `swaps` names them) that have a same-shaped partner among the tensors
    in `shapes`: each must be moved by some swap."""
    if family.tensor_map is not None:
        keys = [ours for _, ours in family.tensor_map(config, None)]
        return {keys[i] for pair in _pairs_by_shape(keys, lambda k: shapes.get(k)) for i in pair}
    encoder = [ours for _, ours in family.encoder_keys]
    heads = [ours for _, ours in family.head_keys]
    found = {
        encoder[i] for pair in _pairs_by_shape(encoder, lambda k: shapes.get(f"encoder.{k.format(i=0)}")) for i in pair
    }
    return found | {heads[i] for pair in _pairs_by_shape(heads, lambda k: shapes.get(k)) for i in pair}


def import_with(
    directory: Path, family: HFFamily, kind: Literal["encoder", "pretraining"] = "pretraining"
) -> nn.Module:
    """A transformers directory imported through `family`'s key map (a mutated one, in the mutation tests)
    instead of the one bertzoo looks up: the backbone alone, or the pretraining module, in eval mode."""
    raw = read_json(Path(directory) / io.CONFIG)
    recipe = get_variant(family.variant)
    config = hf_keys.config_from_hf(raw, family, recipe.config_class)
    state, _ = hf_keys.state_from_hf(io.read_weights(directory), config, family)
    if kind == "encoder":
        module = recipe.encoder_class(config)
        state = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
    else:
        module = recipe.pretraining_model(raw, config, state)
    io.load_into(module, state, source=str(directory))
    return module.eval()


# --- the families laid out like BERT, and GPT -----------------------------------------------------------

VOCAB = 99
BERT_SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)


@dataclass(frozen=True)
class Case:
    """One Hugging Face architecture: its config and classes (the base model first), and what its inputs hold."""

    config: str
    fields: dict[str, Any]
    classes: tuple[str, ...]
    pad_id: int = 0
    segments: bool = True  # token_type_ids
    task_types: int = 0  # ERNIE 2.0's task_type_ids
    extra: dict[str, Any] = field(default_factory=dict)


CASES = {
    "bert": Case("BertConfig", BERT_SIZES, ("BertModel", "BertForMaskedLM", "BertForPreTraining")),
    "roberta": Case(
        "RobertaConfig",
        {**BERT_SIZES, "max_position_embeddings": 66, "type_vocab_size": 1, "layer_norm_eps": 1e-5},
        ("RobertaModel", "RobertaForMaskedLM"),
        pad_id=1,
        segments=False,
    ),
    "albert": Case(
        "AlbertConfig",
        {**BERT_SIZES, "embedding_size": 16, "num_hidden_layers": 3},
        ("AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining"),
    ),
    "albert-groups": Case(  # a layer group per layer: bertzoo's share: none
        "AlbertConfig",
        {**BERT_SIZES, "embedding_size": 16, "num_hidden_layers": 3, "num_hidden_groups": 3},
        ("AlbertForPreTraining",),
    ),
    "electra": Case(
        "ElectraConfig",
        {**BERT_SIZES, "embedding_size": 16},
        ("ElectraModel", "ElectraForMaskedLM", "ElectraForPreTraining"),
    ),
    "ernie": Case(
        "ErnieConfig",
        {**BERT_SIZES, "use_task_id": True, "task_type_vocab_size": 3},
        ("ErnieModel", "ErnieForMaskedLM", "ErnieForPreTraining"),
        task_types=3,
    ),
    "distilbert": Case(
        "DistilBertConfig",
        dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64),
        ("DistilBertModel", "DistilBertForMaskedLM"),
        segments=False,
    ),
    "openai-gpt": Case(
        "OpenAIGPTConfig",
        dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4),
        ("OpenAIGPTModel", "OpenAIGPTLMHeadModel"),
        segments=False,
    ),
    "gpt2": Case(
        "GPT2Config",
        dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=48, bos_token_id=None),
        ("GPT2Model", "GPT2LMHeadModel"),
        segments=False,
        extra={"eos_token_id": None},
    ),
}
PAIRS = [(name, cls) for name, case in CASES.items() for cls in case.classes]


def reference(name: str, cls: str, seed: int):
    """A tiny transformers model of class `cls`, every weight perturbed."""
    case = CASES[name]
    config = getattr(transformers, case.config)(**case.fields, **case.extra)
    torch.manual_seed(seed)
    return perturb(getattr(transformers, cls)(config), seed)


def inputs(name: str, seed: int = 0) -> dict[str, torch.Tensor]:
    case = CASES[name]
    out = token_inputs(VOCAB, seed=seed, pad_id=case.pad_id)
    if not case.segments:
        del out["token_type_ids"]
    if case.task_types:
        out["task_type_ids"] = torch.randint(0, case.task_types, out["input_ids"].shape, generator=torch.Generator())
    return out


def reference_outputs(hf, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a transformers model computes: every hidden state, the pooler, each head's logits, by our names."""
    with torch.no_grad():
        out = hf(**batch, output_hidden_states=True)
    found = {f"hidden {i}": h for i, h in enumerate(out.hidden_states)}
    if getattr(out, "pooler_output", None) is not None:
        found["pooler"] = out.pooler_output
    name = type(hf).__name__
    if name.endswith("ForMaskedLM") or name.endswith("LMHeadModel"):
        found["lm"] = out.logits
    elif name == "ElectraForPreTraining":
        found["rtd"] = out.logits
    elif name.endswith("ForPreTraining"):
        found["lm"] = out.prediction_logits
        found["sentence"] = out.sop_logits if name.startswith("Albert") else out.seq_relationship_logits
    return found


def our_outputs(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same quantities from a bertzoo module (an Encoder, a MaskedLM, a Discriminator or a CausalLM)."""
    encoder = module if isinstance(module, Encoder) else module.encoder
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        out = encoder(
            ids,
            mask,
            batch.get("token_type_ids"),
            task_type_ids=batch.get("task_type_ids"),
            output_hidden_states=True,
        )
        found = {f"hidden {i}": h for i, h in enumerate(out.hidden_states)}
        if out.pooler_output is not None:
            found["pooler"] = out.pooler_output
        if isinstance(module, Discriminator):
            found["rtd"] = module.logits(ids, mask, batch.get("token_type_ids"))
        elif isinstance(module, CausalLM):
            found["lm"] = module.logits(ids, mask)
        elif not isinstance(module, Encoder):
            found["lm"] = module.mlm_head(out.last_hidden_state)
            if module.nsp_head is not None:
                found["sentence"] = module.nsp_head(out.pooler_output)
    return found


def assert_parity(module: torch.nn.Module, hf, batch: dict[str, torch.Tensor]) -> None:
    """Every output of `hf` equal in `module` at 1e-5, at real tokens (padded queries may differ)."""
    ref, ours = reference_outputs(hf, batch), our_outputs(module, batch)
    assert set(ref) <= set(ours), (sorted(ours), sorted(ref))  # a heads model hides its pooler inside
    real = batch["attention_mask"].bool()
    for key, theirs in ref.items():
        mine = ours[key]
        if mine.dim() >= 2 and mine.shape[:2] == real.shape:
            mine, theirs = mine[real], theirs[real]
        close(mine, theirs)


def ours_of(directory: Path, cls: str) -> torch.nn.Module:
    """What bertzoo loads a transformers directory as: the encoder of a base model, else the pretraining module."""
    return (load_encoder if cls.endswith("Model") and "LMHead" not in cls else load_pretraining)(directory).eval()
