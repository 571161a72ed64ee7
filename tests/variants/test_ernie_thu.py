"""ERNIE (Tsinghua): the knowledge layers (equal to BERT without entities, against bertzoo's Encoder and
transformers' BertModel), the entity stream, dEA, the entity-corrupting collator, the frozen table in
checkpoints, the variant and the config checks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertzoo.batch import IGNORE_INDEX
from bertzoo.config import MaskingConfig, ModelConfig
from bertzoo.data.pretraining.collate_entities import EntityMaskingCollator
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.errors import ConfigError
from bertzoo.models.encoder import Encoder
from bertzoo.models.ernie_thu import ErnieThu, ErnieThuConfig, KnowledgeLayer
from bertzoo.objectives.knowledge import KnowledgeLM

BERT = dict(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=64, max_position=64)
THU = dict(BERT, variant="ernie-thu", knowledge_layers=2, entity_size=12, entity_heads=3, num_entities=20)
SPECIAL = (0, 1, 2, 3, 4)  # pad, unk, cls, sep, mask


def ernie(seed=0, **over) -> ErnieThu:
    torch.manual_seed(seed)
    return ErnieThu(ErnieThuConfig(**{**THU, **over})).eval()


def inputs(seed=0, batch=2, seq=11):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 97, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1, seq - 3 :] = 0
    types = torch.zeros_like(ids)
    types[:, seq // 2 :] = 1
    return ids, mask, types


def none_aligned(ids):
    return torch.full_like(ids, -1)


def test_no_entities_is_bertzoos_encoder_with_the_same_weights():
    torch.manual_seed(1)
    bert = Encoder(ModelConfig(**BERT)).eval()
    model = ernie(seed=2)
    result = model.load_state_dict(bert.state_dict(), strict=False)
    assert not result.unexpected_keys
    # Only the entity parts are missing: the token stream has BERT's names throughout.
    assert result.missing_keys and all("entity" in k for k in result.missing_keys)
    ids, mask, types = inputs()
    with torch.no_grad():
        ref = bert(ids, mask, types, output_hidden_states=True)
        for links in (None, none_aligned(ids)):
            out = model(ids, mask, types, entity_ids=links, output_hidden_states=True)
            torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=0)
            torch.testing.assert_close(out.pooler_output, ref.pooler_output, atol=1e-5, rtol=0)
            for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        # ... and entities do change it (so the comparison above can fail).
        links = none_aligned(ids)
        links[0, 3] = 7
        out = model(ids, mask, types, entity_ids=links)
        assert (out.last_hidden_state[0] - ref.last_hidden_state[0]).abs().max() > 1e-3


def test_no_entities_is_transformers_bert_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertzoo.hub import load_encoder

    torch.manual_seed(3)
    hf_cfg = transformers.BertConfig(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    hf = transformers.BertModel(hf_cfg).eval()
    hf.save_pretrained(tmp_path)
    model = ernie(seed=4)
    model.load_state_dict(load_encoder(tmp_path).state_dict(), strict=False)
    ids, mask, types = inputs(seed=5)
    sel = mask.bool()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        out = model(ids, mask, types, entity_ids=none_aligned(ids))
    torch.testing.assert_close(out.last_hidden_state[sel], ref.last_hidden_state[sel], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.pooler_output, ref.pooler_output, atol=1e-5, rtol=0)


def test_entities_act_only_in_the_knowledge_layers():
    model = ernie(seed=6)  # 3 layers: 1 T-layer, then 2 K-layers
    assert [type(m).__name__ for m in model.stack.layers] == ["TransformerLayer", "KnowledgeLayer", "KnowledgeLayer"]
    ids, mask, types = inputs(seed=7)
    links = none_aligned(ids)
    links[0, 4] = 9
    with torch.no_grad():
        plain = model(ids, mask, types, entity_ids=none_aligned(ids), output_hidden_states=True).hidden_states
        fused = model(ids, mask, types, entity_ids=links, output_hidden_states=True).hidden_states
    # Embeddings and the T-encoder: identical.
    assert torch.equal(plain[0], fused[0]) and torch.equal(plain[1], fused[1])
    # First K-layer: only the aligned position moves (the entity enters through its feed-forward) ...
    moved = (plain[2] - fused[2]).abs().amax(-1)  # (batch, seq)
    assert moved[0, 4] > 1e-3
    others = torch.ones_like(moved, dtype=torch.bool)
    others[0, 4] = False
    assert moved[others].max() == 0
    # ... and the next K-layer's attention carries it to the other tokens of that example, not to the other one.
    moved = (plain[3] - fused[3]).abs().amax(-1)
    assert (moved[0] > 1e-5).all() and moved[1].max() == 0


def test_entity_attention_reads_only_positions_that_hold_an_entity():
    model = ernie(seed=8)
    layer = model.stack.layers[2]
    assert isinstance(layer, KnowledgeLayer)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 6, 32, generator=g)
    aligned = torch.tensor([[0, 1, 0, 1, 0, 0], [0, 0, 0, 0, 1, 0]], dtype=torch.bool)
    entity = torch.randn(2, 6, 12, generator=g) * aligned[..., None]
    keys = aligned[:, None, None, :]
    with torch.no_grad():
        out, ent = layer.fuse(x, None, entity, aligned[..., None], keys)
        # Values at positions without an entity (what a hidden entity leaves) change nothing.
        junk = entity + torch.randn(2, 6, 12, generator=g) * (~aligned)[..., None] * 5
        out2, ent2 = layer.fuse(x, None, junk, aligned[..., None], keys)
    assert torch.equal(out.hidden, out2.hidden) and torch.equal(ent, ent2)
    assert ent[~aligned].abs().max() == 0 and ent[aligned].abs().min() > 0
    # Without the key mask the junk would be read: the check above can fail.
    with torch.no_grad():
        out3, ent3 = layer.fuse(x, None, junk, aligned[..., None], torch.ones_like(keys))
    assert (out3.hidden - out.hidden).abs().max() > 1e-6 and (ent3 - ent).abs().max() > 1e-2
    # Through the model: an entity id at a padding position (attention_mask 0) is not an entity.
    ids, mask, types = inputs(seed=10)
    links = none_aligned(ids)
    links[1, 2] = 3
    padded = links.clone()
    padded[1, -1] = 11  # mask[1, -3:] == 0
    with torch.no_grad():
        a = model(ids, mask, types, entity_ids=links)
        b = model(ids, mask, types, entity_ids=padded)
    assert torch.equal(a.last_hidden_state, b.last_hidden_state)


def knowledge_lm(seed=0, **over) -> KnowledgeLM:
    torch.manual_seed(seed)
    model = KnowledgeLM(ErnieThu(ErnieThuConfig(**{**THU, **over})), sentence_task=None)
    table = torch.randn(THU["num_entities"], THU["entity_size"])
    model.encoder.set_entity_table(table / table.norm(dim=-1, keepdim=True))  # unit vectors, as TransE's
    return model


def test_dea_is_a_softmax_over_the_batchs_entities_by_hand():
    model = knowledge_lm(seed=11).eval()
    g = torch.Generator().manual_seed(12)
    hidden = torch.randn(2, 5, 32, generator=g)
    labels = torch.full((2, 5), IGNORE_INDEX)
    labels[0, 1], labels[0, 3], labels[1, 2] = 7, 2, 7  # candidates: entities 2 and 7
    from bertzoo.objectives.knowledge import dea_loss

    table = model.encoder.entity_embeddings.weight
    with torch.no_grad():
        loss, metrics, counts = dea_loss(hidden, labels, model.dea_head, table)
    head = model.dea_head
    total, right = 0.0, 0
    for (b, t), true in (((0, 1), 7), ((0, 3), 2), ((1, 2), 7)):
        q = F.layer_norm(
            F.gelu(hidden[b, t] @ head.dense.weight.T + head.dense.bias), (12,), head.norm.weight, head.norm.bias, 1e-12
        )
        s = {e: float((q @ table[e]).detach()) for e in (2, 7)}
        total += -math.log(math.exp(s[true]) / (math.exp(s[2]) + math.exp(s[7])))
        right += max(s, key=s.get) == true
    assert loss.item() == pytest.approx(total / 3, abs=1e-5)
    assert metrics["dea_acc"].item() == pytest.approx(right / 3)
    assert int(counts["dea_loss"]) == 3


def entity_examples(n=120, seq=48, seed=13, entities=50):
    rs = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = seq - (i % 5)
        ids = rs.integers(5, 97, length)
        ids[0], ids[-1] = 2, 3
        links = np.full(length, -1, dtype=np.int64)
        links[1:-1] = rs.integers(0, entities, length - 2)  # every word aligned: many positions to count
        out.append({"input_ids": ids, "entity_ids": links, "index": i, "epoch": 0})
    return out


def collate(seed=0, **kw):
    return EntityMaskingCollator(SPECIAL, MaskingConfig(), seed, vocab_size=97, num_entities=50, **kw)


def test_collator_corrupts_entities_in_the_papers_shares_and_masks_tokens_as_bert():
    examples = entity_examples()
    batch = collate(seed=5)(examples)
    true = torch.full_like(batch.extra["entity_ids"], -1)
    for i, e in enumerate(examples):
        true[i, : len(e["entity_ids"])] = torch.from_numpy(e["entity_ids"])
    aligned = true >= 0
    got, labels = batch.extra["entity_ids"], batch.extra["entity_labels"]
    assert got.dtype == torch.int64 and labels.dtype == torch.int64
    assert torch.equal(labels, torch.where(aligned, true, IGNORE_INDEX))
    assert (got[~aligned] == -1).all()  # padding and unaligned positions stay without an entity
    n = int(aligned.sum())
    assert n > 5000
    replaced = aligned & (got >= 0) & (got != true)
    hidden = aligned & (got == -1)
    kept = aligned & (got == true)
    assert abs(int(replaced.sum()) / n - 0.05) < 0.01
    assert abs(int(hidden.sum()) / n - 0.15) < 0.015
    assert abs(int(kept.sum()) / n - 0.80) < 0.015
    assert int(got.max()) < 50
    # Token masking: exactly BERT's collator's for the same seed.
    bert = PretrainingCollator(SPECIAL, MaskingConfig(), 5, vocab_size=97)(examples)
    assert torch.equal(batch.input_ids, bert.input_ids) and torch.equal(batch.labels, bert.labels)
    # Reproducible by seed, independent of the batch's other examples, different under another seed.
    assert torch.equal(collate(seed=5)(examples).extra["entity_ids"], got)
    alone = collate(seed=5)(examples[7:8]).extra["entity_ids"][0]
    assert torch.equal(alone[: len(examples[7]["input_ids"])], got[7, : len(examples[7]["input_ids"])])
    assert not torch.equal(collate(seed=6)(examples).extra["entity_ids"], got)
    # The shares are settings.
    other = collate(seed=5, entity_replace=0.0, entity_mask=0.5)(examples).extra["entity_ids"]
    assert ((other >= 0) & (other != true) & aligned).sum() == 0
    assert abs(int((aligned & (other == -1)).sum()) / n - 0.5) < 0.03
    with pytest.raises(ConfigError, match="entity_replace"):
        collate(entity_replace=0.6, entity_mask=0.5)


def tiny_batch(seed=14):
    examples = entity_examples(n=4, seq=16, seed=seed, entities=20)
    for e in examples:
        e["entity_ids"][e["entity_ids"] % 3 != 0] = -1  # a third of the words aligned
    return EntityMaskingCollator(SPECIAL, MaskingConfig(), 0, vocab_size=97, num_entities=20, pad_to_multiple_of=1)(
        examples
    )


def test_frozen_table_gets_no_gradient_and_travels_with_the_weights(tmp_path):
    from bertzoo.loading import load, load_encoder

    model = knowledge_lm(seed=15)
    table = model.encoder.entity_embeddings.weight
    assert not table.requires_grad
    before = table.detach().clone()
    batch = tiny_batch()
    out = model(batch)
    assert set(out.terms) == {"mlm", "dea"} and out.counts["dea_loss"] > 0
    out.loss.backward()
    assert table.grad is None
    assert model.dea_head.dense.weight.grad.abs().sum() > 0
    assert model.encoder.stack.layers[2].entity_up.weight.grad.abs().sum() > 0
    assert model.loss_counts(batch)["dea"] == int(out.counts["dea_loss"])
    model.eval()
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    assert saved["objective"] == "mlm+dea" and saved["num_entities"] == 20 and saved["variant"] == "ernie-thu"
    kind, loaded = load(tmp_path / "m")
    assert kind == "pretraining" and isinstance(loaded, KnowledgeLM)
    assert torch.equal(loaded.encoder.entity_embeddings.weight, before)
    assert not loaded.encoder.entity_embeddings.weight.requires_grad
    loaded.eval()
    with torch.no_grad():
        a, b = model(batch), loaded(batch)
    assert torch.equal(a.loss, b.loss)
    assert torch.equal(KnowledgeLM.from_pretrained(tmp_path / "m").encoder.entity_embeddings.weight, before)
    encoder = load_encoder(tmp_path / "m")
    assert isinstance(encoder, ErnieThu) and torch.equal(encoder.entity_embeddings.weight, before)


def test_a_few_steps_lower_the_dea_loss():
    model = knowledge_lm(seed=16, dropout=0.0, attention_dropout=0.0)
    batch = tiny_batch(seed=17)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(25):
        out = model(batch)
        losses.append(float(out.metrics["dea_loss"]))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert losses[-1] < 0.5 * losses[0]


def test_finetuning_call_passes_entities_and_keeps_the_encoders_savings():
    model = ernie(seed=18)
    ids, mask, types = inputs(seed=19)
    links = none_aligned(ids)
    links[0, 2] = 4
    with torch.no_grad():
        full = model(ids, mask, types, entity_ids=links)
        top = model(ids, mask, types, entity_ids=links, top_queries=1, pool=True)
        unpooled = model(ids, mask, types, entity_ids=links, pool=False)
    assert top.last_hidden_state.shape == (2, 1, 32)
    assert torch.equal(top.last_hidden_state[:, 0], full.last_hidden_state[:, 0])
    assert unpooled.pooler_output is None and full.entity_hidden_state.shape == (2, 11, 12)


def test_config_errors_are_one_line():
    cases = [
        ({"knowledge_layers": 4}, "knowledge_layers=4"),
        ({"entity_heads": 5}, "entity_heads=5"),
        ({"entity_heads": 0}, "entity_heads"),
        ({"norm": "pre"}, "post-norm"),
    ]
    for over, text in cases:
        with pytest.raises(ConfigError, match=text) as info:
            ErnieThuConfig(**{**THU, **over})
        assert "\n" not in str(info.value)
    assert not hasattr(ModelConfig(**BERT), "knowledge_layers")  # other models are unchanged


def kg_dir(tmp_path, count=20, width=12):
    from safetensors.torch import save_file

    d = tmp_path / "kg"
    d.mkdir()
    table = torch.randn(count, width, generator=torch.Generator().manual_seed(20))
    save_file({"entity_embeddings": table}, str(d / "entity_embeddings.safetensors"))
    (d / "entities.json").write_text(json.dumps({"entities": [f"e{i}" for i in range(count)], "dim": width}))
    return d, table


def test_variant_builds_from_a_kg_embed_directory(tmp_path):
    from bertzoo.config import PretrainConfig
    from bertzoo.variants import get_variant

    v = get_variant("ernie-thu")
    d, table = kg_dir(tmp_path)
    spec = {"preset": "ernie-thu-tiny", "vocab_size": 97, "entity_size": 12, "entity_heads": 3}
    config = v.model_config(spec)
    assert config.variant == "ernie-thu" and config.knowledge_layers == 1 and config.num_entities == 0
    model = v.build(config, "mlm+nsp+dea", entities=str(d))
    assert model.config.num_entities == 20 and model.nsp_head is not None
    assert torch.equal(model.encoder.entity_embeddings.weight, table)
    assert model.objective_name == "mlm+nsp+dea"
    with pytest.raises(ConfigError, match="entity_size"):
        v.build(v.model_config({**spec, "entity_size": 8, "entity_heads": 4}), entities=str(d))
    bare = v.build(config)  # no KG: no table (a module to load weights into)
    assert bare.encoder.entity_embeddings is None and bare.config.num_entities == 0
    with pytest.raises(ConfigError, match="objective_args.entities"):
        v.collator(PretrainConfig(variant="ernie-thu"), tokenizer(tmp_path))
    with pytest.raises(ConfigError, match="mlm\\+dea"):
        v.build(config, "mlm+sop", entities=str(d))
    cfg = PretrainConfig(variant="ernie-thu", objective_args={"entities": str(d), "entity_mask": 0.3})
    collator = v.collator(cfg, tokenizer(tmp_path))
    assert collator.num_entities == 20 and collator.entity_mask == 0.3
    mini = v.model_config({"preset": "ernie-thu-mini"})
    assert (mini.num_layers, mini.knowledge_layers, mini.hidden_size, mini.entity_size) == (4, 2, 256, 100)
    base = v.model_config({"preset": "ernie-thu-base"})
    assert (base.num_layers, base.knowledge_layers, base.hidden_size, base.entity_heads) == (12, 6, 768, 4)
    assert v.model_config({"preset": "ernie-thu-base", "num_layers": 4}).knowledge_layers == 2  # the top half
    assert v.model_config({"preset": "ernie-thu-base", "knowledge_layers": 1}).knowledge_layers == 1


def tokenizer(tmp_path):
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer

    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in [*SPECIAL_TOKENS, "army", "dog"]), encoding="utf-8")
    return Tokenizer.from_vocab(tmp_path / "vocab.txt")


def test_hf_export_is_the_token_stream_as_bert(tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertzoo.hub import export_hf

    model = knowledge_lm(seed=21).eval()
    with pytest.warns(UserWarning, match="no ERNIE-THU"):
        export_hf(model, tmp_path / "hf")
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = inputs(seed=22)
    sel = mask.bool()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        hidden = model.encoder(ids, mask, types).last_hidden_state
        ours = model.mlm_head(hidden, sel)
    torch.testing.assert_close(ours, ref[sel], atol=1e-4, rtol=0)


def test_pretraining_assembles_from_shards_and_a_kg(tmp_path):
    """build_pretraining with the variant's hooks: linked examples, entity-corrupted batches, a finite loss."""
    from bertzoo.config import load_pretrain_config
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.train.pretrain import build_pretraining

    tok = tokenizer(tmp_path)
    docs = ["The army has many dogs. The dog of the army.", "Dogs and an army. The army dog."] * 4
    prepare_shards(docs, tok, tmp_path / "shards", progress=False)
    d, _ = kg_dir(tmp_path, count=2, width=12)
    meta = json.loads((d / "entities.json").read_text())
    (d / "entities.json").write_text(json.dumps({**meta, "names": ["army", "dog"]}))
    cfg = load_pretrain_config("configs/pretrain/ernie-thu-mini.yaml")
    cfg.data.shards = str(tmp_path / "shards")
    cfg.data.max_seq_len = 16
    cfg.objective_args["entities"] = str(d)
    cfg.model = {"preset": "ernie-thu-tiny", "entity_size": 12, "entity_heads": 3}
    objective, dataset, collator, _ = build_pretraining(cfg)
    assert isinstance(objective, KnowledgeLM) and objective.config.num_entities == 2
    batch = collator([dataset[i] for i in range(len(dataset))])
    assert (batch.extra["entity_labels"] != IGNORE_INDEX).sum() > 0
    out = objective(batch)
    assert torch.isfinite(out.loss) and "dea_loss" in out.metrics


def test_without_dea_the_entities_are_fused_whole_and_never_predicted(tmp_path):
    """The paper's "w/o dEA" ablation (objective mlm / mlm+nsp): no dEA head or term, no entity corruption."""
    from bertzoo.config import PretrainConfig
    from bertzoo.loading import load
    from bertzoo.variants import get_variant

    v = get_variant("ernie-thu")
    d, _ = kg_dir(tmp_path)
    spec = {"preset": "ernie-thu-tiny", "vocab_size": 97, "entity_size": 12, "entity_heads": 3}
    model = v.build(v.model_config(spec), "mlm", entities=str(d))
    assert model.dea_head is None and model.objective_name == "mlm"
    assert not any(name.startswith("dea_head.") for name in model.state_dict())
    batch = tiny_batch()
    out = model(batch)
    assert set(out.terms) == {"mlm"} and "dea_loss" not in out.metrics and "dea" not in model.loss_counts(batch)
    # The entity input still moves the token stream (the entities are fused).
    with torch.no_grad():
        model.eval()
        plain = model.encoder(batch.input_ids, batch.attention_mask).last_hidden_state
        fused = model.encode(batch).last_hidden_state
    assert not torch.allclose(plain, fused)
    model.save_pretrained(tmp_path / "m")
    kind, loaded = load(tmp_path / "m")
    assert kind == "pretraining" and loaded.dea_head is None and loaded.objective_name == "mlm"
    nsp = v.build(v.model_config(spec), "mlm+nsp", entities=str(d))
    assert nsp.nsp_head is not None and nsp.dea_head is None and nsp.objective_name == "mlm+nsp"
    # No corruption: every aligned entity reaches the model as it is.
    cfg = PretrainConfig(variant="ernie-thu", objective="mlm", objective_args={"entities": str(d)})
    collator = v.collator(cfg, tokenizer(tmp_path))
    assert collator.entity_replace == 0.0 and collator.entity_mask == 0.0
    cfg.objective_args.update(entity_replace=0.0, entity_mask=0.0)  # explicit zeros: what the objective does
    assert v.collator(cfg, tokenizer(tmp_path)).entity_mask == 0.0
    cfg.objective_args["entity_mask"] = 0.2
    with pytest.raises(ConfigError, match="corrupt entities for dEA") as info:
        v.collator(cfg, tokenizer(tmp_path))
    assert "\n" not in str(info.value)


def test_a_pretraining_run_keeps_the_entity_list_in_every_model_directory(tmp_path):
    """`bertzoo pretrain` of ERNIE-THU: checkpoints and final/ hold entities.json, and final/ links on its own."""
    from bertzoo.config import load_pretrain_config
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.loading import load_encoder
    from bertzoo.train.pretrain import pretrain

    tok = tokenizer(tmp_path)
    prepare_shards(["The army has many dogs. The dog of the army."] * 6, tok, tmp_path / "shards", progress=False)
    d, _ = kg_dir(tmp_path, count=2, width=12)
    meta = {**json.loads((d / "entities.json").read_text()), "names": ["army", "dog"]}
    (d / "entities.json").write_text(json.dumps(meta))
    cfg = load_pretrain_config("configs/pretrain/ernie-thu-mini.yaml")
    cfg.data.shards, cfg.data.max_seq_len = str(tmp_path / "shards"), 16
    cfg.objective_args["entities"] = str(d)
    cfg.model = {"preset": "ernie-thu-tiny", "entity_size": 12, "entity_heads": 3}
    t = cfg.train
    t.output_dir, t.max_steps, t.save_every, t.batch_size, t.log_every = str(tmp_path / "run"), 2, 1, 2, 1
    t.precision = "fp32"
    summary = pretrain(cfg)
    final = tmp_path / "run" / "final"
    assert summary["final_dir"] == str(final)
    assert json.loads((final / "entities.json").read_text()) == meta
    checkpoints = sorted((tmp_path / "run" / "checkpoints").glob("step-*"))
    assert checkpoints and all(json.loads((c / "entities.json").read_text()) == meta for c in checkpoints)
    assert load_encoder(final).entity_list == meta
