"""Dependency direction (DESIGN.md): ``objectives`` imports only torch/numpy/stdlib and
``deciplane.errors`` (and the deprecation table ``deciplane._moved``); ``envs`` imports nothing from agents/trainers/adapt.

Checked statically by parsing every file (imports inside functions count too, and so do
the modules a package's ``_LAZY`` table names), so a lazy import cannot hide an upward
dependency.
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
        if _is_lazy_table(node):                        # name -> module, imported on use
            found += [(v.lineno, v.value) for v in node.value.values]
        elif isinstance(node, ast.Import):
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


def _is_lazy_table(node: ast.AST) -> bool:
    """``_LAZY = {"name": "module", ...}``: a package's names imported on first use (its
    ``__getattr__``); each module it names is an import of the package."""
    return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
            and [getattr(t, "id", None) for t in node.targets] == ["_LAZY"])


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
                ok = mod in ("deciplane.errors", "deciplane._moved", "deciplane.options") \
                    or mod.startswith("deciplane.objectives")
            else:
                ok = _top(mod) in allowed_top
            if not ok:
                bad.append(f"{f.relative_to(PKG.parent)}:{line} imports {mod}")
    assert not bad, "objectives/ must import only torch, numpy, stdlib, deciplane.errors, deciplane._moved and deciplane.options:\n" \
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


def test_import_resolver_sees_a_lazy_names_table():
    # a package's names loaded on first use (utils.lazy_exports) are imports of the package
    src = '_LAZY = {\n    "load_policy": "deciplane.agents.loading",\n}\n'
    assert imports_of(PKG / "envs" / "__init__.py", source=src) == [
        (2, "deciplane.agents.loading")]
    graph = import_graph()
    assert "deciplane.engine.grpo" in graph["deciplane.engine"]
    assert "deciplane.envs.textworld.env" in graph["deciplane.envs"]


# ---------------------------------------------------------------------------------------
# the whole package: no import circle, and every layer imports only the layers below it
# ---------------------------------------------------------------------------------------

ALL_MODULES = {_module_name(f): f for f in sorted(PKG.rglob("*.py"))}

LAYERS: dict[str, tuple[str, ...]] = {
    # layer -> the deciplane sub-packages/modules it must NOT import (DESIGN's direction:
    # sandbox | objectives < envs < vector | agents < engine < trainers | adapt < methods
    # < evaluation < cli; benchmarks next to envs, see test_benchmarks_and_envs_share_two_modules;
    # trainers and adapt may import the registry, deciplane.methods itself, and never a
    # method's module: test_trainers_and_adapt_import_the_registry_never_a_method)
    "deciplane.sandbox": ("deciplane.envs", "deciplane.benchmarks", "deciplane.vector",
                          "deciplane.agents", "deciplane.engine", "deciplane.methods",
                          "deciplane.trainers", "deciplane.adapt", "deciplane.evaluation",
                          "deciplane.cli", "deciplane.objectives"),
    "deciplane.objectives": ("deciplane.envs", "deciplane.agents", "deciplane.engine",
                             "deciplane.methods", "deciplane.trainers", "deciplane.adapt",
                             "deciplane.evaluation", "deciplane.cli", "deciplane.config",
                             "deciplane.sandbox", "deciplane.benchmarks", "deciplane.vector"),
    "deciplane.envs": ("deciplane.vector", "deciplane.agents", "deciplane.engine",
                       "deciplane.methods", "deciplane.trainers", "deciplane.adapt",
                       "deciplane.evaluation", "deciplane.cli"),
    "deciplane.benchmarks": ("deciplane.vector", "deciplane.agents", "deciplane.engine",
                             "deciplane.methods", "deciplane.trainers", "deciplane.adapt",
                             "deciplane.evaluation", "deciplane.cli"),
    "deciplane.vector": ("deciplane.agents", "deciplane.engine", "deciplane.methods",
                         "deciplane.trainers", "deciplane.adapt", "deciplane.evaluation",
                         "deciplane.cli"),
    "deciplane.agents": ("deciplane.engine", "deciplane.methods", "deciplane.trainers",
                         "deciplane.adapt", "deciplane.evaluation", "deciplane.cli"),
    "deciplane.engine": ("deciplane.methods", "deciplane.trainers", "deciplane.adapt",
                         "deciplane.evaluation", "deciplane.cli"),
    "deciplane.trainers": ("deciplane.adapt", "deciplane.evaluation", "deciplane.cli"),
    "deciplane.adapt": ("deciplane.trainers", "deciplane.evaluation", "deciplane.cli"),
    "deciplane.methods": ("deciplane.evaluation", "deciplane.cli"),
    "deciplane.evaluation": ("deciplane.cli",),
}

BASE_MODULES = ("deciplane.errors", "deciplane.utils", "deciplane.types", "deciplane._moved",
                "deciplane.options",
                "deciplane.ray_cluster", "deciplane.provenance", "deciplane.stats")
"""Top-level modules every layer may use; they import no sub-package."""


def test_base_modules_import_no_sub_package():
    subs = {f"deciplane.{p.name}" for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    bad = [f"{name} imports {mod}" for name in BASE_MODULES
           for _, mod in imports_of(ALL_MODULES[name]) if any(_within(mod, s) for s in subs)]
    assert not bad, "\n".join(bad)


REGISTRY = "deciplane.methods"
"""The method registry: the package's ``__init__``; its other modules are the methods."""


def test_the_registry_imports_only_stdlib_and_errors():
    """Reading the registry imports nothing heavy, and the layers below the methods can
    use it: it names every method's classes as ``"module:attr"`` strings."""
    bad = [f"{REGISTRY}:{line} imports {mod}" for line, mod in imports_of(ALL_MODULES[REGISTRY])
           if mod != "deciplane.errors" and _top(mod) not in sys.stdlib_module_names]
    assert not bad, "\n".join(bad)


def test_trainers_and_adapt_import_the_registry_never_a_method():
    """trainers/ and adapt/ hold what the methods share and sit below them: they import
    the registry (``deciplane.methods``) and no method's module, however it is named
    (``from deciplane.methods import ttrl`` included) or imported lazily."""
    bad = [f"{name} imports {mod}" for name, path in ALL_MODULES.items()
           if _within(name, "deciplane.trainers") or _within(name, "deciplane.adapt")
           for mod in _imported_modules(path) if _within(mod, REGISTRY) and mod != REGISTRY]
    assert not bad, "\n".join(bad)


def test_benchmarks_and_envs_share_two_modules():
    """The envs load their data from the benchmark registry (``benchmarks.data``); the
    benchmarks score with the envs' math verifier (``envs.math.verify``). Nothing else
    crosses between the two packages (so no module circle, tested below), except that the
    ``deciplane.envs`` package itself offers ``load_benchmark``, ``list_benchmarks`` and
    ``HeldOutScorer`` (its lazy names: ``from deciplane.envs import load_benchmark``)."""
    facade = {("deciplane.envs", "deciplane.benchmarks"),
              ("deciplane.envs", "deciplane.benchmarks.scorer")}
    crossing = {(name, mod) for name, path in ALL_MODULES.items()
                for _, mod in imports_of(path)
                if (_within(name, "deciplane.envs") and _within(mod, "deciplane.benchmarks"))
                or (_within(name, "deciplane.benchmarks") and _within(mod, "deciplane.envs"))
                } - facade
    targets = {mod for _, mod in crossing}
    assert targets <= {"deciplane.benchmarks.data", "deciplane.envs.math.verify"}, crossing


def _within(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def _resolve(mod: str) -> str | None:
    """The deciplane module an import names: the module itself, or for ``from pkg import
    name`` the package (names that are submodules appear as ``pkg.name``)."""
    while mod:
        if mod in ALL_MODULES:
            return mod
        mod = mod.rpartition(".")[0]
    return None


def _imported_modules(path: Path) -> set[str]:
    """Every deciplane module a file imports anywhere: ``import a.b`` -> ``a.b``; ``from a
    import b`` -> ``a.b`` when that is a module, else ``a``."""
    found = set()
    names: dict[int, list[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            names.setdefault(node.lineno, []).extend(a.name for a in node.names)
    for line, mod in imports_of(path):
        if not mod.startswith("deciplane"):
            continue
        subs = [f"{mod}.{n}" for n in names.get(line, []) if f"{mod}.{n}" in ALL_MODULES]
        if subs:
            found.update(subs)
        else:
            target = _resolve(mod)
            if target is not None:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the deciplane modules it imports anywhere (functions included)."""
    return {name: _imported_modules(path) - {name} for name, path in ALL_MODULES.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


SHIM_EDGES = {
    # deprecation shims of 0.1 API kept for one release (remove with them):
    # Policy.load(path) -> deciplane.agents.loading.load_saved_policy
    ("deciplane.agents.policy", "deciplane.agents.loading"),
}


def test_no_import_circle_anywhere():
    graph = import_graph()
    for a, b in SHIM_EDGES:
        graph[a].discard(b)
    cycles = import_cycles(graph)
    assert not cycles, "import circles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_imports_only_below_it(layer):
    bad = []
    for name, path in ALL_MODULES.items():
        if not _within(name, layer):
            continue
        for line, mod in imports_of(path):
            for above in LAYERS[layer]:
                if _within(mod, above):
                    bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {mod}")
    assert not bad, f"{layer} must not import {', '.join(LAYERS[layer])}:\n" + "\n".join(bad)


def test_cycle_finder_sees_a_circle_through_a_lazy_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
