"""Hugging Face config.json files a bertzoo loader must accept, one per supported model_type."""

from __future__ import annotations

# A small valid config of every Hugging Face model_type bertzoo imports.
_BASE_HF = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
    "pad_token_id": 0,
    "architectures": ["BertModel"],
}


VALID_HF_CONFIGS = {
    "bert": {**_BASE_HF, "model_type": "bert"},
    "roberta": {**_BASE_HF, "model_type": "roberta", "pad_token_id": 1, "max_position_embeddings": 66},
    "albert": {**_BASE_HF, "model_type": "albert", "embedding_size": 16, "num_hidden_groups": 1, "inner_group_num": 1},
    "electra": {**_BASE_HF, "model_type": "electra", "embedding_size": 16},
    "ernie": {**_BASE_HF, "model_type": "ernie", "use_task_id": True, "task_type_vocab_size": 3},
    # DistilBertConfig names every size differently.
    "distilbert": {
        "model_type": "distilbert",
        "vocab_size": 99,
        "dim": 32,
        "n_layers": 2,
        "n_heads": 4,
        "hidden_dim": 37,
        "max_position_embeddings": 64,
        "activation": "gelu",
        "dropout": 0.1,
        "attention_dropout": 0.1,
        "sinusoidal_pos_embds": False,
        "pad_token_id": 0,
        "architectures": ["DistilBertModel"],
    },
}
