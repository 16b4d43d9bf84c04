"""The one deprecation table (``deciplane._moved``): old module paths still import (the same
module object; a split module serves each old name from its new module), old names still
resolve, each with a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

import pytest

from deciplane._moved import MOVED, RENAMED


def _import_warning(old: str):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    return module, [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old", sorted(k for k, v in MOVED.items() if isinstance(v, str)))
def test_old_path_imports_the_new_module_and_warns(old):
    module, messages = _import_warning(old)
    assert module is importlib.import_module(MOVED[old])
    assert any(MOVED[old] in m for m in messages), messages
    assert module.__spec__.name == MOVED[old]      # the new module keeps its own spec


@pytest.mark.parametrize("old", sorted(k for k, v in MOVED.items() if isinstance(v, tuple)))
def test_split_module_serves_every_public_name_of_its_parts(old):
    module, messages = _import_warning(old)
    assert messages and all(p in messages[0] for p in MOVED[old])
    parts = [importlib.import_module(p) for p in MOVED[old]]
    for mod in parts:
        for name in getattr(mod, "__all__", ()):
            first = next(p for p in parts if name in vars(p) or name in getattr(p, "__all__", ()))
            assert getattr(module, name) is getattr(first, name), (old, name)
    with pytest.raises(AttributeError, match="moved to"):
        module.no_such_name  # noqa: B018


def test_a_package_entry_covers_its_submodules():
    module, messages = _import_warning("deciplane.envs.sandbox.warm")
    assert module is importlib.import_module("deciplane.sandbox.warm")
    assert any("deciplane.sandbox.warm" in m for m in messages)
    # an own entry wins over its package's
    assert _import_warning("deciplane.envs.sandbox.doctor")[0] is \
        importlib.import_module("deciplane.cli.doctor_report")
    # 0.1's classes of the old sandbox module load from where they are now (pickles)
    old = importlib.import_module("deciplane.envs.sandbox._common")
    from deciplane.sandbox.results import SandboxResult
    assert old.SandboxResult is SandboxResult


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_renamed_name_resolves_with_a_warning(old):
    module, _, name = old.rpartition(".")
    new_module, _, new_name = RENAMED[old].rpartition(".")
    try:
        importlib.import_module(new_module)
    except ImportError as e:      # a new home behind an optional extra (deciplane[interop])
        pytest.skip(str(e))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = getattr(importlib.import_module(module), name)
    assert got is getattr(importlib.import_module(new_module), new_name)
    assert any(issubclass(w.category, DeprecationWarning) and old in str(w.message)
               for w in caught)


def test_new_paths_are_real_modules():
    for new in MOVED.values():
        for path in (new,) if isinstance(new, str) else new:
            assert importlib.util.find_spec(path) is not None, path
    assert not set(MOVED) & {v for v in MOVED.values() if isinstance(v, str)}


def test_no_shim_modules_left():
    """Old paths live in the table only: no module of the package merely re-exports."""
    for old in MOVED:
        sys.modules.pop(old, None)
        spec = importlib.util.find_spec(old)
        assert spec is not None and spec.origin is None, f"{old} is still a file"
