"""What the model-card and push tests share: a tiny fine-tuning run that starts from a Hub model (a local stand-in
for the hub serves it), and a stand-in for `huggingface_hub.HfApi` that uploads into a local folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bertzoo.config import ModelConfig
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.hub import export_hf
from bertzoo.models.encoder import Encoder
from bertzoo.train.finetune import finetune

from helpers.finetune import tiny_finetune_config, write_task_files

HUB_START = "someone/tiny-bert"  # the Hub id the fine-tuning run starts from (served from a local directory)


def serve_from_hub(monkeypatch: pytest.MonkeyPatch, served: dict[str, Path]) -> None:
    """`huggingface_hub.snapshot_download(repo_id)` answers from `served` (repo id -> local directory): no network."""
    import huggingface_hub

    def snapshot_download(repo_id: str, **kwargs: Any) -> str:
        return str(served[repo_id])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)


def finetuned_from_hub(root: Path) -> tuple[Path, dict[str, Any]]:
    """A one-epoch classification run from `hf:someone/tiny-bert` (a random 2-layer BERT exported to Hugging Face
    format); returns (its output directory, its summary)."""
    import torch

    paths = write_task_files(root / "data")
    vocab = Tokenizer.load(paths["tokenizer"]).vocab_size
    config = ModelConfig(
        vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position=64
    )
    torch.manual_seed(0)
    export_hf(Encoder(config), root / "hub-start")
    cfg = tiny_finetune_config(paths, root / "run", epochs=1)
    cfg.model, cfg.model_config = f"hf:{HUB_START}", {}
    with pytest.MonkeyPatch.context() as mp:
        serve_from_hub(mp, {HUB_START: root / "hub-start"})
        summary = finetune(cfg)
    return root / "run", summary


class FakeHub:
    """Stand-ins for the `HfApi` methods `bertzoo push` calls: each call is recorded and `upload_folder` copies
    what it would send (its ignore patterns applied by huggingface_hub's own filter) into `remote/REPO/BRANCH`."""

    def __init__(self, remote: Path) -> None:
        self.remote = remote
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import huggingface_hub

        hub = self

        def create_repo(self, repo_id: str, **kwargs: Any) -> str:
            hub.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
            return f"https://huggingface.co/{repo_id}"

        def create_branch(self, repo_id: str, **kwargs: Any) -> None:
            hub.calls.append(("create_branch", {"repo_id": repo_id, **kwargs}))

        def upload_folder(self, **kwargs: Any) -> str:
            from huggingface_hub.utils import filter_repo_objects

            hub.calls.append(("upload_folder", kwargs))
            folder = Path(kwargs["folder_path"])
            files = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
            kept = filter_repo_objects(files, ignore_patterns=kwargs.get("ignore_patterns"))
            target = hub.remote / kwargs["repo_id"] / (kwargs.get("revision") or "main")
            for name in kept:
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, target / name)
            return f"https://huggingface.co/{kwargs['repo_id']}/commit/0"

        for name, method in (("create_repo", create_repo), ("create_branch", create_branch)):
            monkeypatch.setattr(huggingface_hub.HfApi, name, method)
        monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]
