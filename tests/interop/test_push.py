"""`bertzoo push` / `bertzoo.hub.push`: a model directory goes to the Hub through huggingface_hub's `HfApi`, with a
model card, and every refusal is one line with exit code 2. The hub is a local stand-in (`helpers.cards.FakeHub`):
no test reaches the network."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import ModelCard

from bertzoo.cli import main
from bertzoo.hub import PUSH_IGNORE, push

from helpers.cards import HUB_START, FakeHub, finetuned_from_hub

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory) -> Path:
    return finetuned_from_hub(tmp_path_factory.mktemp("push"))[0]


@pytest.fixture()
def model_dir(finetuned_run, tmp_path) -> Path:
    """A copy of the run's model/ (pushing rewrites its card's usage part), inside a copy of the run directory."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("run_config.json", "report.json"):
        shutil.copyfile(finetuned_run / name, run / name)
    return Path(shutil.copytree(finetuned_run / "model", run / "model"))


@pytest.fixture()
def hub(tmp_path, monkeypatch) -> FakeHub:
    fake = FakeHub(tmp_path / "remote")
    fake.install(monkeypatch)
    monkeypatch.setenv("HF_TOKEN", "hf_stand_in")  # a token is present; the stand-in never sends it anywhere
    return fake


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_push_uploads_the_model_with_its_card(model_dir, hub, capsys) -> None:
    (model_dir / ".tmp-model-123").write_text("left by a crash")  # never published
    (model_dir / "optimizer.pt").write_bytes(b"training state")
    args = ["push", str(model_dir), "hf:org/tiny-topics", "--private", "--revision", "dev", "--message", "first"]
    assert main(args) == 0
    assert (
        capsys.readouterr().out.strip() == f"pushed {model_dir} -> https://huggingface.co/org/tiny-topics (branch dev)"
    )
    assert hub.names() == ["create_repo", "create_branch", "upload_folder"]
    created, branch, upload = (kwargs for _, kwargs in hub.calls)
    assert created["repo_id"] == "org/tiny-topics" and created["private"] is True and created["exist_ok"] is True
    assert branch["branch"] == "dev" and branch["exist_ok"] is True
    assert upload["revision"] == "dev" and upload["commit_message"] == "first"
    assert upload["ignore_patterns"] == PUSH_IGNORE and upload["folder_path"] == str(model_dir)
    remote = hub.remote / "org" / "tiny-topics" / "dev"
    assert sorted(p.name for p in remote.iterdir()) == [
        "README.md",
        "config.json",
        "finetune_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    card = ModelCard.load(remote / "README.md")
    assert card.data.library_name == "bertzoo" and card.data.base_model == HUB_START
    assert "accuracy" in card.data.metrics and card.data.pipeline_tag == "text-classification"
    assert 'load_finetuned("hf:org/tiny-topics")' in card.text  # the usage now loads from the repository


def test_push_writes_a_card_when_the_directory_has_none(model_dir, hub) -> None:
    (model_dir / "README.md").unlink()
    url = push(model_dir, "org/tiny-topics")  # the Python API takes ORG/NAME with or without hf:
    assert url == "https://huggingface.co/org/tiny-topics"
    assert hub.calls[0][1]["private"] is None  # not asked: the account's default visibility
    card = ModelCard.load(hub.remote / "org" / "tiny-topics" / "main" / "README.md")
    assert card.text.lstrip().splitlines()[2] == "# tiny-topics"  # named after the repository
    assert card.data.base_model == HUB_START and "| `accuracy` |" in card.text  # read from the run's files


@pytest.mark.parametrize(
    ("where", "dest", "expected"),
    [
        ("missing", "hf:org/x", "does not exist"),
        ("run", "hf:org/x", "has no config.json, so it is not a model directory; push {run}/model instead"),
        ("model", "org/x", "destination 'org/x' is not a Hub repository; write hf:ORG/NAME"),
        ("model", "hf:org", "'hf:org' is not a Hugging Face Hub destination; write hf:ORG/NAME"),
        ("model", "hf:org/a/b", "is not a Hugging Face Hub destination"),
    ],
)
def test_push_refuses_bad_input_in_one_line(model_dir, hub, capsys, where, dest, expected) -> None:
    run = model_dir.parent
    path = {"missing": run / "nothing", "run": run, "model": model_dir}[where]
    assert main(["push", str(path), dest]) == 2
    assert expected.format(run=run) in one_error_line(capsys)
    assert hub.calls == []


def test_push_without_huggingface_hub_says_what_to_install(model_dir, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import huggingface_hub` raises ImportError
    assert main(["push", str(model_dir), "hf:org/x"]) == 2
    assert "pip install huggingface_hub" in one_error_line(capsys)


def test_push_without_a_token_names_the_login(model_dir, hub, monkeypatch, capsys) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert main(["push", str(model_dir), "hf:org/x"]) == 2
    line = one_error_line(capsys)
    assert "no Hugging Face token" in line and "hf auth login" in line and "HF_TOKEN" in line
    assert hub.calls == []


@pytest.mark.parametrize("status", [401, 403])
def test_a_token_the_hub_refuses_is_one_line_naming_the_fix(model_dir, hub, monkeypatch, capsys, status) -> None:
    import huggingface_hub

    def refuse(self, repo_id, **kwargs):
        error = OSError(f"{status} Client Error: Unauthorized for url https://huggingface.co/api/repos/create")
        error.response = SimpleNamespace(status_code=status)  # what the hub's HTTP errors carry
        raise error

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", refuse)
    assert main(["push", str(model_dir), "hf:org/x"]) == 2
    line = one_error_line(capsys)
    assert f"refused to write org/x (OSError, HTTP {status})" in line and "HF_TOKEN" in line and "login" in line


def test_a_network_failure_is_one_line(model_dir, hub, monkeypatch, capsys) -> None:
    import huggingface_hub

    def offline(self, **kwargs):
        raise ConnectionError("Name or service not known\nmore detail")

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", offline)
    assert main(["push", str(model_dir), "hf:org/x"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: could not push to org/x (ConnectionError: Name or service not known); ")
    assert line.endswith("check the network and try again")
