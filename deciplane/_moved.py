"""The one deprecation table: old module paths and old names keep working for one release.

``import deciplane.envs.textworld_env`` (a path users' scripts and pickles may hold) still
works: it imports the new module, registers it under the old name too and warns with a
``DeprecationWarning`` naming the new path. An entry for a package covers its submodules
(``deciplane.envs.sandbox.warm`` -> ``deciplane.sandbox.warm``). An old module that was
split (several new modules) becomes a small module that serves each old name from the new
module that has it. Renamed classes and functions (:data:`RENAMED`) are served by the old
module's ``__getattr__`` (:func:`renamed_names`), with the same warning. CHANGELOG.md lists
every move.

This module imports only the standard library (every layer may use it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any, Callable

MOVED: dict[str, str | tuple[str, ...]] = {
    # 0.2 -- envs: one sub-package per family
    "deciplane.envs.text_space": "deciplane.envs.spaces",
    "deciplane.envs.textworld_env": "deciplane.envs.textworld.env",
    "deciplane.envs.textworld_games": "deciplane.envs.textworld.games",
    "deciplane.envs.math_env": "deciplane.envs.math.env",
    "deciplane.envs.math_verify_safe": "deciplane.envs.math.verify",
    "deciplane.envs.answers": "deciplane.envs.math.answers",
    "deciplane.envs.arith": "deciplane.benchmarks.arith",
    "deciplane.envs.scorer": "deciplane.benchmarks.scorer",
    "deciplane.envs.codeopt_env": "deciplane.envs.codeopt.env",
    # 0.2 -- command-line modules: all under deciplane.cli
    "deciplane.envs.codeopt.commands": "deciplane.cli.codeopt",
    "deciplane.trainers.commands": "deciplane.cli.train",
    "deciplane.adapt.commands": "deciplane.cli.adapt",
    "deciplane.trainers.eval_commands": "deciplane.cli.evaluate",
    # 0.2 -- evaluation and reports
    "deciplane.trainers.evaluate": "deciplane.evaluation.evaluate",
    "deciplane.trainers.run_eval": "deciplane.evaluation.run_eval",
    "deciplane.trainers.report": "deciplane.evaluation.report",
    # 0.2 -- split modules
    "deciplane.trainers.algorithms": (
        "deciplane.methods.rlid_ppo", "deciplane.methods.text_ppo",
        "deciplane.methods.math_grpo", "deciplane.trainers.run", "deciplane.trainers.algorithm",
        "deciplane.trainers.warm_start", "deciplane.objectives.distill"),
    "deciplane.trainers.single_turn": (
        "deciplane.engine.budget", "deciplane.engine.generation", "deciplane.engine.grpo",
        "deciplane.engine.logprobs", "deciplane.engine.optim",
        "deciplane.objectives.policy_loss"),
    # 0.3 -- infrastructure out of envs/
    "deciplane.envs.sandbox._common": (
        "deciplane.sandbox.limits", "deciplane.sandbox.results", "deciplane.sandbox.host",
        "deciplane.sandbox.scratch", "deciplane.sandbox.cgroups", "deciplane.sandbox.execute"),
    "deciplane.envs.sandbox.doctor": "deciplane.cli.doctor_report",
    "deciplane.envs.sandbox": "deciplane.sandbox",
    "deciplane.envs.benchmarks": "deciplane.benchmarks",
    "deciplane.envs.ray_vector": "deciplane.vector.ray_env",
    "deciplane.envs._ray": "deciplane.ray_cluster",
    # 0.3 -- names that explain themselves
    "deciplane.agents.evaluation": "deciplane.evaluation.agents",
    "deciplane.trainers.envs": "deciplane.trainers.env_suite",
    "deciplane.trainers.planner": "deciplane.engine.plan",
    # 0.3 -- the run directory's logger and checkpoints, shared by trainers and adapters
    "deciplane.trainers.logger": "deciplane.engine.logger",
    "deciplane.trainers.checkpoint": "deciplane.engine.checkpoint",
    # 0.3 -- the run's services in the engine, one for trainers and adapters (issue 49)
    "deciplane.trainers.time_budget": "deciplane.engine.plan",
    "deciplane.trainers.baseline_cache": "deciplane.engine.baselines",
    # 0.3 -- the menu envs' shared code in one package (menu_env held the text helpers and
    # the base env)
    "deciplane.envs.menus": "deciplane.envs.menu.menu",
    "deciplane.envs.menu_env": ("deciplane.envs.menu.text", "deciplane.envs.menu.base"),
    # 0.3 -- a method is one module of deciplane.methods, its config class inside (issue 49)
    **{f"deciplane.trainers.{m}": f"deciplane.methods.{m}"
       for m in ("rlid_ppo", "text_ppo", "math_grpo")},
    **{f"deciplane.adapt.{m}": f"deciplane.methods.{m}"
       for m in ("ttrl", "ttpo", "tasco", "probe_erpo")},
}
"""old module path -> new module path (or the new modules an old one was split into)."""

RENAMED: dict[str, str] = {
    # 0.2 -- loss configs are *LossConfig (the trainer's or adapter's *Config never shares a name)
    **{f"deciplane.objectives{sub}.{old}": f"deciplane.objectives{sub}.{old[:-6]}LossConfig"
       for sub, old in [("", "TLMDREConfig"), ("", "RLiDConfig"), ("", "CORDConfig"),
                        ("", "TASCOConfig"), ("", "ERPOConfig"), ("", "TTPOConfig"),
                        (".tlm_dre", "TLMDREConfig"), (".rlid", "RLiDConfig"),
                        (".cord", "CORDConfig"), (".tasco", "TASCOConfig"),
                        (".erpo", "ERPOConfig"), (".ttpo", "TTPOConfig")]},
    # 0.2 -- the run helpers left the trainer module
    **{f"deciplane.trainers.trainer.{n}": f"deciplane.trainers.run.{n}"
       for n in ("build_policy", "build_algorithm", "lora_targets", "run_training",
                 "RESUMABLE_CHANGES")},
    # 0.3 -- the RLiD-PPO trainer is named after its method (its module moved since: MOVED)
    "deciplane.methods.rlid_ppo.MenuPPO": "deciplane.methods.rlid_ppo.RLiDPPO",
    # 0.3 -- each method's config class lives in its module of deciplane.methods (issue 49)
    **{f"deciplane.trainers.config.{n}": f"deciplane.methods.{m}.{n}"
       for n, m in [("RLiDPPOConfig", "rlid_ppo"), ("PromptCacheConfig", "rlid_ppo"),
                    ("TextPPOConfig", "text_ppo"), ("TLMDREConfig", "text_ppo"),
                    ("MathGRPOConfig", "math_grpo")]},
    **{f"deciplane.trainers.{n}": f"deciplane.methods.{m}.{n}"
       for n, m in [("RLiDPPOConfig", "rlid_ppo"), ("TextPPOConfig", "text_ppo"),
                    ("MathGRPOConfig", "math_grpo")]},
    **{f"deciplane.adapt.{n}": f"deciplane.methods.{m}.{n}"
       for m, classes in [("ttrl", ("TTRL", "TTRLConfig")), ("ttpo", ("TTPO", "TTPOConfig")),
                          ("tasco", ("TASCO", "TASCOConfig")),
                          ("probe_erpo", ("ProbeERPO", "ProbeERPOConfig"))]
       for n in classes},
    # 0.3 -- the runner's equal-compute helpers left TASCO's module (the runner sits below
    # the methods; issue 49)
    "deciplane.methods.tasco.forward_token_equivalents":
        "deciplane.engine.budget.forward_token_equivalents",
    **{f"deciplane.methods.tasco.{n}": f"deciplane.adapt.equal_compute.{n}"
       for n in ("best_of_n_index", "equal_compute_baselines")},
    # 0.3 -- gymnasium wrappers live with the envs (issue 49)
    **{f"deciplane.trainers.env_suite.{n}": f"deciplane.envs.wrappers.{n}"
       for n in ("GameSlotEnv", "DropNoneInfo", "task_slots")},
    # 0.3 -- a package re-exports only its own layer and those below it (issue 49)
    **{f"deciplane.agents.{n}": f"deciplane.evaluation.agents.{n}"
       for n in ("MenuEvalAgent", "TextEvalAgent", "EVAL_AGENT_FACTORIES")},
    "deciplane.trainers.write_report": "deciplane.evaluation.report.write_report",
    "deciplane.envs.from_openenv": "deciplane.interop.openenv.from_openenv",
    # 0.2 -- deprecated without a replacement
    "deciplane.types.GroupBatch": "deciplane.types._GroupBatch",
    "deciplane.GroupBatch": "deciplane.types._GroupBatch",
}
"""old ``module.name`` -> new ``module.name`` (served by the old module's ``__getattr__``)."""

NOTES: dict[str, str] = {
    "deciplane.types.GroupBatch": "deciplane never built it; the trainers' typed batches are "
                                  "in deciplane.trainers.algorithm",
    "deciplane.GroupBatch": "deciplane never built it; the trainers' typed batches are in "
                            "deciplane.trainers.algorithm",
}
"""Why an old name has no real successor (said in its warning instead of "import X")."""


def _warn(old: str, new: str, stacklevel: int = 3) -> None:
    advice = NOTES.get(old) or f"moved to {new}; import {new} instead"
    warnings.warn(f"{old} is deprecated: {advice} (the old path goes away in the next release)",
                  DeprecationWarning, stacklevel=stacklevel)


def _target(fullname: str) -> str | tuple[str, ...] | None:
    """The new module(s) of an old module name: its own entry, else its package's."""
    if fullname in MOVED:
        return MOVED[fullname]
    for old, new in MOVED.items():
        if isinstance(new, str) and fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


def _split_module(old: str, parts: tuple[str, ...]) -> types.ModuleType:
    """A stand-in for a module that was split: each name comes from the part that has it."""
    module = types.ModuleType(old, f"Moved: the names of {old} are in {', '.join(parts)}.")

    def __getattr__(name: str) -> Any:
        for part in parts:
            mod = importlib.import_module(part)
            if name in vars(mod) or name in getattr(mod, "__all__", ()):
                return getattr(mod, name)
        for part in parts:         # a renamed name served by its module's __getattr__
            if f"{part}.{name}" in RENAMED:
                return getattr(importlib.import_module(part), name)
        raise AttributeError(f"module {old!r} has no attribute {name!r} (its names moved to "
                             f"{', '.join(parts)})")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__path__ = []              # so that `import old.sub` reaches the finder
    return module


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module name to its new module (same object, not a copy)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        if _target(fullname) is not None:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def __init__(self) -> None:
        self._specs: dict[int, Any] = {}

    def create_module(self, spec):  # noqa: ANN001
        new = _target(spec.name)
        label = new if isinstance(new, str) else " / ".join(new)
        _warn(spec.name, label)
        if isinstance(new, tuple):
            return _split_module(spec.name, new)
        module = importlib.import_module(new)
        self._specs[id(module)] = module.__spec__   # the import system overwrites it next
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        # the new module is already executed; give it back its own spec (reload, runpy)
        spec = self._specs.pop(id(module), None)
        if spec is not None:
            module.__spec__ = spec


def renamed_names(module: str, fallback: Callable[[str], Any] | None = None
                  ) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module with entries in :data:`RENAMED`: an old name warns and
    returns the new object; other names go to ``fallback`` (e.g. the module's lazy exports)."""

    def __getattr__(name: str) -> Any:
        new = RENAMED.get(f"{module}.{name}")
        if new is not None:
            _warn(f"{module}.{name}", new)
            new_module, _, new_name = new.rpartition(".")
            return getattr(importlib.import_module(new_module), new_name)
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def install() -> None:
    # first on the path: a submodule of a moved package must resolve to the new module,
    # not load a second copy of the file through the package's __path__
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
