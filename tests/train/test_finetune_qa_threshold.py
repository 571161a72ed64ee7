"""The QA no-answer threshold saved with a fine-tuned model is tuned on dev, never on test."""

from __future__ import annotations

import json
from pathlib import Path

from bertzoo.config import load_finetune_config
from bertzoo.train.finetune import finetune

FIXTURES = Path(__file__).resolve().parents[1] / "tasks" / "fixtures"


def test_saved_threshold_comes_from_dev(tmp_path, minilm_vocab):
    import torch

    torch.set_num_threads(1)
    data = json.loads((FIXTURES / "squad_v2_small.json").read_text())
    # A test split with only answerable questions: its own best threshold differs from dev's.
    answerable = json.loads(json.dumps(data))
    for article in answerable["data"]:
        for para in article["paragraphs"]:
            para["qas"] = [q for q in para["qas"] if not q.get("is_impossible")]
    (tmp_path / "test.json").write_text(json.dumps(answerable))
    tok_dir = tmp_path / "tok"
    from bertzoo.data.tokens.tokenizer import Tokenizer

    Tokenizer.from_vocab(minilm_vocab).save(tok_dir)
    cfg = load_finetune_config(
        None,
        {
            "task": "qa",
            "model_config": {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64},
            "tokenizer": str(tok_dir),
            "data.train": str(FIXTURES / "squad_v2_small.json"),
            "data.dev": str(FIXTURES / "squad_v2_small.json"),
            "data.test": str(tmp_path / "test.json"),
            "data.max_seq_len": 64,
            "data.max_query_len": 16,
            "data.doc_stride": 20,
            "train.output_dir": str(tmp_path / "run"),
            "train.max_steps": 3,
            "train.batch_size": 8,
            "train.save_every": 1000,
            "train.threads": 1,
        },
    )
    summary = finetune(cfg)
    dev_threshold = summary["dev"]["null_threshold"]
    test_threshold = summary["test"]["null_threshold"]
    assert dev_threshold != test_threshold  # otherwise the test proves nothing
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["task"]["null_threshold"] == dev_threshold
