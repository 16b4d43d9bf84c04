"""Old module paths of version 0.1, kept importable for one release.

``import deciplane.envs.textworld_env`` (a path users' scripts and pickles may hold) still
works: it imports the new module, registers it under the old name too and warns with a
``DeprecationWarning`` naming the new path. CHANGELOG.md lists every move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED: dict[str, str] = {
    # envs: one sub-package per family
    "deciplane.envs.text_space": "deciplane.envs.spaces",
    "deciplane.envs.textworld_env": "deciplane.envs.textworld.env",
    "deciplane.envs.textworld_games": "deciplane.envs.textworld.games",
    "deciplane.envs.math_env": "deciplane.envs.math.env",
    "deciplane.envs.math_verify_safe": "deciplane.envs.math.verify",
    "deciplane.envs.answers": "deciplane.envs.math.answers",
    "deciplane.envs.arith": "deciplane.envs.benchmarks.arith",
    "deciplane.envs.scorer": "deciplane.envs.benchmarks.scorer",
    "deciplane.envs.codeopt_env": "deciplane.envs.codeopt.env",
    # the menu envs' shared code: one package (the old menu_env held both the text helpers
    # and the base env; the package exports both)
    "deciplane.envs.menus": "deciplane.envs.menu.menu",
    "deciplane.envs.menu_env": "deciplane.envs.menu",
    # command-line modules: all under deciplane.cli
    "deciplane.envs.codeopt.commands": "deciplane.cli.codeopt",
    "deciplane.trainers.commands": "deciplane.cli.train",
    "deciplane.adapt.commands": "deciplane.cli.adapt",
    "deciplane.trainers.eval_commands": "deciplane.cli.evaluate",
    # evaluation and reports
    "deciplane.trainers.evaluate": "deciplane.evaluation.evaluate",
    "deciplane.trainers.run_eval": "deciplane.evaluation.run_eval",
    "deciplane.trainers.report": "deciplane.evaluation.report",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module name to its new module (same object, not a copy)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):  # noqa: ANN001
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new} in deciplane 0.2; import {new} instead "
                      "(the old path goes away in the next release)",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass  # the new module is already executed


def install() -> None:
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
