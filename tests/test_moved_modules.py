"""Old module paths of 0.1 still import (the same module object), with a DeprecationWarning
naming the new path."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from deciplane._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_imports_the_new_module_and_warns(old):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert any(issubclass(w.category, DeprecationWarning) and MOVED[old] in str(w.message)
               for w in caught)


def test_new_paths_are_real_modules():
    for new in MOVED.values():
        assert importlib.util.find_spec(new) is not None, new
    assert not set(MOVED) & set(MOVED.values())
