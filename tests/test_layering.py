"""Dependency direction (DESIGN.md): ``objectives`` imports only torch/numpy/stdlib and
``deciplane.errors``; ``envs`` imports nothing from agents/trainers/adapt.

Checked statically by parsing every file (imports inside functions count too), so a lazy
import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "deciplane"
UPWARD = ("deciplane.agents", "deciplane.trainers", "deciplane.adapt", "deciplane.cli")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """Absolute module names imported anywhere in a file (relative imports resolved)."""
    if source is None:
        source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    pkg = _module_name(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:                 # from . import x
                    found += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
                    continue
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
    return found


def _files(sub: str) -> list[Path]:
    return sorted((PKG / sub).rglob("*.py"))


def _top(name: str) -> str:
    return name.split(".")[0]


def test_objectives_import_only_torch_numpy_stdlib_and_errors():
    files = _files("objectives")
    assert files, "deciplane/objectives has no Python files"
    allowed_top = set(sys.stdlib_module_names) | {"torch", "numpy"}
    bad = []
    for f in files:
        for line, mod in imports_of(f):
            if mod.startswith("deciplane"):
                ok = mod == "deciplane.errors" or mod.startswith("deciplane.objectives")
            else:
                ok = _top(mod) in allowed_top
            if not ok:
                bad.append(f"{f.relative_to(PKG.parent)}:{line} imports {mod}")
    assert not bad, "objectives/ must import only torch, numpy, stdlib and deciplane.errors:\n" \
        + "\n".join(bad)


@pytest.mark.parametrize("sub", ["objectives", "envs"])
def test_no_upward_imports(sub):
    bad = [f"{f.relative_to(PKG.parent)}:{line} imports {mod}"
           for f in _files(sub) for line, mod in imports_of(f)
           if any(mod == u or mod.startswith(u + ".") for u in UPWARD)]
    assert not bad, f"{sub}/ must not import agents/trainers/adapt/cli:\n" + "\n".join(bad)


def test_import_resolver_sees_relative_and_lazy_imports():
    # the checker itself: a relative, lazy upward import inside a function is found
    src = "def f():\n    from ..agents import load_policy\n    from . import sandbox\n"
    found = imports_of(PKG / "envs" / "probe.py", source=src)
    assert found == [(2, "deciplane.agents"), (3, "deciplane.envs.sandbox")]
