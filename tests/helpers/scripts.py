"""Load a script or benchmark file (not a package module) as a module, so tests call its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, imports_from: Path | None = None) -> ModuleType:
    """The module that running `path` defines, without running its `main` (it is guarded by __name__);
    `imports_from`: a folder the file imports from (a script that reads a benchmark), on sys.path while it loads."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    if imports_from is not None:
        sys.path.insert(0, str(imports_from))
    try:
        spec.loader.exec_module(module)
    finally:
        if imports_from is not None:
            sys.path.remove(str(imports_from))
    return module
