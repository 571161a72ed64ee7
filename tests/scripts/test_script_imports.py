"""Every script and benchmark names only bertzoo modules and names that exist: a module moved or renamed inside
the package breaks no file outside it unnoticed (the scripts themselves run for minutes, so they are read, not
run)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FILES = sorted([*REPO.glob("scripts/**/*.py"), *REPO.glob("benchmarks/*.py")])


def bertzoo_imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for every `from bertzoo... import name` and (module, None) for every `import bertzoo...`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("bertzoo"):
            found.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names if alias.name.startswith("bertzoo"))
    return found


def test_the_walk_finds_the_scripts() -> None:
    assert len(FILES) >= 25 and any(bertzoo_imports(f) for f in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_bertzoo_import_resolves(path: Path) -> None:
    missing = []
    for module, name in bertzoo_imports(path):
        found = importlib.import_module(module)
        if name is not None and not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports what bertzoo does not have: {missing}"
