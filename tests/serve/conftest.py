"""The model the serving tests serve: a tiny classifier fine-tuned once per run (the tests only read it)."""

from __future__ import annotations

import pytest

from helpers.finetune import tiny_finetune_config, write_task_files


@pytest.fixture(scope="session")
def classifier(tmp_path_factory):
    from bertzoo.train.finetune import finetune

    root = tmp_path_factory.mktemp("served")
    paths = write_task_files(root / "data")
    finetune(tiny_finetune_config(paths, root / "run", epochs=2))
    return root / "run" / "model"
