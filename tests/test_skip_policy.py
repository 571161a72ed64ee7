"""A skipped test fails the run unless tests/skips.py allows its reason: checked on made-up test files run by a
child pytest with the same hooks (tests/skips.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from skips import ALLOWED, unexpected

TESTS = Path(__file__).resolve().parent


def run(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(
        "from skips import pytest_collectreport, pytest_runtest_logreport, pytest_sessionfinish, "
        "pytest_terminal_summary  # noqa: F401\n"
    )
    (tmp_path / "test_made_up.py").write_text("import pytest\n\n\n" + body)
    environ = {**os.environ, "PYTHONPATH": str(TESTS), **env}
    environ.pop("BERTZOO_ALLOW_SKIPS", None) if "BERTZOO_ALLOW_SKIPS" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=120,
    )


def test_an_unexpected_skip_fails_the_run_and_is_named(tmp_path) -> None:
    done = run(tmp_path, 'def test_a():\n    pytest.skip("needs chromium")\n\n\ndef test_b():\n    pass\n')
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout
    assert "test_made_up.py::test_a: needs chromium" in done.stdout and "1 passed, 1 skipped" in done.stdout


def test_a_module_skipped_at_import_fails_too(tmp_path) -> None:
    done = run(tmp_path, 'pytest.importorskip("no_such_package_anywhere")\n\n\ndef test_a():\n    pass\n')
    assert done.returncode == pytest.ExitCode.TESTS_FAILED and "no_such_package_anywhere" in done.stdout


def test_an_allowed_reason_and_the_developer_switch_pass(tmp_path) -> None:
    reason = next(iter(ALLOWED))
    assert run(tmp_path, f'def test_a():\n    pytest.skip("{reason}")\n').returncode == 0
    loose = run(tmp_path, 'def test_a():\n    pytest.skip("needs chromium")\n', BERTZOO_ALLOW_SKIPS="1")
    assert loose.returncode == 0


def test_unexpected_keeps_only_reasons_no_entry_covers() -> None:
    reason = next(iter(ALLOWED))
    assert unexpected([("t::a", f"{reason} (darwin)"), ("t::b", "needs wordnet")]) == ["t::b: needs wordnet"]
