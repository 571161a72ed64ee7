"""Which skipped tests a test run accepts. Any other skip fails the run (tests/conftest.py): a runner where a test's
need cannot be met (no Chromium, no WordNet, no Transformer-XL environment) must not go green by skipping it.

Each entry is a substring of a skip's reason and why no CI runner can meet that need by design. A developer who
runs a subset on a machine without the set-up can set BERTZOO_ALLOW_SKIPS=1; CI never does.
"""

import os

import pytest

ALLOWED = {
    "gloo multi-process test runs on Linux": "the multi-process tests need Linux (fork, gloo); CI runs Linux",
}


def unexpected(reasons: list[tuple[str, str]]) -> list[str]:
    """'test id: reason' for every (test id, skip reason) no allow-list entry covers."""
    return [f"{test}: {reason}" for test, reason in reasons if not any(key in reason for key in ALLOWED)]


# --- the hooks (tests/conftest.py imports them) -----------------------------------------------------------

_SKIPPED: list[tuple[str, str]] = []


def pytest_runtest_logreport(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_collectreport(report) -> None:
    if report.skipped:  # a whole module skipped at import (pytest.importorskip at the top)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append((report.nodeid, reason.removeprefix("Skipped: ")))


def _unexpected_skips() -> list[str]:
    return [] if os.environ.get("BERTZOO_ALLOW_SKIPS") == "1" else unexpected(_SKIPPED)


def pytest_terminal_summary(terminalreporter) -> None:
    found = _unexpected_skips()
    if found:
        terminalreporter.section("skips that fail the run (tests/skips.py lists the allowed ones)")
        for line in found:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus) -> None:
    # NO_TESTS_COLLECTED too: a run whose every module skipped at import has not passed either.
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) and _unexpected_skips():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
