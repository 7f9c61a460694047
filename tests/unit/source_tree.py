"""The library's source files and the module names they install as, for the tests that read the tree
itself (the import graph, the doctests).

The four code folders install as ``shardplan.<folder>`` through ``package-dir`` in pyproject.toml
(tests/unit/test_packaging.py holds that), and every subfolder is a subpackage, so a file's module
name follows from its path: ``solver/cost/evaluate.py`` is ``shardplan.solver.cost.evaluate``.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# In dependency order: each layer may import only the layers before it (DESIGN.md "Layout").
CODE_FOLDERS = ("models", "hardware", "rules", "solver")


def module_name(path: Path) -> str:
    """``shardplan.X.Y`` for a file under one of CODE_FOLDERS (a package's ``__init__.py`` names the package)."""
    parts = list(path.resolve().relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["shardplan", *parts])


def source_modules() -> dict[str, Path]:
    """Every module of the library, by name, with its file."""
    files = sorted(path for folder in CODE_FOLDERS for path in (REPO / folder).rglob("*.py"))
    return {module_name(path): path for path in files}
